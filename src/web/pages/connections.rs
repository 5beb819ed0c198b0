//! The operators' connections (docs/desired-state.md): the list with its add form, and a
//! connection's page with its recipients and its acts (edit, rotate the secret, Retry, Send a
//! test, Check now, delete). A form that fails comes back with its messages and what was typed
//! (in place, for HTMX); an act that succeeds sends the operator back to the page with a notice
//! saying what happens next.

use std::time::Duration;

use actix_web::{FromRequest, HttpRequest, HttpResponse, dev::Payload, http::StatusCode, web};
use chrono::{DateTime, Utc};
use futures_util::future::LocalBoxFuture;
use serde::Deserialize;
use validator::Validate;
use views::{
    FormState,
    paths::{self, fill},
};

use crate::{
    db::Db,
    ids::ConnectionId,
    services::{
        ServiceError,
        desired_state::connections::{
            self, ConnectionKeys, ConnectionName, ConnectionPage, ConnectionSummary, NewConnection, Overlap, PushUrl,
        },
    },
    store::desired_state::{ConnectionFigures, ConnectionRow, RecordLine},
    web::{
        AppState,
        call::{Call, OperatorCall},
        errors::AppError,
        forms::{Form, after_post, query_or_default, run_parsed},
        identity::csrf_token,
        input::{self, Field, FromField, read},
        refusals::{self, Words},
        render,
    },
};

const WORDS: Words = Words { done: "saved", busy: None };
const DELETE_WORDS: Words = Words { done: "deleted", busy: None };

/// The add and edit form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionFields {
    #[validate(custom(function = read))]
    name: Field<ConnectionName>,
    #[validate(custom(function = read))]
    url: Field<PushUrl>,
    /// Resource keys separated by commas or spaces.
    #[validate(custom(function = read))]
    keys: Field<ConnectionKeys>,
    /// A ticked checkbox sends "on"; an unticked one nothing.
    #[validate(custom(function = read))]
    read_back: Field<ReadBack>,
}

impl ConnectionFields {
    /// The command, or every problem at once: the form's own and, when its keys read but
    /// something else does not, the keys the catalog has not got (the service checks those
    /// itself when the rest reads).
    async fn command(&self, db: &Db) -> Result<NewConnection, ServiceError> {
        let mut problems = input::problems(self);
        let parsed = match (self.name.ok(), self.url.ok(), self.keys.ok(), self.read_back.ok()) {
            (Some(name), Some(url), Some(keys), Some(read_back)) => {
                Some(NewConnection { name: name.clone(), url: url.clone(), keys: keys.clone(), read_back: read_back.0 })
            }
            _ => None,
        };
        if let (None, Some(keys)) = (&parsed, self.keys.ok())
            && let Some(why) = connections::unknown_keys(db, keys).await?
        {
            problems.push("keys", why);
        }
        problems.or(parsed)
    }
}

impl FromField for ConnectionName {
    fn from_field(raw: &str) -> Result<Self, String> {
        ConnectionName::parse(raw)
    }
}

impl FromField for PushUrl {
    fn from_field(raw: &str) -> Result<Self, String> {
        PushUrl::parse(raw)
    }
}

impl FromField for ConnectionKeys {
    fn from_field(raw: &str) -> Result<Self, String> {
        ConnectionKeys::parse(raw)
    }
}

/// The read-back checkbox: "on" (or "true") ticked; blank, "off" or not sent, not. Anything
/// else is refused, as a page the console drew never sends it.
#[derive(Debug, Clone, Copy)]
pub struct ReadBack(bool);

impl FromField for ReadBack {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "" | "off" => Ok(ReadBack(false)),
            "on" | "true" => Ok(ReadBack(true)),
            _ => Err("Read-back is on or off.".into()),
        }
    }
}

/// The rotate form: how long the previous secret keeps signing.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct RotateForm {
    #[validate(custom(function = read))]
    overlap_hours: Field<Overlap>,
}

impl TryFrom<RotateForm> for Overlap {
    type Error = ServiceError;

    fn try_from(f: RotateForm) -> Result<Overlap, ServiceError> {
        input::problems(&f).or(f.overlap_hours.into_ok())
    }
}

/// A rotation's overlap, as its form's field reads it.
impl FromField for Overlap {
    fn from_field(raw: &str) -> Result<Self, String> {
        Overlap::parse(raw)
    }
}

