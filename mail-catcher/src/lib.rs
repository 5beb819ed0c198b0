//! A local mail catcher: an SMTP server that keeps every message it is sent, and a small web
//! server to read them, as a person (a page) or a test (JSON). `serve --demo` starts one when no
//! `SMTP_URL` is set, and the tests read the console's mail from it, links and all.
//!
//! - `GET /` the messages, newest first; `GET /messages/{id}` one, its text part;
//!   `GET /messages/{id}/html` its HTML part, sandboxed.
//! - `GET /api/messages[?to=address]` the list as JSON, oldest first; `GET /api/messages/{id}`
//!   one message with its decoded text and HTML parts and its raw text;
//!   `DELETE /api/messages` forgets them all (loopback callers only).

mod http;
mod mime;
mod smtp;
mod store;

use std::{net::SocketAddr, sync::Arc};

pub use store::{Mail, Summary};

/// Where the catcher listens: port 0 takes a free one.
#[derive(Debug, Clone)]
pub struct Config {
    pub smtp: SocketAddr,
    pub http: SocketAddr,
}

impl Default for Config {
    fn default() -> Self {
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Config { smtp: loopback(0), http: loopback(0) }
    }
}

/// A running catcher; dropping it stops it.
pub struct MailCatcher {
    smtp: SocketAddr,
    http: SocketAddr,
    store: Arc<store::Store>,
    smtp_task: tokio::task::JoinHandle<()>,
    http_handle: actix_web::dev::ServerHandle,
}

impl MailCatcher {
    /// Bind both listeners and serve in the background on the current tokio runtime.
    pub async fn start(config: Config) -> std::io::Result<MailCatcher> {
        let store = Arc::new(store::Store::default());
        let smtp_listener = tokio::net::TcpListener::bind(config.smtp).await?;
        let smtp = smtp_listener.local_addr()?;
        let http_listener = std::net::TcpListener::bind(config.http)?;
        let http = http_listener.local_addr()?;
        let server = http::build(http_listener, store.clone())?;
        let http_handle = server.handle();
        tokio::spawn(server);
        let smtp_task = tokio::spawn(smtp::serve(smtp_listener, store.clone()));
        Ok(MailCatcher { smtp, http, store, smtp_task, http_handle })
    }

    /// The SMTP address, as lettre's `SMTP_URL` names it (plain SMTP, no TLS).
    pub fn smtp_url(&self) -> String {
        format!("smtp://{}", self.smtp)
    }

    pub fn smtp_port(&self) -> u16 {
        self.smtp.port()
    }

    /// The page's address.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The kept messages to `to`, oldest first (all of them for None).
    pub fn messages(&self, to: Option<&str>) -> Vec<Summary> {
        self.store.list(to)
    }

    pub fn message(&self, id: u64) -> Option<Mail> {
        self.store.get(id)
    }

    pub async fn stop(self) {
        self.http_handle.stop(true).await;
    }
}

impl Drop for MailCatcher {
    fn drop(&mut self) {
        self.smtp_task.abort();
        drop(self.http_handle.stop(false));
    }
}
