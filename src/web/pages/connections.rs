//! The operators' connections (docs/desired-state.md): the list with its add form, and a
//! connection's page with its recipients and its acts (edit, rotate the secret, Retry, Send a
//! test, Check now, delete). A form that fails comes back with its messages and what was typed
//! (in place, for HTMX); an act that succeeds sends the operator back to the page with a notice
//! saying what happens next.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use views::{
    FormState,
    paths::{self, fill},
};

use crate::{
    db::retry::once_more_after_deadlock,
    ids::ConnectionId,
    services::{
        ServiceError,
        desired_state::connections::{self, ConnectionForm, ConnectionPage, ConnectionSummary},
    },
    store::desired_state::{ConnectionFigures, ConnectionRow, RecordLine},
    web::{
        AppState,
        errors::AppError,
        forms::{Form, after_post, query_or_default},
        identity::{Operator, csrf_token},
        refusals::{self, Refused, Words},
        render,
    },
};

const WORDS: Words = Words { done: "saved", busy: None };
const DELETE_WORDS: Words = Words { done: "deleted", busy: None };

/// The add and edit form.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionFields {
    name: String,
    url: String,
    /// Resource keys separated by commas or spaces.
    keys: String,
    /// A ticked checkbox sends "on"; an unticked one nothing.
    read_back: String,
}

impl ConnectionFields {
    fn form(&self) -> ConnectionForm {
        ConnectionForm {
            name: self.name.clone(),
            url: self.url.clone(),
            keys: self.keys.clone(),
            read_back: self.read_back.clone(),
        }
    }
}

/// The rotate form: how long the previous secret keeps signing.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RotateForm {
    overlap_hours: String,
}

/// The delete form: the confirmation checkbox (`confirm=yes`).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteForm {
    confirm: String,
}

/// A button's form: the CSRF token alone.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct NoFields {}

/// The list's query: `deleted=1` after a deletion.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ListQuery {
    deleted: Option<String>,
}

/// A connection page's query: the recipients' filter and place, and what was just done.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PageQuery {
    filter: Option<String>,
    after: Option<String>,
    done: Option<String>,
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
pub async fn list(_op: Operator, req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let v = list_view(&req, &state, FormState::default()).await?;
    Ok(render::ok(&req, "Connections", views::connection_list(&v)))
}

#[tracing::instrument(name = "Page: add a connection", skip_all)]
pub async fn create(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Form<ConnectionFields>,
) -> Result<HttpResponse, AppError> {
    let f = form.form();
    let e = match once_more_after_deadlock(&state.db, "Add a connection", async || {
        connections::create_connection(&state.db, &f).await
    })
    .await
    {
        Ok(id) => return Ok(after_post(&req, &format!("{}?done=added", fill(paths::CONNECTION, &[&id])))),
        Err(e) => e,
    };
    let r = refusals::form(e, form.values(), WORDS)?;
    let v = list_view(&req, &state, r.form).await?;
    Ok(refusals::answer(
        &req,
        r.status,
        "Connections",
        || views::connection_add_form(&v.csrf, &v.keys, &v.form),
        || views::connection_list(&v),
    ))
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
    done: Option<String>,
}

impl Shown {
    /// From the page's query: a bad `after` is a 400 that says what to ask for.
    fn from_query(req: &HttpRequest) -> Result<Shown, AppError> {
        let q = web::Query::<PageQuery>::from_query(req.query_string())
            .map_err(|e| AppError::BadRequest(format!("The address is not valid: {e}.")))?
            .into_inner();
        let filter = match q.filter.as_deref().unwrap_or("") {
            f @ ("" | "behind" | "failing" | "drift") => f.to_string(),
            other => {
                return Err(AppError::BadRequest(format!(
                    "“{other}” is not a filter: ask for behind, failing or drift."
                )));
            }
        };
        let after = match q.after.as_deref().map(str::trim) {
            None | Some("") => 0,
            Some(a) => a
                .parse::<i64>()
                .ok()
                .filter(|a| *a >= 0)
                .ok_or_else(|| AppError::BadRequest(format!("“{a}” is not a recipient id.")))?,
        };
        Ok(Shown { filter, after, done: q.done, ..Shown::default() })
    }
}

/// The notice for what was just done (`?done=…`), in words.
fn done_notice(done: &str, c: &ConnectionRow, now: DateTime<Utc>) -> Option<String> {
    Some(match done {
        "added" => "The connection was added: the console computes what each organization should hold and pushes it \
                    within a few seconds."
            .into(),
        "saved" => {
            "The connection was saved. New keys are computed for every organization and pushed where they change \
                    what it holds; a new URL receives every organization again."
                .into()
        }
        "retry" => "Retry asked: failing recipients are pushed again within a few seconds.".into(),
        "test" => "A test is on its way; its answer shows below when it comes.".into(),
        "check" => "Read-back asked: the system is asked what it holds for each confirmed recipient; any drift shows \
                    below when the run ends."
            .into(),
        "rotate" => match c.previous_secret_until {
            Some(until) if until > now => {
                format!("The secret was rotated; the previous one signs too until {}.", when(until))
            }
            _ => "The secret was rotated; the previous one no longer signs.".into(),
        },
        _ => return None,
    })
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
        notice: shown.done.as_deref().and_then(|d| done_notice(d, c, now)),
        refusal: shown.refusal,
        edit_form: shown.edit.unwrap_or_else(|| current_values(c)),
        rotate_form: shown.rotate,
        delete_form: shown.delete,
    })
}

