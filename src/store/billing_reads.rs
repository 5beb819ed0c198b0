//! The billing pages' reads: a member's subscriptions, invoices and the tiers they can buy; the
//! operator's view of subscriptions, the outbox and Stripe's events. Nothing here writes.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{
    accounts::{Resumed, token_hash},
    json_document, millis,
};
use crate::{
    ids::{
        AccountId, OrganizationId, OutboxId, PriceId, ProductId, StripeEventId, StripeInvoiceId, StripeSubscriptionId,
        SubscriptionId,
    },
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
#[derive(Debug, Clone, serde::Deserialize)]
pub struct OrgSubscription {
    pub subscription_id: SubscriptionId,
    pub organization_id: OrganizationId,
    pub stripe_subscription_id: StripeSubscriptionId,
    pub status: SubscriptionStatus,
    pub current_period_end: Option<DateTime<Utc>>,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    pub ended_at: Option<DateTime<Utc>>,
    /// The products of its items Stripe still lists, by name.
    pub products: Vec<String>,
    /// The ladders those products are tiers of: a live subscription holds them (a checkout on one
    /// of them is refused: the plan is switched in place instead).
    pub ladders: Vec<String>,
    /// Its items by ladder, with the interval and currency a switch keeps.
    #[serde(default)]
    pub items: Vec<HeldItem>,
    /// The changes scheduled ahead (a downgrade at the period's end).
    #[serde(default)]
    pub scheduled: Vec<ChangeAhead>,
}

/// A subscription's item on a ladder.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct HeldItem {
    pub ladder_id: crate::ids::LadderId,
    pub ladder: String,
    pub product: String,
    pub rank: i32,
    /// None for an item whose price the catalog does not know.
    pub interval: Option<BillingInterval>,
    pub currency: Option<String>,
    #[serde(default)]
    pub price_id: Option<PriceId>,
    #[serde(default = "one")]
    pub quantity: i64,
    #[serde(default = "one_i32")]
    pub max_quantity: i32,
}

fn one() -> i64 {
    1
}

fn one_i32() -> i32 {
    1
}

/// A change a subscription's schedule will make.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ChangeAhead {
    pub ladder_id: crate::ids::LadderId,
    pub from: String,
    pub to: String,
    pub effective_at: DateTime<Utc>,
}

/// The subscriptions of these organizations, live ones first, newest first.
/// One invoice, as a member reads it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct OrgInvoice {
    pub organization_id: OrganizationId,
    pub stripe_invoice_id: StripeInvoiceId,
    pub number: Option<String>,
    pub status: InvoiceStatus,
    pub currency: String,
    pub amount_due: i64,
    pub amount_remaining: i64,
    pub hosted_invoice_url: Option<String>,
    pub stripe_created: DateTime<Utc>,
}

/// A tier someone can buy: a published product of rank above 0 on a ladder, at a price that is
/// active and that Stripe has (synced, and not archived there).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BuyableTier {
    pub ladder: String,
    pub rank: i32,
    #[serde(default = "one_i32")]
    pub max_quantity: i32,
    pub product_id: ProductId,
    pub product: String,
    pub price_id: PriceId,
    pub billing_interval: BillingInterval,
    pub amount_minor: i64,
    pub currency: String,
}

/// The member's billing page, as `core.member_billing` gives it in one statement: the home's
/// document, each organization's subscriptions (live first, newest first), its newest
/// [`INVOICES_SHOWN`] invoices, and every tier on sale (by ladder, then rank, monthly first).
#[derive(Debug, Clone)]
pub struct MemberBillingDoc {
    pub home: Vec<super::accounts::MemberHome>,
    pub subscriptions: Vec<OrgSubscription>,
    pub invoices: Vec<OrgInvoice>,
    pub on_sale: Arc<Vec<BuyableTier>>,
}

/// The tiers on sale as a billing view last read them, with the snapshot it read them in. The
/// list is the same for every member, so `core.member_billing` is given that snapshot and reads
/// the list again only when a transaction that wrote the catalog committed since (migration
/// 0034). One per server, because a snapshot means something only in its own database.
#[derive(Default)]
pub struct OnSaleMemo(Mutex<Option<Arc<OnSale>>>);

/// A list on sale and the snapshot (`pg_snapshot` as text) it was read in.
#[derive(Debug)]
pub struct OnSale {
    as_of: String,
    tiers: Arc<Vec<BuyableTier>>,
}

impl OnSaleMemo {
    /// What the memo holds now: its snapshot goes with the statement, and the answer is read
    /// against it (`billing_doc`), whatever another view puts in the memo meanwhile.
    pub fn seen(&self) -> Option<Arc<OnSale>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn keep(&self, read: Arc<OnSale>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(read);
    }
}

impl OnSale {
    pub fn as_of(&self) -> &str {
        &self.as_of
    }
}

/// The document as the statement writes it: `on_sale` is null when the catalog is unchanged
/// since the snapshot it was given, and `on_sale_as_of` is the snapshot a list read anew was
/// read in (null for a member of no organization, who is shown none).
#[derive(serde::Deserialize)]
struct BillingJson {
    home: Vec<super::accounts::MemberHome>,
    subscriptions: Vec<OrgSubscription>,
    invoices: Vec<OrgInvoice>,
    on_sale: Option<Vec<BuyableTier>>,
    on_sale_as_of: Option<String>,
}

