//! Test clocks: renewals, failed renewals and cancellation at period end.

mod common;

use common::{client, get, monthly_product, post, start};
use stripe_billing::invoice::ListInvoice;
use stripe_billing::subscription::RetrieveSubscription;
use stripe_billing::subscription_schedule::{CreateSubscriptionSchedule, RetrieveSubscriptionSchedule};
use stripe_billing::test_helpers_test_clock::{AdvanceTestHelpersTestClock, CreateTestHelpersTestClock};
use stripe_shared::SubscriptionStatus;
use stripe_standin::StandIn;

const START: i64 = 1_800_000_000; // 2027-01-15

/// A clock, a customer on it with `pm`, and an active monthly subscription. Returns
/// (clock id, subscription id).
async fn subscribed(standin: &StandIn, pm: &str) -> (String, String) {
    let c = client(standin);
    let clock = CreateTestHelpersTestClock::new(START).name("renewals").send(&c).await.expect("clock created");
    let price = monthly_product(standin, "Clocked", "2000").await;
    let (status, _, customer) = post(
        standin,
        "/v1/customers",
        &[("test_clock", clock.id.as_str()), ("payment_method", pm), ("invoice_settings[default_payment_method]", pm)],
    )
    .await;
    assert_eq!(status, 200, "{customer}");
    let (status, _, sub) = post(
        standin,
        "/v1/subscriptions",
        &[("customer", customer["id"].as_str().expect("id")), ("items[0][price]", price["id"].as_str().expect("id"))],
    )
    .await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["items"]["data"][0]["current_period_start"], START);
    (clock.id.to_string(), sub["id"].as_str().expect("id").to_string())
}

#[tokio::test]
async fn a_visa_subscription_renews_with_a_new_paid_invoice_after_a_month() {
    let standin = start().await;
    let c = client(&standin);
    let (clock, sub_id) = subscribed(&standin, "pm_card_visa").await;
    let first_end =
        RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub").items.data[0].current_period_end;
    assert_eq!(first_end, START + 31 * 86_400, "January has 31 days");

    let advanced = AdvanceTestHelpersTestClock::new(clock.as_str(), first_end + 3600).send(&c).await.expect("advanced");
    assert_eq!(advanced.status.as_str(), "ready");

    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert_eq!(sub.items.data[0].current_period_start, first_end);
    assert!(sub.items.data[0].current_period_end > first_end + 27 * 86_400);
    let invoices = ListInvoice::new().subscription(sub_id.as_str()).send(&c).await.expect("invoices");
    assert_eq!(invoices.data.len(), 2);
    let renewal = &invoices.data[0];
    assert_eq!(renewal.status.as_ref().map(|s| s.as_str()), Some("paid"));
    assert_eq!(renewal.billing_reason.as_ref().map(|r| r.as_str()), Some("subscription_cycle"));
    assert_eq!(renewal.period_start, first_end);
    let (_, ready) = get(&standin, "/v1/events?type=test_helpers.test_clock.ready").await;
    assert_eq!(ready["data"].as_array().map(Vec::len), Some(1));
    standin.stop().await;
}

