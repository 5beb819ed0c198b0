//! Test controls under `/_farm/` (no token, loopback callers only): injected API faults and the
//! callback delivery log.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::server::AppState;

/// The faults `/api` calls meet, as `POST /_farm/faults` set them.
#[derive(Debug, Clone, Serialize)]
pub struct Faults {
    /// How many of the next `/api` calls fail.
    pub fail_next: u32,
    /// The status they fail with.
    pub status: u16,
    /// How long every `/api` call waits before it is answered.
    pub delay_ms: u64,
    /// How long every `/api` call's answer is held after the call was done: a caller that dies
    /// meanwhile never hears that the farm did it.
    pub hold_answer_ms: u64,
    /// The one HTTP method the faults apply to (`DELETE`, say); every method when none.
    pub method: Option<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults { fail_next: 0, status: 503, delay_ms: 0, hold_answer_ms: 0, method: None }
    }
}

/// What the faults do to one `/api` call.
pub struct ForCall {
    /// Waited before the call is done.
    pub delay: Duration,
    /// Answered instead of doing the call.
    pub failure: Option<ApiError>,
    /// Waited after the call is done, before its answer.
    pub hold_answer: Duration,
}

impl Faults {
    /// The delays and, while failures remain, the failure for one `/api` call of `method`.
    pub fn take_for_call(&mut self, method: &str) -> ForCall {
        if self.method.as_deref().is_some_and(|m| !m.eq_ignore_ascii_case(method)) {
            return ForCall { delay: Duration::ZERO, failure: None, hold_answer: Duration::ZERO };
        }
        let (delay, hold_answer) = (Duration::from_millis(self.delay_ms), Duration::from_millis(self.hold_answer_ms));
        if self.fail_next == 0 {
            return ForCall { delay, failure: None, hold_answer };
        }
        self.fail_next -= 1;
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let failure = ApiError::new(status, "The farm failed this call on purpose (a fault injected for a test).");
        ForCall { delay, failure: Some(failure), hold_answer: Duration::ZERO }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetFaults {
    fail_next: Option<u32>,
    status: Option<u16>,
    delay_ms: Option<u64>,
    hold_answer_ms: Option<u64>,
    /// An HTTP method, or "" for every method.
    method: Option<String>,
}

/// `POST /_farm/faults` `{"fail_next": N, "status": 503, "delay_ms": D, "hold_answer_ms": H,
/// "method": "DELETE"}`: each field given replaces that part (`0` clears a delay, `""` the
/// method); answers the faults now in force.
pub async fn set_faults(app: web::Data<AppState>, body: web::Bytes) -> ApiResult<HttpResponse> {
    let asked: SetFaults = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "The body must be JSON like {{\"fail_next\": 1, \"status\": 503, \"delay_ms\": 0}}; this one is not: {e}."
        ))
    })?;
    if let Some(status) = asked.status
        && !(400..=599).contains(&status)
    {
        return Err(ApiError::bad_request("The status of an injected failure must be between 400 and 599."));
    }
    let mut faults = app.faults();
    if let Some(n) = asked.fail_next {
        faults.fail_next = n;
        faults.status = asked.status.unwrap_or(503);
    } else if let Some(status) = asked.status {
        faults.status = status;
    }
    if let Some(ms) = asked.delay_ms {
        faults.delay_ms = ms;
    }
    if let Some(ms) = asked.hold_answer_ms {
        faults.hold_answer_ms = ms;
    }
    if let Some(method) = asked.method {
        faults.method = (!method.is_empty()).then(|| method.to_ascii_uppercase());
    }
    Ok(HttpResponse::Ok().json(&*faults))
}

/// `DELETE /_farm/faults`: no more failures and no delay.
pub async fn clear_faults(app: web::Data<AppState>) -> HttpResponse {
    let mut faults = app.faults();
    *faults = Faults::default();
    HttpResponse::Ok().json(&*faults)
}

/// `GET /_farm/callbacks`: every callback, oldest first, and how its delivery went.
pub async fn callbacks(app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "callbacks": app.farm.callbacks.deliveries() }))
}
