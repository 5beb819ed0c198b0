//! The HTTP layer: authentication, `Request-Id`, injected faults, idempotency keys and
//! `expand[]`, wrapped around the synchronous API handlers in `api`.

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::Mutex;
use std::time::Duration;

use actix_web::dev::Service;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::ids::new_id;
use crate::state::{Store, StoredAnswer};
use crate::webhooks::Dispatcher;
use crate::{API_VERSION, api, form, page, params};

/// Everything a request handler needs.
pub struct AppState {
    pub store: Store,
    pub hooks: Dispatcher,
    pub secret_key: Option<String>,
    /// The latest API calls, with the caller's request id (`GET /_standin/calls`).
    pub calls: Mutex<VecDeque<ApiCall>>,
}

/// An API call as the stand-in logged it: what was asked, the caller's `x-request-id` and
/// `traceparent` (a console sends them so one member's action can be followed here), the
/// idempotency key, and the answer's status and `Request-Id`.
#[derive(Debug, Clone, Serialize)]
pub struct ApiCall {
    pub method: String,
    pub path: String,
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: u16,
    pub stripe_request_id: String,
}

/// How many API calls `/_standin/calls` keeps.
const CALLS_KEPT: usize = 1000;

impl AppState {
    fn note_call(&self, call: ApiCall) {
        tracing::info!(
            request_id = call.request_id.as_deref(),
            method = %call.method,
            path = %call.path,
            status = call.status,
            "a Stripe API call"
        );
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.len() == CALLS_KEPT {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    fn calls(&self) -> Value {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let data = serde_json::to_value(calls.iter().collect::<Vec<_>>()).unwrap_or_default();
        serde_json::json!({ "object": "list", "data": data, "has_more": false, "url": "/_standin/calls" })
    }
}

/// A header's text, when it is short, visible ASCII.
fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 256)
        .map(str::to_string)
}

pub fn build(
    listener: TcpListener,
    store: Store,
    hooks: Dispatcher,
    secret_key: Option<String>,
) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(AppState { store, hooks, secret_key, calls: Mutex::default() });
    let server = HttpServer::new(move || {
        App::new()
            // Every answer carries a `Request-Id`, including the pages and actix's own 404/405s.
            .wrap_fn(|req, srv| {
                let answer = srv.call(req);
                async move {
                    let mut res = answer.await?;
                    if !res.headers().contains_key("request-id")
                        && let Ok(v) = HeaderValue::from_str(&new_id("req"))
                    {
                        res.headers_mut().insert(HeaderName::from_static("request-id"), v);
                    }
                    Ok(res)
                }
            })
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(1 << 20))
            .route("/c/pay/{id}", web::get().to(page::show_checkout))
            .route("/c/pay/{id}", web::post().to(page::submit_checkout))
            .route("/i/{id}", web::get().to(page::show_invoice))
            .route("/i/{id}", web::post().to(page::submit_invoice))
            .default_service(web::to(api_entry))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(server)
}

/// A finished answer, before headers are attached.
struct Answer {
    status: StatusCode,
    body: String,
    replayed: bool,
}

