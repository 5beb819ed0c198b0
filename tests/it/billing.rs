//! Billing against the Stripe stand-in: ReconcileSubscription's three branches, displacement and
//! delivery, the invoice converge, the webhook's intake over HTTP (signatures, duplicates, order),
//! Stripe failing mid-reconcile, and the lock order of each new path (two transactions, one
//! waits on the other).

use crate::common;

use std::time::Duration;

use chrono::Utc;
use common::{
    TestApp, TestDb,
    locks::{Expect, assert_holds},
    pause_on,
    stripe::StripeFixture,
    worker::WorkerProcess,
};
use member_console::db::keys::AdvisoryKey;
use member_console::{
    demo,
    ids::{OrganizationId, PoolId, ProductId, StripeInvoiceId, StripePriceId, StripeSubscriptionId},
    integrations::stripe::signature,
    services::{
        ServiceError,
        billing::{self, Reconciled, catalog_sync::SyncAnswer, invoices::Converged},
        grants,
    },
    states::SubscriptionStatus,
};

use common::stripe::demo_with_stripe as setup;

async fn org(t: &TestDb, name: &str) -> (OrganizationId, PoolId) {
    let o = common::acts::community_org(t, name).await;
    (o.organization_id, o.pool_id)
}

use common::acts::sites;

async fn count(t: &TestDb, sql: &str) -> i64 {
    common::acts::scalar(t, sql).await
}

use common::acts::hosting;

/// A paying organization: a Basic or Pro subscription made in the stand-in; (org, pool, sub id).
async fn subscribed(
    t: &TestDb,
    s: &StripeFixture,
    name: &str,
    product: &str,
) -> (OrganizationId, PoolId, StripeSubscriptionId) {
    let (o, pool) = org(t, name).await;
    let price = s.price(&t.db, common::acts::product_id(t, product).await, "12").await;
    let stripe_price = s.stripe_price(&t.admin, price).await;
    let customer = s.customer(&t.db, o, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &stripe_price, o).await;
    (o, pool, sub)
}

/// A subscription the console has heard of: `subscribed`, then reconciled once.
async fn reconciled(
    t: &TestDb,
    s: &StripeFixture,
    name: &str,
    product: &str,
) -> (OrganizationId, PoolId, StripeSubscriptionId) {
    let (o, pool, sub) = subscribed(t, s, name, product).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    (o, pool, sub)
}

fn converged(r: Reconciled) -> (SubscriptionStatus, bool) {
    match r {
        Reconciled::Converged { status, changed, .. } => (status, changed),
        other => panic!("expected a converged reconcile, got {other:?}"),
    }
}

#[tokio::test]
async fn a_paid_subscription_confers_its_tier_and_reconciling_it_again_writes_nothing() {
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Paying", "Pro").await;
    assert_eq!(hosting(&t, pool).await, "Free", "the floor until the console hears of it");
    let (status, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!((status, changed), (SubscriptionStatus::Active, true));
    assert_eq!(hosting(&t, pool).await, "Pro");
    assert_eq!(sites(&t, pool).await, Some(10));
    let periods = count(&t, "SELECT count(*) FROM core.subscription_periods").await;
    assert_eq!(periods, 1, "the current period is recorded");
    let (_, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert!(!changed, "the same Stripe state writes nothing the second time");
    assert_eq!(count(&t, "SELECT count(*) FROM core.conferrals WHERE subscription_item_id IS NOT NULL").await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscription_periods").await, 1);
}

#[tokio::test]
async fn a_canceled_subscription_ends_its_provision_and_the_floor_returns() {
    let (t, s) = setup().await;
    let (_, pool, sub) = reconciled(&t, &s, "Leaving", "Basic").await;
    assert_eq!(hosting(&t, pool).await, "Basic");
    s.delete(&format!("/subscriptions/{sub}")).await;
    let (status, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!((status, changed), (SubscriptionStatus::Canceled, true));
    assert_eq!(hosting(&t, pool).await, "Free", "the floor is back");
    assert_eq!(sites(&t, pool).await, Some(1));
}

#[tokio::test]
async fn a_subscription_stripe_no_longer_has_ends_like_a_canceled_one() {
    let (t, s) = setup().await;
    let (o, pool, _) = reconciled(&t, &s, "Vanished", "Basic").await;
    // The console believes in a second, live subscription Stripe has never heard of.
    let basic = common::acts::product_id(&t, "Basic").await;
    t.run(
        sqlx::query(
            "WITH s AS (INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status)
                    VALUES ($1, 'sub_gone', 'active') RETURNING subscription_id)
         INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, quantity)
         SELECT subscription_id, 'si_gone', $2, 1 FROM s",
        )
        .bind(o)
        .bind(basic),
    )
    .await;
    let (status, _) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &"sub_gone".into()).await.unwrap());
    assert_eq!(status, SubscriptionStatus::Canceled);
    assert_eq!(hosting(&t, pool).await, "Basic", "the real subscription keeps its tier");
    assert_eq!(
        billing::reconcile_subscription(&t.db, &s.stripe, &"sub_never".into()).await.unwrap(),
        Reconciled::Unknown,
        "an id neither side knows changes nothing"
    );
}

