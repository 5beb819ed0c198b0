//! Sign in and sign out.

use actix_session::Session;
use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use views::paths;

use crate::{
    services::auth::{self, AuthError, Email, Password},
    web::forms::{Form, after_post},
    web::input::{Field, FromField},
    web::{
        AppState,
        errors::AppError,
        identity::{CSRF_TOKEN, SESSION_TOKEN, csrf_token, identity},
        render,
    },
};

/// Where to go after signing in: a path on this console (`safe_next`); anything else is
/// not followed, and the start page is.
#[derive(Debug, Clone)]
pub struct NextPath(String);

impl NextPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromField for NextPath {
    fn from_field(raw: &str) -> Result<Self, String> {
        safe_next(Some(raw)).map(|n| NextPath(n.to_string())).ok_or_else(|| "Not a path on this console.".into())
    }
}

/// The sign-in page's query: where to go after (an unsafe one is not followed).
#[derive(Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: Field<Option<NextPath>>,
    /// Set after an email was verified from a browser not signed in (`?verified=1`).
    #[serde(default)]
    verified: Option<String>,
}

impl NextQuery {
    fn next(&self) -> Option<&str> {
        self.next.ok().and_then(Option::as_ref).map(NextPath::as_str)
    }
}

/// The sign-in form.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct LoginForm {
    email: Field<Email>,
    password: Field<Password>,
    /// Where to go after: "" for the start page; one that is not a path here is not followed.
    next: Field<Option<NextPath>>,
}

impl LoginForm {
    /// The email and password, or what to say about the form: every empty or overlong field,
    /// email first, and only then an address that is not one.
    fn command(&self) -> Result<(Email, Password), String> {
        let mut problems = vec![];
        let email = self.email.raw();
        if email.is_empty() || email.chars().count() > 254 {
            problems.push("Enter your email address.".to_string());
        }
        if let Err(m) = Password::parse(self.password.raw()) {
            problems.push(m);
        }
        if !problems.is_empty() {
            return Err(problems.join(" "));
        }
        match (self.email.ok(), self.password.ok()) {
            (Some(e), Some(p)) => Ok((e.clone(), p.clone())),
            _ => Err(Email::parse(email).err().unwrap_or_default()),
        }
    }

    fn next(&self) -> Option<&str> {
        self.next.ok().and_then(Option::as_ref).map(NextPath::as_str)
    }
}

/// Only a path on this console: never another site (no open redirect). Browsers drop tabs and
/// newlines from a Location and read a backslash as a slash, so `/<TAB>/evil.example` and
/// `/\\evil.example` are `//evil.example`; a path with any control character, any whitespace
/// or any backslash is refused, as is anything that does not resolve to this origin.
pub fn safe_next(next: Option<&str>) -> Option<&str> {
    let n = next?;
    let plain = n.len() <= 512
        && n.starts_with('/')
        && !n.starts_with("//")
        && !n.chars().any(|c| c.is_control() || c.is_whitespace() || c == '\\');
    if !plain {
        return None;
    }
    // And what a URL parser makes of it stays on this origin.
    let base = url::Url::parse("http://console.invalid/").ok()?;
    let joined = base.join(n).ok()?;
    (joined.origin() == base.origin()).then_some(n)
}

fn login_page(
    req: &HttpRequest,
    status: StatusCode,
    email: &str,
    error: Option<&str>,
    next: Option<&str>,
) -> HttpResponse {
    login_page_with(req, status, email, error, next, None)
}

fn login_page_with(
    req: &HttpRequest,
    status: StatusCode,
    email: &str,
    error: Option<&str>,
    next: Option<&str>,
    notice: Option<&str>,
) -> HttpResponse {
    let csrf = csrf_token(req);
    let signup = req
        .app_data::<web::Data<AppState>>()
        .is_some_and(|s| s.config.signup_mode() == crate::config::SignupMode::Open);
    let body =
        views::login(&views::LoginView { email, error, csrf_token: &csrf, next: safe_next(next), signup, notice });
    render::bare(req, status, "Sign in", body)
}

#[tracing::instrument(name = "Page: sign in", skip_all)]
pub async fn login_form(req: HttpRequest, q: web::Query<NextQuery>) -> HttpResponse {
    if identity(&req).is_some() {
        return after_post(&req, q.next().unwrap_or(paths::HOME));
    }
    let notice = q.verified.is_some().then_some("Your email is verified; sign in.");
    login_page_with(&req, StatusCode::OK, "", None, q.next(), notice)
}

