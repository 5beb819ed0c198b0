//! A member's changes to a paid plan (design: billing.md "Plan switch"; spec: "Subscription
//! reconcile"): switch a ladder's tier (an upgrade now, prorated and charged at once, after the
//! member saw the amount; a downgrade at the period's end through a subscription schedule), undo
//! a scheduled downgrade, cancel at the period's end and undo that. Each checks the request
//! against the console's rows and Stripe's subscription, then only calls Stripe, with no
//! transaction open, and converges through ReconcileSubscription: the ledger rows are written by
//! convergeScheduledChanges alone, the positions by the reconcile's branches.

use chrono::{DateTime, Duration, Utc};

use crate::{
    db::{Db, locks::PathLocks},
    ids::{
        AccountId, LadderId, OrganizationId, PriceId, StripeItemId, StripePriceId, StripeSubscriptionId, SubscriptionId,
    },
    integrations::stripe::{PhaseItems, Preview, Refusal, Stripe, StripeFailure, SubscriptionSnapshot},
    services::ServiceError,
    states::{SubscriptionBranch, SubscriptionStatus},
    store::{billing as billing_store, plan_changes as store},
};

use super::{enqueue_reconcile, reconcile::reconcile_subscription, remote, remote_write};

/// How long an upgrade's quoted amount holds: the confirmation prorates for the quoted moment
/// only within this window, so a stale (or edited) form cannot buy the rest of a period cheap.
pub const QUOTE_HOLDS: Duration = Duration::minutes(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchKind {
    /// A higher tier: now, the difference for the rest of the period charged at once.
    Upgrade,
    /// A lower tier: at the end of the period already paid for.
    Downgrade,
    /// More seats of the same tier: now, charged at once like an upgrade.
    MoreSeats,
    /// Fewer seats of the same tier: now, the unused time of the seats removed credited on the
    /// next invoice.
    FewerSeats,
}

impl SwitchKind {
    /// Applies now with the difference charged at once (a preview shows it first).
    pub fn charged_now(self) -> bool {
        matches!(self, SwitchKind::Upgrade | SwitchKind::MoreSeats)
    }
}

/// What a switch will do, shown before the member confirms it.
#[derive(Debug, Clone)]
pub struct SwitchQuote {
    pub kind: SwitchKind,
    pub organization_id: OrganizationId,
    pub subscription_id: SubscriptionId,
    pub price_id: PriceId,
    pub ladder: String,
    pub from: String,
    pub to: String,
    /// Seats now, and after the switch.
    pub from_quantity: u64,
    pub to_quantity: u64,
    /// An upgrade's charge today, as Stripe previews it.
    pub charge: Option<Preview>,
    /// The moment the upgrade prorates for (the confirmation carries it back).
    pub proration_date: Option<i64>,
    /// This quote's own id: the confirmation carries it back, and Stripe's idempotency keys are
    /// made from it, so confirming twice changes (and charges) once, and a later quote is new.
    pub operation: QuoteId,
    /// When the switch applies: now for an upgrade, the period's end for a downgrade.
    pub effective_at: DateTime<Utc>,
}

/// A quote's id as the confirmation carries it back. Any text is read: whether it names a quote
/// of this switch is the switch's to say (`switch_plan` refuses it in its own words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteId(String);

impl QuoteId {
    /// Spaces around are dropped; nothing is refused here.
    pub fn parse(s: &str) -> Result<QuoteId, String> {
        Ok(QuoteId(s.trim().to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A switch request that passed every check, with what Stripe holds now.
struct Checked {
    quote: SwitchQuote,
    snapshot: SubscriptionSnapshot,
    item: StripeItemId,
    from_price: StripePriceId,
    to_price: StripePriceId,
    /// The seats after the switch.
    quantity: u64,
    period_start: DateTime<Utc>,
}

/// The organization's subscription, when the member may change it: not a member is "no such
/// subscription", a member who is not an owner is refused.
async fn owned_subscription(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
) -> Result<(String, store::HeldSubscription, Vec<store::AheadChange>), ServiceError> {
    let mut read = db.read().await?;
    let membership = plan_owner(read.conn(), who, organization_id).await?;
    let held = store::held_subscription(read.conn(), organization_id, subscription_id)
        .await?
        .ok_or(ServiceError::NotFound("subscription"))?;
    let ahead = store::changes_ahead(read.conn(), subscription_id).await?;
    Ok((membership.name, held, ahead))
}

/// The member's membership when they may change the organization's plan: not a member is "no
/// such organization", a member who is not an owner is refused.
pub(super) async fn plan_owner(
    conn: &mut sqlx::PgConnection,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<crate::store::accounts::Membership, ServiceError> {
    super::checkout::owner_membership(conn, who, organization_id).await.map_err(|e| match e {
        ServiceError::Refused(_) => ServiceError::Refused(
            "Only an owner of the organization can change its plan. Ask an owner to do it.".into(),
        ),
        e => e,
    })
}

fn day(t: DateTime<Utc>) -> String {
    t.format("%-d %b %Y").to_string()
}

impl Checked {
    /// The price the item moves to, None when it keeps its own (a change of seats; its price may
    /// be one Stripe no longer sells, which Stripe keeps but takes in no request).
    fn new_price(&self) -> Option<&StripePriceId> {
        (self.to_price != self.from_price).then_some(&self.to_price)
    }
}

/// Every check of a switch, in the order a member would want to hear them.
async fn check_switch(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    price_id: PriceId,
    quantity: Option<u64>,
) -> Result<Checked, ServiceError> {
    let (org, held, ahead) = owned_subscription(db, who, organization_id, subscription_id).await?;
    if held.status.branch() != SubscriptionBranch::Active {
        return Err(ServiceError::Refused(format!(
            "The subscription is {}: only an active subscription's plan can be changed.",
            held.status
        )));
    }
    if held.cancel_at_period_end {
        return Err(ServiceError::Refused(
            "The subscription is set to end at the period's end: keep it first, then switch.".into(),
        ));
    }
    let target = {
        let mut read = db.read().await?;
        store::switch_target(read.conn(), subscription_id, price_id).await?.ok_or(ServiceError::NotFound("price"))?
    };
    // The subscription's own price stays its price after an operator replaced it (Stripe keeps an
    // archived price for the subscriptions on it), so its seats can still change: checked against
    // Stripe's item below.
    let own_tier = target.item.as_ref().is_some_and(|i| i.from_product_id == target.to_product_id);
    let Some(to_price) = target.to_stripe_price.clone().filter(|_| target.on_sale || own_tier) else {
        return Err(ServiceError::Refused(format!(
            "{} at this price is not on sale any more. Reload the page to see the current plans.",
            target.to_product
        )));
    };
    let Some(item) = target.item else {
        return Err(ServiceError::Refused(format!(
            "{org} pays for no plan on {}'s ladder with this subscription: buy it instead.",
            target.to_product
        )));
    };
    let same_tier = item.from_product_id == target.to_product_id;
    if same_tier && quantity.is_none() {
        return Err(ServiceError::Refused(format!("{} is already the plan on {}.", target.to_product, item.ladder)));
    }
    if item.from_interval != Some(target.to_interval) || item.from_currency.as_deref() != Some(&target.to_currency) {
        return Err(ServiceError::Refused(format!(
            "{} is billed {} in another currency or at another interval than this plan: a switch keeps the billing \
             interval and currency. Cancel at the period's end and buy the other one instead.",
            target.to_product, target.to_interval
        )));
    }
    if let Some(c) = ahead.iter().find(|c| c.plan_ladder_id == item.plan_ladder_id) {
        return Err(ServiceError::Refused(format!(
            "A change to {} on {} is already scheduled for {}: undo it first.",
            c.to_product,
            item.ladder,
            day(c.effective_at)
        )));
    }
    let mut kind = if item.to_rank > item.from_rank { SwitchKind::Upgrade } else { SwitchKind::Downgrade };
    if kind == SwitchKind::Upgrade
        && let Some(c) = ahead.first()
    {
        return Err(ServiceError::Refused(format!(
            "A change to {} is scheduled for {}: undo it first, then upgrade.",
            c.to_product,
            day(c.effective_at)
        )));
    }
    // What Stripe holds now: the item must still be there, on the price the console knows.
    let snapshot = stripe
        .subscription(&held.stripe_subscription_id)
        .await
        .map_err(remote)?
        .ok_or(ServiceError::NotFound("subscription"))?;
    if snapshot.has_ended() {
        // Ended in Stripe since the console last read it: the console catches up, the member is told.
        converge(db, stripe, &snapshot.id).await;
        return Err(ServiceError::Refused("The subscription has ended: there is no plan to change.".into()));
    }
    if snapshot.collection_paused && !snapshot.console_paused {
        return Err(ServiceError::Refused(
            "The subscription's payments are paused in Stripe: resume them there before switching.".into(),
        ));
    }
    let Some(now_item) = snapshot.items.iter().find(|i| i.id == item.stripe_item_id).cloned() else {
        return Err(ServiceError::Refused(
            "Stripe's subscription changed since this page was drawn. Reload the page and try again.".into(),
        ));
    };
    if !target.on_sale && now_item.price != to_price {
        return Err(ServiceError::Refused(format!(
            "{} at this price is not on sale any more. Reload the page to see the current plans.",
            target.to_product
        )));
    }
    let from_quantity = now_item.quantity.max(1) as u64;
    let to_quantity = quantity.unwrap_or(from_quantity);
    let max = target.to_max_quantity.max(1) as u64;
    if !(1..=max).contains(&to_quantity) {
        return Err(ServiceError::invalid(
            "quantity",
            if max == 1 {
                format!("{} is sold one at a time: choose 1 seat.", target.to_product)
            } else {
                format!("Choose from 1 to {max} seats of {}.", target.to_product)
            },
        ));
    }
    if now_item.price == to_price || same_tier {
        if to_quantity == from_quantity {
            return Err(ServiceError::Refused(format!(
                "{} with {to_quantity} seat{} is already the plan on {}.",
                target.to_product,
                if to_quantity == 1 { "" } else { "s" },
                item.ladder
            )));
        }
        kind = if to_quantity > from_quantity { SwitchKind::MoreSeats } else { SwitchKind::FewerSeats };
    }
    if kind == SwitchKind::Downgrade {
        // A schedule's current phase names the price paid now, and Stripe takes no price it no
        // longer sells there: the change cannot wait for the period's end.
        let mut read = db.read().await?;
        if billing_store::archived_in_stripe(read.conn(), &now_item.price).await? == Some(true) {
            return Err(ServiceError::Refused(format!(
                "{} at the price {org} pays is no longer sold, so Stripe cannot schedule the switch to {} for the \
                 period's end. Cancel at the period's end and buy {} then, or ask an operator.",
                item.from_product, target.to_product, target.to_product
            )));
        }
    }
    let quote = SwitchQuote {
        kind,
        organization_id,
        subscription_id,
        price_id,
        ladder: item.ladder,
        from: item.from_product,
        to: target.to_product,
        from_quantity,
        to_quantity,
        charge: None,
        proration_date: None,
        operation: QuoteId(crate::config::random_hex(16)),
        effective_at: now_item.period_end,
    };
    Ok(Checked {
        quote,
        snapshot,
        item: now_item.id,
        from_price: now_item.price,
        to_price,
        quantity: to_quantity,
        period_start: now_item.period_start,
    })
}

/// What switching to `price_id` would do, with an upgrade's charge as Stripe previews it. The
/// quote is kept (its operation id is what the confirmation carries), so the switch charges for
/// the moment the member was shown, whatever the form sends.
#[tracing::instrument(name = "Quote a plan switch", skip(db, stripe), fields(organization_id = %organization_id))]
pub async fn quote_switch(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    price_id: PriceId,
    quantity: Option<u64>,
) -> Result<SwitchQuote, ServiceError> {
    let mut c = check_switch(db, stripe, who, organization_id, subscription_id, price_id, quantity).await?;
    if c.quote.kind == SwitchKind::FewerSeats {
        c.quote.effective_at = crate::services::clock::now(db).await?;
    }
    if c.quote.kind.charged_now() {
        let preview = stripe
            .preview_switch(&c.snapshot.customer, &c.snapshot.id, &c.item, c.new_price(), c.quantity)
            .await
            .map_err(remote)?;
        c.quote.proration_date = preview.proration_date;
        c.quote.effective_at = match preview.proration_date.and_then(|d| DateTime::from_timestamp(d, 0)) {
            Some(at) => at,
            None => crate::services::clock::now(db).await?,
        };
        c.quote.charge = Some(preview);
    }
    crate::db::tx::within(db, crate::db::TxKind::Plain, async |tx: &mut crate::db::Tx| {
        store::insert_quote(
            tx.conn(),
            c.quote.operation.as_str(),
            subscription_id,
            price_id,
            who,
            c.quote.proration_date.and_then(|d| DateTime::from_timestamp(d, 0)),
            c.quote.charge.as_ref().map(|p| (p.amount_due, p.currency.as_str())),
            c.quantity as i32,
        )
        .await?;
        Ok::<_, ServiceError>(())
    })
    .await?;
    Ok(c.quote)
}

/// Make the switch the member confirmed (`operation`: its quote's id). An upgrade prorates for the
/// quoted moment (refused when the quote is older than `QUOTE_HOLDS`); its charge failing
/// changes nothing. A downgrade puts the lower tier in the schedule's next phase. Either then
/// converges at once. Confirming one quote twice changes (and charges) once: Stripe's
/// idempotency keys are the quote's.
#[tracing::instrument(name = "Switch a plan", skip(db, stripe), fields(organization_id = %organization_id))]
pub async fn switch_plan(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    price_id: PriceId,
    operation: &QuoteId,
) -> Result<SwitchQuote, ServiceError> {
    let operation = operation.as_str();
    let unknown = || {
        ServiceError::Refused(
            "This confirmation is not one the billing page made for this plan, or it was used up: switch again from \
             the billing page."
                .into(),
        )
    };
    if operation.len() != 32 || !operation.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) {
        return Err(unknown());
    }
    let quoted = {
        let mut read = db.read().await?;
        store::quote(read.conn(), operation).await?.ok_or_else(unknown)?
    };
    if quoted.subscription_id != subscription_id || quoted.price_id != price_id || quoted.account_id != who {
        return Err(unknown());
    }
    if quoted.age_s > QUOTE_HOLDS.num_seconds() as f64 {
        return Err(ServiceError::Refused(
            "The amount shown is more than 15 minutes old: switch again to see today's amount.".into(),
        ));
    }
    let quantity = Some(quoted.quantity.max(1) as u64);
    // Only this quote's own confirmation, made before, is answered as done: a quote from another
    // tab meets check_switch's refusal of a change already scheduled.
    if quoted.confirmed
        && let Some(done) = scheduled_already(db, who, organization_id, subscription_id, price_id, operation).await?
    {
        return Ok(done);
    }
    let mut c = check_switch(db, stripe, who, organization_id, subscription_id, price_id, quantity).await?;
    c.quote.operation = QuoteId(operation.to_string());
    let sub = c.snapshot.id.clone();
    let write = Write {
        stripe_id: &sub,
        quote: Some(operation),
        from: &c.quote.from,
        to: &c.quote.to,
        ended: "The subscription has ended: there is no plan to change.",
    };
    if c.quote.kind.charged_now() && c.snapshot.console_paused {
        // The paused switch: the backstop first, committed on its own before any Stripe write;
        // then collection resumes so the switch is charged. The switch's reconcile pauses it
        // again while the subscription stays displaced; a switch that did not apply is restored
        // by the backstop's reconcile.
        write_backstop(db, subscription_id, &sub).await?;
    }
    let written = switch_in_stripe(stripe, &c, operation, quoted.proration_date).await;
    if let Err(f) = written {
        return Err(refused_write(db, stripe, &write, f).await);
    }
    if c.quote.kind.charged_now() {
        c.quote.proration_date = quoted.proration_date.map(|d| d.timestamp());
    }
    {
        // One row of its own, no other lock held: Stripe already holds the change.
        let mut conn = db.pool.acquire().await.map_err(crate::db::DbError::from)?;
        store::mark_quote_confirmed(&mut conn, operation).await?;
    }
    converge(db, stripe, &sub).await;
    Ok(c.quote)
}

/// The Stripe writes of a checked switch.
async fn switch_in_stripe(
    stripe: &Stripe,
    c: &Checked,
    operation: &str,
    quoted_moment: Option<DateTime<Utc>>,
) -> Result<(), StripeFailure> {
    let sub = &c.snapshot.id;
    match c.quote.kind {
        SwitchKind::FewerSeats => {
            stripe.switch_now(operation, sub, &c.item, c.new_price(), c.quantity, None, false).await?;
        }
        SwitchKind::Upgrade | SwitchKind::MoreSeats => {
            let moment = quoted_moment.map(|d| d.timestamp());
            if c.snapshot.console_paused {
                // The paused switch (its backstop already written): collection resumes so the
                // switch is charged.
                stripe.set_console_pause(sub, false).await?;
            }
            stripe.switch_now(operation, sub, &c.item, c.new_price(), c.quantity, moment, true).await?;
        }
        SwitchKind::Downgrade => {
            let existing = match c.snapshot.schedule.as_ref() {
                Some(id) => stripe.subscription_schedule(id).await?,
                None => None,
            };
            let current = c.snapshot.phase_items();
            // The next phase keeps whatever else a schedule already changes there.
            let base = match existing.as_ref().and_then(|s| s.next_phase()) {
                Some(p) => p.phase_items(),
                None => current.clone(),
            };
            let next: PhaseItems = base
                .into_iter()
                .map(|(price, q)| if price == c.from_price { (c.to_price.clone(), c.quantity) } else { (price, q) })
                .collect();
            let start = existing.as_ref().and_then(|s| s.current_phase_start).unwrap_or(c.period_start);
            let schedule = stripe.schedule_of(operation, sub, existing.as_ref().map(|s| &s.id)).await?;
            stripe.set_next_phase(operation, &schedule, start, &current, c.quote.effective_at, &next).await?;
        }
    }
    Ok(())
}

/// A confirmation of a downgrade that is already scheduled (a double click, a second tab): the
/// switch it asks for is the one Stripe holds, so it is answered as the first was.
async fn scheduled_already(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    price_id: PriceId,
    operation: &str,
) -> Result<Option<SwitchQuote>, ServiceError> {
    let (_, _, ahead) = owned_subscription(db, who, organization_id, subscription_id).await?;
    if ahead.is_empty() {
        return Ok(None);
    }
    let target = {
        let mut read = db.read().await?;
        store::switch_target(read.conn(), subscription_id, price_id).await?
    };
    let Some((target, item)) = target.and_then(|t| t.item.clone().map(|i| (t, i))) else { return Ok(None) };
    let Some(c) =
        ahead.iter().find(|c| c.plan_ladder_id == item.plan_ladder_id && c.to_product_id == target.to_product_id)
    else {
        return Ok(None);
    };
    Ok(Some(SwitchQuote {
        kind: SwitchKind::Downgrade,
        organization_id,
        subscription_id,
        price_id,
        ladder: item.ladder,
        from: c.from_product.clone(),
        to: c.to_product.clone(),
        from_quantity: 1,
        to_quantity: 1,
        charge: None,
        proration_date: None,
        operation: QuoteId(operation.to_string()),
        effective_at: c.effective_at,
    }))
}

/// A member's change Stripe was asked to make, for telling its failure.
struct Write<'a> {
    stripe_id: &'a StripeSubscriptionId,
    /// The quote the change confirms: used up when Stripe refused it for good, so confirming it
    /// again does not replay that answer under its idempotency key.
    quote: Option<&'a str>,
    /// The tiers the change moves from and to.
    from: &'a str,
    to: &'a str,
    /// What the member reads when the subscription ended meanwhile.
    ended: &'a str,
}

/// A Stripe write of a member's change that failed: what the member reads (the plan unchanged
/// and what to do, or that the console cannot know yet), and what the console does to agree
/// with Stripe again.
async fn refused_write(db: &Db, stripe: &Stripe, w: &Write<'_>, f: StripeFailure) -> ServiceError {
    let use_up = async || {
        if let Some(operation) = w.quote {
            let done = match db.pool.acquire().await {
                Ok(mut conn) => billing_store::use_up_switch_quote(&mut conn, operation).await,
                Err(e) => Err(e),
            };
            if let Err(e) = done {
                tracing::warn!(error = %e, "a refused switch's quote was not used up");
            }
        }
    };
    match f.refusal() {
        Refusal::CardDeclined => {
            use_up().await;
            let why = match &f {
                StripeFailure::Api { message, .. } => format!(" ({})", message.trim().trim_end_matches('.')),
                _ => String::new(),
            };
            ServiceError::Refused(format!(
                "The payment was declined{why}. The plan is unchanged and nothing was charged: pay with another \
                 card, then choose Switch again on the billing page."
            ))
        }
        Refusal::PriceInactive { param } => {
            use_up().await;
            // The phase in force names the price paid now; any other price sent is the new one.
            let tier = if param.starts_with("phases[0]") { w.from } else { w.to };
            ServiceError::Refused(format!(
                "{tier} at this price is no longer sold. Reload the billing page for the current plans."
            ))
        }
        Refusal::KeyReused => {
            use_up().await;
            ServiceError::Refused("This confirmation was already used; switch again from the billing page.".into())
        }
        Refusal::CatalogMissing => {
            use_up().await;
            let remade = match f.lost_id() {
                Some(lost) => resync_lost(db, stripe, &StripePriceId::from(lost.as_str())).await,
                None => false,
            };
            tracing::warn!(subscription = %w.stripe_id, to = w.to, lost = f.lost_id(), remade,
                "Stripe has no such price for a switch: the switch was refused");
            ServiceError::Refused(if remade {
                format!(
                    "Stripe no longer had {} at this price; the console has given it to Stripe again. The plan is \
                     unchanged and nothing was charged: choose Switch again on the billing page.",
                    w.to
                )
            } else {
                format!(
                    "{} cannot be switched to right now: Stripe no longer has its price. The plan is unchanged and \
                     nothing was charged. The operators have been told; please try again later.",
                    w.to
                )
            })
        }
        Refusal::Unconfirmed => {
            // Stripe may hold the change: its reconcile (queued like a webhook's) finds out.
            if let Err(e) = enqueue_reconcile(db, w.stripe_id).await {
                tracing::warn!(subscription = %w.stripe_id, error = %e, "an unconfirmed change's reconcile was not queued");
            }
            remote_write(f)
        }
        Refusal::Missing | Refusal::Other => match stripe.subscription(w.stripe_id).await {
            // Ended in Stripe since the console read it: the console catches up.
            Ok(None) => {
                settle(db, stripe, w.stripe_id).await;
                ServiceError::Refused(w.ended.to_string())
            }
            Ok(Some(now)) if now.has_ended() => {
                settle(db, stripe, w.stripe_id).await;
                ServiceError::Refused(w.ended.to_string())
            }
            _ => remote_write(f),
        },
    }
}

/// Sync again the catalog price Stripe lost (see `catalog_sync::resync_lost_price`); whether
/// Stripe has it again. A price the console does not know is nothing to sync.
async fn resync_lost(db: &Db, stripe: &Stripe, lost: &StripePriceId) -> bool {
    let known = match db.pool.acquire().await {
        Ok(mut conn) => billing_store::price_by_stripe_id(&mut conn, lost).await,
        Err(e) => Err(e),
    };
    let Ok(Some((price_id, product_id))) = known else { return false };
    match super::catalog_sync::resync_lost_price(db, stripe, product_id, price_id, lost).await {
        Ok(again) => again.is_some(),
        Err(e) => {
            tracing::warn!(plan = %product_id, %price_id, error = %e, "a price Stripe lost could not be synced again");
            false
        }
    }
}

pub static PAUSED_SWITCH_BACKSTOP_LOCKS: PathLocks = PathLocks {
    path: "upgradeNow: the paused switch's backstop",
    function: "services::billing::plan_changes::write_backstop",
    kind: "single-statement, autocommit",
    locks: &[],
    why: "One insert on the database handle, committed on its own before any Stripe write: a reconcile_subscription \
          outbox row due four minutes later. It holds no lock, so a reconcile holding the subscription's lock or \
          the pool row never delays it.",
};

/// How long after a paused switch its backstop reconcile comes.
pub const BACKSTOP_AFTER: Duration = Duration::minutes(4);

/// The paused switch's backstop: one insert, on the handle, that commits on its own.
async fn write_backstop(
    db: &Db,
    subscription_id: SubscriptionId,
    stripe_id: &StripeSubscriptionId,
) -> Result<(), ServiceError> {
    let mut conn = db.pool.acquire().await.map_err(crate::db::DbError::from)?;
    // Named in the trace (when it is on) by a marker of its own just before: the insert is its own
    // transaction and takes no lock, so nothing is counted under the name but its being observed.
    crate::db::trace::path(&mut conn, &PAUSED_SWITCH_BACKSTOP_LOCKS).await.map_err(crate::db::DbError::from)?;
    let delay = BACKSTOP_AFTER.num_seconds() as f64;
    store::request_reconcile(&mut conn, subscription_id, stripe_id, "paused_switch_backstop", delay).await?;
    Ok(())
}

/// Undo the downgrade scheduled on `ladder`: the schedule is released when nothing else is
/// ahead in it, else its next phase keeps the current tier on that ladder.
#[tracing::instrument(name = "Undo a scheduled switch", skip(db, stripe), fields(organization_id = %organization_id))]
pub async fn undo_switch(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    ladder: LadderId,
) -> Result<String, ServiceError> {
    let (_, held, ahead) = owned_subscription(db, who, organization_id, subscription_id).await?;
    let Some(change) = ahead.into_iter().find(|c| c.plan_ladder_id == ladder) else {
        return Err(ServiceError::Refused("No change is scheduled on that plan any more.".into()));
    };
    let sub = held.stripe_subscription_id;
    let snapshot = stripe.subscription(&sub).await.map_err(remote)?.ok_or(ServiceError::NotFound("subscription"))?;
    if snapshot.has_ended() {
        converge(db, stripe, &sub).await;
        return Err(ServiceError::Refused("The subscription has ended: there is nothing to undo.".into()));
    }
    let schedule = match snapshot.schedule.as_ref() {
        Some(id) => stripe.subscription_schedule(id).await.map_err(remote)?,
        None => None,
    };
    if let Some(s) = schedule.filter(|s| s.id == change.stripe_schedule_id)
        && let Some(next) = s.next_phase()
    {
        let current = snapshot.phase_items();
        // Put back, in the next phase, the current price of the ladder the change moves.
        let (from_prices, to_prices) = {
            let mut read = db.read().await?;
            let from = prices_of(read.conn(), current.iter().map(|(p, _)| p), change.from_product_id).await?;
            let to = prices_of(read.conn(), next.items.iter().map(|(p, _)| p), change.to_product_id).await?;
            (from, to)
        };
        let restored: PhaseItems = next
            .phase_items()
            .into_iter()
            .map(|(price, q)| match (to_prices.contains(&price), from_prices.first()) {
                (true, Some(from)) => (from.clone(), q),
                _ => (price, q),
            })
            .collect();
        let mut a = restored.clone();
        let mut b = current.clone();
        a.sort();
        b.sort();
        let written = if a == b {
            stripe.release_schedule(&s.id).await
        } else {
            let start = s.current_phase_start.unwrap_or(change.effective_at);
            let operation = format!("undo{}", change.scheduled_change_id);
            stripe.set_next_phase(&operation, &s.id, start, &current, next.start, &restored).await
        };
        if let Err(f) = written {
            let w = Write {
                stripe_id: &sub,
                quote: None,
                from: &change.from_product,
                to: &change.to_product,
                ended: "The subscription has ended: there is nothing to undo.",
            };
            return Err(refused_write(db, stripe, &w, f).await);
        }
    }
    converge(db, stripe, &sub).await;
    Ok(change.from_product)
}

/// Of `prices` (Stripe's ids), the ones of `product`.
async fn prices_of<'p>(
    conn: &mut sqlx::PgConnection,
    prices: impl Iterator<Item = &'p StripePriceId>,
    product: crate::ids::ProductId,
) -> Result<Vec<StripePriceId>, ServiceError> {
    let mut out = vec![];
    for price in prices {
        if let Some((_, p)) = billing_store::price_by_stripe_id(conn, price).await?
            && p == product
        {
            out.push(price.clone());
        }
    }
    Ok(out)
}

/// Cancel the subscription at the period's end (`cancel`), or keep it going.
#[tracing::instrument(name = "Cancel a plan at period end", skip(db, stripe), fields(organization_id = %organization_id))]
pub async fn cancel_at_period_end(
    db: &Db,
    stripe: &Stripe,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
    cancel: bool,
) -> Result<Option<DateTime<Utc>>, ServiceError> {
    let (_, held, ahead) = owned_subscription(db, who, organization_id, subscription_id).await?;
    if matches!(held.status, SubscriptionStatus::Canceled | SubscriptionStatus::IncompleteExpired) {
        return Err(ServiceError::Refused("The subscription has already ended.".into()));
    }
    if held.cancel_at_period_end == cancel {
        return Err(ServiceError::Refused(
            if cancel {
                "The subscription already ends at the period's end."
            } else {
                "The subscription is not set to end."
            }
            .into(),
        ));
    }
    if cancel && let Some(c) = ahead.first() {
        return Err(ServiceError::Refused(format!(
            "A change to {} is scheduled for {}: undo it first, then cancel.",
            c.to_product,
            day(c.effective_at)
        )));
    }
    let sub = held.stripe_subscription_id;
    if let Err(f) = stripe.cancel_at_period_end(&sub, cancel).await {
        let w = Write { stripe_id: &sub, quote: None, from: "", to: "", ended: "The subscription has already ended." };
        return Err(refused_write(db, stripe, &w, f).await);
    }
    converge(db, stripe, &sub).await;
    Ok(held.current_period_end)
}

/// ReconcileSubscription right after a change, so the member sees it at once. Stripe holds the
/// change whatever happens here: a failure is logged, and the webhook's job and the sweep converge.
async fn converge(db: &Db, stripe: &Stripe, stripe_id: &StripeSubscriptionId) -> bool {
    match reconcile_subscription(db, stripe, stripe_id).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(subscription = %stripe_id, error = %e, "a plan change is in Stripe; its reconcile failed and is left to the webhook");
            false
        }
    }
}

/// ReconcileSubscription now, and queued when that failed: no webhook may come for what Stripe
/// changed without the console (a subscription ended in Stripe's dashboard).
async fn settle(db: &Db, stripe: &Stripe, stripe_id: &StripeSubscriptionId) {
    if !converge(db, stripe, stripe_id).await
        && let Err(e) = enqueue_reconcile(db, stripe_id).await
    {
        tracing::warn!(subscription = %stripe_id, error = %e, "a subscription's reconcile was not queued");
    }
}
