//! The web shell: probes, sign-in and sign-out, CSRF, sessions, headers, the request deadline,
//! error pages, and the run-time role. The route policy has its own module (route_policy.rs).

use crate::common;

use std::time::{Duration, Instant};

use common::{
    TestApp, TestDb, csrf_from,
    pages::{app_with_demo, demo_db},
};
use member_console::{demo, ids::OrganizationId};
use reqwest::StatusCode;

use crate::route_policy::fingerprint;

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
async fn head_is_answered_wherever_get_is_with_the_same_status_and_no_body() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    for path in ["/healthz", "/readyz", "/login"] {
        let r = c.head(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(r.bytes().await.unwrap().is_empty(), "{path}: a HEAD's answer has no body");
    }
    let r = c.head(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "not signed in: to the sign-in page, as a GET is");
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    for path in ["/", "/sites", "/billing"] {
        let r = c.head(app.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"), "{path}");
        assert!(r.bytes().await.unwrap().is_empty(), "{path}");
    }
    assert_eq!(c.head(app.url("/operator")).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    // HEAD stands beside GET only: a POST route does not answer it.
    assert_eq!(c.head(app.url("/logout")).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_control_character_in_an_address_or_a_form_is_refused_with_a_4xx_and_changes_nothing() {
    let (t, app) = app_with_demo().await;
    let member = common::pages::Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let operator = common::pages::Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let before = fingerprint(&t).await;
    for path in ["/sites/a%00b/status", "/sites/a%1Fb/delete"] {
        let r = member.post(path, &[("to", "park")], false).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
        assert!(r.body.contains("control character"), "{path}: {}", r.body);
    }
    for (who, path) in [(&member, "/billing/return?session_id=a%00"), (&operator, "/operator/organizations?q=a%00b")] {
        let r = who.get(path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
    }
    for (path, fields) in [
        ("/sites", vec![("organization_id", "1"), ("name", "a\0b")]),
        ("/sites/domains/remove", vec![("organization_id", "1"), ("domain", "a\0b.com"), ("hostname", "")]),
        ("/sites/swap", vec![("activate", "a\0"), ("park", "b")]),
    ] {
        let r = member.post(path, &fields, false).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {}", r.body);
        assert!(r.body.contains("holds a control character"), "{path}: {}", r.body);
    }
    assert_eq!(fingerprint(&t).await, before, "nothing was written");
}

#[tokio::test]
async fn readyz_fails_when_migrations_are_not_current() {
    let (t, app) = app_with_demo().await;
    t.run(sqlx::query(
        "DELETE FROM public._sqlx_migrations WHERE version = (SELECT max(version) FROM public._sqlx_migrations)",
    ))
    .await;
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
    let operator = (demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD);
    let r = sign_in_with_next(&app, "/login?next=%2Foperator", operator, "/operator").await;
    assert_eq!(r.headers()["location"], "/operator");
    let r = sign_in_with_next(&app, "/login", operator, "//evil.example/").await;
    assert_eq!(r.headers()["location"], "/");
}

/// Sign in through the form in a fresh client, the form read at `page`, posting `next` with it.
async fn sign_in_with_next(
    app: &TestApp,
    page: &str,
    (email, password): (&str, &str),
    next: &str,
) -> reqwest::Response {
    let c = app.client();
    let token = app.csrf(&c, page).await;
    c.post(app.url("/login"))
        .form(&[("email", email), ("password", password), ("csrf_token", &token), ("next", next)])
        .send()
        .await
        .unwrap()
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
    let sessions = || async { t.one(sqlx::query_scalar::<_, i64>("SELECT count(*) FROM core.web_sessions")).await };
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
    let n: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.web_sessions")).await;
    assert_eq!(n, 0);
    assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::SEE_OTHER);
}

/// A console behind a trusted proxy on 127.0.0.1, so a test can sign in "from" any address.
async fn app_behind_proxy() -> (TestDb, TestApp) {
    let t = demo_db().await;
    let app = TestApp::spawn_with(&t, |c| c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()]).await;
    (t, app)
}

async fn sign_in_from(
    app: &TestApp,
    c: &reqwest::Client,
    address: &str,
    email: &str,
    password: &str,
) -> reqwest::Response {
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
    let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((55..=60).contains(&wait), "Retry-After {wait}");
    assert!(r.text().await.unwrap().contains("Try again in 1 minute."));
    let n: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.web_sessions")).await;
    assert_eq!(n, 0);

    // The minute passes; one more failure doubles the wait.
    let pass_the_wait = || async {
        t.run(sqlx::query("UPDATE core.sign_in_throttle SET not_before = now() - interval '1 second'")).await;
    };
    pass_the_wait().await;
    assert_eq!(
        sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await.status(),
        StatusCode::UNAUTHORIZED
    );
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert!(r.text().await.unwrap().contains("Try again in 2 minutes."));

    // However many failures, the wait never passes fifteen minutes, and then the person is in.
    t.run(sqlx::query("UPDATE core.sign_in_throttle SET failures = 40")).await;
    pass_the_wait().await;
    sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, "not-the-password").await;
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert!(r.text().await.unwrap().contains("Try again in 15 minutes."));
    pass_the_wait().await;
    let r = sign_in_from(&app, &c, here, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "the right password after the wait signs in");
    let left: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle")).await;
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
    let (failures, window): (i32, i32) = t
        .one(sqlx::query_as(
            "SELECT (SELECT failures FROM core.sign_in_throttle), (SELECT failures FROM core.sign_in_addresses)",
        ))
        .await;
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

/// The sign-in form refuses a field it does not have by name, and a field not sent gets the
/// message an empty one does: 422 either way, nothing counted against anyone, no session.
#[tokio::test]
async fn a_misspelt_or_missing_sign_in_field_is_refused_by_name() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    let token = app.csrf(&c, "/login").await;
    let post = |fields: Vec<(&'static str, &'static str)>| {
        let mut form: Vec<(&str, &str)> = fields;
        form.push(("csrf_token", token.as_str()));
        c.post(app.url("/login")).form(&form).send()
    };
    let r = post(vec![("emial", demo::MEMBER_EMAIL), ("password", demo::MEMBER_PASSWORD)]).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().await.unwrap().contains("This form has no field “emial”"));
    let r = post(vec![("email", demo::MEMBER_EMAIL)]).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().await.unwrap().contains("Enter your password."));
    let n: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle")).await;
    assert_eq!(n, 0);
    let sessions: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.web_sessions")).await;
    assert_eq!(sessions, 0);
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
    let n: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle")).await;
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

/// A console whose requests have a 1.5 s deadline, shorter than the 5 s lock bound: what a test
/// holds up outlives the deadline first.
async fn app_with_a_short_deadline(t: &TestDb) -> TestApp {
    TestApp::spawn_with(t, |c| c.request_timeout = Duration::from_millis(1500)).await
}

#[tokio::test]
async fn a_request_past_its_deadline_is_answered_503_and_its_transaction_rolls_back() {
    let t = demo_db().await;
    let app = app_with_a_short_deadline(&t).await;
    let c = app.client();
    let token = app.csrf(&c, "/login").await;

    // Transaction A holds this address's sign-in row, so the sign-in (B) waits on it.
    let (mut a, a_pid) = t.runtime_begin().await;
    sqlx::query(
        "INSERT INTO core.sign_in_addresses (address, window_started_at, failures) VALUES ('127.0.0.1', now(), 0)",
    )
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
    let n: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.sign_in_throttle")).await;
    assert_eq!(n, 0, "the timed-out sign-in recorded nothing");
}

#[tokio::test]
async fn run_time_connections_are_made_as_console_runtime() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let users: Vec<String> = t.all(sqlx::query_scalar(
        "SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = $1 AND application_name = 'member-console'",
    )
    .bind(&t.name)).await;
    assert_eq!(users, vec!["console_runtime".to_string()]);
    // And that role cannot write what it was not granted (an account's email it may change
    // since issue 38; when it was made, never).
    let mut conn = t.runtime_conn().await;
    let e = sqlx::query("UPDATE core.accounts SET created_at = now()").execute(&mut conn).await.unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");
}

