//! The messages kept, newest last, each read once into what the page and the JSON show.

use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::mime;

/// Who a message is from and to, as the SMTP session said.
#[derive(Debug, Default, Clone)]
pub struct Envelope {
    pub from: String,
    pub to: Vec<String>,
}

/// A kept message.
#[derive(Debug, Clone, Serialize)]
pub struct Mail {
    pub id: u64,
    pub received_at: DateTime<Utc>,
    /// The envelope's sender and recipients.
    pub from: String,
    pub to: Vec<String>,
    /// The headers' subject, its encoded words decoded.
    pub subject: String,
    pub message_id: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
    /// The message as it was sent.
    pub raw: String,
}

/// A message in a list: what tells it apart.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub id: u64,
    pub received_at: DateTime<Utc>,
    pub from: String,
    pub to: Vec<String>,
    pub subject: String,
    pub message_id: Option<String>,
}

impl From<&Mail> for Summary {
    fn from(m: &Mail) -> Summary {
        Summary {
            id: m.id,
            received_at: m.received_at,
            from: m.from.clone(),
            to: m.to.clone(),
            subject: m.subject.clone(),
            message_id: m.message_id.clone(),
        }
    }
}

/// How many messages are kept; the oldest go first.
const KEEP: usize = 5000;

#[derive(Default)]
pub struct Store {
    inner: Mutex<(u64, Vec<Mail>)>,
}

impl Store {
    pub fn keep(&self, envelope: Envelope, raw: String) -> u64 {
        let (head, _) = mime::split(&raw);
        let fields = mime::headers(head);
        let subject = mime::header(&fields, "Subject").map(mime::decode_words).unwrap_or_default();
        let message_id = mime::header(&fields, "Message-ID").map(str::to_string);
        let (text, html) = mime::bodies(&raw);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.0 += 1;
        let id = inner.0;
        let mail = Mail {
            id,
            received_at: Utc::now(),
            from: envelope.from,
            to: envelope.to,
            subject,
            message_id,
            text,
            html,
            raw,
        };
        tracing::info!(id, to = ?mail.to, subject = %mail.subject, "mail caught");
        inner.1.push(mail);
        if inner.1.len() > KEEP {
            let over = inner.1.len() - KEEP;
            inner.1.drain(..over);
        }
        id
    }

    /// The kept messages, oldest first; only those to `to` (any case) when it is given.
    pub fn list(&self, to: Option<&str>) -> Vec<Summary> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .1
            .iter()
            .filter(|m| to.is_none_or(|to| m.to.iter().any(|t| t.eq_ignore_ascii_case(to))))
            .map(Summary::from)
            .collect()
    }

    pub fn get(&self, id: u64) -> Option<Mail> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.1.iter().find(|m| m.id == id).cloned()
    }

    pub fn clear(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.clear();
    }
}
