//! The billing pages' reads: a product's prices and Stripe state (operator), a member's billing
//! (plan, subscriptions, tiers on sale, invoices), whose a checkout is, and the operator's
//! billing overview. Nothing here writes or calls Stripe.

use std::sync::Arc;

use crate::{
    db::{Db, DbError},
    ids::{AccountId, OrganizationId, PriceId, ProductId, StripeSessionId},
    services::ServiceError,
    store::{
        accounts::{self, MemberHome, Membership},
        billing::{self as store, Price, ProductMapping},
        billing_reads::{self as reads, BuyableTier, OnSaleMemo, OrgInvoice, OrgSubscription},
    },
};

pub use crate::store::billing_reads::{
    EVENTS_SHOWN, EventRow, INVOICES_SHOWN, OUTBOX_SHOWN, OutboxCounts, OutboxListRow, SUBSCRIPTIONS_SHOWN,
    SubscriptionListRow,
};

/// A product's prices (active first) and its own Stripe mapping, if it was ever synced.
pub struct ProductPrices {
    pub prices: Vec<Price>,
    pub mapping: Option<ProductMapping>,
}

#[tracing::instrument(name = "Read a product's prices", skip_all, fields(product_id = %product_id))]
pub async fn product_prices(db: &Db, product_id: ProductId) -> Result<ProductPrices, DbError> {
    let mut c = db.read().await?;
    Ok(ProductPrices {
        prices: store::prices_of(c.conn(), product_id).await?,
        mapping: store::product_mapping(c.conn(), product_id).await?,
    })
}

/// One price, for the page that acts on it.
#[tracing::instrument(name = "Read a price", skip_all, fields(price_id = %price_id))]
pub async fn price(db: &Db, price_id: PriceId) -> Result<Option<Price>, DbError> {
    let mut c = db.read().await?;
    Ok(store::price(c.conn(), price_id).await?)
}

/// What a member's billing page shows: each of their organizations (as the home reads it) with
/// its subscriptions and invoices, and the tiers on sale.
pub struct MemberBilling {
    pub organizations: Vec<MemberHome>,
    pub subscriptions: Vec<OrgSubscription>,
    pub invoices: Vec<OrgInvoice>,
    pub on_sale: Arc<Vec<BuyableTier>>,
}

#[tracing::instrument(name = "Read a member's billing", skip_all, fields(account_id = %account_id))]
pub async fn member_billing(db: &Db, account_id: AccountId, on_sale: &OnSaleMemo) -> Result<MemberBilling, DbError> {
    // One prepared statement (`core.member_billing`) on the prepared pool: every member page view
    // of /billing is one round trip after its session's.
    Ok(crate::db::tx::on_prepared(db, async |c| reads::member_billing(c, account_id, on_sale).await).await?.into())
}

impl From<reads::MemberBillingDoc> for MemberBilling {
    fn from(doc: reads::MemberBillingDoc) -> Self {
        MemberBilling {
            subscriptions: doc.subscriptions,
            invoices: doc.invoices,
            on_sale: doc.on_sale,
            organizations: doc.home,
        }
    }
}

/// The member's membership of an organization they want to buy for: not a member is "no such
/// organization", a member who is not an owner is refused in the words the checkout uses.
/// Read before anything else, so a refusal never reaches Stripe (or needs it connected).
#[tracing::instrument(name = "Read who may buy for an organization", skip_all, fields(account_id = %who, organization_id = %organization_id))]
pub async fn buyer_standing(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<Membership, ServiceError> {
    let mut c = db.read().await?;
    super::checkout::owner_membership(c.conn(), who, organization_id).await
}

/// The organization of a checkout session the console started, when the member belongs to it;
/// None for a session the console does not know or one of another organization.
#[tracing::instrument(name = "Read whose a checkout is", skip_all, fields(account_id = %who))]
pub async fn members_checkout(
    db: &Db,
    who: AccountId,
    session_id: &StripeSessionId,
) -> Result<Option<OrganizationId>, DbError> {
    let mut c = db.read().await?;
    let Some(org) = store::checkout_session_organization(c.conn(), session_id).await? else { return Ok(None) };
    let mine = accounts::memberships(c.conn(), who).await?.iter().any(|m| m.organization_id == org);
    Ok(mine.then_some(org))
}

/// The operator's billing overview.
pub struct OperatorBilling {
    pub live_by_status: Vec<(crate::states::SubscriptionStatus, i64)>,
    pub outbox: OutboxCounts,
    pub events_last_day: i64,
    pub subscriptions: Vec<SubscriptionListRow>,
    pub subscription_total: i64,
    pub unprocessed: Vec<OutboxListRow>,
    pub events: Vec<EventRow>,
}

#[tracing::instrument(name = "Read the billing overview", skip_all)]
pub async fn operator_billing(db: &Db) -> Result<OperatorBilling, DbError> {
    let mut c = db.read().await?;
    Ok(OperatorBilling {
        live_by_status: reads::live_subscription_counts(c.conn()).await?,
        outbox: reads::outbox_counts(c.conn()).await?,
        events_last_day: reads::events_last_day(c.conn()).await?,
        subscriptions: reads::newest_subscriptions(c.conn(), SUBSCRIPTIONS_SHOWN).await?,
        subscription_total: reads::subscription_count(c.conn()).await?,
        unprocessed: reads::unprocessed_outbox(c.conn(), OUTBOX_SHOWN).await?,
        events: reads::latest_events(c.conn(), EVENTS_SHOWN).await?,
    })
}
