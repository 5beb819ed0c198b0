//! Stripe's error shape: `{"error":{"type","message","param","code"}}` with a 4xx/5xx status.

use actix_web::http::StatusCode;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub decline_code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into(), param: None, code: None, decline_code: None }
    }

    /// 404 for an id that does not exist, as Stripe words it.
    pub fn missing(what: &str, id: &str, param: &str) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("No such {what}: '{id}'"));
        e.param = Some(param.into());
        e.code = Some("resource_missing");
        e
    }

    /// 400 for a bad parameter. Stripe names the parameter but, for most such refusals, gives no
    /// code (its codes name particular faults, such as `parameter_invalid_integer`).
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = Some(param.into());
        e
    }

    pub fn required(param: &str) -> Self {
        let mut e = Self::invalid(param, format!("Missing required param: {param}."));
        e.code = Some("parameter_missing");
        e
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn unknown_route(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unrecognized request URL ({method}: {path})."),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
    }

    pub fn idempotency(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "idempotency_error", message);
        e.code = Some("idempotency_key_in_use");
        e
    }

    /// 402, as Stripe answers a declined card.
    pub fn card_declined(param: &str) -> Self {
        let mut e = Self::payment_declined();
        e.param = Some(param.into());
        e
    }

    /// 402 for a charge that failed on a card already on file (no parameter to blame).
    pub fn payment_declined() -> Self {
        let mut e = Self::new(StatusCode::PAYMENT_REQUIRED, "card_error", "Your card was declined.");
        e.code = Some("card_declined");
        e.decline_code = Some("generic_decline");
        e
    }

    /// An injected fault (control API), shaped like Stripe's own 5xx.
    pub fn injected(status: StatusCode) -> Self {
        Self::new(status, "api_error", "An injected fault from the stand-in's control API.")
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn body(&self) -> Value {
        let mut err = json!({ "type": self.kind, "message": self.message });
        if let Some(p) = &self.param {
            err["param"] = json!(p);
        }
        if let Some(c) = self.code {
            err["code"] = json!(c);
        }
        if let Some(d) = self.decline_code {
            err["decline_code"] = json!(d);
        }
        json!({ "error": err })
    }
}

pub type ApiResult<T = Value> = Result<T, ApiError>;
