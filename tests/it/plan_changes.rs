//! Billing II's plan changes against the Stripe stand-in: an upgrade quoted, then applied and
//! charged at once; a downgrade scheduled to the period's end, undone, scheduled again and
//! applied when a test clock crosses the period; cancel at period end and its undo; the requests
//! a member must not be able to make; supersedeReleasedDowngrades' lock; and the pages.

use crate::common;

use chrono::{DateTime, Utc};
use common::{
    TestApp, TestDb,
    locks::Expect,
    pages::{Answer, Session},
    stripe::StripeFixture,
};
use member_console::{
    db::keys::AdvisoryKey,
    demo,
    ids::{AccountId, LadderId, OrganizationId, PoolId, PriceId, SubscriptionId},
    services::{
        ServiceError,
        billing::{
            self,
            plan_changes::{self, SwitchKind},
        },
    },
};

/// The demo member's organization, paying for `product` monthly on a test clock frozen at `now`.
struct Paying {
    t: TestDb,
    s: StripeFixture,
    who: AccountId,
    org: OrganizationId,
    pool: PoolId,
    clock: String,
    now: i64,
    sub: member_console::ids::StripeSubscriptionId,
    subscription_id: SubscriptionId,
    basic: PriceId,
    pro: PriceId,
}

async fn paying(product: &str) -> Paying {
    let (t, s) = common::stripe::demo_with_stripe().await;
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
    Paying { t, s, who, org, pool, clock, now, sub, subscription_id, basic, pro }
}

impl Paying {
    async fn hosting(&self) -> String {
        common::acts::hosting(&self.t, self.pool).await
    }

    /// The ledger's rows: (from, to, state).
    async fn ledger(&self) -> Vec<(String, String, String)> {
        self.t.all(sqlx::query_as(
            "SELECT f.name, p.name, c.state FROM core.scheduled_changes c
             JOIN core.products f ON f.product_id = c.from_product_id JOIN core.products p ON p.product_id = c.to_product_id
             WHERE c.subscription_id = $1 ORDER BY c.scheduled_change_id",
        )
        .bind(self.subscription_id)).await
    }

    async fn quote(&self, price: PriceId) -> Result<plan_changes::SwitchQuote, ServiceError> {
        plan_changes::quote_switch(&self.t.db, &self.s.stripe, self.who, self.org, self.subscription_id, price, None)
            .await
    }

    /// Quote a switch and confirm it, as a member does.
    async fn switch(&self, price: PriceId) -> Result<plan_changes::SwitchQuote, ServiceError> {
        let q = self.quote(price).await?;
        self.confirm(price, q.operation.as_str()).await
    }

    async fn confirm(&self, price: PriceId, operation: &str) -> Result<plan_changes::SwitchQuote, ServiceError> {
        let (db, stripe) = (&self.t.db, &self.s.stripe);
        let operation = plan_changes::QuoteId::parse(operation).unwrap();
        plan_changes::switch_plan(db, stripe, self.who, self.org, self.subscription_id, price, &operation).await
    }

    async fn ladder(&self) -> LadderId {
        LadderId(common::acts::id_by_name(&self.t, "plan_ladders", "plan_ladder_id", "Wiki hosting").await)
    }

    async fn undo(&self) -> Result<String, ServiceError> {
        let ladder = self.ladder().await;
        plan_changes::undo_switch(&self.t.db, &self.s.stripe, self.who, self.org, self.subscription_id, ladder).await
    }

    async fn cancel(&self, cancel: bool) -> Result<Option<DateTime<Utc>>, ServiceError> {
        let (db, stripe) = (&self.t.db, &self.s.stripe);
        plan_changes::cancel_at_period_end(db, stripe, self.who, self.org, self.subscription_id, cancel).await
    }

    /// The stand-in's invoices of the subscription made by a change (not a renewal or the first).
    async fn update_invoices(&self) -> Vec<serde_json::Value> {
        let list = self.s.get(&format!("/invoices?subscription={}&limit=100", self.sub)).await;
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["billing_reason"] == "subscription_update")
            .cloned()
            .collect()
    }
}

fn refused(r: Result<impl std::fmt::Debug, ServiceError>, words: &str) {
    match r {
        Err(ServiceError::Refused(m)) => assert!(m.contains(words), "expected “{words}” in: {m}"),
        other => panic!("expected a refusal saying “{words}”, got {other:?}"),
    }
}

#[tokio::test]
async fn an_upgrade_is_quoted_then_applied_at_once_and_a_second_confirmation_charges_nothing_more() {
    let p = paying("Basic").await;
    assert_eq!(p.hosting().await, "Basic");
    // Halfway through the month: the difference for half a period.
    p.s.advance(&p.clock, p.now + 15 * 86_400).await;
    let q = p.quote(p.pro).await.unwrap();
    assert_eq!((q.kind, q.from.as_str(), q.to.as_str()), (SwitchKind::Upgrade, "Basic", "Pro"));
    let charge = q.charge.clone().expect("an upgrade's charge is previewed");
    assert_eq!(charge.currency, "eur");
    assert!(charge.amount_due > 0 && charge.amount_due < 1800, "about half of 18.00: {charge:?}");
    assert!(p.update_invoices().await.is_empty(), "a preview charges nothing");
    p.confirm(p.pro, q.operation.as_str()).await.unwrap();
    assert_eq!(p.hosting().await, "Pro", "the new tier is in force at once");
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(10));
    let invoices = p.update_invoices().await;
    assert_eq!(invoices.len(), 1, "{invoices:?}");
    assert_eq!(invoices[0]["amount_paid"].as_i64(), Some(charge.amount_due), "charged what was shown");
    // The same confirmation again (a second tab, a double click): the plan is Pro already.
    refused(p.confirm(p.pro, q.operation.as_str()).await, "already the plan");
    assert_eq!(p.update_invoices().await.len(), 1, "charged once");
}

