//! The stand-in runs wherever the console starts it: an actix-web runtime or a tokio one.

mod common;

use stripe_standin::{Config, StandIn};

async fn create_and_fetch_a_customer(standin: &StandIn) {
    assert!(!standin.base_url().ends_with('/'));
    let (status, headers, customer) = common::post(standin, "/v1/customers", &[("email", "embed@example.com")]).await;
    assert_eq!(status, 200);
    assert!(headers["request-id"].to_str().expect("ascii").starts_with("req_"));
    let (status, fetched) =
        common::get(standin, &format!("/v1/customers/{}", customer["id"].as_str().expect("id"))).await;
    assert_eq!(status, 200);
    assert_eq!(fetched["email"], "embed@example.com");
}

#[actix_web::test]
async fn it_serves_when_started_inside_an_actix_web_runtime() {
    let standin = StandIn::start(Config::default()).await.expect("starts");
    create_and_fetch_a_customer(&standin).await;
    standin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_serves_on_a_multi_threaded_tokio_runtime_and_honours_a_configured_key() {
    let config = Config { secret_key: Some("sk_test_exact".into()), ..Config::default() };
    let standin = StandIn::start(config).await.expect("starts");
    // The common helpers use a different sk_test_ key, which this stand-in must refuse.
    let (status, body) = common::get(&standin, "/v1/customers").await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let resp = common::http()
        .get(format!("{}/v1/customers", standin.base_url()))
        .bearer_auth("sk_test_exact")
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    standin.stop().await;
}

#[tokio::test]
async fn two_stand_ins_can_run_side_by_side_with_separate_state() {
    let a = StandIn::start(Config::default()).await.expect("starts");
    let b = StandIn::start(Config::default()).await.expect("starts");
    assert_ne!(a.base_url(), b.base_url());
    create_and_fetch_a_customer(&a).await;
    let (_, list) = common::get(&b, "/v1/customers").await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0));
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn basic_auth_with_the_key_as_user_name_is_accepted_as_curl_sends_it() {
    let standin = StandIn::start(Config::default()).await.expect("starts");
    let resp = common::http()
        .get(format!("{}/v1/customers", standin.base_url()))
        .basic_auth("sk_test_curl", Some(""))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 200);
    let resp = common::http()
        .get(format!("{}/v1/customers", standin.base_url()))
        .basic_auth("pk_test_public", Some(""))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 401);
    standin.stop().await;
}