#[tokio::test]
async fn a_renewal_that_fails_suspends_the_provision_and_a_paid_one_keeps_it() {
    let (t, s) = setup().await;
    let (o, pool) = org(&t, "Clocked").await;
    let now = Utc::now().timestamp();
    let clock = s.clock(now).await;
    let price = s.price(&t.db, common::acts::product_id(&t, "Pro").await, "30").await;
    let stripe_price = s.stripe_price(&t.admin, price).await;
    let customer = s.customer(&t.db, o, "pm_card_visa", Some(&clock)).await;
    let sub = s.subscribe(&customer, &stripe_price, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    assert_eq!(sites(&t, pool).await, Some(10));
    // The card starts failing; a month passes.
    s.post(
        &format!("/customers/{customer}"),
        &[
            ("payment_method", "pm_card_chargeCustomerFail"),
            ("invoice_settings[default_payment_method]", "pm_card_chargeCustomerFail"),
        ],
    )
    .await;
    s.advance(&clock, now + 32 * 86_400).await;
    let (status, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!((status, changed), (SubscriptionStatus::PastDue, true));
    assert_eq!(hosting(&t, pool).await, "Pro", "a suspended provision keeps its ladder");
    assert_eq!(sites(&t, pool).await, None, "but confers nothing");
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscription_periods").await, 2, "two periods, not overlapping");
}

#[tokio::test]
async fn a_grant_displacing_a_subscription_keeps_it_off_until_the_grant_ends_and_then_delivers_it() {
    let (t, s) = setup().await;
    let (o, pool, sub) = reconciled(&t, &s, "Granted", "Basic").await;
    let pro = common::acts::product_id(&t, "Pro").await;
    let grant = common::acts::grant(&t, o, pro).await;
    assert_eq!(hosting(&t, pool).await, "Pro");
    // The grant asked for the subscription's reconcile; the outbox runs it, and it confers
    // nothing back over the grant.
    let done = billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    assert!(done.done >= 1, "{done:?}");
    assert_eq!(hosting(&t, pool).await, "Pro");
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscription_displacements WHERE delivered_at IS NULL").await, 1);
    grants::revoke_grant(&t.db, grant, None, &member_console::services::grants::Reason::parse("over").unwrap())
        .await
        .unwrap();
    assert_eq!(hosting(&t, pool).await, "Basic", "the subscription is delivered back");
    let (_, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert!(!changed, "the reconcile finds the delivered provision as Stripe has it");
}

#[tokio::test]
async fn stripe_failing_mid_reconcile_writes_nothing_and_says_to_try_again() {
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Flaky", "Pro").await;
    s.control("/faults", &[("path_prefix", "/v1/subscriptions"), ("status", "500"), ("times", "1")]).await;
    let e = billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap_err();
    assert!(matches!(e, ServiceError::Remote { transient: true, .. }), "{e:?}");
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscriptions").await, 0, "nothing half-written");
    assert_eq!(hosting(&t, pool).await, "Free");
    // Slower than the client's bound: a timeout, the same answer.
    s.control("/faults", &[("path_prefix", "/v1/subscriptions"), ("delay_ms", "6000"), ("times", "1")]).await;
    let e = billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap_err();
    assert!(matches!(e, ServiceError::Remote { transient: true, .. }), "{e:?}");
    converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!(hosting(&t, pool).await, "Pro", "the retry applies it");
}

#[tokio::test]
async fn the_checkout_return_and_the_webhook_racing_leave_one_outcome() {
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Racing", "Pro").await;
    let runs = (0..4).map(|_| {
        let (db, stripe, sub) = (t.db.clone(), s.stripe.clone(), sub.clone());
        tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &sub).await })
    });
    let mut changed = 0;
    for r in runs {
        if converged(r.await.unwrap().unwrap()).1 {
            changed += 1;
        }
    }
    assert_eq!(changed, 1, "one reconcile applied it, the others found it applied");
    assert_eq!(count(&t, "SELECT count(*) FROM core.conferrals WHERE subscription_item_id IS NOT NULL").await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscriptions").await, 1);
    assert_eq!(hosting(&t, pool).await, "Pro");
}

#[tokio::test]
async fn an_invoice_is_converged_with_its_lines_and_payments_once() {
    let (t, s) = setup().await;
    let (o, _, sub) = reconciled(&t, &s, "Invoiced", "Basic").await;
    let list = s.get(&format!("/invoices?subscription={sub}")).await;
    let inv = StripeInvoiceId::from(list["data"][0]["id"].as_str().unwrap());
    assert_eq!(billing::converge_invoice(&t.db, &s.stripe, &inv).await.unwrap(), Converged::Written);
    assert_eq!(billing::converge_invoice(&t.db, &s.stripe, &inv).await.unwrap(), Converged::Written);
    let (org, status, paid): (OrganizationId, String, i64) = t
        .one(
            sqlx::query_as(
                "SELECT organization_id, status, amount_paid FROM billing.invoices WHERE stripe_invoice_id = $1",
            )
            .bind(&inv),
        )
        .await;
    assert_eq!((org, status.as_str(), paid), (o, "paid", 1200));
    assert_eq!(count(&t, "SELECT count(*) FROM billing.invoice_lines").await, 1);
    assert_eq!(billing::converge_invoice(&t.db, &s.stripe, &"in_nothing".into()).await.unwrap(), Converged::Unknown);
}

#[tokio::test]
async fn two_sync_clicks_write_once_and_a_product_stripe_has_whole_writes_nothing() {
    let (t, s) = setup().await;
    let pro = common::acts::product_id(&t, "Pro").await;
    billing::set_price(&t.db, pro, &crate::common::stripe::new_price("month", "30", "eur").unwrap()).await.unwrap();
    assert_eq!(billing::sync_product(&t.db, pro).await.unwrap(), SyncAnswer::Enqueued { product: true, prices: 1 });
    assert_eq!(billing::sync_product(&t.db, pro).await.unwrap(), SyncAnswer::AlreadyPending);
    assert_eq!(count(&t, "SELECT count(*) FROM core.outbox WHERE kind = 'sync_product'").await, 1);
    let done = billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    assert_eq!(done.done, 1);
    assert_eq!(billing::sync_product(&t.db, pro).await.unwrap(), SyncAnswer::UpToDate);
    assert_eq!(count(&t, "SELECT count(*) FROM core.outbox WHERE kind = 'sync_product'").await, 1);
    let products = s.get("/products?limit=100").await;
    assert_eq!(products["data"].as_array().unwrap().len(), 1, "one Stripe product: {products}");
    let prices = s.get("/prices?limit=100").await;
    assert_eq!(prices["data"].as_array().unwrap().len(), 1, "one Stripe price: {prices}");
}

// The webhook over HTTP ------------------------------------------------------------------------

const SECRET: &str = "whsec_console_tests";

fn event(id: &str, kind: &str, object: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "id": id, "object": "event", "type": kind, "created": Utc::now().timestamp(),
        "api_version": "2026-09-30.endive", "livemode": false, "pending_webhooks": 1,
        "data": { "object": object }
    }))
    .unwrap()
}

