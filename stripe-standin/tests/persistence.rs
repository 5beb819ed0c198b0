//! The state file: a stand-in started again on the file of one that stopped answers for what
//! that one made (objects, test clocks, idempotent answers, the links it gave out), keeps the
//! webhook endpoint registered in process once, and logs who called it.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use common::{KEY, eventually, get, http, monthly_product, post, start_with};
use stripe_standin::{Config, StandIn};

fn state_file(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("standin-state-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The stand-in makes the folder it is told to keep its state in.
    dir.join("nested").join("stripe-standin.json")
}

async fn start_on(file: &Path) -> StandIn {
    start_with(Config { state_file: Some(file.to_path_buf()), ..Config::default() }).await
}

#[tokio::test]
async fn a_stand_in_started_again_on_its_state_file_finds_what_it_made_and_its_clocks_still_renew() {
    let file = state_file("objects");
    let first = start_on(&file).await;
    let price = monthly_product(&first, "Kept", "1200").await;
    let price_id = price["id"].as_str().unwrap().to_string();
    let product_id = price["product"].as_str().unwrap().to_string();
    let (_, _, clock) = post(&first, "/v1/test_helpers/test_clocks", &[("frozen_time", "1800000000")]).await;
    let clock = clock["id"].as_str().unwrap().to_string();
    let (_, _, customer) = post(
        &first,
        "/v1/customers",
        &[("name", "Kept Co"), ("test_clock", &clock), ("payment_method", "pm_card_visa")],
    )
    .await;
    let customer = customer["id"].as_str().unwrap().to_string();
    let (status, _, sub) = post(
        &first,
        "/v1/subscriptions",
        &[("customer", &customer), ("items[0][price]", &price_id), ("default_payment_method", "pm_card_visa")],
    )
    .await;
    assert_eq!(status, 200, "{sub}");
    let sub = sub["id"].as_str().unwrap().to_string();
    let form = [
        ("mode", "subscription"),
        ("customer", customer.as_str()),
        ("line_items[0][price]", price_id.as_str()),
        ("success_url", "http://console.test/back?s={CHECKOUT_SESSION_ID}"),
        ("metadata[request_id]", "req-kept"),
    ];
    let made = http()
        .post(format!("{}/v1/checkout/sessions", first.base_url()))
        .bearer_auth(KEY)
        .header("Idempotency-Key", "kept-checkout")
        .form(&form)
        .send()
        .await
        .unwrap();
    let session: serde_json::Value = serde_json::from_str(&made.text().await.unwrap()).unwrap();
    let session_id = session["id"].as_str().unwrap().to_string();
    first.stop().await;
    assert!(file.exists(), "a clean stop leaves the state file");

    let second = start_on(&file).await;
    let (status, product) = get(&second, &format!("/v1/products/{product_id}")).await;
    assert_eq!((status, product["name"].as_str()), (200, Some("Kept")));
    assert_eq!(get(&second, &format!("/v1/prices/{price_id}")).await.0, 200);
    assert_eq!(get(&second, &format!("/v1/customers/{customer}")).await.1["name"], "Kept Co");
    let (_, session) = get(&second, &format!("/v1/checkout/sessions/{session_id}")).await;
    assert_eq!(session["metadata"]["request_id"], "req-kept", "the session keeps its metadata");
    // Its page is where the stand-in answers now, whatever port it got.
    let url = session["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/c/pay/", second.base_url())), "{url}");
    // The idempotent answer is kept too: the same key and form replay it.
    let again = http()
        .post(format!("{}/v1/checkout/sessions", second.base_url()))
        .bearer_auth(KEY)
        .header("Idempotency-Key", "kept-checkout")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"));
    let replayed: serde_json::Value = serde_json::from_str(&again.text().await.unwrap()).unwrap();
    assert_eq!(replayed["id"], session_id.as_str());
    assert_eq!(replayed["url"], url.as_str(), "the replayed answer links to the page as it is now");

    // The test clock and the subscription on it survived: a month on, it renews.
    let invoices = |s: serde_json::Value| s["data"].as_array().map(Vec::len).unwrap_or(0);
    let before = invoices(get(&second, &format!("/v1/invoices?subscription={sub}")).await.1);
    let (status, _, _) =
        post(&second, &format!("/v1/test_helpers/test_clocks/{clock}/advance"), &[("frozen_time", "1803000000")]).await;
    assert_eq!(status, 200);
    let after = invoices(get(&second, &format!("/v1/invoices?subscription={sub}")).await.1);
    assert_eq!((before, after), (1, 2), "the renewal was invoiced");

    // And the kept session is still paid on the stand-in's page.
    let paid = common::pay(&url, "4242 4242 4242 4242").await;
    assert_eq!(paid.status().as_u16(), 303);
    second.stop().await;
}

