//! Prorations on subscription updates and invoice previews (`POST /v1/invoices/create_preview`),
//! on a test clock so that every second of the proration is exact.

mod common;

use common::{client, get, post, start};
use serde_json::Value;
use stripe::StripeError;
use stripe_billing::invoice::{
    CreatePreviewInvoice, CreatePreviewInvoiceSubscriptionDetails, CreatePreviewInvoiceSubscriptionDetailsItems,
    CreatePreviewInvoiceSubscriptionDetailsProrationBehavior, ListInvoice,
};
use stripe_billing::invoice_item::ListInvoiceItem;
use stripe_billing::subscription::{
    RetrieveSubscription, UpdateSubscription, UpdateSubscriptionItems, UpdateSubscriptionPaymentBehavior,
    UpdateSubscriptionProrationBehavior,
};
use stripe_billing::test_helpers_test_clock::{AdvanceTestHelpersTestClock, CreateTestHelpersTestClock};
use stripe_shared::{ApiErrorsType, Invoice, SubscriptionStatus};
use stripe_standin::StandIn;

/// 2027-04-01T00:00Z: April has 30 days, so the first monthly period is 30 days long.
const APRIL_1: i64 = 1_806_537_600;
/// Exactly halfway through April.
const APRIL_16: i64 = 1_807_833_600;
const MAY_1: i64 = 1_809_129_600;
const JUNE_1: i64 = 1_811_808_000;

/// A member on a test clock, subscribed to Basic (1000/month) and able to move to Pro
/// (3000/month).
struct Member {
    clock: String,
    customer: String,
    sub: String,
    item: String,
    basic: String,
    pro: String,
    product: String,
}

async fn price(standin: &StandIn, product: &str, amount: &str, currency: &str, interval: &str) -> String {
    let (status, _, price) = post(
        standin,
        "/v1/prices",
        &[("product", product), ("unit_amount", amount), ("currency", currency), ("recurring[interval]", interval)],
    )
    .await;
    assert_eq!(status, 200, "{price}");
    price["id"].as_str().expect("price id").to_string()
}

async fn member(standin: &StandIn) -> Member {
    let c = client(standin);
    let clock = CreateTestHelpersTestClock::new(APRIL_1).send(&c).await.expect("clock");
    let (_, _, product) = post(standin, "/v1/products", &[("name", "Team")]).await;
    let product = product["id"].as_str().expect("id").to_string();
    let basic = price(standin, &product, "1000", "usd", "month").await;
    let pro = price(standin, &product, "3000", "usd", "month").await;
    let (_, _, customer) = post(
        standin,
        "/v1/customers",
        &[
            ("test_clock", clock.id.as_str()),
            ("email", "member@example.com"),
            ("invoice_settings[default_payment_method]", "pm_card_visa"),
        ],
    )
    .await;
    let customer = customer["id"].as_str().expect("id").to_string();
    let (status, _, sub) =
        post(standin, "/v1/subscriptions", &[("customer", &customer), ("items[0][price]", &basic)]).await;
    assert_eq!(status, 200, "{sub}");
    assert_eq!(sub["items"]["data"][0]["current_period_end"], MAY_1);
    Member {
        clock: clock.id.to_string(),
        customer,
        sub: sub["id"].as_str().expect("id").to_string(),
        item: sub["items"]["data"][0]["id"].as_str().expect("item id").to_string(),
        basic,
        pro,
        product,
    }
}

/// The member with the clock moved on to April 16, halfway through its first period.
async fn member_at_april_16(standin: &StandIn) -> Member {
    let m = member(standin).await;
    advance(standin, &m.clock, APRIL_16).await;
    m
}

async fn advance(standin: &StandIn, clock: &str, to: i64) {
    AdvanceTestHelpersTestClock::new(clock, to).send(&client(standin)).await.expect("clock advanced");
}

