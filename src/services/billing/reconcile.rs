//! ReconcileSubscription (spec: "Subscription reconcile"): read the subscription from Stripe with
//! no transaction open, then one Materializing transaction: the rendezvous (shared), the
//! subscription's advisory lock, then the branch by status, each taking the pool row as the spec
//! orders it. Reconciling the same Stripe state twice writes nothing the second time, so the
//! checkout return, the webhook's job, the outbox and the sweep may all run it.

use crate::{
    db::{
        Db, Tx, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
    },
    ids::{OrganizationId, PoolId, StripeScheduleId, StripeSubscriptionId, SubscriptionId, SubscriptionItemId},
    integrations::stripe::{ScheduleSnapshot, Stripe, SubscriptionSnapshot},
    services::ServiceError,
    states::{SubscriptionBranch, SubscriptionStatus},
    store::{
        billing::{self as store, SubscriptionState},
        entitlements as ent,
    },
};

use super::remote;
use crate::services::clock::now;

pub static RECONCILE_SUBSCRIPTION_LOCKS: PathLocks = PathLocks {
    path: "ReconcileSubscription",
    function: "services::billing::reconcile_subscription",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::SubscriptionAdvisory, Lock::PoolRow],
    why: "The Stripe read first, with no transaction open; then the rendezvous, the subscription's advisory \
          lock (two reconciles of one subscription converge on its rows and periods), then by branch the \
          organization's pool row (LockPools) before core.sync_source_status, the conferral functions, \
          resumption, delivery, the floor and materialization, which take the row the transaction holds. The \
          ended branch takes the row first too and reads the live provisions under it, so a Resume plan \
          holding the row either commits first and its provision is ended, or waits and finds the \
          subscription canceled. No path takes a pool row and then a subscription's lock.",
};

/// What a reconcile did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The console's rows now match this Stripe state (`changed`: whether anything was written).
    Converged { subscription_id: SubscriptionId, status: SubscriptionStatus, changed: bool },
    /// A newer read of the subscription was already written; this one wrote nothing.
    Stale,
    /// Stripe knows no such subscription, and neither does the console.
    Unknown,
}

/// Whether a reconcile makes the collection pause's Stripe update itself after its commit
/// (ApplySubscriptionCollection: the outbox's own reconcile) or only asks the outbox for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    Request,
    Apply,
}

/// ReconcileSubscription for one Stripe subscription id (a disagreement about the collection
/// pause is left to the outbox).
pub async fn reconcile_subscription(
    db: &Db,
    stripe: &Stripe,
    stripe_id: &StripeSubscriptionId,
) -> Result<Reconciled, ServiceError> {
    reconcile(db, stripe, stripe_id, Collection::Request).await
}

/// The outbox's reconcile: ReconcileSubscription, then ApplySubscriptionCollection, the Stripe
/// update a disagreement about the collection pause needs, after the commit with no lock held.
pub async fn apply_subscription_collection(
    db: &Db,
    stripe: &Stripe,
    stripe_id: &StripeSubscriptionId,
) -> Result<Reconciled, ServiceError> {
    reconcile(db, stripe, stripe_id, Collection::Apply).await
}

async fn reconcile(
    db: &Db,
    stripe: &Stripe,
    stripe_id: &StripeSubscriptionId,
    collection: Collection,
) -> Result<Reconciled, ServiceError> {
    // The transaction `converge` opens stays here until it commits, so an answer it gives with the
    // transaction still open (a refusal, a failed statement, a stale read) ends it first: rolled
    // back, awaited, on an error.
    let mut open = None;
    let answer = converge(db, stripe, stripe_id, collection, &mut open).await;
    match open {
        Some(tx) => tx.end(answer).await,
        None => answer,
    }
}