/// Advance past the first period and check the renewal failed: past_due, open invoice.
async fn assert_renewal_fails(standin: &StandIn, clock: &str, sub_id: &str) {
    let c = client(standin);
    let end = RetrieveSubscription::new(sub_id).send(&c).await.expect("sub").items.data[0].current_period_end;
    AdvanceTestHelpersTestClock::new(clock, end + 60).send(&c).await.expect("advanced");
    let sub = RetrieveSubscription::new(sub_id).send(&c).await.expect("sub");
    assert_eq!(sub.status, SubscriptionStatus::PastDue);
    let invoices = ListInvoice::new().subscription(sub_id).send(&c).await.expect("invoices");
    assert_eq!(invoices.data.len(), 2);
    assert_eq!(invoices.data[0].status.as_ref().map(|s| s.as_str()), Some("open"));
    assert_eq!(invoices.data[1].status.as_ref().map(|s| s.as_str()), Some("paid"));
    assert!(invoices.data[0].amount_remaining > 0);
    let (_, failed) = get(standin, "/v1/events?type=invoice.payment_failed").await;
    assert_eq!(failed["data"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_renewal_charged_to_pm_card_charge_customer_fail_leaves_the_subscription_past_due() {
    let standin = start().await;
    let (clock, sub_id) = subscribed(&standin, "pm_card_visa").await;
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    let customer = sub["customer"].as_str().expect("customer");
    let status = common::set_default_payment_method(&standin, customer, "pm_card_chargeCustomerFail").await;
    assert_eq!(status, 200);
    assert_renewal_fails(&standin, &clock, &sub_id).await;

    // Paying the open invoice with a working card brings the subscription back.
    common::set_default_payment_method(&standin, customer, "pm_card_visa").await;
    let (_, open) = get(&standin, &format!("/v1/invoices?subscription={sub_id}&status=open")).await;
    let invoice = open["data"][0]["id"].as_str().expect("open invoice");
    let (status, _, paid) = post(&standin, &format!("/v1/invoices/{invoice}/pay"), &[]).await;
    assert_eq!(status, 200, "{paid}");
    assert_eq!(paid["status"], "paid");
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    assert_eq!(sub["status"], "active");
    standin.stop().await;
}

#[tokio::test]
async fn the_hosted_page_of_a_failed_renewal_pays_it_with_another_card_and_keeps_that_card() {
    let standin = start().await;
    let (clock, sub_id) = subscribed(&standin, "pm_card_visa").await;
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    let customer = sub["customer"].as_str().expect("customer");
    assert_eq!(common::set_default_payment_method(&standin, customer, "pm_card_chargeCustomerFail").await, 200);
    assert_renewal_fails(&standin, &clock, &sub_id).await;
    let (_, open) = get(&standin, &format!("/v1/invoices?subscription={sub_id}&status=open")).await;
    let page = open["data"][0]["hosted_invoice_url"].as_str().expect("hosted page").to_string();
    let html = common::http().get(&page).send().await.expect("page").text().await.expect("html");
    assert!(html.contains("name=\"card_number\"") && html.contains("Pay"), "an open invoice offers to pay: {html}");

    // Not a test card, then a declined one: the page again with the reason, the invoice still open.
    for (card, status, says) in [("1234", 400, "not a stand-in test card"), ("4000 0000 0000 9995", 402, "declined")] {
        let r = common::http().post(&page).form(&[("card_number", card)]).send().await.expect("post");
        assert_eq!(r.status().as_u16(), status, "{card}");
        assert!(r.text().await.expect("html").contains(says), "{card}");
    }
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    assert_eq!(sub["status"], "past_due");

    let r = common::http().post(&page).form(&[("card_number", "4242 4242 4242 4242")]).send().await.expect("post");
    assert!(r.status().is_success() || r.status().as_u16() == 303, "{}", r.status());
    let invoice = open["data"][0]["id"].as_str().expect("id");
    assert_eq!(get(&standin, &format!("/v1/invoices/{invoice}")).await.1["status"], "paid");
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    assert_eq!(sub["status"], "active", "paying the invoice reinstates the subscription");
    let html = common::http().get(&page).send().await.expect("page").text().await.expect("html");
    assert!(!html.contains("name=\"card_number\""), "a paid invoice is a receipt: {html}");

    // The card typed there is the subscription's from now on: the next renewal pays.
    let failures =
        async || get(&standin, "/v1/events?type=invoice.payment_failed").await.1["data"].as_array().map(Vec::len);
    // The renewal's failure and the declined card's on the page.
    assert_eq!(failures().await, Some(2));
    let end = sub["items"]["data"][0]["current_period_end"].as_i64().expect("end");
    let c = client(&standin);
    AdvanceTestHelpersTestClock::new(clock.as_str(), end + 60).send(&c).await.expect("advanced");
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    assert_eq!(sub["status"], "active");
    assert_eq!(failures().await, Some(2), "the next renewal charged the card typed on the page");
    let (_, latest) = get(&standin, &format!("/v1/invoices?subscription={sub_id}")).await;
    assert_eq!(latest["data"][0]["status"], "paid");
    assert_eq!(latest["data"].as_array().map(Vec::len), Some(3));
    standin.stop().await;
}

#[tokio::test]
async fn checkout_with_card_0341_pays_the_first_invoice_but_the_renewal_fails() {
    let standin = start().await;
    let c = client(&standin);
    let clock = CreateTestHelpersTestClock::new(START).send(&c).await.expect("clock");
    let price = monthly_product(&standin, "Clocked", "2000").await;
    let (_, _, customer) = post(&standin, "/v1/customers", &[("test_clock", clock.id.as_str())]).await;
    let (status, _, session) = post(
        &standin,
        "/v1/checkout/sessions",
        &[
            ("mode", "subscription"),
            ("customer", customer["id"].as_str().expect("id")),
            ("line_items[0][price]", price["id"].as_str().expect("id")),
            ("line_items[0][quantity]", "1"),
            ("success_url", "http://console.test/ok"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{session}");
    let paid = common::pay(session["url"].as_str().expect("url"), "4000 0000 0000 0341").await;
    assert_eq!(paid.status().as_u16(), 303);
    let session = get(&standin, &format!("/v1/checkout/sessions/{}", session["id"].as_str().expect("id"))).await.1;
    let sub_id = session["subscription"].as_str().expect("subscription").to_string();
    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert_eq!(sub.items.data[0].current_period_start, START, "the subscription lives on the clock");
    assert_renewal_fails(&standin, clock.id.as_str(), &sub_id).await;
    standin.stop().await;
}

#[tokio::test]
async fn cancel_at_period_end_ends_the_subscription_when_the_clock_passes_the_period_end() {
    let standin = start().await;
    let c = client(&standin);
    let (clock, sub_id) = subscribed(&standin, "pm_card_visa").await;
    post(&standin, &format!("/v1/subscriptions/{sub_id}"), &[("cancel_at_period_end", "true")]).await;
    let end = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub").items.data[0].current_period_end;
    AdvanceTestHelpersTestClock::new(clock.as_str(), end - 60).send(&c).await.expect("advanced");
    assert_eq!(
        RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub").status,
        SubscriptionStatus::Active
    );
    AdvanceTestHelpersTestClock::new(clock.as_str(), end + 60).send(&c).await.expect("advanced");
    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.status, SubscriptionStatus::Canceled);
    assert_eq!(sub.ended_at, Some(end));
    let (_, deleted) = get(&standin, "/v1/events?type=customer.subscription.deleted").await;
    assert_eq!(deleted["data"].as_array().map(Vec::len), Some(1));
    let invoices = ListInvoice::new().subscription(sub_id.as_str()).send(&c).await.expect("invoices");
    assert_eq!(invoices.data.len(), 1, "no renewal invoice");
    standin.stop().await;
}

#[tokio::test]
async fn a_schedule_switches_the_price_at_the_next_renewal_and_is_released_after_its_last_phase() {
    let standin = start().await;
    let c = client(&standin);
    let (clock, sub_id) = subscribed(&standin, "pm_card_visa").await;
    let sub = get(&standin, &format!("/v1/subscriptions/{sub_id}")).await.1;
    let old_price = sub["items"]["data"][0]["price"]["id"].as_str().expect("price").to_string();
    let product = sub["items"]["data"][0]["price"]["product"].as_str().expect("product").to_string();
    let (_, _, pro) = post(
        &standin,
        "/v1/prices",
        &[("product", &product), ("unit_amount", "5000"), ("currency", "usd"), ("recurring[interval]", "month")],
    )
    .await;
    let pro_id = pro["id"].as_str().expect("id");

    let schedule =
        CreateSubscriptionSchedule::new().from_subscription(sub_id.as_str()).send(&c).await.expect("schedule");
    let first_end = schedule.phases[0].end_date;
    let (status, _, updated) = post(
        &standin,
        &format!("/v1/subscription_schedules/{}", schedule.id),
        &[
            ("phases[0][items][0][price]", &old_price),
            ("phases[0][start_date]", &START.to_string()),
            ("phases[0][end_date]", &first_end.to_string()),
            ("phases[1][items][0][price]", pro_id),
            ("phases[1][items][0][quantity]", "2"),
            ("end_behavior", "release"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{updated}");
    let fetched = RetrieveSubscriptionSchedule::new(schedule.id.clone()).send(&c).await.expect("parses");
    assert_eq!(fetched.phases.len(), 2);
    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.schedule.as_ref().map(|s| s.id().clone()), Some(schedule.id.clone()));

    AdvanceTestHelpersTestClock::new(clock.as_str(), first_end + 60).send(&c).await.expect("advanced");
    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.items.data[0].price.id.as_str(), pro_id);
    assert_eq!(sub.items.data[0].quantity, Some(2));
    let invoices = ListInvoice::new().subscription(sub_id.as_str()).send(&c).await.expect("invoices");
    assert_eq!(invoices.data[0].amount_paid, 10_000);

    let second_end = sub.items.data[0].current_period_end;
    AdvanceTestHelpersTestClock::new(clock.as_str(), second_end + 60).send(&c).await.expect("advanced");
    let released = RetrieveSubscriptionSchedule::new(schedule.id.clone()).send(&c).await.expect("schedule");
    assert_eq!(released.status.as_str(), "released");
    let sub = RetrieveSubscription::new(sub_id.as_str()).send(&c).await.expect("sub");
    assert!(sub.schedule.is_none());
    assert_eq!(sub.status, SubscriptionStatus::Active);
    standin.stop().await;
}