#[tracing::instrument(name = "Page: post sign-in", skip_all)]
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    form: Form<LoginForm>,
) -> Result<HttpResponse, AppError> {
    let next = form.next();
    let (email, password) = match form.command() {
        Ok(c) => c,
        Err(m) => return Ok(login_page(&req, StatusCode::UNPROCESSABLE_ENTITY, form.email.raw(), Some(&m), next)),
    };
    let address = client_address(&req, &state.config.trusted_proxies);
    // The session this browser had: signing in again ends it.
    let previous = session.get::<String>(SESSION_TOKEN).ok().flatten();
    match auth::sign_in(&state.db, &email, password.as_str(), &address, previous.as_deref()).await {
        Ok(s) => {
            establish(&session, &s.token)?;
            Ok(after_post(&req, next.unwrap_or(paths::HOME)))
        }
        Err(AuthError::InvalidCredentials) => Ok(login_page(
            &req,
            StatusCode::UNAUTHORIZED,
            email.as_str(),
            Some("The email or the password is not right."),
            next,
        )),
        Err(AuthError::Disabled) => Ok(login_page(
            &req,
            StatusCode::FORBIDDEN,
            email.as_str(),
            Some("This account is disabled. Ask the console's operator to enable it."),
            next,
        )),
        Err(AuthError::Throttled { retry_after }) => {
            let minutes = retry_after.as_secs().div_ceil(60).max(1);
            let when = if minutes == 1 { "1 minute".to_string() } else { format!("{minutes} minutes") };
            let msg = format!("Too many failed sign-ins for this account from this address. Try again in {when}.");
            let mut page = login_page(&req, StatusCode::TOO_MANY_REQUESTS, email.as_str(), Some(&msg), next);
            page.headers_mut().insert(
                actix_web::http::header::RETRY_AFTER,
                actix_web::http::header::HeaderValue::from(retry_after.as_secs().max(1)),
            );
            Ok(page)
        }
        Err(AuthError::Db(e)) => Err(e.into()),
    }
}

/// Put a new session's token into the browser's cookie: a new cookie session id, and a new CSRF
/// token with it (no fixation). Every act that signs a person in ends with this.
pub fn establish(session: &Session, token: &str) -> Result<(), AppError> {
    session.renew();
    session.insert(SESSION_TOKEN, token).map_err(|e| AppError::Unexpected(anyhow::anyhow!("{e}")))?;
    session
        .insert(CSRF_TOKEN, crate::config::random_hex(24))
        .map_err(|e| AppError::Unexpected(anyhow::anyhow!("{e}")))?;
    Ok(())
}

#[tracing::instrument(name = "Page: sign out", skip_all)]
pub async fn logout(req: HttpRequest, state: web::Data<AppState>, session: Session) -> Result<HttpResponse, AppError> {
    if let Ok(Some(token)) = session.get::<String>(SESSION_TOKEN) {
        auth::sign_out(&state.db, &token).await?;
    }
    session.purge();
    Ok(after_post(&req, paths::LOGIN))
}

/// The client's address: the peer, or, when the peer is a configured reverse proxy, the last
/// address in `X-Forwarded-For` that is not one of them (the proxies append; the left part is
/// anyone's to write).
pub fn client_address(req: &HttpRequest, trusted: &[std::net::IpAddr]) -> String {
    let peer = req.peer_addr().map(|a| a.ip());
    if let Some(p) = peer
        && trusted.contains(&p)
    {
        let forwarded = req.headers().get_all("x-forwarded-for").filter_map(|v| v.to_str().ok()).collect::<Vec<_>>();
        let hops: Vec<std::net::IpAddr> =
            forwarded.iter().flat_map(|v| v.split(',')).filter_map(|h| h.trim().parse().ok()).collect();
        if let Some(client) = hops.iter().rev().find(|h| !trusted.contains(h)) {
            return client.to_string();
        }
    }
    peer.map_or_else(|| "unknown".into(), |p| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_on_this_console_are_followed_after_sign_in() {
        for ok in ["/", "/operator/grants?status=active", "/operator/organizations/7", "/a/%2F/b"] {
            assert_eq!(safe_next(Some(ok)), Some(ok), "{ok:?} was refused");
        }
        for bad in [
            "//example.org",
            "/\t/example.org",
            "/\n/example.org",
            "/\r\n/example.org",
            "/\\example.org",
            "\\/example.org",
            "/ /example.org",
            "https://example.org/",
            "http:example.org",
            "example.org",
            "javascript:alert(1)",
            "/\u{3000}/example.org",
            "/\u{85}/example.org",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), None, "{bad:?} was followed");
        }
    }
}
