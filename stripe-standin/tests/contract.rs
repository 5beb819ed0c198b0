//! Contract tests: async-stripe's own client and types against a running stand-in. Every
//! answer below is parsed by async-stripe, which is what the console relies on.

mod common;

use std::collections::HashMap;

use common::{client, get, pay, post, start};
use stripe::StripeError;
use stripe::{RequestStrategy, StripeRequest};
use stripe_billing::invoice::ListInvoice;
use stripe_billing::invoice_payment::ListInvoicePayment;
use stripe_billing::subscription::{
    CancelSubscription, CreateSubscription, CreateSubscriptionItems, RetrieveSubscription, UpdateSubscription,
};
use stripe_billing::subscription_item::ListSubscriptionItem;
use stripe_checkout::checkout_session::{
    CreateCheckoutSession, CreateCheckoutSessionLineItems, CreateCheckoutSessionSubscriptionData,
    ExpireCheckoutSession, RetrieveCheckoutSession,
};
use stripe_core::customer::{CreateCustomer, RetrieveCustomer, RetrieveCustomerReturned, UpdateCustomer};
use stripe_core::event::ListEvent;
use stripe_product::price::{CreatePrice, CreatePriceRecurring, CreatePriceRecurringInterval, ListPrice, UpdatePrice};
use stripe_product::product::{CreateProduct, RetrieveProduct};
use stripe_shared::{ApiErrorsCode, ApiErrorsType, CheckoutSessionMode, CheckoutSessionStatus, SubscriptionStatus};
use stripe_types::Currency;

/// A product with a monthly and a yearly price.
async fn catalogue(c: &stripe::Client) -> (stripe_shared::Product, stripe_shared::Price, stripe_shared::Price) {
    let product = CreateProduct::new("Team plan")
        .metadata(HashMap::from([("tier".to_string(), "team".to_string())]))
        .send(c)
        .await
        .expect("product created");
    let monthly = CreatePrice::new(Currency::USD)
        .product(product.id.as_str())
        .unit_amount(1500)
        .nickname("Team monthly")
        .lookup_key("team_monthly")
        .recurring(CreatePriceRecurring::new(CreatePriceRecurringInterval::Month))
        .send(c)
        .await
        .expect("monthly price created");
    let yearly = CreatePrice::new(Currency::USD)
        .product(product.id.as_str())
        .unit_amount(15000)
        .recurring(CreatePriceRecurring::new(CreatePriceRecurringInterval::Year))
        .send(c)
        .await
        .expect("yearly price created");
    (product, monthly, yearly)
}

async fn checkout(c: &stripe::Client, customer: &str, price: &str) -> stripe_shared::CheckoutSession {
    let mut line = CreateCheckoutSessionLineItems::new();
    line.price = Some(price.to_string());
    line.quantity = Some(2);
    let mut data = CreateCheckoutSessionSubscriptionData::new();
    data.metadata = Some(HashMap::from([("organization_id".to_string(), "7".to_string())]));
    CreateCheckoutSession::new()
        .mode(CheckoutSessionMode::Subscription)
        .customer(customer)
        .line_items(vec![line])
        .client_reference_id("org-7")
        .success_url("http://console.test/billing/done?session={CHECKOUT_SESSION_ID}")
        .cancel_url("http://console.test/billing")
        .metadata(HashMap::from([("organization_id".to_string(), "7".to_string())]))
        .subscription_data(data)
        .send(c)
        .await
        .expect("checkout session created")
}

/// A new customer's checkout session for the catalogue's monthly price.
async fn new_customer_checkout(c: &stripe::Client) -> (stripe_shared::Customer, stripe_shared::CheckoutSession) {
    let (_, monthly, _) = catalogue(c).await;
    let customer = CreateCustomer::new().send(c).await.expect("customer");
    let session = checkout(c, customer.id.as_str(), monthly.id.as_str()).await;
    (customer, session)
}