#[tokio::test]
async fn a_confirmation_needs_its_own_fresh_quote_and_otherwise_changes_nothing() {
    let p = paying("Basic").await;
    let q = p.quote(p.pro).await.unwrap();
    // Another price, made up ids, and no id at all: not a quote of this switch.
    for (price, operation) in
        [(p.basic, q.operation.as_str()), (p.pro, "0123456789abcdef0123456789abcdef"), (p.pro, "")]
    {
        refused(p.confirm(price, operation).await, "not one the billing page made");
    }
    // Another member's quote of this subscription is not this member's.
    let operator = AccountId(common::pages::account_id(&p.t, demo::OPERATOR_EMAIL).await);
    let e = plan_changes::switch_plan(&p.t.db, &p.s.stripe, operator, p.org, p.subscription_id, p.pro, &q.operation)
        .await
        .unwrap_err();
    assert!(matches!(e, ServiceError::Refused(_) | ServiceError::NotFound(_)), "{e:?}");
    // A quote older than its window.
    p.t.run(
        sqlx::query("UPDATE billing.switch_quotes SET quoted_at = now() - interval '16 minutes' WHERE operation = $1")
            .bind(q.operation.as_str()),
    )
    .await;
    refused(p.confirm(p.pro, q.operation.as_str()).await, "more than 15 minutes old");
    assert_eq!(p.hosting().await, "Basic");
    assert!(p.update_invoices().await.is_empty());
}

#[tokio::test]
async fn a_downgrade_waits_for_the_period_end_can_be_undone_and_once_scheduled_again_applies_then() {
    let p = paying("Pro").await;
    let q = p.quote(p.basic).await.unwrap();
    assert_eq!(q.kind, SwitchKind::Downgrade);
    assert!(q.charge.is_none(), "nothing is charged for a downgrade");
    let period_end = q.effective_at.timestamp();
    assert!(period_end > p.now + 27 * 86_400, "at the period's end: {}", q.effective_at);
    p.switch(p.basic).await.unwrap();
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    assert_eq!(p.hosting().await, "Pro", "Pro until the period ends");
    refused(p.switch(p.basic).await, "already scheduled");
    refused(p.cancel(true).await, "undo it first");

    assert_eq!(p.undo().await.unwrap(), "Pro");
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "superseded".into())]);
    let sub = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    assert!(sub["schedule"].is_null(), "nothing else was ahead: the schedule is released");
    refused(p.undo().await, "No change is scheduled");

    p.switch(p.basic).await.unwrap();
    assert_eq!(p.ledger().await.last().unwrap().2, "scheduled");
    p.s.advance(&p.clock, period_end + 3600).await;
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    assert_eq!(p.ledger().await.last().unwrap().2, "applied");
    assert_eq!(p.hosting().await, "Basic");
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(3));
    // The schedule, spent, was released after the reconcile: the subscription is free to change.
    let sub = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    assert!(sub["schedule"].is_null(), "{sub}");
    assert_eq!(p.quote(p.pro).await.unwrap().kind, SwitchKind::Upgrade);
}

#[tokio::test]
async fn cancel_at_period_end_is_undoable_and_blocks_a_switch_until_then() {
    let p = paying("Basic").await;
    let end = p.cancel(true).await.unwrap();
    assert!(end.is_some());
    let flag = |p: &Paying| {
        let admin = p.t.admin.clone();
        let id = p.subscription_id;
        async move {
            sqlx::query_scalar::<_, bool>(
                "SELECT cancel_at_period_end FROM core.subscriptions WHERE subscription_id = $1",
            )
            .bind(id)
            .fetch_one(&admin)
            .await
            .unwrap()
        }
    };
    assert!(flag(&p).await, "the console knows at once");
    refused(p.cancel(true).await, "already ends");
    refused(p.quote(p.pro).await, "keep it first");
    assert_eq!(p.hosting().await, "Basic", "nothing changes before the period ends");
    p.cancel(false).await.unwrap();
    assert!(!flag(&p).await);
    refused(p.cancel(false).await, "is not set to end");
    assert_eq!(p.quote(p.pro).await.unwrap().kind, SwitchKind::Upgrade);
}

#[tokio::test]
async fn a_switch_a_member_must_not_make_is_refused_before_stripe_is_asked() {
    let p = paying("Basic").await;
    refused(p.quote(p.basic).await, "already the plan");
    refused(p.confirm(p.pro, "").await, "not one the billing page made");
    // A yearly price of Pro: a switch keeps the interval.
    let yearly = billing::set_price(
        &p.t.db,
        common::acts::product_id(&p.t, "Pro").await,
        &crate::common::stripe::new_price("year", "300", "eur").unwrap(),
    )
    .await
    .unwrap();
    billing::sync_product(&p.t.db, common::acts::product_id(&p.t, "Pro").await).await.unwrap();
    billing::apply_product_sync(&p.t.db, &p.s.stripe, common::acts::product_id(&p.t, "Pro").await, "yearly")
        .await
        .unwrap();
    refused(p.quote(yearly).await, "keeps the billing interval");
    // A product that is no tier at all, with a price of its own.
    let extra = common::acts::new_product(&p.t, "Storage add-on", 0).await;
    let extra_price = p.s.price(&p.t.db, extra, "5").await;
    refused(p.quote(extra_price).await, "not on sale");
    // Another organization's subscription, and a price that does not exist: nothing to see.
    let (db, stripe) = (&p.t.db, &p.s.stripe);
    let other = common::acts::community_org(&p.t, "Others").await;
    let e = plan_changes::quote_switch(db, stripe, p.who, other.organization_id, p.subscription_id, p.pro, None).await;
    assert!(matches!(e, Err(ServiceError::NotFound(_))), "{e:?}");
    assert!(matches!(p.quote(PriceId(999_999)).await, Err(ServiceError::NotFound(_))));
    // Stripe failing: the member is told, nothing changes.
    p.s.control("/faults", &[("path_prefix", "/v1/subscriptions"), ("status", "500"), ("times", "1")]).await;
    let e = p.switch(p.pro).await.unwrap_err();
    assert!(matches!(e, ServiceError::Remote { .. }), "{e:?}");
    assert_eq!(p.hosting().await, "Basic");
    assert!(p.update_invoices().await.is_empty());
}

