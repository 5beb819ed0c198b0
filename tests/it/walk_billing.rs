//! The billing paths walked lock by lock (issue 36): each run as Stripe, the outbox or a member
//! reaches it (ReconcileSubscription as the webhook's job runs it, the outbox's pass, a member's
//! switch and Resume plan, an operator's price and sync click), under `LockWalk`, which pauses the
//! path after each lock it takes and shows it holds exactly the locks the spec orders so far and
//! that a conflicting probe waits on it for the last one. Then the path's outcome, unchanged.

use crate::common;

use chrono::Utc;
use common::{
    TestDb,
    acts::{hosting, product_id, sites},
    locks::{Expect, LockWalk},
    stripe::{StripeFixture, demo_with_stripe},
};
use member_console::{
    db::{keys::AdvisoryKey, trace::steps},
    demo,
    ids::{AccountId, OrganizationId, OutboxId, PoolId, PriceId, ProductId, SubscriptionId},
    jobs::DEFAULT_LEASE,
    services::billing::{
        self, Reconciled,
        catalog_sync::{self, SyncAnswer},
        invoices::{self, Converged},
        outbox, plan_changes, reconcile,
        resume::{self, RESUME_SUBSCRIPTION_LOCKS},
    },
    states::SubscriptionStatus,
};

use reconcile::RECONCILE_SUBSCRIPTION_LOCKS as RECONCILE;

/// The demo member's organization, paying for `product` monthly on a test clock frozen at `now`,
/// reconciled once.
struct Paying {
    t: TestDb,
    s: StripeFixture,
    who: AccountId,
    org: OrganizationId,
    pool: PoolId,
    clock: String,
    now: i64,
    customer: member_console::ids::StripeCustomerId,
    sub: member_console::ids::StripeSubscriptionId,
    subscription_id: SubscriptionId,
    basic: PriceId,
    pro: PriceId,
}

async fn paying(product: &str) -> Paying {
    let (t, s) = demo_with_stripe().await;
    let who = AccountId(common::pages::account_id(&t, demo::MEMBER_EMAIL).await);
    let org = OrganizationId(common::pages::organization_id(&t, demo::DEMO_ORGANIZATION).await);
    let pool = PoolId(
        common::acts::scalar(
            &t,
            &format!("SELECT pool_id FROM core.resource_pools WHERE organization_id = {org} AND is_default"),
        )
        .await,
    );
    let (basic, pro) = s.demo_prices(&t).await;
    let now = Utc::now().timestamp();
    let clock = s.clock(now).await;
    let customer = s.customer(&t.db, org, "pm_card_visa", Some(&clock)).await;
    let price = s.stripe_price(&t.admin, if product == "Pro" { pro } else { basic }).await;
    let sub = s.subscribe(&customer, &price, org).await;
    billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    let subscription_id = SubscriptionId(
        common::acts::scalar(
            &t,
            &format!("SELECT subscription_id FROM core.subscriptions WHERE stripe_subscription_id = '{sub}'"),
        )
        .await,
    );
    Paying { t, s, who, org, pool, clock, now, customer, sub, subscription_id, basic, pro }
}

impl Paying {
    fn subscription_lock(&self) -> Expect {
        Expect::advisory(AdvisoryKey::Subscription(self.sub.to_string()))
    }

    fn pool_row(&self) -> Expect {
        Expect::row("core.resource_pools", self.pool.0)
    }

    /// The reconcile's order, whatever its branch: the rendezvous (shared), the subscription's
    /// lock, the organization's pool row.
    fn reconcile_order(&self) -> [Expect; 3] {
        [Expect::rendezvous_shared(), self.subscription_lock(), self.pool_row()]
    }

    /// ReconcileSubscription walked lock by lock, as the webhook's job runs it.
    async fn walk_reconcile(&self) -> Reconciled {
        let (stripe, sub) = (self.s.stripe.clone(), self.sub.clone());
        LockWalk::run(&self.t, &RECONCILE, &self.reconcile_order(), |db| async move {
            billing::reconcile_subscription(&db, &stripe, &sub).await
        })
        .await
        .unwrap()
    }

    /// The card fails from now on.
    async fn card_fails(&self) {
        let pm = "pm_card_chargeCustomerFail";
        self.s
            .post(
                &format!("/customers/{}", self.customer),
                &[("payment_method", pm), ("invoice_settings[default_payment_method]", pm)],
            )
            .await;
    }