fn title(v: &views::ConnectionView) -> String {
    format!("Connection: {}", v.name)
}

#[tracing::instrument(name = "Page: a connection", skip_all, fields(connection_id = *id))]
pub async fn detail(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let shown = Shown::from_query(&req)?;
    let v = page_view(&req, &state, ConnectionId(*id), shown).await?;
    Ok(render::ok(&req, &title(&v), views::connection_page(&v)))
}

/// The connection's page after a successful act, saying what was done.
fn back_to(req: &HttpRequest, id: i64, done: &str) -> HttpResponse {
    after_post(req, &format!("{}?done={done}", fill(paths::CONNECTION, &[&id])))
}

/// Which of the page's forms was refused.
#[derive(Clone, Copy)]
enum PageForm {
    Edit,
    Rotate,
    Delete,
}

/// A refused form of the page: in place for HTMX, else the page with that form filled in.
async fn page_refused(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    which: PageForm,
    r: Refused,
) -> Result<HttpResponse, AppError> {
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
}

#[tracing::instrument(name = "Page: edit a connection", skip_all, fields(connection_id = *id))]
pub async fn edit(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Form<ConnectionFields>,
) -> Result<HttpResponse, AppError> {
    let f = form.form();
    let saved = once_more_after_deadlock(&state.db, "Edit a connection", async || {
        connections::update_connection(&state.db, ConnectionId(*id), &f).await
    })
    .await;
    let e = match saved {
        Ok(()) => return Ok(back_to(&req, *id, "saved")),
        Err(e) => e,
    };
    let r = refusals::form(e, form.values(), WORDS)?;
    page_refused(&req, &state, *id, PageForm::Edit, r).await
}

#[tracing::instrument(name = "Page: rotate a connection's secret", skip_all, fields(connection_id = *id))]
pub async fn rotate(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Form<RotateForm>,
) -> Result<HttpResponse, AppError> {
    let rotated = match connections::parse_overlap_hours(&form.overlap_hours) {
        Ok(overlap) => {
            once_more_after_deadlock(&state.db, "Rotate a connection's secret", async || {
                connections::rotate_secret(&state.db, ConnectionId(*id), overlap).await
            })
            .await
        }
        Err(e) => Err(e),
    };
    let e = match rotated {
        Ok(()) => return Ok(back_to(&req, *id, "rotate")),
        Err(e) => e,
    };
    let r = refusals::form(e, form.values(), WORDS)?;
    page_refused(&req, &state, *id, PageForm::Rotate, r).await
}

#[tracing::instrument(name = "Page: delete a connection", skip_all, fields(connection_id = *id))]
pub async fn delete(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Form<DeleteForm>,
) -> Result<HttpResponse, AppError> {
    let deleted = if form.confirm == "yes" {
        once_more_after_deadlock(&state.db, "Delete a connection", async || {
            connections::delete_connection(&state.db, ConnectionId(*id)).await
        })
        .await
    } else {
        Err(ServiceError::invalid("confirm", "Tick the box to confirm: deleting stops every push to this system."))
    };
    let e = match deleted {
        Ok(()) => return Ok(after_post(&req, &format!("{}?deleted=1", paths::CONNECTIONS))),
        Err(e) => e,
    };
    let r = refusals::form(e, form.values(), DELETE_WORDS)?;
    page_refused(&req, &state, *id, PageForm::Delete, r).await
}

/// A button's answer: back to the page saying what was done; a conflict (Check now without
/// read-back) is the page again with the refusal above it (409); anything else the error page.
async fn button_done(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    done: &str,
    result: Result<(), ServiceError>,
) -> Result<HttpResponse, AppError> {
    match result {
        Ok(()) => Ok(back_to(req, id, done)),
        Err(ServiceError::Refused(why)) => {
            let shown = Shown { refusal: Some(why), ..Shown::default() };
            let v = page_view(req, state, ConnectionId(id), shown).await?;
            Ok(render::page(req, StatusCode::CONFLICT, &title(&v), views::connection_page(&v)))
        }
        Err(e) => Err(e.into()),
    }
}

#[tracing::instrument(name = "Page: retry a connection", skip_all, fields(connection_id = *id))]
pub async fn retry(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let result = connections::retry_connection(&state.db, ConnectionId(*id)).await;
    button_done(&req, &state, *id, "retry", result).await
}

#[tracing::instrument(name = "Page: send a test", skip_all, fields(connection_id = *id))]
pub async fn test(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let result = connections::send_test(&state.db, ConnectionId(*id)).await;
    button_done(&req, &state, *id, "test", result).await
}

#[tracing::instrument(name = "Page: read back now", skip_all, fields(connection_id = *id))]
pub async fn check(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let result = connections::check_now(&state.db, ConnectionId(*id)).await;
    button_done(&req, &state, *id, "check", result).await
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