#[tokio::test]
async fn a_stand_in_without_a_state_file_starts_empty_every_time() {
    let first = start_with(Config::default()).await;
    monthly_product(&first, "Forgotten", "500").await;
    first.stop().await;
    let second = start_with(Config::default()).await;
    let (_, list) = get(&second, "/v1/products").await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0));
    second.stop().await;
}

/// Each delivery's signature header and body.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A webhook receiver: each delivery's signature header and body.
async fn receiver() -> (String, Seen, actix_web::dev::ServerHandle) {
    let seen: Seen = Arc::default();
    let data = web::Data::new(seen.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    async fn receive(req: HttpRequest, body: web::Bytes, seen: web::Data<Seen>) -> HttpResponse {
        let sig = req.headers().get("Stripe-Signature").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        seen.lock().unwrap().push((sig, String::from_utf8_lossy(&body).into_owned()));
        HttpResponse::Ok().finish()
    }
    let server = HttpServer::new(move || App::new().app_data(data.clone()).route("/hooks", web::post().to(receive)))
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
    let handle = server.handle();
    tokio::spawn(server);
    (url, seen, handle)
}

#[tokio::test]
async fn the_in_process_endpoint_is_registered_once_and_follows_the_consoles_new_address() {
    let file = state_file("endpoint");
    let first = start_on(&file).await;
    let secret = first.add_webhook_endpoint("http://127.0.0.1:9/old/webhooks/stripe").unwrap();
    first.stop().await;

    let second = start_on(&file).await;
    // The same address again: the same endpoint and secret.
    assert_eq!(second.add_webhook_endpoint("http://127.0.0.1:9/old/webhooks/stripe").unwrap(), secret);
    // The console came back elsewhere: the endpoint moves, keeping its secret; none is added.
    let (url, seen, receiver) = receiver().await;
    assert_eq!(second.add_webhook_endpoint(&url).unwrap(), secret);
    let (_, endpoints) = get(&second, "/v1/webhook_endpoints").await;
    let endpoints = endpoints["data"].as_array().unwrap().clone();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert_eq!(endpoints[0]["url"], url.as_str());

    // Events reach the new address, signed with the kept secret.
    post(&second, "/v1/customers", &[("name", "Signed")]).await;
    let (sig, body) = eventually("a delivery", async || seen.lock().unwrap().first().cloned()).await;
    let t: i64 = sig.split(',').find_map(|p| p.strip_prefix("t=")).unwrap().parse().unwrap();
    let v1 = sig.split(',').find_map(|p| p.strip_prefix("v1=")).unwrap();
    assert_eq!(v1, stripe_standin::webhooks::sign(&secret, t, &body));
    second.stop().await;
    receiver.stop(true).await;

    // And the move itself was kept.
    let third = start_on(&file).await;
    let (_, endpoints) = get(&third, "/v1/webhook_endpoints").await;
    assert_eq!(endpoints["data"][0]["url"], url.as_str());
    assert_eq!(endpoints["data"].as_array().map(Vec::len), Some(1));
    third.stop().await;
}

#[tokio::test]
async fn the_calls_log_names_each_callers_request_id_and_traceparent() {
    let standin = start_with(Config::default()).await;
    let answer = http()
        .post(format!("{}/v1/customers", standin.base_url()))
        .bearer_auth(KEY)
        .header("x-request-id", "member-req-7")
        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .header("Idempotency-Key", "calls-1")
        .form(&[("name", "Traced")])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    get(&standin, "/v1/customers").await;
    let (status, calls) = get(&standin, "/_standin/calls").await;
    assert_eq!(status, 200);
    let calls = calls["data"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["method"], "POST");
    assert_eq!(calls[0]["path"], "/v1/customers");
    assert_eq!(calls[0]["request_id"], "member-req-7");
    assert_eq!(calls[0]["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert_eq!(calls[0]["idempotency_key"], "calls-1");
    assert_eq!(calls[0]["status"], 200);
    assert_eq!(calls[1]["request_id"], serde_json::Value::Null, "a call without one names none");
    standin.stop().await;
}
