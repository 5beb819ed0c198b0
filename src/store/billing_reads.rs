//! The billing pages' reads: a member's subscriptions, invoices and the tiers they can buy; the
//! operator's view of subscriptions, the outbox and Stripe's events. Nothing here writes.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{OrganizationId, OutboxId, PriceId, ProductId, SubscriptionId},
    states::{BillingInterval, InvoiceStatus, SubscriptionStatus},
};

/// How many invoices a member sees per organization.
pub const INVOICES_SHOWN: i64 = 24;
/// How many subscriptions the operator's billing page lists (the newest).
pub const SUBSCRIPTIONS_SHOWN: i64 = 100;
/// How many unprocessed outbox rows the operator's billing page lists.
pub const OUTBOX_SHOWN: i64 = 100;
/// How many received events the operator's billing page lists (the latest).
pub const EVENTS_SHOWN: i64 = 50;

// A member's billing ---------------------------------------------------------------------------------

/// One subscription of an organization, as its members read it.
#[derive(Debug, Clone)]
pub struct OrgSubscription {
    pub subscription_id: SubscriptionId,
    pub organization_id: OrganizationId,
    pub stripe_subscription_id: String,
    pub status: SubscriptionStatus,
    pub current_period_end: Option<DateTime<Utc>>,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    pub ended_at: Option<DateTime<Utc>>,
    /// The products of its items Stripe still lists, by name.
    pub products: Vec<String>,
    /// The ladders those products are tiers of: a live subscription holds them (a checkout on one
    /// of them is refused until plans can be changed in place).
    pub ladders: Vec<String>,
}

/// The subscriptions of these organizations, live ones first, newest first.
pub async fn subscriptions_of(
    conn: &mut PgConnection,
    organizations: &[OrganizationId],
) -> sqlx::Result<Vec<OrgSubscription>> {
    sqlx::query_as!(
        OrgSubscription,
        r#"SELECT s.subscription_id, s.organization_id, s.stripe_subscription_id,
                  s.status AS "status: SubscriptionStatus", s.current_period_end, s.cancel_at_period_end,
                  s.collection_paused, s.ended_at,
                  ARRAY(SELECT p.name FROM core.subscription_items i JOIN core.products p USING (product_id)
                         WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                         ORDER BY i.subscription_item_id) AS "products!",
                  ARRAY(SELECT DISTINCT l.name FROM core.subscription_items i
                          JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                          JOIN core.plan_ladders l USING (plan_ladder_id)
                         WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL) AS "ladders!"
           FROM core.subscriptions s
           WHERE s.organization_id = ANY ($1)
           ORDER BY s.organization_id, (s.status IN ('canceled', 'incomplete_expired')), s.subscription_id DESC"#,
        organizations as &[OrganizationId]
    )
    .fetch_all(conn)
    .await
}

/// One invoice, as a member reads it.
#[derive(Debug, Clone)]
pub struct OrgInvoice {
    pub organization_id: OrganizationId,
    pub stripe_invoice_id: String,
    pub number: Option<String>,
    pub status: InvoiceStatus,
    pub currency: String,
    pub amount_due: i64,
    pub amount_remaining: i64,
    pub hosted_invoice_url: Option<String>,
    pub stripe_created: DateTime<Utc>,
}

/// Each organization's newest invoices, at most [`INVOICES_SHOWN`] of each.
pub async fn invoices_of(conn: &mut PgConnection, organizations: &[OrganizationId]) -> sqlx::Result<Vec<OrgInvoice>> {
    sqlx::query_as!(
        OrgInvoice,
        r#"SELECT i.organization_id AS "organization_id!: OrganizationId", i.stripe_invoice_id, i.number,
                  i.status AS "status: InvoiceStatus", i.currency, i.amount_due, i.amount_remaining,
                  i.hosted_invoice_url, i.stripe_created
           FROM unnest($1::bigint[]) AS o(id)
           CROSS JOIN LATERAL (
               SELECT * FROM billing.invoices WHERE organization_id = o.id
               ORDER BY stripe_created DESC, stripe_invoice_id DESC LIMIT $2) i
           ORDER BY i.organization_id, i.stripe_created DESC, i.stripe_invoice_id DESC"#,
        organizations as &[OrganizationId],
        INVOICES_SHOWN
    )
    .fetch_all(conn)
    .await
}

/// A tier someone can buy: a published product of rank above 0 on a ladder, at a price that is
/// active and that Stripe has (synced, and not archived there).
#[derive(Debug, Clone)]
pub struct BuyableTier {
    pub ladder: String,
    pub rank: i32,
    pub product_id: ProductId,
    pub product: String,
    pub price_id: PriceId,
    pub billing_interval: BillingInterval,
    pub amount_minor: i64,
    pub currency: String,
}