async fn post_event(app: &TestApp, body: &[u8], signature: Option<String>) -> (u16, String) {
    let mut r = reqwest::Client::new().post(app.url("/webhooks/stripe")).body(body.to_vec());
    if let Some(sig) = signature {
        r = r.header("Stripe-Signature", sig);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_webhook_is_verified_on_its_raw_body_first_and_recorded_once() {
    let (t, s) = setup().await;
    let app = TestApp::spawn_with_stripe(&t, s.with_webhook_secrets(vec!["whsec_old".into(), SECRET.into()])).await;
    let body =
        event("evt_1", "customer.subscription.updated", serde_json::json!({"id": "sub_1", "object": "subscription"}));
    let now = Utc::now().timestamp();
    let refused = [
        None,
        Some("t=1,v1=zz".to_string()),
        Some(signature::sign("whsec_foreign", now, &body)),
        Some(signature::sign(SECRET, now - 301, &body)),
        Some(signature::sign(SECRET, now, b"{\"id\":\"evt_other\"}")),
    ];
    for sig in refused {
        let (status, text) = post_event(&app, &body, sig.clone()).await;
        assert_eq!(status, 400, "{sig:?}: {text}");
    }
    assert_eq!(count(&t, "SELECT count(*) FROM billing.stripe_events").await, 0, "nothing written");
    assert_eq!(count(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'reconcile_subscription'").await, 0);
    // Signed by the rotated-out secret: still accepted during the overlap.
    let (status, text) = post_event(&app, &body, Some(signature::sign("whsec_old", now, &body))).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = post_event(&app, &body, Some(signature::sign(SECRET, now, &body))).await;
    assert_eq!((status, text.trim()), (200, "already recorded"));
    assert_eq!(count(&t, "SELECT count(*) FROM billing.stripe_events").await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'reconcile_subscription'").await, 1);
    // A second event about the same subscription while its job is pending queues nothing more.
    let again = event("evt_2", "customer.subscription.updated", serde_json::json!({"id": "sub_1"}));
    let (status, _) = post_event(&app, &again, Some(signature::sign(SECRET, now, &again))).await;
    assert_eq!(status, 200);
    assert_eq!(count(&t, "SELECT count(*) FROM billing.stripe_events").await, 2);
    assert_eq!(count(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'reconcile_subscription'").await, 1);
    // Not a Stripe event at all, though signed.
    let junk = b"not json".to_vec();
    let (status, _) = post_event(&app, &junk, Some(signature::sign(SECRET, now, &junk))).await;
    assert_eq!(status, 400);
    // Larger than any event.
    let huge = vec![b' '; 1_100_000];
    let (status, _) = post_event(&app, &huge, Some(signature::sign(SECRET, now, &huge))).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn events_out_of_order_converge_on_stripes_state_now() {
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Reordered", "Pro").await;
    s.delete(&format!("/subscriptions/{sub}")).await;
    // The `deleted` event arrives and is reconciled before the `created` one: both read Stripe
    // as it is now, so the order they come in changes nothing.
    let app = TestApp::spawn_with_stripe(&t, s.with_webhook_secrets(vec![SECRET.into()])).await;
    let now = Utc::now().timestamp();
    for (id, kind) in [("evt_d", "customer.subscription.deleted"), ("evt_c", "customer.subscription.created")] {
        let body = event(id, kind, serde_json::json!({"id": sub, "object": "subscription"}));
        assert_eq!(post_event(&app, &body, Some(signature::sign(SECRET, now, &body))).await.0, 200);
        let job: serde_json::Value = t
            .one(sqlx::query_scalar(
                "SELECT payload FROM integration.jobs WHERE kind = 'reconcile_subscription' AND state = 'pending'",
            ))
            .await;
        let id = job["stripe_subscription_id"].as_str().unwrap();
        billing::reconcile_subscription(&t.db, &s.stripe, &id.into()).await.unwrap();
        t.run(sqlx::query("UPDATE integration.jobs SET state = 'done', finished_at = now() WHERE state = 'pending'"))
            .await;
    }
    assert_eq!(hosting(&t, pool).await, "Free");
    assert_eq!(
        count(&t, "SELECT count(*) FROM core.conferrals WHERE subscription_item_id IS NOT NULL AND state = 'holding'")
            .await,
        0
    );
}

// Lock order: one path paused mid-transaction, the other shown waiting on it ------------------------

/// Pause whatever writes `table` next: the test holds the table's lock in an open transaction.
#[tokio::test]
async fn a_second_reconcile_of_a_subscription_waits_on_the_first_ones_subscription_lock() {
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Twice", "Pro").await;
    let (mut pause, pause_pid) = pause_on(&t, "core.subscription_periods").await;
    let (db, stripe, id) = (t.db.clone(), s.stripe.clone(), sub.clone());
    let first = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &id).await });
    let first_pid = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    // By the periods it holds the rendezvous and the subscription's lock, and no pool row yet.
    let subscription = Expect::advisory(AdvisoryKey::Subscription(sub.to_string()));
    assert_holds(&t.admin, first_pid, &[Expect::rendezvous_shared(), subscription]).await;
    let (db, stripe, id) = (t.db.clone(), s.stripe.clone(), sub.clone());
    let second = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &id).await });
    let second_pid = common::wait_for_waiter(&t.admin, &t.name, first_pid).await;
    assert!(second_pid > 0, "the second waits on the first's subscription lock");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(converged(first.await.unwrap().unwrap()).1);
    assert!(!converged(second.await.unwrap().unwrap()).1, "the second finds the first's writes");
    assert_eq!(hosting(&t, pool).await, "Pro");
}

#[tokio::test]
async fn a_reconcile_waits_on_the_pool_row_a_grant_revocation_holds() {
    let (t, s) = setup().await;
    let (o, pool, sub) = subscribed(&t, &s, "Contended", "Basic").await;
    let g = common::acts::grant(&t, o, common::acts::product_id(&t, "Pro").await).await;
    let (mut pause, pause_pid) = pause_on(&t, "core.grant_events").await;
    let db = t.db.clone();
    let revoke = tokio::spawn(async move {
        grants::revoke_grant(&db, g, None, &member_console::services::grants::Reason::parse("done").unwrap()).await
    });
    let revoker = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    let revoking =
        [Expect::rendezvous_shared(), Expect::row("core.resource_pools", pool.0), Expect::row("core.grants", g.0)];
    assert_holds(&t.admin, revoker, &revoking).await;
    let (db, stripe, id) = (t.db.clone(), s.stripe.clone(), sub.clone());
    let reconcile = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &id).await });
    let reconciler = common::wait_for_waiter(&t.admin, &t.name, revoker).await;
    // It holds the rendezvous (shared with the revocation's) and the subscription's lock, and
    // waits for the pool row: the order the spec gives, never the other way round.
    let subscription = Expect::advisory(AdvisoryKey::Subscription(sub.to_string()));
    assert_holds(&t.admin, reconciler, &[Expect::rendezvous_shared(), subscription]).await;
    common::locks::assert_waits(&t.admin, reconciler, revoker, &Expect::row("core.resource_pools", pool.0)).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    revoke.await.unwrap().unwrap();
    converged(reconcile.await.unwrap().unwrap());
    assert_eq!(hosting(&t, pool).await, "Basic", "after the grant ended, the subscription holds the ladder");
}