#[tokio::test]
async fn customers_are_created_retrieved_and_updated_through_async_stripe() {
    let standin = start().await;
    let c = client(&standin);
    let created = CreateCustomer::new()
        .email("ada@example.com")
        .name("Ada")
        .metadata(HashMap::from([("organization_id".to_string(), "7".to_string())]))
        .payment_method("pm_card_visa")
        .send(&c)
        .await
        .expect("customer created");
    assert!(created.id.as_str().starts_with("cus_"));
    assert!(!created.livemode);
    let RetrieveCustomerReturned::Customer(fetched) =
        RetrieveCustomer::new(created.id.clone()).send(&c).await.expect("customer retrieved")
    else {
        panic!("customer should not be deleted");
    };
    assert_eq!(fetched.email.as_deref(), Some("ada@example.com"));
    assert_eq!(fetched.metadata.as_ref().and_then(|m| m.get("organization_id")).map(String::as_str), Some("7"));
    let updated = UpdateCustomer::new(created.id.clone()).name("Ada Lovelace").send(&c).await.expect("updated");
    assert_eq!(updated.name.as_deref(), Some("Ada Lovelace"));
    standin.stop().await;
}

#[tokio::test]
async fn products_and_monthly_and_yearly_prices_parse_as_async_stripe_types() {
    let standin = start().await;
    let c = client(&standin);
    let (product, monthly, yearly) = catalogue(&c).await;
    assert!(product.active);
    let fetched = RetrieveProduct::new(product.id.clone()).send(&c).await.expect("product retrieved");
    assert_eq!(fetched.name, "Team plan");
    let recurring = monthly.recurring.as_ref().expect("monthly is recurring");
    assert_eq!(recurring.interval.as_str(), "month");
    assert_eq!(yearly.recurring.as_ref().map(|r| r.interval.as_str()), Some("year"));
    assert_eq!(monthly.unit_amount, Some(1500));

    let renamed = UpdatePrice::new(monthly.id.clone())
        .nickname("Team (monthly)")
        .active(false)
        .send(&c)
        .await
        .expect("price updated");
    assert_eq!(renamed.nickname.as_deref(), Some("Team (monthly)"));
    assert!(!renamed.active);
    let active = ListPrice::new().product(product.id.as_str()).active(true).send(&c).await.expect("prices listed");
    assert_eq!(active.data.len(), 1);
    assert_eq!(active.data[0].id, yearly.id);
    standin.stop().await;
}