#[tracing::instrument(name = "Reconcile a subscription", skip(db, stripe, open), fields(subscription_id))]
async fn converge(
    db: &Db,
    stripe: &Stripe,
    stripe_id: &StripeSubscriptionId,
    collection: Collection,
    open: &mut Option<Tx>,
) -> Result<Reconciled, ServiceError> {
    let observed_at = now(db).await?;
    // The read comes first, with no transaction open (a slow Stripe holds no lock).
    let snapshot = stripe.subscription(stripe_id).await.map_err(remote)?;
    // Its schedule too, when it has one (convergeScheduledChanges reads its next phase).
    let schedule = match snapshot.as_ref().and_then(|s| s.schedule.as_ref()) {
        Some(id) => stripe.subscription_schedule(id).await.map_err(remote)?,
        None => None,
    };
    let tx = open.insert(crate::db::begin_for(db, TxKind::Materializing, &RECONCILE_SUBSCRIPTION_LOCKS).await?);
    if matches!(collection, Collection::Apply) {
        crate::db::trace::step(tx.conn(), crate::db::trace::steps::APPLY_SUBSCRIPTION_COLLECTION).await?;
    }
    tx.lock(&AdvisoryKey::Subscription(stripe_id.to_string())).await?;
    let existing = store::subscription_by_stripe_id(tx.conn(), stripe_id).await?;
    if let Some(e) = &existing {
        tracing::Span::current().record("subscription_id", tracing::field::display(e.subscription_id));
        if e.observed_at.is_some_and(|t| t > observed_at) {
            return Ok(Reconciled::Stale);
        }
    }
    let snapshot = match snapshot {
        Some(s) => s,
        // Stripe has no such subscription any more (deleted in a test account, or never made):
        // for the console it has ended.
        None => match &existing {
            Some(e) => SubscriptionSnapshot {
                id: stripe_id.clone(),
                customer: store::customer_of(tx.conn(), e.organization_id).await?.unwrap_or_else(|| "".into()),
                status: SubscriptionStatus::Canceled,
                cancel_at_period_end: false,
                collection_paused: false,
                console_paused: false,
                ended_at: Some(observed_at),
                metadata: Default::default(),
                schedule: None,
                items: vec![],
            },
            None => return Ok(Reconciled::Unknown),
        },
    };
    let status = snapshot.status;
    let organization_id = match &existing {
        Some(e) => e.organization_id,
        None => organization_for(tx, &snapshot).await?,
    };
    let state = SubscriptionState {
        status,
        customer: &snapshot.customer,
        cancel_at_period_end: snapshot.cancel_at_period_end,
        collection_paused: snapshot.collection_paused,
        console_paused: snapshot.console_paused,
        current_period: snapshot.current_period(),
        ended_at: snapshot.ended_at,
        observed_at,
    };
    let (subscription_id, was) = match &existing {
        Some(e) => {
            store::update_subscription(tx.conn(), e.subscription_id, &state).await?;
            (e.subscription_id, Some(e.status))
        }
        None => (store::insert_subscription(tx.conn(), organization_id, stripe_id, &state).await?, None),
    };
    tracing::Span::current().record("subscription_id", tracing::field::display(subscription_id));
    if let Some((start, end)) = state.current_period {
        store::put_period(tx.conn(), subscription_id, start, end).await?;
    }
    let pool =
        ent::default_pool_of(tx.conn(), organization_id).await?.ok_or(ServiceError::NotFound("organization's pool"))?;
    let mut changed = was != Some(status);
    changed |= match status.branch() {
        SubscriptionBranch::Active => {
            let (changed, products) = reconcile_items(tx, subscription_id, organization_id, pool, &snapshot).await?;
            converge_scheduled_changes(tx, subscription_id, &products, schedule.as_ref()).await? || changed
        }
        SubscriptionBranch::Suspended => reconcile_suspended(tx, subscription_id, pool).await?,
        SubscriptionBranch::Ended => {
            let ended = reconcile_ended(tx, subscription_id, organization_id, pool).await?;
            supersede_changes_of_ended(tx, subscription_id).await? || ended
        }
        // `incomplete`: the first payment has not gone through; nothing is conferred yet. Its
        // items are recorded, so a checkout on their ladders knows the ladder is spoken for.
        SubscriptionBranch::NotYet => mirror_items(tx, subscription_id, &snapshot).await?.0,
    };
    // The collection pause: paused exactly while another plan displaces the subscription on every
    // ladder. The decision's reads (collectionInputs) are made under the pool row the branch took;
    // a disagreement writes one reconcile_subscription outbox row (an insert, no lock).
    let displaced = match status {
        SubscriptionStatus::Active
        | SubscriptionStatus::Trialing
        | SubscriptionStatus::PastDue
        | SubscriptionStatus::Unpaid => {
            Some(crate::store::plan_changes::displaced_on_every_ladder(tx.conn(), subscription_id).await?)
        }
        _ => None,
    };
    let pause = match displaced {
        Some(true) if !snapshot.collection_paused => Some(true),
        Some(false) if snapshot.console_paused => Some(false),
        _ => None,
    };
    // The outbox's own reconcile (Apply) makes the update itself after the commit, and a failure
    // there fails its row, which is tried again: it asks for no second row.
    if pause.is_some() && collection == Collection::Request {
        changed |=
            crate::store::plan_changes::request_reconcile(tx.conn(), subscription_id, stripe_id, "collection", 0.0)
                .await?;
    }
    // A spent schedule, and whether it still holds a change marked ahead, read before the commit.
    let spent = match schedule.as_ref().filter(|s| s.is_spent()) {
        Some(s) => {
            let ahead = store::open_scheduled_changes(tx.conn(), subscription_id).await?;
            Some((s.id.clone(), ahead.iter().any(|r| r.stripe_schedule_id == s.id)))
        }
        None => None,
    };
    open.take().expect("the transaction is open").commit().await?;
    if let Some((schedule_id, held_changes)) = spent {
        release_spent_schedule(db, stripe, subscription_id, stripe_id, &schedule_id, held_changes).await;
    }
    if let (Collection::Apply, Some(pause)) = (collection, pause) {
        // ApplySubscriptionCollection. It failing fails the outbox row, which tries again. A
        // change made in Stripe is a change: the next read records it.
        if let Err(e) = stripe.set_console_pause(stripe_id, pause).await {
            // Ended since the read (cancelled meanwhile): nothing is collected any more, so there
            // is nothing to pause or resume. Anything else fails the outbox row, to try again.
            let ended = match stripe.subscription(stripe_id).await {
                Ok(Some(now)) => now.has_ended(),
                Ok(None) => true,
                Err(_) => false,
            };
            if !ended {
                return Err(remote(e));
            }
            tracing::info!(subscription = %stripe_id, "the subscription ended before its collection pause was applied");
            return Ok(Reconciled::Converged { subscription_id, status, changed });
        }
        tracing::info!(subscription = %stripe_id, pause, "the subscription's collection follows its displacement");
        changed = true;
    }
    Ok(Reconciled::Converged { subscription_id, status, changed })
}

