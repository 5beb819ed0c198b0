//! Signed webhook delivery: one background task per endpoint posts its events in order, signed
//! exactly as Stripe signs (`Stripe-Signature: t=…,v1=HMAC-SHA256(secret, "t.body")`), retrying
//! failures on the configured backoff schedule and recording every outcome for the control API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::mpsc;

use crate::clock::real_now;
use crate::events::endpoint_wants;
use crate::state::Inner;

/// How events of one act reach the endpoints (control API `POST /_standin/delivery`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeliveryMode {
    #[default]
    InOrder,
    /// Every event is delivered twice, as Stripe may.
    Duplicate,
    /// The events of one act are delivered newest first (out of order).
    Reverse,
}

impl DeliveryMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "in_order" => Some(Self::InOrder),
            "duplicate" => Some(Self::Duplicate),
            "reverse" => Some(Self::Reverse),
            _ => None,
        }
    }
}

/// Where an event's delivery to an endpoint stands, as the control API words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryOutcome {
    /// Not answered with a 2xx yet; tried again on the retry schedule.
    Pending,
    Delivered,
    /// Gave up after the retry schedule.
    Failed,
}

/// One event's delivery to one endpoint, as `GET /_standin/deliveries` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryRecord {
    pub event_id: String,
    pub event_type: String,
    pub endpoint_id: String,
    pub url: String,
    pub attempts: u32,
    /// Last HTTP status answered, if any.
    pub status: Option<u16>,
    pub outcome: DeliveryOutcome,
    pub error: Option<String>,
}

pub type DeliveryLog = Arc<Mutex<Vec<DeliveryRecord>>>;

/// One queued delivery for an endpoint's task.
pub struct Job {
    pub event_id: String,
    pub event_type: String,
    pub payload: String,
}

/// Delivery machinery shared by the endpoint tasks: where to spawn, how to retry, the log.
#[derive(Clone)]
pub struct Dispatcher {
    pub runtime: tokio::runtime::Handle,
    pub retry: Vec<Duration>,
    pub log: DeliveryLog,
    pub client: reqwest::Client,
    pub senders: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>>,
    pub tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Dispatcher {
    pub fn new(runtime: tokio::runtime::Handle, retry: Vec<Duration>, log: DeliveryLog) -> Self {
        Self { runtime, retry, log, client: reqwest::Client::new(), senders: Arc::default(), tasks: Arc::default() }
    }

    /// Start the delivery task of a new endpoint.
    pub fn add_endpoint(&self, id: &str, url: &str, secret: &str) {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.senders).insert(id.to_string(), tx);
        let task = EndpointTask {
            endpoint_id: id.to_string(),
            url: url.to_string(),
            secret: secret.to_string(),
            retry: self.retry.clone(),
            log: self.log.clone(),
            client: self.client.clone(),
        };
        let handle = self.runtime.spawn(task.run(rx));
        lock(&self.tasks).push(handle.abort_handle());
    }

    /// Dropping the sender ends the task once its queue is drained.
    pub fn remove_endpoint(&self, id: &str) {
        lock(&self.senders).remove(id);
    }

    /// Queue one event for every endpoint that wants it.
    pub fn send(&self, inner: &Inner, event: &Value) {
        let kind = event["type"].as_str().unwrap_or_default();
        let payload = serde_json::to_string_pretty(event).unwrap_or_default();
        let senders = lock(&self.senders);
        for endpoint in inner.endpoints.oldest_first().filter(|e| endpoint_wants(e, kind)) {
            let Some(tx) = endpoint["id"].as_str().and_then(|id| senders.get(id)) else { continue };
            let job = Job {
                event_id: event["id"].as_str().unwrap_or_default().to_string(),
                event_type: kind.to_string(),
                payload: payload.clone(),
            };
            // A closed channel means the endpoint was just deleted: nothing to deliver.
            let _ = tx.send(job);
        }
    }

    /// Deliver the events of the act that just ended, in the configured mode.
    pub fn flush(&self, inner: &mut Inner) {
        let mut batch = std::mem::take(&mut inner.batch);
        match inner.delivery_mode {
            DeliveryMode::InOrder => {}
            DeliveryMode::Reverse => batch.reverse(),
            DeliveryMode::Duplicate => {
                batch = batch.into_iter().flat_map(|e| [e.clone(), e]).collect();
            }
        }
        for event in &batch {
            self.send(inner, event);
        }
    }

    pub fn stop(&self) {
        lock(&self.senders).clear();
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct EndpointTask {
    endpoint_id: String,
    url: String,
    secret: String,
    retry: Vec<Duration>,
    log: DeliveryLog,
    client: reqwest::Client,
}

impl EndpointTask {
    /// Deliver jobs one at a time, so a retrying event holds back the later ones (event order).
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        while let Some(job) = rx.recv().await {
            self.deliver(job).await;
        }
    }

    async fn deliver(&self, job: Job) {
        let index = {
            let mut log = lock(&self.log);
            log.push(DeliveryRecord {
                event_id: job.event_id.clone(),
                event_type: job.event_type.clone(),
                endpoint_id: self.endpoint_id.clone(),
                url: self.url.clone(),
                attempts: 0,
                status: None,
                outcome: DeliveryOutcome::Pending,
                error: None,
            });
            log.len() - 1
        };
        let mut attempt = 0usize;
        loop {
            let (status, error) = self.attempt(&job.payload).await;
            let ok = status.is_some_and(|s| (200..300).contains(&s));
            let gave_up = !ok && attempt >= self.retry.len();
            {
                let mut log = lock(&self.log);
                let rec = &mut log[index];
                rec.attempts = attempt as u32 + 1;
                rec.status = status;
                rec.error = error;
                rec.outcome = if ok {
                    DeliveryOutcome::Delivered
                } else if gave_up {
                    DeliveryOutcome::Failed
                } else {
                    DeliveryOutcome::Pending
                };
            }
            if ok {
                return;
            }
            if gave_up {
                tracing::warn!(event = %job.event_id, url = %self.url, "webhook delivery gave up");
                return;
            }
            tokio::time::sleep(self.retry[attempt]).await;
            attempt += 1;
        }
    }

    async fn attempt(&self, payload: &str) -> (Option<u16>, Option<String>) {
        let signature = signature_header(&self.secret, real_now(), payload);
        let sent = self
            .client
            .post(&self.url)
            .header("Content-Type", "application/json; charset=utf-8")
            .header("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
            .header("Stripe-Signature", signature)
            .timeout(Duration::from_secs(30))
            .body(payload.to_string())
            .send()
            .await;
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let error = (!resp.status().is_success()).then(|| format!("HTTP {status}"));
                (Some(status), error)
            }
            Err(e) => (None, Some(e.to_string())),
        }
    }
}

/// `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, Stripe's signature header.
pub fn signature_header(secret: &str, timestamp: i64, payload: &str) -> String {
    format!("t={timestamp},v1={}", sign(secret, timestamp, payload))
}

pub fn sign(secret: &str, timestamp: i64, payload: &str) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("{timestamp}.{payload}").as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}