#[test]
fn csrf_tokens_are_found_in_pages() {
    assert_eq!(csrf_from(r#"<meta name="csrf-token" content="abc">"#).as_deref(), Some("abc"));
}

// ---- Sessions --------------------------------------------------------------------------------

async fn member_sessions(t: &TestDb) -> i64 {
    t.one(
        sqlx::query_scalar(
            "SELECT count(*) FROM core.web_sessions s JOIN core.accounts a USING (account_id) WHERE a.email = $1",
        )
        .bind(demo::MEMBER_EMAIL),
    )
    .await
}

#[tokio::test]
async fn a_session_ends_at_its_absolute_lifetime_however_active() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let (ends, expires): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        t.one(sqlx::query_as("SELECT ends_at, expires_at FROM core.web_sessions")).await;
    let lifetime = ends - chrono::Utc::now();
    assert!(lifetime > chrono::Duration::days(6) && lifetime <= chrono::Duration::days(7), "{lifetime}");
    assert!(expires < ends, "the idle bound comes first");
    // Busy a minute ago, but past its lifetime now: signed out.
    t.run(sqlx::query("UPDATE core.web_sessions SET ends_at = now() - interval '1 second', last_seen_at = now()"))
        .await;
    let r = c.get(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login");
}

#[tokio::test]
async fn page_views_write_the_session_at_most_once_a_minute() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let seen = || async {
        t.one(sqlx::query_as::<_, (chrono::DateTime<chrono::Utc>, String)>(
            "SELECT last_seen_at, xmin::text FROM core.web_sessions",
        ))
        .await
    };
    let first = seen().await;
    for _ in 0..5 {
        assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(seen().await, first, "five page views in a minute wrote nothing");
    t.run(sqlx::query("UPDATE core.web_sessions SET last_seen_at = now() - interval '61 seconds'")).await;
    let stale = seen().await;
    c.get(app.url("/")).send().await.unwrap();
    let touched = seen().await;
    assert!(touched.0 > stale.0 + chrono::Duration::seconds(60), "a minute on, the view moved last_seen_at");
}

/// The page's statement reads the session through `core.live_session` inlined into it (as the
/// run-time role: inlining needs its EXECUTE grant): a function call of its own cost a fifth of
/// a member page (docs/operations.md). A change that makes it volatile, strict, plpgsql or
/// SECURITY DEFINER would run it as a call again; this says so.
#[tokio::test]
async fn the_session_read_is_inlined_into_the_pages_statement() {
    let t = TestDb::new().await;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT s.account_id, core.member_home(s.account_id)
         FROM core.live_session('\\x00'::bytea, interval '1 minute') s",
    )
    .fetch_all(&t.db.pool)
    .await
    .unwrap();
    assert!(plan.iter().any(|l| l.contains("web_sessions")), "the plan reads the sessions itself: {plan:#?}");
    assert!(!plan.iter().any(|l| l.contains("Function Scan")), "no call of its own: {plan:#?}");
}

/// A session written by an earlier build, which hashed the token in SQL, is read by this one,
/// which hashes it itself (migration 0033): the two hashes are one, so an upgrade signs nobody
/// out.
#[tokio::test]
async fn a_session_hashed_by_the_database_is_resumed_with_the_consoles_hash() {
    let (t, _app) = app_with_demo().await;
    let token = "5e".repeat(32);
    t.run(
        sqlx::query(
            "INSERT INTO core.web_sessions (token_hash, account_id, expires_at, ends_at, address)
         SELECT sha256(convert_to($1, 'UTF8')), account_id, now() + interval '1 hour', now() + interval '1 day', 'test'
         FROM core.accounts WHERE email = $2",
        )
        .bind(&token)
        .bind(demo::MEMBER_EMAIL),
    )
    .await;
    let account = member_console::services::auth::resume_session(&t.db, &token).await.unwrap();
    assert_eq!(account.map(|a| a.email).as_deref(), Some(demo::MEMBER_EMAIL));
    assert!(member_console::services::auth::resume_session(&t.db, &"5f".repeat(32)).await.unwrap().is_none());
}

#[tokio::test]
async fn a_new_password_ends_every_session_of_the_account_and_the_same_one_ends_none() {
    use member_console::services::auth::{Email, NewPassword, ensure_account};
    let (t, app) = app_with_demo().await;
    let (a, b) = (app.client(), app.client());
    app.sign_in(&a, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    app.sign_in(&b, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let email = Email::parse(demo::MEMBER_EMAIL).unwrap();
    ensure_account(&t.db, &email, &NewPassword::parse(demo::MEMBER_PASSWORD).unwrap(), false).await.unwrap();
    assert_eq!(member_sessions(&t).await, 2, "setting the password it already has signs nobody out");
    ensure_account(&t.db, &email, &NewPassword::parse("a brand new password").unwrap(), false).await.unwrap();
    assert_eq!(member_sessions(&t).await, 0);
    for c in [&a, &b] {
        assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::SEE_OTHER);
    }
}

#[tokio::test]
async fn signing_in_again_ends_the_earlier_session() {
    let (t, app) = app_with_demo().await;
    let c = app.client();
    app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    // The sign-in page answers a signed-in browser with a redirect, so sign in again by posting.
    let token = app.csrf(&c, "/").await;
    let r = common::post_sign_in(&c, &app.url("/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, &token).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(member_sessions(&t).await, 1);
    assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn over_https_the_session_cookie_is_secure_and_host_only_and_hsts_is_sent() {
    let t = demo_db().await;
    let app =
        TestApp::spawn_with(&t, |c| c.public_url = Some(url::Url::parse("https://console.example").unwrap())).await;
    let r = app.client().get(app.url("/login")).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__Host-mc_session="), "{cookie}");
    assert!(cookie.contains("Secure") && cookie.contains("Path=/") && !cookie.contains("Domain"), "{cookie}");
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");
    // Over plain http (the default) neither.
    let (_t2, plain) = app_with_demo().await;
    let r = plain.client().get(plain.url("/login")).send().await.unwrap();
    assert!(r.headers()["set-cookie"].to_str().unwrap().starts_with("mc_session="));
    assert!(r.headers().get("strict-transport-security").is_none());
}

// ---- Headers, redirects -----------------------------------------------------------------------

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let (_t, app) = app_with_demo().await;
    let c = app.client();
    let answers = vec![
        c.get(app.url("/login")).send().await.unwrap(),
        c.get(app.url("/")).send().await.unwrap(),
        c.get(app.url("/no-such-page")).send().await.unwrap(),
        c.get(app.url("/static/console.css")).send().await.unwrap(),
        c.get(app.url("/healthz")).send().await.unwrap(),
        c.post(app.url("/logout")).form(&[("x", "y")]).send().await.unwrap(),
    ];
    for r in answers {
        let h = r.headers();
        let what = format!("{} {}", r.url(), r.status());
        assert_eq!(h["content-security-policy"], member_console::web::headers::CONTENT_SECURITY_POLICY, "{what}");
        let csp = h["content-security-policy"].to_str().unwrap();
        for part in ["script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'self'"] {
            assert!(csp.contains(part), "{what}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{what}: {csp}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
        assert_eq!(h["referrer-policy"], "same-origin", "{what}");
        assert_eq!(h["x-frame-options"], "DENY", "{what}");
        // A page or, to htmx, a fragment from the same URL: caches must tell them apart.
        let html = h.get("content-type").is_some_and(|v| v.to_str().unwrap().starts_with("text/html"));
        if html {
            let vary = h.get("vary").map(|v| v.to_str().unwrap().to_ascii_lowercase()).unwrap_or_default();
            assert!(vary.contains("hx-request"), "{what}: Vary {vary:?}");
        }
    }
}

#[tokio::test]
async fn the_organization_list_varies_by_the_htmx_target_too() {
    let (_t, app) = app_with_demo().await;
    let (c, _) = common::pages::signed_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    for htmx in [false, true] {
        let mut r = c.get(app.url("/operator/organizations?q=a"));
        if htmx {
            r = r.header("HX-Request", "true").header("HX-Target", "div#org-results");
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["vary"], "HX-Request, HX-Target", "htmx {htmx}");
    }
}

#[tokio::test]
async fn sign_in_never_sends_a_person_to_another_site() {
    let (_t, app) = app_with_demo().await;
    let tricks = [
        "/%09/example.org",
        "/%0a/example.org",
        "/%0d%0a/example.org",
        "//example.org",
        "/%5Cexample.org",
        "%5C%5Cexample.org",
        "https://example.org",
        "/%20/example.org",
        "/%E3%80%80/example.org",
        "javascript:alert(1)",
    ];
    for trick in tricks {
        // Already signed in: the sign-in page sends the person on at once.
        let c = app.client();
        app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
        let r = c.get(app.url(&format!("/login?next={trick}"))).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{trick}");
        assert_eq!(r.headers()["location"], "/", "GET /login?next={trick}");
        // Signing in with it in the form.
        let next = url::form_urlencoded::parse(format!("n={trick}").as_bytes()).next().unwrap().1.into_owned();
        let member = (demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD);
        let r = sign_in_with_next(&app, "/login", member, &next).await;
        assert_eq!(r.headers()["location"], "/", "POST next={next:?}");
    }
}

// ---- Bounds and refusals ------------------------------------------------------------------------

#[tokio::test]
async fn a_read_past_the_request_deadline_is_answered_503_and_stops_in_the_server() {
    let t = demo_db().await;
    let app = app_with_a_short_deadline(&t).await;
    let (c, _) = common::pages::signed_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let (mut a, a_pid) = common::hold_open(&t, "LOCK TABLE core.organizations IN ACCESS EXCLUSIVE MODE").await;
    let started = Instant::now();
    let (r, _) = tokio::join!(
        c.get(app.url("/operator/organizations")).send(),
        common::wait_for_waiter(&t.admin, &t.name, a_pid)
    );
    let r = r.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(r.text().await.unwrap().contains("nothing was changed"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::anyone_waits_on(&t.admin, &t.name, a_pid).await {
        assert!(Instant::now() < deadline, "the read still waits in PostgreSQL after its 503");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
}

#[tokio::test]
async fn a_session_read_held_up_past_the_request_deadline_is_answered_503_and_stops_in_the_server() {
    let t = demo_db().await;
    let app = app_with_a_short_deadline(&t).await;
    let (c, _) = common::pages::signed_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    // The session was last seen long enough ago that this view moves it, and another
    // transaction holds its row: the session's one prepared statement waits on it.
    t.run(sqlx::query("UPDATE core.web_sessions SET last_seen_at = now() - interval '10 minutes'")).await;
    let (mut a, a_pid) = common::hold_open(&t, "SELECT 1 FROM core.web_sessions FOR UPDATE").await;
    let started = Instant::now();
    let (r, _) = tokio::join!(c.get(app.url("/")).send(), common::wait_for_waiter(&t.admin, &t.name, a_pid));
    let r = r.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(started.elapsed() < Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::anyone_waits_on(&t.admin, &t.name, a_pid).await {
        assert!(Instant::now() < deadline, "the session read still waits in PostgreSQL after its 503");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
    // Released, the same session answers the home page again.
    assert_eq!(c.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn a_deadline_during_the_commit_says_the_outcome_is_not_known() {
    let t = demo_db().await;
    // A deferred trigger makes the COMMIT itself slow: the deadline comes while it runs.
    sqlx::raw_sql(
        "CREATE FUNCTION public.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(4); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON core.organizations
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.slow_commit();",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    let app = app_with_a_short_deadline(&t).await;
    let op = common::pages::Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let r = op.post("/operator/organizations", &[("name", "Slow Commit Ltd")], false).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(r.body.contains("could not confirm"), "{}", r.body);
    assert!(!r.body.contains("nothing was changed"), "{}", r.body);
}

#[tokio::test]
async fn a_change_path_past_the_request_deadline_is_a_503_and_past_its_lock_bound_the_refusal() {
    use member_console::db::{TxKind, begin};
    let mut t = demo_db().await;
    let community = common::acts::type_id(&t, "Community").await;
    let support = common::acts::ladder_id(&t, "Support").await;
    let path = format!("/operator/topology/org-types/{community}/default");
    let fields = [("plan_ladder_id", support.to_string()), ("disposition", "migrate".into()), ("reason", "t".into())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();

    // Another change holds the exclusive rendezvous throughout.
    let held = begin(&t.db, TxKind::RuleChange).await.unwrap();
    // The request's deadline (1.5 s) comes before the lock bound (5 s): a 503.
    let slow = app_with_a_short_deadline(&t).await;
    let op = common::pages::Session::sign_in(&slow, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let r = op.post(&path, &fields, true).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(!r.body.contains("Another change is in progress"), "{}", r.body);
    // The lock bound (200 ms) comes first: the refusal.
    t.db.lock_timeout = Duration::from_millis(200);
    let quick = TestApp::spawn(&t).await;
    let op = common::pages::Session::sign_in(&quick, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let r = op.post(&path, &fields, true).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.body.contains("Another change is in progress"), "{}", r.body);
    // Counted as a lock-wait refusal on its route (the 503 before it was not one).
    let route = format!("POST {}", views::paths::ORG_TYPE_DEFAULT);
    assert_eq!(member_console::metrics::global().lock_refusals(&route), 1, "{route}");
    held.rollback().await.unwrap();
    assert_eq!(common::acts::scalar(&t, "SELECT count(*) FROM core.plan_acts").await, 0);
}

#[tokio::test]
async fn a_deadlock_is_tried_once_more_and_the_grant_is_revoked() {
    let t = demo_db().await;
    let org =
        OrganizationId(common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    let pro = common::acts::product_id(&t, "Pro").await;
    let grant = common::acts::grant(&t, org, pro).await;
    let pool: i64 =
        t.one(sqlx::query_scalar("SELECT pool_id FROM core.resource_pools WHERE organization_id = $1").bind(org)).await;
    let app = TestApp::spawn(&t).await;
    let (c, token) = common::pages::signed_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;

    // A takes the pool row; the revoke (B) takes the shared rendezvous and waits on the row; A
    // then asks for the exclusive rendezvous, which B holds shared: a cycle, and B (whose
    // deadlock check comes first) is the victim.
    let (mut a, a_pid) = common::hold_open(
        &t,
        &format!(
            "SET LOCAL deadlock_timeout = '20s'; SELECT 1 FROM core.resource_pools WHERE pool_id = {pool} FOR UPDATE"
        ),
    )
    .await;
    let revoke = {
        let (app_url, c, token) = (app.url(&format!("/operator/grants/{grant}/revoke")), c.clone(), token.clone());
        tokio::spawn(async move {
            c.post(app_url).form(&[("reason", "deadlock test"), ("csrf_token", &token)]).send().await.unwrap()
        })
    };
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    sqlx::query("SELECT pg_advisory_xact_lock(core.rendezvous_key())").execute(&mut *a).await.unwrap();
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    let r = revoke.await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{}", r.text().await.unwrap());
    assert_eq!(common::acts::grant_status(&t, grant).await, "revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sign_ins_leaves_the_probes_and_member_pages_answering_quickly() {
    let (_t, app) = app_behind_proxy().await;
    let (member, _) = common::pages::signed_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    // 300 sign-ins with unknown emails, each from its own address, all at once; each counts
    // itself done when answered.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..300 {
        let c = app.client();
        let login = app.url("/login");
        let csrf_page = app.url("/login");
        let done = done.clone();
        burst.spawn(async move {
            let page = c.get(csrf_page).send().await.unwrap().text().await.unwrap();
            let token = csrf_from(&page).unwrap();
            let r = c
                .post(login)
                .header("X-Forwarded-For", format!("10.{}.{}.1", i / 250, i % 250))
                .form(&[
                    ("email", format!("stranger{i}@example.net")),
                    ("password", "guess".into()),
                    ("csrf_token", token),
                ])
                .send()
                .await
                .unwrap();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            r.status()
        });
    }
    // Meanwhile the probes and the member's home answer without queueing behind the hashing.
    // Measured in sign-ins, not in milliseconds (a loaded machine slows both alike): while a probe
    // is in flight only a few sign-ins finish. Were the hashes computed on the server's async
    // threads, a probe would wait behind the sign-ins queued before it, a large part of the burst.
    let count = || done.load(std::sync::atomic::Ordering::SeqCst);
    let (mut asked_during_burst, mut most_passed_by) = (0, 0);
    // Only a guard against a burst that stopped (a panicked sign-in), not a bound on speed.
    let give_up = Instant::now() + Duration::from_secs(600);
    while count() < 200 {
        assert!(Instant::now() < give_up, "the burst stopped at {} sign-ins", count());
        for path in ["/readyz", "/"] {
            let before = count();
            let r = member.get(app.url(path)).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            most_passed_by = most_passed_by.max(count() - before);
            asked_during_burst += usize::from(before < 150);
        }
    }
    assert!(most_passed_by < 60, "{most_passed_by} sign-ins finished while one probe or page was in flight");
    assert!(asked_during_burst >= 4, "only {asked_during_burst} answers came while half the burst was outstanding");
    while let Some(status) = burst.join_next().await {
        let s = status.unwrap();
        assert!(s == StatusCode::UNAUTHORIZED || s == StatusCode::TOO_MANY_REQUESTS, "a sign-in answered {s}");
    }
}