pub static SUPERSEDE_RELEASED_DOWNGRADES_LOCKS: PathLocks = PathLocks {
    path: "supersedeReleasedDowngrades",
    function: "services::billing::reconcile::supersede_released_downgrades",
    kind: "Plain",
    locks: &[Lock::SubscriptionAdvisory],
    why: "After a spent schedule's release succeeded, in a transaction of its own: the subscription's advisory lock \
          (the ledger is the subscription's own rows, which a reconcile writes under it), then the released \
          schedule's changes still marked ahead are superseded. No rendezvous and no pool row: it writes only \
          scheduled-change rows.",
};

/// releaseSpentSchedule, after the reconcile's commit with no lock held; when the release
/// succeeded and the schedule held a change still ahead, supersedeReleasedDowngrades. A failed
/// release is left for the next reconcile, which finds the schedule spent again.
async fn release_spent_schedule(
    db: &Db,
    stripe: &Stripe,
    subscription_id: SubscriptionId,
    stripe_id: &StripeSubscriptionId,
    schedule_id: &StripeScheduleId,
    held_changes: bool,
) {
    if let Err(e) = stripe.release_schedule(schedule_id).await {
        tracing::warn!(schedule = %schedule_id, error = %e, "a spent subscription schedule could not be released; the next reconcile tries again");
        return;
    }
    if held_changes && let Err(e) = supersede_released_downgrades(db, subscription_id, stripe_id, schedule_id).await {
        tracing::warn!(schedule = %schedule_id, error = %e, "a released schedule's changes were not superseded; the next reconcile settles them");
    }
}

