//! Who is asking: the session's account, the `Member` and `Operator` extractors handlers act
//! through, the redirect to sign-in, and the CSRF token and its check. Which check a route gets
//! is decided by the route table (`routes.rs`) and applied by `guards.rs`.

use std::future::{Ready, ready};

use actix_session::SessionExt;
use actix_web::{
    FromRequest, HttpMessage, HttpRequest, HttpResponse,
    dev::{Payload, ServiceRequest},
    http::{Method, header},
    web,
};

use super::errors::AppError;
use crate::ids::AccountId;

/// The signed-in account, in the request's extensions.
#[derive(Clone, Debug)]
pub struct Identity {
    pub account_id: AccountId,
    pub email: String,
    pub is_operator: bool,
    /// Whether the account proved it reads its email (the banner, and the acts that wait for it).
    pub verified: bool,
}

impl Identity {
    /// As the services take the signed-in account.
    pub fn session_account(&self) -> crate::store::accounts::SessionAccount {
        crate::store::accounts::SessionAccount {
            account_id: self.account_id,
            email: self.email.clone(),
            is_operator: self.is_operator,
            verified: self.verified,
        }
    }
}

/// The session keys.
pub const SESSION_TOKEN: &str = "sid";
pub const CSRF_TOKEN: &str = "csrf";
/// The form field and header that carry the CSRF token.
pub const CSRF_FIELD: &str = "csrf_token";
pub const CSRF_HEADER: &str = "x-csrf-token";

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

/// A signed-in account acting as a member (operators are members too). A handler that acts for
/// a person takes this (or `Operator`), inside its `call::Call`, rather than reading the session
/// itself.
#[derive(Clone, Debug)]
pub struct Member(pub Identity);

/// A signed-in operator.
#[derive(Clone, Debug)]
pub struct Operator(pub Identity);

impl Operator {
    pub fn account_id(&self) -> AccountId {
        self.0.account_id
    }
}

impl Member {
    pub fn account_id(&self) -> AccountId {
        self.0.account_id
    }
}

impl FromRequest for Member {
    type Error = AppError;
    type Future = Ready<Result<Self, AppError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // The member guard (or a member page's extractor) put the identity here; a route
        // registered without either has none.
        ready(identity(req).map(Member).ok_or(AppError::SignInRequired))
    }
}

impl FromRequest for Operator {
    type Error = AppError;
    type Future = Ready<Result<Self, AppError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(match identity(req) {
            Some(i) if i.is_operator => Ok(Operator(i)),
            Some(_) => Err(AppError::Forbidden),
            None => Err(AppError::SignInRequired),
        })
    }
}

/// Not signed in: to the sign-in page, coming back here after (HTMX follows `HX-Redirect`).
pub fn redirect_to_login(req: &HttpRequest) -> HttpResponse {
    let back = match req.query_string() {
        "" => req.path().to_string(),
        q => format!("{}?{q}", req.path()),
    };
    let location = if matches!(*req.method(), Method::GET | Method::HEAD) && back != views::paths::HOME {
        format!(
            "{}?next={}",
            views::paths::LOGIN,
            url::form_urlencoded::byte_serialize(back.as_bytes()).collect::<String>()
        )
    } else {
        views::paths::LOGIN.to_string()
    };
    if req.headers().contains_key("hx-request") {
        HttpResponse::Unauthorized().insert_header(("HX-Redirect", location)).finish()
    } else {
        HttpResponse::SeeOther().insert_header((header::LOCATION, location)).finish()
    }
}

/// The token from the header, or from the urlencoded form (the body is put back for the
/// handler), must equal the session's.
pub async fn check_csrf(req: &mut ServiceRequest) -> Result<(), AppError> {
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

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