#[tokio::test]
async fn an_upgrade_whose_charge_fails_changes_nothing_and_says_why() {
    let p = paying("Basic").await;
    // The card on file now fails every charge.
    let customer = p.s.get(&format!("/subscriptions/{}", p.sub)).await["customer"].as_str().unwrap().to_string();
    p.s.post(
        &format!("/customers/{customer}"),
        &[
            ("payment_method", "pm_card_chargeCustomerFail"),
            ("invoice_settings[default_payment_method]", "pm_card_chargeCustomerFail"),
        ],
    )
    .await;
    refused(p.switch(p.pro).await, "The plan is unchanged and nothing was charged");
    assert_eq!(p.hosting().await, "Basic");
    let sub = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    assert_eq!(sub["status"], "active", "{sub}");
}

impl Paying {
    /// The member on the billing page, in a console of its own pointed at the test's stand-in.
    async fn member(&self) -> Session {
        let app = TestApp::spawn_with_stripe(&self.t, self.s.stripe.clone()).await;
        Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await
    }

    /// Make the subscription charge `pm` from now on, as a member's card change in Stripe does.
    async fn pay_with(&self, pm: &str) {
        self.s.post(&format!("/subscriptions/{}", self.sub), &[("default_payment_method", pm)]).await;
    }

    /// The subscription's reconciles waiting in the job queue (a webhook's, the sweep's, a change's).
    async fn queued_reconciles(&self) -> i64 {
        common::acts::scalar(
            &self.t,
            &format!(
                "SELECT count(*) FROM integration.jobs WHERE kind = 'reconcile_subscription' AND state = 'pending'
                   AND payload->>'object_key' = 'stripe-subscription:{}'",
                self.sub
            ),
        )
        .await
    }
}

#[tokio::test]
async fn a_declined_card_is_a_refusal_saying_nothing_changed_and_its_confirmation_is_used_up() {
    let p = paying("Basic").await;
    p.pay_with("pm_card_chargeCustomerFail").await;
    let member = p.member().await;
    let (org, sub, pro) = (p.org.to_string(), p.subscription_id.to_string(), p.pro.to_string());
    let fields = [("organization_id", org.as_str()), ("subscription_id", sub.as_str()), ("price_id", pro.as_str())];
    let quote = member.post("/billing/switch", &fields, false).await;
    assert_eq!(quote.status, 200, "{}", quote.body);
    let declined = confirm_quote(&member, &fields, &quote).await;
    assert_eq!(declined.status, 409, "{}", declined.body);
    assert!(declined.body.contains("The plan is unchanged and nothing was charged"), "{}", declined.body);
    assert!(declined.body.contains("pay with another card, then choose Switch again"), "{}", declined.body);
    assert!(!declined.body.contains("did not answer"), "a refusal, not an outage: {}", declined.body);
    assert_eq!(p.hosting().await, "Basic");
    assert!(p.update_invoices().await.iter().all(|i| i["status"] != "paid"), "nothing was charged");
    // The card works again; the same confirmation does not replay Stripe's stored decline.
    p.pay_with("pm_card_visa").await;
    let again = confirm_quote(&member, &fields, &quote).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("switch again from the billing page"), "{}", again.body);
    assert!(!again.body.contains("declined"), "{}", again.body);
    // A new quote is a new operation, and goes through.
    let quote = member.post("/billing/switch", &fields, false).await;
    let done = confirm_quote(&member, &fields, &quote).await;
    assert_eq!(done.header("location"), Some("/billing?changed=upgraded"), "{}", done.body);
    assert_eq!(p.hosting().await, "Pro");
}

#[tokio::test]
async fn a_switch_stripe_did_not_answer_says_the_outcome_is_unknown_and_queues_the_reconcile() {
    let p = paying("Basic").await;
    let q = p.quote(p.pro).await.unwrap();
    // The write fails on Stripe's side (the read before it goes through).
    p.s.control(
        "/faults",
        &[
            ("path_prefix", &format!("/v1/subscriptions/{}", p.sub)),
            ("method", "POST"),
            ("status", "500"),
            ("times", "1"),
        ],
    )
    .await;
    let before = p.queued_reconciles().await;
    let member = p.member().await;
    let (org, sub, pro) = (p.org.to_string(), p.subscription_id.to_string(), p.pro.to_string());
    let fields = [
        ("organization_id", org.as_str()),
        ("subscription_id", sub.as_str()),
        ("price_id", pro.as_str()),
        ("confirm", "1"),
        ("operation", q.operation.as_str()),
    ];
    let a = member.post("/billing/switch", &fields, false).await;
    assert_eq!(a.status, 503, "{}", a.body);
    assert!(a.body.contains("could not confirm whether Stripe made this change"), "{}", a.body);
    assert!(!a.body.contains("Nothing was charged"), "it cannot know: {}", a.body);
    assert_eq!(p.queued_reconciles().await, before + 1, "the console converges on what Stripe holds");
}

#[tokio::test]
async fn a_price_stripe_stopped_selling_is_a_refusal_naming_the_tier() {
    let p = paying("Basic").await;
    let q = p.quote(p.pro).await.unwrap();
    // Archived in Stripe's dashboard after the page was drawn.
    let price = p.s.stripe_price(&p.t.admin, p.pro).await;
    p.s.post(&format!("/prices/{price}"), &[("active", "false")]).await;
    refused(
        p.confirm(p.pro, q.operation.as_str()).await,
        "Pro at this price is no longer sold. Reload the billing page",
    );
    assert_eq!(p.hosting().await, "Basic");
    refused(p.confirm(p.pro, q.operation.as_str()).await, "switch again from the billing page");
}