    /// A grant of Pro displaces the subscription, and the outbox pauses its collection.
    async fn displaced_by_a_grant(&self) {
        common::acts::grant(&self.t, self.org, product_id(&self.t, "Pro").await).await;
        drain_outbox(&self.t, &self.s).await;
        assert_eq!(self.stripe_pause().await, (true, true), "the displaced subscription's collection is paused");
    }

    /// The stand-in's subscription: (pause_collection set, the console's mark in its metadata).
    async fn stripe_pause(&self) -> (bool, bool) {
        let sub = self.s.get(&format!("/subscriptions/{}", self.sub)).await;
        (!sub["pause_collection"].is_null(), sub["metadata"]["console_pause"] == "displaced")
    }

    /// The ledger's rows: (from, to, state).
    async fn ledger(&self) -> Vec<(String, String, String)> {
        self.t
            .all(
                sqlx::query_as(
                    "SELECT f.name, p.name, c.state FROM core.scheduled_changes c
                       JOIN core.products f ON f.product_id = c.from_product_id
                       JOIN core.products p ON p.product_id = c.to_product_id
                      WHERE c.subscription_id = $1 ORDER BY c.scheduled_change_id",
                )
                .bind(self.subscription_id),
            )
            .await
    }

    /// Quote a switch to `price` and confirm it, as a member does.
    async fn switch(&self, price: PriceId) {
        let (db, stripe) = (&self.t.db, &self.s.stripe);
        let q = plan_changes::quote_switch(db, stripe, self.who, self.org, self.subscription_id, price, None)
            .await
            .unwrap();
        plan_changes::switch_plan(db, stripe, self.who, self.org, self.subscription_id, price, &q.operation)
            .await
            .unwrap();
    }
}

/// Run the outbox until nothing is due, as the processor's schedule does.
async fn drain_outbox(t: &TestDb, s: &StripeFixture) {
    for _ in 0..5 {
        if billing::process_outbox(&t.db, &s.stripe, 50, DEFAULT_LEASE).await.unwrap().done == 0 {
            return;
        }
    }
}

/// The outbox rows not yet done, oldest first.
async fn outbox_rows(t: &TestDb) -> Vec<OutboxId> {
    t.all(sqlx::query_scalar("SELECT outbox_id FROM core.outbox WHERE processed_at IS NULL ORDER BY due_at, outbox_id"))
        .await
}

/// Every outbox row marked done, so a walk's pass sees only the rows the test makes.
async fn outbox_cleared(t: &TestDb) {
    t.run(sqlx::query("UPDATE core.outbox SET processed_at = now() WHERE processed_at IS NULL")).await;
}

/// The trace markers of the steps the traced transactions of `path` ran, in order.
async fn traced_steps(t: &TestDb, path: &str) -> Vec<String> {
    t.all(
        sqlx::query_scalar(
            "SELECT key FROM core.lock_trace WHERE path = $1 AND lock = 'step' ORDER BY xact::text::bigint, seq",
        )
        .bind(path),
    )
    .await
}

/// The paths the trace shows named (observed), in no order.
async fn traced_paths(t: &TestDb) -> Vec<String> {
    t.all(sqlx::query_scalar("SELECT DISTINCT key FROM core.lock_trace WHERE lock = 'path' ORDER BY 1")).await
}

fn converged(r: Reconciled) -> (SubscriptionStatus, bool) {
    match r {
        Reconciled::Converged { status, changed, .. } => (status, changed),
        other => panic!("expected a converged reconcile, got {other:?}"),
    }
}

// 12: the subscription reconcile's active branch ---------------------------------------------------

