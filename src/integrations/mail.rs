//! Mail to people over SMTP (lettre): each message with a text and an HTML part, from
//! `MAIL_FROM`, under a Message-ID the console chose, so a message sent again after a crash is
//! known by its reader as the same one. Nothing here touches the database: the mail job
//! (`services::mail`) builds the message and calls `send`.

use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, MultiPart},
};

use crate::config::MailSettings;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Outgoing {
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
    /// `<…@…>`, fixed when the message was made.
    pub message_id: String,
}

/// Why a message was not sent: `transient` when trying again later may help (the server did
/// not answer, or answered 4xx); otherwise the server refused it for good (5xx) or the message
/// could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct MailError {
    pub transient: bool,
    pub message: String,
}

impl MailError {
    fn permanent(message: impl Into<String>) -> Self {
        MailError { transient: false, message: message.into() }
    }
}

pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    /// The mailer `settings` describe, or None when mail is off (no `SMTP_URL`). The URL and
    /// the sender were checked when the configuration was read.
    pub fn from_settings(settings: &MailSettings) -> Result<Option<Mailer>, MailError> {
        let Some(url) = &settings.smtp_url else { return Ok(None) };
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| MailError::permanent(format!("SMTP_URL cannot be used: {e}")))?
            .timeout(Some(settings.call_timeout))
            .build();
        let from =
            settings.from.parse().map_err(|e| MailError::permanent(format!("MAIL_FROM is not a mailbox: {e}")))?;
        Ok(Some(Mailer { transport, from }))
    }

    /// Send one message.
    #[tracing::instrument(name = "Send a mail", skip(self, m), fields(message_id = %m.message_id))]
    pub async fn send(&self, m: &Outgoing) -> Result<(), MailError> {
        let to: Mailbox =
            m.to.parse()
                .map_err(|e| MailError::permanent(format!("“{}” is not an address mail can go to: {e}", m.to)))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(m.subject.clone())
            .message_id(Some(m.message_id.clone()))
            .multipart(MultiPart::alternative_plain_html(m.text.clone(), m.html.clone()))
            .map_err(|e| MailError::permanent(format!("the message could not be made: {e}")))?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) => Err(MailError { transient: !e.is_permanent(), message: format!("the mail server: {e}") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outgoing(to: &str) -> Outgoing {
        Outgoing {
            to: to.into(),
            subject: "Verify your email".into(),
            text: "Open https://console.example.test/verify?token=abc".into(),
            html: "<p><a href=\"https://console.example.test/verify?token=abc\">Verify</a></p>".into(),
            message_id: "<m-1@console.example.test>".into(),
        }
    }

    fn settings(smtp_url: String) -> MailSettings {
        MailSettings { smtp_url: Some(smtp_url), call_timeout: Duration::from_secs(5), ..MailSettings::default() }
    }

    #[tokio::test]
    async fn a_message_reaches_the_catcher_with_both_parts_and_the_message_id_the_console_chose() {
        let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.unwrap();
        let mailer = Mailer::from_settings(&settings(catcher.smtp_url())).unwrap().expect("mail is on");
        mailer.send(&outgoing("ana@example.test")).await.unwrap();
        let kept = catcher.messages(Some("ana@example.test"));
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].message_id.as_deref(), Some("<m-1@console.example.test>"));
        assert_eq!(kept[0].from, "console@localhost");
        let m = catcher.message(kept[0].id).unwrap();
        assert_eq!(m.text.as_deref(), Some("Open https://console.example.test/verify?token=abc"));
        assert!(m.html.is_some_and(|h| h.contains("href")));
    }

    #[tokio::test]
    async fn no_server_is_a_failure_worth_trying_again_and_a_bad_address_is_not() {
        // A port nothing listens on: bound, then let go.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mailer = Mailer::from_settings(&settings(format!("smtp://127.0.0.1:{port}"))).unwrap().unwrap();
        let e = mailer.send(&outgoing("ana@example.test")).await.unwrap_err();
        assert!(e.transient, "{e}");
        let e = mailer.send(&outgoing("not an address")).await.unwrap_err();
        assert!(!e.transient, "{e}");
        assert!(Mailer::from_settings(&MailSettings::default()).unwrap().is_none(), "no SMTP_URL: mail is off");
    }
}
