//! Chromium journeys of sign-up and password reset (issue 38), each step's page kept as a
//! screenshot in `target/browser-screenshots/<test>/`. The mail goes through a real worker to the
//! project's mail catcher, and the links are read from the catcher's JSON API.

use std::{sync::Arc, time::Duration};

use member_console::{
    config::{Config, MailSettings, SignupMode},
    integrations::mail::Mailer,
    jobs::{Worker, WorkerOptions},
    services::tokens::TokenKey,
};
use serde_json::Value;

use crate::common::{
    self, TEST_RUNTIME_PASSWORD, TestDb,
    acts::scalar,
    browser::{Browser, SIGNED_IN, Until},
};

/// How long one step may take (a page, a mail through the worker, Stripe's page, a site): long
/// enough for a machine busy with other builds.
const STEP: Duration = Duration::from_secs(30);

/// A console with mail on, sign-up open, and what else is connected.
fn spawn(
    t: &TestDb,
    stripe: Option<Arc<member_console::integrations::stripe::Stripe>>,
    farm: Option<Arc<member_console::integrations::farm::Farm>>,
) -> (String, TokenKey) {
    let dir = std::env::temp_dir().join(format!("mc-test-{}", t.name));
    let mut config = Config::from_lookup(|k| match k {
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(TEST_RUNTIME_PASSWORD.into()),
        _ => None,
    })
    .unwrap();
    config.signup = Some(SignupMode::Open);
    let key = TokenKey::from_session_key(&config.session_key);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let connected = member_console::web::Connected { stripe, farm, mail: true, local_dns: None };
    let server = member_console::web::serve_connected(listener, t.db.clone(), Arc::new(config), connected).unwrap();
    tokio::spawn(server);
    (base, key)
}

/// A worker sending the console's mail to the catcher.
fn mail_worker(t: &TestDb, catcher: &mail_catcher::MailCatcher, key: TokenKey) -> tokio::sync::watch::Sender<bool> {
    let settings = MailSettings {
        smtp_url: Some(catcher.smtp_url()),
        call_timeout: Duration::from_secs(5),
        ..MailSettings::default()
    };
    let mailer = Arc::new(Mailer::from_settings(&settings).unwrap().unwrap());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let options =
        WorkerOptions { poll_interval: Duration::from_millis(100), fire_schedules: false, ..WorkerOptions::default() };
    tokio::spawn(
        Worker::new(t.db.clone(), member_console::job_registry::mail_handlers(mailer, key), 2)
            .with_options(options)
            .run(stopped),
    );
    stop
}