/// Everything a preview must not touch: invoices, invoice items, events, the subscription.
async fn snapshot(standin: &StandIn, m: &Member) -> Vec<Value> {
    let mut all = vec![];
    for path in ["/v1/invoices?limit=100", "/v1/invoiceitems?limit=100", "/v1/events?limit=100"] {
        all.push(get(standin, path).await.1["data"].clone());
    }
    all.push(get(standin, &format!("/v1/subscriptions/{}", m.sub)).await.1);
    all
}

fn line_amounts(invoice: &Invoice) -> Vec<i64> {
    invoice.lines.data.iter().map(|l| l.amount).collect()
}

fn is_proration(line: &stripe_shared::InvoiceLineItem) -> bool {
    line.parent.as_ref().and_then(|p| p.subscription_item_details.as_ref()).is_some_and(|d| d.proration)
}

fn upgrade_preview(
    m: &Member,
    behavior: CreatePreviewInvoiceSubscriptionDetailsProrationBehavior,
) -> CreatePreviewInvoice {
    let mut item = CreatePreviewInvoiceSubscriptionDetailsItems::new();
    item.id = Some(m.item.clone());
    item.price = Some(m.pro.clone());
    let mut details = CreatePreviewInvoiceSubscriptionDetails::new();
    details.items = Some(vec![item]);
    details.proration_behavior = Some(behavior);
    CreatePreviewInvoice::new().customer(m.customer.as_str()).subscription(m.sub.as_str()).subscription_details(details)
}

fn upgrade(m: &Member, behavior: UpdateSubscriptionProrationBehavior) -> UpdateSubscription {
    let mut item = UpdateSubscriptionItems::new();
    item.id = Some(m.item.clone());
    item.price = Some(m.pro.clone());
    UpdateSubscription::new(m.sub.as_str()).items(vec![item]).proration_behavior(behavior).proration_date(APRIL_16)
}

async fn subscription_invoices(standin: &StandIn, m: &Member) -> Vec<Invoice> {
    ListInvoice::new().subscription(m.sub.as_str()).send(&client(standin)).await.expect("invoices").data
}

#[tokio::test]
async fn a_preview_of_an_upgrade_halfway_through_the_period_credits_500_and_charges_1500_and_writes_nothing() {
    let standin = start().await;
    let c = client(&standin);
    let m = member_at_april_16(&standin).await;
    let before = snapshot(&standin, &m).await;

    // Invoiced at once: only the prorations, dated at the clock's time (no proration_date given).
    let now = upgrade_preview(&m, CreatePreviewInvoiceSubscriptionDetailsProrationBehavior::AlwaysInvoice)
        .send(&c)
        .await
        .expect("preview parses as async-stripe's Invoice");
    assert!(now.id.as_ref().expect("id").as_str().starts_with("upcoming_in_"));
    assert_eq!(line_amounts(&now), vec![-500, 1500]);
    assert!(now.lines.data.iter().all(is_proration));
    assert!(now.lines.data.iter().all(|l| (l.period.start, l.period.end) == (APRIL_16, MAY_1)));
    assert_eq!(now.lines.data[0].description.as_deref(), Some("Unused time on Team after 16 Apr 2027"));
    assert_eq!(now.lines.data[1].description.as_deref(), Some("Remaining time on Team after 16 Apr 2027"));
    assert_eq!((now.subtotal, now.total, now.amount_due), (1000, 1000, 1000));
    assert_eq!(now.currency, stripe_types::Currency::USD);
    assert_eq!((now.period_start, now.period_end), (APRIL_16, APRIL_16));
    assert_eq!(now.status.as_ref().map(|s| s.as_str()), Some("draft"));

    // The next renewal: the same prorations, then May at the new price.
    let next = upgrade_preview(&m, CreatePreviewInvoiceSubscriptionDetailsProrationBehavior::CreateProrations)
        .send(&c)
        .await
        .expect("preview");
    assert_eq!(line_amounts(&next), vec![-500, 1500, 3000]);
    assert!(!is_proration(&next.lines.data[2]));
    assert_eq!((next.lines.data[2].period.start, next.lines.data[2].period.end), (MAY_1, JUNE_1));
    assert_eq!((next.total, next.amount_due), (4000, 4000));
    assert_eq!((next.period_start, next.period_end), (MAY_1, JUNE_1));

    // With no change, the preview is the plain renewal.
    let (status, _, plain) = post(&standin, "/v1/invoices/create_preview", &[("subscription", &m.sub)]).await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["amount_due"], 1000);

    assert_eq!(snapshot(&standin, &m).await, before, "a preview writes nothing");
    standin.stop().await;
}