#[tokio::test]
async fn paying_the_hosted_page_with_4242_completes_the_session_and_creates_a_paid_subscription() {
    let standin = start().await;
    let c = client(&standin);
    let (_, monthly, _) = catalogue(&c).await;
    let customer = CreateCustomer::new().email("org7@example.com").send(&c).await.expect("customer");
    let session = checkout(&c, customer.id.as_str(), monthly.id.as_str()).await;
    assert_eq!(session.status, Some(CheckoutSessionStatus::Open));
    let url = session.url.clone().expect("session has a hosted url");
    assert!(url.starts_with(&format!("{}/c/pay/cs_test_", standin.base_url())));

    let page = common::http().get(&url).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("$30.00") && page.contains("Team plan"), "{page}");
    assert!(page.contains("name=\"card_number\"") && page.contains(">Pay</button>"));

    let paid = pay(&url, "4242 4242 4242 4242").await;
    assert_eq!(paid.status().as_u16(), 303);
    let location = paid.headers()["location"].to_str().expect("location");
    assert_eq!(location, format!("http://console.test/billing/done?session={}", session.id));

    let done = RetrieveCheckoutSession::new(session.id.clone()).send(&c).await.expect("session retrieved");
    assert_eq!(done.status, Some(CheckoutSessionStatus::Complete));
    assert_eq!(done.payment_status.as_str(), "paid");
    assert_eq!(done.client_reference_id.as_deref(), Some("org-7"));
    let sub_id = done.subscription.expect("subscription set").id().clone();

    let sub = RetrieveSubscription::new(sub_id.clone()).send(&c).await.expect("subscription retrieved");
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert_eq!(sub.customer.id(), &customer.id);
    assert_eq!(sub.metadata.get("organization_id").map(String::as_str), Some("7"));
    let item = &sub.items.data[0];
    assert_eq!(item.quantity, Some(2));
    assert_eq!(item.price.id, monthly.id);
    assert!(item.current_period_end > item.current_period_start + 27 * 86_400);

    let items = ListSubscriptionItem::new(sub_id.as_str()).send(&c).await.expect("items listed");
    assert_eq!(items.data.len(), 1);

    let invoices = ListInvoice::new().subscription(sub_id.as_str()).send(&c).await.expect("invoices listed");
    assert_eq!(invoices.data.len(), 1);
    let invoice = &invoices.data[0];
    assert_eq!(invoice.status.as_ref().map(|s| s.as_str()), Some("paid"));
    assert_eq!((invoice.amount_due, invoice.amount_paid, invoice.amount_remaining), (3000, 3000, 0));
    let parent_sub =
        invoice.parent.as_ref().and_then(|p| p.subscription_details.as_ref()).map(|d| d.subscription.id().clone());
    assert_eq!(parent_sub, Some(sub_id.clone()));
    assert_eq!(invoice.lines.data[0].amount, 3000);
    let receipt =
        common::http().get(invoice.hosted_invoice_url.clone().expect("hosted url")).send().await.expect("receipt");
    assert_eq!(receipt.status().as_u16(), 200);

    let payments = ListInvoicePayment::new()
        .invoice(invoice.id.clone().expect("invoice id").as_str())
        .send(&c)
        .await
        .expect("invoice payments listed");
    assert_eq!(payments.data[0].amount_paid, Some(3000));

    let events = ListEvent::new().send(&c).await.expect("events listed");
    let kinds: Vec<&str> = events.data.iter().map(|e| e.type_.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"checkout.session.completed"), "newest first: {kinds:?}");
    for kind in
        ["customer.subscription.created", "invoice.created", "invoice.finalized", "invoice.paid", "price.created"]
    {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let completed = ListEvent::new().type_("checkout.session.completed").send(&c).await.expect("filtered");
    assert_eq!(completed.data.len(), 1);

    let again = common::http().get(&url).send().await.expect("page").text().await.expect("html");
    assert!(again.contains("already complete"), "{again}");
    standin.stop().await;
}

#[tokio::test]
async fn a_declined_card_shows_the_page_again_and_creates_nothing() {
    let standin = start().await;
    let c = client(&standin);
    let (_, session) = new_customer_checkout(&c).await;
    let url = session.url.expect("url");

    let declined = pay(&url, "4000000000009995").await;
    assert_eq!(declined.status().as_u16(), 402);
    assert!(declined.text().await.expect("html").contains("Your card was declined."));
    let unknown = pay(&url, "1234 5678").await;
    assert!(unknown.text().await.expect("html").contains("not a stand-in test card"));

    let still_open = RetrieveCheckoutSession::new(session.id.clone()).send(&c).await.expect("session");
    assert_eq!(still_open.status, Some(CheckoutSessionStatus::Open));
    assert!(still_open.subscription.is_none());
    let (_, subs) = get(&standin, "/v1/subscriptions?status=all").await;
    assert_eq!(subs["data"].as_array().map(Vec::len), Some(0));

    let expired = ExpireCheckoutSession::new(session.id.clone()).send(&c).await.expect("expired");
    assert_eq!(expired.status, Some(CheckoutSessionStatus::Expired));
    let page = common::http().get(&url).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("expired"));
    standin.stop().await;
}

