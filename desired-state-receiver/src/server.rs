//! The HTTP layer: the protocol at `/desired-state`, the page at `/`, the controls at
//! `/_receiver/`, and the state every handler shares.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use actix_web::middleware::from_fn;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::Value;

use crate::control::{self, Faults};
use crate::signature::{self, Secret, Signed};
use crate::state::Held;
use crate::{page, protocol};
use standin_http::{ApiError, ApiResult, loopback_only, method_not_allowed};

/// Everything a request handler needs.
pub struct AppState {
    pub held: Mutex<Held>,
    pub secrets: Mutex<Vec<Secret>>,
    pub faults: Mutex<Faults>,
    /// How far a request's timestamp may be from the receiver's clock.
    pub tolerance: Duration,
    /// Pushes being handled now, and the most there were at once.
    pub in_flight: AtomicUsize,
    pub in_flight_max: AtomicUsize,
}

/// Counts one push in flight until dropped.
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AppState {
    pub fn new(secrets: Vec<Secret>, tolerance: Duration) -> AppState {
        AppState {
            held: Mutex::default(),
            secrets: Mutex::new(secrets),
            faults: Mutex::default(),
            tolerance,
            in_flight: AtomicUsize::new(0),
            in_flight_max: AtomicUsize::new(0),
        }
    }

    // A handler that panicked mid-update leaves the data as consistent as any single statement
    // left it, so a poisoned lock is used as it is.
    pub fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn secrets(&self) -> MutexGuard<'_, Vec<Secret>> {
        self.secrets.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count a push in flight (and the most at once) for as long as the guard lives.
    pub fn enter(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.in_flight_max.fetch_max(now, Ordering::SeqCst);
        InFlight(&self.in_flight)
    }

    /// Check the Standard Webhooks headers of `req` over `body`; answers its `webhook-id`, or
    /// the 401 a refused request gets (counted as rejected).
    pub fn authenticate(&self, req: &HttpRequest, body: &[u8]) -> ApiResult<String> {
        let header =
            |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
        let signed = match (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature")) {
            (Some(id), Some(timestamp), Some(signature)) => Some(Signed { id, timestamp, signature }),
            _ => None,
        };
        let secrets = self.secrets().clone();
        match signature::check(&secrets, self.tolerance, chrono::Utc::now().timestamp(), signed, body) {
            Ok(()) => Ok(signed.map(|s| s.id.to_string()).unwrap_or_default()),
            Err(why) => {
                self.held().counters.rejected += 1;
                tracing::warn!(method = %req.method(), why, "a desired-state request was refused");
                Err(ApiError::unauthorized(why))
            }
        }
    }

    /// The JSON of `GET /_receiver/state`.
    pub fn snapshot(&self) -> Value {
        self.held().snapshot(self.in_flight_max.load(Ordering::SeqCst))
    }

    /// Forget everything but the secrets.
    pub fn reset(&self) {
        *self.held() = Held::default();
        *self.faults() = Faults::default();
        self.in_flight_max.store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

pub fn build(listener: TcpListener, data: web::Data<AppState>) -> std::io::Result<actix_web::dev::Server> {
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            // A push carries one recipient's content; a megabyte is far more than any needs.
            .app_data(web::PayloadConfig::new(1 << 20))
            .service(web::resource("/").get(page::index).default_service(web::to(method_not_allowed)))
            .service(
                web::resource("/desired-state")
                    .post(protocol::push)
                    .get(protocol::read_back)
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::scope("/_receiver")
                    .wrap(from_fn(|req, next| loopback_only("The receiver's", req, next)))
                    .service(web::resource("/state").get(control::state).default_service(web::to(method_not_allowed)))
                    .service(
                        web::resource("/faults")
                            .post(control::set_faults)
                            .delete(control::clear_faults)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .service(
                        web::resource("/secrets")
                            .post(control::set_secrets)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .service(
                        web::resource("/tamper").post(control::tamper).default_service(web::to(method_not_allowed)),
                    )
                    .service(web::resource("/reset").post(control::reset).default_service(web::to(method_not_allowed)))
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

async fn not_found(req: HttpRequest) -> HttpResponse {
    standin_http::no_route("The receiver", &req)
}
