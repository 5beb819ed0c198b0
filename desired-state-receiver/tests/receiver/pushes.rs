//! Pushes and tests: what is applied, what is ignored, and what each is answered.

use serde_json::json;

use crate::common::{SECRET, content, held, http, now, post_signed, post_with, push, sign, start, state, update};

#[tokio::test]
async fn a_correctly_signed_push_is_applied_and_answered_with_its_generation() {
    let rx = start().await;
    let (status, body) = push(&rx, 7, content(25)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({ "generation": 7 }));

    let held = held(&rx).await.expect("organization 42 is held");
    assert_eq!(held["generation"], 7);
    assert_eq!(held["content"], content(25));
    assert_eq!(held["history"], json!([{ "generation": 7, "content": content(25) }]));
    assert!(held["updated_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{held}");
    let state = state(&rx).await;
    assert_eq!((state["pushes"].as_u64(), state["rejected"].as_u64()), (Some(1), Some(0)), "{state}");

    // A newer generation replaces it, and the history keeps both.
    let (status, body) = push(&rx, 8, content(30)).await;
    assert_eq!((status, body), (200, json!({ "generation": 8 })));
    let held = crate::common::held(&rx).await.expect("held");
    assert_eq!(held["content"], content(30));
    assert_eq!(held["history"].as_array().map(Vec::len), Some(2));
    rx.stop().await;
}

#[tokio::test]
async fn a_numeric_recipient_id_is_held_under_its_decimal_text() {
    let rx = start().await;
    let mut body = update(1, json!({ "seats": 1 }));
    body["recipient"]["id"] = json!(42);
    let (status, answer) = post_signed(&rx, SECRET, "ds_1_1", &body).await;
    assert_eq!((status, answer), (200, json!({ "generation": 1 })));
    assert_eq!(held(&rx).await.expect("held")["content"], json!({ "seats": 1 }));
}

#[tokio::test]
async fn an_older_generation_is_ignored_and_answered_with_the_generation_held() {
    let rx = start().await;
    push(&rx, 5, content(5)).await;
    let (status, body) = push(&rx, 4, content(4)).await;
    assert_eq!((status, body), (200, json!({ "generation": 5 })));
    let held = held(&rx).await.expect("held");
    assert_eq!((held["generation"].as_u64(), &held["content"]), (Some(5), &content(5)));
    assert_eq!(held["history"].as_array().map(Vec::len), Some(1));
    assert_eq!(state(&rx).await["ignored_stale"], 1);
}

#[tokio::test]
async fn an_equal_generation_is_a_replay_whose_content_replaces_the_one_held() {
    let rx = start().await;
    push(&rx, 3, content(3)).await;
    let (status, body) = post_signed(&rx, SECRET, "ds_7_3_again", &update(3, content(33))).await;
    assert_eq!((status, body), (200, json!({ "generation": 3 })));
    assert_eq!(held(&rx).await.expect("held")["content"], content(33));
    assert_eq!(state(&rx).await["replays"], 1);
}

#[tokio::test]
async fn a_repeated_webhook_id_is_counted_as_a_duplicate_and_not_applied_again() {
    let rx = start().await;
    push(&rx, 2, content(2)).await;
    // The same id again, freshly signed, even with other content and a newer generation.
    let (status, body) = post_signed(&rx, SECRET, "ds_7_2", &update(9, content(9))).await;
    assert_eq!((status, body), (200, json!({ "generation": 2 })));
    let held = held(&rx).await.expect("held");
    assert_eq!((held["generation"].as_u64(), &held["content"]), (Some(2), &content(2)));
    let state = state(&rx).await;
    assert_eq!((state["duplicates"].as_u64(), state["pushes"].as_u64()), (Some(1), Some(2)), "{state}");
}

#[tokio::test]
async fn a_test_event_is_recorded_and_answered_ok() {
    let rx = start().await;
    let test = json!({ "type": "desired_state.test", "connection": "Chat seats", "sent_at": "2026-01-02T03:04:05Z" });
    let (status, body) = post_signed(&rx, SECRET, "dt_7_abc", &test).await;
    assert_eq!((status, body), (200, json!({ "ok": true })));
    let state = state(&rx).await;
    assert_eq!(state["tests"], 1);
    assert_eq!(state["last_test"], test);
    assert_eq!(state["recipients"], json!([]));
}

#[tokio::test]
async fn a_malformed_body_is_refused_with_400_only_once_its_signature_is_checked() {
    let rx = start().await;
    let ts = now();
    let (status, body) = post_with(&rx, "ds_1_1", ts, &sign(SECRET, "ds_1_1", ts, "{not json"), "{not json").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("JSON")), "{body}");
    let (status, _) = post_with(&rx, "ds_1_1", ts, "v1,AAAA", "{not json").await;
    assert_eq!(status, 401, "a bad signature is refused before the body is read");

    for bad in [
        json!({ "type": "desired_state.updated", "recipient": { "kind": "organization", "id": "42" }, "generation": 0, "content": {} }),
        json!({ "type": "desired_state.updated", "recipient": { "kind": "organization", "id": "42" }, "generation": 1 }),
        json!({ "type": "desired_state.updated", "recipient": { "kind": "organization", "id": true }, "generation": 1, "content": {} }),
        json!({ "type": "desired_state.deleted" }),
        json!({ "generation": 1 }),
    ] {
        let (status, body) = post_signed(&rx, SECRET, &format!("ds_bad_{}", now()), &bad).await;
        assert_eq!(status, 400, "{bad} → {body}");
        assert!(body["error"].is_string(), "{body}");
    }
    assert_eq!(state(&rx).await["recipients"], json!([]));
}

#[tokio::test]
async fn the_page_lists_every_recipient_held_with_its_content_escaped() {
    let rx = start().await;
    push(&rx, 1, json!({ "organization": { "name": "<b>Acme & Co</b>" } })).await;
    let resp = http().get(format!("{}/", rx.url())).send().await.expect("the receiver answers");
    assert_eq!(resp.status().as_u16(), 200);
    let page = resp.text().await.expect("the page");
    assert!(page.contains("<title>Desired-state receiver</title>"), "{page}");
    assert!(page.contains("&lt;b&gt;Acme &amp; Co&lt;/b&gt;"), "{page}");
    assert!(!page.contains("<b>Acme"), "{page}");
    assert!(page.contains("<td>organization</td><td>42</td><td>1</td>"), "{page}");
    assert!(page.contains(&rx.push_url()), "{page}");
}