/// The link in the newest message to `to` whose subject is `subject`, read from the catcher's API.
async fn link_in_mail(catcher: &mail_catcher::MailCatcher, to: &str, subject: &str, path: &str) -> String {
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    loop {
        let list: Vec<Value> = http
            .get(format!("{}/api/messages?to={to}", catcher.http_url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(id) = list.iter().rev().find(|m| m["subject"] == subject).and_then(|m| m["id"].as_u64()) {
            let m: Value = http
                .get(format!("{}/api/messages/{id}", catcher.http_url()))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let text = m["text"].as_str().unwrap_or_default();
            let at = text.find(path).unwrap_or_else(|| panic!("no {path} link in {text}"));
            let start = text[..at].rfind("http").unwrap();
            let end = text[at..].find(char::is_whitespace).map_or(text.len(), |e| at + e);
            return text[start..end].to_string();
        }
        assert!(started.elapsed() < STEP, "no mail {subject:?} to {to} within {STEP:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_person_signs_up_reads_the_verification_mail_opens_the_link_buys_a_plan_and_creates_a_site() {
    use crate::browser::{create_active_sites, site_worker};
    let (t, s) = common::stripe::demo_with_stripe().await;
    s.price(&t.db, common::acts::product_id(&t, "Basic").await, "12").await;
    let community = scalar(&t, "SELECT org_type_id FROM core.org_types WHERE name = 'Community'").await;
    member_console::services::signup::choose_signup_type(&t.db, member_console::ids::OrgTypeId(community))
        .await
        .unwrap();
    let f = common::farm::FarmFixture::start_with(local_farm::WikiMode::Auto, Duration::from_secs(30)).await;
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.unwrap();
    let (base, key) = spawn(&t, Some(s.stripe.clone()), Some(f.farm.clone()));
    let _mail = mail_worker(&t, &catcher, key);
    let _sites = site_worker(&t, f.farm.clone());
    let url = |p: &str| format!("{base}{p}");
    Browser::start()
        .await
        .run(async |b| {
            // The sign-in page offers sign-up.
            b.goto(&url("/login")).await;
            b.click("a[href='/signup']").await;
            b.wait_for(Until::Css("input[name=organization]"), STEP).await;
            b.fill("input[name=email]", "newcomer@example.test").await;
            b.fill("input[name=password]", "a long password").await;
            b.fill("input[name=organization]", "Newcomer Wikis").await;
            b.keep_step(1, "sign-up-form").await;
            b.click_button("Sign up").await;
            b.wait_for(Until::Text("Check your email: we sent a link to newcomer@example.test."), STEP).await;
            b.keep_step(2, "check-your-email").await;

            // Signed in before verifying: the banner, and buying is refused in words.
            b.sign_in_at(&url("/login"), "newcomer@example.test", "a long password", SIGNED_IN).await;
            b.wait_for(Until::Text("Send the link again"), STEP).await;
            b.keep_step(3, "unverified-banner").await;

            // The mail, read from the catcher: its link shows a button, which verifies.
            let link =
                link_in_mail(&catcher, "newcomer@example.test", "Verify your email address", "/account/verify?token=")
                    .await;
            b.goto(&link).await;
            b.wait_for(Until::Text("Confirm that newcomer@example.test is your address."), STEP).await;
            b.keep_step(4, "verification-link").await;
            b.click_button("Verify my email address").await;
            b.wait_for(Until::Css("main"), STEP).await;
            assert_eq!(b.path().await, "/");
            assert!(!b.text_of("main").await.contains("Send the link again"), "the banner is gone");
            b.keep_step(5, "verified-home").await;

            // Buy Basic on Stripe's page.
            b.goto(&url("/billing")).await;
            b.click("button[aria-label^='Buy Basic at']").await;
            b.wait_for(Until::Css("#card-number"), STEP).await;
            b.fill("#card-number", "4242 4242 4242 4242").await;
            b.click_button("Pay").await;
            b.wait_for(Until::Text("Payment received"), STEP).await;
            b.keep_step(6, "basic-bought").await;

            // And a site.
            b.goto(&url("/sites")).await;
            create_active_sites(b, &["newcomer"], 2 * STEP).await;
            b.keep_step(7, "site-created").await;
        })
        .await;
    assert_eq!(
        scalar(
            &t,
            "SELECT count(*) FROM core.subscriptions s JOIN core.organizations o USING (organization_id)
             WHERE o.name = 'Newcomer Wikis' AND s.status = 'active'"
        )
        .await,
        1
    );
    assert_eq!(
        scalar(&t, "SELECT count(*) FROM fedwiki.sites WHERE domain LIKE 'newcomer.%' AND status = 'active'").await,
        1
    );
}

#[tokio::test]
async fn a_member_who_forgot_the_password_resets_it_from_the_mail_and_the_old_sessions_are_gone() {
    let t = common::pages::demo_db().await;
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.unwrap();
    let (base, key) = spawn(&t, None, None);
    let _mail = mail_worker(&t, &catcher, key);
    let url = |p: &str| format!("{base}{p}");
    // A session elsewhere, signed in before the reset.
    let elsewhere =
        reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = elsewhere.get(url("/login")).send().await.unwrap().text().await.unwrap();
    let csrf = common::csrf_from(&login).unwrap();
    common::post_sign_in(&elsewhere, &url("/login"), "member@example.com", "demo-member", &csrf).await;
    assert_eq!(elsewhere.get(url("/")).send().await.unwrap().status(), reqwest::StatusCode::OK);
    Browser::start()
        .await
        .run(async |b| {
            b.goto(&url("/login")).await;
            b.click("a[href='/password/forgot']").await;
            b.wait_for(Until::Css("input[name=email]"), STEP).await;
            b.fill("input[name=email]", "member@example.com").await;
            b.keep_step(1, "forgot-form").await;
            b.click_button("Send the link").await;
            b.wait_for(Until::Text("If an account has the address member@example.com, we sent it a link"), STEP).await;
            b.keep_step(2, "forgot-answer").await;

            let link =
                link_in_mail(&catcher, "member@example.com", "Set a new password", "/password/reset?token=").await;
            b.goto(&link).await;
            b.wait_for(Until::Css("input[name=password]"), STEP).await;
            b.fill("input[name=password]", "a brand new password").await;
            b.keep_step(3, "new-password").await;
            b.click_button("Set the password").await;
            b.wait_for(Until::Css("main"), STEP).await;
            assert_eq!(b.path().await, "/");
            b.keep_step(4, "signed-in-after-reset").await;
        })
        .await;
    assert!(elsewhere.get(url("/")).send().await.unwrap().status().is_redirection(), "the old session is gone");
    assert_eq!(
        scalar(&t, "SELECT count(*) FROM core.web_sessions w JOIN core.accounts a USING (account_id) WHERE a.email = 'member@example.com'")
            .await,
        1,
        "only the browser's new session"
    );
    link_in_mail(&catcher, "member@example.com", "Your password was reset", "/password/forgot").await;
}