#[tokio::test]
async fn a_subscription_reconcile_active_branch_walked_lock_by_lock_takes_the_rendezvous_then_the_subscription_lock_then_the_pool_row()
 {
    let (t, s) = demo_with_stripe().await;
    let o = common::acts::community_org(&t, "Walked").await;
    let price = s.price(&t.db, product_id(&t, "Pro").await, "30").await;
    let stripe_price = s.stripe_price(&t.admin, price).await;
    let customer = s.customer(&t.db, o.organization_id, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &stripe_price, o.organization_id).await;
    let expected = [
        Expect::rendezvous_shared(),
        Expect::advisory(AdvisoryKey::Subscription(sub.to_string())),
        Expect::row("core.resource_pools", o.pool_id.0),
    ];
    let stripe = s.stripe.clone();
    let id = sub.clone();
    let out = LockWalk::run(&t, &RECONCILE, &expected, |db| async move {
        billing::reconcile_subscription(&db, &stripe, &id).await
    })
    .await;
    assert_eq!(converged(out.unwrap()), (SubscriptionStatus::Active, true));
    assert_eq!(hosting(&t, o.pool_id).await, "Pro", "the walk changed nothing of the path's outcome");
    assert_eq!(sites(&t, o.pool_id).await, Some(10));
    assert_eq!(traced_steps(&t, RECONCILE.path).await, [steps::RECONCILE_ACTIVE]);
}

#[tokio::test]
async fn a_subscription_reconcile_active_branch_ending_a_surplus_provision_walked_lock_by_lock_takes_the_same_three_locks_then_delivers_under_the_pool_row()
 {
    let p = paying("Basic").await;
    // The subscription switched to Pro in Stripe: the Basic provision is a surplus, Pro is missing.
    let item =
        p.s.get(&format!("/subscriptions/{}", p.sub)).await["items"]["data"][0]["id"].as_str().unwrap().to_string();
    let pro = p.s.stripe_price(&p.t.admin, p.pro).await;
    p.s.post(&format!("/subscriptions/{}", p.sub), &[("items[0][id]", &item), ("items[0][price]", pro.as_str())]).await;
    let (status, changed) = converged(p.walk_reconcile().await);
    assert_eq!((status, changed), (SubscriptionStatus::Active, true));
    assert_eq!(hosting(&p.t, p.pool).await, "Pro");
    let steps = traced_steps(&p.t, RECONCILE.path).await;
    assert_eq!(steps.first().map(String::as_str), Some(steps::RECONCILE_ACTIVE), "{steps:?}");
    assert!(
        steps.iter().any(|s| s == steps::DELIVER_DISPLACED_SUBSCRIPTIONS),
        "the surplus's end ran the delivery step under the pool row: {steps:?}"
    );
}

// 13: supersedeReleasedDowngrades -------------------------------------------------------------------

#[tokio::test]
async fn a_supersede_of_a_released_schedules_downgrades_walked_lock_by_lock_takes_the_subscription_lock_alone() {
    let p = paying("Pro").await;
    p.switch(p.basic).await;
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    // The period ends with a card that fails: the schedule reaches its last phase (spent) while the
    // subscription is past due, whose branch writes no ledger, so the reconcile's release of the
    // spent schedule leaves a change still marked ahead, which supersedeReleasedDowngrades settles
    // in a transaction of its own after the commit.
    p.card_fails().await;
    let period_end = p.s.get(&format!("/subscriptions/{}", p.sub)).await["items"]["data"][0]["current_period_end"]
        .as_i64()
        .unwrap_or(p.now + 31 * 86_400);
    p.s.advance(&p.clock, period_end.max(p.now + 31 * 86_400) + 3600).await;
    let expected = [p.subscription_lock()];
    let (stripe, sub) = (p.s.stripe.clone(), p.sub.clone());
    let out = LockWalk::run(&p.t, &reconcile::SUPERSEDE_RELEASED_DOWNGRADES_LOCKS, &expected, |db| async move {
        billing::reconcile_subscription(&db, &stripe, &sub).await
    })
    .await;
    assert_eq!(converged(out.unwrap()).0, SubscriptionStatus::PastDue);
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "superseded".into())]);
    let sub = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    assert!(sub["schedule"].is_null(), "the spent schedule was released: {sub}");
}

// 14: the ended branch ------------------------------------------------------------------------------

#[tokio::test]
async fn a_subscription_reconcile_ended_branch_walked_lock_by_lock_takes_the_rendezvous_then_the_subscription_lock_then_the_pool_row_before_its_reads()
 {
    let p = paying("Basic").await;
    p.s.delete(&format!("/subscriptions/{}", p.sub)).await;
    assert_eq!(converged(p.walk_reconcile().await), (SubscriptionStatus::Canceled, true));
    assert_eq!(hosting(&p.t, p.pool).await, "Free", "the floor is back");
    assert_eq!(sites(&p.t, p.pool).await, Some(1));
    // Again, with nothing left to end: the pool row is still taken, now the first take of it.
    assert_eq!(converged(p.walk_reconcile().await), (SubscriptionStatus::Canceled, false));
    assert_eq!(hosting(&p.t, p.pool).await, "Free");
    let steps = traced_steps(&p.t, RECONCILE.path).await;
    assert_eq!(steps.iter().filter(|s| *s == steps::RECONCILE_ENDED).count(), 2, "{steps:?}");
    assert!(!steps.iter().any(|s| s == steps::RECONCILE_ACTIVE || s == steps::RECONCILE_SUSPENDED), "{steps:?}");
}