#[tokio::test]
async fn after_a_price_change_the_old_prices_seats_still_change_and_its_downgrade_is_refused_before_stripe() {
    let p = paying("Pro").await;
    let pro = common::acts::product_id(&p.t, "Pro").await;
    member_console::services::catalog::set_product_seats(&p.t.db, pro, seats("5")).await.unwrap();
    // The operator raises Pro to 35 a month: a new price, the old one archived in Stripe.
    let new_pro = p.s.price(&p.t.db, pro, "35").await;
    assert_ne!(new_pro, p.pro);
    let old = p.s.stripe_price(&p.t.admin, p.pro).await;
    assert_eq!(p.s.get(&format!("/prices/{old}")).await["active"], false);
    // The seat form names the subscription's own (old) price: more seats go through on it.
    let q = plan_changes::quote_switch(&p.t.db, &p.s.stripe, p.who, p.org, p.subscription_id, p.pro, Some(3))
        .await
        .unwrap();
    assert_eq!(q.kind, SwitchKind::MoreSeats);
    p.confirm(p.pro, q.operation.as_str()).await.unwrap();
    let item = &p.s.get(&format!("/subscriptions/{}", p.sub)).await["items"]["data"][0];
    assert_eq!((item["quantity"].as_i64(), item["price"]["id"].as_str()), (Some(3), Some(old.as_str())));
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(30));
    // A downgrade would need the old price in a schedule: refused before Stripe, nothing written.
    let down = plan_changes::quote_switch(&p.t.db, &p.s.stripe, p.who, p.org, p.subscription_id, p.basic, Some(1));
    refused(down.await, "no longer sold, so Stripe cannot schedule the switch to Basic");
    assert!(p.s.get(&format!("/subscriptions/{}", p.sub)).await["schedule"].is_null());
    assert!(p.ledger().await.is_empty());
}

#[tokio::test]
async fn confirming_a_scheduled_downgrade_twice_answers_as_the_first_did() {
    let p = paying("Pro").await;
    let q = p.quote(p.basic).await.unwrap();
    assert_eq!(p.confirm(p.basic, q.operation.as_str()).await.unwrap().kind, SwitchKind::Downgrade);
    let again = p.confirm(p.basic, q.operation.as_str()).await.unwrap();
    assert_eq!((again.kind, again.to.as_str()), (SwitchKind::Downgrade, "Basic"));
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    // Over HTTP, the double click lands where the first did.
    let member = p.member().await;
    let (org, sub, basic) = (p.org.to_string(), p.subscription_id.to_string(), p.basic.to_string());
    let fields = [
        ("organization_id", org.as_str()),
        ("subscription_id", sub.as_str()),
        ("price_id", basic.as_str()),
        ("confirm", "1"),
        ("operation", q.operation.as_str()),
    ];
    let a = member.post("/billing/switch", &fields, false).await;
    assert_eq!(a.header("location"), Some("/billing?changed=scheduled"), "{}", a.body);
}

#[tokio::test]
async fn a_downgrade_confirmed_from_another_tab_is_refused_as_already_scheduled_not_answered_as_done() {
    let p = paying("Pro").await;
    let stale = p.quote(p.basic).await.unwrap();
    let fresh = p.quote(p.basic).await.unwrap();
    assert_eq!(p.confirm(p.basic, fresh.operation.as_str()).await.unwrap().kind, SwitchKind::Downgrade);
    let e = p.confirm(p.basic, stale.operation.as_str()).await.unwrap_err().to_string();
    assert!(e.contains("already scheduled"), "the other tab's quote did not make the change: {e}");
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "scheduled".into())]);
    // The quote that made it is still answered as done.
    assert_eq!(p.confirm(p.basic, fresh.operation.as_str()).await.unwrap().kind, SwitchKind::Downgrade);
}

#[tokio::test]
async fn superseding_a_released_schedules_changes_waits_on_a_reconcile_holding_the_subscription_lock() {
    let p = paying("Pro").await;
    p.switch(p.basic).await.unwrap();
    let schedule: member_console::ids::StripeScheduleId = p.t.one(sqlx::query_scalar(
        "SELECT stripe_schedule_id FROM core.scheduled_changes WHERE subscription_id = $1 AND state = 'scheduled'",
    )
    .bind(p.subscription_id)).await;
    // A reconcile paused on the periods: it holds the rendezvous and the subscription's lock.
    let (mut pause, pause_pid) =
        common::hold_open(&p.t, "LOCK TABLE core.subscription_periods IN ACCESS EXCLUSIVE MODE").await;
    let (db, stripe, id) = (p.t.db.clone(), p.s.stripe.clone(), p.sub.clone());
    let reconcile = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &id).await });
    let reconcile_pid = common::wait_for_waiter(&p.t.admin, &p.t.name, pause_pid).await;
    let (db, id, sub, sched) = (p.t.db.clone(), p.subscription_id, p.sub.clone(), schedule.clone());
    let supersede =
        tokio::spawn(async move { billing::reconcile::supersede_released_downgrades(&db, id, &sub, &sched).await });
    let waiter = common::wait_for_waiter(&p.t.admin, &p.t.name, reconcile_pid).await;
    assert!(waiter > 0, "supersedeReleasedDowngrades waits on the reconcile's subscription lock");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    reconcile.await.unwrap().unwrap();
    assert_eq!(supersede.await.unwrap().unwrap(), 1, "it finds the row the reconcile left scheduled");
    assert_eq!(p.ledger().await, [("Pro".into(), "Basic".into(), "superseded".into())]);
}

/// Confirm a quote from the billing page as its form does: the same fields, with `confirm` and
/// the quote's `operation`.
async fn confirm_quote(member: &Session, fields: &[(&str, &str)], quote: &Answer) -> Answer {
    let marker = "name=\"operation\" value=\"";
    let operation =
        quote.body.split(marker).nth(1).map(|r| r.split('"').next().unwrap()).expect("the quote's operation");
    let mut confirm = fields.to_vec();
    confirm.push(("confirm", "1"));
    confirm.push(("operation", operation));
    member.post("/billing/switch", &confirm, false).await
}

