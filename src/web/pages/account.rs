//! The account page: a signed-in person's password, email, sessions and deletion.

use actix_session::SessionExt;
use actix_web::{HttpRequest, HttpResponse, http::StatusCode};
use serde::Deserialize;
use validator::Validate;
use views::{FormState, paths};

use crate::{
    services::{
        ServiceError,
        account_settings::{self as svc, Mailing, SessionHandle},
        auth::{Email, NewPassword, Password},
    },
    store::account_admin::SessionRow,
    web::{
        AppState,
        call::MemberCall,
        errors::AppError,
        forms::{Form, after_post, partial, see_other},
        identity::{SESSION_TOKEN, csrf_token},
        input::{self, Field, FromField, read},
        pages::auth::client_address,
        refusals::{self, Words},
        render,
    },
};

const TITLE: &str = "Your account";

/// A session's handle as the page writes it.
impl FromField for SessionHandle {
    fn from_field(raw: &str) -> Result<Self, String> {
        SessionHandle::parse(raw)
    }
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct PasswordForm {
    #[validate(custom(function = read, message = "Enter your current password."))]
    current_password: Field<Password>,
    #[validate(custom(function = read))]
    new_password: Field<NewPassword>,
}

impl PasswordForm {
    fn command(self) -> Result<(Password, NewPassword), ServiceError> {
        let problems = input::problems(&self);
        problems.or(self.current_password.into_ok().zip(self.new_password.into_ok()))
    }
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct EmailForm {
    #[validate(custom(function = read))]
    email: Field<Email>,
    #[validate(custom(function = read, message = "Enter your password."))]
    password: Field<Password>,
}

impl EmailForm {
    fn command(self) -> Result<(Email, Password), ServiceError> {
        let problems = input::problems(&self);
        problems.or(self.email.into_ok().zip(self.password.into_ok()))
    }
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteForm {
    #[validate(custom(function = read, message = "Enter your password to confirm."))]
    password: Field<Password>,
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct EndSessionForm {
    #[validate(custom(function = read))]
    session: Field<SessionHandle>,
}

/// Nothing: "Sign out everywhere" sends its token alone.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// The browser's own session token.
fn session_token(req: &HttpRequest) -> Option<String> {
    req.get_session().get::<String>(SESSION_TOKEN).ok().flatten()
}

/// Where the account's mail goes out from, when mail is on (its links at `link_base`, never the
/// request's Host header).
fn mailing(state: &AppState) -> Option<Mailing> {
    state.mail_on.then(|| Mailing { host: state.mail_host(), base: state.link_base() })
}

fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub fn session_lines(rows: &[SessionRow]) -> Vec<views::SessionLine> {
    rows.iter()
        .map(|s| views::SessionLine {
            handle: s.handle.clone(),
            created_at: when(s.created_at),
            last_seen_at: when(s.last_seen_at),
            address: s.address.clone(),
            current: s.current,
        })
        .collect()
}

/// The whole page, with the forms' states as given.
async fn view(
    req: &HttpRequest,
    state: &AppState,
    who: &crate::web::identity::Member,
    forms: [FormState; 3],
) -> Result<views::AccountPageView, AppError> {
    let token = session_token(req);
    let o = svc::overview(&state.db, who.account_id(), token.as_deref()).await?;
    let [password_form, email_form, delete_form] = forms;
    Ok(views::AccountPageView {
        csrf: csrf_token(req),
        email: o.email,
        mail_on: state.mail_on,
        pending_email: o.pending_email.map(|(e, until)| (e, when(until))),
        sessions: session_lines(&o.sessions),
        password_form,
        email_form,
        delete_form,
    })
}

#[tracing::instrument(name = "Page: the account", skip_all)]
pub async fn page(MemberCall { who, req, state }: MemberCall) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, &who, Default::default()).await?;
    Ok(render::ok(&req, TITLE, views::account_page(&v)))
}

/// Which of the page's forms answers.
#[derive(Clone, Copy)]
enum Which {
    Password,
    Email,
    Delete,
}

/// A form's answer: for HTMX the form alone, else the page with it filled in.
async fn answer(
    req: &HttpRequest,
    state: &AppState,
    who: &crate::web::identity::Member,
    which: Which,
    status: StatusCode,
    form: FormState,
) -> Result<HttpResponse, AppError> {
    let mut forms: [FormState; 3] = Default::default();
    let i = which as usize;
    forms[i] = form;
    let v = view(req, state, who, forms).await?;
    if render::is_htmx(req) {
        let m = match which {
            Which::Password => views::account_password_form(&v.csrf, &v.password_form),
            Which::Email => views::account_email_form(&v, &v.email_form),
            Which::Delete => views::account_delete_form(&v.csrf, &v.delete_form),
        };
        return Ok(partial(status, m));
    }
    Ok(render::page(req, status, TITLE, views::account_page(&v)))
}

/// A refusal of one of the page's forms, drawn in place.
async fn refused(
    req: &HttpRequest,
    state: &AppState,
    who: &crate::web::identity::Member,
    which: Which,
    e: ServiceError,
    words: Words,
) -> Result<HttpResponse, AppError> {
    // Passwords are never sent back: only the other fields keep what was typed.
    let r = refusals::form(e, vec![], words)?;
    answer(req, state, who, which, r.status, r.form).await
}

#[tracing::instrument(name = "Page: change the password", skip_all)]
pub async fn change_password(
    MemberCall { who, req, state }: MemberCall,
    form: Form<PasswordForm>,
) -> Result<HttpResponse, AppError> {
    const WORDS: Words = Words {
        done: "changed",
        busy: Some("Your account is busy right now; nothing was changed. Try again in a moment."),
    };
    let Some(token) = session_token(&req) else { return Err(AppError::SignInRequired) };
    let done = match form.into_inner().command() {
        Ok((current, new)) => {
            svc::change_password(&state.db, who.account_id(), &token, &current, &new, mailing(&state).as_ref()).await
        }
        Err(e) => Err(e),
    };
    match done {
        Ok(ended) => {
            let notice = match ended {
                0 => "Your password was changed.".to_string(),
                1 => "Your password was changed, and 1 other session was signed out.".to_string(),
                n => format!("Your password was changed, and {n} other sessions were signed out."),
            };
            let form = FormState { notice: Some(notice), ..FormState::default() };
            answer(&req, &state, &who, Which::Password, StatusCode::OK, form).await
        }
        Err(e) => refused(&req, &state, &who, Which::Password, e, WORDS).await,
    }
}

#[tracing::instrument(name = "Page: change the email", skip_all)]
pub async fn change_email(
    MemberCall { who, req, state }: MemberCall,
    form: Form<EmailForm>,
) -> Result<HttpResponse, AppError> {
    const WORDS: Words = Words {
        done: "changed",
        busy: Some("Your account is busy right now; nothing was changed. Try again in a moment."),
    };
    let sent = form.email.raw().to_string();
    let address = client_address(&req, &state.config.trusted_proxies);
    let done = match form.into_inner().command() {
        Ok((email, password)) => {
            let m = mailing(&state);
            svc::request_email_change(
                &state.db,
                &state.tokens,
                who.account_id(),
                &email,
                &password,
                m.as_ref(),
                &address,
            )
            .await
            .map(|()| email)
        }
        Err(e) => Err(e),
    };
    match done {
        Ok(email) => {
            let notice =
                format!("A link to confirm it was sent to {}. Your address changes when it is opened.", email.as_str());
            let form = FormState { notice: Some(notice), ..FormState::default() };
            answer(&req, &state, &who, Which::Email, StatusCode::OK, form).await
        }
        Err(e) => {
            let mut r = refusals::form(e, vec![("email".into(), sent)], WORDS)?;
            r.form.values.retain(|(k, _)| k == "email");
            answer(&req, &state, &who, Which::Email, r.status, r.form).await
        }
    }
}

#[tracing::instrument(name = "Page: end a session", skip_all)]
pub async fn end_session(
    MemberCall { who, req, state }: MemberCall,
    form: Form<EndSessionForm>,
) -> Result<HttpResponse, AppError> {
    let problems = input::problems(&*form);
    let handle = problems.or(form.into_inner().session.into_ok())?;
    svc::end_session(&state.db, who.account_id(), &handle).await?;
    // Ending this very session signs this browser out: the sign-in page follows.
    Ok(after_post(&req, paths::ACCOUNT))
}

#[tracing::instrument(name = "Page: sign out everywhere", skip_all)]
pub async fn sign_out_everywhere(
    MemberCall { who, req, state }: MemberCall,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    svc::sign_out_everywhere(&state.db, who.account_id()).await?;
    req.get_session().purge();
    Ok(after_post(&req, paths::LOGIN))
}

#[tracing::instrument(name = "Page: delete the account", skip_all)]
pub async fn delete(
    MemberCall { who, req, state }: MemberCall,
    form: Form<DeleteForm>,
) -> Result<HttpResponse, AppError> {
    const WORDS: Words = Words {
        done: "deleted",
        busy: Some("Your account is busy right now; nothing was deleted. Try again in a moment."),
    };
    let problems = input::problems(&*form);
    let done = match problems.or(form.into_inner().password.into_ok()) {
        Ok(password) => svc::delete_account(&state.db, who.account_id(), &password).await,
        Err(e) => Err(e),
    };
    match done {
        Ok(()) => {
            req.get_session().purge();
            if render::is_htmx(&req) { Ok(after_post(&req, paths::LOGIN)) } else { Ok(see_other(paths::LOGIN)) }
        }
        Err(e) => refused(&req, &state, &who, Which::Delete, e, WORDS).await,
    }
}
