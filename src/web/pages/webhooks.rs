//! `POST /webhooks/stripe`: Stripe's signed events. The signature is checked on the raw body
//! before anything else is read (400 and nothing written when it is missing, foreign, tampered
//! or outside the tolerance); then the event is recorded once by its id and its job enqueued,
//! and the answer goes back at once. Answers are plain text: Stripe, not a person, reads them.
//!
//! `POST /farm/callbacks`: the farm's signed callbacks, the same way: the signature over the
//! timestamp and the raw body first, then the observation recorded once by its id.
//!
//! `POST /farm/edit-sessions/confirm`: the farm's question whether a member may still edit a
//! site, signed as the callbacks are and checked the same way first; answered `{"allowed": …}`.

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;

use crate::{
    services::{ServiceError, billing, fedwiki},
    web::AppState,
};

/// Stripe's events are far smaller; anything larger is not one.
pub const MAX_BODY: usize = 1 << 20;

fn plain(status: actix_web::http::StatusCode, body: &str) -> HttpResponse {
    HttpResponse::build(status).content_type("text/plain; charset=utf-8").body(format!("{body}\n"))
}

#[tracing::instrument(name = "Webhook: Stripe", skip_all)]
pub async fn stripe(req: HttpRequest, state: web::Data<AppState>, mut payload: web::Payload) -> HttpResponse {
    use actix_web::http::StatusCode;
    let unconfigured = "Stripe is not configured on this console";
    let (stripe, body) = match delivery(state.stripe.as_deref(), unconfigured, &mut payload, "a Stripe event").await {
        Ok(d) => d,
        Err(answer) => return answer,
    };
    let header = req.headers().get("Stripe-Signature").and_then(|v| v.to_str().ok());
    if let Err(e) = stripe.verify_webhook(header, &body) {
        tracing::warn!(error = %e, "a webhook's signature was refused");
        return plain(StatusCode::BAD_REQUEST, &format!("signature refused: {e}"));
    }
    let received = billing::receive_event(&state.db, &body).await;
    recorded("webhook", received, |r| match r {
        billing::events::Received::Recorded { jobs } => format!("recorded; {jobs} job(s) enqueued"),
        billing::events::Received::Duplicate => "already recorded".into(),
    })
}

/// A delivery's body, when the system that signs it is connected: the system and the raw body, or
/// the answer to send (503 when it is not connected, else `raw_body`'s).
async fn delivery<'a, S>(
    system: Option<&'a S>,
    unconfigured: &str,
    payload: &mut web::Payload,
    what: &str,
) -> Result<(&'a S, web::BytesMut), HttpResponse> {
    let Some(system) = system else {
        return Err(plain(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, unconfigured));
    };
    Ok((system, raw_body(payload, what).await?))
}

/// A verified delivery's answer: what was recorded (`said`), its content refused (400), or a
/// database that failed (503: the sender tries again later on any non-2xx).
fn recorded<T>(what: &str, outcome: Result<T, ServiceError>, said: impl FnOnce(T) -> String) -> HttpResponse {
    use actix_web::http::StatusCode;
    match outcome {
        Ok(t) => plain(StatusCode::OK, &said(t)),
        Err(ServiceError::Invalid(problems)) => {
            plain(StatusCode::BAD_REQUEST, &problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        Err(e) => {
            tracing::error!(error = %e, "a verified {what} could not be recorded");
            plain(StatusCode::SERVICE_UNAVAILABLE, "not recorded; try again")
        }
    }
}

/// The raw body, up to `MAX_BODY`; the answer to send when it cannot be read or is too large.
async fn raw_body(payload: &mut web::Payload, what: &str) -> Result<web::BytesMut, HttpResponse> {
    use actix_web::http::StatusCode;
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let Ok(chunk) = chunk else { return Err(plain(StatusCode::BAD_REQUEST, "the body could not be read")) };
        if body.len() + chunk.len() > MAX_BODY {
            return Err(plain(StatusCode::PAYLOAD_TOO_LARGE, &format!("the body is larger than {what} can be")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[tracing::instrument(name = "Callback: the farm", skip_all)]
pub async fn farm(req: HttpRequest, state: web::Data<AppState>, mut payload: web::Payload) -> HttpResponse {
    use actix_web::http::StatusCode;
    let body = match from_the_farm(&req, &state, &mut payload, "a farm callback").await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let callback: fedwiki::FarmCallback = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("the callback could not be read: {e}")),
    };
    let received = fedwiki::receive_farm_callback(&state.db, &callback).await;
    recorded("farm callback", received, |r| match r {
        fedwiki::Received::Recorded { observed, nudged } => {
            format!("recorded; {} observed; {nudged} request(s) nudged", if observed { "site" } else { "nothing" })
        }
        fedwiki::Received::Duplicate => "already recorded".into(),
    })
}

/// The farm's request, once its signature over the raw body is checked: the body, or the answer.
async fn from_the_farm(
    req: &HttpRequest,
    state: &AppState,
    payload: &mut web::Payload,
    what: &str,
) -> Result<web::BytesMut, HttpResponse> {
    use actix_web::http::StatusCode;
    let unconfigured = "the farm is not configured on this console";
    let (farm, body) = delivery(state.farm.as_deref(), unconfigured, payload, what).await?;
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = crate::integrations::farm::signature::verify(
        header("Farm-Timestamp"),
        header("Farm-Signature"),
        &body,
        farm.callback_secret(),
        now,
    ) {
        tracing::warn!(error = %e, "{what}'s signature was refused");
        return Err(plain(StatusCode::BAD_REQUEST, &format!("signature refused: {e}")));
    }
    Ok(body)
}

#[tracing::instrument(name = "Farm: confirm an edit session", skip_all)]
pub async fn confirm_edit_session(
    req: HttpRequest,
    state: web::Data<AppState>,
    mut payload: web::Payload,
) -> HttpResponse {
    use actix_web::http::StatusCode;
    let body = match from_the_farm(&req, &state, &mut payload, "a farm edit-session question").await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let question: fedwiki::entry::EditSessionQuestion = match serde_json::from_slice(&body) {
        Ok(q) => q,
        Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("the question could not be read: {e}")),
    };
    match fedwiki::entry::confirm_edit_session(&state.db, &question).await {
        Ok(allowed) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "no-store"))
            .json(serde_json::json!({ "allowed": allowed })),
        Err(ServiceError::Invalid(problems)) => {
            plain(StatusCode::BAD_REQUEST, &problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        Err(e) => {
            tracing::error!(error = %e, "an edit session could not be confirmed");
            plain(StatusCode::SERVICE_UNAVAILABLE, "not answered; try again")
        }
    }
}
