//! The web shell: probes, sign-in and sign-out, the route policy, CSRF, the request deadline,
//! error pages, and the run-time role.

mod common;

use std::time::{Duration, Instant};

use common::{TestApp, TestDb, csrf_from};
use member_console::demo;
use reqwest::StatusCode;

async fn app_with_demo() -> (TestDb, TestApp) {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    let app = TestApp::spawn(&t).await;
    (t, app)
}

#[tokio::test]
async fn probes_answer() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let r = c.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(body["ready"], true);
    assert_eq!(body["migrations"], "current");
}

#[tokio::test]
async fn readyz_fails_when_migrations_are_not_current() {
    let (t, app) = app_with_demo().await;
    sqlx::query(
        "DELETE FROM public._sqlx_migrations WHERE version = (SELECT max(version) FROM public._sqlx_migrations)",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    let r = app.client().get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn anonymous_visitors_are_sent_to_sign_in() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let r = c.get(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login");
    let r = c.get(app.url("/operator")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login?next=%2Foperator");
    // HTMX gets a redirect instruction instead of a page it would swap in.
    let r = c.get(app.url("/operator")).header("HX-Request", "true").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().contains_key("hx-redirect"));
}

#[tokio::test]
async fn a_member_signs_in_sees_home_and_is_refused_operator_pages() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let r = app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/");
    let home = c.get(app.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(home.contains(demo::MEMBER_EMAIL), "{home}");
    assert!(home.contains(demo::DEMO_ORGANIZATION), "{home}");
    assert!(!home.contains("href=\"/operator\""), "members see no operator navigation");
    let r = c.get(app.url("/operator")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let body = r.text().await.unwrap();
    assert!(body.contains("operators"), "{body}");
}

#[tokio::test]
async fn an_operator_signs_in_and_sees_operations() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let r = app.sign_in(&c, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = c.get(app.url("/operator")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert!(body.contains(demo::MEMBER_EMAIL), "the overview lists accounts: {body}");
}

#[tokio::test]
async fn sign_in_returns_to_the_page_asked_for_and_never_off_site() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let token = app.csrf(&c, "/login?next=%2Foperator").await;
    let r = c
        .post(app.url("/login"))
        .form(&[
            ("email", demo::OPERATOR_EMAIL),
            ("password", demo::OPERATOR_PASSWORD),
            ("csrf_token", &token),
            ("next", "/operator"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/operator");
    let c2 = app.client();
    let token = app.csrf(&c2, "/login").await;
    let r = c2
        .post(app.url("/login"))
        .form(&[
            ("email", demo::OPERATOR_EMAIL),
            ("password", demo::OPERATOR_PASSWORD),
            ("csrf_token", &token),
            ("next", "//evil.example/"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["location"], "/");
}

#[tokio::test]
async fn the_session_cookie_is_http_only_and_renewed_at_sign_in() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let r = c.get(app.url("/login")).send().await.unwrap();
    let before = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string()).unwrap();
    assert!(before.contains("HttpOnly") && before.contains("SameSite=Lax"), "{before}");
    let _ = r.text().await;
    let r = app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let after = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_string()).unwrap();
    let value = |s: &str| s.split(';').next().unwrap().to_string();
    assert_ne!(value(&before), value(&after), "a new session cookie at sign-in");
}

#[tokio::test]
async fn a_post_without_a_csrf_token_is_refused_and_changes_nothing() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let sessions = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM core.web_sessions").fetch_one(&t.admin).await.unwrap()
    };
    assert_eq!(sessions().await, 1);
    let r = c.post(app.url("/logout")).form(&[("x", "y")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("Reload the page"));
    let r = c.post(app.url("/logout")).form(&[("csrf_token", "forged")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(sessions().await, 1, "still signed in");
    assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK);
    // Signing in without the token is refused too (login CSRF).
    let c2 = app.client();
    let r = c2
        .post(app.url("/login"))
        .form(&[("email", demo::MEMBER_EMAIL), ("password", demo::MEMBER_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(sessions().await, 1);
}

#[tokio::test]
async fn sign_out_with_the_htmx_header_ends_the_session_everywhere() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let token = app.csrf(&c, "/").await;
    let r = c.post(app.url("/logout")).header("HX-Request", "true").header("X-CSRF-Token", token).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["hx-redirect"], "/login");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM core.web_sessions").fetch_one(&t.admin).await.unwrap();
    assert_eq!(n, 0);
    assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::SEE_OTHER);
}

/// A console behind a trusted proxy on 127.0.0.1, so a test can sign in "from" any address.
async fn app_behind_proxy() -> (TestDb, TestApp) {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    let app = TestApp::spawn_with(&t, |c| c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()]).await;
    (t, app)
}

async fn sign_in_from(app: &TestApp, c: &reqwest::Client, address: &str, email: &str, password: &str) -> reqwest::Response {
    let token = app.csrf(c, "/login").await;
    c.post(app.url("/login"))
        .header("X-Forwarded-For", format!("203.0.113.99, {address}"))
        .form(&[("email", email), ("password", password), ("csrf_token", token.as_str())])
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn wrong_passwords_are_refused_then_delayed_more_each_time_up_to_a_cap() {
    let (t, app) = app_behind_proxy().await;
    let c = app.client();
    let here = "198.51.100.7";
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body = r.text().await.unwrap();
    assert!(body.contains("not right"), "{body}");
    for _ in 0..4 {
        let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    // Five failures in a row: from this address, even the right password waits a minute.
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.text().await.unwrap().contains("Try again in 1 minute."));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM core.web_sessions").fetch_one(&t.admin).await.unwrap();
    assert_eq!(n, 0);

    // The minute passes; one more failure doubles the wait.
    let pass_the_wait = || async {
        sqlx::query("UPDATE core.sign_in_throttle SET not_before = now() - interval '1 second'")
            .execute(&t.admin)
            .await
            .unwrap();
    };
    pass_the_wait().await;
    assert_eq!(
        sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await.status(),
        StatusCode::UNAUTHORIZED
    );
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert!(r.text().await.unwrap().contains("Try again in 2 minutes."));

    // However many failures, the wait never passes fifteen minutes, and then the person is in.
    sqlx::query("UPDATE core.sign_in_throttle SET failures = 40").execute(&t.admin).await.unwrap();
    pass_the_wait().await;
    sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await;
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert!(r.text().await.unwrap().contains("Try again in 15 minutes."));
    pass_the_wait().await;
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "the right password after the wait signs in");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle").fetch_one(&t.admin).await.unwrap();
    assert_eq!(left, 0, "a success clears the count");
}

#[tokio::test]
async fn failures_from_one_address_never_hold_the_account_against_another() {
    let (_t, app) = app_behind_proxy().await;
    let attacker = app.client();
    for _ in 0..12 {
        sign_in_from(&app, &attacker, "192.0.2.66", demo::MEMBER_EMAIL, "guess").await;
    }
    let r = sign_in_from(&app, &attacker, "192.0.2.66", demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // The member, from their own address, is not held back.
    let member = app.client();
    let r = sign_in_from(&app, &member, "198.51.100.20", demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    // And a forwarded-for header from a peer that is not a trusted proxy is ignored.
    let (_t2, plain) = app_with_demo().await;
    let c = plain.client();
    for i in 0..5 {
        sign_in_from(&plain, &c, &format!("192.0.2.{i}"), demo::MEMBER_EMAIL, "guess").await;
    }
    let r = sign_in_from(&plain, &c, "192.0.2.200", demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "every attempt came from the same peer");
}

#[tokio::test]
async fn parallel_guesses_are_counted_exactly() {
    use member_console::services::auth::{AuthError, Email, sign_in};
    let (t, _app) = app_with_demo().await;
    let email = Email::parse(demo::MEMBER_EMAIL).unwrap();
    let mut tries = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (db, email) = (t.db.clone(), email.clone());
        tries.spawn(async move { sign_in(&db, &email, "a parallel guess", "192.0.2.9", None).await });
    }
    let (mut verified, mut refused) = (0, 0);
    while let Some(r) = tries.join_next().await {
        match r.unwrap() {
            Err(AuthError::InvalidCredentials) => verified += 1,
            Err(AuthError::Throttled { .. }) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    // Exactly the free five were verified; the rest were refused before any verification.
    assert_eq!((verified, refused), (5, 15));
    let (failures, window): (i32, i32) = sqlx::query_as(
        "SELECT (SELECT failures FROM core.sign_in_throttle), (SELECT failures FROM core.sign_in_addresses)",
    )
    .fetch_one(&t.admin)
    .await
    .unwrap();
    assert_eq!((failures, window), (5, 5));
}

#[tokio::test]
async fn failures_from_one_address_are_throttled_across_accounts() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    for i in 0..30 {
        let r = app.sign_in(&c, &format!("nobody{i}@example.com"), "whatever-it-is").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let r = app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn bad_sign_in_input_gets_a_clear_message_and_writes_nothing() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    let r = app.sign_in(&c, "not an email", "x").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().await.unwrap().contains("is not an email address"));
    let r = app.sign_in(&c, "", "").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle").fetch_one(&t.admin).await.unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn unknown_pages_get_a_404_naming_the_request_id() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let r = c.get(app.url("/no-such-page")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let body = r.text().await.unwrap();
    assert!(body.contains(&id), "the page names request {id}: {body}");
}

#[tokio::test]
async fn a_request_past_its_deadline_is_answered_503_and_its_transaction_rolls_back() {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    let app = TestApp::spawn_with(&t, |c| c.request_timeout = Duration::from_millis(1500)).await;
    let c = app.client();
    let token = app.csrf(&c, "/login").await;

    // Transaction A holds this address's sign-in row, so the sign-in (B) waits on it.
    let mut a = t.runtime_conn().await;
    let a_pid = common::backend_pid(&mut a).await;
    sqlx::query("BEGIN").execute(&mut a).await.unwrap();
    sqlx::query("INSERT INTO core.sign_in_addresses (address, window_started_at, failures) VALUES ('127.0.0.1', now(), 0)")
        .execute(&mut a)
        .await
        .unwrap();

    let started = Instant::now();
    let sign_in = c
        .post(app.url("/login"))
        .form(&[("email", demo::MEMBER_EMAIL), ("password", "a-wrong-password"), ("csrf_token", &token)])
        .send();
    let (r, waiter) = tokio::join!(sign_in, common::wait_for_waiter(&t.admin, &t.name, a_pid));
    let r = r.unwrap();
    assert!(waiter > 0);
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(5));
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(r.text().await.unwrap().contains(&id));

    // B stopped waiting in the server too, and wrote nothing.
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::anyone_waits_on(&t.admin, &t.name, a_pid).await {
        assert!(Instant::now() < deadline, "the timed-out request still waits in PostgreSQL");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle").fetch_one(&t.admin).await.unwrap();
    assert_eq!(n, 0, "the timed-out sign-in recorded nothing");
}

#[tokio::test]
async fn run_time_connections_are_made_as_console_runtime() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let users: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = $1 AND application_name = 'member-console'",
    )
    .bind(&t.name)
    .fetch_all(&t.admin)
    .await
    .unwrap();
    assert_eq!(users, vec!["console_runtime".to_string()]);
    // And that role cannot write what it was not granted.
    let mut conn = t.runtime_conn().await;
    let e = sqlx::query("UPDATE core.accounts SET email = 'x@example.com'").execute(&mut conn).await.unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");
}

#[test]
fn csrf_tokens_are_found_in_pages() {
    assert_eq!(csrf_from(r#"<meta name="csrf-token" content="abc">"#).as_deref(), Some("abc"));
}
