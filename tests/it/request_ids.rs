//! Following a request (issue 39): a member's site request is enqueued with the request's id,
//! the worker runs its job under that id, and the farm's API receives it (`x-request-id` and a
//! `traceparent`) and logs it: the same id on both sides.

use std::time::Duration;

use member_console::trace_context;

use crate::{browser::site_worker, sites::setup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_request_made_on_a_members_request_reaches_the_farm_with_that_requests_id() {
    let s = setup("Basic").await;
    let id = trace_context::scope("member-req-42".into(), s.create("traced")).await.unwrap();
    let kept: Option<String> =
        s.t.one(sqlx::query_scalar(
            "SELECT request_id FROM integration.jobs WHERE kind = 'fedwiki_request' ORDER BY job_id DESC LIMIT 1",
        ))
        .await;
    assert_eq!(kept.as_deref(), Some("member-req-42"), "the job keeps the id of the request that enqueued it");

    let stop = site_worker(&s.t, s.f.farm.clone());
    let started = std::time::Instant::now();
    let call = loop {
        let calls: serde_json::Value =
            s.f.http.get(format!("{}/_farm/calls", s.f.local.base_url())).send().await.unwrap().json().await.unwrap();
        let create = calls["calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["method"] == "PUT" && c["path"] == "/api/sites/traced.wiki.localhost")
            .cloned();
        if let Some(c) = create {
            break c;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the farm was never asked to create the site: {calls}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = stop.send(true);
    assert_eq!(call["request_id"], "member-req-42", "the farm logged the member's request id: {call}");
    let _ = id;
}

#[tokio::test]
async fn a_job_no_request_enqueued_keeps_no_request_id() {
    let s = setup("Basic").await;
    s.create("untraced").await.unwrap();
    let kept: Option<String> =
        s.t.one(sqlx::query_scalar("SELECT request_id FROM integration.jobs WHERE kind = 'fedwiki_request'")).await;
    assert_eq!(kept, None);
}