#[tokio::test]
async fn always_invoice_creates_and_pays_an_invoice_of_the_difference_at_once() {
    let standin = start().await;
    let c = client(&standin);
    let m = member_at_april_16(&standin).await;
    let sub = upgrade(&m, UpdateSubscriptionProrationBehavior::AlwaysInvoice).send(&c).await.expect("updated");
    assert_eq!(sub.status, SubscriptionStatus::Active);
    assert_eq!(sub.items.data[0].price.id.as_str(), m.pro);
    assert_eq!(sub.items.data[0].quantity, Some(1));

    let invoices = subscription_invoices(&standin, &m).await;
    assert_eq!(invoices.len(), 2);
    let upgrade_invoice = &invoices[0];
    assert_eq!(sub.latest_invoice.as_ref().and_then(|i| i.id().clone()), upgrade_invoice.id.clone());
    assert_eq!(upgrade_invoice.billing_reason.as_ref().map(|r| r.as_str()), Some("subscription_update"));
    assert_eq!(upgrade_invoice.status.as_ref().map(|s| s.as_str()), Some("paid"));
    assert_eq!((upgrade_invoice.amount_due, upgrade_invoice.amount_paid), (1000, 1000));
    assert_eq!(line_amounts(upgrade_invoice), vec![-500, 1500]);
    let receipt =
        common::http().get(upgrade_invoice.hosted_invoice_url.clone().expect("url")).send().await.expect("page");
    assert!(receipt.text().await.expect("html").contains("-$5.00"));

    // The prorations are invoice items of that invoice, nothing is left pending.
    let items = ListInvoiceItem::new().customer(m.customer.as_str()).send(&c).await.expect("invoice items");
    assert_eq!(items.data.len(), 2);
    assert!(
        items
            .data
            .iter()
            .all(|ii| ii.proration && ii.invoice.as_ref().and_then(|i| i.id().as_ref()) == upgrade_invoice.id.as_ref())
    );
    let pending = ListInvoiceItem::new().pending(true).send(&c).await.expect("pending");
    assert!(pending.data.is_empty());
    for kind in
        ["invoiceitem.created", "invoice.created", "invoice.finalized", "invoice.paid", "customer.subscription.updated"]
    {
        assert!(!common::event_ids(&standin, kind).await.is_empty(), "{kind} missing");
    }

    // May renews at the new price and nothing more.
    advance(&standin, &m.clock, MAY_1 + 60).await;
    let invoices = subscription_invoices(&standin, &m).await;
    assert_eq!(invoices.len(), 3);
    assert_eq!(line_amounts(&invoices[0]), vec![3000]);
    standin.stop().await;
}

