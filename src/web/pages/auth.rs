//! Sign in and sign out.

use actix_session::Session;
use actix_web::{HttpRequest, HttpResponse, get, http::StatusCode, post, web};
use serde::Deserialize;
use validator::Validate;

use crate::{
    services::auth::{self, AuthError, Email},
    web::forms::after_post,
    web::{
        AppState,
        errors::AppError,
        identity::{CSRF_TOKEN, SESSION_TOKEN, csrf_token, identity},
        render,
    },
};

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

#[derive(Deserialize, Validate)]
pub struct LoginForm {
    #[validate(length(min = 1, max = 254, message = "Enter your email address."))]
    email: String,
    #[validate(length(min = 1, max = 1024, message = "Enter your password."))]
    password: String,
    next: Option<String>,
}

/// Only a path on this console: never another site (no open redirect).
fn safe_next(next: Option<&str>) -> Option<&str> {
    next.filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') && n.len() <= 512)
}

fn login_page(
    req: &HttpRequest,
    status: StatusCode,
    email: &str,
    error: Option<&str>,
    next: Option<&str>,
) -> HttpResponse {
    let csrf = csrf_token(req);
    let body = views::login(&views::LoginView { email, error, csrf_token: &csrf, next: safe_next(next) });
    render::bare(req, status, "Sign in", body)
}

#[get("/login")]
pub async fn login_form(req: HttpRequest, q: web::Query<NextQuery>) -> HttpResponse {
    if identity(&req).is_some() {
        return after_post(&req, safe_next(q.next.as_deref()).unwrap_or("/"));
    }
    login_page(&req, StatusCode::OK, "", None, q.next.as_deref())
}

#[post("/login")]
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, AppError> {
    let form = form.into_inner();
    let next = form.next.as_deref();
    if let Err(errors) = form.validate() {
        let msg: Vec<String> = errors
            .field_errors()
            .values()
            .flat_map(|v| v.iter())
            .filter_map(|e| e.message.as_ref().map(|m| m.to_string()))
            .collect();
        return Ok(login_page(&req, StatusCode::UNPROCESSABLE_ENTITY, &form.email, Some(&msg.join(" ")), next));
    }
    let email = match Email::parse(&form.email) {
        Ok(e) => e,
        Err(m) => return Ok(login_page(&req, StatusCode::UNPROCESSABLE_ENTITY, &form.email, Some(&m), next)),
    };
    // The peer's address: a forwarded-for header is anyone's to write, so it is not trusted here.
    let address = req.peer_addr().map(|a| a.ip().to_string()).unwrap_or_else(|| "unknown".into());
    match auth::sign_in(&state.db, &email, &form.password, &address).await {
        Ok(s) => {
            // A new session id at sign-in, and a new CSRF token with it (no fixation).
            session.renew();
            session.insert(SESSION_TOKEN, &s.token).map_err(|e| AppError::Unexpected(anyhow::anyhow!("{e}")))?;
            session
                .insert(CSRF_TOKEN, crate::config::random_hex(24))
                .map_err(|e| AppError::Unexpected(anyhow::anyhow!("{e}")))?;
            Ok(after_post(&req, safe_next(next).unwrap_or("/")))
        }
        Err(AuthError::InvalidCredentials) => Ok(login_page(
            &req,
            StatusCode::UNAUTHORIZED,
            email.as_str(),
            Some("The email or the password is not right."),
            next,
        )),
        Err(AuthError::Throttled { retry_after }) => {
            let minutes = retry_after.as_secs().div_ceil(60);
            let msg = format!(
                "Too many failed sign-ins for this account or from this address. Try again in {minutes} minutes."
            );
            Ok(login_page(&req, StatusCode::TOO_MANY_REQUESTS, email.as_str(), Some(&msg), next))
        }
        Err(AuthError::Db(e)) => Err(e.into()),
    }
}

#[post("/logout")]
pub async fn logout(req: HttpRequest, state: web::Data<AppState>, session: Session) -> Result<HttpResponse, AppError> {
    if let Ok(Some(token)) = session.get::<String>(SESSION_TOKEN) {
        auth::sign_out(&state.db, &token).await?;
    }
    session.purge();
    Ok(after_post(&req, "/login"))
}
