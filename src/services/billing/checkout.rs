//! Buying a plan: a member who owns an organization picks a tier's price on `/billing`; the
//! console makes (or reuses) the organization's Stripe customer and a Checkout Session, and sends
//! the browser to Stripe's page. The return runs ReconcileSubscription at once, racing the
//! webhook's job: the subscription's advisory lock makes the two converge on one outcome.

use crate::{
    db::Db,
    ids::{AccountId, OrganizationId, PriceId},
    integrations::stripe::{CheckoutRequest, Stripe},
    services::ServiceError,
    store::{accounts, billing as store},
};

use super::{
    reconcile::{Reconciled, reconcile_subscription},
    remote,
};

/// Where the checkout sends the browser back: the console's own address as the person reached it.
pub struct ReturnTo<'a> {
    pub base_url: &'a str,
}

/// Start a checkout; the Stripe page's address.
#[tracing::instrument(name = "Start a checkout", skip(db, stripe, back), fields(organization_id = %organization_id, price_id = %price_id))]
pub async fn start_checkout(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    price_id: PriceId,
    quantity: u64,
    back: ReturnTo<'_>,
) -> Result<String, ServiceError> {
    let (org_name, price, customer, live) = {
        let mut read = db.read().await?;
        let membership = owner_membership(read.conn(), who, organization_id).await?;
        let price = store::price(read.conn(), price_id).await?.ok_or(ServiceError::NotFound("price"))?;
        if !store::is_paid_tier(read.conn(), price.product_id).await? {
            return Err(ServiceError::Refused("This product is not a plan that can be bought.".into()));
        }
        let max = crate::store::catalog::max_quantity(read.conn(), price.product_id).await?.unwrap_or(1).max(1) as u64;
        if !(1..=max).contains(&quantity) {
            return Err(ServiceError::invalid(
                "quantity",
                if max == 1 {
                    "This plan is sold one at a time: choose 1 seat.".to_string()
                } else {
                    format!("Choose from 1 to {max} seats.")
                },
            ));
        }
        let customer = store::customer_of(read.conn(), organization_id).await?;
        let live = store::live_subscription_on_ladders_of(read.conn(), organization_id, price.product_id).await?;
        (membership.name, price, customer, live)
    };
    let Some(stripe_price) = price.stripe_price_id.as_deref().filter(|_| price.active) else {
        return Err(ServiceError::Refused(
            "This price is not on sale any more. Reload the page to see the current ones.".into(),
        ));
    };
    if let Some(held) = live {
        return Err(ServiceError::Refused(format!(
            "{org_name} already pays for {held} on this plan's ladder. Changing a paid plan in place is not available yet; \
             ask an operator to change it."
        )));
    }
    let customer = match customer {
        Some(c) => c,
        None => {
            let made = stripe.create_customer(organization_id.0, &org_name, None).await.map_err(remote)?;
            let mut tx = crate::db::begin(db, crate::db::TxKind::Plain).await?;
            let kept = store::put_customer(tx.conn(), organization_id, &made).await?;
            tx.commit().await?;
            kept
        }
    };
    let operation = crate::config::random_hex(12);
    let base = back.base_url.trim_end_matches('/');
    let success = format!("{base}/billing/return?session_id={{CHECKOUT_SESSION_ID}}");
    let cancel = format!("{base}/billing?checkout=canceled");
    let session = stripe
        .create_checkout(CheckoutRequest {
            operation: &operation,
            customer: &customer,
            price: stripe_price,
            quantity,
            organization_id: organization_id.0,
            success_url: &success,
            cancel_url: &cancel,
        })
        .await
        .map_err(remote)?;
    let mut tx = crate::db::begin(db, crate::db::TxKind::Plain).await?;
    store::insert_checkout_session(tx.conn(), &session.id, organization_id, price_id, who).await?;
    tx.commit().await?;
    session.url.ok_or_else(|| ServiceError::Remote {
        sentence: "Stripe made the checkout but gave no page to pay on. Nothing was charged; try again.".into(),
        transient: true,
    })
}

/// The member's membership of an organization they would buy for: not a member is "no such
/// organization" (nothing of it is shown), a member who is not an owner is refused.
pub async fn owner_membership(
    conn: &mut sqlx::PgConnection,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<accounts::Membership, ServiceError> {
    let membership = accounts::memberships(conn, who)
        .await?
        .into_iter()
        .find(|m| m.organization_id == organization_id)
        .ok_or(ServiceError::NotFound("organization"))?;
    if membership.role != "owner" {
        return Err(ServiceError::Refused(format!(
            "Only an owner of {} can buy a plan for it. Ask an owner to do it.",
            membership.name
        )));
    }
    Ok(membership)
}

/// How a checkout ended, as the return shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutOutcome {
    /// Paid: the subscription is reconciled and the plan in force.
    Paid { organization_id: OrganizationId },
    /// Not paid (yet): the session is open or expired.
    NotPaid { organization_id: OrganizationId },
}

/// The checkout's return: whose session it is (the member must belong to its organization), then
/// ReconcileSubscription at once if it was paid.
#[tracing::instrument(name = "Finish a checkout", skip(db, stripe))]
pub async fn finish_checkout(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    session_id: &str,
) -> Result<CheckoutOutcome, ServiceError> {
    if session_id.is_empty()
        || session_id.len() > 255
        || !session_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(ServiceError::NotFound("checkout"));
    }
    let organization_id = {
        let mut read = db.read().await?;
        let org = store::checkout_session_organization(read.conn(), session_id)
            .await?
            .ok_or(ServiceError::NotFound("checkout"))?;
        if !accounts::memberships(read.conn(), who).await?.iter().any(|m| m.organization_id == org) {
            return Err(ServiceError::NotFound("checkout"));
        }
        org
    };
    let session = stripe.checkout(session_id).await.map_err(remote)?.ok_or(ServiceError::NotFound("checkout"))?;
    let Some(subscription) = session.subscription.filter(|_| session.status == "complete") else {
        return Ok(CheckoutOutcome::NotPaid { organization_id });
    };
    match reconcile_subscription(db, stripe, &subscription).await? {
        Reconciled::Converged { .. } | Reconciled::Stale => {}
        Reconciled::Unknown => return Err(ServiceError::NotFound("subscription")),
    }
    let mut tx = crate::db::begin(db, crate::db::TxKind::Plain).await?;
    store::complete_checkout_session(tx.conn(), session_id, &subscription).await?;
    tx.commit().await?;
    Ok(CheckoutOutcome::Paid { organization_id })
}
