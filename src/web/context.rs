//! The outermost middleware: a request id, a tracing span, the request's deadline (answered 503
//! past it, its transaction rolled back), and the rendering of errors as pages or partials.

use std::{sync::Arc, time::Instant};

use actix_web::{
    Error, HttpMessage, HttpResponse, ResponseError,
    body::{BoxBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    error::InternalError,
    http::StatusCode,
    http::header::{self, HeaderValue},
    middleware::Next,
    web,
};
use tracing::Instrument;

use super::{AppState, errors::AppError, render};
use crate::{
    db::tx::{REQUEST_DEADLINE, REQUEST_WRITES, WriteLedger},
    metrics,
};

/// The id of this request, in logs, in the `x-request-id` header and on error pages.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    // The route's pattern from the route table (the resource map matches the path before the
    // router does), so even a request that times out is counted under its route.
    let route = req.match_pattern().unwrap_or_else(|| metrics::UNMATCHED.to_string());
    let method = metrics::method_label(req.method());
    let started = Instant::now();
    let (out, lock_refused) = metrics::watching_lock_waits(answer(req, next)).await;
    let status = match &out {
        Ok(res) => res.status(),
        Err(e) => e.as_response_error().status_code(),
    };
    let registry = metrics::global();
    registry.request(&route, method, status.as_u16(), started.elapsed());
    if lock_refused && status == StatusCode::CONFLICT {
        registry.lock_refusal(&format!("{method} {route}"));
    }
    out
}

async fn answer(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .map(str::to_string)
        .unwrap_or_else(|| crate::config::random_hex(8));
    req.extensions_mut().insert(RequestId(id.clone()));
    let timeout = req.app_data::<web::Data<AppState>>().map(|s| s.config.request_timeout).unwrap_or_default();
    let https = req.app_data::<web::Data<AppState>>().is_some_and(|s| s.config.secure_cookies());
    let ledger = Arc::new(WriteLedger::default());
    // No clone of the request may live across the call (the router needs it unshared), so what
    // a detached error page needs is taken now.
    let hx = render::is_htmx(req.request());
    // The route (the table's pattern the router matched) and the account are filled in once
    // known, so every line of a request says which handler ran and for whom.
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.path(),
        route = tracing::field::Empty,
        account_id = tracing::field::Empty,
    );
    let started = Instant::now();
    let deadline = started + timeout;

    // An address carrying a control character (a NUL, say, which PostgreSQL refuses in text)
    // names nothing the console holds: refused here, before any handler reads or looks it up.
    // A query may carry a form sent by GET (a preview's fields): a tab or a line break there is the
    // form's to judge, as in a posted one.
    if control_character_in(req.path(), false) || control_character_in(req.query_string(), true) {
        let message = "This address holds a control character, which no address of the console has, so nothing \
                       was read or changed. Check the link.";
        let e = AppError::BadRequest(message.into());
        return Err(detached_with(hx, https, e.status_code(), "This address cannot be read", message, &id, e));
    }
    let outcome = tokio::time::timeout(
        timeout,
        crate::trace_context::scope(
            id.clone(),
            REQUEST_DEADLINE.scope(deadline, REQUEST_WRITES.scope(ledger.clone(), next.call(req))),
        ),
    )
    .instrument(span.clone())
    .await;
    let mut res = match outcome {
        Ok(Ok(res)) => res.map_into_boxed_body(),
        Ok(Err(e)) => {
            span.in_scope(|| tracing::error!(error = ?e, "request failed before its handler"));
            return Err(detached(hx, https, e.as_response_error().status_code(), &e.to_string(), &id));
        }
        // Dropping the handler's future drops its transaction, which rolls back; the server-side
        // statement timeout (REQUEST_DEADLINE) ends any wait it was in.
        Err(_) => {
            span.in_scope(|| tracing::warn!(elapsed_ms = started.elapsed().as_millis() as u64, "request timed out"));
            let (title, _) = AppError::Timeout.title_and_message();
            let message = AppError::timeout_message(ledger.saved());
            return Err(detached_with(
                hx,
                https,
                AppError::Timeout.status_code(),
                &title,
                &message,
                &id,
                AppError::Timeout,
            ));
        }
    };

    if let Some(route) = res.request().match_pattern() {
        span.record("route", route.as_str());
    }
    let status = res.status();
    // An error answered with a redirect keeps it as it is (a member page's extractor sends a
    // visitor to sign in that way).
    let redirects = res.headers().contains_key(header::LOCATION) || res.headers().contains_key("hx-redirect");
    if let Some(err) = res.response().error().filter(|_| !redirects) {
        let (title, message, unexpected) = match err.as_error::<AppError>() {
            Some(app) => {
                let (t, mut m) = app.title_and_message();
                if matches!(app, AppError::Timeout) {
                    m = AppError::timeout_message(ledger.saved());
                }
                (t, m, matches!(app, AppError::Unexpected(_)))
            }
            None => {
                let reason = status.canonical_reason().unwrap_or("Error").to_string();
                (reason, err.to_string(), status.is_server_error())
            }
        };
        if unexpected {
            span.in_scope(|| tracing::error!(error = ?err, "request failed"));
        }
        let body = render::error(res.request(), status.as_u16(), &title, &message, &id);
        let (req, _) = res.into_parts();
        res =
            ServiceResponse::new(req, HttpResponse::build(status).content_type("text/html; charset=utf-8").body(body));
    }
    span.in_scope(|| {
        tracing::info!(status = status.as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "answered")
    });
    set_request_id(res.headers_mut(), &id);
    Ok(res)
}

