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
    services::tokens::{SecretLink, TokenKey},
};

pub const SEND_MAIL: &str = "send_mail";

/// SendMail: one message to one person. A message that carries a secret link says `{link}`
/// where it goes; the link's token is derived from its seed when the message is sent
/// (`services::tokens`), so the payload holds no usable link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendMail {
    pub mail: Outgoing,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<SecretLink>,
}

/// What sending needs: the mail server, and the key links are derived under.
#[derive(Clone)]
pub struct MailContext {
    pub mailer: Arc<Mailer>,
    pub tokens: TokenKey,
}

/// The placeholder a message's text and HTML hold for its secret link.
pub const LINK: &str = "{link}";

impl SendMail {
    /// The message as it is sent: `{link}` replaced by the link (escaped in the HTML).
    pub fn message(&self, tokens: &TokenKey) -> Outgoing {
        let Some(link) = &self.link else { return self.mail.clone() };
        let url = link.url(tokens);
        Outgoing {
            text: self.mail.text.replace(LINK, &url),
            html: self.mail.html.replace(LINK, &views::letter::escape(&url)),
            ..self.mail.clone()
        }
    }
}

impl Job for SendMail {
    const KIND: &'static str = SEND_MAIL;
    /// With the worker's backoff (2 s doubling to 10 min), about an hour and a half of a mail
    /// server not answering before the message is given up and shown failed on `/operator`.
    const MAX_ATTEMPTS: i32 = 14;
    type Context = MailContext;

    /// One job per message, however often its enqueue is repeated.
    fn dedupe_key(&self) -> Option<String> {
        Some(format!("{SEND_MAIL}:{}", self.mail.message_id))
    }

    async fn run(&self, cx: &MailContext, _: &JobContext) -> Result<(), JobError> {
        cx.mailer.send(&self.message(&cx.tokens)).await.map_err(|e| match e.transient {
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
    SendMail { mail, link: None }.enqueue(conn).await
}

/// Enqueue `mail`, whose text and HTML say `{link}` where `link` goes, on the caller's
/// transaction.
pub async fn send_with_link(
    conn: &mut PgConnection,
    mail: Outgoing,
    link: SecretLink,
) -> Result<Option<JobId>, DbError> {
    SendMail { mail, link: Some(link) }.enqueue(conn).await
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
        let job = SendMail { mail: mail.clone(), link: None };
        assert_eq!(job.dedupe_key().as_deref(), Some("send_mail:<1@h>"));
        let back: SendMail = serde_json::from_value(job.payload()).unwrap();
        assert_eq!(back.mail, mail);
        assert!(!job.payload().to_string().contains("link"), "no link, no field");
    }

    #[test]
    fn a_secret_link_is_made_when_the_message_is_sent_and_its_payload_holds_no_token() {
        let key = TokenKey::from_session_key(&[3; 64]);
        let mail = Outgoing {
            to: "ana@example.test".into(),
            subject: "Verify".into(),
            text: "Open {link}".into(),
            html: "<a href=\"{link}\">verify</a>".into(),
            message_id: "<2@h>".into(),
        };
        let link = SecretLink {
            prefix: "https://c.example.test/verify?a=1&token=".into(),
            seed: crate::services::tokens::Seed::new(),
        };
        let job = SendMail { mail, link: Some(link.clone()) };
        let token = key.token(&link.seed);
        let sent = job.message(&key);
        assert_eq!(sent.text, format!("Open https://c.example.test/verify?a=1&token={}", token.as_str()));
        assert_eq!(
            sent.html,
            format!("<a href=\"https://c.example.test/verify?a=1&amp;token={}\">verify</a>", token.as_str())
        );
        assert!(!job.payload().to_string().contains(token.as_str()), "the payload holds no usable link");
        let back: SendMail = serde_json::from_value(job.payload()).unwrap();
        assert_eq!(back.message(&key), sent, "the message is made again the same after a crash");
    }
}
