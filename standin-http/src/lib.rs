//! What the local stand-ins answer alike. Each stand-in is its own small server with its own
//! API; these are the parts where a caller must meet the same thing from both: the error body
//! `{"error": "<a sentence for a person>"}`, test controls that answer loopback callers only, and
//! a sentence for an unknown route or method.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// A refusal or failure: its status and a sentence for a person.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(json!({ "error": self.message }))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON body, or a 400 that shows what one looks like (`example`).
pub fn json_body<T: DeserializeOwned>(body: &[u8], example: &str) -> ApiResult<T> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body must be JSON like {example}; this one is not: {e}.")))
}

/// Middleware for a stand-in's test controls: a caller off the loopback interface gets 403
/// ("`whose` test controls answer only on the loopback interface.").
pub async fn loopback_only(
    whose: &str,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if !req.peer_addr().is_some_and(|a| a.ip().is_loopback()) {
        let message = format!("{whose} test controls answer only on the loopback interface.");
        return Ok(req.into_response(ApiError::new(StatusCode::FORBIDDEN, message).error_response()));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// The answer to a route the stand-in does not have: "`who` has no GET /x."
pub fn no_route(who: &str, req: &HttpRequest) -> HttpResponse {
    ApiError::not_found(format!("{who} has no {} {}.", req.method(), req.path())).error_response()
}

/// The answer to a method a route does not take.
pub async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    let message = format!("{} is not allowed on {}.", req.method(), req.path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, message).error_response()
}

/// Injected failures, the part of a stand-in's faults both stand-ins share: the next `fail_next`
/// calls are answered `status` without being done, and every call waits `delay_ms` first.
/// Serialized flattened into the stand-in's own faults, so the JSON stays one flat object.
#[derive(Debug, Clone, Serialize)]
pub struct Failures {
    pub fail_next: u32,
    pub status: u16,
    pub delay_ms: u64,
    /// The status `fail_next` without `status` fails with.
    #[serde(skip)]
    default_status: u16,
}

impl Failures {
    pub fn none(default_status: u16) -> Self {
        Failures { fail_next: 0, status: default_status, delay_ms: 0, default_status }
    }

    /// What a `POST .../faults` asks: each part given replaces that part (`delay_ms: 0` clears the
    /// delay); `fail_next` without `status` fails with the default status.
    pub fn set(&mut self, fail_next: Option<u32>, status: Option<u16>, delay_ms: Option<u64>) -> ApiResult<()> {
        if let Some(status) = status
            && !(400..=599).contains(&status)
        {
            return Err(ApiError::bad_request("The status of an injected failure must be between 400 and 599."));
        }
        if let Some(n) = fail_next {
            self.fail_next = n;
            self.status = status.unwrap_or(self.default_status);
        } else if let Some(status) = status {
            self.status = status;
        }
        if let Some(ms) = delay_ms {
            self.delay_ms = ms;
        }
        Ok(())
    }

    pub fn delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.delay_ms)
    }

    /// The failure for one call while failures remain, answered with `message`.
    pub fn take(&mut self, message: &str) -> Option<ApiError> {
        if self.fail_next == 0 {
            return None;
        }
        self.fail_next -= 1;
        let status = StatusCode::from_u16(self.status)
            .unwrap_or_else(|_| StatusCode::from_u16(self.default_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
        Some(ApiError::new(status, message))
    }
}
