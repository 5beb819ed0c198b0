//! A member's changes to a paid plan (switch, cancel, their undo): what the service reads to
//! check a request before it calls Stripe, and the one write of its own, supersedeReleasedDowngrades.
//! Everything else a change does reaches the console through ReconcileSubscription.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{
        LadderId, OrganizationId, PriceId, ProductId, StripeItemId, StripePriceId, StripeScheduleId,
        StripeSubscriptionId, SubscriptionId,
    },
    states::{BillingInterval, SubscriptionStatus},
};

/// A subscription of an organization, as a change reads it.
#[derive(Debug, Clone)]
pub struct HeldSubscription {
    pub stripe_subscription_id: StripeSubscriptionId,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    pub current_period_end: Option<DateTime<Utc>>,
}

pub async fn held_subscription(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
) -> sqlx::Result<Option<HeldSubscription>> {
    sqlx::query_as!(
        HeldSubscription,
        r#"SELECT stripe_subscription_id, status AS "status: SubscriptionStatus", cancel_at_period_end,
                  collection_paused, current_period_end
           FROM core.subscriptions WHERE subscription_id = $1 AND organization_id = $2"#,
        subscription_id as SubscriptionId,
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// The price a member would switch to, and the subscription's item on that price's ladder.
#[derive(Debug, Clone)]
pub struct SwitchTarget {
    pub to_product_id: ProductId,
    pub to_product: String,
    /// The most seats of the price's product.
    pub to_max_quantity: i32,
    /// The price's Stripe id, when it is on sale there.
    pub to_stripe_price: Option<StripePriceId>,
    pub to_interval: BillingInterval,
    pub to_currency: String,
    /// The price is on sale in the console (active, synced, published paid tier).
    pub on_sale: bool,
    /// The item on the ladder the price's product is a tier of, when the subscription has one.
    pub item: Option<LadderItem>,
}

#[derive(Debug, Clone)]
pub struct LadderItem {
    pub stripe_item_id: StripeItemId,
    pub plan_ladder_id: LadderId,
    pub ladder: String,
    pub from_product_id: ProductId,
    pub from_product: String,
    pub from_rank: i32,
    pub to_rank: i32,
    pub from_interval: Option<BillingInterval>,
    pub from_currency: Option<String>,
}

pub async fn switch_target(
    conn: &mut PgConnection,
    subscription_id: SubscriptionId,
    price_id: PriceId,
) -> sqlx::Result<Option<SwitchTarget>> {
    let row = sqlx::query!(
        r#"SELECT pr.product_id AS "to_product_id: ProductId", p.name AS to_product, p.max_quantity AS to_max_quantity,
                  pr.stripe_price_id AS to_stripe_price,
                  pr.billing_interval AS "to_interval: BillingInterval", pr.currency AS to_currency,
                  (pr.active AND p.published AND pr.sync_state = 'synced' AND pr.stripe_price_id IS NOT NULL
                   AND pr.stripe_active IS NOT false
                   AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers t WHERE t.product_id = pr.product_id AND t.rank > 0))
                      AS "on_sale!",
                  i.stripe_item_id AS "stripe_item_id?", i.plan_ladder_id AS "plan_ladder_id?: LadderId",
                  i.ladder AS "ladder?", i.product_id AS "from_product_id?: ProductId", i.from_product AS "from_product?",
                  i.from_rank AS "from_rank?", i.to_rank AS "to_rank?",
                  i.from_interval AS "from_interval?: BillingInterval", i.from_currency AS "from_currency?"
           FROM billing.prices pr
           JOIN core.products p ON p.product_id = pr.product_id
           LEFT JOIN LATERAL (
               SELECT si.stripe_item_id, l.plan_ladder_id, l.name AS ladder, si.product_id, fp.name AS from_product,
                      ft.rank AS from_rank, tt.rank AS to_rank, cur.billing_interval AS from_interval,
                      cur.currency AS from_currency
               FROM core.subscription_items si
               JOIN core.products fp ON fp.product_id = si.product_id
               JOIN core.plan_ladder_tiers ft ON ft.product_id = si.product_id
               JOIN core.plan_ladder_tiers tt ON tt.plan_ladder_id = ft.plan_ladder_id AND tt.product_id = pr.product_id
               JOIN core.plan_ladders l ON l.plan_ladder_id = ft.plan_ladder_id
               LEFT JOIN billing.prices cur ON cur.stripe_price_id = si.stripe_price_id
               WHERE si.subscription_id = $1 AND si.removed_at IS NULL
               ORDER BY l.sort_order, l.plan_ladder_id LIMIT 1) i ON true
           WHERE pr.price_id = $2"#,
        subscription_id as SubscriptionId,
        price_id as PriceId
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| SwitchTarget {
        to_product_id: r.to_product_id,
        to_product: r.to_product,
        to_max_quantity: r.to_max_quantity,
        to_stripe_price: r.to_stripe_price.map(StripePriceId::from),
        to_interval: r.to_interval,
        to_currency: r.to_currency,
        on_sale: r.on_sale,
        item: match (r.stripe_item_id, r.plan_ladder_id, r.ladder, r.from_product_id, r.from_product) {
            (Some(stripe_item_id), Some(plan_ladder_id), Some(ladder), Some(from_product_id), Some(from_product)) => {
                Some(LadderItem {
                    stripe_item_id: stripe_item_id.into(),
                    plan_ladder_id,
                    ladder,
                    from_product_id,
                    from_product,
                    from_rank: r.from_rank.unwrap_or_default(),
                    to_rank: r.to_rank.unwrap_or_default(),
                    from_interval: r.from_interval,
                    from_currency: r.from_currency,
                })
            }
            _ => None,
        },
    }))
}