#[tokio::test]
async fn a_second_converge_of_an_invoice_waits_on_the_first_ones_invoice_lock() {
    let (t, s) = setup().await;
    let (_, _, sub) = subscribed(&t, &s, "Billed", "Basic").await;
    let inv =
        StripeInvoiceId::from(s.get(&format!("/invoices?subscription={sub}")).await["data"][0]["id"].as_str().unwrap());
    let (mut pause, pause_pid) = pause_on(&t, "billing.invoice_lines").await;
    let (db, stripe, id) = (t.db.clone(), s.stripe.clone(), inv.clone());
    let first = tokio::spawn(async move { billing::converge_invoice(&db, &stripe, &id).await });
    let first_pid = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    assert_holds(&t.admin, first_pid, &[Expect::advisory(AdvisoryKey::Invoice(inv.to_string()))]).await;
    let (db, stripe, id) = (t.db.clone(), s.stripe.clone(), inv.clone());
    let second = tokio::spawn(async move { billing::converge_invoice(&db, &stripe, &id).await });
    common::wait_for_waiter(&t.admin, &t.name, first_pid).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(first.await.unwrap().unwrap(), Converged::Written);
    assert_eq!(second.await.unwrap().unwrap(), Converged::Written);
    assert_eq!(
        count(&t, "SELECT count(*) FROM billing.invoice_lines").await,
        1,
        "lines written once each time, not twice"
    );
}

#[tokio::test]
async fn a_second_sync_click_waits_on_the_first_and_then_writes_nothing() {
    let (t, _s) = setup().await;
    let basic: ProductId = common::acts::product_id(&t, "Basic").await;
    billing::set_price(&t.db, basic, &crate::common::stripe::new_price("year", "99", "usd").unwrap()).await.unwrap();
    let (mut pause, pause_pid) = pause_on(&t, "core.outbox").await;
    let db = t.db.clone();
    let first = tokio::spawn(async move { billing::sync_product(&db, basic).await });
    let first_pid = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    assert_holds(&t.admin, first_pid, &[Expect::advisory(AdvisoryKey::ProductSync(basic.to_string()))]).await;
    let db = t.db.clone();
    let second = tokio::spawn(async move { billing::sync_product(&db, basic).await });
    common::wait_for_waiter(&t.admin, &t.name, first_pid).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(first.await.unwrap().unwrap(), SyncAnswer::Enqueued { .. }));
    assert_eq!(second.await.unwrap().unwrap(), SyncAnswer::AlreadyPending);
    assert_eq!(count(&t, "SELECT count(*) FROM core.outbox").await, 1);
}