#[tokio::test]
async fn create_prorations_puts_both_lines_on_the_next_renewal_invoice() {
    let standin = start().await;
    let c = client(&standin);
    let m = member_at_april_16(&standin).await;
    upgrade(&m, UpdateSubscriptionProrationBehavior::CreateProrations).send(&c).await.expect("updated");
    assert_eq!(subscription_invoices(&standin, &m).await.len(), 1, "nothing invoiced yet");
    let pending = ListInvoiceItem::new().pending(true).send(&c).await.expect("pending items");
    let mut amounts: Vec<i64> = pending.data.iter().map(|ii| ii.amount).collect();
    amounts.sort();
    assert_eq!(amounts, vec![-500, 1500]);
    assert!(pending.data.iter().all(|ii| ii.proration && (ii.period.start, ii.period.end) == (APRIL_16, MAY_1)));

    // The preview of the next invoice already holds them.
    let (_, _, next) = post(&standin, "/v1/invoices/create_preview", &[("subscription", &m.sub)]).await;
    assert_eq!(next["amount_due"], 4000, "{next}");

    advance(&standin, &m.clock, MAY_1 + 60).await;
    let invoices = subscription_invoices(&standin, &m).await;
    assert_eq!(invoices.len(), 2);
    let renewal = &invoices[0];
    assert_eq!(renewal.billing_reason.as_ref().map(|r| r.as_str()), Some("subscription_cycle"));
    assert_eq!(line_amounts(renewal), vec![-500, 1500, 3000]);
    assert_eq!((renewal.amount_paid, renewal.status.as_ref().map(|s| s.as_str())), (4000, Some("paid")));
    assert!(renewal.lines.data[..2].iter().all(is_proration));
    assert!(ListInvoiceItem::new().pending(true).send(&c).await.expect("pending").data.is_empty());
    standin.stop().await;
}

#[tokio::test]
async fn proration_behavior_none_bills_nothing_extra() {
    let standin = start().await;
    let c = client(&standin);
    let m = member_at_april_16(&standin).await;
    upgrade(&m, UpdateSubscriptionProrationBehavior::None).send(&c).await.expect("updated");
    assert!(ListInvoiceItem::new().send(&c).await.expect("items").data.is_empty());
    assert!(common::event_ids(&standin, "invoiceitem.created").await.is_empty());
    advance(&standin, &m.clock, MAY_1 + 60).await;
    let invoices = subscription_invoices(&standin, &m).await;
    assert_eq!(invoices.len(), 2);
    assert_eq!(line_amounts(&invoices[0]), vec![3000]);
    standin.stop().await;
}