#[tokio::test]
async fn subscriptions_created_by_api_charge_the_default_method_and_can_be_updated_and_cancelled() {
    let standin = start().await;
    let c = client(&standin);
    let (_, monthly, yearly) = catalogue(&c).await;
    let payer = CreateCustomer::new().payment_method("pm_card_visa").send(&c).await.expect("customer");
    let mut item = CreateSubscriptionItems::new();
    item.price = Some(monthly.id.to_string());
    let sub = CreateSubscription::new()
        .customer(payer.id.as_str())
        .items(vec![item.clone()])
        .default_payment_method("pm_card_visa")
        .send(&c)
        .await
        .expect("subscription created");
    assert_eq!(sub.status, SubscriptionStatus::Active);

    let failing = CreateCustomer::new().payment_method("pm_card_chargeCustomerFail").send(&c).await.expect("customer");
    let unpaid = CreateSubscription::new()
        .customer(failing.id.as_str())
        .items(vec![item])
        .default_payment_method("pm_card_chargeCustomerFail")
        .send(&c)
        .await
        .expect("subscription created");
    assert_eq!(unpaid.status, SubscriptionStatus::Incomplete);

    let updated = UpdateSubscription::new(sub.id.clone())
        .cancel_at_period_end(true)
        .metadata(HashMap::from([("seats".to_string(), "3".to_string())]))
        .send(&c)
        .await
        .expect("updated");
    assert!(updated.cancel_at_period_end);
    assert_eq!(updated.metadata.get("seats").map(String::as_str), Some("3"));

    // Raw form: swap the price, pause collection, then clear the pause with an empty value.
    let si = updated.items.data[0].id.to_string();
    let (status, _, body) = post(
        &standin,
        &format!("/v1/subscriptions/{}", sub.id),
        &[("items[0][id]", &si), ("items[0][price]", yearly.id.as_str()), ("pause_collection[behavior]", "void")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["pause_collection"]["behavior"], "void");
    assert_eq!(body["items"]["data"][0]["price"]["id"], yearly.id.as_str());
    let (_, _, cleared) = post(&standin, &format!("/v1/subscriptions/{}", sub.id), &[("pause_collection", "")]).await;
    assert!(cleared["pause_collection"].is_null());

    let (_, updates) = get(&standin, "/v1/events?type=customer.subscription.updated&limit=1").await;
    assert!(updates["data"][0]["data"]["previous_attributes"].get("pause_collection").is_some());

    let canceled = CancelSubscription::new(sub.id.clone()).send(&c).await.expect("cancelled");
    assert_eq!(canceled.status, SubscriptionStatus::Canceled);
    assert!(canceled.ended_at.is_some());
    standin.stop().await;
}

#[tokio::test]
async fn an_idempotency_key_replays_the_same_request_and_rejects_a_different_one() {
    let standin = start().await;
    let c = client(&standin);
    let key = stripe::IdempotencyKey::new("create-ada-1").expect("key");
    let first = CreateCustomer::new()
        .email("ada@example.com")
        .customize()
        .request_strategy(RequestStrategy::Idempotent(key.clone()))
        .send(&c)
        .await
        .expect("created");
    let replay = CreateCustomer::new()
        .email("ada@example.com")
        .customize()
        .request_strategy(RequestStrategy::Idempotent(key.clone()))
        .send(&c)
        .await
        .expect("replayed");
    assert_eq!(first.id, replay.id);

    let resp = common::http()
        .post(format!("{}/v1/customers", standin.base_url()))
        .bearer_auth(common::KEY)
        .header("Idempotency-Key", "create-ada-1")
        .form(&[("email", "ada@example.com")])
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.headers()["idempotent-replayed"], "true");
    assert!(resp.headers()["request-id"].to_str().expect("ascii").starts_with("req_"));

    let mismatch = CreateCustomer::new()
        .email("grace@example.com")
        .customize()
        .request_strategy(RequestStrategy::Idempotent(key))
        .send(&c)
        .await;
    match mismatch {
        Err(StripeError::Stripe(err, 400)) => assert_eq!(err.type_, ApiErrorsType::IdempotencyError),
        other => panic!("expected an idempotency error, got {other:?}"),
    }
    let (_, customers) = get(&standin, "/v1/customers").await;
    assert_eq!(customers["data"].as_array().map(Vec::len), Some(1));
    standin.stop().await;
}

