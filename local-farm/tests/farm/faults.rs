//! The test controls: injected failures and delays on `/api` calls, and the callback log.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::common::{TOKEN, control, delete_site, get_site, http, json_of, list, put_site, start};

#[tokio::test]
async fn fail_next_fails_that_many_api_calls_with_an_error_body_then_calls_work_again() {
    let (farm, _data) = start().await;
    let (status, faults) = control(&farm, Method::POST, "/_farm/faults", Some(json!({ "fail_next": 2 }))).await;
    assert_eq!(status, 200, "{faults}");
    assert_eq!(faults, json!({ "fail_next": 2, "status": 503, "delay_ms": 0, "hold_answer_ms": 0, "method": null }));

    let (status, body) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("fault")), "{body}");
    let (status, _) = list(&farm).await;
    assert_eq!(status, 503);
    let (status, body) = list(&farm).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sites"], json!([]), "the failed create did nothing");

    control(&farm, Method::POST, "/_farm/faults", Some(json!({ "fail_next": 1, "status": 500 }))).await;
    let (status, _) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 500);
    let (status, _) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 201);

    // DELETE clears pending failures; unauthorized calls are refused before they use one up.
    control(&farm, Method::POST, "/_farm/faults", Some(json!({ "fail_next": 5 }))).await;
    let (status, faults) = control(&farm, Method::DELETE, "/_farm/faults", None).await;
    assert_eq!(status, 200);
    assert_eq!(faults["fail_next"], 0);
    let (status, _) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(status, 200);
    control(&farm, Method::POST, "/_farm/faults", Some(json!({ "fail_next": 1 }))).await;
    let (status, _) = json_of(http().get(format!("{}/api/sites", farm.base_url())).send().await.expect("answer")).await;
    assert_eq!(status, 401);
    let (status, _) = list(&farm).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn a_delay_holds_every_api_call_until_it_is_cleared() {
    let (farm, _data) = start().await;
    control(&farm, Method::POST, "/_farm/faults", Some(json!({ "delay_ms": 400 }))).await;
    for _ in 0..2 {
        let started = Instant::now();
        let (status, _) = list(&farm).await;
        assert_eq!(status, 200);
        assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    }
    // The controls themselves are not delayed.
    let started = Instant::now();
    let (status, faults) = control(&farm, Method::POST, "/_farm/faults", Some(json!({ "delay_ms": 0 }))).await;
    assert!(started.elapsed() < Duration::from_millis(400));
    assert_eq!(status, 200);
    assert_eq!(faults["delay_ms"], 0);
    let started = Instant::now();
    list(&farm).await;
    assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());

    // A delay and a failure together: wait, then fail.
    control(&farm, Method::POST, "/_farm/faults", Some(json!({ "delay_ms": 300, "fail_next": 1, "status": 502 })))
        .await;
    let started = Instant::now();
    let (status, _) = list(&farm).await;
    assert_eq!(status, 502);
    assert!(started.elapsed() >= Duration::from_millis(300));
    control(&farm, Method::DELETE, "/_farm/faults", None).await;
    let started = Instant::now();
    let (status, _) = list(&farm).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn a_held_answer_comes_after_the_call_was_done_and_a_method_scopes_the_faults() {
    let (farm, _data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let (status, faults) = control(
        &farm,
        Method::POST,
        "/_farm/faults",
        Some(json!({ "hold_answer_ms": 1500, "method": "delete", "fail_next": 1, "status": 500 })),
    )
    .await;
    assert_eq!(status, 200, "{faults}");
    assert_eq!(faults["method"], "DELETE");
    // Other methods meet none of it: no hold, and the failure is not used up.
    let started = Instant::now();
    assert_eq!(list(&farm).await.0, 200);
    assert_eq!(get_site(&farm, "acme.wiki.localhost").await.0, 200);
    assert!(started.elapsed() < Duration::from_millis(1000), "{:?}", started.elapsed());
    // The DELETE fails first (a failure holds nothing), then is done at once and answered late.
    assert_eq!(delete_site(&farm, "acme.wiki.localhost").await.0, 500);
    let delete = http().delete(format!("{}/api/sites/acme.wiki.localhost", farm.base_url())).bearer_auth(TOKEN);
    let deleting = tokio::spawn(async move { delete.send().await.expect("the farm answers").status().as_u16() });
    let started = Instant::now();
    loop {
        if get_site(&farm, "acme.wiki.localhost").await.0 == 404 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "the delete was not done before its answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!deleting.is_finished(), "its answer is held");
    assert!(matches!(deleting.await.unwrap(), 200 | 204));
    assert!(started.elapsed() >= Duration::from_millis(1000), "{:?}", started.elapsed());
    let (_, faults) = control(&farm, Method::POST, "/_farm/faults", Some(json!({ "method": "" }))).await;
    assert_eq!(faults["method"], serde_json::Value::Null);
}

#[tokio::test]
async fn bad_fault_requests_are_400() {
    let (farm, _data) = start().await;
    for body in [json!({ "fail_next": 1, "status": 200 }), json!({ "fail_next": -1 }), json!({ "times": 1 })] {
        let (status, answer) = control(&farm, Method::POST, "/_farm/faults", Some(body)).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer["error"].is_string());
    }
    let (status, _) = list(&farm).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_callback_log_is_empty_without_a_callback_url() {
    let (farm, _data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let (status, body) = control(&farm, Method::GET, "/_farm/callbacks", None).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({ "callbacks": [] }));
}
