//! The mail the console sends: each message a durable job (`SendMail`), enqueued in the
//! transaction whose write is the reason for it, so it is sent only if that write commits and a
//! crash loses none. Delivery is at least once: a worker that dies after the server took the
//! message sends it again, under the Message-ID fixed when it was enqueued, so the reader's mail
//! program knows it for the same message.

use std::sync::Arc;

use sqlx::PgConnection;

use crate::{
    db::DbError,
    ids::JobId,
    integrations::mail::{Mailer, Outgoing},
    jobs::{Job, JobContext, JobError},
};

pub const SEND_MAIL: &str = "send_mail";

/// SendMail: one message to one person.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendMail {
    pub mail: Outgoing,
}

impl Job for SendMail {
    const KIND: &'static str = SEND_MAIL;
    /// With the worker's backoff (2 s doubling to 10 min), about an hour and a half of a mail
    /// server not answering before the message is given up and shown failed on `/operator`.
    const MAX_ATTEMPTS: i32 = 14;
    type Context = Arc<Mailer>;

    /// One job per message, however often its enqueue is repeated.
    fn dedupe_key(&self) -> Option<String> {
        Some(format!("{SEND_MAIL}:{}", self.mail.message_id))
    }

    async fn run(&self, mailer: &Arc<Mailer>, _: &JobContext) -> Result<(), JobError> {
        mailer.send(&self.mail).await.map_err(|e| match e.transient {
            true => JobError::retry(e.to_string()),
            false => JobError::Permanent(e.to_string()),
        })
    }
}

/// A new message's Message-ID: 128 random bits at the console's host.
pub fn new_message_id(host: &str) -> String {
    let mut bytes = [0u8; 16];
    // The OS's generator failing is a machine without entropy: a fixed id still sends the mail.
    let _ = getrandom::fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("<{hex}@{host}>")
}

/// Enqueue `mail` on the caller's transaction.
pub async fn send_later(conn: &mut PgConnection, mail: Outgoing) -> Result<Option<JobId>, DbError> {
    SendMail { mail }.enqueue(conn).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_id_is_new_each_time_and_names_the_host() {
        let (a, b) = (new_message_id("console.example.test"), new_message_id("console.example.test"));
        assert_ne!(a, b);
        assert!(a.starts_with('<') && a.ends_with("@console.example.test>") && a.len() == 2 + 32 + 21, "{a}");
    }

    #[test]
    fn a_messages_job_is_keyed_by_its_message_id_and_stores_the_message_as_it_is() {
        let mail = Outgoing {
            to: "ana@example.test".into(),
            subject: "s".into(),
            text: "t".into(),
            html: "<p>t</p>".into(),
            message_id: "<1@h>".into(),
        };
        let job = SendMail { mail: mail.clone() };
        assert_eq!(job.dedupe_key().as_deref(), Some("send_mail:<1@h>"));
        let back: SendMail = serde_json::from_value(job.payload()).unwrap();
        assert_eq!(back.mail, mail);
    }
}