#[tokio::test]
async fn the_outbox_processor_retries_a_row_stripe_refused_and_keeps_the_reason() {
    let (t, s) = setup().await;
    let pro = common::acts::product_id(&t, "Pro").await;
    billing::set_price(&t.db, pro, &crate::common::stripe::new_price("month", "30", "eur").unwrap()).await.unwrap();
    billing::sync_product(&t.db, pro).await.unwrap();
    s.control("/faults", &[("path_prefix", "/v1/products"), ("status", "500"), ("times", "1")]).await;
    let first = billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    assert_eq!((first.done, first.failed), (0, 1));
    let (attempts, error): (i32, Option<String>) =
        t.one(sqlx::query_as("SELECT attempts, last_error FROM core.outbox")).await;
    assert_eq!(attempts, 1);
    assert!(error.is_some_and(|e| e.contains("Stripe")));
    // Due again after its backoff; made due now, it succeeds.
    t.run(sqlx::query("UPDATE core.outbox SET due_at = now()")).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    assert_eq!((second.done, second.failed), (1, 0));
    let state: String = t.one(sqlx::query_scalar("SELECT sync_state FROM billing.product_mappings")).await;
    assert_eq!(state, "synced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_its_stripe_read_and_its_commit_leaves_nothing_and_the_next_applies_it_once() {
    use member_console::jobs::Job;
    let (t, s) = setup().await;
    let (_, pool, sub) = subscribed(&t, &s, "Crashed", "Pro").await;
    let job_id = {
        let mut tx = member_console::db::begin(&t.db, member_console::db::TxKind::Plain).await.unwrap();
        let job = billing::ReconcileSubscription { stripe_subscription_id: sub.clone() };
        let id = job.enqueue(tx.conn()).await.unwrap();
        tx.commit().await.unwrap();
        id.unwrap()
    };
    let env = [
        ("STRIPE_SECRET_KEY", common::stripe::SECRET_KEY),
        ("STRIPE_API_BASE", s.base.as_str()),
        ("STRIPE_WEBHOOK_SECRET", "whsec_unused"),
    ];
    let data_dir = std::env::temp_dir().join(format!("mc-billing-kill-{}", t.name));
    let lease = Duration::from_millis(1500);
    // The reconcile stops at its first period write, after the Stripe read and with its locks
    // taken; the worker dies there.
    let (mut pause, pause_pid) = pause_on(&t, "core.subscription_periods").await;
    let mut first = WorkerProcess::start_with(&t, &data_dir, lease, "first", &env);
    let waiter = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    assert!(waiter > 0, "the worker's reconcile reached its transaction: {}", first.log());
    first.kill();
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(count(&t, "SELECT count(*) FROM core.subscriptions").await, 0, "the killed transaction left nothing");
    let second = WorkerProcess::start_with(&t, &data_dir, lease, "second", &env);
    let started = std::time::Instant::now();
    // Every reconcile of it done: this job, and any the worker's sweep queued meanwhile.
    loop {
        let open: i64 = t
            .one(
                sqlx::query_scalar("SELECT count(*) FROM integration.jobs WHERE kind = $1 AND state <> 'done'")
                    .bind(billing::ReconcileSubscription::KIND),
            )
            .await;
        if open == 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "not reconciled after the restart: {}", second.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(hosting(&t, pool).await, "Pro");
    assert_eq!(count(&t, "SELECT count(*) FROM core.conferrals WHERE subscription_item_id IS NOT NULL").await, 1);
    let attempts: i32 =
        t.one(sqlx::query_scalar("SELECT attempts FROM integration.jobs WHERE job_id = $1").bind(job_id)).await;
    assert_eq!(attempts, 2, "the killed attempt, then the one that applied it");
}

/// The ledger's rows of one subscription: (from, to, state).
async fn ledger(t: &TestDb, stripe_sub: &StripeSubscriptionId) -> Vec<(String, String, String)> {
    t.all(
        sqlx::query_as(
            "SELECT f.name, p.name, c.state FROM core.scheduled_changes c
         JOIN core.subscriptions s USING (subscription_id)
         JOIN core.products f ON f.product_id = c.from_product_id JOIN core.products p ON p.product_id = c.to_product_id
         WHERE s.stripe_subscription_id = $1 ORDER BY c.scheduled_change_id",
        )
        .bind(stripe_sub),
    )
    .await
}

/// A schedule on `sub` keeping its current price to the period's end, then `next` for a month.
async fn schedule_change(
    s: &StripeFixture,
    sub: &StripeSubscriptionId,
    current: &StripePriceId,
    next: &StripePriceId,
) -> String {
    let (current, next) = (current.as_str(), next.as_str());
    let made = s.post("/subscription_schedules", &[("from_subscription", sub.as_str())]).await;
    let id = made["id"].as_str().unwrap().to_string();
    let start = made["phases"][0]["start_date"].as_i64().unwrap().to_string();
    let end = made["phases"][0]["end_date"].as_i64().unwrap().to_string();
    s.post(
        &format!("/subscription_schedules/{id}"),
        &[
            ("phases[0][items][0][price]", current),
            ("phases[0][start_date]", &start),
            ("phases[0][end_date]", &end),
            ("phases[1][items][0][price]", next),
            ("phases[1][duration][interval]", "month"),
        ],
    )
    .await;
    id
}

#[tokio::test]
async fn a_downgrade_stripe_has_scheduled_is_in_the_ledger_until_it_applies_or_is_released() {
    let (t, s) = setup().await;
    let now = Utc::now().timestamp();
    let clock = s.clock(now).await;
    let pro = s.price(&t.db, common::acts::product_id(&t, "Pro").await, "30").await;
    let basic = s.price(&t.db, common::acts::product_id(&t, "Basic").await, "12").await;
    let (pro, basic) = (s.stripe_price(&t.admin, pro).await, s.stripe_price(&t.admin, basic).await);
    let (o, pool) = org(&t, "Downgrading").await;
    let customer = s.customer(&t.db, o, "pm_card_visa", Some(&clock)).await;
    let sub = s.subscribe(&customer, &pro, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    schedule_change(&s, &sub, &pro, &basic).await;
    let (_, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert!(changed, "the ledger row is a write");
    assert_eq!(ledger(&t, &sub).await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    assert_eq!(hosting(&t, pool).await, "Pro", "Pro until the period ends");
    let (_, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert!(!changed, "the same schedule writes nothing twice");
    // The period ends: Stripe moves the subscription to Basic.
    s.advance(&clock, now + 32 * 86_400).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    assert_eq!(ledger(&t, &sub).await, [("Pro".into(), "Basic".into(), "applied".into())]);
    assert_eq!(hosting(&t, pool).await, "Basic");
    assert_eq!(sites(&t, pool).await, Some(3));

    // Another subscription's schedule is released before its change: superseded.
    let (o2, pool2) = org(&t, "Changed their mind").await;
    let customer = s.customer(&t.db, o2, "pm_card_visa", None).await;
    let sub2 = s.subscribe(&customer, &pro, o2).await;
    let schedule = schedule_change(&s, &sub2, &pro, &basic).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub2).await.unwrap();
    assert_eq!(ledger(&t, &sub2).await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    s.post(&format!("/subscription_schedules/{schedule}/release"), &[]).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub2).await.unwrap();
    assert_eq!(ledger(&t, &sub2).await, [("Pro".into(), "Basic".into(), "superseded".into())]);
    assert_eq!(hosting(&t, pool2).await, "Pro");
}

#[tokio::test]
async fn a_price_of_a_product_that_is_not_a_paid_tier_cannot_be_bought_even_by_hand() {
    let (t, s) = setup().await;
    let free = s.price(&t.db, common::acts::product_id(&t, "Free").await, "1").await;
    let acme =
        OrganizationId(common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    let member = member_console::ids::AccountId(
        common::acts::scalar(
            &t,
            &format!("SELECT account_id FROM core.accounts WHERE email = '{}'", demo::MEMBER_EMAIL),
        )
        .await,
    );
    let back = billing::checkout::ReturnTo { base_url: "http://127.0.0.1:1" };
    let e = billing::start_checkout(&t.db, &s.stripe, member, acme, free, 1, back).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("not a plan")), "{e:?}");
    assert_eq!(count(&t, "SELECT count(*) FROM billing.customers").await, 0, "refused before Stripe was asked");
}

/// The demo's owner of the demo organization: (organization, account).
async fn demo_owner(t: &TestDb) -> (OrganizationId, member_console::ids::AccountId) {
    let acme =
        OrganizationId(common::acts::id_by_name(t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    let member = member_console::ids::AccountId(
        common::acts::scalar(
            t,
            &format!("SELECT account_id FROM core.accounts WHERE email = '{}'", demo::MEMBER_EMAIL),
        )
        .await,
    );
    (acme, member)
}

#[tokio::test]
async fn a_subscription_waiting_for_its_first_payment_holds_its_ladder_against_a_checkout() {
    let (t, s) = setup().await;
    let (basic, pro) = s.demo_prices(&t).await;
    let (acme, member) = demo_owner(&t).await;
    let customer = s.customer(&t.db, acme, "pm_card_chargeCustomerFail", None).await;
    let sub = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, acme).await;
    let (status, _) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!(status, SubscriptionStatus::Incomplete);
    let back = billing::checkout::ReturnTo { base_url: "http://127.0.0.1:1" };
    let e = billing::start_checkout(&t.db, &s.stripe, member, acme, pro, 1, back).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("Basic") && m.contains("first payment")), "{e:?}");
    assert_eq!(count(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 0);
}

#[tokio::test]
async fn a_subscription_taking_a_ladder_from_another_asks_for_that_ones_reconcile_in_the_same_transaction() {
    let (t, s) = setup().await;
    let (basic, pro) = s.demo_prices(&t).await;
    let (o, pool) = org(&t, "Paid twice").await;
    let customer = s.customer(&t.db, o, "pm_card_visa", None).await;
    let first = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &first).await.unwrap();
    let second = s.subscribe(&customer, &s.stripe_price(&t.admin, pro).await, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &second).await.unwrap();
    assert_eq!(hosting(&t, pool).await, "Pro");
    let asked: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT count(*) FROM core.outbox o JOIN core.subscriptions s USING (subscription_id)
                  WHERE s.stripe_subscription_id = $1 AND o.processed_at IS NULL AND o.payload->>'cause' = 'displaced'",
            )
            .bind(&first),
        )
        .await;
    assert_eq!(asked, 1, "the displaced Basic is asked to look again (its collection pause) without the sweep");
}

#[tokio::test]
async fn a_subscription_cancelled_in_stripe_with_a_downgrade_scheduled_supersedes_it_and_offers_no_undo() {
    let (t, s) = setup().await;
    let (basic, pro) = s.demo_prices(&t).await;
    let (pro, basic) = (s.stripe_price(&t.admin, pro).await, s.stripe_price(&t.admin, basic).await);
    let (acme, _) = demo_owner(&t).await;
    let customer = s.customer(&t.db, acme, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &pro, acme).await;
    schedule_change(&s, &sub, &pro, &basic).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    assert_eq!(ledger(&t, &sub).await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    // Cancelled at once in Stripe's dashboard: the downgrade will never happen.
    s.delete(&format!("/subscriptions/{sub}")).await;
    let (status, changed) = converged(billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap());
    assert_eq!((status, changed), (SubscriptionStatus::Canceled, true));
    assert_eq!(ledger(&t, &sub).await, [("Pro".into(), "Basic".into(), "superseded".into())]);

    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = common::pages::Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/billing").await;
    assert!(page.body.contains("canceled"), "the ended subscription is listed: {}", page.body);
    assert!(!page.body.contains("/billing/switch/undo") && !page.body.contains("then Basic"), "{}", page.body);
    assert!(!page.body.contains("renews"), "{}", page.body);
}

#[tokio::test]
async fn the_sweep_reads_every_page_of_events_since_its_cursor_so_older_events_are_not_skipped() {
    let (t, s) = setup().await;
    let sub = a_subscription_behind_150_newer_events(&t, &s).await;
    let (total, _) = stripe_events(&s).await;
    assert!(total > 150, "{total} events");
    let swept = billing::sweep_billing(&t.db, &s.stripe).await.unwrap();
    assert_eq!((swept.events_read, swept.events_complete), (total, true));
    let jobs: i64 = t
        .one(
            sqlx::query_scalar("SELECT count(*) FROM integration.jobs WHERE payload->>'object_key' = $1")
                .bind(format!("stripe-subscription:{sub}")),
        )
        .await;
    assert_eq!(jobs, 1, "the subscription's events, the oldest, were read and its reconcile queued");
    let cursor: Option<chrono::DateTime<Utc>> =
        t.one(sqlx::query_scalar("SELECT events_seen_until FROM billing.sweep_state")).await;
    assert!(cursor.is_some(), "every event was read: the cursor moved to the newest");
}

/// The oldest events: a subscription and its first invoice, which the console never heard of;
/// then more than one page of newer events (Stripe lists newest first, 100 at most a page). The
/// subscription's Stripe id.
async fn a_subscription_behind_150_newer_events(t: &TestDb, s: &StripeFixture) -> StripeSubscriptionId {
    let (basic, _) = s.demo_prices(t).await;
    let (o, _) = org(t, "Missed webhooks").await;
    let customer = s.customer(&t.db, o, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, o).await;
    for n in 0..150 {
        s.post(&format!("/customers/{customer}"), &[("metadata[n]", &n.to_string())]).await;
    }
    sub
}

/// How many events the stand-in holds, and the newest one's time (read as the sweep does, newest
/// first, a page of 100 at a time).
async fn stripe_events(s: &StripeFixture) -> (usize, chrono::DateTime<Utc>) {
    let (mut n, mut newest) = (0, None);
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/events?limit=100&starting_after={a}"),
            None => "/events?limit=100".to_string(),
        };
        let page = s.get(&path).await;
        let data = page["data"].as_array().unwrap().clone();
        n += data.len();
        newest = newest.or_else(|| data.first().and_then(|e| e["created"].as_i64()));
        after = data.last().and_then(|e| e["id"].as_str()).map(String::from);
        if page["has_more"] != true {
            return (n, chrono::DateTime::from_timestamp(newest.unwrap(), 0).unwrap());
        }
    }
}

