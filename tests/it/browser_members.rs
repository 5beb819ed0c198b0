//! Issue 38's members journey in Chromium, each step's page kept as a screenshot in
//! `target/browser-screenshots/<test>/`: an owner invites a colleague from the members page; the
//! mail goes out through the job worker to a real SMTP catcher; the colleague opens the link read
//! from the catcher's JSON API, sets a password and lands on the organization.

use std::{sync::Arc, time::Duration};

use member_console::{
    config::MailSettings,
    demo,
    integrations::mail::Mailer,
    job_registry::mail_handlers,
    jobs::{Backoff, Worker, WorkerOptions},
};
use tokio::sync::watch;

use crate::common::{
    browser::{Browser, SIGNED_IN, Until},
    pages::demo_db,
};
use crate::members::{mailing_app, tokens};

const STEP: Duration = Duration::from_secs(15);
const COLLEAGUE: &str = "colleague.two@example.test";

/// The catcher's JSON answer at `path`.
async fn api(catcher: &mail_catcher::MailCatcher, path: &str) -> serde_json::Value {
    reqwest::get(format!("{}{path}", catcher.http_url())).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_invites_a_colleague_who_opens_the_mailed_link_sets_a_password_and_sees_the_organization() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.unwrap();
    let settings = MailSettings {
        smtp_url: Some(catcher.smtp_url()),
        call_timeout: Duration::from_secs(5),
        ..MailSettings::default()
    };
    let mailer = Arc::new(Mailer::from_settings(&settings).unwrap().unwrap());
    let (stop, rx) = watch::channel(false);
    let options = WorkerOptions {
        concurrency: 1,
        poll_interval: Duration::from_millis(100),
        backoff: Backoff { base: Duration::from_millis(50), cap: Duration::from_millis(500) },
        fire_schedules: false,
        ..WorkerOptions::default()
    };
    let worker =
        tokio::spawn(Worker::new(t.db.clone(), mail_handlers(mailer, tokens()), 1).with_options(options).run(rx));

    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, SIGNED_IN).await;
            b.click("a[href$='/members']").await;
            b.wait_for(Until::Text("Members of Acme Wikis"), STEP).await;
            b.keep_step(1, "members").await;

            b.fill("#invite-email", COLLEAGUE).await;
            b.find("#invite-role").await.select_by_value("member").await.unwrap();
            b.click_button("Send the invitation").await;
            b.wait_for(Until::Text("Invitation sent."), STEP).await;
            let pending = b.text_contents_of("section[aria-labelledby='invitations-heading'] td").await;
            assert!(pending.iter().any(|c| c == COLLEAGUE), "{pending:?}");
            b.keep_step(2, "invited").await;

            // The mail, as the catcher's API gives it.
            let started = std::time::Instant::now();
            let id = loop {
                let list = api(&catcher, &format!("/api/messages?to={COLLEAGUE}")).await;
                if let Some(id) = list.as_array().and_then(|l| l.first()).and_then(|m| m["id"].as_u64()) {
                    break id;
                }
                assert!(started.elapsed() < Duration::from_secs(30), "no invitation mail reached the catcher");
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            let mail = api(&catcher, &format!("/api/messages/{id}")).await;
            assert_eq!(mail["subject"], "You are invited to join Acme Wikis");
            let text = mail["text"].as_str().unwrap();
            let link = text
                .lines()
                .find(|l| l.contains("/invitations/accept?token="))
                .unwrap_or_else(|| panic!("no link in {text}"))
                .trim()
                .to_string();
            assert!(link.starts_with(&app.base), "the link points at this console: {link}");

            // The colleague, in a browser of their own (no cookies of the owner's).
            b.forget_cookies().await;
            b.goto(&link).await;
            b.wait_for(Until::Text("Join Acme Wikis"), STEP).await;
            b.keep_step(3, "invitation").await;
            b.fill("#password", "colleague-password").await;
            b.click_button("Accept and create my account").await;
            b.wait_for(SIGNED_IN, STEP).await;
            b.wait_for(Until::Text(&format!("Welcome, {COLLEAGUE}")), STEP).await;
            let orgs = b.texts_of("section.org-home h2").await;
            assert_eq!(orgs, ["Acme Wikis"], "the colleague sees the organization");
            b.keep_step(4, "home").await;
        })
        .await;
    let _ = stop.send(true);
    worker.await.unwrap();
    let role: String = t
        .one(sqlx::query_scalar(
            "SELECT m.role FROM core.organization_members m JOIN core.accounts a USING (account_id) WHERE a.email = $1",
        )
        .bind(COLLEAGUE))
        .await;
    assert_eq!(role, "member");
}