#[tokio::test]
async fn an_unknown_id_is_a_stripe_invalid_request_error_with_resource_missing() {
    let standin = start().await;
    let c = client(&standin);
    match RetrieveSubscription::new("sub_doesnotexist").send(&c).await {
        Err(StripeError::Stripe(err, 404)) => {
            assert_eq!(err.type_, ApiErrorsType::InvalidRequestError);
            assert_eq!(err.code, Some(ApiErrorsCode::ResourceMissing));
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    let (status, _, body) = post(&standin, "/v1/prices", &[("currency", "usd")]).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "product");
    standin.stop().await;
}

#[tokio::test]
async fn requests_without_a_test_key_are_refused_with_401() {
    let standin = start().await;
    let resp = common::http().get(format!("{}/v1/customers", standin.base_url())).send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 401);
    let bad = stripe::ClientBuilder::new("sk_live_nope").url(standin.base_url()).build().expect("client");
    assert!(matches!(CreateCustomer::new().send(&bad).await, Err(StripeError::Stripe(_, 401))));
    standin.stop().await;
}

#[tokio::test]
async fn lists_page_with_limit_and_starting_after() {
    let standin = start().await;
    for i in 0..5 {
        post(&standin, "/v1/customers", &[("email", &format!("c{i}@example.com"))]).await;
    }
    let (_, page1) = get(&standin, "/v1/customers?limit=2").await;
    assert_eq!(page1["has_more"], true);
    assert_eq!(page1["data"][0]["email"], "c4@example.com");
    let last = page1["data"][1]["id"].as_str().expect("id");
    let (_, page2) = get(&standin, &format!("/v1/customers?limit=10&starting_after={last}")).await;
    assert_eq!(page2["data"].as_array().map(Vec::len), Some(3));
    assert_eq!(page2["has_more"], false);
    let (status, _) = get(&standin, "/v1/customers?limit=101").await;
    assert_eq!(status, 400);
    standin.stop().await;
}

#[tokio::test]
async fn injected_faults_fail_or_stall_matching_requests_a_given_number_of_times() {
    let standin = start().await;
    let (status, _, _) =
        post(&standin, "/_standin/faults", &[("path_prefix", "/v1/customers"), ("status", "500"), ("times", "2")])
            .await;
    assert_eq!(status, 200);
    assert_eq!(get(&standin, "/v1/customers").await.0, 500);
    assert_eq!(get(&standin, "/v1/customers").await.0, 500);
    assert_eq!(get(&standin, "/v1/customers").await.0, 200);

    post(&standin, "/_standin/faults", &[("path_prefix", "/v1/products"), ("delay_ms", "400"), ("times", "1")]).await;
    let started = std::time::Instant::now();
    assert_eq!(get(&standin, "/v1/products").await.0, 200);
    assert!(started.elapsed() >= std::time::Duration::from_millis(400));
    standin.stop().await;
}