// 15: the suspended branch --------------------------------------------------------------------------

#[tokio::test]
async fn a_subscription_reconcile_suspended_branch_walked_lock_by_lock_takes_the_rendezvous_then_the_subscription_lock_then_the_pool_row()
 {
    let p = paying("Pro").await;
    p.card_fails().await;
    p.s.advance(&p.clock, p.now + 32 * 86_400).await;
    assert_eq!(converged(p.walk_reconcile().await), (SubscriptionStatus::PastDue, true));
    assert_eq!(hosting(&p.t, p.pool).await, "Pro", "a suspended provision keeps its ladder");
    assert_eq!(sites(&p.t, p.pool).await, None, "but confers nothing");
    assert_eq!(traced_steps(&p.t, RECONCILE.path).await, [steps::RECONCILE_SUSPENDED]);
}

// 16: ApplySubscriptionCollection -------------------------------------------------------------------

#[tokio::test]
async fn an_apply_subscription_collection_walked_lock_by_lock_takes_the_reconciles_three_locks_then_pauses_collection_in_stripe_after_the_commit()
 {
    let p = paying("Basic").await;
    outbox_cleared(&p.t).await;
    // A grant displaces the subscription and asks the outbox for its reconcile.
    common::acts::grant(&p.t, p.org, product_id(&p.t, "Pro").await).await;
    assert_eq!(outbox_rows(&p.t).await.len(), 1);
    let expected = p.reconcile_order();
    let stripe = p.s.stripe.clone();
    // The walk by hand (as `LockWalk::run` does it), to look at Stripe while the locks are held.
    let mut w = LockWalk::start(&p.t, &RECONCILE, expected.len(), |db| async move {
        billing::process_outbox(&db, &stripe, 10, DEFAULT_LEASE).await
    })
    .await;
    for k in 1..=expected.len() {
        w.assert_holds_exactly(&expected[..k]).await;
        w.assert_probe_waits(&p.t, &expected[k - 1]).await;
        if k == expected.len() {
            assert_eq!(p.stripe_pause().await, (false, false), "no Stripe update while the reconcile holds its locks");
        }
        assert_eq!(w.step().await, k < expected.len(), "the reconcile took exactly the three locks");
    }
    assert_eq!(w.finish().await.unwrap(), outbox::Processed { done: 1, failed: 0 });
    assert_eq!(p.stripe_pause().await, (true, true), "the collection is paused in Stripe, with the console's mark");
    assert_eq!(
        traced_steps(&p.t, RECONCILE.path).await,
        [steps::APPLY_SUBSCRIPTION_COLLECTION, steps::RECONCILE_ACTIVE]
    );
}

// 17: the paused switch's backstop ------------------------------------------------------------------

#[tokio::test]
async fn a_paused_switchs_backstop_walked_takes_no_lock_and_commits_before_the_switch_reaches_stripe() {
    let p = paying("Basic").await;
    p.displaced_by_a_grant().await;
    let (db, stripe) = (&p.t.db, &p.s.stripe);
    let q = plan_changes::quote_switch(db, stripe, p.who, p.org, p.subscription_id, p.pro, None).await.unwrap();
    assert_eq!(q.kind, plan_changes::SwitchKind::Upgrade);
    let (stripe, who, org, id, pro) = (p.s.stripe.clone(), p.who, p.org, p.subscription_id, p.pro);
    let operation = q.operation.clone();
    let out = LockWalk::run(&p.t, &plan_changes::PAUSED_SWITCH_BACKSTOP_LOCKS, &[], |db| async move {
        plan_changes::switch_plan(&db, &stripe, who, org, id, pro, &operation).await
    })
    .await;
    assert_eq!(out.unwrap().kind, plan_changes::SwitchKind::Upgrade);
    let backstops = common::acts::scalar(
        &p.t,
        &format!(
            "SELECT count(*) FROM core.outbox WHERE subscription_id = {} AND payload->>'cause' = 'paused_switch_backstop'
               AND processed_at IS NULL AND due_at > now() + interval '3 minutes'",
            p.subscription_id
        ),
    )
    .await;
    assert_eq!(backstops, 1, "the backstop is written, due four minutes on");
    assert!(
        traced_paths(&p.t).await.iter().any(|n| n == plan_changes::PAUSED_SWITCH_BACKSTOP_LOCKS.path),
        "the backstop names itself in the trace"
    );
}