#[tokio::test]
async fn a_member_switches_and_cancels_from_the_billing_page() {
    let p = paying("Basic").await;
    let app = TestApp::spawn_with_stripe(&p.t, p.s.stripe.clone()).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/billing").await;
    assert!(page.body.contains("Switch to Pro"), "{}", page.body);
    let (org, sub, pro) = (p.org.to_string(), p.subscription_id.to_string(), p.pro.to_string());
    let fields = [("organization_id", org.as_str()), ("subscription_id", sub.as_str()), ("price_id", pro.as_str())];
    let quote = member.post("/billing/switch", &fields, false).await;
    assert_eq!(quote.status, 200, "{}", quote.body);
    assert!(quote.body.contains("You will be charged") && quote.body.contains("Switch now and pay"), "{}", quote.body);
    assert_eq!(p.hosting().await, "Basic", "a quote changes nothing");
    let done = confirm_quote(&member, &fields, &quote).await;
    assert_eq!(done.header("location"), Some("/billing?changed=upgraded"), "{}", done.body);
    assert_eq!(p.hosting().await, "Pro");

    let basic = p.basic.to_string();
    let down = [("organization_id", org.as_str()), ("subscription_id", sub.as_str()), ("price_id", basic.as_str())];
    let quote = member.post("/billing/switch", &down, false).await;
    assert!(quote.body.contains("You keep Pro until") && quote.body.contains("Schedule the switch"), "{}", quote.body);
    let done = confirm_quote(&member, &down, &quote).await;
    assert_eq!(done.header("location"), Some("/billing?changed=scheduled"), "{}", done.body);
    let page = member.get("/billing?changed=scheduled").await;
    assert!(page.body.contains("Pro until ") && page.body.contains(", then Basic"), "{}", page.body);
    let ladder = p.ladder().await.to_string();
    let undo = [("organization_id", org.as_str()), ("subscription_id", sub.as_str()), ("ladder_id", ladder.as_str())];
    let done = member.post("/billing/switch/undo", &undo, false).await;
    assert_eq!(done.header("location"), Some("/billing?changed=undone"), "{}", done.body);

    let cancel = [("organization_id", org.as_str()), ("subscription_id", sub.as_str())];
    let done = member.post("/billing/cancel", &cancel, false).await;
    assert_eq!(done.header("location"), Some("/billing?changed=canceling"), "{}", done.body);
    let page = member.get("/billing").await;
    assert!(page.body.contains("ends at period end") && page.body.contains("Keep the plan"), "{}", page.body);
    // Switching now is refused with the reason, and nothing changes.
    let again = member.post("/billing/switch", &fields, false).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("keep it first"), "{}", again.body);
    // Someone else's subscription id is nothing at all.
    let foreign = [("organization_id", org.as_str()), ("subscription_id", "999999"), ("price_id", pro.as_str())];
    assert_eq!(member.post("/billing/switch", &foreign, false).await.status, 404);
    let bad = [("organization_id", org.as_str()), ("subscription_id", "x"), ("price_id", pro.as_str())];
    assert_eq!(member.post("/billing/switch", &bad, false).await.status, 400);
}

// The collection pause, Resume plan and the paused switch ----------------------------------------------

impl Paying {
    /// The stand-in's subscription: (pause_collection set, the console's mark in its metadata).
    async fn stripe_pause(&self) -> (bool, bool) {
        let sub = self.s.get(&format!("/subscriptions/{}", self.sub)).await;
        (!sub["pause_collection"].is_null(), sub["metadata"]["console_pause"] == "displaced")
    }

    /// Run the outbox until nothing is due, as the processor's schedule does.
    async fn drain_outbox(&self) {
        for _ in 0..5 {
            if billing::process_outbox(&self.t.db, &self.s.stripe, 50, member_console::jobs::DEFAULT_LEASE)
                .await
                .unwrap()
                .done
                == 0
            {
                return;
            }
        }
    }

    async fn resume(&self) -> Result<i32, ServiceError> {
        billing::resume::resume_subscription(&self.t.db, self.who, self.org, self.subscription_id).await
    }

    async fn grant_status(&self, grant: member_console::ids::GrantId) -> String {
        common::acts::grant_status(&self.t, grant).await
    }
}

#[tokio::test]
async fn a_grant_displacing_the_subscription_pauses_its_collection_and_resume_plan_brings_the_plan_and_payments_back() {
    let p = paying("Basic").await;
    let grant = common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    assert_eq!(p.hosting().await, "Pro");
    // The grant asked for the subscription's reconcile; the outbox's reconcile finds it displaced
    // on every ladder and pauses its collection in Stripe, with the console's mark.
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true));
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true), "agreed: nothing more to do");
    // The member reads why.
    let home = member_console::services::reads::member_home(&p.t.db, p.who).await.unwrap();
    let displaced = &home.iter().find(|o| o.membership.organization_id == p.org).unwrap().displaced;
    assert_eq!(displaced.len(), 1);
    assert!(displaced[0].granted && displaced[0].by == "Pro" && displaced[0].product == "Basic", "{displaced:?}");

    // Resume plan: the subscription's tier over the grant, then the outbox resumes collection.
    assert_eq!(p.resume().await.unwrap(), 1);
    assert_eq!(p.hosting().await, "Basic");
    assert_eq!(p.grant_status(grant).await, "replaced", "the grant waits behind the subscription");
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (false, false));
    let (_, changed) = match billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap() {
        billing::Reconciled::Converged { status, changed, .. } => (status, changed),
        other => panic!("{other:?}"),
    };
    assert!(!changed, "the reconcile finds the resumed provision as Stripe has it");
    refused(p.resume().await, "Nothing displaces this subscription");
    // Another organization's subscription, through this organization or its own: nothing to see.
    let other = common::acts::community_org(&p.t, "Others").await;
    let e = billing::resume::resume_subscription(&p.t.db, p.who, other.organization_id, p.subscription_id).await;
    assert!(matches!(e, Err(ServiceError::NotFound(_))), "{e:?}");
    // The subscription ends: the grant comes back.
    p.s.delete(&format!("/subscriptions/{}", p.sub)).await;
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    assert_eq!(p.hosting().await, "Pro");
    assert_eq!(p.grant_status(grant).await, "active");
}

#[tokio::test]
async fn a_grant_ending_delivers_the_subscription_back_and_its_collection_resumes() {
    let p = paying("Basic").await;
    let grant = common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true));
    member_console::services::grants::revoke_grant(
        &p.t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("over").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(p.hosting().await, "Basic");
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (false, false));
    // A pause the console did not make is not the console's to lift, nor to refuse a switch for
    // without saying so.
    p.s.post(&format!("/subscriptions/{}", p.sub), &[("pause_collection[behavior]", "void")]).await;
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, false));
    refused(p.quote(p.pro).await, "paused in Stripe");
}

