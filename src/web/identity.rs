//! Who is asking, and may they: the session's account, the route policy (public, member,
//! operator) enforced for every path in one place, and the CSRF check on every state-changing
//! request.

use actix_session::SessionExt;
use actix_web::{
    Error, HttpMessage, HttpRequest, HttpResponse,
    body::{BoxBody, MessageBody},
    dev::{Payload, ServiceRequest, ServiceResponse},
    http::{Method, header},
    middleware::Next,
    web,
};

use super::{AppState, errors::AppError};

/// The signed-in account, in the request's extensions.
#[derive(Clone, Debug)]
pub struct Identity {
    pub account_id: i64,
    pub email: String,
    pub is_operator: bool,
}

/// The session keys.
pub const SESSION_TOKEN: &str = "sid";
pub const CSRF_TOKEN: &str = "csrf";
/// The form field and header that carry the CSRF token.
pub const CSRF_FIELD: &str = "csrf_token";
pub const CSRF_HEADER: &str = "x-csrf-token";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    Member,
    Operator,
}

/// The one route policy: what a path needs. A new route is members-only unless listed here.
pub fn access_for(path: &str) -> Access {
    let public = matches!(path, "/login" | "/logout" | "/healthz" | "/readyz" | "/favicon.ico")
        || path.starts_with("/static/")
        || path == "/webhooks/stripe"
        || path == "/farm/callbacks";
    if public {
        Access::Public
    } else if path == "/operator" || path.starts_with("/operator/") {
        Access::Operator
    } else {
        Access::Member
    }
}

/// Paths whose callers prove themselves with a signature instead of a CSRF token.
fn csrf_exempt(path: &str) -> bool {
    path == "/webhooks/stripe" || path == "/farm/callbacks"
}

/// The CSRF token of this session, made when the session has none.
pub fn csrf_token(req: &HttpRequest) -> String {
    let session = req.get_session();
    if let Ok(Some(t)) = session.get::<String>(CSRF_TOKEN) {
        return t;
    }
    let t = crate::config::random_hex(24);
    let _ = session.insert(CSRF_TOKEN, &t);
    t
}

pub fn identity(req: &HttpRequest) -> Option<Identity> {
    req.extensions().get::<Identity>().cloned()
}

pub async fn identify_and_authorize(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let state = req.app_data::<web::Data<AppState>>().cloned().expect("the app state is registered");
    let session = req.get_session();
    if let Ok(Some(token)) = session.get::<String>(SESSION_TOKEN) {
        match crate::services::auth::resume_session(&state.db, &token).await {
            Ok(Some(a)) => {
                req.extensions_mut().insert(Identity {
                    account_id: a.account_id,
                    email: a.email,
                    is_operator: a.is_operator,
                });
            }
            Ok(None) => session.remove(SESSION_TOKEN).map(|_| ()).unwrap_or(()),
            Err(e) => return Ok(req.error_response(AppError::from(e))),
        }
    }

    let path = req.path().to_string();
    let who = identity(req.request());
    match (access_for(&path), &who) {
        (Access::Public, _) => {}
        (_, None) => {
            let response = redirect_to_login(req.request());
            return Ok(req.into_response(response).map_into_boxed_body());
        }
        (Access::Operator, Some(i)) if !i.is_operator => return Ok(req.error_response(AppError::Forbidden)),
        _ => {}
    }

    let unsafe_method = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if unsafe_method
        && !csrf_exempt(&path)
        && let Err(e) = check_csrf(&mut req).await
    {
        return Ok(req.error_response(e));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// Not signed in: to the sign-in page, coming back here after (HTMX follows `HX-Redirect`).
fn redirect_to_login(req: &HttpRequest) -> HttpResponse {
    let back = match req.query_string() {
        "" => req.path().to_string(),
        q => format!("{}?{q}", req.path()),
    };
    let location = if req.method() == Method::GET && back != "/" {
        format!("/login?next={}", url::form_urlencoded::byte_serialize(back.as_bytes()).collect::<String>())
    } else {
        "/login".to_string()
    };
    if req.headers().contains_key("hx-request") {
        HttpResponse::Unauthorized().insert_header(("HX-Redirect", location)).finish()
    } else {
        HttpResponse::SeeOther().insert_header((header::LOCATION, location)).finish()
    }
}

/// The token from the header, or from the urlencoded form (the body is put back for the
/// handler), must equal the session's.
async fn check_csrf(req: &mut ServiceRequest) -> Result<(), AppError> {
    let expected = req.get_session().get::<String>(CSRF_TOKEN).ok().flatten().ok_or(AppError::CsrfRejected)?;
    let sent = match req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()) {
        Some(h) => Some(h.to_string()),
        None => {
            let is_form = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
            if is_form {
                let body = req
                    .extract::<web::Bytes>()
                    .await
                    .map_err(|_| AppError::BadRequest("The form could not be read.".into()))?;
                let token =
                    url::form_urlencoded::parse(&body).find(|(k, _)| k == CSRF_FIELD).map(|(_, v)| v.into_owned());
                req.set_payload(bytes_to_payload(body));
                token
            } else {
                None
            }
        }
    };
    match sent {
        Some(s) if constant_time_eq(s.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(AppError::CsrfRejected),
    }
}

fn bytes_to_payload(buf: web::Bytes) -> Payload {
    let (_, mut pl) = actix_http::h1::Payload::create(true);
    pl.unread_data(buf);
    Payload::from(pl)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_defaults_to_members() {
        assert_eq!(access_for("/login"), Access::Public);
        assert_eq!(access_for("/static/console.css"), Access::Public);
        assert_eq!(access_for("/operator"), Access::Operator);
        assert_eq!(access_for("/operator/catalog"), Access::Operator);
        assert_eq!(access_for("/operatorx"), Access::Member);
        assert_eq!(access_for("/"), Access::Member);
        assert_eq!(access_for("/anything-new"), Access::Member);
    }
}
