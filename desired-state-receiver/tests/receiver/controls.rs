//! The test controls under `/_receiver/`: injected failures, lies and delays, and reset.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::common::{SECRET, content, control, held, post_signed, push, read_back, start, state, update};

#[tokio::test]
async fn fail_next_answers_the_status_without_applying_and_a_retry_with_the_same_id_applies() {
    let rx = start().await;
    let (status, faults) = control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "fail_next": 2 }))).await;
    assert_eq!(status, 200, "{faults}");
    assert_eq!(faults, json!({ "fail_next": 2, "status": 500, "delay_ms": 0, "stale_next": 0 }));

    for _ in 0..2 {
        let (status, body) = push(&rx, 1, content(1)).await;
        assert_eq!(status, 500, "{body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains("on purpose")), "{body}");
        assert_eq!(held(&rx).await, None, "a failed push is not applied");
    }
    let (status, body) = push(&rx, 1, content(1)).await;
    assert_eq!((status, body), (200, json!({ "generation": 1 })));
    assert_eq!(state(&rx).await["duplicates"], 0, "a failed push's id is not spent");

    // Another status; DELETE clears what remains.
    control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "fail_next": 1, "status": 503 }))).await;
    let (status, _) = push(&rx, 2, content(2)).await;
    assert_eq!(status, 503);
    control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "fail_next": 3 }))).await;
    let (status, faults) = control(&rx, Method::DELETE, "/_receiver/faults", None).await;
    assert_eq!((status, faults["fail_next"].as_u64()), (200, Some(0)));
    let (status, _) = push(&rx, 2, content(2)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn stale_next_applies_the_push_but_answers_the_pushed_generation_minus_one() {
    let rx = start().await;
    control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "stale_next": 1 }))).await;
    let (status, body) = push(&rx, 7, content(7)).await;
    assert_eq!((status, body), (200, json!({ "generation": 6 })));
    assert_eq!(held(&rx).await.expect("held")["generation"], 7, "the push was applied");
    let (status, body) = push(&rx, 8, content(8)).await;
    assert_eq!((status, body), (200, json!({ "generation": 8 })), "only one lie was asked for");
}

#[tokio::test]
async fn a_delay_holds_every_push_and_concurrent_pushes_are_counted_in_flight() {
    let rx = start().await;
    let (_, faults) = control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "delay_ms": 400 }))).await;
    assert_eq!(faults["delay_ms"], 400);
    let mut other = update(1, content(1));
    other["recipient"]["id"] = json!("43");
    let started = Instant::now();
    let (a, b) = tokio::join!(push(&rx, 1, content(1)), post_signed(&rx, SECRET, "ds_8_1", &other));
    assert_eq!((a.0, b.0), (200, 200));
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    assert_eq!(state(&rx).await["in_flight_max"], 2);

    // Read-back and the controls are not delayed; `delay_ms: 0` clears the delay.
    let started = Instant::now();
    let (status, _) = read_back(&rx, SECRET, "organization", "42").await;
    assert_eq!(status, 200);
    control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "delay_ms": 0 }))).await;
    push(&rx, 2, content(2)).await;
    assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_faults_body_with_an_unknown_field_or_status_is_refused() {
    let rx = start().await;
    for body in [json!({ "forget_next": 1 }), json!({ "fail_next": 1, "status": 200 }), json!("fail")] {
        let (status, answer) = control(&rx, Method::POST, "/_receiver/faults", Some(body.clone())).await;
        assert_eq!(status, 400, "{body} → {answer}");
    }
    let (status, _) = push(&rx, 1, content(1)).await;
    assert_eq!(status, 200, "no fault was set");
}

#[tokio::test]
async fn reset_forgets_everything_but_the_secrets() {
    let rx = start().await;
    push(&rx, 3, content(3)).await;
    push(&rx, 2, content(2)).await;
    control(&rx, Method::POST, "/_receiver/faults", Some(json!({ "stale_next": 5 }))).await;
    let (status, state_after) = control(&rx, Method::POST, "/_receiver/reset", None).await;
    assert_eq!(status, 200);
    assert_eq!(state_after["recipients"], json!([]));
    assert_eq!((state_after["pushes"].as_u64(), state_after["ignored_stale"].as_u64()), (Some(0), Some(0)));
    // The same ids are fresh again, the faults are gone and the secret still signs.
    let (status, body) = push(&rx, 3, content(3)).await;
    assert_eq!((status, body), (200, json!({ "generation": 3 })));
    assert_eq!(state(&rx).await["duplicates"], 0);
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_a_json_sentence() {
    let rx = start().await;
    let (status, body) = control(&rx, Method::GET, "/_receiver/nothing", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let (status, body) = control(&rx, Method::PUT, "/desired-state", None).await;
    assert_eq!(status, 405, "{body}");
}