/// The sweep's cursor, and its unfinished walk's resume point and newest event time.
async fn sweep_state(t: &TestDb) -> (Option<chrono::DateTime<Utc>>, Option<String>, Option<chrono::DateTime<Utc>>) {
    t.one(sqlx::query_as("SELECT events_seen_until, resume_after, walk_newest FROM billing.sweep_state")).await
}

#[tokio::test]
async fn a_sweep_cut_short_continues_its_walk_at_the_next_pass_so_events_older_than_one_pass_reads_are_not_lost() {
    let (t, s) = setup().await;
    // A pass reads one page here.
    let sub = a_subscription_behind_150_newer_events(&t, &s).await;
    let (total, newest) = stripe_events(&s).await;
    assert!(total > 150 && total < 200, "{total} events: two passes of one page read them all");
    let queued = async || -> i64 {
        t.one(
            sqlx::query_scalar("SELECT count(*) FROM integration.jobs WHERE payload->>'object_key' = $1")
                .bind(format!("stripe-subscription:{sub}")),
        )
        .await
    };

    // The first pass reads the newest page only: the cursor stays, the walk's resume point is kept.
    let first = billing::sweep_billing_with(&t.db, &s.stripe, 1).await.unwrap();
    assert_eq!((first.events_read, first.events_complete), (100, false));
    assert_eq!(queued().await, 0, "the subscription's events, the oldest, are not read yet");
    let (cursor, resume, walk_newest) = sweep_state(&t).await;
    assert_eq!(cursor, None, "the walk is unfinished: the cursor stays");
    assert!(resume.is_some(), "the walk's resume point is kept");
    assert_eq!(walk_newest, Some(newest), "and the newest event it read");

    // The second continues after the oldest event the first read, to the end: the subscription's
    // reconcile is queued, and the cursor moves to the walk's newest event.
    let second = billing::sweep_billing_with(&t.db, &s.stripe, 1).await.unwrap();
    assert_eq!((second.events_read, second.events_complete), (total - 100, true));
    assert_eq!(queued().await, 1, "the oldest events were read and the subscription's reconcile queued");
    assert_eq!(sweep_state(&t).await, (Some(newest), None, None), "the walk is done: the cursor moved");

    // The third starts a new walk from the newest again (every event here is within the cursor's
    // minute of margin), not the finished walk's remainder, and reaches nothing older.
    let third = billing::sweep_billing_with(&t.db, &s.stripe, 1).await.unwrap();
    assert_eq!((third.events_read, third.events_complete), (100, false));
    assert_eq!(queued().await, 1, "the subscription's events are not read again");
    let (cursor, resume, walk_newest) = sweep_state(&t).await;
    assert_eq!((cursor, walk_newest), (Some(newest), Some(newest)));
    assert!(resume.is_some(), "the new walk keeps its own resume point");
}

