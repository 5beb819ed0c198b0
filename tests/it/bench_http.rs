//! `bench http` at a small size: it signs members in, loads their pages and /readyz, times every
//! operator page, and refuses to report figures over answers that were not 2xx.

use crate::common;

use member_console::{
    bench::http::{self, Options},
    config::Config,
    web::routes::{Access, ROUTES},
};

fn config() -> Config {
    common::command_config(&common::root_admin_url(), "bench-http")
}

fn small(member_pages: Option<Vec<String>>) -> Options {
    Options { orgs: 300, connections: 4, seconds: 1.0, keep: false, member_pages }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_loads_member_pages_and_readyz_and_times_every_operator_page() {
    let r = http::run(&config(), &small(None)).await.expect("the bench runs without a failed request");
    let json: serde_json::Value = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    for field in ["orgs", "connections", "page_rps", "page_p99_ms", "readyz_rps", "readyz_p99_ms", "ratio"] {
        assert!(json[field].is_number(), "{field} is missing from {json}");
    }
    assert_eq!(r.orgs, 300);
    assert_eq!(r.connections, 4);
    assert_eq!(
        r.member_pages,
        vec!["/".to_string(), "/sites".to_string(), "/billing".to_string(), "/account".to_string()],
        "the member pages are the route table's"
    );
    assert!(r.page_requests > 0 && r.page_rps > 0.0 && r.page_p99_ms > 0.0, "{json}");
    assert!(r.readyz_requests > 0 && r.readyz_rps > 0.0 && r.readyz_p99_ms > 0.0, "{json}");
    assert!((r.ratio - r.page_rps / r.readyz_rps).abs() < 1e-9);

    let pages = json["operator_pages_ms"].as_object().expect("operator_pages_ms is an object");
    let mut expected: Vec<String> = ROUTES
        .iter()
        .filter(|r| r.access == Access::Operator && r.method == "GET" && !r.path.contains('{'))
        .map(|r| r.path.to_string())
        .collect();
    expected.extend(["/operator/organizations?at=last".into(), "/operator/organizations?q=bench".into()]);
    for p in &expected {
        assert!(pages.contains_key(p), "{p} was not timed: {json}");
    }
    for prefix in ["/operator/plan-acts/", "/operator/organizations/"] {
        assert!(pages.keys().any(|k| k.starts_with(prefix)), "no page under {prefix} was timed: {json}");
    }
    for (p, ms) in pages {
        assert!(ms.as_f64().is_some_and(|ms| ms > 0.0), "{p}: {ms}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_page_fails_the_bench_instead_of_reporting_figures() {
    // A member is refused the operator's pages (403): the run must end in an error.
    let e = http::run(&config(), &small(Some(vec!["/".into(), "/operator".into()])))
        .await
        .expect_err("a run with refusals reports no figures");
    let e = format!("{e:#}");
    assert!(e.contains("failed") && e.contains("/operator") && e.contains("403"), "{e}");
}