#[tokio::test]
async fn expand_replaces_ids_with_objects_that_async_stripe_parses() {
    let standin = start().await;
    let c = client(&standin);
    let (customer, session) = new_customer_checkout(&c).await;
    pay(session.url.as_deref().expect("url"), "4242424242424242").await;
    let expanded = RetrieveCheckoutSession::new(session.id.clone())
        .expand(["subscription".to_string(), "customer".to_string()])
        .send(&c)
        .await
        .expect("expanded session");
    let Some(stripe_types::Expandable::Object(sub)) = expanded.subscription else {
        panic!("subscription should be expanded");
    };
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert!(matches!(expanded.customer, Some(stripe_types::Expandable::Object(_))));

    let with_invoice = RetrieveSubscription::new(sub.id.clone())
        .expand(["latest_invoice".to_string()])
        .send(&c)
        .await
        .expect("expanded subscription");
    let Some(stripe_types::Expandable::Object(invoice)) = with_invoice.latest_invoice else {
        panic!("latest_invoice should be expanded");
    };
    assert_eq!(invoice.amount_paid, 3000);

    let subs = stripe_billing::subscription::ListSubscription::new()
        .customer(customer.id.as_str())
        .expand(["data.latest_invoice".to_string()])
        .send(&c)
        .await
        .expect("listed");
    assert!(matches!(subs.data[0].latest_invoice, Some(stripe_types::Expandable::Object(_))));
    standin.stop().await;
}

#[tokio::test]
async fn async_stripe_pagination_walks_every_page_once() {
    use futures_util::TryStreamExt;
    let standin = start().await;
    let c = client(&standin);
    for i in 0..25 {
        post(&standin, "/v1/customers", &[("email", &format!("p{i}@example.com"))]).await;
    }
    let all: Vec<stripe_shared::Customer> = stripe_core::customer::ListCustomer::new()
        .limit(10)
        .paginate()
        .stream(&c)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(all.len(), 25);
    assert_eq!(all[0].email.as_deref(), Some("p24@example.com"));
    assert_eq!(all[24].email.as_deref(), Some("p0@example.com"));
    standin.stop().await;
}

#[tokio::test]
async fn subscriptions_list_by_status_and_created_and_items_update_through_their_own_endpoint() {
    let standin = start().await;
    let c = client(&standin);
    let (_, monthly, _) = catalogue(&c).await;
    let customer = CreateCustomer::new().payment_method("pm_card_visa").send(&c).await.expect("customer");
    let cus = customer.id.as_str();
    let price = monthly.id.as_str();
    let (_, _, kept) = post(&standin, "/v1/subscriptions", &[("customer", cus), ("items[0][price]", price)]).await;
    let (_, _, ended) = post(&standin, "/v1/subscriptions", &[("customer", cus), ("items[0][price]", price)]).await;
    let ended_id = ended["id"].as_str().expect("id");
    CancelSubscription::new(ended_id).send(&c).await.expect("cancelled");

    let (_, live) = get(&standin, &format!("/v1/subscriptions?customer={cus}")).await;
    assert_eq!(live["data"].as_array().map(Vec::len), Some(1), "canceled ones are hidden by default");
    let (_, all) = get(&standin, &format!("/v1/subscriptions?customer={cus}&status=all")).await;
    assert_eq!(all["data"].as_array().map(Vec::len), Some(2));
    let (_, canceled) = get(&standin, "/v1/subscriptions?status=canceled").await;
    assert_eq!(canceled["data"][0]["id"], ended_id);
    let created = kept["created"].as_i64().expect("created");
    let (_, later) = get(&standin, &format!("/v1/subscriptions?status=all&created[gt]={created}")).await;
    assert_eq!(later["data"].as_array().map(Vec::len), Some(0));
    let (_, since) = get(&standin, &format!("/v1/subscriptions?status=all&created[gte]={created}")).await;
    assert_eq!(since["data"].as_array().map(Vec::len), Some(2));

    let si = kept["items"]["data"][0]["id"].as_str().expect("item id");
    let (status, _, item) =
        post(&standin, &format!("/v1/subscription_items/{si}"), &[("quantity", "5"), ("proration_behavior", "none")])
            .await;
    assert_eq!(status, 200, "{item}");
    assert_eq!(item["quantity"], 5);
    let sub = RetrieveSubscription::new(kept["id"].as_str().expect("id")).send(&c).await.expect("sub");
    assert_eq!(sub.items.data[0].quantity, Some(5));
    standin.stop().await;
}