#[tokio::test]
async fn a_resume_waits_for_nothing_a_reconcile_holds_but_the_reconcile_waits_on_its_pool_row_and_writes_nothing() {
    let p = paying("Basic").await;
    common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    p.drain_outbox().await;
    // The resume, paused at its materialization: it holds the rendezvous (shared) and the pool row.
    let (mut pause, pause_pid) =
        common::hold_open(&p.t, "LOCK TABLE core.pool_entitlements IN ACCESS EXCLUSIVE MODE").await;
    let (db, who, org, id) = (p.t.db.clone(), p.who, p.org, p.subscription_id);
    let resume = tokio::spawn(async move { billing::resume::resume_subscription(&db, who, org, id).await });
    let resume_pid = common::wait_for_waiter(&p.t.admin, &p.t.name, pause_pid).await;
    let pool_row = Expect::row("core.resource_pools", p.pool.0);
    common::locks::assert_holds(&p.t.admin, resume_pid, &[Expect::rendezvous_shared(), pool_row.clone()]).await;
    // A reconcile of the subscription takes the rendezvous (shared) and the subscription's lock,
    // which the resume does not hold, and waits on the pool row.
    let (db, stripe, sub) = (p.t.db.clone(), p.s.stripe.clone(), p.sub.clone());
    let reconcile = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &sub).await });
    let reconcile_pid = common::wait_for_waiter(&p.t.admin, &p.t.name, resume_pid).await;
    let subscription = Expect::advisory(AdvisoryKey::Subscription(p.sub.to_string()));
    common::locks::assert_holds(&p.t.admin, reconcile_pid, &[Expect::rendezvous_shared(), subscription]).await;
    common::locks::assert_waits(&p.t.admin, reconcile_pid, resume_pid, &pool_row).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(resume.await.unwrap().unwrap(), 1);
    match reconcile.await.unwrap().unwrap() {
        billing::Reconciled::Converged { changed, .. } => {
            assert!(!changed, "it finds the conferred provision live and writes nothing")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.hosting().await, "Basic");
}

impl Paying {
    /// The subscription's provisions still holding their ladders.
    async fn live_provisions(&self) -> i64 {
        common::acts::scalar(
            &self.t,
            &format!(
                "SELECT count(*) FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
                  WHERE i.subscription_id = {} AND c.state = 'holding'",
                self.subscription_id
            ),
        )
        .await
    }

    /// The subscription's unprocessed reconcile rows in the outbox: (claimed, unclaimed).
    async fn reconcile_rows(&self) -> (i64, i64) {
        self.t
            .one(
                sqlx::query_as(
                    "SELECT count(*) FILTER (WHERE claimed_until IS NOT NULL), count(*) FILTER (WHERE claimed_until IS NULL)
                       FROM core.outbox
                      WHERE subscription_id = $1 AND kind = 'reconcile_subscription' AND processed_at IS NULL",
                )
                .bind(self.subscription_id),
            )
            .await
    }

    /// A processor's claim of every due outbox row (as `process_outbox` claims, one statement),
    /// committed: the rows are in flight until marked. Their ids.
    async fn claim_all(&self) -> Vec<member_console::ids::OutboxId> {
        let mut tx = member_console::db::begin(&self.t.db, member_console::db::TxKind::Plain).await.unwrap();
        let rows = member_console::store::billing::claim_outbox(tx.conn(), 100, 30.0).await.unwrap();
        tx.commit().await.unwrap();
        rows.into_iter().map(|r| r.outbox_id).collect()
    }

    async fn mark_done(&self, rows: &[member_console::ids::OutboxId]) {
        let mut tx = member_console::db::begin(&self.t.db, member_console::db::TxKind::Plain).await.unwrap();
        for row in rows {
            member_console::store::billing::outbox_done(tx.conn(), *row).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
}

/// Issue 36, defect 2: the ended branch read the live provisions before its first pool-row lock,
/// so a Resume plan holding that row conferred the subscription's tier unseen and the reconcile
/// committed "canceled" over a live provision. It now reads them under the row.
#[tokio::test]
async fn a_cancellation_reconciled_while_resume_plan_holds_the_pool_row_ends_what_the_resume_conferred() {
    let p = paying("Basic").await;
    let grant = common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    p.drain_outbox().await;
    assert_eq!((p.hosting().await, p.live_provisions().await), ("Pro".to_string(), 0), "the grant displaces Basic");
    // Stripe ends the subscription; its reconcile has not run yet.
    p.s.delete(&format!("/subscriptions/{}", p.sub)).await;
    // Resume plan, paused at its materialization: it holds the pool row and has conferred Basic
    // over the grant (uncommitted).
    let (mut pause, pause_pid) =
        common::hold_open(&p.t, "LOCK TABLE core.pool_entitlements IN ACCESS EXCLUSIVE MODE").await;
    let (db, who, org, id) = (p.t.db.clone(), p.who, p.org, p.subscription_id);
    let resume = tokio::spawn(async move { billing::resume::resume_subscription(&db, who, org, id).await });
    let resume_pid = common::wait_for_waiter(&p.t.admin, &p.t.name, pause_pid).await;
    let pool_row = Expect::row("core.resource_pools", p.pool.0);
    common::locks::assert_holds(&p.t.admin, resume_pid, &[Expect::rendezvous_shared(), pool_row.clone()]).await;
    // The cancellation's reconcile (the ended branch) waits on the pool row the resume holds.
    let (db, stripe, sub) = (p.t.db.clone(), p.s.stripe.clone(), p.sub.clone());
    let reconcile = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &sub).await });
    let reconcile_pid = common::wait_for_waiter(&p.t.admin, &p.t.name, resume_pid).await;
    let subscription = Expect::advisory(AdvisoryKey::Subscription(p.sub.to_string()));
    common::locks::assert_holds(&p.t.admin, reconcile_pid, &[Expect::rendezvous_shared(), subscription]).await;
    common::locks::assert_waits(&p.t.admin, reconcile_pid, resume_pid, &pool_row).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(resume.await.unwrap().unwrap(), 1, "the resume read the subscription active and conferred it");
    match reconcile.await.unwrap().unwrap() {
        billing::Reconciled::Converged { status, .. } => {
            assert_eq!(status, member_console::states::SubscriptionStatus::Canceled)
        }
        other => panic!("{other:?}"),
    }
    // The provision the resume conferred is ended: a canceled subscription holds nothing, the grant
    // it replaced comes back, and the pool's entitlements are what a fresh materialization gives.
    assert_eq!(p.live_provisions().await, 0, "no live provision of a canceled subscription");
    assert_eq!(p.grant_status(grant).await, "active");
    assert_eq!(p.hosting().await, "Pro");
    assert_eq!(common::acts::stale_pools(&p.t).await, vec![], "entitlements equal a fresh materialization");
}