#[tokio::test]
async fn a_quantity_change_prorates_old_and_new_seats() {
    let standin = start().await;
    let m = member_at_april_16(&standin).await;
    let (status, _, preview) = post(
        &standin,
        "/v1/invoices/create_preview",
        &[
            ("subscription", &m.sub),
            ("subscription_details[items][0][id]", &m.item),
            ("subscription_details[items][0][quantity]", "3"),
            ("subscription_details[proration_behavior]", "always_invoice"),
            ("subscription_details[proration_date]", &APRIL_16.to_string()),
        ],
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    let lines = preview["lines"]["data"].as_array().expect("lines");
    assert_eq!(lines[0]["amount"], -500);
    assert_eq!(lines[1]["amount"], 1500);
    assert_eq!(lines[1]["quantity"], 3);
    assert_eq!(lines[1]["description"], "Remaining time on 3 × Team after 16 Apr 2027");
    assert_eq!(preview["amount_due"], 1000);
    standin.stop().await;
}

#[tokio::test]
async fn a_failing_card_with_error_if_incomplete_is_a_402_and_changes_nothing() {
    let standin = start().await;
    let c = client(&standin);
    let m = member_at_april_16(&standin).await;
    let status = common::set_default_payment_method(&standin, &m.customer, "pm_card_chargeCustomerFail").await;
    assert_eq!(status, 200);
    let before = snapshot(&standin, &m).await;

    let refused = upgrade(&m, UpdateSubscriptionProrationBehavior::AlwaysInvoice)
        .payment_behavior(UpdateSubscriptionPaymentBehavior::ErrorIfIncomplete)
        .send(&c)
        .await;
    match refused {
        Err(StripeError::Stripe(err, 402)) => {
            assert_eq!(err.type_, ApiErrorsType::CardError);
            assert_eq!(err.code.as_ref().map(|c| c.as_str()), Some("card_declined"));
        }
        other => panic!("expected a 402, got {other:?}"),
    }
    assert_eq!(snapshot(&standin, &m).await, before, "nothing applied");
    let sub = RetrieveSubscription::new(m.sub.as_str()).send(&c).await.expect("sub");
    assert_eq!(sub.items.data[0].price.id.as_str(), m.basic);
    assert_eq!(sub.status, SubscriptionStatus::Active);

    // allow_incomplete (the default) applies the change and leaves the invoice open.
    let sub = upgrade(&m, UpdateSubscriptionProrationBehavior::AlwaysInvoice).send(&c).await.expect("updated");
    assert_eq!(sub.status, SubscriptionStatus::PastDue);
    assert_eq!(sub.items.data[0].price.id.as_str(), m.pro);
    let open = &subscription_invoices(&standin, &m).await[0];
    assert_eq!(open.status.as_ref().map(|s| s.as_str()), Some("open"));
    assert_eq!(open.amount_remaining, 1000);
    assert_eq!(common::event_ids(&standin, "invoice.payment_failed").await.len(), 1);

    // Paying it with a working card brings the subscription back.
    common::set_default_payment_method(&standin, &m.customer, "pm_card_visa").await;
    let (status, _, paid) = post(&standin, &format!("/v1/invoices/{}/pay", open.id.as_ref().expect("id")), &[]).await;
    assert_eq!((status, &paid["status"]), (200, &Value::from("paid")));
    assert_eq!(
        RetrieveSubscription::new(m.sub.as_str()).send(&c).await.expect("sub").status,
        SubscriptionStatus::Active
    );
    standin.stop().await;
}

#[tokio::test]
async fn an_upgrade_replayed_with_its_idempotency_key_invoices_once() {
    let standin = start().await;
    let m = member_at_april_16(&standin).await;
    let send = || {
        common::http()
            .post(format!("{}/v1/subscriptions/{}", standin.base_url(), m.sub))
            .bearer_auth(common::KEY)
            .header("Idempotency-Key", "upgrade-org-7")
            .form(&[
                ("items[0][id]", m.item.as_str()),
                ("items[0][price]", m.pro.as_str()),
                ("proration_behavior", "always_invoice"),
                ("payment_behavior", "error_if_incomplete"),
            ])
            .send()
    };
    let first = send().await.expect("sent");
    assert_eq!(first.status().as_u16(), 200);
    let first_body = first.text().await.expect("body");
    let replay = send().await.expect("sent");
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.expect("body"), first_body);
    let updates: Vec<Invoice> = subscription_invoices(&standin, &m)
        .await
        .into_iter()
        .filter(|i| i.billing_reason.as_ref().map(|r| r.as_str()) == Some("subscription_update"))
        .collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(common::event_ids(&standin, "invoiceitem.created").await.len(), 2);
    standin.stop().await;
}

#[tokio::test]
async fn a_downgrade_invoiced_at_once_becomes_credit_for_the_next_invoice() {
    let standin = start().await;
    let c = client(&standin);
    let m = member(&standin).await;
    // Start on Pro, then move down to Basic halfway: −1500 + 500 = −1000 of credit.
    let (status, _, _) = post(
        &standin,
        &format!("/v1/subscriptions/{}", m.sub),
        &[("items[0][id]", &m.item), ("items[0][price]", &m.pro), ("proration_behavior", "none")],
    )
    .await;
    assert_eq!(status, 200);
    advance(&standin, &m.clock, APRIL_16).await;
    let (status, _, _) = post(
        &standin,
        &format!("/v1/subscriptions/{}", m.sub),
        &[("items[0][id]", &m.item), ("items[0][price]", &m.basic), ("proration_behavior", "always_invoice")],
    )
    .await;
    assert_eq!(status, 200);
    let credit = &subscription_invoices(&standin, &m).await[0];
    assert_eq!((credit.total, credit.amount_due, credit.ending_balance), (-1000, 0, Some(-1000)));
    assert_eq!(credit.status.as_ref().map(|s| s.as_str()), Some("paid"));
    let (_, customer) = get(&standin, &format!("/v1/customers/{}", m.customer)).await;
    assert_eq!(customer["balance"], -1000);

    // The preview and then the May renewal use the credit up.
    let next = CreatePreviewInvoice::new().subscription(m.sub.as_str()).send(&c).await.expect("preview");
    assert_eq!((next.total, next.starting_balance, next.amount_due), (1000, -1000, 0));
    advance(&standin, &m.clock, MAY_1 + 60).await;
    let renewal = &subscription_invoices(&standin, &m).await[0];
    assert_eq!((renewal.total, renewal.amount_due), (1000, 0));
    assert_eq!(get(&standin, &format!("/v1/customers/{}", m.customer)).await.1["balance"], 0);
    standin.stop().await;
}