/// supersedeReleasedDowngrades: the subscription's advisory lock, then the released schedule's
/// changes still marked ahead become superseded. How many.
#[tracing::instrument(name = "Supersede a released schedule's changes", skip(db))]
pub async fn supersede_released_downgrades(
    db: &Db,
    subscription_id: SubscriptionId,
    stripe_id: &StripeSubscriptionId,
    schedule_id: &StripeScheduleId,
) -> Result<u64, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Plain, &SUPERSEDE_RELEASED_DOWNGRADES_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::Subscription(stripe_id.to_string())).await?;
        let n =
            crate::store::plan_changes::supersede_changes_of_schedule(tx.conn(), subscription_id, schedule_id).await?;
        Ok(n)
    })
    .await
}

/// Whose subscription this is: the organization the checkout named in its metadata, else the
/// organization whose Stripe customer it bills. Both must agree when both are known.
async fn organization_for(tx: &mut Tx, s: &SubscriptionSnapshot) -> Result<OrganizationId, ServiceError> {
    let by_customer = store::organization_of_customer(tx.conn(), &s.customer).await?;
    let by_metadata = s.metadata.get("organization_id").and_then(|v| v.parse::<i64>().ok()).map(OrganizationId);
    match (by_customer, by_metadata) {
        (Some(c), Some(m)) if c != m => Err(ServiceError::Remote {
            sentence: format!(
                "Subscription {} names organization {m} but bills the customer of organization {c}; it was not applied.",
                s.id
            ),
            transient: false,
        }),
        (Some(c), _) => Ok(c),
        (None, Some(m)) => Ok(m),
        (None, None) => Err(ServiceError::Remote {
            sentence: format!(
                "Subscription {} belongs to no organization the console knows; it was not applied.",
                s.id
            ),
            transient: false,
        }),
    }
}

/// The active branch (reconcileItems): the pool row, reinstate, mirror the items, then confer a
/// missing product (unless another plan took one of its ladders and still holds it), change a
/// quantity, end a surplus provision; delivery, resumption and the floor when one ended; the
/// reconcile requests; materialization. Whether it wrote anything, and the products of the
/// items Stripe lists now.
async fn reconcile_items(
    tx: &mut Tx,
    subscription_id: SubscriptionId,
    organization_id: OrganizationId,
    pool: PoolId,
    s: &SubscriptionSnapshot,
) -> Result<(bool, Vec<crate::ids::ProductId>), ServiceError> {
    crate::db::trace::step(tx.conn(), crate::db::trace::steps::RECONCILE_ACTIVE).await?;
    ent::lock_pools(tx.conn(), &[pool]).await?;
    let mut changed = ent::sync_source_status(tx.conn(), subscription_id, "active").await? > 0;
    let (mirrored, wanted) = mirror_items(tx, subscription_id, s).await?;
    changed |= mirrored;
    // convergeConferrals, under the pool row.
    let provisions = store::live_provisions(tx.conn(), subscription_id).await?;
    let held_off = store::items_held_off(tx.conn(), subscription_id).await?;
    let mut ended_any = false;
    for p in &provisions {
        let keep = wanted.iter().any(|w| w.0 == p.subscription_item_id && w.1 == p.product_id);
        if !keep {
            ended_any |= ent::end_conferral(tx.conn(), p.conferral_id, "subscription_item_removed").await?;
        }
    }
    for (item, product, quantity) in &wanted {
        match provisions.iter().find(|p| p.subscription_item_id == *item && p.product_id == *product) {
            Some(p) if p.quantity != *quantity => {
                ent::update_conferral_bounds(tx.conn(), p.conferral_id, *quantity, None).await?;
                changed = true;
            }
            Some(_) => {}
            None if held_off.contains(item) => {}
            None => {
                let conferred = ent::confer(tx.conn(), pool, *product, None, Some(*item), *quantity).await?;
                // A subscription this one displaced is asked to look again now (an insert, no
                // lock), so its collection pause does not wait for the sweep.
                store::request_displaced_reconciles(tx.conn(), conferred, "displaced").await?;
                changed = true;
            }
        }
    }
    if ended_any {
        changed = true;
        // What the ended provision displaced comes back, else the floor; then the other
        // subscriptions of the organization are asked to look again (inserts, no lock).
        ent::resume_replaced_grants(tx.conn(), pool).await?;
        ent::deliver_displaced_subscriptions(tx.conn(), pool).await?;
        ent::reapply_defaults_if_vacant(tx.conn(), pool, None).await?;
        store::request_organization_reconciles(tx.conn(), organization_id, subscription_id, "provision_ended").await?;
    }
    if changed {
        ent::materialize_pool(tx.conn(), pool).await?;
    }
    Ok((changed, wanted.iter().map(|w| w.1).collect()))
}

