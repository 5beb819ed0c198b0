//! The HTTP layer: one listener for the sites (by `Host`) and the API (every other host).

use std::net::TcpListener;
use std::sync::{Arc, Mutex, MutexGuard};

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpResponse, HttpServer, ResponseError, guard, web};

use crate::control::{self, Faults};
use crate::domain::site_host;
use crate::error;
use crate::farm::Farm;
use crate::{api, proxy};
use standin_http::{loopback_only, method_not_allowed};

/// Everything a request handler needs.
pub struct AppState {
    pub farm: Arc<Farm>,
    pub token: String,
    pub faults: Mutex<Faults>,
    /// Where active sites' requests go, or the sentence a visitor gets when there is no `wiki`.
    pub wiki_url: Result<String, String>,
    pub proxy: reqwest::Client,
    pub keys: crate::secrets::Keys,
    /// The entry credentials used so far.
    pub nonces: crate::entry::Nonces,
    /// How long an edit session stands on the console's last confirmation.
    pub confirm_every: std::time::Duration,
    /// The latest API calls, with the caller's request id (`GET /_farm/calls`).
    pub calls: Mutex<std::collections::VecDeque<ApiCall>>,
}

/// An API call as the farm logged it: what was asked, and the caller's `x-request-id`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ApiCall {
    pub method: String,
    pub path: String,
    pub request_id: Option<String>,
}

/// How many API calls `/_farm/calls` keeps.
const CALLS_KEPT: usize = 500;

impl AppState {
    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Log an API call with the caller's request id, and keep it for `/_farm/calls`.
    fn note_call(&self, call: ApiCall) {
        tracing::info!(request_id = call.request_id.as_deref(), method = %call.method, path = %call.path, "an API call");
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.len() == CALLS_KEPT {
            calls.pop_front();
        }
        calls.push_back(call);
    }

    pub fn calls(&self) -> Vec<ApiCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }
}

pub fn build(listener: TcpListener, state: AppState) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(state);
    let server = HttpServer::new(move || {
        let farm_domain = data.farm.farm_domain.clone();
        let is_site = guard::fn_guard(move |ctx| {
            let host = ctx.head().headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or_default();
            site_host(host, &farm_domain).is_some()
        });
        App::new()
            .app_data(data.clone())
            // wiki accepts uploads up to 5 MB; pages and their JSON are far smaller.
            .app_data(web::PayloadConfig::new(16 << 20))
            .service(web::scope("").guard(is_site).default_service(web::to(proxy::serve)))
            .service(
                web::scope("/api")
                    .wrap(from_fn(api_gate))
                    .service(web::resource("/sites").get(api::list).default_service(web::to(method_not_allowed)))
                    .service(
                        web::resource("/sites/{domain}")
                            .get(api::show)
                            .put(api::create)
                            .delete(api::delete)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .service(
                        web::resource("/sites/{domain}/status")
                            .put(api::set_status)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .default_service(web::to(not_found)),
            )
            .service(
                web::scope("/_farm")
                    .wrap(from_fn(|req, next| loopback_only("The farm's", req, next)))
                    .service(web::resource("/faults").post(control::set_faults).delete(control::clear_faults))
                    .service(web::resource("/callbacks").get(control::callbacks))
                    .service(web::resource("/calls").get(control::calls))
                    .default_service(web::to(not_found)),
            )
            .default_service(web::to(not_found))
    })
    .workers(2)
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(server)
}

/// Every `/api` call: the bearer token first, then any injected delay and failure, and after the
/// call any held answer.
async fn api_gate(
    req: ServiceRequest,
    next: Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(app) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(req.into_response(HttpResponse::InternalServerError().finish()));
    };
    let given =
        req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if !given.is_some_and(|t| constant_time_eq(t.trim().as_bytes(), app.token.as_bytes())) {
        return Ok(req.into_response(error::no_token().error_response()));
    }
    // The caller's request id, as the console sends it (`x-request-id`; the console's own rule:
    // up to 64 letters, digits and dashes), so one member's action can be followed here.
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .map(str::to_string);
    app.note_call(ApiCall { method: req.method().to_string(), path: req.path().to_string(), request_id });
    let faults = app.faults().take_for_call(req.method().as_str());
    if !faults.delay.is_zero() {
        tokio::time::sleep(faults.delay).await;
    }
    if let Some(failure) = faults.failure {
        return Ok(req.into_response(failure.error_response()));
    }
    let answer = next.call(req).await?.map_into_boxed_body();
    if !faults.hold_answer.is_zero() {
        tokio::time::sleep(faults.hold_answer).await;
    }
    Ok(answer)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    standin_http::no_route("The farm", &req)
}
