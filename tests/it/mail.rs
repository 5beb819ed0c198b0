//! The console's mail: a message enqueued with the write that is its reason reaches the mail
//! server through the job queue, once however often it is enqueued, and waits and is tried again
//! while the server does not answer.

use std::{sync::Arc, time::Duration};

use member_console::{
    config::MailSettings,
    integrations::mail::{Mailer, Outgoing},
    job_registry::mail_handlers,
    jobs::{Backoff, Worker, WorkerOptions},
    services::mail::{new_message_id, send_later},
};
use tokio::sync::watch;

use crate::common::TestDb;

fn fast() -> WorkerOptions {
    WorkerOptions {
        concurrency: 2,
        poll_interval: Duration::from_millis(50),
        backoff: Backoff { base: Duration::from_millis(20), cap: Duration::from_millis(100) },
        fire_schedules: false,
        ..WorkerOptions::default()
    }
}

fn message(to: &str) -> Outgoing {
    Outgoing {
        to: to.into(),
        subject: "Welcome".into(),
        text: "Open https://console.example.test/".into(),
        html: "<p>Open <a href=\"https://console.example.test/\">the console</a></p>".into(),
        message_id: new_message_id("console.example.test"),
    }
}

fn mailer(smtp_url: String) -> Arc<Mailer> {
    let settings =
        MailSettings { smtp_url: Some(smtp_url), call_timeout: Duration::from_secs(5), ..MailSettings::default() };
    Arc::new(Mailer::from_settings(&settings).unwrap().unwrap())
}

fn tokens() -> member_console::services::tokens::TokenKey {
    member_console::services::tokens::TokenKey::from_session_key(&[9; 64])
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_enqueued_twice_with_its_write_is_sent_once_and_one_rolled_back_is_never_sent() {
    let t = TestDb::new().await;
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.unwrap();
    let m = message("ana@example.test");
    let mut tx = t.db.pool.begin().await.unwrap();
    assert!(send_later(&mut tx, m.clone()).await.unwrap().is_some());
    assert!(send_later(&mut tx, m.clone()).await.unwrap().is_none(), "the same message is one job");
    tx.commit().await.unwrap();
    let mut tx = t.db.pool.begin().await.unwrap();
    send_later(&mut tx, message("bo@example.test")).await.unwrap();
    tx.rollback().await.unwrap();

    let (stop, rx) = watch::channel(false);
    let worker = tokio::spawn(
        Worker::new(t.db.clone(), mail_handlers(mailer(catcher.smtp_url()), tokens()), 2).with_options(fast()).run(rx),
    );
    until("the message is kept", async || !catcher.messages(None).is_empty()).await;
    until("its job is done", async || {
        t.one::<i64, _>(sqlx::query_scalar(
            "SELECT count(*) FROM integration.jobs WHERE kind = 'send_mail' AND state = 'done'",
        ))
        .await
            == 1
    })
    .await;
    let _ = stop.send(true);
    worker.await.unwrap();
    let kept = catcher.messages(None);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].to, ["ana@example.test"]);
    assert_eq!(kept[0].message_id.as_deref(), Some(m.message_id.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_mail_server_does_not_answer_the_message_waits_and_is_sent_when_it_does() {
    let t = TestDb::new().await;
    // A port nothing listens on yet; the catcher takes it later.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let m = message("ana@example.test");
    let mut tx = t.db.pool.begin().await.unwrap();
    send_later(&mut tx, m.clone()).await.unwrap();
    tx.commit().await.unwrap();
    let (stop, rx) = watch::channel(false);
    let worker = tokio::spawn(
        Worker::new(t.db.clone(), mail_handlers(mailer(format!("smtp://127.0.0.1:{port}")), tokens()), 1)
            .with_options(fast())
            .run(rx),
    );
    until("a failed attempt is recorded", async || {
        t.one::<i64, _>(sqlx::query_scalar(
            "SELECT count(*) FROM integration.jobs WHERE kind = 'send_mail' AND attempts >= 1 AND state = 'pending'",
        ))
        .await
            == 1
    })
    .await;
    let error: String =
        t.one(sqlx::query_scalar("SELECT last_error FROM integration.jobs WHERE kind = 'send_mail'")).await;
    assert!(error.contains("the mail server"), "{error}");
    let smtp = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config { smtp, ..mail_catcher::Config::default() })
        .await
        .unwrap();
    until("the message is kept", async || !catcher.messages(None).is_empty()).await;
    let _ = stop.send(true);
    worker.await.unwrap();
    assert_eq!(catcher.messages(None)[0].message_id.as_deref(), Some(m.message_id.as_str()));
}