/// Mirror Stripe's items onto the subscription's own rows (under its advisory lock): each priced
/// item the catalog knows, by Stripe's item id; one Stripe no longer lists is marked removed.
/// Whether it wrote anything, and (item, product, quantity) of each item listed now.
async fn mirror_items(
    tx: &mut Tx,
    subscription_id: SubscriptionId,
    s: &SubscriptionSnapshot,
) -> Result<(bool, Vec<(SubscriptionItemId, crate::ids::ProductId, i32)>), ServiceError> {
    let mut changed = false;
    let known = store::items_of(tx.conn(), subscription_id).await?;
    let mut wanted: Vec<(SubscriptionItemId, crate::ids::ProductId, i32)> = vec![];
    for item in &s.items {
        let Some((_, product)) = store::price_by_stripe_id(tx.conn(), &item.price).await? else {
            tracing::warn!(item = %item.id, price = %item.price, "a subscription item's price is not in the catalog; skipped");
            continue;
        };
        let id = match known.iter().find(|k| k.stripe_item_id == item.id) {
            Some(k) => {
                if k.product_id != product || k.quantity != item.quantity || k.removed_at.is_some() {
                    store::update_item(tx.conn(), k.subscription_item_id, product, &item.price, item.quantity).await?;
                    changed = true;
                }
                k.subscription_item_id
            }
            None => {
                changed = true;
                store::insert_item(tx.conn(), subscription_id, &item.id, product, &item.price, item.quantity).await?
            }
        };
        wanted.push((id, product, item.quantity));
    }
    for k in &known {
        if k.removed_at.is_none() && !wanted.iter().any(|w| w.0 == k.subscription_item_id) {
            store::mark_item_removed(tx.conn(), k.subscription_item_id).await?;
            changed = true;
        }
    }
    Ok((changed, wanted))
}

/// The suspended branch (reconcileSuspended): the pool row, then core.sync_source_status
/// ('suspended'); materialization when it suspended a provision. Billing II adds the pause
/// decision's reads (collectionInputs) for past_due and unpaid.
async fn reconcile_suspended(tx: &mut Tx, subscription_id: SubscriptionId, pool: PoolId) -> Result<bool, ServiceError> {
    crate::db::trace::step(tx.conn(), crate::db::trace::steps::RECONCILE_SUSPENDED).await?;
    ent::lock_pools(tx.conn(), &[pool]).await?;
    let suspended = ent::sync_source_status(tx.conn(), subscription_id, "suspended").await?;
    if suspended > 0 {
        ent::materialize_pool(tx.conn(), pool).await?;
    }
    Ok(suspended > 0)
}

