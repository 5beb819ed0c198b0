//! Callbacks to the console: after every change the farm POSTs a signed JSON event to the
//! configured URL. One background task delivers them in order; a failed delivery is retried on the
//! configured schedule (same body, same id, fresh timestamp and signature) and holds back the
//! events after it. Every delivery is recorded for `GET /_farm/callbacks`.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use tokio::sync::mpsc;

use crate::ids::new_id;
use crate::state::{Site, format_time, now};

/// The kinds of change a callback reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Created,
    StatusChanged,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Created => "site.created",
            EventType::StatusChanged => "site.status_changed",
            EventType::Modified => "site.modified",
            EventType::Deleted => "site.deleted",
        }
    }
}

/// The body of a callback, field order as documented.
#[derive(Serialize)]
struct Event<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    occurred_at: String,
    site: &'a Site,
}

/// One event's delivery, as `GET /_farm/callbacks` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryRecord {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub domain: String,
    pub attempts: u32,
    /// The last HTTP status the receiver answered, if it answered.
    pub last_status: Option<u16>,
    /// `pending`, `delivered` or `failed` (gave up after the retry schedule).
    pub outcome: &'static str,
    pub error: Option<String>,
}

#[derive(Clone)]
struct Endpoint {
    url: String,
    secret: String,
}

struct Job {
    index: usize,
    body: String,
}

/// The callback machinery shared by the API and the watcher.
#[derive(Clone)]
pub struct Callbacks {
    endpoint: Arc<RwLock<Option<Endpoint>>>,
    log: Arc<Mutex<Vec<DeliveryRecord>>>,
    queue: mpsc::UnboundedSender<Job>,
    task: Arc<tokio::task::AbortHandle>,
}

impl Callbacks {
    /// Start the delivery task on the current tokio runtime.
    pub fn start(retry: Vec<Duration>) -> Callbacks {
        let (queue, rx) = mpsc::unbounded_channel();
        let endpoint = Arc::new(RwLock::new(None));
        let log = Arc::new(Mutex::new(Vec::new()));
        let client = reqwest::Client::builder().no_proxy().build().unwrap_or_default();
        let deliverer = Deliverer { endpoint: endpoint.clone(), log: log.clone(), retry, client };
        let task = tokio::spawn(deliverer.run(rx)).abort_handle();
        Callbacks { endpoint, log, queue, task: Arc::new(task) }
    }

    /// Where to send callbacks from now on, and the secret to sign them with.
    pub fn set_endpoint(&self, url: String, secret: String) {
        *self.endpoint.write().unwrap_or_else(|p| p.into_inner()) = Some(Endpoint { url, secret });
    }

    /// The secret callbacks are signed with, once one is set (the farm signs its calls to the
    /// console with it too).
    pub fn secret(&self) -> Option<String> {
        self.endpoint.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| e.secret.clone())
    }

    fn configured(&self) -> bool {
        self.endpoint.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Queue an event about `site` (called while the change's lock is held, so events leave in
    /// the order the changes happened). Nothing is sent while no callback URL is configured.
    pub fn emit(&self, kind: EventType, site: &Site) {
        if !self.configured() {
            return;
        }
        let id = new_id("evt");
        let event = Event { id: &id, kind: kind.as_str(), occurred_at: format_time(&now()), site };
        let body = match serde_json::to_string(&event) {
            Ok(body) => body,
            Err(e) => return tracing::error!(error = %e, "could not encode a callback"),
        };
        let index = {
            let mut log = lock(&self.log);
            log.push(DeliveryRecord {
                id,
                kind: kind.as_str(),
                domain: site.domain.clone(),
                attempts: 0,
                last_status: None,
                outcome: "pending",
                error: None,
            });
            log.len() - 1
        };
        // The receiver lives as long as the task; after `stop` there is nothing left to deliver.
        let _ = self.queue.send(Job { index, body });
    }

    pub fn deliveries(&self) -> Vec<DeliveryRecord> {
        lock(&self.log).clone()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Deliverer {
    endpoint: Arc<RwLock<Option<Endpoint>>>,
    log: Arc<Mutex<Vec<DeliveryRecord>>>,
    retry: Vec<Duration>,
    client: reqwest::Client,
}

impl Deliverer {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        while let Some(job) = rx.recv().await {
            self.deliver(job).await;
        }
    }

    async fn deliver(&self, job: Job) {
        let mut attempt = 0usize;
        loop {
            let endpoint = self.endpoint.read().unwrap_or_else(|p| p.into_inner()).clone();
            let Some(endpoint) = endpoint else { return };
            let (status, error) = self.attempt(&endpoint, &job.body).await;
            let ok = status.is_some_and(|s| (200..300).contains(&s));
            let gave_up = !ok && attempt >= self.retry.len();
            {
                let mut log = lock(&self.log);
                let record = &mut log[job.index];
                record.attempts = attempt as u32 + 1;
                record.last_status = status;
                record.error = error.clone();
                record.outcome = if ok {
                    "delivered"
                } else if gave_up {
                    "failed"
                } else {
                    "pending"
                };
                if gave_up {
                    tracing::warn!(event = %record.id, url = %endpoint.url, error = ?error, "a farm callback gave up");
                }
            }
            if ok || gave_up {
                return;
            }
            tokio::time::sleep(self.retry[attempt]).await;
            attempt += 1;
        }
    }

    async fn attempt(&self, endpoint: &Endpoint, body: &str) -> (Option<u16>, Option<String>) {
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let sent = self
            .client
            .post(&endpoint.url)
            .header("Content-Type", "application/json")
            .header("Farm-Timestamp", &timestamp)
            .header("Farm-Signature", signature_header(&endpoint.secret, &timestamp, body.as_bytes()))
            .timeout(Duration::from_secs(30))
            .body(body.to_string())
            .send()
            .await;
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (Some(status), (!resp.status().is_success()).then(|| format!("HTTP {status}")))
            }
            Err(e) => (None, Some(e.to_string())),
        }
    }
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// `v1=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<body>")>`, the `Farm-Signature` header.
pub fn signature_header(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    format!("v1={}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Whether `header` (a `Farm-Signature` value) signs `body` sent with `Farm-Timestamp:
/// timestamp` under `secret`. The header may list several comma-separated `v1=` signatures (as
/// during a secret rotation); one that matches is enough. Compared in constant time. It does not
/// judge the timestamp's age: the receiver refuses timestamps outside its tolerance itself.
pub fn verify_signature(secret: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    header
        .split(',')
        .filter_map(|part| part.trim().strip_prefix("v1="))
        .any(|hex| decode_hex(hex).is_some_and(|expected| mac(secret, timestamp, body).verify_slice(&expected).is_ok()))
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_with_its_secret_timestamp_and_body() {
        let header = signature_header("s3cret", "1700000000", b"{\"a\":1}");
        assert!(header.starts_with("v1=") && header.len() == 3 + 64);
        assert!(verify_signature("s3cret", "1700000000", b"{\"a\":1}", &header));
        assert!(verify_signature("s3cret", "1700000000", b"{\"a\":1}", &format!("v1=00,{header}")));
        assert!(!verify_signature("other", "1700000000", b"{\"a\":1}", &header));
        assert!(!verify_signature("s3cret", "1700000001", b"{\"a\":1}", &header));
        assert!(!verify_signature("s3cret", "1700000000", b"{\"a\":2}", &header));
        assert!(!verify_signature("s3cret", "1700000000", b"{\"a\":1}", "v1=zz"));
        assert!(!verify_signature("s3cret", "1700000000", b"{\"a\":1}", ""));
    }
}
