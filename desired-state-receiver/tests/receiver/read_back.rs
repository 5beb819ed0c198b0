//! Read-back: a signed GET of what the receiver holds, and drift made with the tamper control.

use reqwest::Method;
use serde_json::json;

use crate::common::{
    NEXT_SECRET, SECRET, content, control, http, json_of, now, post_signed, push, read_back, read_back_query,
    read_back_signed_over, sign, start, state,
};

#[tokio::test]
async fn read_back_answers_the_generation_and_content_held() {
    let rx = start().await;
    push(&rx, 6, content(12)).await;
    let (status, body) = read_back(&rx, SECRET, "organization", "42").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({ "generation": 6, "content": content(12) }));
    assert_eq!(state(&rx).await["read_backs"], 1);
}

#[tokio::test]
async fn read_back_of_a_recipient_nothing_was_pushed_for_is_404() {
    let rx = start().await;
    push(&rx, 1, content(1)).await;
    for (kind, id) in [("organization", "43"), ("team", "42")] {
        let (status, body) = read_back(&rx, SECRET, kind, id).await;
        assert_eq!(status, 404, "{body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains(id)), "{body}");
    }
}

#[tokio::test]
async fn read_back_with_a_bad_signature_is_401() {
    let rx = start().await;
    push(&rx, 1, content(1)).await;
    let (status, body) = read_back(&rx, NEXT_SECRET, "organization", "42").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.get("content").is_none(), "{body}");

    // Signed over the empty body, or over the query without the path: not the request target.
    let ts = now();
    let req = http()
        .get(format!("{}?recipient_kind=organization&recipient_id=42", rx.push_url()))
        .header("webhook-id", "rb_1_x")
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sign(SECRET, "rb_1_x", ts, ""));
    let (status, _) = json_of(req.send().await.expect("the receiver answers")).await;
    assert_eq!(status, 401);
    let req = http()
        .get(format!("{}?recipient_kind=organization&recipient_id=42", rx.push_url()))
        .header("webhook-id", "rb_1_x")
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sign(SECRET, "rb_1_x", ts, "recipient_kind=organization&recipient_id=42"));
    let (status, _) = json_of(req.send().await.expect("the receiver answers")).await;
    assert_eq!(status, 401);
    // Unsigned.
    let (status, _) = json_of(
        http()
            .get(format!("{}?recipient_kind=organization&recipient_id=42", rx.push_url()))
            .send()
            .await
            .expect("answer"),
    )
    .await;
    assert_eq!(status, 401);
    let state = state(&rx).await;
    assert_eq!((state["rejected"].as_u64(), state["read_backs"].as_u64()), (Some(4), Some(0)), "{state}");
}

#[tokio::test]
async fn a_read_back_whose_query_was_altered_under_its_signature_is_refused() {
    let rx = start().await;
    push(&rx, 3, content(3)).await;
    // A second recipient, held too: the altered read-back would otherwise answer its content.
    let mut other = crate::common::update(5, json!({ "entitlements": { "chat.seats": 77 } }));
    other["recipient"]["id"] = json!("43");
    assert_eq!(post_signed(&rx, SECRET, "ds_8_5", &other).await.0, 200);

    let signed = read_back_query("organization", "42");
    let (status, body) = read_back_signed_over(&rx, SECRET, &signed, &signed).await;
    assert_eq!(status, 200, "the query as signed is answered: {body}");
    for altered in [
        read_back_query("organization", "43"),
        format!("{signed}&recipient_id=43"),
        "recipient_id=42&recipient_kind=organization".to_string(),
    ] {
        let (status, body) = read_back_signed_over(&rx, SECRET, &signed, &altered).await;
        assert_eq!(status, 401, "{altered}: {body}");
        assert!(body.get("content").is_none(), "{body}");
    }
    let state = state(&rx).await;
    assert_eq!((state["rejected"].as_u64(), state["read_backs"].as_u64()), (Some(3), Some(1)), "{state}");
}

#[tokio::test]
async fn tampering_changes_the_content_read_back_but_not_the_generation() {
    let rx = start().await;
    push(&rx, 4, content(4)).await;
    let drifted = json!({ "entitlements": { "chat.seats": 999 } });
    let (status, body) = control(
        &rx,
        Method::POST,
        "/_receiver/tamper",
        Some(json!({ "kind": "organization", "id": 42, "content": drifted })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = read_back(&rx, SECRET, "organization", "42").await;
    assert_eq!((status, body), (200, json!({ "generation": 4, "content": drifted })));

    // A replay of the held generation under a new webhook id repairs the drift.
    let (status, _) =
        crate::common::post_signed(&rx, SECRET, "ds_7_4_repair", &crate::common::update(4, content(4))).await;
    assert_eq!(status, 200);
    let (_, body) = read_back(&rx, SECRET, "organization", "42").await;
    assert_eq!(body, json!({ "generation": 4, "content": content(4) }));

    let (status, body) = control(
        &rx,
        Method::POST,
        "/_receiver/tamper",
        Some(json!({ "kind": "organization", "id": "43", "content": {} })),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}