// 18: Resume plan ------------------------------------------------------------------------------------

#[tokio::test]
async fn a_resume_plan_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_and_no_subscription_lock() {
    let p = paying("Basic").await;
    p.displaced_by_a_grant().await;
    assert_eq!(hosting(&p.t, p.pool).await, "Pro");
    let expected = [Expect::rendezvous_shared(), p.pool_row()];
    let (who, org, id) = (p.who, p.org, p.subscription_id);
    let out = LockWalk::run(&p.t, &RESUME_SUBSCRIPTION_LOCKS, &expected, |db| async move {
        resume::resume_subscription(&db, who, org, id).await
    })
    .await;
    assert_eq!(out.unwrap(), 1);
    assert_eq!(hosting(&p.t, p.pool).await, "Basic", "the subscription's own tier is back over the grant");
}

// 30: invoiceReconcile.converge ---------------------------------------------------------------------

#[tokio::test]
async fn an_invoice_converge_walked_lock_by_lock_takes_the_invoice_lock_alone() {
    let p = paying("Basic").await;
    let inv =
        p.s.get(&format!("/invoices?subscription={}", p.sub)).await["data"][0]["id"].as_str().unwrap().to_string();
    let expected = [Expect::advisory(AdvisoryKey::Invoice(inv.clone()))];
    let (stripe, id) = (p.s.stripe.clone(), member_console::ids::StripeInvoiceId::from(inv.as_str()));
    let out = LockWalk::run(&p.t, &invoices::CONVERGE_INVOICE_LOCKS, &expected, |db| async move {
        billing::converge_invoice(&db, &stripe, &id).await
    })
    .await;
    assert_eq!(out.unwrap(), Converged::Written);
    let lines: i64 = p
        .t
        .one(sqlx::query_scalar("SELECT count(*) FROM billing.invoice_lines WHERE stripe_invoice_id = $1").bind(&inv))
        .await;
    assert_eq!(lines, 1);
}

// 31: catalogsync.Sync and its record -----------------------------------------------------------------

#[tokio::test]
async fn a_product_sync_walked_lock_by_lock_takes_the_products_sync_lock_alone_and_so_does_each_record_of_stripes_ids()
{
    let (t, s) = demo_with_stripe().await;
    let basic = product_id(&t, "Basic").await;
    let price = billing::set_price(&t.db, basic, &crate::common::stripe::new_price("month", "12", "eur").unwrap())
        .await
        .unwrap();
    outbox_cleared(&t).await;
    let expected = [Expect::advisory(AdvisoryKey::ProductSync(basic.to_string()))];
    // The operator's click.
    let out = LockWalk::run(&t, &catalog_sync::SYNC_PRODUCT_LOCKS, &expected, |db| async move {
        billing::sync_product(&db, basic).await
    })
    .await;
    assert_eq!(out.unwrap(), SyncAnswer::Enqueued { product: true, prices: 1 });
    assert_eq!(outbox_rows(&t).await.len(), 1, "one outbox row enqueued");
    // The outbox's pass makes the product and the price in Stripe; each id is recorded in a
    // transaction of its own under the product's sync lock (the first walked here).
    let stripe = s.stripe.clone();
    let out = LockWalk::run(&t, &catalog_sync::RECORD_PRODUCT_SYNC_LOCKS, &expected, |db| async move {
        billing::process_outbox(&db, &stripe, 10, DEFAULT_LEASE).await
    })
    .await;
    assert_eq!(out.unwrap(), outbox::Processed { done: 1, failed: 0 });
    let recorded: Option<String> =
        t.one(sqlx::query_scalar("SELECT stripe_price_id FROM billing.prices WHERE price_id = $1").bind(price)).await;
    assert!(recorded.is_some_and(|id| !id.is_empty()), "the price's Stripe id is recorded");
}

