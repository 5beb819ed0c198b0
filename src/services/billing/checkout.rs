//! Buying a plan: a member who owns an organization picks a tier's price on `/billing`; the
//! console makes (or reuses) the organization's Stripe customer and a Checkout Session, and sends
//! the browser to Stripe's page. The return runs ReconcileSubscription at once, racing the
//! webhook's job: the subscription's advisory lock makes the two converge on one outcome.

use crate::{
    db::{Db, Tx, TxKind, tx::within},
    ids::{AccountId, OrganizationId, PriceId, StripeCustomerId, StripePriceId, StripeSessionId},
    integrations::stripe::{CheckoutRequest, CheckoutSnapshot, CheckoutStatus, Refusal, Stripe, StripeFailure},
    services::ServiceError,
    states::SubscriptionStatus,
    store::{accounts, billing as store},
};

use super::{
    catalog_sync::{resync_lost_price, sync_product},
    reconcile::{Reconciled, reconcile_subscription},
    remote,
};

/// Seats, as a member asks for them: a whole number (how many a plan sells is the path's to say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seats(pub u64);

impl Seats {
    pub fn parse(s: &str) -> Result<Seats, String> {
        s.trim().parse::<u64>().map(Seats).map_err(|_| "Give the seats as a whole number.".to_string())
    }
}

/// Where the checkout sends the browser back: the console's own address as the person reached it.
pub struct ReturnTo<'a> {
    pub base_url: &'a str,
}

/// Start a checkout; the Stripe page's address. One checkout at a time per ladder: a session
/// still open for the same price and seats is given back, one for another tier of the ladder is
/// expired at Stripe first, so a member never pays two sessions for one ladder.
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
    let (org_name, price, customer, held, open, latest) = {
        let mut read = db.read().await?;
        let membership = owner_membership(read.conn(), who, organization_id).await?;
        let price = store::price(read.conn(), price_id).await?.ok_or(ServiceError::NotFound("price"))?;
        if !store::is_paid_tier(read.conn(), price.product_id).await? {
            return Err(ServiceError::Refused("This product is not a plan that can be bought.".into()));
        }
        // The same on-sale rule as the tiers /billing offers and a switch's target: a hand-made
        // form names no unpublished product, archived price or price Stripe lacks.
        if !store::price_on_sale(read.conn(), price_id).await? {
            return Err(ServiceError::Refused(
                "This price is not on sale any more. Reload the page to see the current ones.".into(),
            ));
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
        let held = store::subscription_on_ladders_of(read.conn(), organization_id, price.product_id).await?;
        let open = store::open_checkouts_on_ladders_of(read.conn(), organization_id, price.product_id).await?;
        let latest = store::latest_checkout_session(read.conn(), organization_id).await?;
        (membership.name, price, customer, held, open, latest)
    };
    let Some(stripe_price) = price.stripe_price_id.as_ref() else {
        return Err(ServiceError::Refused(
            "This price is not on sale any more. Reload the page to see the current ones.".into(),
        ));
    };
    match held {
        Some((held, SubscriptionStatus::Incomplete)) => {
            return Err(ServiceError::Refused(format!(
                "{org_name} has a {held} subscription on this plan's ladder waiting for its first payment. Pay its \
                 open invoice (under Invoices on the billing page), or wait a day for Stripe to drop it, before buying \
                 another plan there."
            )));
        }
        Some((held, _)) => {
            return Err(ServiceError::Refused(format!(
                "{org_name} already pays for {held} on this plan's ladder. To change the tier, use Switch… beside \
                 {held} under Subscriptions on the billing page."
            )));
        }
        None => {}
    }
    if let Some(url) = settle_open_checkouts(stripe, &org_name, &open, price_id, quantity).await? {
        return Ok(url);
    }
    let customer = match customer {
        Some(c) => c,
        None => make_customer(db, stripe, organization_id, &org_name).await?,
    };
    // The operation is this purchase, of the price Stripe has now, after the organization's
    // newest recorded session: a double click (or a retry after a lost answer) sends the same key
    // and gets the same session, and any later click, after that session was recorded, is a new
    // operation. So is one after the price was made again in Stripe (a key keeps its answer, even
    // Stripe's "no such price").
    let operation = |stripe_price: &StripePriceId| {
        format!(
            "organization:{}:price:{}:quantity:{quantity}:after:{}:stripe:{stripe_price}",
            organization_id.0,
            price_id.0,
            latest.as_ref().map_or("none", |l| l.as_str())
        )
    };
    let base = back.base_url.trim_end_matches('/');
    let success = format!("{base}/billing/return?session_id={{CHECKOUT_SESSION_ID}}");
    let cancel = format!("{base}/billing?checkout=canceled");
    let checkout = async |stripe_price: &StripePriceId, operation: &str| -> Result<CheckoutSnapshot, StripeFailure> {
        stripe
            .create_checkout(CheckoutRequest {
                operation,
                customer: &customer,
                price: stripe_price,
                quantity,
                price_id: price_id.0,
                organization_id: organization_id.0,
                success_url: &success,
                cancel_url: &cancel,
            })
            .await
    };
    let session = match checkout(stripe_price, &operation(stripe_price)).await {
        Ok(s) => s,
        // Stripe lost the price (a test-mode account reset): synced again, then asked once more.
        Err(f) if f.lost_catalog() => {
            let lost = |why: &str| {
                tracing::warn!(plan = %price.product_id, %price_id, stripe_price = %stripe_price, why,
                    "Stripe has no such price and it could not be made again: the checkout was refused");
                ServiceError::Refused(
                    "This plan cannot be bought right now: Stripe no longer has its price, and the console could not \
                     give it to Stripe again. Nothing was charged. The operators have been told; please try again \
                     later."
                        .into(),
                )
            };
            let renewed = match resync_lost_price(db, stripe, price.product_id, price_id, stripe_price).await {
                Ok(Some(p)) => p,
                Ok(None) => return Err(lost("the price is no longer active")),
                Err(e) => {
                    // The outbox tries again, so the price comes back on sale without an operator.
                    if let Err(q) = sync_product(db, price.product_id).await {
                        tracing::warn!(plan = %price.product_id, error = %q, "the lost price's sync was not queued");
                    }
                    return Err(lost(&e.to_string()));
                }
            };
            tracing::warn!(plan = %price.product_id, %price_id, lost = %stripe_price, now = %renewed,
                "Stripe had no such price: it was synced again and the checkout goes on");
            match checkout(&renewed, &operation(&renewed)).await {
                Ok(s) => s,
                Err(f) if f.lost_catalog() => return Err(lost(&f.to_string())),
                Err(f) => return Err(remote(f)),
            }
        }
        // Another click of the same purchase used the key with other metadata (its request id).
        Err(f) if f.refusal() == Refusal::KeyReused => {
            return Err(ServiceError::Refused(
                "Another click is starting this checkout. Reload the billing page in a moment and choose Buy again."
                    .into(),
            ));
        }
        Err(f) => return Err(remote(f)),
    };
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        Ok::<_, ServiceError>(
            store::insert_checkout_session(tx.conn(), &session.id, organization_id, price_id, who).await?,
        )
    })
    .await?;
    session.url.ok_or_else(|| ServiceError::Remote {
        sentence: "Stripe made the checkout but gave no page to pay on. Nothing was charged; try again.".into(),
        transient: true,
    })
}

