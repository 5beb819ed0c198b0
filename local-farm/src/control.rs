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
}

impl Default for Faults {
    fn default() -> Self {
        Faults { fail_next: 0, status: 503, delay_ms: 0 }
    }
}

impl Faults {
    /// The delay and, while failures remain, the failure for one `/api` call.
    pub fn take_for_call(&mut self) -> (Duration, Option<ApiError>) {
        let delay = Duration::from_millis(self.delay_ms);
        if self.fail_next == 0 {
            return (delay, None);
        }
        self.fail_next -= 1;
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let failure = ApiError::new(status, "The farm failed this call on purpose (a fault injected for a test).");
        (delay, Some(failure))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetFaults {
    fail_next: Option<u32>,
    status: Option<u16>,
    delay_ms: Option<u64>,
}

/// `POST /_farm/faults` `{"fail_next": N, "status": 503, "delay_ms": D}`: each field given
/// replaces that part (`delay_ms: 0` clears the delay); answers the faults now in force.
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
