//! `POST /webhooks/stripe`: Stripe's signed events. The signature is checked on the raw body
//! before anything else is read (400 and nothing written when it is missing, foreign, tampered
//! or outside the tolerance); then the event is recorded once by its id and its job enqueued,
//! and the answer goes back at once. Answers are plain text: Stripe, not a person, reads them.

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;

use crate::{
    services::{ServiceError, billing},
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
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let Ok(chunk) = chunk else { return plain(StatusCode::BAD_REQUEST, "the body could not be read") };
        if body.len() + chunk.len() > MAX_BODY {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "the body is larger than a Stripe event can be");
        }
        body.extend_from_slice(&chunk);
    }
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