#[tokio::test]
async fn a_resync_of_a_price_stripe_lost_walked_lock_by_lock_takes_the_products_sync_lock_alone_for_each_record() {
    let (t, before) = demo_with_stripe().await;
    let basic = product_id(&t, "Basic").await;
    let price = before.price(&t.db, basic, "12").await;
    let lost = before.stripe_price(&t.admin, price).await;
    outbox_cleared(&t).await;
    // A Stripe that has none of it, as a test-mode account that was reset.
    let s = StripeFixture::start().await;
    let expected = [Expect::advisory(AdvisoryKey::ProductSync(basic.to_string()))];
    let stripe = s.stripe.clone();
    let gone = lost.clone();
    // The record path the sync uses: forgetting the lost ids is one of its records, so it takes
    // the same lock, alone, in a transaction of its own.
    let out = LockWalk::run(&t, &catalog_sync::RECORD_PRODUCT_SYNC_LOCKS, &expected, |db| async move {
        catalog_sync::resync_lost_price(&db, &stripe, basic, price, &gone).await
    })
    .await;
    let now = out.unwrap().expect("the price is in Stripe again");
    assert_ne!(now, lost);
    assert_eq!(s.get(&format!("/prices/{now}")).await["active"], true);
    let product: Option<String> = t
        .one(
            sqlx::query_scalar("SELECT stripe_product_id FROM billing.product_mappings WHERE product_id = $1")
                .bind(basic),
        )
        .await;
    assert_eq!(s.get(&format!("/products/{}", product.unwrap())).await["object"], "product");
}

// Set a price, and the outbox's claim ----------------------------------------------------------------

#[tokio::test]
async fn a_price_set_walked_lock_by_lock_takes_the_products_sync_lock_alone() {
    let (t, _s) = demo_with_stripe().await;
    let pro: ProductId = product_id(&t, "Pro").await;
    let expected = [Expect::advisory(AdvisoryKey::ProductSync(pro.to_string()))];
    let out = LockWalk::run(&t, &catalog_sync::SET_PRICE_LOCKS, &expected, |db| async move {
        billing::set_price(&db, pro, &crate::common::stripe::new_price("month", "30", "eur").unwrap()).await
    })
    .await;
    let price = out.unwrap();
    let active: bool =
        t.one(sqlx::query_scalar("SELECT active FROM billing.prices WHERE price_id = $1").bind(price)).await;
    assert!(active);
}

#[tokio::test]
async fn an_outbox_claim_walked_takes_its_row_skip_locked_and_a_second_processor_claims_the_next_row_without_waiting() {
    let (t, s) = demo_with_stripe().await;
    outbox_cleared(&t).await;
    // Two due rows: a sync of each of two products, priced.
    for (name, amount) in [("Basic", "12"), ("Pro", "30")] {
        let product = product_id(&t, name).await;
        billing::set_price(&t.db, product, &crate::common::stripe::new_price("month", amount, "eur").unwrap())
            .await
            .unwrap();
        billing::sync_product(&t.db, product).await.unwrap();
    }
    let rows = outbox_rows(&t).await;
    assert_eq!(rows.len(), 2);
    let stripe = s.stripe.clone();
    let mut w = LockWalk::start(&t, &outbox::CLAIM_OUTBOX_LOCKS, 1, |db| async move {
        billing::process_outbox(&db, &stripe, 1, DEFAULT_LEASE).await
    })
    .await;
    // Paused right after its claim: it holds the oldest row, and a probe of it waits.
    let first = Expect::row("core.outbox", rows[0].0);
    w.assert_holds_exactly(std::slice::from_ref(&first)).await;
    w.assert_probe_waits(&t, &first).await;
    // A second processor skips the held row: it claims the next one, and does its work, at once.
    let second = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        billing::process_outbox(&t.db, &s.stripe, 1, DEFAULT_LEASE),
    )
    .await
    .expect("the second claimer never waits on the first");
    assert_eq!(second.unwrap(), outbox::Processed { done: 1, failed: 0 });
    assert_eq!(outbox_rows(&t).await, [rows[0]], "the second processor took the other row");
    assert!(!w.step().await, "the claim took no further lock");
    assert_eq!(w.finish().await.unwrap(), outbox::Processed { done: 1, failed: 0 });
    assert!(outbox_rows(&t).await.is_empty());
}
