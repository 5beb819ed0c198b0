//! Signatures, timestamps and secret rotation: a refused push is 401 and changes nothing.

use desired_state_receiver::{Config, Receiver};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    NEXT_SECRET, SECRET, content, control, held, http, json_of, now, post_signed, post_with, push, sign, start,
    start_with, state, update,
};

/// Assert a refusal: 401 with a sentence, nothing held, counted as rejected.
async fn assert_refused(rx: &Receiver, (status, body): (u16, Value), rejected: u64) {
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.ends_with('.')), "{body}");
    assert_eq!(held(rx).await, None, "a refused push changes nothing");
    let state = state(rx).await;
    assert_eq!((state["rejected"].as_u64(), state["pushes"].as_u64()), (Some(rejected), Some(0)), "{state}");
}

#[tokio::test]
async fn a_push_with_a_bad_signature_is_refused_and_changes_nothing() {
    let rx = start().await;
    let body = update(1, content(1)).to_string();
    let ts = now();
    // Signed over another body, another id, another timestamp, with another key, or not base64.
    let other_body = update(2, content(1)).to_string();
    let attempts = [
        sign(SECRET, "ds_7_1", ts, &other_body),
        sign(SECRET, "ds_7_2", ts, &body),
        sign(SECRET, "ds_7_1", ts - 1, &body),
        sign(NEXT_SECRET, "ds_7_1", ts, &body),
        "v1,not*base64".to_string(),
        sign(SECRET, "ds_7_1", ts, &body).replacen("v1,", "v2,", 1),
    ];
    for (n, signature) in attempts.iter().enumerate() {
        let answer = post_with(&rx, "ds_7_1", ts, signature, &body).await;
        assert_refused(&rx, answer, n as u64 + 1).await;
    }
}

#[tokio::test]
async fn a_push_without_the_three_headers_is_refused() {
    let rx = start().await;
    let body = update(1, content(1)).to_string();
    let ts = now();
    let signature = sign(SECRET, "ds_7_1", ts, &body);
    let headers =
        [("webhook-id", "ds_7_1".to_string()), ("webhook-timestamp", ts.to_string()), ("webhook-signature", signature)];
    for left_out in 0..headers.len() {
        let mut req = http().post(rx.push_url()).body(body.clone());
        for (i, (name, value)) in headers.iter().enumerate() {
            if i != left_out {
                req = req.header(*name, value);
            }
        }
        let answer = json_of(req.send().await.expect("the receiver answers")).await;
        assert_refused(&rx, answer, left_out as u64 + 1).await;
    }
}

#[tokio::test]
async fn a_push_with_a_timestamp_outside_five_minutes_is_refused_and_changes_nothing() {
    let rx = start().await;
    let body = update(1, content(1)).to_string();
    for (n, ts) in [now() - 301, now() + 301].into_iter().enumerate() {
        let answer = post_with(&rx, "ds_7_1", ts, &sign(SECRET, "ds_7_1", ts, &body), &body).await;
        assert!(answer.1["error"].as_str().is_some_and(|e| e.contains("timestamp")), "{}", answer.1);
        assert_refused(&rx, answer, n as u64 + 1).await;
    }
    let answer = post_with(&rx, "ds_7_1", 0, &sign(SECRET, "ds_7_1", 0, &body), &body).await;
    assert_refused(&rx, answer, 3).await;
    // Within the window, the same push is accepted.
    let ts = now() - 240;
    let (status, body) = post_with(&rx, "ds_7_1", ts, &sign(SECRET, "ds_7_1", ts, &body), &body).await;
    assert_eq!((status, body), (200, json!({ "generation": 1 })));
}

#[tokio::test]
async fn a_push_signed_with_a_removed_secret_is_refused_and_changes_nothing() {
    let rx = start().await;
    let (status, answer) =
        control(&rx, Method::POST, "/_receiver/secrets", Some(json!({ "secrets": [NEXT_SECRET] }))).await;
    assert_eq!((status, answer), (200, json!({ "secrets": 1 })));
    let answer = post_signed(&rx, SECRET, "ds_7_1", &update(1, content(1))).await;
    assert_refused(&rx, answer, 1).await;
    let (status, body) = post_signed(&rx, NEXT_SECRET, "ds_7_1", &update(1, content(1))).await;
    assert_eq!((status, body), (200, json!({ "generation": 1 })), "the id of a refused push is not spent");
}

#[tokio::test]
async fn during_a_rotation_a_header_with_one_valid_signature_among_two_is_accepted() {
    // The receiver still has only the old secret; the console signs with both.
    let rx = start().await;
    let body = update(1, content(1)).to_string();
    let ts = now();
    let both = format!("{} {}", sign(NEXT_SECRET, "ds_7_1", ts, &body), sign(SECRET, "ds_7_1", ts, &body));
    let (status, answer) = post_with(&rx, "ds_7_1", ts, &both, &body).await;
    assert_eq!((status, answer), (200, json!({ "generation": 1 })));

    // The receiver switches to accepting both, then only the new one.
    rx.set_secrets(&[SECRET.to_string(), NEXT_SECRET.to_string()]).expect("valid secrets");
    let (status, _) = post_signed(&rx, SECRET, "ds_7_2", &update(2, content(2))).await;
    assert_eq!(status, 200);
    let (status, _) = post_signed(&rx, NEXT_SECRET, "ds_7_3", &update(3, content(3))).await;
    assert_eq!(status, 200);
    control(&rx, Method::POST, "/_receiver/secrets", Some(json!({ "secrets": [NEXT_SECRET] }))).await;
    let body = update(4, content(4)).to_string();
    let ts = now();
    let both = format!("{} {}", sign(SECRET, "ds_7_4", ts, &body), sign(NEXT_SECRET, "ds_7_4", ts, &body));
    let (status, answer) = post_with(&rx, "ds_7_4", ts, &both, &body).await;
    assert_eq!((status, answer), (200, json!({ "generation": 4 })));
    let (status, _) = post_signed(&rx, SECRET, "ds_7_5", &update(5, content(5))).await;
    assert_eq!(status, 401);
    assert_eq!(held(&rx).await.expect("held")["generation"], 4);
}

#[tokio::test]
async fn malformed_secrets_are_refused_at_start_and_by_the_control() {
    let config = Config { secrets: vec!["not-a-whsec".into()], ..Config::default() };
    let refused = Receiver::start(config).await.err().expect("a malformed secret is refused");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    assert!(refused.to_string().contains("whsec_"), "{refused}");

    let rx = start_with(&[SECRET]).await;
    let (status, body) =
        control(&rx, Method::POST, "/_receiver/secrets", Some(json!({ "secrets": ["whsec_%%%"] }))).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = push(&rx, 1, content(1)).await;
    assert_eq!(status, 200, "the secrets in force are kept");
    assert!(desired_state_receiver::new_secret().starts_with(desired_state_receiver::SECRET_PREFIX));
}
