//! The desired-state receiver: a small connected system for the demo and the tests. It receives
//! the console's signed desired-state pushes (docs/desired-state.md, "The wire protocol"),
//! verifies each one's Standard Webhooks signature and timestamp, keeps what it holds per
//! recipient, answers read-back, and shows what it holds at `/`. Test controls live under
//! `/_receiver/`.
//!
//! Start it in-process with [`Receiver::start`] or run the `desired-state-receiver` binary.

mod control;
mod page;
mod protocol;
mod server;
mod signature;
mod state;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use actix_web::web;

pub use signature::{SECRET_PREFIX, new_secret, signature_header};

/// How to run the receiver.
#[derive(Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The accepted secrets, each `whsec_<base64>`; a push is accepted when any signature it
    /// carries is valid under any of them.
    pub secrets: Vec<String>,
    /// How far a request's `webhook-timestamp` may be from the receiver's clock, either way.
    pub tolerance: Duration,
}

impl Default for Config {
    /// Loopback on a free port, one fresh secret, five minutes of tolerance.
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            secrets: vec![new_secret()],
            tolerance: Duration::from_secs(5 * 60),
        }
    }
}

impl std::fmt::Debug for Config {
    /// Without the secrets, which belong in no log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("secrets", &format_args!("[{} hidden]", self.secrets.len()))
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

// The console keeps the receiver in its shared state.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Receiver>();
};

/// A running receiver. Dropping it without [`Receiver::stop`] still stops serving.
pub struct Receiver {
    addr: SocketAddr,
    app: web::Data<server::AppState>,
    handle: actix_web::dev::ServerHandle,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    stopped: bool,
}

impl Receiver {
    /// Check the secrets, bind `config.listen` and serve in the background on the current tokio
    /// runtime.
    pub async fn start(config: Config) -> std::io::Result<Receiver> {
        let secrets = control::parse_secrets(&config.secrets)
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        let listener = std::net::TcpListener::bind(config.listen)?;
        let bound = listener.local_addr()?;
        // A wildcard address is reached on loopback.
        let addr = match bound.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port()),
            IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bound.port()),
            _ => bound,
        };
        let app = web::Data::new(server::AppState::new(secrets, config.tolerance));
        let server = server::build(listener, app.clone())?;
        let handle = server.handle();
        let task = tokio::spawn(server);
        tracing::info!(%addr, "the desired-state receiver is serving");
        Ok(Receiver { addr, app, handle, task: Some(task), stopped: false })
    }

    /// e.g. `http://127.0.0.1:41234`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL to give a connection: `<url>/desired-state`.
    pub fn push_url(&self) -> String {
        format!("{}/desired-state", self.url())
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// What `GET /_receiver/state` answers: every recipient held with its history, and the
    /// counters.
    pub fn snapshot(&self) -> serde_json::Value {
        self.app.snapshot()
    }

    /// Accept only these secrets from now on (as `POST /_receiver/secrets`); fails, changing
    /// nothing, if one is malformed.
    pub fn set_secrets(&self, secrets: &[String]) -> std::io::Result<()> {
        let parsed = control::parse_secrets(secrets)
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        *self.app.secrets() = parsed;
        Ok(())
    }

    /// Stop serving, letting requests in progress finish.
    pub async fn stop(mut self) {
        self.stopped = true;
        self.handle.stop(true).await;
        // The server's own result is only interesting while it runs.
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if !self.stopped {
            // Without `stop`: the actix server's own threads would keep serving; end them too.
            drop(self.handle.stop(false));
        }
    }
}