/// Every tier on sale, by ladder then rank, monthly before yearly.
pub async fn buyable_tiers(conn: &mut PgConnection) -> sqlx::Result<Vec<BuyableTier>> {
    sqlx::query_as!(
        BuyableTier,
        r#"SELECT l.name AS ladder, t.rank, t.product_id AS "product_id: ProductId", p.name AS product,
                  pr.price_id AS "price_id: PriceId", pr.billing_interval AS "billing_interval: BillingInterval",
                  pr.amount_minor, pr.currency
           FROM core.plan_ladder_tiers t
           JOIN core.plan_ladders l USING (plan_ladder_id)
           JOIN core.products p ON p.product_id = t.product_id
           JOIN billing.prices pr ON pr.product_id = t.product_id
           WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
             AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false
           ORDER BY l.sort_order, l.plan_ladder_id, t.rank, pr.billing_interval, pr.currency, pr.price_id"#
    )
    .fetch_all(conn)
    .await
}

// The operator's billing page ------------------------------------------------------------------------

/// Subscriptions not ended, by status.
pub async fn live_subscription_counts(conn: &mut PgConnection) -> sqlx::Result<Vec<(SubscriptionStatus, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT status AS "status: SubscriptionStatus", count(*) AS "n!" FROM core.subscriptions
           WHERE status NOT IN ('canceled', 'incomplete_expired') GROUP BY status ORDER BY status"#
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.status, r.n)).collect())
}

/// The outbox's unprocessed rows: how many, and how many of them are stuck (tried more than once,
/// or failed).
#[derive(Debug, Clone, Copy)]
pub struct OutboxCounts {
    pub pending: i64,
    pub stuck: i64,
}

pub async fn outbox_counts(conn: &mut PgConnection) -> sqlx::Result<OutboxCounts> {
    sqlx::query_as!(
        OutboxCounts,
        r#"SELECT count(*) AS "pending!",
                  count(*) FILTER (WHERE attempts > 1 OR last_error IS NOT NULL) AS "stuck!"
           FROM core.outbox WHERE processed_at IS NULL"#
    )
    .fetch_one(conn)
    .await
}

/// Stripe events received in the last 24 hours.
pub async fn events_last_day(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM billing.stripe_events WHERE received_at > now() - interval '24 hours'"#
    )
    .fetch_one(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct SubscriptionListRow {
    pub subscription_id: SubscriptionId,
    pub organization_id: OrganizationId,
    pub organization: String,
    pub stripe_subscription_id: String,
    pub status: SubscriptionStatus,
    pub current_period_end: Option<DateTime<Utc>>,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
}

/// The newest subscriptions, `limit` of them.
pub async fn newest_subscriptions(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<SubscriptionListRow>> {
    sqlx::query_as!(
        SubscriptionListRow,
        r#"SELECT s.subscription_id, s.organization_id, o.name AS organization, s.stripe_subscription_id,
                  s.status AS "status: SubscriptionStatus", s.current_period_end, s.cancel_at_period_end,
                  s.collection_paused
           FROM core.subscriptions s JOIN core.organizations o USING (organization_id)
           ORDER BY s.subscription_id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn subscription_count(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM core.subscriptions"#).fetch_one(conn).await
}

#[derive(Debug, Clone)]
pub struct OutboxListRow {
    pub outbox_id: OutboxId,
    pub kind: String,
    /// The Stripe subscription a reconcile is for, or the product a sync is for.
    pub stripe_subscription_id: Option<String>,
    pub product_id: Option<ProductId>,
    pub product: Option<String>,
    pub attempts: i32,
    pub due_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub stuck: bool,
}

/// Unprocessed outbox rows, the stuck ones first, then by when they are due.
pub async fn unprocessed_outbox(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<OutboxListRow>> {
    sqlx::query_as!(
        OutboxListRow,
        r#"SELECT o.outbox_id, o.kind, s.stripe_subscription_id AS "stripe_subscription_id?",
                  o.product_id AS "product_id: ProductId", p.name AS "product?", o.attempts, o.due_at, o.last_error,
                  (o.attempts > 1 OR o.last_error IS NOT NULL) AS "stuck!"
           FROM core.outbox o
           LEFT JOIN core.subscriptions s ON s.subscription_id = o.subscription_id
           LEFT JOIN core.products p ON p.product_id = o.product_id
           WHERE o.processed_at IS NULL
           ORDER BY (o.attempts > 1 OR o.last_error IS NOT NULL) DESC, o.due_at, o.outbox_id
           LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub event_id: String,
    pub event_type: String,
    pub object_id: Option<String>,
    pub received_at: DateTime<Utc>,
}

/// The latest events received.
pub async fn latest_events(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<EventRow>> {
    sqlx::query_as!(
        EventRow,
        "SELECT event_id, event_type, object_id, received_at FROM billing.stripe_events
         ORDER BY received_at DESC, event_id DESC LIMIT $1",
        limit
    )
    .fetch_all(conn)
    .await
}
