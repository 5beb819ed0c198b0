//! Billing: the subscriptions' Stripe state, items, periods and provisions; customers and
//! checkout sessions; received events; invoices; the outbox's processing.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    db::locks::Lock,
    ids::{
        AccountId, ConferralId, LadderId, OrganizationId, OutboxId, PoolId, PriceId, ProductId, StripeCustomerId,
        StripeEventId, StripeInvoiceId, StripeItemId, StripeLineId, StripePaymentId, StripePriceId, StripeProductId,
        StripeScheduleId, StripeSessionId, StripeSubscriptionId, SubscriptionId, SubscriptionItemId,
    },
    states::{BillingInterval, InvoicePaymentStatus, InvoiceStatus, SubscriptionStatus, SyncState},
};

/// The database's clock now (not the transaction's start): when a Stripe read began.
pub async fn clock(conn: &mut PgConnection) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar!(r#"SELECT clock_timestamp() AS "now!""#).fetch_one(conn).await
}

// Subscriptions -----------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct SubscriptionRow {
    pub subscription_id: SubscriptionId,
    pub organization_id: OrganizationId,
    pub status: SubscriptionStatus,
    pub observed_at: Option<DateTime<Utc>>,
}

pub async fn subscription_by_stripe_id(
    conn: &mut PgConnection,
    stripe_id: &StripeSubscriptionId,
) -> sqlx::Result<Option<SubscriptionRow>> {
    sqlx::query_as!(
        SubscriptionRow,
        r#"SELECT subscription_id, organization_id, status AS "status: SubscriptionStatus", observed_at
           FROM core.subscriptions WHERE stripe_subscription_id = $1"#,
        stripe_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

/// What the reconcile writes of a subscription (the rest of the row is the items and periods).
pub struct SubscriptionState<'a> {
    pub status: SubscriptionStatus,
    pub customer: &'a StripeCustomerId,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    /// The pause is the console's own (another plan displaced the subscription everywhere).
    pub console_paused: bool,
    pub current_period: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub ended_at: Option<DateTime<Utc>>,
    pub observed_at: DateTime<Utc>,
}

pub async fn insert_subscription(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    stripe_id: &StripeSubscriptionId,
    s: &SubscriptionState<'_>,
) -> sqlx::Result<SubscriptionId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status, stripe_customer_id,
               cancel_at_period_end, collection_paused, current_period_start, current_period_end, ended_at, observed_at,
               console_paused)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
           RETURNING subscription_id AS "subscription_id: SubscriptionId""#,
        organization_id as OrganizationId,
        stripe_id.as_str(),
        s.status as SubscriptionStatus,
        s.customer.as_str(),
        s.cancel_at_period_end,
        s.collection_paused,
        s.current_period.map(|p| p.0),
        s.current_period.map(|p| p.1),
        s.ended_at,
        s.observed_at,
        s.console_paused
    )
    .fetch_one(conn)
    .await
}