impl Answer {
    fn error(e: &ApiError) -> Self {
        Self { status: e.status, body: pretty(&e.body()), replayed: false }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

async fn api_entry(req: HttpRequest, body: web::Bytes, app: web::Data<AppState>) -> HttpResponse {
    let request_id = new_id("req");
    let answer = serve(&req, &body, &app, &request_id).await;
    if req.path() != "/_standin/calls" {
        app.note_call(ApiCall {
            method: req.method().to_string(),
            path: req.path().to_string(),
            request_id: header(&req, "x-request-id"),
            traceparent: header(&req, "traceparent"),
            idempotency_key: header(&req, "idempotency-key"),
            status: answer.status.as_u16(),
            stripe_request_id: request_id.clone(),
        });
    }
    let mut resp = HttpResponse::build(answer.status);
    resp.insert_header(("Request-Id", request_id))
        .insert_header(("Stripe-Version", API_VERSION))
        .content_type("application/json");
    if answer.replayed {
        resp.insert_header(("Idempotent-Replayed", "true"));
    }
    resp.body(answer.body)
}

async fn serve(req: &HttpRequest, body: &[u8], app: &AppState, request_id: &str) -> Answer {
    let path = req.path().to_string();
    let method = req.method().clone();
    if let Err(e) = authenticate(req, app.secret_key.as_deref()) {
        return Answer::error(&e);
    }
    if method == Method::GET && path == "/_standin/calls" {
        return Answer { status: StatusCode::OK, body: pretty(&app.calls()), replayed: false };
    }
    if !path.starts_with("/_standin/")
        && let Some(e) = injected_fault(app, method.as_str(), &path).await
    {
        return Answer::error(&e);
    }
    let raw = if method == Method::POST {
        match std::str::from_utf8(body) {
            Ok(s) => s.to_string(),
            Err(_) => return Answer::error(&ApiError::bad_request("The request body must be UTF-8.")),
        }
    } else {
        req.query_string().to_string()
    };
    let params = match form::parse(&raw) {
        Ok(p) => p,
        Err(e) => return Answer::error(&ApiError::bad_request(e.0)),
    };
    let idempotency_key = (method == Method::POST)
        .then(|| req.headers().get("Idempotency-Key"))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Compare parameters, not bytes: clients encode the same form differently.
    let fingerprint = format!("{method} {path}\n{params}");

    let mut st = app.store.lock();
    if let Some(key) = &idempotency_key
        && let Some(stored) = st.idempotency.get(key)
    {
        if stored.fingerprint == fingerprint {
            let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
            return Answer { status, body: stored.body.clone(), replayed: true };
        }
        return Answer::error(&ApiError::idempotency(format!(
            "Keys for idempotent requests can only be used with the same parameters they were first used with. \
                 Try using a key other than '{key}' if you meant to execute a different request."
        )));
    }
    st.current_request = Some((request_id.to_string(), idempotency_key.clone()));
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let result = api::route(&mut st, &app.hooks, &method, &segments, &params);
    app.hooks.flush(&mut st);
    st.current_request = None;
    let answer = match result {
        Ok(mut value) => {
            if let Some(paths) = params.get("expand").and_then(Value::as_array) {
                let paths: Vec<String> = paths.iter().filter_map(|p| p.as_str().map(str::to_string)).collect();
                let inner = &*st;
                params::expand(&mut value, &paths, &|id| inner.lookup_any(id));
            }
            Answer { status: StatusCode::OK, body: pretty(&value), replayed: false }
        }
        Err(e) => Answer::error(&e),
    };
    // Stripe saves the answer for a key unless the request failed on its side (5xx).
    if let Some(key) = idempotency_key
        && !answer.status.is_server_error()
    {
        let stored = StoredAnswer { fingerprint, status: answer.status.as_u16(), body: answer.body.clone() };
        st.idempotency.insert(key, stored);
    }
    answer
}

/// `Authorization: Bearer sk_test_…` (or Basic with the key as user name, as `curl -u` sends
/// it): the configured key exactly, or any test key.
fn authenticate(req: &HttpRequest, expected: Option<&str>) -> Result<(), ApiError> {
    let header = req.headers().get("Authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    let key = if let Some(bearer) = header.strip_prefix("Bearer ") {
        Some(bearer.trim().to_string())
    } else {
        header
            .strip_prefix("Basic ")
            .and_then(|b| base64_decode(b.trim()))
            .map(|user_pass| user_pass.split(':').next().unwrap_or_default().to_string())
    };
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return Err(ApiError::unauthorized(
            "You did not provide an API key. You need to provide your API key in the Authorization header, \
             using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        ));
    };
    let key = key.as_str();
    let accepted = match expected {
        Some(expected) => key == expected,
        None => key.starts_with("sk_test_"),
    };
    if accepted { Ok(()) } else { Err(ApiError::unauthorized(format!("Invalid API Key provided: {}", redact(key)))) }
}

/// Standard base64 (with or without padding) to UTF-8; `None` for anything malformed.
fn base64_decode(input: &str) -> Option<String> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in input.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).ok()
}

fn redact(key: &str) -> String {
    let tail: String = key.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{}****{tail}", key.chars().take(8).collect::<String>())
}

/// Apply the first matching injected fault: wait, then fail if it says so. A fault that names a
/// method matches only it; one with `skip` lets that many matching requests through first.
async fn injected_fault(app: &AppState, method: &str, path: &str) -> Option<ApiError> {
    let fault = {
        let mut st = app.store.lock();
        let fault = st.faults.iter_mut().find(|f| {
            f.times > 0 && path.starts_with(&f.path_prefix) && f.method.as_deref().is_none_or(|m| m == method)
        })?;
        if fault.skip > 0 {
            fault.skip -= 1;
            return None;
        }
        fault.times -= 1;
        fault.clone()
    };
    if let Some(ms) = fault.delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let status = fault.status.and_then(|s| StatusCode::from_u16(s).ok())?;
    Some(ApiError::injected(status))
}
