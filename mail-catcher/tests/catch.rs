//! The catcher, sent mail by lettre (the console's own client) and read over HTTP.

use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor, message::MultiPart};
use mail_catcher::{Config, MailCatcher};

async fn send(catcher: &MailCatcher, to: &str, subject: &str, text: &str, html: &str) {
    // Plain SMTP on the loopback, as `smtp://127.0.0.1:<port>` says to the console.
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1").port(catcher.smtp_port()).build();
    let message = Message::builder()
        .from("Member Console <console@example.test>".parse().expect("a mailbox"))
        .to(to.parse().expect("a mailbox"))
        .subject(subject)
        // The console names each message, so a resend after a crash is known for the same one.
        .message_id(Some(format!("<{}@console.example.test>", to.replace('@', "."))))
        .multipart(MultiPart::alternative_plain_html(text.to_string(), html.to_string()))
        .expect("a message");
    mailer.send(message).await.expect("sent");
}

#[tokio::test]
async fn a_message_sent_by_lettre_is_kept_with_its_subject_text_and_html_decoded() {
    let catcher = MailCatcher::start(Config::default()).await.expect("started");
    let long_link = format!("https://console.example.test/verify?token={}", "a1".repeat(40));
    let text = format!("Welcome to the console, café owner.\n\nOpen {long_link} to verify.\n.\nA line that is a dot.");
    send(&catcher, "ana@example.test", "Vérifiez votre adresse", &text, "<p>Hi <b>Ana</b></p>").await;
    send(&catcher, "bo@example.test", "Second", "two", "<p>two</p>").await;

    let client = reqwest::Client::new();
    let list: serde_json::Value = client
        .get(format!("{}/api/messages?to=ANA@example.test", catcher.http_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    let list = list.as_array().expect("a list");
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["subject"], "Vérifiez votre adresse");
    assert_eq!(list[0]["to"][0], "ana@example.test");
    assert_eq!(list[0]["message_id"], "<ana.example.test@console.example.test>");

    let id = list[0]["id"].as_u64().expect("an id");
    let one: serde_json::Value = client
        .get(format!("{}/api/messages/{id}", catcher.http_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(one["text"].as_str(), Some(text.as_str()), "the text part comes back as it was written");
    assert_eq!(one["html"].as_str(), Some("<p>Hi <b>Ana</b></p>"));

    let page = client.get(format!("{}/", catcher.http_url())).send().await.expect("answered");
    let page = page.text().await.expect("a page");
    assert!(page.contains("Vérifiez votre adresse") && page.contains("Second"), "{page}");
    let html = client.get(format!("{}/messages/{id}/html", catcher.http_url())).send().await.expect("answered");
    assert!(html.headers()["content-security-policy"].to_str().is_ok_and(|c| c.starts_with("sandbox")));
    let missing = client.get(format!("{}/api/messages/999", catcher.http_url())).send().await.expect("answered");
    assert_eq!(missing.status(), 404);

    let cleared = client.delete(format!("{}/api/messages", catcher.http_url())).send().await.expect("answered");
    assert_eq!(cleared.status(), 204);
    assert!(catcher.messages(None).is_empty());
}