// Outbox requests against a row already in flight ------------------------------------------------

/// A processor's claim of every due outbox row (one statement, as `process_outbox` claims),
/// committed: the rows are in flight until marked.
async fn claim_all(t: &TestDb) -> Vec<member_console::ids::OutboxId> {
    let mut tx = member_console::db::begin(&t.db, member_console::db::TxKind::Plain).await.unwrap();
    let rows = member_console::store::billing::claim_outbox(tx.conn(), 100, 30.0).await.unwrap();
    tx.commit().await.unwrap();
    rows.into_iter().map(|r| r.outbox_id).collect()
}

async fn mark_done(t: &TestDb, rows: &[member_console::ids::OutboxId]) {
    let mut tx = member_console::db::begin(&t.db, member_console::db::TxKind::Plain).await.unwrap();
    for row in rows {
        member_console::store::billing::outbox_done(tx.conn(), *row).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// Issue 36, defect 2: a sync click deduplicated against the product's row that a processor had
/// already claimed (and whose work had read the prices) was lost, and the new price never
/// reached Stripe. The processor here is paused between its row's work and its done mark.
#[tokio::test]
async fn a_sync_click_while_a_processor_holds_the_products_claimed_row_is_a_row_of_its_own_and_the_new_price_is_synced()
{
    let (t, s) = setup().await;
    let pro = common::acts::product_id(&t, "Pro").await;
    billing::set_price(&t.db, pro, &crate::common::stripe::new_price("month", "30", "eur").unwrap()).await.unwrap();
    billing::sync_product(&t.db, pro).await.unwrap();
    let claimed = claim_all(&t).await;
    billing::apply_product_sync(&t.db, &s.stripe, pro, &format!("outbox-{}", claimed[0])).await.unwrap();
    // An operator adds a yearly price and clicks Sync again while the row is still in flight.
    let yearly =
        billing::set_price(&t.db, pro, &crate::common::stripe::new_price("year", "300", "eur").unwrap()).await.unwrap();
    assert_eq!(billing::sync_product(&t.db, pro).await.unwrap(), SyncAnswer::Enqueued { product: false, prices: 1 });
    let waiting = "SELECT count(*) FROM core.outbox WHERE kind = 'sync_product' AND processed_at IS NULL AND claimed_until IS NULL";
    assert_eq!(count(&t, waiting).await, 1, "the click's row is written beside the claimed one");
    mark_done(&t, &claimed).await;
    let done = billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    assert_eq!(done.done, 1);
    let state: String =
        t.one(sqlx::query_scalar("SELECT sync_state FROM billing.prices WHERE price_id = $1").bind(yearly)).await;
    assert_eq!(state, "synced", "the yearly price reached Stripe");
    let prices = s.get("/prices?limit=100").await;
    assert_eq!(prices["data"].as_array().unwrap().len(), 2, "{prices}");
}

/// Issue 36, defect 2: the displacement's reconcile request (`request_displaced_reconciles`) was
/// deduplicated against the displaced subscription's claimed row, whose work had found nothing
/// displacing it, so its collection was never paused.
#[tokio::test]
async fn a_displacement_while_a_processor_holds_the_displaced_ones_claimed_row_asks_again_and_its_collection_pauses() {
    let (t, s) = setup().await;
    let (basic, pro) = s.demo_prices(&t).await;
    let (o, pool) = org(&t, "Paid twice").await;
    let customer = s.customer(&t.db, o, "pm_card_visa", None).await;
    let first = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &first).await.unwrap();
    let first_id = member_console::ids::SubscriptionId(
        count(&t, &format!("SELECT subscription_id FROM core.subscriptions WHERE stripe_subscription_id = '{first}'"))
            .await,
    );
    // A reconcile of the first is asked for, claimed and done (nothing displaces it yet); the
    // processor has not marked the row done.
    {
        let mut tx = member_console::db::begin(&t.db, member_console::db::TxKind::Plain).await.unwrap();
        member_console::store::plan_changes::request_reconcile(tx.conn(), first_id, &first, "test", 0.0).await.unwrap();
        tx.commit().await.unwrap();
    }
    let claimed = claim_all(&t).await;
    billing::reconcile::apply_subscription_collection(&t.db, &s.stripe, &first).await.unwrap();
    // A second subscription takes the ladder: the first is asked to look again.
    let second = s.subscribe(&customer, &s.stripe_price(&t.admin, pro).await, o).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &second).await.unwrap();
    assert_eq!(hosting(&t, pool).await, "Pro");
    let asked = format!(
        "SELECT count(*) FROM core.outbox WHERE subscription_id = {first_id} AND processed_at IS NULL
            AND claimed_until IS NULL AND payload->>'cause' = 'displaced'"
    );
    assert_eq!(count(&t, &asked).await, 1, "the displaced Basic's request is written beside its claimed row");
    mark_done(&t, &claimed).await;
    billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE).await.unwrap();
    let sub = s.get(&format!("/subscriptions/{first}")).await;
    assert!(!sub["pause_collection"].is_null(), "the displaced subscription's collection is paused: {sub}");
}