/// The ended branch: the pool row (LockPools), then the live provisions read under it and each
/// ended (core.end_conferral, the row again); when something ended, resumption and delivery;
/// the floor; materialization; the reconcile requests when something ended.
async fn reconcile_ended(
    tx: &mut Tx,
    subscription_id: SubscriptionId,
    organization_id: OrganizationId,
    pool: PoolId,
) -> Result<bool, ServiceError> {
    crate::db::trace::step(tx.conn(), crate::db::trace::steps::RECONCILE_ENDED).await?;
    // The row first: a Resume plan holding it may be conferring this subscription's tier (it read
    // the status before this transaction's "canceled" commits), and a read made before the row
    // would miss that provision and leave it live (issue 36). The subscription's provisions are
    // all in its organization's pool.
    ent::lock_pools(tx.conn(), &[pool]).await?;
    let mut ended_any = false;
    for p in store::live_provisions(tx.conn(), subscription_id).await? {
        ended_any |= ent::end_conferral(tx.conn(), p.conferral_id, "subscription_ended").await?;
    }
    if ended_any {
        ent::resume_replaced_grants(tx.conn(), pool).await?;
        ent::deliver_displaced_subscriptions(tx.conn(), pool).await?;
    }
    let floor = ent::reapply_defaults_if_vacant(tx.conn(), pool, None).await?;
    if ended_any || floor.is_some() {
        ent::materialize_pool(tx.conn(), pool).await?;
    }
    if ended_any {
        store::request_organization_reconciles(tx.conn(), organization_id, subscription_id, "subscription_ended")
            .await?;
    }
    Ok(ended_any || floor.is_some())
}

/// An ended subscription changes no plan any more: every change of its ledger still marked ahead
/// is superseded (under the subscription's lock, like every ledger write). True when one was.
async fn supersede_changes_of_ended(tx: &mut Tx, subscription_id: SubscriptionId) -> Result<bool, ServiceError> {
    let open = store::open_scheduled_changes(tx.conn(), subscription_id).await?;
    for row in &open {
        store::settle_scheduled_change(tx.conn(), row.scheduled_change_id, "superseded").await?;
    }
    Ok(!open.is_empty())
}

/// convergeScheduledChanges: the ledger of the plan changes the subscription's schedule will make
/// at its next phase, one per ladder: a change Stripe still holds stays scheduled; one the
/// subscription now carries is applied; one the schedule no longer holds is superseded; a change
/// the next phase makes that the ledger lacks is written. Under the subscription's lock, after
/// the items are mirrored (`current`: the products of the items Stripe lists now). True when it
/// wrote anything.
async fn converge_scheduled_changes(
    tx: &mut Tx,
    subscription_id: SubscriptionId,
    current: &[crate::ids::ProductId],
    schedule: Option<&ScheduleSnapshot>,
) -> Result<bool, ServiceError> {
    let mut desired = vec![];
    if let Some((schedule, phase)) = schedule.and_then(|s| s.next_phase().map(|p| (s, p))) {
        let mut next = vec![];
        for (price, _) in &phase.items {
            if let Some((_, product)) = store::price_by_stripe_id(tx.conn(), price).await? {
                next.push(product);
            }
        }
        for change in store::ladder_changes(tx.conn(), current, &next).await? {
            // A ladder the next phase keeps a current product on is not changing.
            if !next.contains(&change.1) {
                desired.push((schedule.id.clone(), change, phase.start));
            }
        }
    }
    let open = store::open_scheduled_changes(tx.conn(), subscription_id).await?;
    let mut changed = false;
    for row in &open {
        let still = desired.iter().any(|(id, c, at)| {
            *id == row.stripe_schedule_id
                && *c == (row.plan_ladder_id, row.from_product_id, row.to_product_id)
                && *at == row.effective_at
        });
        if !still {
            let state = if current.contains(&row.to_product_id) { "applied" } else { "superseded" };
            store::settle_scheduled_change(tx.conn(), row.scheduled_change_id, state).await?;
            changed = true;
        }
    }
    for (id, change, at) in &desired {
        let known = open.iter().any(|r| {
            r.stripe_schedule_id == *id
                && (r.plan_ladder_id, r.from_product_id, r.to_product_id) == *change
                && r.effective_at == *at
        });
        if !known {
            store::insert_scheduled_change(tx.conn(), subscription_id, id, *change, *at).await?;
            changed = true;
        }
    }
    Ok(changed)
}
