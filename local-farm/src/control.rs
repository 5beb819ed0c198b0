//! Test controls under `/_farm/` (no token, loopback callers only): injected API faults and the
//! callback delivery log.

use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::server::AppState;
use standin_http::{ApiError, ApiResult, Failures, json_body};

/// The faults `/api` calls meet, as `POST /_farm/faults` set them.
#[derive(Debug, Clone, Serialize)]
pub struct Faults {
    /// How many of the next `/api` calls fail, with which status, and how long every `/api` call
    /// waits before it is answered.
    #[serde(flatten)]
    pub failures: Failures,
    /// How long every `/api` call's answer is held after the call was done: a caller that dies
    /// meanwhile never hears that the farm did it.
    pub hold_answer_ms: u64,
    /// The one HTTP method the faults apply to (`DELETE`, say); every method when none.
    pub method: Option<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults { failures: Failures::none(503), hold_answer_ms: 0, method: None }
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
        let (delay, hold_answer) = (self.failures.delay(), Duration::from_millis(self.hold_answer_ms));
        match self.failures.take("The farm failed this call on purpose (a fault injected for a test).") {
            // A failed call is answered at once: it was not done, so there is nothing to hold.
            Some(failure) => ForCall { delay, failure: Some(failure), hold_answer: Duration::ZERO },
            None => ForCall { delay, failure: None, hold_answer },
        }
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
    let asked: SetFaults = json_body(&body, r#"{"fail_next": 1, "status": 503, "delay_ms": 0}"#)?;
    let mut faults = app.faults();
    faults.failures.set(asked.fail_next, asked.status, asked.delay_ms)?;
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

/// `GET /_farm/calls`: the latest API calls, oldest first, each with the caller's request id.
pub async fn calls(app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "calls": app.calls() }))
}

/// `GET /_farm/callbacks`: every callback, oldest first, and how its delivery went.
pub async fn callbacks(app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "callbacks": app.farm.callbacks.deliveries() }))
}
