//! Helpers shared by the stand-in's integration tests.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use stripe_standin::{Config, StandIn};

pub const KEY: &str = "sk_test_standin_tests";

pub async fn start() -> StandIn {
    start_with(Config::default()).await
}

pub async fn start_with(config: Config) -> StandIn {
    StandIn::start(config).await.expect("stand-in starts")
}

/// async-stripe's own client, pointed at the stand-in.
pub fn client(standin: &StandIn) -> stripe::Client {
    stripe::ClientBuilder::new(KEY).url(standin.base_url()).build().expect("client builds")
}

/// A raw HTTP client that does not follow redirects (to see the hosted page's 303).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("reqwest client")
}

/// POST a form to the API with the test key; returns status, headers and JSON body.
pub async fn post(standin: &StandIn, path: &str, form: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = http()
        .post(format!("{}{path}", standin.base_url()))
        .bearer_auth(KEY)
        .form(form)
        .send()
        .await
        .expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json_value().await;
    (status, headers, body)
}

/// Make `payment_method` the customer's default, as a card change does; returns the status.
pub async fn set_default_payment_method(standin: &StandIn, customer: &str, payment_method: &str) -> u16 {
    let form = [("invoice_settings[default_payment_method]", payment_method)];
    post(standin, &format!("/v1/customers/{customer}"), &form).await.0
}

pub async fn get(standin: &StandIn, path: &str) -> (u16, Value) {
    let resp = http().get(format!("{}{path}", standin.base_url())).bearer_auth(KEY).send().await.expect("request sent");
    let status = resp.status().as_u16();
    (status, resp.json_value().await)
}

trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        let text = self.text().await.expect("body read");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// A product named `name` and a monthly price for it of `amount` cents in usd: the price's JSON.
pub async fn monthly_product(standin: &StandIn, name: &str, amount: &str) -> Value {
    let (_, _, product) = post(standin, "/v1/products", &[("name", name)]).await;
    let (_, _, price) = post(
        standin,
        "/v1/prices",
        &[
            ("product", product["id"].as_str().expect("id")),
            ("unit_amount", amount),
            ("currency", "usd"),
            ("recurring[interval]", "month"),
        ],
    )
    .await;
    price
}

/// Submit the hosted payment page's form for a checkout session.
pub async fn pay(session_url: &str, card: &str) -> reqwest::Response {
    http().post(session_url).form(&[("card_number", card)]).send().await.expect("page answers")
}

/// Poll `check` until it returns `Some`, for asynchronous webhook deliveries.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Ids of the events of `kind` (newest first), through the raw API.
pub async fn event_ids(standin: &StandIn, kind: &str) -> Vec<String> {
    let (_, list) = get(standin, &format!("/v1/events?type={kind}&limit=100")).await;
    list["data"].as_array().into_iter().flatten().filter_map(|e| e["id"].as_str().map(str::to_string)).collect()
}
