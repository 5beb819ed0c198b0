//! The page an invitation's link opens. The link carries no session: its GET shows the
//! organization, the role and what to do (and never uses the link, as mail scanners open links);
//! only the form's POST accepts.

use actix_session::Session;
use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use views::paths;

use crate::{
    services::{
        self, ServiceError,
        auth::{NewPassword, hash_password},
        invitations::{AcceptError, Accepted, Acceptor, LinkProblem},
        tokens::Token,
    },
    web::{
        AppState,
        errors::AppError,
        forms::{Form, after_post},
        identity::{SESSION_TOKEN, csrf_token, identity},
        input::Field,
        pages::auth::{client_address, establish},
        render,
    },
};

/// The link's query: its token.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AcceptQuery {
    token: Field<Token>,
}

/// The accept form: the token, and a new person's password.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct AcceptForm {
    token: Field<Token>,
    password: Field<Option<NewPassword>>,
}

/// A link that cannot be used, in words: no invitation has it (404), or it ended (410).
fn problem(req: &HttpRequest, p: LinkProblem) -> HttpResponse {
    let status = match p {
        LinkProblem::Unknown => StatusCode::NOT_FOUND,
        LinkProblem::Expired | LinkProblem::Used | LinkProblem::Revoked => StatusCode::GONE,
    };
    render::bare(req, status, "Invitation", views::invitation_problem(p.words()))
}

/// A link whose token cannot be one (cut short, tampered with): nothing is asked of the database.
fn not_a_token(req: &HttpRequest, words: &str) -> HttpResponse {
    render::bare(req, StatusCode::NOT_FOUND, "Invitation", views::invitation_problem(words))
}

/// The invitation's page for whoever opens it, with `error` from a refused POST.
async fn accept_page(
    req: &HttpRequest,
    state: &AppState,
    token: &Token,
    error: Option<String>,
    status: StatusCode,
) -> Result<HttpResponse, AppError> {
    let look = match services::invitations::look(&state.db, token).await {
        Ok(l) => l,
        Err(AcceptError::Link(p)) => return Ok(problem(req, p)),
        Err(AcceptError::Service(e)) => return Err(e.into()),
    };
    let (case, status) = match identity(req) {
        Some(i) if i.email.eq_ignore_ascii_case(&look.email) => (views::AcceptCase::Accept { error }, status),
        Some(i) => (
            views::AcceptCase::WrongAccount {
                words: services::invitations::wrong_account_words(&i.email, &look.email),
            },
            StatusCode::FORBIDDEN,
        ),
        None if look.account_exists => {
            let back = format!("{}?token={}", paths::INVITATION_ACCEPT, token.as_str());
            let next = url::form_urlencoded::byte_serialize(back.as_bytes()).collect::<String>();
            (views::AcceptCase::SignIn { sign_in_href: format!("{}?next={next}", paths::LOGIN) }, status)
        }
        None => (views::AcceptCase::NewPassword { error }, status),
    };
    let view = views::AcceptView {
        organization: look.organization,
        role: look.role,
        email: look.email,
        token: token.as_str().to_string(),
        csrf: csrf_token(req),
        case,
    };
    Ok(render::bare(req, status, "Invitation", views::invitation_page(&view)))
}

#[tracing::instrument(name = "Page: an invitation", skip_all)]
pub async fn accept_form(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<AcceptQuery>,
) -> Result<HttpResponse, AppError> {
    let token = match q.token.ok() {
        Some(t) => t.clone(),
        None => return Ok(not_a_token(&req, &Token::parse(q.token.raw()).err().unwrap_or_default())),
    };
    accept_page(&req, &state, &token, None, StatusCode::OK).await
}

#[tracing::instrument(name = "Page: accept an invitation", skip_all)]
pub async fn accept(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    form: Form<AcceptForm>,
) -> Result<HttpResponse, AppError> {
    let form = form.into_inner();
    let token = match form.token.ok() {
        Some(t) => t.clone(),
        None => return Ok(not_a_token(&req, &Token::parse(form.token.raw()).err().unwrap_or_default())),
    };
    let address = client_address(&req, &state.config.trusted_proxies);
    let previous = session.get::<String>(SESSION_TOKEN).ok().flatten();
    let who = identity(&req);
    let acceptor = match &who {
        Some(i) => Acceptor::SignedIn { account_id: i.account_id },
        None => {
            let password = match form.password.ok() {
                Some(Some(p)) => p.clone(),
                Some(None) => {
                    let m = "Choose a password for your new account.".to_string();
                    return accept_page(&req, &state, &token, Some(m), StatusCode::UNPROCESSABLE_ENTITY).await;
                }
                None => {
                    let m = format!("{}.", NewPassword::parse(form.password.raw()).err().unwrap_or_default());
                    return accept_page(&req, &state, &token, Some(m), StatusCode::UNPROCESSABLE_ENTITY).await;
                }
            };
            let password_hash = hash_password(password.as_str().to_string()).await;
            Acceptor::NewAccount { password_hash, address: &address, previous: previous.as_deref() }
        }
    };
    match services::invitations::accept(&state.db, &token, acceptor).await {
        Ok(Accepted::NewAccount { session: token, .. }) => {
            establish(&session, &token)?;
            Ok(after_post(&req, paths::HOME))
        }
        Ok(Accepted::Joined { .. }) => Ok(after_post(&req, paths::HOME)),
        Err(AcceptError::Link(p)) => Ok(problem(&req, p)),
        Err(AcceptError::Service(ServiceError::Refused(m))) => {
            accept_page(&req, &state, &token, Some(m), StatusCode::CONFLICT).await
        }
        Err(AcceptError::Service(e)) => Err(e.into()),
    }
}
