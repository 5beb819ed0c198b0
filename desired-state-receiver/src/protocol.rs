//! The wire protocol of docs/desired-state.md: `POST /desired-state` (a push or a test) and
//! `GET /desired-state?recipient_kind=…&recipient_id=…` (read-back), both signed: a push over its
//! body, a read-back over its request target.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::server::AppState;
use crate::state::Push;
use standin_http::{ApiError, ApiResult};

pub const UPDATED: &str = "desired_state.updated";
pub const TEST: &str = "desired_state.test";

#[derive(Deserialize)]
struct Updated {
    recipient: RecipientRef,
    generation: u64,
    content: Value,
}

#[derive(Deserialize)]
struct RecipientRef {
    kind: String,
    id: Value,
}

/// A recipient id as sent: a string, or a number taken as its decimal text.
pub fn recipient_id(id: &Value) -> ApiResult<String> {
    let id = match id {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(ApiError::bad_request(format!("A recipient id must be a string or a number, not {other}.")));
        }
    };
    if id.is_empty() {
        return Err(ApiError::bad_request("A recipient id must not be empty."));
    }
    Ok(id)
}

fn parse_updated(body: &[u8]) -> ApiResult<Push> {
    let updated: Updated = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "A {UPDATED} push must carry recipient {{kind, id}}, generation and content; this one does not: {e}."
        ))
    })?;
    if updated.recipient.kind.is_empty() {
        return Err(ApiError::bad_request("A recipient kind must not be empty."));
    }
    if updated.generation == 0 {
        return Err(ApiError::bad_request("A push's generation starts at 1; this one is 0."));
    }
    Ok(Push {
        kind: updated.recipient.kind,
        id: recipient_id(&updated.recipient.id)?,
        generation: updated.generation,
        content: updated.content,
    })
}

/// `POST /desired-state`: wait out any injected delay, verify the signature over the raw body,
/// meet any injected failure, then record a test or apply an update (unless its webhook id is a
/// repeat or its generation is older than the one held). Answers `{"generation": <held after>}`.
pub async fn push(req: HttpRequest, body: web::Bytes, app: web::Data<AppState>) -> ApiResult<HttpResponse> {
    let _in_flight = app.enter();
    let delay = app.faults().delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(moved) = redirect(&app) {
        return Ok(moved);
    }
    let webhook_id = app.authenticate(&req, &body)?;
    app.held().counters.pushes += 1;
    let failure = app.faults().take_failure();
    if let Some(failure) = failure {
        return Err(failure);
    }
    let event: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("A push's body must be a JSON object; this one is not: {e}.")))?;
    match event.get("type").and_then(Value::as_str) {
        Some(TEST) => {
            app.held().record_test(&webhook_id, event);
            Ok(HttpResponse::Ok().json(json!({ "ok": true })))
        }
        Some(UPDATED) => {
            let push = parse_updated(&body)?;
            let (kind, id, pushed) = (push.kind.clone(), push.id.clone(), push.generation);
            let (outcome, held) = app.held().apply(&webhook_id, push, chrono::Utc::now());
            let lie = outcome.applied() && app.faults().take_stale();
            let answered = if lie { Some(pushed - 1) } else { held };
            // Debug, not info: a rule change pushes thousands at once; its page shows what it holds.
            tracing::debug!(%webhook_id, %kind, %id, pushed, ?outcome, ?answered, "a desired-state push");
            Ok(HttpResponse::Ok().json(match answered {
                Some(generation) => json!({ "generation": generation }),
                // Only a repeat for a recipient forgotten since (a reset) holds nothing to report.
                None => json!({}),
            }))
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "The receiver knows the event types {UPDATED} and {TEST}, not {other:?}."
        ))),
        None => Err(ApiError::bad_request("A push must be a JSON object with a string \"type\".")),
    }
}

/// The 302 an injected redirect answers with, before anything is verified or applied.
fn redirect(app: &AppState) -> Option<HttpResponse> {
    let to = app.faults().redirect_to.clone()?;
    Some(HttpResponse::Found().insert_header(("location", to)).finish())
}

#[derive(Deserialize)]
struct ReadBack {
    recipient_kind: String,
    recipient_id: String,
}

/// `GET /desired-state?recipient_kind=organization&recipient_id=42`, signed over its request
/// target (the path and the query as the request line carries them) in the body's place: what the
/// receiver holds for that recipient, or 404. A query changed under the signature is refused.
pub async fn read_back(req: HttpRequest, app: web::Data<AppState>) -> ApiResult<HttpResponse> {
    if let Some(moved) = redirect(&app) {
        return Ok(moved);
    }
    let target = req.uri().path_and_query().map_or_else(|| req.uri().path(), |p| p.as_str());
    app.authenticate(&req, target.as_bytes())?;
    let query = web::Query::<ReadBack>::from_query(req.query_string()).map_err(|e| {
        ApiError::bad_request(format!(
            "Read-back needs ?recipient_kind=…&recipient_id=… in its query; this one does not: {e}."
        ))
    })?;
    let mut held = app.held();
    held.counters.read_backs += 1;
    match held.get(&query.recipient_kind, &query.recipient_id) {
        Some(r) => Ok(HttpResponse::Ok().json(json!({ "generation": r.generation, "content": r.content }))),
        None => Err(ApiError::not_found(format!(
            "The receiver holds nothing for {} {}.",
            query.recipient_kind, query.recipient_id
        ))),
    }
}
