//! The Stripe stand-in: a stateful, local server speaking the parts of Stripe's API (version
//! 2026-09-30.endive) the console uses — customers, products, prices, checkout sessions with a
//! hosted payment page, subscriptions (with prorations), invoices and invoice previews, events,
//! signed webhooks and test clocks — plus a small control API (`/_standin/…`) for tests to inject
//! faults and reorder deliveries.
//!
//! Start it in-process with [`StandIn::start`] or run the `stripe-standin` binary.

#![recursion_limit = "512"]

mod api;
mod billing;
mod clock;
mod error;
mod events;
pub mod form;
mod ids;
mod page;
mod params;
mod proration;
mod server;
mod state;
pub mod status;
pub mod webhooks;

use std::net::SocketAddr;
use std::time::Duration;

/// The Stripe API version whose object shapes the stand-in answers with.
pub const API_VERSION: &str = "2026-09-30.endive";

/// How to run the stand-in.
#[derive(Debug, Clone)]
pub struct Config {
    /// The only accepted secret key; `None` accepts any key starting `sk_test_`.
    pub secret_key: Option<String>,
    /// Waits between webhook delivery attempts; empty means a failed delivery is not retried.
    pub webhook_retry: Vec<Duration>,
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            secret_key: None,
            webhook_retry: [1, 2, 4, 8, 16].into_iter().map(Duration::from_secs).collect(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// A running stand-in.
pub struct StandIn {
    base_url: String,
    handle: actix_web::dev::ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    hooks: webhooks::Dispatcher,
    store: state::Store,
}

impl StandIn {
    /// Bind `config.listen` and serve in the background on the current tokio runtime.
    pub async fn start(config: Config) -> std::io::Result<StandIn> {
        let listener = std::net::TcpListener::bind(config.listen)?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let log = webhooks::DeliveryLog::default();
        let store = state::Store::new(base_url.clone());
        let hooks = webhooks::Dispatcher::new(tokio::runtime::Handle::current(), config.webhook_retry, log);
        let server = server::build(listener, store.clone(), hooks.clone(), config.secret_key)?;
        let handle = server.handle();
        let task = tokio::spawn(server);
        Ok(StandIn { base_url, handle, task, hooks, store })
    }

    /// e.g. `http://127.0.0.1:41234`, without a trailing slash.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Register a webhook endpoint for every event type, as `POST /v1/webhook_endpoints` would,
    /// without a round trip (a console starting the stand-in in its own process registers
    /// itself); the endpoint's signing secret.
    pub fn add_webhook_endpoint(&self, url: &str) -> Result<String, String> {
        let params = serde_json::json!({ "url": url, "enabled_events": ["*"] });
        let mut inner = self.store.lock();
        let answer = api::create_webhook_endpoint(&mut inner, &self.hooks, &params).map_err(|e| format!("{e:?}"))?;
        answer["secret"].as_str().map(str::to_string).ok_or_else(|| "no secret in the answer".to_string())
    }

    /// Stop serving and abandon pending webhook deliveries.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        self.hooks.stop();
        // The server's own result is only interesting while it runs.
        let _ = self.task.await;
    }
}