#[tokio::test]
async fn moving_to_a_yearly_price_restarts_the_billing_cycle_and_invoices_at_once() {
    let standin = start().await;
    let c = client(&standin);
    let m = member(&standin).await;
    let yearly = price(&standin, &m.product, "12000", "usd", "year").await;
    advance(&standin, &m.clock, APRIL_16).await;
    let (status, _, preview) = post(
        &standin,
        "/v1/invoices/create_preview",
        &[
            ("subscription", m.sub.as_str()),
            ("subscription_details[items][0][id]", m.item.as_str()),
            ("subscription_details[items][0][price]", yearly.as_str()),
        ],
    )
    .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["amount_due"], 11_500, "the preview is the invoice created at once");
    let mut item = UpdateSubscriptionItems::new();
    item.id = Some(m.item.clone());
    item.price = Some(yearly.clone());
    let sub = UpdateSubscription::new(m.sub.as_str()).items(vec![item]).send(&c).await.expect("updated");
    assert_eq!(sub.billing_cycle_anchor, APRIL_16);
    assert_eq!(sub.items.data[0].current_period_start, APRIL_16);
    assert!(sub.items.data[0].current_period_end >= APRIL_16 + 365 * 86_400);
    let invoice = &subscription_invoices(&standin, &m).await[0];
    assert_eq!(invoice.billing_reason.as_ref().map(|r| r.as_str()), Some("subscription_update"));
    assert_eq!(line_amounts(invoice), vec![-500, 12000]);
    assert_eq!(invoice.amount_paid, 11_500);
    standin.stop().await;
}

#[tokio::test]
async fn previews_refuse_unknown_subscriptions_and_prices_of_another_currency_or_interval() {
    let standin = start().await;
    let c = client(&standin);
    let m = member(&standin).await;
    match CreatePreviewInvoice::new().subscription("sub_missing").send(&c).await {
        Err(StripeError::Stripe(err, 404)) => {
            assert_eq!(err.param.as_deref(), Some("subscription"));
            assert_eq!(err.code.as_ref().map(|c| c.as_str()), Some("resource_missing"));
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    let euros = price(&standin, &m.product, "900", "eur", "month").await;
    let yearly = price(&standin, &m.product, "12000", "usd", "year").await;
    let cases = [
        (
            vec![
                ("subscription_details[items][0][id]", m.item.as_str()),
                ("subscription_details[items][0][price]", euros.as_str()),
            ],
            "currency",
        ),
        // A second item on another interval than the first.
        (vec![("subscription_details[items][0][price]", yearly.as_str())], "interval"),
    ];
    for (form, field) in cases {
        let mut form = form;
        form.push(("subscription", &m.sub));
        let (status, _, body) = post(&standin, "/v1/invoices/create_preview", &form).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["param"], "subscription_details[items][0][price]");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains(field)), "{body}");
    }
    // The same rule holds for the update itself.
    let (status, _, body) = post(
        &standin,
        &format!("/v1/subscriptions/{}", m.sub),
        &[("items[0][id]", &m.item), ("items[0][price]", &euros)],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    standin.stop().await;
}