/// The confirmation checkbox's one value.
#[derive(Debug, Clone, Copy)]
pub struct Confirmed;

impl FromField for Confirmed {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "yes" => Ok(Confirmed),
            _ => Err("Tick the box to confirm: deleting stops every push to this system.".into()),
        }
    }
}

/// The delete form: the confirmation checkbox (`confirm=yes`).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteForm {
    #[validate(custom(function = read))]
    confirm: Field<Confirmed>,
}

/// A button's form: the CSRF token alone.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct NoFields {}

/// The list's query: `deleted=1` after a deletion.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ListQuery {
    deleted: Option<Deleted>,
}

/// The note a deletion leaves in the list's address.
#[derive(Deserialize, Clone, Copy)]
pub enum Deleted {
    #[serde(rename = "1")]
    Yes,
}

/// Which recipients a connection's page lists (blank: all).
#[derive(Debug, Clone, Copy)]
pub enum RecipientFilter {
    Behind,
    Failing,
    Drift,
}

impl RecipientFilter {
    fn as_str(self) -> &'static str {
        match self {
            RecipientFilter::Behind => "behind",
            RecipientFilter::Failing => "failing",
            RecipientFilter::Drift => "drift",
        }
    }
}

impl FromField for RecipientFilter {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "behind" => Ok(RecipientFilter::Behind),
            "failing" => Ok(RecipientFilter::Failing),
            "drift" => Ok(RecipientFilter::Drift),
            _ => Err("“{value}” is not a filter: ask for behind, failing or drift.".into()),
        }
    }
}

/// The recipient a page of them starts after: a record's id, 0 or more.
#[derive(Debug, Clone, Copy)]
pub struct RecipientCursor(i64);

impl FromField for RecipientCursor {
    fn from_field(raw: &str) -> Result<Self, String> {
        raw.trim()
            .parse::<i64>()
            .ok()
            .filter(|a| *a >= 0)
            .map(RecipientCursor)
            .ok_or_else(|| "“{value}” is not a recipient id.".into())
    }
}

/// What an act that just succeeded did (`?done=`), for the page to say; see `done_notice`.
#[derive(Debug, Clone, Copy)]
pub enum Done {
    Added,
    Saved,
    Retry,
    Test,
    Check,
    Rotate,
}

impl FromField for Done {
    fn from_field(raw: &str) -> Result<Self, String> {
        Ok(match raw {
            "added" => Done::Added,
            "saved" => Done::Saved,
            "retry" => Done::Retry,
            "test" => Done::Test,
            "check" => Done::Check,
            "rotate" => Done::Rotate,
            _ => return Err("not a note of this page".into()),
        })
    }
}