/// Issue 36, defect 2: a reconcile request deduplicated against an outbox row a processor had
/// already claimed was lost (that row's work had read the state before the request). The
/// processor here is paused between its row's work and its done mark.
#[tokio::test]
async fn resume_plan_while_a_processor_holds_the_subscriptions_claimed_row_writes_its_own_request_and_it_is_processed()
{
    let p = paying("Basic").await;
    common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    // The processor claims the grant's request and does its work: displaced on every ladder, so
    // it pauses the collection in Stripe. It has not marked the row done yet.
    let claimed = p.claim_all().await;
    assert_eq!(p.reconcile_rows().await, (1, 0));
    billing::reconcile::apply_subscription_collection(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    assert_eq!(p.stripe_pause().await, (true, true));
    // Meanwhile the member resumes the plan: its request for the collection is a row of its own.
    assert_eq!(p.resume().await.unwrap(), 1);
    assert_eq!(p.reconcile_rows().await, (1, 1), "the resume's request is written beside the claimed row");
    p.mark_done(&claimed).await;
    // The processor's next pass takes it and lifts the pause on the plan the member pays for again.
    p.drain_outbox().await;
    assert_eq!(p.reconcile_rows().await, (0, 0));
    assert_eq!(p.hosting().await, "Basic");
    assert_eq!(p.stripe_pause().await, (false, false), "collection resumes");
}

#[tokio::test]
async fn a_paused_switch_writes_its_backstop_first_which_restores_the_pause_when_the_switch_did_not_apply() {
    let p = paying("Basic").await;
    common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true));
    let q = p.quote(p.pro).await.unwrap();
    assert_eq!(q.kind, SwitchKind::Upgrade);
    // A reconcile holding the subscription's lock does not hold the backstop up: it takes none.
    let (mut pause, pause_pid) =
        common::hold_open(&p.t, "LOCK TABLE core.subscription_periods IN ACCESS EXCLUSIVE MODE").await;
    let (db, stripe, sub) = (p.t.db.clone(), p.s.stripe.clone(), p.sub.clone());
    let reconcile = tokio::spawn(async move { billing::reconcile_subscription(&db, &stripe, &sub).await });
    common::wait_for_waiter(&p.t.admin, &p.t.name, pause_pid).await;
    // Stripe refuses the switch itself: collection was resumed for it, and stays so for now.
    p.s.control(
        "/faults",
        &[
            ("path_prefix", &format!("/v1/subscriptions/{}", p.sub)),
            ("method", "POST"),
            ("status", "500"),
            ("skip", "1"),
            ("times", "1"),
        ],
    )
    .await;
    let e = p.confirm(p.pro, q.operation.as_str()).await;
    let backstops = common::acts::scalar(
        &p.t,
        &format!(
            "SELECT count(*) FROM core.outbox WHERE subscription_id = {} AND payload->>'cause' = 'paused_switch_backstop'
               AND processed_at IS NULL AND due_at > now() + interval '3 minutes'",
            p.subscription_id
        ),
    )
    .await;
    assert_eq!(backstops, 1, "the backstop committed before any Stripe write ({e:?})");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    reconcile.await.unwrap().unwrap();
    assert!(e.is_err(), "{e:?}");
    assert_eq!(p.hosting().await, "Pro", "the grant still holds the ladder");
    // Four minutes on, the backstop's reconcile puts the pause back.
    p.t.run(sqlx::query("UPDATE core.outbox SET due_at = now() WHERE payload->>'cause' = 'paused_switch_backstop'"))
        .await;
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true));
}

#[tokio::test]
async fn a_paused_switch_that_applied_is_charged_paused_again_and_its_backstop_changes_nothing() {
    let p = paying("Basic").await;
    common::acts::grant(&p.t, p.org, common::acts::product_id(&p.t, "Pro").await).await;
    p.drain_outbox().await;
    p.switch(p.pro).await.unwrap();
    assert_eq!(p.update_invoices().await.len(), 1, "the switch was charged");
    assert_eq!(p.hosting().await, "Pro", "the grant still holds the ladder");
    // The switch's reconcile asked for the pause again; the outbox applies it.
    p.drain_outbox().await;
    assert_eq!(p.stripe_pause().await, (true, true));
    let before = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    p.t.run(sqlx::query("UPDATE core.outbox SET due_at = now() WHERE payload->>'cause' = 'paused_switch_backstop'"))
        .await;
    p.drain_outbox().await;
    let after = p.s.get(&format!("/subscriptions/{}", p.sub)).await;
    assert_eq!(before, after, "the backstop found nothing to restore");
}

#[tokio::test]
async fn a_failed_renewal_suspends_the_plan_with_a_banner_and_a_paid_retry_reinstates_it() {
    let p = paying("Pro").await;
    let customer = p.s.get(&format!("/subscriptions/{}", p.sub)).await["customer"].as_str().unwrap().to_string();
    let card = |pm: &'static str| [("payment_method", pm), ("invoice_settings[default_payment_method]", pm)];
    p.s.post(&format!("/customers/{customer}"), &card("pm_card_chargeCustomerFail")).await;
    p.s.advance(&p.clock, p.now + 32 * 86_400).await;
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    assert_eq!(common::acts::sites(&p.t, p.pool).await, None, "suspended: it confers nothing");
    let app = TestApp::spawn_with_stripe(&p.t, p.s.stripe.clone()).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/billing").await;
    assert!(page.body.contains("A payment failed"), "{}", page.body);
    // The member pays the open invoice with a card that works; the invoice's reconcile reinstates.
    let open = p.s.get(&format!("/invoices?subscription={}&status=open", p.sub)).await;
    let invoice = open["data"][0]["id"].as_str().expect("an open invoice").to_string();
    p.s.post(&format!("/customers/{customer}"), &card("pm_card_visa")).await;
    p.s.post(&format!("/invoices/{invoice}/pay"), &[("payment_method", "pm_card_visa")]).await;
    billing::reconcile_subscription(&p.t.db, &p.s.stripe, &p.sub).await.unwrap();
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(10), "reinstated");
    let page = member.get("/billing").await;
    assert!(!page.body.contains("A payment failed"), "{}", page.body);
}