fn set_request_id(headers: &mut header::HeaderMap, id: &str) {
    if let Ok(v) = HeaderValue::from_str(id) {
        headers.insert(header::HeaderName::from_static("x-request-id"), v);
    }
}

/// An error answered without the request at hand (it went into the service chain): the page
/// without navigation, or the partial.
/// Whether `raw` (a path or query as sent, percent-encoded) decodes to a control character:
/// one sent as it is, or as a percent escape of a byte below 0x20 or of 0x7f; a tab, CR or LF
/// only when `spaces_allowed` is false.
fn control_character_in(raw: &str, spaces_allowed: bool) -> bool {
    let b = raw.as_bytes();
    let hex = |c: u8| char::from(c).to_digit(16);
    let control = |v: u32| (v < 0x20 || v == 0x7f) && !(spaces_allowed && matches!(v, 0x09 | 0x0a | 0x0d));
    b.iter().enumerate().any(|(i, &c)| {
        control(u32::from(c))
            || (c == b'%'
                && matches!((b.get(i + 1).and_then(|&h| hex(h)), b.get(i + 2).and_then(|&l| hex(l))),
                    (Some(h), Some(l)) if control(h * 16 + l)))
    })
}

fn detached(hx: bool, https: bool, status: StatusCode, message: &str, id: &str) -> Error {
    let title = status.canonical_reason().unwrap_or("Error").to_string();
    detached_with(hx, https, status, &title, message, id, AppError::BadRequest(message.to_string()))
}

fn detached_with(
    hx: bool,
    https: bool,
    status: StatusCode,
    title: &str,
    message: &str,
    id: &str,
    cause: AppError,
) -> Error {
    let body = render::error_detached(hx, status.as_u16(), title, message, id);
    let mut response = HttpResponse::build(status).content_type("text/html; charset=utf-8").body(body);
    set_request_id(response.headers_mut(), id);
    // Past the middleware that would add them: this answer leaves as an error.
    super::headers::apply(response.headers_mut(), https);
    InternalError::from_response(cause, response).into()
}

#[cfg(test)]
mod tests {
    use super::control_character_in;

    #[test]
    fn an_escaped_or_raw_control_character_is_found_and_nothing_else() {
        for bad in ["/sites/a%00b/status", "q=a%00", "/x%1F", "/x%7f", "/x%0A", "/a\tb"] {
            assert!(control_character_in(bad, false), "{bad}");
        }
        for good in ["/sites/a-b/status", "q=caf%C3%A9", "/x%20y", "/x%7E", "/%", "/x%0", "/x%+1", "/x%G0", ""] {
            assert!(!control_character_in(good, false), "{good}");
        }
        // In a query, a tab or a line break is left to the form that reads it; a NUL is not.
        assert!(!control_character_in("reason=two%0D%0Alines%09tab", true));
        assert!(control_character_in("reason=a%00b", true) && control_character_in("q=%1b", true));
    }
}
