//! `POST /webhooks/stripe`: Stripe's signed events. The signature is checked on the raw body
//! before anything else is read (400 and nothing written when it is missing, foreign, tampered
//! or outside the tolerance); then the event is recorded once by its id and its job enqueued,
//! and the answer goes back at once. Answers are plain text: Stripe, not a person, reads them.
//!
//! `POST /farm/callbacks`: the farm's signed callbacks, the same way: the signature over the
//! timestamp and the raw body first, then the observation recorded once by its id.

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
    let Some(stripe) = state.stripe.as_ref() else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Stripe is not configured on this console");
    };
    let body = match raw_body(&mut payload, "a Stripe event").await {
        Ok(b) => b,
        Err(answer) => return answer,
    };
    let header = req.headers().get("Stripe-Signature").and_then(|v| v.to_str().ok());
    if let Err(e) = stripe.verify_webhook(header, &body) {
        tracing::warn!(error = %e, "a webhook's signature was refused");
        return plain(StatusCode::BAD_REQUEST, &format!("signature refused: {e}"));
    }
    match billing::receive_event(&state.db, &body).await {
        Ok(billing::events::Received::Recorded { jobs }) => {
            plain(StatusCode::OK, &format!("recorded; {jobs} job(s) enqueued"))
        }
        Ok(billing::events::Received::Duplicate) => plain(StatusCode::OK, "already recorded"),
        Err(ServiceError::Invalid(problems)) => {
            plain(StatusCode::BAD_REQUEST, &problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        // Stripe tries again later on any non-2xx: the right answer to a database that failed.
        Err(e) => {
            tracing::error!(error = %e, "a verified webhook could not be recorded");
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
    let Some(farm) = state.farm.as_ref() else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "the farm is not configured on this console");
    };
    let body = match raw_body(&mut payload, "a farm callback").await {
        Ok(b) => b,
        Err(answer) => return answer,
    };
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = crate::integrations::farm::signature::verify(
        header("Farm-Timestamp"),
        header("Farm-Signature"),
        &body,
        farm.callback_secret(),
        now,
    ) {
        tracing::warn!(error = %e, "a farm callback's signature was refused");
        return plain(StatusCode::BAD_REQUEST, &format!("signature refused: {e}"));
    }
    let callback: fedwiki::FarmCallback = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("the callback could not be read: {e}")),
    };
    match fedwiki::receive_farm_callback(&state.db, &callback).await {
        Ok(fedwiki::Received::Recorded { observed, nudged }) => plain(
            StatusCode::OK,
            &format!("recorded; {} observed; {nudged} request(s) nudged", if observed { "site" } else { "nothing" }),
        ),
        Ok(fedwiki::Received::Duplicate) => plain(StatusCode::OK, "already recorded"),
        Err(ServiceError::Invalid(problems)) => {
            plain(StatusCode::BAD_REQUEST, &problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        Err(e) => {
            tracing::error!(error = %e, "a verified farm callback could not be recorded");
            plain(StatusCode::SERVICE_UNAVAILABLE, "not recorded; try again")
        }
    }
}