pub async fn update_subscription(
    conn: &mut PgConnection,
    id: SubscriptionId,
    s: &SubscriptionState<'_>,
) -> sqlx::Result<()> {
    sqlx::query!(
        r#"UPDATE core.subscriptions
              SET status = $2, stripe_customer_id = $3, cancel_at_period_end = $4, collection_paused = $5,
                  current_period_start = $6, current_period_end = $7, ended_at = $8, observed_at = $9,
                  console_paused = $10, updated_at = now()
            WHERE subscription_id = $1"#,
        id as SubscriptionId,
        s.status as SubscriptionStatus,
        s.customer.as_str(),
        s.cancel_at_period_end,
        s.collection_paused,
        s.current_period.map(|p| p.0),
        s.current_period.map(|p| p.1),
        s.ended_at,
        s.observed_at,
        s.console_paused
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Record the current period. A period that starts inside an earlier one (an anchor moved by a
/// switch) cuts that one short; the exclusion constraint keeps them from overlapping.
pub async fn put_period(
    conn: &mut PgConnection,
    id: SubscriptionId,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> sqlx::Result<()> {
    if end <= start {
        return Ok(());
    }
    sqlx::query!(
        r#"UPDATE core.subscription_periods SET period = tstzrange(lower(period), $2)
            WHERE subscription_id = $1 AND lower(period) < $2 AND upper(period) > $2"#,
        id as SubscriptionId,
        start
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        r#"WITH same AS (
               UPDATE core.subscription_periods SET period = tstzrange($2, $3)
                WHERE subscription_id = $1 AND lower(period) = $2
               RETURNING 1)
           INSERT INTO core.subscription_periods (subscription_id, period)
           SELECT $1, tstzrange($2, $3) WHERE NOT EXISTS (SELECT 1 FROM same)"#,
        id as SubscriptionId,
        start,
        end
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct ItemRow {
    pub subscription_item_id: SubscriptionItemId,
    pub stripe_item_id: StripeItemId,
    pub product_id: ProductId,
    pub quantity: i32,
    pub removed_at: Option<DateTime<Utc>>,
}

pub async fn items_of(conn: &mut PgConnection, id: SubscriptionId) -> sqlx::Result<Vec<ItemRow>> {
    sqlx::query_as!(
        ItemRow,
        r#"SELECT subscription_item_id, stripe_item_id, product_id, quantity, removed_at
           FROM core.subscription_items WHERE subscription_id = $1 ORDER BY subscription_item_id"#,
        id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}

pub async fn insert_item(
    conn: &mut PgConnection,
    id: SubscriptionId,
    stripe_item_id: &StripeItemId,
    product_id: ProductId,
    stripe_price_id: &StripePriceId,
    quantity: i32,
) -> sqlx::Result<SubscriptionItemId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, stripe_price_id, quantity)
           VALUES ($1, $2, $3, $4, $5) RETURNING subscription_item_id AS "id: SubscriptionItemId""#,
        id as SubscriptionId,
        stripe_item_id.as_str(),
        product_id as ProductId,
        stripe_price_id.as_str(),
        quantity
    )
    .fetch_one(conn)
    .await
}

pub async fn update_item(
    conn: &mut PgConnection,
    item: SubscriptionItemId,
    product_id: ProductId,
    stripe_price_id: &StripePriceId,
    quantity: i32,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.subscription_items SET product_id = $2, stripe_price_id = $3, quantity = $4, removed_at = NULL
          WHERE subscription_item_id = $1",
        item as SubscriptionItemId,
        product_id as ProductId,
        stripe_price_id.as_str(),
        quantity
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn mark_item_removed(conn: &mut PgConnection, item: SubscriptionItemId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.subscription_items SET removed_at = now() WHERE subscription_item_id = $1 AND removed_at IS NULL",
        item as SubscriptionItemId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A live provision: a holding conferral of one of the subscription's items.
#[derive(Debug, Clone)]
pub struct Provision {
    pub conferral_id: ConferralId,
    pub subscription_item_id: SubscriptionItemId,
    pub pool_id: PoolId,
    pub product_id: ProductId,
    pub quantity: i32,
}

pub async fn live_provisions(conn: &mut PgConnection, id: SubscriptionId) -> sqlx::Result<Vec<Provision>> {
    sqlx::query_as!(
        Provision,
        r#"SELECT c.conferral_id, c.subscription_item_id AS "subscription_item_id!: SubscriptionItemId", c.pool_id,
                  c.product_id, c.quantity
           FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
           WHERE i.subscription_id = $1 AND c.state = 'holding' ORDER BY c.conferral_id"#,
        id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}

/// The subscription's items another plan took a ladder from and still holds (an open
/// displacement whose displacer still holds): the reconcile does not confer them back over it.
pub async fn items_held_off(conn: &mut PgConnection, id: SubscriptionId) -> sqlx::Result<Vec<SubscriptionItemId>> {
    sqlx::query_scalar!(
        r#"SELECT sd.subscription_item_id AS "id!: SubscriptionItemId"
           FROM core.subscription_displacements sd
           JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
           JOIN core.conferrals d ON d.conferral_id = sd.displaced_by
           WHERE i.subscription_id = $1 AND sd.delivered_at IS NULL AND d.state = 'holding'"#,
        id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}

/// RequestPoolSubscriptionReconciles: a reconcile request for each other live subscription of the
/// organization, whose provisions a change here may have displaced or freed. Inserts, no lock.
pub async fn request_organization_reconciles(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    except: SubscriptionId,
    cause: &str,
) -> sqlx::Result<u64> {
    let r = sqlx::query!(
        r#"INSERT INTO core.outbox (kind, subscription_id, payload)
           SELECT 'reconcile_subscription', s.subscription_id,
                  jsonb_build_object('stripe_subscription_id', s.stripe_subscription_id, 'cause', $3::text)
             FROM core.subscriptions s
            WHERE s.organization_id = $1 AND s.subscription_id <> $2
              AND s.status NOT IN ('canceled', 'incomplete_expired')
            ORDER BY s.subscription_id"#,
        organization_id as OrganizationId,
        except as SubscriptionId,
        cause
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

// Prices, customers, checkout ----------------------------------------------------------------------

/// The console's price and product behind a Stripe price id.
pub async fn price_by_stripe_id(
    conn: &mut PgConnection,
    stripe_price_id: &StripePriceId,
) -> sqlx::Result<Option<(PriceId, ProductId)>> {
    let row = sqlx::query!(
        r#"SELECT price_id AS "price_id: PriceId", product_id AS "product_id: ProductId"
           FROM billing.prices WHERE stripe_price_id = $1"#,
        stripe_price_id.as_str()
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.price_id, r.product_id)))
}

pub async fn organization_of_customer(
    conn: &mut PgConnection,
    stripe_customer_id: &StripeCustomerId,
) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "id: OrganizationId" FROM billing.customers WHERE stripe_customer_id = $1"#,
        stripe_customer_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

pub async fn customer_of(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
) -> sqlx::Result<Option<StripeCustomerId>> {
    sqlx::query_scalar!(
        "SELECT stripe_customer_id FROM billing.customers WHERE organization_id = $1",
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
    .map(|c| c.map(StripeCustomerId::from))
}

/// Record the organization's customer; a concurrent insert of the same one is no conflict.
/// Returns the customer the organization has after it.
pub async fn put_customer(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    stripe_customer_id: &StripeCustomerId,
) -> sqlx::Result<StripeCustomerId> {
    sqlx::query!(
        "INSERT INTO billing.customers (organization_id, stripe_customer_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        organization_id as OrganizationId,
        stripe_customer_id.as_str()
    )
    .execute(&mut *conn)
    .await?;
    // The organization's row: this insert's, or the one already there (none only when another
    // organization has this customer id).
    customer_of(conn, organization_id).await?.ok_or(sqlx::Error::RowNotFound)
}

pub async fn insert_checkout_session(
    conn: &mut PgConnection,
    stripe_session_id: &StripeSessionId,
    organization_id: OrganizationId,
    price_id: PriceId,
    started_by: AccountId,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO billing.checkout_sessions (stripe_session_id, organization_id, price_id, started_by)
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        stripe_session_id.as_str(),
        organization_id as OrganizationId,
        price_id as PriceId,
        started_by as AccountId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The organization a checkout session was started for.
pub async fn checkout_session_organization(
    conn: &mut PgConnection,
    stripe_session_id: &StripeSessionId,
) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "id: OrganizationId" FROM billing.checkout_sessions WHERE stripe_session_id = $1"#,
        stripe_session_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

pub async fn complete_checkout_session(
    conn: &mut PgConnection,
    stripe_session_id: &StripeSessionId,
    stripe_subscription_id: &StripeSubscriptionId,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.checkout_sessions SET completed_at = coalesce(completed_at, now()), stripe_subscription_id = $2
          WHERE stripe_session_id = $1",
        stripe_session_id.as_str(),
        stripe_subscription_id.as_str()
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sessions started in the last two days that no return or event completed (the sweep asks).
pub async fn open_checkout_sessions(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<StripeSessionId>> {
    sqlx::query_scalar!(
        "SELECT stripe_session_id FROM billing.checkout_sessions
          WHERE completed_at IS NULL AND created_at > now() - interval '2 days'
          ORDER BY created_at LIMIT $1",
        limit
    )
    .fetch_all(conn)
    .await
    .map(|ids| ids.into_iter().map(StripeSessionId::from).collect())
}

// Events ------------------------------------------------------------------------------------------

/// Record an event once by its id. False: it was recorded before (a duplicate delivery).
pub async fn record_event(
    conn: &mut PgConnection,
    event_id: &StripeEventId,
    event_type: &str,
    object_id: Option<&str>,
    stripe_created: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO billing.stripe_events (event_id, event_type, object_id, stripe_created)
         VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING",
        event_id.as_str(),
        event_type,
        object_id,
        stripe_created
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

// Invoices ----------------------------------------------------------------------------------------

pub async fn invoice_observed_at(
    conn: &mut PgConnection,
    stripe_invoice_id: &StripeInvoiceId,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar!(
        "SELECT observed_at FROM billing.invoices WHERE stripe_invoice_id = $1",
        stripe_invoice_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

pub struct InvoiceWrite<'a> {
    pub stripe_invoice_id: &'a StripeInvoiceId,
    pub organization_id: Option<OrganizationId>,
    pub stripe_subscription_id: Option<&'a StripeSubscriptionId>,
    pub stripe_customer_id: &'a StripeCustomerId,
    pub number: Option<&'a str>,
    pub status: InvoiceStatus,
    pub currency: &'a str,
    pub amount_due: i64,
    pub amount_paid: i64,
    pub amount_remaining: i64,
    pub hosted_invoice_url: Option<&'a str>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub stripe_created: DateTime<Utc>,
    pub observed_at: DateTime<Utc>,
}

pub async fn put_invoice(conn: &mut PgConnection, i: &InvoiceWrite<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        r#"INSERT INTO billing.invoices (stripe_invoice_id, organization_id, stripe_subscription_id, stripe_customer_id,
               number, status, currency, amount_due, amount_paid, amount_remaining, hosted_invoice_url,
               period_start, period_end, stripe_created, observed_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
           ON CONFLICT (stripe_invoice_id) DO UPDATE
              SET organization_id = EXCLUDED.organization_id, stripe_subscription_id = EXCLUDED.stripe_subscription_id,
                  stripe_customer_id = EXCLUDED.stripe_customer_id, number = EXCLUDED.number, status = EXCLUDED.status,
                  currency = EXCLUDED.currency, amount_due = EXCLUDED.amount_due, amount_paid = EXCLUDED.amount_paid,
                  amount_remaining = EXCLUDED.amount_remaining, hosted_invoice_url = EXCLUDED.hosted_invoice_url,
                  period_start = EXCLUDED.period_start, period_end = EXCLUDED.period_end,
                  stripe_created = EXCLUDED.stripe_created, observed_at = EXCLUDED.observed_at, updated_at = now()"#,
        i.stripe_invoice_id.as_str(),
        i.organization_id as Option<OrganizationId>,
        i.stripe_subscription_id.map(|s| s.as_str()),
        i.stripe_customer_id.as_str(),
        i.number,
        i.status as InvoiceStatus,
        i.currency,
        i.amount_due,
        i.amount_paid,
        i.amount_remaining,
        i.hosted_invoice_url,
        i.period_start,
        i.period_end,
        i.stripe_created,
        i.observed_at
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Replace the invoice's lines and payments with what Stripe lists now.
pub async fn clear_invoice_details(conn: &mut PgConnection, stripe_invoice_id: &StripeInvoiceId) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM billing.invoice_lines WHERE stripe_invoice_id = $1", stripe_invoice_id.as_str())
        .execute(&mut *conn)
        .await?;
    sqlx::query!("DELETE FROM billing.invoice_payments WHERE stripe_invoice_id = $1", stripe_invoice_id.as_str())
        .execute(conn)
        .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub async fn insert_invoice_line(
    conn: &mut PgConnection,
    stripe_invoice_id: &StripeInvoiceId,
    stripe_line_id: &StripeLineId,
    description: Option<&str>,
    amount: i64,
    quantity: Option<i64>,
    stripe_price_id: Option<&StripePriceId>,
    period: (DateTime<Utc>, DateTime<Utc>),
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO billing.invoice_lines (stripe_line_id, stripe_invoice_id, description, amount, quantity,
             stripe_price_id, period_start, period_end)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (stripe_line_id) DO NOTHING",
        stripe_line_id.as_str(),
        stripe_invoice_id.as_str(),
        description,
        amount,
        quantity,
        stripe_price_id.map(|x| x.as_str()),
        period.0,
        period.1
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn insert_invoice_payment(
    conn: &mut PgConnection,
    stripe_invoice_id: &StripeInvoiceId,
    stripe_payment_id: &StripePaymentId,
    status: InvoicePaymentStatus,
    amount: i64,
    paid_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO billing.invoice_payments (stripe_payment_id, stripe_invoice_id, status, amount, paid_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (stripe_payment_id) DO NOTHING",
        stripe_payment_id.as_str(),
        stripe_invoice_id.as_str(),
        status as InvoicePaymentStatus,
        amount,
        paid_at
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The organization a Stripe subscription belongs to, as the console has it.
pub async fn organization_of_subscription(
    conn: &mut PgConnection,
    stripe_subscription_id: &StripeSubscriptionId,
) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "id: OrganizationId" FROM core.subscriptions WHERE stripe_subscription_id = $1"#,
        stripe_subscription_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

// The outbox --------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub outbox_id: OutboxId,
    pub kind: String,
    pub stripe_subscription_id: Option<StripeSubscriptionId>,
    pub product_id: Option<ProductId>,
    pub attempts: i32,
}

/// ClaimOutbox: up to `limit` due rows, FOR UPDATE SKIP LOCKED, leased until `lease` from now,
/// so another processor skips them while this one works and takes them back if it dies.
pub async fn claim_outbox(conn: &mut PgConnection, limit: i64, lease_secs: f64) -> sqlx::Result<Vec<OutboxRow>> {
    let rows = sqlx::query_as!(
        OutboxRow,
        r#"WITH due AS (
               SELECT outbox_id FROM core.outbox
                WHERE processed_at IS NULL AND due_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
                ORDER BY due_at, outbox_id
                LIMIT $1
                FOR UPDATE SKIP LOCKED)
           UPDATE core.outbox o SET claimed_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
             FROM due WHERE o.outbox_id = due.outbox_id
           RETURNING o.outbox_id AS "outbox_id: OutboxId", o.kind,
                     (SELECT s.stripe_subscription_id FROM core.subscriptions s WHERE s.subscription_id = o.subscription_id)
                         AS "stripe_subscription_id: StripeSubscriptionId",
                     o.product_id AS "product_id: ProductId", o.attempts"#,
        limit,
        lease_secs
    )
    .fetch_all(&mut *conn)
    .await?;
    // The rows the statement took (SKIP LOCKED: no order, no wait), noted for the lock trace.
    crate::db::trace::note_rows(conn, Lock::OutboxRows, rows.iter().map(|r| (r.outbox_id, None))).await?;
    Ok(rows)
}

pub async fn outbox_done(conn: &mut PgConnection, id: OutboxId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.outbox SET processed_at = now(), claimed_until = NULL, last_error = NULL WHERE outbox_id = $1",
        id as OutboxId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A failed attempt: due again after `retry_in_secs`, with the reason kept for operators.
pub async fn outbox_failed(conn: &mut PgConnection, id: OutboxId, error: &str, retry_in_secs: f64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.outbox SET claimed_until = NULL, last_error = $2, due_at = now() + make_interval(secs => $3)
          WHERE outbox_id = $1",
        id as OutboxId,
        error,
        retry_in_secs
    )
    .execute(conn)
    .await?;
    Ok(())
}

// Prices and the catalog's Stripe mappings -----------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Price {
    pub price_id: PriceId,
    pub product_id: ProductId,
    pub billing_interval: BillingInterval,
    pub amount_minor: i64,
    pub currency: String,
    pub active: bool,
    pub stripe_price_id: Option<StripePriceId>,
    pub stripe_active: Option<bool>,
    pub sync_state: SyncState,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub async fn prices_of(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<Vec<Price>> {
    sqlx::query_as!(
        Price,
        r#"SELECT price_id, product_id, billing_interval AS "billing_interval: BillingInterval", amount_minor, currency,
                  active, stripe_price_id AS "stripe_price_id: StripePriceId", stripe_active, sync_state AS "sync_state: SyncState", last_error, created_at
           FROM billing.prices WHERE product_id = $1 ORDER BY active DESC, billing_interval, currency, created_at DESC"#,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await
}

pub async fn price(conn: &mut PgConnection, price_id: PriceId) -> sqlx::Result<Option<Price>> {
    sqlx::query_as!(
        Price,
        r#"SELECT price_id, product_id, billing_interval AS "billing_interval: BillingInterval", amount_minor, currency,
                  active, stripe_price_id AS "stripe_price_id: StripePriceId", stripe_active, sync_state AS "sync_state: SyncState", last_error, created_at
           FROM billing.prices WHERE price_id = $1"#,
        price_id as PriceId
    )
    .fetch_optional(conn)
    .await
}

/// Archive the product's active price for (interval, currency), if any: a new amount replaces it.
pub async fn archive_active_price(
    conn: &mut PgConnection,
    product_id: ProductId,
    interval: BillingInterval,
    currency: &str,
) -> sqlx::Result<u64> {
    let r = sqlx::query!(
        "UPDATE billing.prices SET active = false WHERE product_id = $1 AND billing_interval = $2 AND currency = $3 AND active",
        product_id as ProductId,
        interval as BillingInterval,
        currency
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

pub async fn archive_price(conn: &mut PgConnection, price_id: PriceId) -> sqlx::Result<bool> {
    let r =
        sqlx::query!("UPDATE billing.prices SET active = false WHERE price_id = $1 AND active", price_id as PriceId)
            .execute(conn)
            .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn insert_price(
    conn: &mut PgConnection,
    product_id: ProductId,
    interval: BillingInterval,
    amount_minor: i64,
    currency: &str,
) -> sqlx::Result<PriceId> {
    sqlx::query_scalar!(
        r#"INSERT INTO billing.prices (product_id, billing_interval, amount_minor, currency)
           VALUES ($1, $2, $3, $4) RETURNING price_id AS "price_id: PriceId""#,
        product_id as ProductId,
        interval as BillingInterval,
        amount_minor,
        currency
    )
    .fetch_one(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct ProductMapping {
    pub product_id: ProductId,
    pub stripe_product_id: Option<StripeProductId>,
    pub synced_name: Option<String>,
    pub sync_state: SyncState,
    pub last_error: Option<String>,
    pub synced_at: Option<DateTime<Utc>>,
}

pub async fn product_mapping(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<Option<ProductMapping>> {
    sqlx::query_as!(
        ProductMapping,
        r#"SELECT product_id, stripe_product_id AS "stripe_product_id: StripeProductId", synced_name, sync_state AS "sync_state: SyncState", last_error, synced_at
           FROM billing.product_mappings WHERE product_id = $1"#,
        product_id as ProductId
    )
    .fetch_optional(conn)
    .await
}

/// Mark the product's mapping pending (made if missing).
pub async fn mapping_pending(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO billing.product_mappings (product_id, sync_state) VALUES ($1, 'pending')
         ON CONFLICT (product_id) DO UPDATE SET sync_state = 'pending'",
        product_id as ProductId
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn mapping_synced(
    conn: &mut PgConnection,
    product_id: ProductId,
    stripe_product_id: &StripeProductId,
    name: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.product_mappings
            SET stripe_product_id = $2, synced_name = $3, sync_state = 'synced', last_error = NULL, synced_at = now()
          WHERE product_id = $1",
        product_id as ProductId,
        stripe_product_id.as_str(),
        name
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn mapping_failed(conn: &mut PgConnection, product_id: ProductId, error: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.product_mappings SET sync_state = 'failed', last_error = $2 WHERE product_id = $1",
        product_id as ProductId,
        error
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn prices_pending(conn: &mut PgConnection, ids: &[PriceId]) -> sqlx::Result<()> {
    sqlx::query!("UPDATE billing.prices SET sync_state = 'pending' WHERE price_id = ANY ($1)", ids as &[PriceId])
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn price_synced(
    conn: &mut PgConnection,
    price_id: PriceId,
    stripe_price_id: &StripePriceId,
    stripe_active: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.prices
            SET stripe_price_id = $2, stripe_active = $3, sync_state = 'synced', last_error = NULL, synced_at = now()
          WHERE price_id = $1",
        price_id as PriceId,
        stripe_price_id.as_str(),
        stripe_active
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Forget a price's Stripe id Stripe says it lacks (still the one recorded), so the next sync
/// makes it again.
pub async fn forget_lost_price(conn: &mut PgConnection, price_id: PriceId, lost: &StripePriceId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.prices SET stripe_price_id = NULL, stripe_active = NULL, sync_state = 'pending'
          WHERE price_id = $1 AND stripe_price_id = $2",
        price_id as PriceId,
        lost.as_str()
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Forget a product's Stripe id Stripe says it lacks (still the one recorded), and its prices'
/// ids, which went with it: the next sync makes the product and its active prices again.
pub async fn forget_lost_product(
    conn: &mut PgConnection,
    product_id: ProductId,
    lost: &StripeProductId,
) -> sqlx::Result<()> {
    let forgot = sqlx::query!(
        "UPDATE billing.product_mappings SET stripe_product_id = NULL, synced_name = NULL, sync_state = 'pending'
          WHERE product_id = $1 AND stripe_product_id = $2",
        product_id as ProductId,
        lost.as_str()
    )
    .execute(&mut *conn)
    .await?;
    if forgot.rows_affected() > 0 {
        sqlx::query!(
            "UPDATE billing.prices SET stripe_price_id = NULL, stripe_active = NULL,
                    sync_state = CASE WHEN active THEN 'pending' ELSE 'unsynced' END
              WHERE product_id = $1 AND stripe_price_id IS NOT NULL",
            product_id as ProductId
        )
        .execute(conn)
        .await?;
    }
    Ok(())
}

pub async fn price_failed(conn: &mut PgConnection, price_id: PriceId, error: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE billing.prices SET sync_state = 'failed', last_error = $2 WHERE price_id = $1",
        price_id as PriceId,
        error
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Enqueue the product's sync unless one is waiting unclaimed (a claimed one's work may have read
/// the prices before this click's changes). The caller holds the product's sync lock, so two
/// clicks see each other's row. True when a row was written.
pub async fn enqueue_product_sync(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO core.outbox (kind, product_id)
         SELECT 'sync_product', $1
          WHERE NOT EXISTS (SELECT 1 FROM core.outbox o
                             WHERE o.product_id = $1 AND o.kind = 'sync_product'
                               AND o.processed_at IS NULL AND o.claimed_until IS NULL)",
        product_id as ProductId
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// The product and status of a subscription holding a ladder `product` is a tier of, if any: a
/// live subscription's item (conferred, displaced or suspended alike), or one waiting for its
/// first payment (`incomplete`), which will confer once paid.
pub async fn subscription_on_ladders_of(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    product_id: ProductId,
) -> sqlx::Result<Option<(String, SubscriptionStatus)>> {
    let row = sqlx::query!(
        r#"SELECT p.name, s.status AS "status: SubscriptionStatus" FROM core.subscription_items i
             JOIN core.subscriptions s USING (subscription_id)
             JOIN core.products p ON p.product_id = i.product_id
            WHERE s.organization_id = $1 AND i.removed_at IS NULL
              AND s.status NOT IN ('canceled', 'incomplete_expired')
              AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers a JOIN core.plan_ladder_tiers b USING (plan_ladder_id)
                           WHERE a.product_id = i.product_id AND b.product_id = $2)
            ORDER BY i.subscription_item_id LIMIT 1"#,
        organization_id as OrganizationId,
        product_id as ProductId
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.name, r.status)))
}

/// The organization's checkout sessions no return or event completed, for a price of a product
/// on a ladder `product` is a tier of (the product itself included), newest first: (Stripe
/// session id, price). Only those Stripe may still hold open: a session expires after 24 hours.
pub async fn open_checkouts_on_ladders_of(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    product_id: ProductId,
) -> sqlx::Result<Vec<(StripeSessionId, PriceId)>> {
    let rows = sqlx::query!(
        r#"SELECT cs.stripe_session_id, cs.price_id AS "price_id: PriceId" FROM billing.checkout_sessions cs
             JOIN billing.prices pr ON pr.price_id = cs.price_id
            WHERE cs.organization_id = $1 AND cs.completed_at IS NULL AND cs.created_at > now() - interval '24 hours'
              AND (pr.product_id = $2
                   OR EXISTS (SELECT 1 FROM core.plan_ladder_tiers a JOIN core.plan_ladder_tiers b USING (plan_ladder_id)
                               WHERE a.product_id = pr.product_id AND b.product_id = $2))
            ORDER BY cs.created_at DESC, cs.stripe_session_id DESC"#,
        organization_id as OrganizationId,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.stripe_session_id.into(), r.price_id)).collect())
}

/// The organization's newest recorded checkout session, if any (a new checkout's idempotency key
/// names it, so a second click made before another session is a replay of the first).
pub async fn latest_checkout_session(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
) -> sqlx::Result<Option<StripeSessionId>> {
    sqlx::query_scalar!(
        "SELECT stripe_session_id FROM billing.checkout_sessions WHERE organization_id = $1
          ORDER BY created_at DESC, stripe_session_id DESC LIMIT 1",
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
    .map(|s| s.map(StripeSessionId::from))
}

/// Whether the price is on sale: active, synced and not archived in Stripe, of a published paid
/// tier (the list `/billing` offers, and a switch's target, read the same).
pub async fn price_on_sale(conn: &mut PgConnection, price_id: PriceId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM billing.prices pr JOIN core.products p ON p.product_id = pr.product_id
                WHERE pr.price_id = $1 AND pr.active AND p.published AND pr.sync_state = 'synced'
                  AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false
                  AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers t WHERE t.product_id = pr.product_id AND t.rank > 0))
           AS "on_sale!""#,
        price_id as PriceId
    )
    .fetch_one(conn)
    .await
}

/// A reconcile request for each subscription an item of which `by` (a conferral just made) has
/// displaced, so its collection pause is decided now and not at the next sweep. One due now is
/// not written again while another due now waits unclaimed (a claimed one's work may have read
/// the state before this displacement). Inserts, no lock. How many were written.
pub async fn request_displaced_reconciles(conn: &mut PgConnection, by: ConferralId, cause: &str) -> sqlx::Result<u64> {
    let r = sqlx::query!(
        r#"INSERT INTO core.outbox (kind, subscription_id, payload)
           SELECT DISTINCT 'reconcile_subscription', s.subscription_id,
                  jsonb_build_object('stripe_subscription_id', s.stripe_subscription_id, 'cause', $2::text)
             FROM core.subscription_displacements sd
             JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
             JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
            WHERE sd.displaced_by = $1 AND sd.delivered_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM core.outbox o
                               WHERE o.subscription_id = s.subscription_id AND o.kind = 'reconcile_subscription'
                                 AND o.processed_at IS NULL AND o.due_at <= now() AND o.claimed_until IS NULL)"#,
        by as ConferralId,
        cause
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// Live subscriptions the console knows, a page at a time by id (the sweep's second pass).
pub async fn live_subscriptions_after(
    conn: &mut PgConnection,
    after: SubscriptionId,
    limit: i64,
) -> sqlx::Result<Vec<(SubscriptionId, StripeSubscriptionId)>> {
    let rows = sqlx::query!(
        r#"SELECT subscription_id AS "id: SubscriptionId", stripe_subscription_id FROM core.subscriptions
            WHERE subscription_id > $1 AND status NOT IN ('canceled', 'incomplete_expired')
            ORDER BY subscription_id LIMIT $2"#,
        after as SubscriptionId,
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.stripe_subscription_id.into())).collect())
}

/// The sweep's cursor and its unfinished walk through Stripe's events (migration 0004).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepState {
    /// The newest event time a completed walk read (NULL before the first).
    pub events_seen_until: Option<DateTime<Utc>>,
    /// The oldest event the unfinished walk has read: the next pass continues after it.
    pub resume_after: Option<StripeEventId>,
    /// The newest event time the unfinished walk read first.
    pub walk_newest: Option<DateTime<Utc>>,
}

pub async fn sweep_state(conn: &mut PgConnection) -> sqlx::Result<SweepState> {
    sqlx::query_as!(
        SweepState,
        r#"SELECT events_seen_until, resume_after AS "resume_after: StripeEventId", walk_newest FROM billing.sweep_state"#
    )
        .fetch_one(conn)
        .await
}

/// Record a pass: the cursor moves to `seen_until` when given (else stays), and the walk's resume
/// point is `resume` (None: no walk unfinished).
pub async fn set_sweep_state(
    conn: &mut PgConnection,
    seen_until: Option<DateTime<Utc>>,
    resume: Option<(&StripeEventId, DateTime<Utc>)>,
) -> sqlx::Result<()> {
    let (resume_after, walk_newest) = resume.unzip();
    sqlx::query!(
        "UPDATE billing.sweep_state
            SET events_seen_until = coalesce($1, events_seen_until), resume_after = $2, walk_newest = $3,
                last_run_at = now()",
        seen_until,
        resume_after.map(|e| e.as_str()),
        walk_newest
    )
    .execute(conn)
    .await?;
    Ok(())
}

// The scheduled-change ledger -------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct ScheduledChange {
    pub scheduled_change_id: i64,
    pub stripe_schedule_id: StripeScheduleId,
    pub plan_ladder_id: LadderId,
    pub from_product_id: ProductId,
    pub to_product_id: ProductId,
    pub effective_at: DateTime<Utc>,
}

pub async fn open_scheduled_changes(conn: &mut PgConnection, id: SubscriptionId) -> sqlx::Result<Vec<ScheduledChange>> {
    sqlx::query_as!(
        ScheduledChange,
        r#"SELECT scheduled_change_id, stripe_schedule_id, plan_ladder_id, from_product_id, to_product_id, effective_at
           FROM core.scheduled_changes WHERE subscription_id = $1 AND state = 'scheduled' ORDER BY scheduled_change_id"#,
        id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}

/// The (ladder, from, to) changes going from the `from` products to the `to` products: pairs
/// that are tiers of one ladder and differ.
pub async fn ladder_changes(
    conn: &mut PgConnection,
    from: &[ProductId],
    to: &[ProductId],
) -> sqlx::Result<Vec<(LadderId, ProductId, ProductId)>> {
    let rows = sqlx::query!(
        r#"SELECT a.plan_ladder_id AS "ladder!: LadderId", a.product_id AS "from_product!: ProductId",
                  b.product_id AS "to_product!: ProductId"
           FROM core.plan_ladder_tiers a JOIN core.plan_ladder_tiers b USING (plan_ladder_id)
           WHERE a.product_id = ANY ($1) AND b.product_id = ANY ($2) AND a.product_id <> b.product_id
           ORDER BY 1, 2, 3"#,
        from as &[ProductId],
        to as &[ProductId]
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.ladder, r.from_product, r.to_product)).collect())
}

pub async fn insert_scheduled_change(
    conn: &mut PgConnection,
    id: SubscriptionId,
    schedule: &StripeScheduleId,
    change: (LadderId, ProductId, ProductId),
    effective_at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.scheduled_changes (subscription_id, stripe_schedule_id, plan_ladder_id, from_product_id,
             to_product_id, effective_at)
         VALUES ($1, $2, $3, $4, $5, $6)",
        id as SubscriptionId,
        schedule.as_str(),
        change.0 as LadderId,
        change.1 as ProductId,
        change.2 as ProductId,
        effective_at
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn settle_scheduled_change(
    conn: &mut PgConnection,
    scheduled_change_id: i64,
    state: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.scheduled_changes SET state = $2, settled_at = now() WHERE scheduled_change_id = $1 AND state = 'scheduled'",
        scheduled_change_id,
        state
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether the product is a paid tier: a tier above a ladder's floor (rank 0 is what every
/// organization of a type gets for nothing, and is never sold).
pub async fn is_paid_tier(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.plan_ladder_tiers WHERE product_id = $1 AND rank > 0) AS "paid!""#,
        product_id as ProductId
    )
    .fetch_one(conn)
    .await
}

/// The webhook's intake in one statement (one round trip, atomic as any statement is): record the
/// event by its id and, only when it is new, insert the jobs about its objects (`kinds[i]` with
/// `payloads[i]`, each carrying its `object_key`), skipping an object whose job is still pending.
/// (recorded, jobs inserted); recorded false for an event seen before.
pub async fn record_event_with_jobs(
    conn: &mut PgConnection,
    event: (&StripeEventId, &str, Option<&str>, DateTime<Utc>),
    kinds: &[String],
    payloads: &[serde_json::Value],
    max_attempts: i32,
) -> sqlx::Result<(bool, i64)> {
    let row = sqlx::query!(
        r#"WITH e AS (
               INSERT INTO billing.stripe_events (event_id, event_type, object_id, stripe_created)
               VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING
               RETURNING event_id),
           j AS (
               INSERT INTO integration.jobs (kind, payload, max_attempts)
               SELECT k.kind, k.payload, $7 FROM e, unnest($5::text[], $6::jsonb[]) AS k(kind, payload)
               ON CONFLICT ((payload->>'object_key')) WHERE state = 'pending' AND payload ? 'object_key' DO NOTHING
               RETURNING 1)
           SELECT EXISTS (SELECT 1 FROM e) AS "recorded!", (SELECT count(*) FROM j) AS "jobs!""#,
        event.0.as_str(),
        event.1,
        event.2,
        event.3,
        kinds,
        payloads,
        max_attempts
    )
    .fetch_one(conn)
    .await?;
    Ok((row.recorded, row.jobs))
}

/// Whether Stripe no longer sells the price with this Stripe id, as the console last synced it
/// (None: the console has no such price). A price archived in the console but not yet synced is
/// still sold in Stripe.
pub async fn archived_in_stripe(
    conn: &mut PgConnection,
    stripe_price_id: &StripePriceId,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        r#"SELECT (stripe_active IS NOT DISTINCT FROM false) AS "archived!" FROM billing.prices
            WHERE stripe_price_id = $1"#,
        stripe_price_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

/// Use up a switch's quote: Stripe refused its change for good (a declined card, a price no
/// longer sold), and confirming it again would only replay that answer under its idempotency key.
pub async fn use_up_switch_quote(conn: &mut PgConnection, operation: &str) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM billing.switch_quotes WHERE operation = $1", operation).execute(conn).await?;
    Ok(())
}