// Seats ----------------------------------------------------------------------------------------------

#[tokio::test]
async fn seats_change_within_the_tiers_limit_more_charged_now_and_fewer_credited_later() {
    let p = paying("Pro").await;
    let pro = common::acts::product_id(&p.t, "Pro").await;
    let quote = |price: PriceId, seats: Option<u64>| {
        let (db, stripe, who, org, id) = (p.t.db.clone(), p.s.stripe.clone(), p.who, p.org, p.subscription_id);
        async move { plan_changes::quote_switch(&db, &stripe, who, org, id, price, seats).await }
    };
    // Pro is sold one at a time until an operator says otherwise.
    let e = quote(p.pro, Some(3)).await.unwrap_err();
    assert!(e.to_string().contains("sold one at a time"), "{e}");
    assert!(member_console::services::catalog::Seats::parse("0").is_err());
    assert_eq!(member_console::services::catalog::set_product_seats(&p.t.db, pro, seats("10")).await.unwrap(), 10);

    // More seats: now, charged, and the entitlements follow (10 sites a seat).
    let q = quote(p.pro, Some(3)).await.unwrap();
    assert_eq!((q.kind, q.from_quantity, q.to_quantity), (SwitchKind::MoreSeats, 1, 3));
    assert!(q.charge.as_ref().is_some_and(|c| c.amount_due > 0), "{q:?}");
    p.confirm(p.pro, q.operation.as_str()).await.unwrap();
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(30));
    assert_eq!(p.update_invoices().await.len(), 1, "charged at once");
    let item = &p.s.get(&format!("/subscriptions/{}", p.sub)).await["items"]["data"][0];
    assert_eq!(item["quantity"], 3);

    // Fewer seats: now, credited on the next invoice (nothing charged now).
    let q = quote(p.pro, Some(2)).await.unwrap();
    assert_eq!(q.kind, SwitchKind::FewerSeats);
    assert!(q.charge.is_none());
    p.confirm(p.pro, q.operation.as_str()).await.unwrap();
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(20));
    assert_eq!(p.update_invoices().await.len(), 1, "nothing charged for fewer seats");

    // Out of range, the same number, and a tier sold one at a time.
    for (seats, words) in [(Some(11), "from 1 to 10 seats"), (Some(0), "from 1 to 10 seats")] {
        let e = quote(p.pro, seats).await.unwrap_err();
        assert!(matches!(&e, ServiceError::Invalid(_)) && e.to_string().contains(words), "{seats:?}: {e}");
    }
    refused(quote(p.pro, Some(2)).await, "already the plan");
    let e = quote(p.basic, None).await.unwrap_err();
    assert!(e.to_string().contains("Basic is sold one at a time"), "keeping 2 seats on Basic: {e}");
    let q = quote(p.basic, Some(1)).await.unwrap();
    assert_eq!((q.kind, q.to_quantity), (SwitchKind::Downgrade, 1));
}

#[tokio::test]
async fn a_member_changes_the_seats_from_the_billing_page() {
    let p = paying("Pro").await;
    let pro = common::acts::product_id(&p.t, "Pro").await;
    member_console::services::catalog::set_product_seats(&p.t.db, pro, seats("10")).await.unwrap();
    let app = TestApp::spawn_with_stripe(&p.t, p.s.stripe.clone()).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/billing").await;
    assert!(page.body.contains("Change the seats of Pro") && page.body.contains(r#"max="10""#), "{}", page.body);
    let (org, sub, pro_price) = (p.org.to_string(), p.subscription_id.to_string(), p.pro.to_string());
    let fields = [
        ("organization_id", org.as_str()),
        ("subscription_id", sub.as_str()),
        ("price_id", pro_price.as_str()),
        ("quantity", "2"),
    ];
    let quote = member.post("/billing/switch", &fields, false).await;
    assert_eq!(quote.status, 200, "{}", quote.body);
    assert!(quote.body.contains("from 1 to 2 seats?") && quote.body.contains("You will be charged"), "{}", quote.body);
    let done = confirm_quote(&member, &fields, &quote).await;
    assert_eq!(done.header("location"), Some("/billing?changed=seats"), "{}", done.body);
    assert_eq!(common::acts::sites(&p.t, p.pool).await, Some(20));
    let bad = [fields[0], fields[1], fields[2], ("quantity", "11")];
    let refused = member.post("/billing/switch", &bad, false).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("from 1 to 10 seats"), "{}", refused.body);
}

#[tokio::test]
async fn a_change_to_a_subscription_stripe_ended_meanwhile_is_refused_and_the_console_catches_up() {
    let p = paying("Basic").await;
    // Cancelled in Stripe; the console has not heard yet.
    p.s.delete(&format!("/subscriptions/{}", p.sub)).await;
    refused(p.cancel(true).await, "already ended");
    let status: String =
        p.t.one(
            sqlx::query_scalar("SELECT status FROM core.subscriptions WHERE subscription_id = $1")
                .bind(p.subscription_id),
        )
        .await;
    assert_eq!(status, "canceled", "the refusal reconciled it");
    assert_eq!(p.hosting().await, "Free");
}

#[tokio::test]
async fn a_switch_of_a_subscription_stripe_ended_meanwhile_is_refused() {
    let p = paying("Basic").await;
    p.s.delete(&format!("/subscriptions/{}", p.sub)).await;
    refused(p.quote(p.pro).await, "has ended");
    assert_eq!(p.hosting().await, "Free", "the console caught up");
}

/// Seats as the seats form would send them.
fn seats(n: &str) -> member_console::services::catalog::Seats {
    member_console::services::catalog::Seats::parse(n).unwrap()
}