/// A connection page's query: the recipients' filter and place, and what was just done (a note
/// the page does not know is left out; a bad filter or place is a 400).
#[derive(Deserialize, Default, Validate)]
#[serde(default)]
pub struct PageQuery {
    #[validate(custom(function = read))]
    filter: Field<Option<RecipientFilter>>,
    #[validate(custom(function = read))]
    after: Field<Option<RecipientCursor>>,
    done: Field<Option<Done>>,
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A wait in words: "3 s", "2 min", "5 h", "2 d".
fn duration_words(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..172_800 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

fn figures(f: &ConnectionFigures) -> views::ConnectionFiguresView {
    views::ConnectionFiguresView {
        recipients: f.recipients,
        behind: f.behind,
        failing: f.failing,
        drift: f.drift,
        lag: connections::lag(f.oldest_behind).map(duration_words),
    }
}

fn last_test(c: &ConnectionRow) -> Option<views::TestResultView> {
    let at = c.last_test_at?;
    Some(views::TestResultView {
        at: when(at),
        ok: c.last_test_ok.unwrap_or(false),
        answer: c.last_test_answer.clone().unwrap_or_default(),
    })
}

fn list_row(s: &ConnectionSummary) -> views::ConnectionListRow {
    let c = &s.connection;
    views::ConnectionListRow {
        id: c.connection_id.0,
        name: c.name.clone(),
        url: c.url.clone(),
        keys: c.resource_keys.clone(),
        read_back: c.read_back,
        figures: figures(&s.figures),
        last_test: last_test(c),
    }
}

fn recipient_row(r: &RecordLine, now: DateTime<Utc>) -> views::RecipientRow {
    views::RecipientRow {
        organization_id: r.recipient_id,
        organization: r.organization.clone(),
        generation: r.generation,
        dispatched: r.dispatched_generation,
        confirmed: r.confirmed_generation,
        lag: (r.confirmed_generation < r.generation)
            .then(|| duration_words((now - r.changed_at).to_std().unwrap_or_default())),
        failures: r.failures,
        last_answer: r.last_answer.clone(),
        last_answer_at: r.last_answer_at.map(when),
        drift: r.drift,
        observed_generation: r.observed_generation,
    }
}

/// The edit form as the connection is now.
fn current_values(c: &ConnectionRow) -> FormState {
    FormState {
        values: vec![
            ("name".into(), c.name.clone()),
            ("url".into(), c.url.clone()),
            ("keys".into(), c.resource_keys.join(", ")),
            ("read_back".into(), if c.read_back { "on".into() } else { String::new() }),
        ],
        ..FormState::default()
    }
}

// The list -----------------------------------------------------------------------------------------

async fn list_view(req: &HttpRequest, state: &AppState, form: FormState) -> Result<views::ConnectionsView, AppError> {
    let (list, pending) = connections::connections_overview(&state.db).await?;
    let keys = connections::resource_keys(&state.db).await?;
    let q = query_or_default::<ListQuery>(req);
    Ok(views::ConnectionsView {
        csrf: csrf_token(req),
        connections: list.iter().map(list_row).collect(),
        pending_notices: pending,
        keys,
        form,
        notice: q.deleted.map(|_| "The connection was deleted: nothing more is sent to it.".to_string()),
    })
}

#[tracing::instrument(name = "Page: the connections", skip_all)]
pub async fn list(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let v = list_view(&req, &state, FormState::default()).await?;
    Ok(render::ok(&req, "Connections", views::connection_list(&v)))
}

#[tracing::instrument(name = "Page: add a connection", skip_all)]
pub async fn create(
    Call { req, state, .. }: OperatorCall,
    form: Form<ConnectionFields>,
) -> Result<HttpResponse, AppError> {
    let create = async |c: &NewConnection| connections::create_connection(&state.db, c).await;
    let created = run_parsed(&state.db, "Add a connection", form.command(&state.db).await, create).await;
    refusals::posted(&req, created.map(|id| page_saying(id.0, "added")), form.values(), WORDS, async |r| {
        let v = list_view(&req, &state, r.form).await?;
        let form = || views::connection_add_form(&v.csrf, &v.keys, &v.form);
        Ok(refusals::answer(&req, r.status, "Connections", form, || views::connection_list(&v)))
    })
    .await
}

// A connection's page ------------------------------------------------------------------------------

/// What the page shows besides the connection: the forms' states, a notice, a refusal, and
/// which recipients.
#[derive(Default)]
struct Shown {
    edit: Option<FormState>,
    rotate: FormState,
    delete: FormState,
    refusal: Option<String>,
    filter: String,
    after: i64,
    done: Option<Done>,
}

impl Shown {
    /// From the page's query: a bad `after` is a 400 that says what to ask for.
    fn from_query(req: &HttpRequest) -> Result<Shown, AppError> {
        let q = web::Query::<PageQuery>::from_query(req.query_string())
            .map_err(|e| AppError::BadRequest(format!("The address is not valid: {e}.")))?
            .into_inner();
        input::refuse_bad_query(&q)?;
        let filter = q.filter.ok().copied().flatten().map_or("", RecipientFilter::as_str).to_string();
        let after = q.after.ok().copied().flatten().map_or(0, |a| a.0);
        let done = q.done.ok().copied().flatten();
        Ok(Shown { filter, after, done, ..Shown::default() })
    }
}

/// The notice for what was just done (`?done=…`), in words.
fn done_notice(done: Done, c: &ConnectionRow, now: DateTime<Utc>) -> String {
    match done {
        Done::Added => {
            "The connection was added: the console computes what each organization should hold and pushes it \
                    within a few seconds."
                .into()
        }
        Done::Saved => {
            "The connection was saved. New keys are computed for every organization and pushed where they change \
                    what it holds; a new URL receives every organization again."
                .into()
        }
        Done::Retry => "Retry asked: failing recipients are pushed again within a few seconds.".into(),
        Done::Test => "A test is on its way; its answer shows below when it comes.".into(),
        Done::Check => {
            "Read-back asked: the system is asked what it holds for each confirmed recipient; any drift shows \
                    below when the run ends."
                .into()
        }
        Done::Rotate => match c.previous_secret_until {
            Some(until) if until > now => {
                format!("The secret was rotated; the previous one signs too until {}.", when(until))
            }
            _ => "The secret was rotated; the previous one no longer signs.".into(),
        },
    }
}

async fn page_view(
    req: &HttpRequest,
    state: &AppState,
    id: ConnectionId,
    shown: Shown,
) -> Result<views::ConnectionView, AppError> {
    let ConnectionPage { summary, records, next_after, keys } =
        connections::connection_page(&state.db, id, &shown.filter, shown.after).await?;
    let c = &summary.connection;
    let now = Utc::now();
    let previous_secret = match (&c.previous_secret, c.previous_secret_until) {
        (Some(secret), Some(until)) if until > now => {
            Some(views::PreviousSecret { secret: secret.clone(), until: when(until) })
        }
        _ => None,
    };
    let test_pending = c.test_requested_at.is_some_and(|asked| c.last_test_at.is_none_or(|answered| answered < asked));
    Ok(views::ConnectionView {
        csrf: csrf_token(req),
        id: id.0,
        name: c.name.clone(),
        url: c.url.clone(),
        keys: c.resource_keys.clone(),
        read_back: c.read_back,
        created: when(c.created_at),
        secret: c.secret.clone(),
        previous_secret,
        figures: figures(&summary.figures),
        last_test: last_test(c),
        test_pending,
        last_read_back: c.last_read_back_at.map(|at| (when(at), c.last_read_back_answer.clone().unwrap_or_default())),
        filter: shown.filter,
        after: shown.after,
        recipients: records.iter().map(|r| recipient_row(r, now)).collect(),
        next_after,
        all_keys: keys,
        notice: shown.done.map(|d| done_notice(d, c, now)),
        refusal: shown.refusal,
        edit_form: shown.edit.unwrap_or_else(|| current_values(c)),
        rotate_form: shown.rotate,
        delete_form: shown.delete,
    })
}

fn title(v: &views::ConnectionView) -> String {
    format!("Connection: {}", v.name)
}

#[tracing::instrument(name = "Page: a connection", skip_all, fields(connection_id = %*id))]
pub async fn detail(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ConnectionId>,
) -> Result<HttpResponse, AppError> {
    let shown = Shown::from_query(&req)?;
    let v = page_view(&req, &state, *id, shown).await?;
    Ok(render::ok(&req, &title(&v), views::connection_page(&v)))
}

/// The connection's page after a successful act, saying what was done.
fn page_saying(id: i64, done: &str) -> String {
    format!("{}?done={done}", fill(paths::CONNECTION, &[&id]))
}

/// Which of the page's forms was sent.
#[derive(Clone, Copy)]
enum PageForm {
    Edit,
    Rotate,
    Delete,
}

/// A form of the page's answer: where its success goes (the page saying what was done, or the
/// list after a deletion); a refusal in place for HTMX, else the page with that form filled in.
async fn page_answer(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    which: PageForm,
    result: Result<(), ServiceError>,
    sent: Vec<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let (to, words) = match which {
        PageForm::Edit => (page_saying(id, "saved"), WORDS),
        PageForm::Rotate => (page_saying(id, "rotate"), WORDS),
        PageForm::Delete => (format!("{}?deleted=1", paths::CONNECTIONS), DELETE_WORDS),
    };
    refusals::posted(req, result.map(|()| to), sent, words, async |r| {
        let mut shown = Shown::default();
        match which {
            PageForm::Edit => shown.edit = Some(r.form),
            PageForm::Rotate => shown.rotate = r.form,
            PageForm::Delete => shown.delete = r.form,
        }
        let v = page_view(req, state, ConnectionId(id), shown).await?;
        let form = || match which {
            PageForm::Edit => views::connection_edit_form(&v.csrf, v.id, &v.all_keys, &v.edit_form),
            PageForm::Rotate => views::connection_rotate_form(&v.csrf, v.id, &v.rotate_form),
            PageForm::Delete => views::connection_delete_form(&v.csrf, v.id, &v.delete_form),
        };
        Ok(refusals::answer(req, r.status, &title(&v), form, || views::connection_page(&v)))
    })
    .await
}

#[tracing::instrument(name = "Page: edit a connection", skip_all, fields(connection_id = %*id))]
pub async fn edit(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ConnectionId>,
    form: Form<ConnectionFields>,
) -> Result<HttpResponse, AppError> {
    let update = async |c: &NewConnection| connections::update_connection(&state.db, *id, c).await;
    let saved = run_parsed(&state.db, "Edit a connection", form.command(&state.db).await, update).await;
    page_answer(&req, &state, id.0, PageForm::Edit, saved, form.values()).await
}

#[tracing::instrument(name = "Page: rotate a connection's secret", skip_all, fields(connection_id = %*id))]
pub async fn rotate(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ConnectionId>,
    form: Form<RotateForm>,
) -> Result<HttpResponse, AppError> {
    let values = form.values();
    let rotate = async |overlap: &Overlap| connections::rotate_secret(&state.db, *id, overlap.get()).await;
    let parsed = Overlap::try_from(form.into_inner());
    let rotated = run_parsed(&state.db, "Rotate a connection's secret", parsed, rotate).await;
    page_answer(&req, &state, id.0, PageForm::Rotate, rotated, values).await
}

#[tracing::instrument(name = "Page: delete a connection", skip_all, fields(connection_id = %*id))]
pub async fn delete(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ConnectionId>,
    form: Form<DeleteForm>,
) -> Result<HttpResponse, AppError> {
    let confirmed = input::problems(&*form).or(form.confirm.ok().copied());
    let delete = async |_: &Confirmed| connections::delete_connection(&state.db, *id).await;
    let deleted = run_parsed(&state.db, "Delete a connection", confirmed, delete).await;
    page_answer(&req, &state, id.0, PageForm::Delete, deleted, form.values()).await
}

/// A button on a connection's page (Retry, Send a test, Check now): the operator's request for one
/// connection, with a form that carries nothing but the CSRF token.
pub struct Button {
    req: HttpRequest,
    state: web::Data<AppState>,
    id: ConnectionId,
}

impl FromRequest for Button {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let parts = <(OperatorCall, web::Path<ConnectionId>, Form<NoFields>)>::from_request(req, payload);
        Box::pin(async move {
            let (Call { req, state, .. }, id, _form) = parts.await?;
            Ok(Button { req, state, id: *id })
        })
    }
}

impl Button {
    /// Back to the page saying what was done; a conflict (Check now without read-back) is the page
    /// again with the refusal above it (409); anything else the error page.
    async fn answer(self, done: &str, result: Result<(), ServiceError>) -> Result<HttpResponse, AppError> {
        match result {
            Ok(()) => Ok(after_post(&self.req, &page_saying(self.id.0, done))),
            Err(ServiceError::Refused(why)) => {
                let shown = Shown { refusal: Some(why), ..Shown::default() };
                let v = page_view(&self.req, &self.state, self.id, shown).await?;
                Ok(render::page(&self.req, StatusCode::CONFLICT, &title(&v), views::connection_page(&v)))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[tracing::instrument(name = "Page: retry a connection", skip_all, fields(connection_id = b.id.0))]
pub async fn retry(b: Button) -> Result<HttpResponse, AppError> {
    let result = connections::retry_connection(&b.state.db, b.id).await;
    b.answer("retry", result).await
}

#[tracing::instrument(name = "Page: send a test", skip_all, fields(connection_id = b.id.0))]
pub async fn test(b: Button) -> Result<HttpResponse, AppError> {
    let result = connections::send_test(&b.state.db, b.id).await;
    b.answer("test", result).await
}

#[tracing::instrument(name = "Page: read back now", skip_all, fields(connection_id = b.id.0))]
pub async fn check(b: Button) -> Result<HttpResponse, AppError> {
    let result = connections::check_now(&b.state.db, b.id).await;
    b.answer("check", result).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_said_in_its_largest_whole_unit() {
        let w = |s| duration_words(Duration::from_secs(s));
        assert_eq!(w(0), "0 s");
        assert_eq!(w(59), "59 s");
        assert_eq!(w(125), "2 min");
        assert_eq!(w(3 * 3600 + 5), "3 h");
        assert_eq!(w(3 * 86_400), "3 d");
    }
}