/// A change still ahead on one ladder of a subscription, with its products' names.
#[derive(Debug, Clone)]
pub struct AheadChange {
    pub scheduled_change_id: i64,
    pub stripe_schedule_id: StripeScheduleId,
    pub plan_ladder_id: LadderId,
    pub from_product_id: ProductId,
    pub from_product: String,
    pub to_product_id: ProductId,
    pub to_product: String,
    pub effective_at: DateTime<Utc>,
}

pub async fn changes_ahead(conn: &mut PgConnection, subscription_id: SubscriptionId) -> sqlx::Result<Vec<AheadChange>> {
    sqlx::query_as!(
        AheadChange,
        r#"SELECT c.scheduled_change_id, c.stripe_schedule_id, c.plan_ladder_id AS "plan_ladder_id: LadderId",
                  c.from_product_id AS "from_product_id: ProductId", f.name AS from_product,
                  c.to_product_id AS "to_product_id: ProductId", t.name AS to_product, c.effective_at
           FROM core.scheduled_changes c
           JOIN core.products f ON f.product_id = c.from_product_id
           JOIN core.products t ON t.product_id = c.to_product_id
           WHERE c.subscription_id = $1 AND c.state = 'scheduled' ORDER BY c.plan_ladder_id"#,
        subscription_id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}

/// supersedeReleasedDowngrades' write: the changes of a released schedule still marked ahead.
pub async fn supersede_changes_of_schedule(
    conn: &mut PgConnection,
    subscription_id: SubscriptionId,
    stripe_schedule_id: &StripeScheduleId,
) -> sqlx::Result<u64> {
    let r = sqlx::query!(
        "UPDATE core.scheduled_changes SET state = 'superseded', settled_at = now()
          WHERE subscription_id = $1 AND stripe_schedule_id = $2 AND state = 'scheduled'",
        subscription_id as SubscriptionId,
        stripe_schedule_id.as_str()
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

// Switch quotes ------------------------------------------------------------------------------------

/// What a member was shown before confirming a switch.
#[derive(Debug, Clone)]
pub struct Quote {
    pub subscription_id: SubscriptionId,
    pub price_id: PriceId,
    pub account_id: crate::ids::AccountId,
    pub proration_date: Option<DateTime<Utc>>,
    /// The seats quoted.
    pub quantity: i32,
    /// How long ago it was made (by the database's clock).
    pub age_s: f64,
    /// Whether a confirmation of it already made its change.
    pub confirmed: bool,
}

/// Keep a quote; the subscription's quotes older than a day go (they can no longer be confirmed).
#[allow(clippy::too_many_arguments)]
pub async fn insert_quote(
    conn: &mut PgConnection,
    operation: &str,
    subscription_id: SubscriptionId,
    price_id: PriceId,
    account_id: crate::ids::AccountId,
    proration_date: Option<DateTime<Utc>>,
    amount: Option<(i64, &str)>,
    quantity: i32,
) -> sqlx::Result<()> {
    sqlx::query!(
        "WITH old AS (DELETE FROM billing.switch_quotes WHERE subscription_id = $2 AND quoted_at < now() - interval '1 day')
         INSERT INTO billing.switch_quotes (operation, subscription_id, price_id, account_id, proration_date, amount_due,
                                            currency, quantity)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        operation,
        subscription_id as SubscriptionId,
        price_id as PriceId,
        account_id as crate::ids::AccountId,
        proration_date,
        amount.map(|a| a.0),
        amount.map(|a| a.1),
        quantity
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn quote(conn: &mut PgConnection, operation: &str) -> sqlx::Result<Option<Quote>> {
    sqlx::query_as!(
        Quote,
        r#"SELECT subscription_id AS "subscription_id: SubscriptionId", price_id AS "price_id: PriceId",
                  account_id AS "account_id: crate::ids::AccountId", proration_date, quantity,
                  extract(epoch FROM now() - quoted_at)::float8 AS "age_s!", confirmed_at IS NOT NULL AS "confirmed!"
           FROM billing.switch_quotes WHERE operation = $1"#,
        operation
    )
    .fetch_optional(conn)
    .await
}

/// The quote's confirmation made its change (marked once Stripe holds it): a later confirmation
/// of the same quote is the same click again.
pub async fn mark_quote_confirmed(conn: &mut PgConnection, operation: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.switch_quotes SET confirmed_at = now() WHERE operation = $1 AND confirmed_at IS NULL",
        operation
    )
    .execute(conn)
    .await?;
    Ok(())
}

// The collection pause and Resume plan -------------------------------------------------------------

/// collectionInputs, under the pool row the reconcile holds: the subscription's live items, how
/// many of them another plan displaced and still holds, and its live provisions. Displaced on
/// every ladder: items > 0, all held off, no live provision.
pub async fn displaced_on_every_ladder(conn: &mut PgConnection, subscription_id: SubscriptionId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT (items > 0 AND held_off = items AND live = 0) AS "displaced!"
           FROM (SELECT
                   (SELECT count(*) FROM core.subscription_items i
                     WHERE i.subscription_id = $1 AND i.removed_at IS NULL) AS items,
                   (SELECT count(DISTINCT i.subscription_item_id) FROM core.subscription_items i
                      JOIN core.subscription_displacements sd
                        ON sd.subscription_item_id = i.subscription_item_id AND sd.delivered_at IS NULL
                      JOIN core.conferrals d ON d.conferral_id = sd.displaced_by AND d.state = 'holding'
                     WHERE i.subscription_id = $1 AND i.removed_at IS NULL) AS held_off,
                   (SELECT count(*) FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
                     WHERE i.subscription_id = $1 AND c.state = 'holding') AS live) x"#,
        subscription_id as SubscriptionId
    )
    .fetch_one(conn)
    .await
}

/// A reconcile_subscription outbox row for one subscription, due after `delay_secs`. One due now
/// is not written again while another due now is waiting unclaimed (a later one, such as a
/// backstop, does not count, and neither does one a processor has claimed: its work may have read
/// the state before this request, which would then be lost). True when written. An insert: no lock.
pub async fn request_reconcile(
    conn: &mut PgConnection,
    subscription_id: SubscriptionId,
    stripe_subscription_id: &StripeSubscriptionId,
    cause: &str,
    delay_secs: f64,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        r#"INSERT INTO core.outbox (kind, subscription_id, payload, due_at)
           SELECT 'reconcile_subscription', $1,
                  jsonb_build_object('stripe_subscription_id', $2::text, 'cause', $3::text),
                  now() + make_interval(secs => $4)
            WHERE $4 > 0 OR NOT EXISTS (
                  SELECT 1 FROM core.outbox o
                   WHERE o.subscription_id = $1 AND o.kind = 'reconcile_subscription'
                     AND o.processed_at IS NULL AND o.due_at <= now() AND o.claimed_until IS NULL)"#,
        subscription_id as SubscriptionId,
        stripe_subscription_id.as_str(),
        cause,
        delay_secs
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// ResumeSubscription's writes (`core.resume_subscription`): how many items came back.
pub async fn resume_subscription(
    conn: &mut PgConnection,
    pool: crate::ids::PoolId,
    subscription_id: SubscriptionId,
) -> sqlx::Result<i32> {
    sqlx::query_scalar!(
        r#"SELECT core.resume_subscription($1, $2) AS "n!""#,
        pool as crate::ids::PoolId,
        subscription_id as SubscriptionId
    )
    .fetch_one(conn)
    .await
}
