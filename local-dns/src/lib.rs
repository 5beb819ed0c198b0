//! A local authoritative DNS server for the Member Console's custom domains: every name is
//! answered from an in-memory set of TXT records, over UDP and TCP on loopback, by
//! hickory-server. `serve --demo` (and `--stand-ins`) runs one when `DNS_RESOLVER` is unset and
//! points the console's resolver at it; the tests start their own. A member's challenge record,
//! `_member-console-challenge.<domain> TXT "<token>"`, is added through the control endpoint
//! (`control`), the way a DNS provider's page would add it.
//!
//! - A name with a TXT set answers it (NOERROR; an empty set answers no TXT); a name with names
//!   under it exists with no records; any other name is NXDOMAIN.
//! - Faults, for tests: a name set to `timeout` is never answered, one set to `servfail` is
//!   answered SERVFAIL.
//! - With a data folder the TXT sets are kept in `<data dir>/local-dns.json`.

mod control;
mod dns;
mod records;

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

pub use records::{Fault, FaultMode, Record, Refused, SetError};

/// The file the records are kept in, in the data folder.
pub const RECORDS_FILE: &str = records::FILE_NAME;

/// Where the server listens and keeps its records; port 0 takes a free one.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `local-dns.json` is kept; None keeps the records in memory only.
    pub data_dir: Option<PathBuf>,
    /// The DNS address, UDP and TCP on the same port.
    pub dns_bind: SocketAddr,
    /// The control endpoint's address.
    pub control_bind: SocketAddr,
}

impl Default for Config {
    fn default() -> Self {
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Config { data_dir: None, dns_bind: loopback(0), control_bind: loopback(0) }
    }
}

/// How long a TCP connection may sit idle before the server closes it.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// hickory's own default buffer for a TCP connection's answers.
const TCP_RESPONSE_BUFFER: usize = 32;
/// How many free ports are tried for a UDP port whose TCP twin is taken.
const PORT_TRIES: usize = 16;

/// A running server; dropping it stops it.
pub struct LocalDns {
    dns_addr: SocketAddr,
    control_addr: SocketAddr,
    records: Arc<records::Records>,
    dns: hickory_server::Server<dns::Handler>,
    control: actix_web::dev::ServerHandle,
}

impl LocalDns {
    /// Read the kept records (an unreadable file is an error naming it), bind the DNS port (UDP
    /// and TCP) and the control endpoint, and serve in the background on the current tokio
    /// runtime.
    pub async fn start(config: Config) -> std::io::Result<LocalDns> {
        let records = Arc::new(records::Records::open(config.data_dir.as_deref())?);
        let (udp, tcp) = bind_dns(config.dns_bind).await?;
        let dns_addr = udp.local_addr()?;
        let mut dns = hickory_server::Server::new(dns::Handler { records: records.clone() });
        dns.register_socket(udp);
        dns.register_listener(tcp, TCP_IDLE, TCP_RESPONSE_BUFFER);
        let listener = std::net::TcpListener::bind(config.control_bind)?;
        let control_addr = listener.local_addr()?;
        let server = control::build(listener, records.clone())?;
        let control = server.handle();
        tokio::spawn(server);
        tracing::debug!(dns = %dns_addr, control = %control_addr, "the local DNS is listening");
        Ok(LocalDns { dns_addr, control_addr, records, dns, control })
    }

    /// Where DNS is answered, over UDP and TCP: the console's `DNS_RESOLVER`.
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns_addr
    }

    /// The control endpoint, e.g. `http://127.0.0.1:41235` (its routes are under `/_dns/`).
    pub fn control_url(&self) -> String {
        format!("http://{}", self.control_addr)
    }

    /// Every name with a TXT set, in name order.
    pub fn records(&self) -> Vec<Record> {
        self.records.list()
    }

    /// Replace the TXT set at `name` (an empty set keeps the name, with no TXT).
    pub fn set_txt(&self, name: &str, values: Vec<String>) -> Result<Record, SetError> {
        self.records.set_txt(name, values)
    }

    /// Remove the TXT set at `name`; answers whether there was one.
    pub fn remove_txt(&self, name: &str) -> Result<bool, SetError> {
        self.records.remove_txt(name)
    }

    pub fn set_fault(&self, name: &str, mode: FaultMode) -> Result<Fault, Refused> {
        self.records.set_fault(name, mode)
    }

    /// Answers whether there was one.
    pub fn clear_fault(&self, name: &str) -> Result<bool, Refused> {
        self.records.clear_fault(name)
    }

    /// Stop answering: the DNS listeners first (queries held by a fault are dropped), then the
    /// control endpoint.
    pub async fn stop(mut self) {
        if let Err(e) = self.dns.shutdown_gracefully().await {
            tracing::warn!(error = %e, "the local DNS did not stop cleanly");
        }
        self.control.stop(true).await;
    }
}

impl Drop for LocalDns {
    fn drop(&mut self) {
        // The DNS tasks end with `self.dns`'s own drop; the control endpoint is told here.
        self.dns.shutdown_token().cancel();
        drop(self.control.stop(false));
    }
}

/// A UDP socket and a TCP listener on the same port. With port 0, the UDP socket takes a free
/// port and the TCP listener the same one; if that is taken for TCP, another is tried.
async fn bind_dns(address: SocketAddr) -> std::io::Result<(tokio::net::UdpSocket, tokio::net::TcpListener)> {
    let mut last = None;
    for _ in 0..PORT_TRIES {
        let udp = tokio::net::UdpSocket::bind(address).await?;
        let port = udp.local_addr()?.port();
        match tokio::net::TcpListener::bind(SocketAddr::new(address.ip(), port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if address.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free port for both UDP and TCP")))
}
