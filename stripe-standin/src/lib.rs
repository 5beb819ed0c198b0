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
mod persist;
mod proration;
mod server;
mod state;
pub mod status;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// Where to listen; port 0 picks a free port (the one of the state file's last run, when
    /// there is one and it is free, so the links given out then still lead here).
    pub listen: SocketAddr,
    /// The file the state is kept in across restarts (read at start, written after changes and
    /// at a clean stop); None keeps it in memory only.
    pub state_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            secret_key: None,
            webhook_retry: [1, 2, 4, 8, 16].into_iter().map(Duration::from_secs).collect(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            state_file: None,
        }
    }
}

/// The metadata mark of the endpoint `StandIn::add_webhook_endpoint` registers, so a restart
/// finds it again even when the console's address changed.
const IN_PROCESS_MARK: &str = "registered_in_process";

/// A running stand-in.
pub struct StandIn {
    base_url: String,
    handle: actix_web::dev::ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    hooks: webhooks::Dispatcher,
    store: state::Store,
    saver: Option<persist::Saver>,
}

impl StandIn {
    /// Bind `config.listen` and serve in the background on the current tokio runtime, with the
    /// state of `config.state_file` when it names one that exists.
    pub async fn start(config: Config) -> std::io::Result<StandIn> {
        let kept = match &config.state_file {
            Some(path) => persist::read(path)?,
            None => None,
        };
        let listener = bind(config.listen, kept.as_ref().map(|k| k.base_url.as_str()))?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let log = webhooks::DeliveryLog::default();
        let hooks = webhooks::Dispatcher::new(tokio::runtime::Handle::current(), config.webhook_retry, log);
        let store = match kept {
            Some(mut inner) => {
                let old = std::mem::take(&mut inner.base_url);
                persist::rebase(&mut inner, &old, &base_url);
                inner.base_url = base_url.clone();
                // The endpoints registered before deliver again, signed with their own secrets.
                for endpoint in inner.endpoints.oldest_first() {
                    let (Some(id), Some(url)) = (endpoint["id"].as_str(), endpoint["url"].as_str()) else { continue };
                    if let Some(secret) = inner.endpoint_secrets.get(id) {
                        hooks.add_endpoint(id, url, secret);
                    }
                }
                state::Store::with(inner)
            }
            None => state::Store::new(base_url.clone()),
        };
        let server = server::build(listener, store.clone(), hooks.clone(), config.secret_key)?;
        let handle = server.handle();
        let task = tokio::spawn(server);
        let saver = config.state_file.map(|path| persist::Saver::start(store.clone(), path));
        Ok(StandIn { base_url, handle, task, hooks, store, saver })
    }

    /// e.g. `http://127.0.0.1:41234`, without a trailing slash.
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Register a webhook endpoint for every event type, as `POST /v1/webhook_endpoints` would,
    /// without a round trip (a console starting the stand-in in its own process registers
    /// itself); the endpoint's signing secret. Once per state, not once per start: the endpoint
    /// registered this way before is reused with its secret, and moved to `url` when the
    /// console's address changed, so a restarted stand-in never piles endpoints up.
    pub fn add_webhook_endpoint(&self, url: &str) -> Result<String, String> {
        let mut inner = self.store.lock();
        let earlier = inner
            .endpoints
            .newest_first()
            .find(|e| e["metadata"][IN_PROCESS_MARK] == "true")
            .and_then(|e| e["id"].as_str().map(str::to_string));
        if let Some(id) = earlier
            && let Some(secret) = inner.endpoint_secrets.get(&id).cloned()
        {
            let same = inner.endpoints.get(&id).is_some_and(|e| e["url"] == url);
            if !same {
                let params = serde_json::json!({ "url": url });
                api::update_webhook_endpoint(&mut inner, &self.hooks, &id, &params).map_err(|e| format!("{e:?}"))?;
            }
            return Ok(secret);
        }
        let params =
            serde_json::json!({ "url": url, "enabled_events": ["*"], "metadata": { IN_PROCESS_MARK: "true" } });
        let answer = api::create_webhook_endpoint(&mut inner, &self.hooks, &params).map_err(|e| format!("{e:?}"))?;
        answer["secret"].as_str().map(str::to_string).ok_or_else(|| "no secret in the answer".to_string())
    }

    /// Stop serving, abandon pending webhook deliveries, and write the state file a last time.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        self.hooks.stop();
        // The server's own result is only interesting while it runs.
        let _ = self.task.await;
        if let Some(saver) = self.saver {
            saver.stop().await;
        }
    }
}

/// The listener: `listen`, or, when that asks for any free port, the port of the state's last
/// run first (on the same address), so the pages it linked to before are found again.
fn bind(listen: SocketAddr, kept_base: Option<&str>) -> std::io::Result<std::net::TcpListener> {
    let previous = kept_base
        .and_then(|b| b.strip_prefix("http://"))
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .filter(|a| listen.port() == 0 && a.ip() == listen.ip());
    if let Some(addr) = previous
        && let Ok(listener) = std::net::TcpListener::bind(addr)
    {
        return Ok(listener);
    }
    std::net::TcpListener::bind(listen)
}
