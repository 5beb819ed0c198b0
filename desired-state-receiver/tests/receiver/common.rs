//! Helpers shared by the receiver's tests, with their own Standard Webhooks signer (so the
//! receiver's verification is checked against an independent one).
#![allow(dead_code)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use desired_state_receiver::{Config, Receiver};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The secret the tests' receivers accept (24 bytes of key).
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A second secret, for rotations.
pub const NEXT_SECRET: &str = "whsec_c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24h";

pub async fn start_with(secrets: &[&str]) -> Receiver {
    let config = Config { secrets: secrets.iter().map(|s| s.to_string()).collect(), ..Config::default() };
    Receiver::start(config).await.expect("the receiver starts")
}

/// A receiver accepting [`SECRET`].
pub async fn start() -> Receiver {
    start_with(&[SECRET]).await
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().expect("reqwest client")
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `v1,<base64 HMAC-SHA256(key, "<id>.<ts>.<body>")>`, the key being the base64 after `whsec_`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> String {
    let key = STANDARD.decode(secret.strip_prefix("whsec_").expect("a whsec_ secret")).expect("a base64 key");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("any key");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

pub async fn json_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body read");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// POST `body` to the push URL with exactly these Standard Webhooks headers.
pub async fn post_with(rx: &Receiver, id: &str, timestamp: i64, signature: &str, body: &str) -> (u16, Value) {
    let req = http()
        .post(rx.push_url())
        .header("Content-Type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body.to_string());
    json_of(req.send().await.expect("the receiver answers")).await
}

/// POST `body`, signed now with `secret`.
pub async fn post_signed(rx: &Receiver, secret: &str, id: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let ts = now();
    post_with(rx, id, ts, &sign(secret, id, ts, &body), &body).await
}

/// A `desired_state.updated` body for organization 42.
pub fn update(generation: u64, content: Value) -> Value {
    json!({
        "type": "desired_state.updated",
        "connection": "Chat seats",
        "recipient": { "kind": "organization", "id": "42" },
        "generation": generation,
        "content": content,
    })
}

/// Content as the console sends it, with a seat count to tell generations apart.
pub fn content(seats: u64) -> Value {
    json!({
        "organization": { "id": "42", "name": "Acme", "type": "Company" },
        "entitlements": { "chat.seats": seats, "chat.video": true },
    })
}

/// Push generation `generation` of organization 42, signed with [`SECRET`], with webhook id
/// `ds_7_<generation>` as the console names it.
pub async fn push(rx: &Receiver, generation: u64, content: Value) -> (u16, Value) {
    post_signed(rx, SECRET, &format!("ds_7_{generation}"), &update(generation, content)).await
}

/// The read-back query of one recipient.
pub fn read_back_query(kind: &str, id: &str) -> String {
    format!("recipient_kind={kind}&recipient_id={id}")
}

/// GET the push URL with `query`, signed over the request target `signed_query` names (the path,
/// `?`, that query): the two differ when a test alters the query under the signature.
pub async fn read_back_signed_over(rx: &Receiver, secret: &str, signed_query: &str, query: &str) -> (u16, Value) {
    let webhook_id = format!("rb_7_{}", now());
    let ts = now();
    let target = format!("/desired-state?{signed_query}");
    let req = http()
        .get(format!("{}?{query}", rx.push_url()))
        .header("webhook-id", &webhook_id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sign(secret, &webhook_id, ts, &target));
    json_of(req.send().await.expect("the receiver answers")).await
}

/// A signed read-back of one recipient (signature over the request target).
pub async fn read_back(rx: &Receiver, secret: &str, kind: &str, id: &str) -> (u16, Value) {
    let query = read_back_query(kind, id);
    read_back_signed_over(rx, secret, &query, &query).await
}

/// A test control under `/_receiver/`.
pub async fn control(rx: &Receiver, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{}{path}", rx.url()));
    if let Some(body) = body {
        req = req.header("Content-Type", "application/json").body(body.to_string());
    }
    json_of(req.send().await.expect("the receiver answers")).await
}

/// `GET /_receiver/state`.
pub async fn state(rx: &Receiver) -> Value {
    let (status, state) = control(rx, reqwest::Method::GET, "/_receiver/state", None).await;
    assert_eq!(status, 200, "{state}");
    state
}

/// What the receiver holds for organization 42 (its state entry), if anything.
pub async fn held(rx: &Receiver) -> Option<Value> {
    let state = state(rx).await;
    state["recipients"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["kind"] == "organization" && r["id"] == "42"))
        .cloned()
}
