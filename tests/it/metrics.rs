//! `/metrics`, the overview's health and charts, and the per-minute samples behind them.

use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use member_console::{
    db::locks::Lock,
    services::observability::{SAMPLE_LOCKS, sample_minute},
};
use reqwest::StatusCode;

use crate::common::{self, TestApp, TestDb, pages};

async fn scrape(app: &TestApp, bearer: Option<&str>) -> pages::Answer {
    let c = reqwest::Client::new();
    let mut rq = c.get(app.url("/metrics"));
    if let Some(b) = bearer {
        rq = rq.bearer_auth(b);
    }
    pages::answer(rq.send().await.unwrap()).await
}

#[tokio::test]
async fn a_loopback_scraper_reads_requests_by_route_the_queue_the_drains_and_the_pool() {
    let (t, app) = pages::app_with_demo().await;
    // A job waiting, and a failed one, of kinds of their own.
    t.run(sqlx::query(
        "INSERT INTO integration.jobs (kind, run_at) VALUES ('metrics.waiting', now() - interval '2 minutes')",
    ))
    .await;
    t.run(sqlx::query(
        "INSERT INTO integration.jobs (kind, state, finished_at, last_error) VALUES ('metrics.broken', 'failed', now(), 'no')",
    )).await;
    let c = app.client();
    assert_eq!(pages::get(&app, &c, "/login").await.status, StatusCode::OK);
    assert_eq!(pages::get(&app, &c, "/no/such/page/%6F").await.status, StatusCode::NOT_FOUND);
    let made_up = reqwest::Method::from_bytes(b"MADEUPMETHOD").unwrap();
    assert_eq!(c.request(made_up, app.url("/login")).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    let r = scrape(&app, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.header("content-type").unwrap().starts_with("text/plain; version=0.0.4"));
    let b = &r.body;
    assert!(b.contains(r#"console_http_requests_total{route="/login",method="GET",status="200"} 1"#), "{b}");
    // An unknown path is counted under one label, whatever was asked: no label per attacker's path.
    assert!(b.contains(r#"console_http_requests_total{route="unmatched",method="GET",status="404"} 1"#), "{b}");
    assert!(!b.contains("/no/such/page"), "{b}");
    // Nor a label per made-up method: any method HTTP does not name is "other".
    assert!(b.contains(r#"console_http_requests_total{route="/login",method="other",status="404"} 1"#), "{b}");
    assert!(!b.contains("MADEUPMETHOD"), "{b}");
    assert!(b.contains(r#"console_http_request_duration_seconds_count{route="/login",method="GET"} 1"#), "{b}");
    assert!(b.contains(r#"console_jobs_queued{kind="metrics.waiting"} 1"#), "{b}");
    let waited = b
        .lines()
        .find_map(|l| l.strip_prefix(r#"console_jobs_oldest_due_age_seconds{kind="metrics.waiting"} "#))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!((110.0..600.0).contains(&waited), "{waited}");
    assert!(b.contains(r#"console_jobs_failed{kind="metrics.broken"} 1"#), "{b}");
    assert!(b.contains(r#"console_drains_in_progress{kind="rule_change"} 0"#), "{b}");
    assert!(b.contains(r#"console_drains_in_progress{kind="plan_act"} 0"#), "{b}");
    assert!(b.contains("console_outbox_pending 0"), "{b}");
    assert!(b.contains(r#"console_desired_state_backlog{kind="behind"} 0"#), "{b}");
    assert!(b.contains(r#"console_connected{system="stripe"} 0"#), "{b}");
    assert!(b.contains("# TYPE console_db_pool_connections gauge"), "{b}");
    assert!(b.contains(r#"console_db_pool_connections{state="in_use"} "#), "{b}");
    assert!(b.contains("# TYPE console_remote_call_duration_seconds histogram"), "{b}");
    assert!(b.contains("# TYPE console_lock_wait_refusals_total counter"), "{b}");
}

#[tokio::test]
async fn with_a_token_set_only_a_scraper_bearing_it_reads_the_metrics_and_others_see_nothing_there() {
    let t = TestDb::new().await;
    let token = "metrics-token-for-the-test-0123";
    let app = TestApp::spawn_with(&t, |c| c.metrics_token = Some(token.into())).await;
    let r = scrape(&app, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!r.body.contains("console_"), "{}", r.body);
    let r = scrape(&app, Some("metrics-token-for-the-test-0124")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = scrape(&app, Some(token)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.body.contains("console_jobs_queued") || r.body.contains("# TYPE console_jobs_queued gauge"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn a_proxied_request_from_loopback_does_not_read_the_metrics_without_the_token() {
    let t = TestDb::new().await;
    let app = TestApp::spawn(&t).await;
    let r = pages::answer(
        reqwest::Client::new().get(app.url("/metrics")).header("x-forwarded-for", "203.0.113.9").send().await.unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_second_server_sampling_the_same_minute_waits_on_the_first_and_keeps_its_figures() {
    let t = TestDb::new().await;
    let minute = Utc::now().duration_trunc(TimeDelta::minutes(1)).unwrap();
    t.run(sqlx::query("INSERT INTO integration.jobs (kind) VALUES ('metrics.waiting'), ('metrics.waiting')")).await;

    // A: the first server's sample, its statement not yet committed.
    let (mut a, a_pid) = t.runtime_begin().await;
    member_console::store::metrics::write_samples(&mut a, minute, "server-a", 5.0, 7.0, 0.0).await.unwrap();

    // B: the second server's, for the same minute, waits on A's shared rows.
    let db = t.db.clone();
    let at = minute + TimeDelta::seconds(30);
    let b = tokio::spawn(async move { sample_minute(&db, "server-b", 3, at).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    assert_eq!(SAMPLE_LOCKS.locks, &[Lock::MetricSampleRows]);
    let on_samples = common::lock_types_on(&t.admin, waiter, "integration.metric_samples").await;
    assert!(!on_samples.is_empty(), "B waits on the samples' rows");
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), b).await.unwrap().unwrap().unwrap();

    // The requests add up across servers; the shared figures are the first server's.
    let rows: Vec<(String, String, f64)> =
        t.all(sqlx::query_as("SELECT name, source, value FROM integration.metric_samples ORDER BY name, source")).await;
    assert_eq!(
        rows,
        vec![
            ("drain_remaining".into(), "db".into(), 0.0),
            ("queue_depth".into(), "db".into(), 7.0),
            ("requests".into(), "server-a".into(), 5.0),
            ("requests".into(), "server-b".into(), 3.0),
        ]
    );
    let summed = member_console::store::metrics::samples(&mut t.db.pool.acquire().await.unwrap(), "requests", minute)
        .await
        .unwrap();
    assert_eq!(summed.len(), 1);
    assert_eq!(summed[0].value, 8.0);

    // A later sample of the same server in the same minute adds to its own row; old minutes go.
    sample_minute(&t.db, "server-b", 2, at + TimeDelta::seconds(10)).await.unwrap();
    sample_minute(&t.db, "server-b", 1, at + TimeDelta::hours(3)).await.unwrap();
    let left: Vec<(String, f64)> = t
        .all(sqlx::query_as(
            "SELECT name, value FROM integration.metric_samples WHERE source = 'server-b' ORDER BY minute, name",
        ))
        .await;
    assert_eq!(
        left,
        vec![("requests".into(), 1.0)],
        "the sample three hours on forgot the minute two hours past keeping"
    );
}

#[tokio::test]
async fn the_overview_shows_each_subsystem_and_charts_the_samples_of_the_last_hour() {
    let (t, op) = pages::operator_session().await;
    let now = Utc::now();
    for (ago, requests, queued) in [(30, 120.0, 4.0), (20, 300.0, 9.0), (2, 60.0, 1.0)] {
        let at = now - TimeDelta::minutes(ago);
        let mut conn = t.db.pool.acquire().await.unwrap();
        member_console::store::metrics::write_samples(
            &mut conn,
            at.duration_trunc(TimeDelta::minutes(1)).unwrap(),
            "s1",
            requests,
            queued,
            0.0,
        )
        .await
        .unwrap();
    }
    let r = op.get("/operator").await;
    assert_eq!(r.status, StatusCode::OK);
    let b = &r.body;
    for name in ["Jobs", "Drains", "Outbox", "Stripe", "Farm", "Relay"] {
        assert!(b.contains(&format!(">{name}</")), "{name}: {b}");
    }
    // The test's console has neither Stripe nor a farm connected, and says so.
    assert!(b.contains("Billing is off"), "{b}");
    assert!(b.contains("Sites are off"), "{b}");
    assert!(b.contains("Requests per minute"), "{b}");
    assert!(b.contains("now 60, highest 300"), "{b}");
    assert!(b.contains("now 1, highest 9"), "{b}");
    assert!(b.matches("<svg").count() >= 2, "{b}");
    assert!(b.contains("Drain moves owed"), "{b}");
}

#[tokio::test]
async fn farm_calls_are_timed_by_operation_and_a_refused_one_counts_as_an_error_while_a_404_does_not() {
    use member_console::metrics::{System, global};
    let f = common::farm::FarmFixture::start().await;
    f.farm.list_sites().await.unwrap();
    assert!(
        f.farm.get_site(&member_console::ids::SiteDomain::from("nobody.wiki.localhost")).await.unwrap().is_none(),
        "a 404 is an answer"
    );
    f.faults(serde_json::json!({ "fail_next": 1, "status": 503 })).await;
    assert!(f.farm.list_sites().await.is_err());
    assert_eq!(global().remote_calls(System::Farm), (3, 1));
    let mut out = String::new();
    global().render(&mut out);
    assert!(
        out.contains(
            r#"console_remote_call_duration_seconds_count{system="farm",operation="list the farm's sites"} 2"#
        ),
        "{out}"
    );
    assert!(
        out.contains(r#"console_remote_call_errors_total{system="farm",operation="list the farm's sites"} 1"#),
        "{out}"
    );
    assert!(
        !out.contains(r#"console_remote_call_errors_total{system="farm",operation="read a site on the farm"}"#),
        "{out}"
    );
}

/// The value of the unlabelled sample `name` in a scrape, which must be there once.
fn value_of(body: &str, name: &str) -> f64 {
    let values: Vec<f64> = body
        .lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{name}'s value {v:?}: {e}")))
        .collect();
    assert_eq!(values.len(), 1, "one sample of {name}: {body}");
    values[0]
}

#[tokio::test]
async fn a_scrape_carries_the_process_figures_prometheus_expects_and_the_build_it_came_from() {
    let t = TestDb::new().await;
    let app = TestApp::spawn(&t).await;
    let r = scrape(&app, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let b = &r.body;
    // The names, types and units of the client libraries' process collector.
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("member_console_build_info", "gauge"),
    ] {
        assert!(b.contains(&format!("# TYPE {name} {kind}\n")), "{name} is a {kind}: {b}");
        assert!(b.contains(&format!("# HELP {name} ")), "{name} has its help: {b}");
    }
    // This process (the server runs in the test's) has done work, holds memory and files.
    let cpu = value_of(b, "process_cpu_seconds_total");
    assert!(cpu > 0.0 && cpu < 24.0 * 3600.0, "cpu {cpu}");
    let resident = value_of(b, "process_resident_memory_bytes");
    let virtual_ = value_of(b, "process_virtual_memory_bytes");
    assert!(resident > 1024.0 * 1024.0, "resident {resident}: at least a MiB, in bytes not pages");
    assert!(virtual_ >= resident, "virtual {virtual_} < resident {resident}");
    let open = value_of(b, "process_open_fds");
    let max = value_of(b, "process_max_fds");
    assert!(open > 0.0 && open <= max, "open {open}, max {max}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = value_of(b, "process_start_time_seconds");
    assert!(started > now - 24.0 * 3600.0 && started <= now + 1.0, "started {started}, now {now}");
    // A second scrape a moment on: the counter does not go back, the start stays put.
    let again = scrape(&app, None).await.body;
    assert!(value_of(&again, "process_cpu_seconds_total") >= cpu);
    assert!((value_of(&again, "process_start_time_seconds") - started).abs() < 0.02);

    // The build: the crate's version and the commit it was built from (as git says now).
    let info = b.lines().find(|l| l.starts_with("member_console_build_info{")).expect("a build info line");
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    assert_eq!(
        info,
        format!(r#"member_console_build_info{{version="{}",git_commit="{commit}"}} 1"#, env!("CARGO_PKG_VERSION"))
    );
}