/// Reads `core.member_billing`'s document, given what the memo held when the statement was sent
/// (`seen`); a list read anew replaces the memo's.
pub(crate) fn billing_doc(json: &str, seen: Option<Arc<OnSale>>, memo: &OnSaleMemo) -> sqlx::Result<MemberBillingDoc> {
    let doc: BillingJson = json_document(json)?;
    let on_sale = match (doc.on_sale, doc.on_sale_as_of, seen) {
        (Some(tiers), Some(as_of), _) => {
            let tiers = Arc::new(tiers);
            memo.keep(Arc::new(OnSale { as_of, tiers: tiers.clone() }));
            tiers
        }
        (Some(tiers), None, _) => Arc::new(tiers),
        (None, _, Some(seen)) => seen.tiers.clone(),
        (None, _, None) => {
            return Err(sqlx::Error::Decode("the billing document kept a list on sale it was not given".into()));
        }
    };
    Ok(MemberBillingDoc { home: doc.home, subscriptions: doc.subscriptions, invoices: doc.invoices, on_sale })
}

pub async fn member_billing(
    conn: &mut PgConnection,
    account_id: AccountId,
    memo: &OnSaleMemo,
) -> sqlx::Result<MemberBillingDoc> {
    let seen = memo.seen();
    let json = sqlx::query_scalar!(
        r#"SELECT core.member_billing($1, $2, $3::text::pg_snapshot) AS "billing!""#,
        account_id as AccountId,
        INVOICES_SHOWN as i32,
        seen.as_deref().map(OnSale::as_of)
    )
    .fetch_one(conn)
    .await?;
    billing_doc(&json, seen, memo)
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
    pub stripe_subscription_id: StripeSubscriptionId,
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
    pub stripe_subscription_id: Option<StripeSubscriptionId>,
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
        r#"SELECT o.outbox_id, o.kind, s.stripe_subscription_id AS "stripe_subscription_id?: StripeSubscriptionId",
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
    pub event_id: StripeEventId,
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

// The billing page with its session -----------------------------------------------------------------

/// `resume_session`, and the member's billing page (`core.member_billing`) in the same statement:
/// the billing page in one round trip, as the home's. Nothing is read for a session that has ended.
pub async fn resume_session_with_billing(
    conn: &mut PgConnection,
    token: &str,
    touch_every: Duration,
    on_sale: &OnSaleMemo,
) -> sqlx::Result<Option<Resumed<MemberBillingDoc>>> {
    let seen = on_sale.seen();
    let row = sqlx::query!(
        r#"SELECT s.account_id AS "account_id!", s.email AS "email!", s.is_operator AS "is_operator!",
                  s.touch_due AS "touch_due!", s.verified AS "verified!", core.member_billing(s.account_id, $3, $4::text::pg_snapshot) AS "billing!"
           FROM core.live_session($1::bytea, $2::bigint * interval '1 millisecond') s"#,
        &token_hash(token)[..],
        millis(touch_every),
        INVOICES_SHOWN as i32,
        seen.as_deref().map(OnSale::as_of)
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        let doc = billing_doc(&r.billing, seen, on_sale)?;
        Ok(Resumed::new(r.account_id, r.email, r.is_operator, r.verified, r.touch_due, doc))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(on_sale: &str, as_of: &str) -> String {
        format!(
            r#"{{"home": [], "subscriptions": [], "invoices": [], "on_sale": {on_sale}, "on_sale_as_of": {as_of}}}"#
        )
    }

    const BASIC: &str = r#"[{"ladder": "Wiki hosting", "rank": 1, "max_quantity": 1, "product_id": 2, "product": "Basic",
        "price_id": 7, "billing_interval": "month", "amount_minor": 500, "currency": "eur"}]"#;

    /// A list read anew is kept with its snapshot; a list left out is the kept one; a member of no
    /// organization's empty list keeps nothing; a list left out with nothing kept is an error,
    /// never an empty list.
    #[test]
    fn the_document_is_read_against_the_kept_list() {
        let memo = OnSaleMemo::default();
        let read = billing_doc(&doc(BASIC, r#""10:12:""#), None, &memo).unwrap();
        assert_eq!(read.on_sale.len(), 1);
        let kept = memo.seen().expect("kept");
        assert_eq!(kept.as_of(), "10:12:");

        let unchanged = billing_doc(&doc("null", "null"), Some(kept.clone()), &memo).unwrap();
        assert_eq!(unchanged.on_sale, read.on_sale);

        let nobody = billing_doc(&doc("[]", "null"), Some(kept), &memo).unwrap();
        assert!(nobody.on_sale.is_empty());
        assert_eq!(memo.seen().unwrap().as_of(), "10:12:", "an empty list for no organization is not kept");

        assert!(billing_doc(&doc("null", "null"), None, &OnSaleMemo::default()).is_err());
    }
}