/// The organization's Stripe customer, made once. The organization's key makes two racing
/// clicks one customer; when Stripe refuses the key (used by another request, whose request id
/// in the metadata differs) and no customer was recorded from it, this attempt makes its own.
async fn make_customer(
    db: &Db,
    stripe: &Stripe,
    organization_id: OrganizationId,
    org_name: &str,
) -> Result<StripeCustomerId, ServiceError> {
    let made = match stripe.create_customer(organization_id.0, org_name, None).await {
        Ok(c) => c,
        Err(f) if f.refusal() == Refusal::KeyReused => {
            let recorded = {
                let mut read = db.read().await?;
                store::customer_of(read.conn(), organization_id).await?
            };
            if let Some(c) = recorded {
                return Ok(c);
            }
            let attempt = crate::trace_context::current().unwrap_or_else(|| crate::config::random_hex(8));
            stripe.create_customer_again(organization_id.0, org_name, &attempt).await.map_err(remote)?
        }
        Err(f) => return Err(remote(f)),
    };
    // The organization's row: this one, or the one a racing click recorded first.
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        Ok::<_, ServiceError>(store::put_customer(tx.conn(), organization_id, &made).await?)
    })
    .await
}

/// The organization's checkouts still open on the ladder, asked of Stripe (no transaction open):
/// the newest open one for this very price and seat count is given back (its page's address);
/// every other open one is expired, so it can no longer be paid. One paid meanwhile refuses: the
/// organization now pays for a plan on the ladder.
async fn settle_open_checkouts(
    stripe: &Stripe,
    org_name: &str,
    open: &[(StripeSessionId, PriceId)],
    price_id: PriceId,
    quantity: u64,
) -> Result<Option<String>, ServiceError> {
    let paid = || {
        ServiceError::Refused(format!(
            "A checkout for {org_name} on this plan's ladder has just been paid. Reload the billing page to see the \
             plan; to change its tier afterwards, use Switch… beside it."
        ))
    };
    let mut reuse = None;
    for (id, session_price) in open {
        let Some(session) = stripe.checkout(id).await.map_err(remote)? else { continue };
        match session.status {
            CheckoutStatus::Complete => return Err(paid()),
            CheckoutStatus::Open => {
                let same = *session_price == price_id
                    && session.price_id == Some(price_id.0)
                    && session.quantity == Some(quantity)
                    && session.url.is_some();
                if same && reuse.is_none() {
                    reuse = session.url;
                    continue;
                }
                match stripe.expire_checkout(id).await.map_err(remote)? {
                    Some(after) if after.status == CheckoutStatus::Complete => return Err(paid()),
                    _ => tracing::info!(session = %id, "an open checkout on the same ladder was expired"),
                }
            }
            // Expired (by time or by an earlier click): nothing to do.
            CheckoutStatus::Expired => {}
        }
    }
    Ok(reuse)
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
    session_id: &StripeSessionId,
) -> Result<CheckoutOutcome, ServiceError> {
    let text = session_id.as_str();
    if text.is_empty() || text.len() > 255 || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
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
    let Some(subscription) = session.subscription.filter(|_| session.status == CheckoutStatus::Complete) else {
        return Ok(CheckoutOutcome::NotPaid { organization_id });
    };
    match reconcile_subscription(db, stripe, &subscription).await? {
        Reconciled::Converged { .. } | Reconciled::Stale => {}
        Reconciled::Unknown => return Err(ServiceError::NotFound("subscription")),
    }
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        Ok::<_, ServiceError>(store::complete_checkout_session(tx.conn(), session_id, &subscription).await?)
    })
    .await?;
    Ok(CheckoutOutcome::Paid { organization_id })
}
