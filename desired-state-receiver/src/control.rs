//! Test controls under `/_receiver/` (no signature, loopback callers only): the state as JSON,
//! injected push faults, the accepted secrets, simulated drift and a reset.

use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::protocol::recipient_id;
use crate::server::AppState;
use crate::signature::Secret;
use standin_http::{ApiError, ApiResult, Failures, json_body};

/// The status an injected failure answers with unless told otherwise.
const DEFAULT_FAILURE: u16 = 500;

/// The faults pushes meet, as `POST /_receiver/faults` set them.
#[derive(Debug, Clone, Serialize)]
pub struct Faults {
    /// How many of the next signed pushes are answered `status` without being applied, and how
    /// long every push waits before it is handled.
    #[serde(flatten)]
    pub failures: Failures,
    /// How many of the next applied updates are answered with the pushed generation minus one
    /// (a remote that lies about what it holds).
    pub stale_next: u32,
    /// Where every request to the protocol's address is redirected (302), unverified and
    /// unapplied, while set: an endpoint that moved, or a login page in front of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_to: Option<String>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults { failures: Failures::none(DEFAULT_FAILURE), stale_next: 0, redirect_to: None }
    }
}

impl Faults {
    pub fn delay(&self) -> Duration {
        self.failures.delay()
    }

    /// The failure for one push while failures remain.
    pub fn take_failure(&mut self) -> Option<ApiError> {
        self.failures.take("The receiver failed this push on purpose (a fault injected for a test).")
    }

    /// Whether this applied update is answered with a stale generation.
    pub fn take_stale(&mut self) -> bool {
        let lie = self.stale_next > 0;
        self.stale_next = self.stale_next.saturating_sub(1);
        lie
    }
}

/// `GET /_receiver/state`: every recipient held with its history, and the counters.
pub async fn state(app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(app.snapshot())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFaults {
    fail_next: Option<u32>,
    status: Option<u16>,
    delay_ms: Option<u64>,
    stale_next: Option<u32>,
    redirect_to: Option<String>,
}

/// `POST /_receiver/faults` `{"fail_next": N, "status": 500, "delay_ms": D, "stale_next": N,
/// "redirect_to": "/"}`: each field given replaces that part (`delay_ms: 0` clears the delay,
/// `redirect_to: ""` the redirect; `fail_next` without `status` fails with 500); answers the
/// faults now in force.
pub async fn set_faults(app: web::Data<AppState>, body: web::Bytes) -> ApiResult<HttpResponse> {
    let asked: SetFaults =
        json_body(&body, r#"{"fail_next": 1, "status": 500, "delay_ms": 0, "stale_next": 0, "redirect_to": "/"}"#)?;
    let mut faults = app.faults();
    faults.failures.set(asked.fail_next, asked.status, asked.delay_ms)?;
    if let Some(n) = asked.stale_next {
        faults.stale_next = n;
    }
    if let Some(to) = asked.redirect_to {
        faults.redirect_to = Some(to).filter(|t| !t.trim().is_empty());
    }
    Ok(HttpResponse::Ok().json(&*faults))
}

/// `DELETE /_receiver/faults`: no more failures, lies or delay.
pub async fn clear_faults(app: web::Data<AppState>) -> HttpResponse {
    let mut faults = app.faults();
    *faults = Faults::default();
    HttpResponse::Ok().json(&*faults)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetSecrets {
    secrets: Vec<String>,
}

/// `POST /_receiver/secrets` `{"secrets": ["whsec_..."]}`: from now on only these sign (an empty
/// list refuses every signed request). Answers how many are accepted, never the secrets.
pub async fn set_secrets(app: web::Data<AppState>, body: web::Bytes) -> ApiResult<HttpResponse> {
    let asked: SetSecrets = json_body(&body, r#"{"secrets": ["whsec_..."]}"#)?;
    let secrets = parse_secrets(&asked.secrets).map_err(ApiError::bad_request)?;
    let count = secrets.len();
    *app.secrets() = secrets;
    Ok(HttpResponse::Ok().json(json!({ "secrets": count })))
}

/// Every secret parsed, or the sentence about the first malformed one.
pub fn parse_secrets(secrets: &[String]) -> Result<Vec<Secret>, String> {
    secrets.iter().map(|s| Secret::parse(s)).collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tamper {
    kind: String,
    id: Value,
    content: Value,
}

/// `POST /_receiver/tamper` `{"kind": "organization", "id": "42", "content": {...}}`: replace what
/// is held for that recipient, keeping its generation, so read-back finds drift.
pub async fn tamper(app: web::Data<AppState>, body: web::Bytes) -> ApiResult<HttpResponse> {
    let asked: Tamper = json_body(&body, r#"{"kind": "organization", "id": "42", "content": {}}"#)?;
    let id = recipient_id(&asked.id)?;
    let mut held = app.held();
    match held.tamper(&asked.kind, &id, asked.content, chrono::Utc::now()) {
        Some(recipient) => Ok(HttpResponse::Ok().json(recipient.to_json())),
        None => Err(ApiError::not_found(format!(
            "The receiver holds nothing for {} {id}, so there is nothing to tamper with.",
            asked.kind
        ))),
    }
}

/// `POST /_receiver/reset`: forget every recipient, webhook id, counter and fault; keep the
/// secrets.
pub async fn reset(app: web::Data<AppState>) -> HttpResponse {
    app.reset();
    HttpResponse::Ok().json(app.snapshot())
}
