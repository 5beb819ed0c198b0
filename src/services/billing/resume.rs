//! Resume plan (spec: "Subscription reconcile", ResumeSubscription): a member whose paid plan
//! another plan displaced (an operator grant, say) brings the subscription's own tier back over
//! it. One Materializing transaction: the rendezvous (shared), the pool row, the reads its
//! refusals need, the subscription's items conferred over what holds their ladders, the reconcile
//! requests, materialization. No subscription lock and no Stripe call: every position write is
//! under the pool row, the subscription's own rows are only read, and the outbox's reconcile of
//! the request lifts the collection pause after the commit.

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx::within_for,
    },
    ids::{AccountId, OrganizationId, SubscriptionId},
    services::ServiceError,
    states::SubscriptionBranch,
    store::{billing as billing_store, entitlements as ent, plan_changes as store},
};

pub static RESUME_SUBSCRIPTION_LOCKS: PathLocks = PathLocks {
    path: "ResumeSubscription",
    function: "services::billing::resume::resume_subscription",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The rendezvous (shared), then the organization's pool row, then the refusals' reads; the subscription's \
          tier is conferred over the plan that displaced it (core.resume_subscription, under the row held), the \
          reconcile requests are inserts, materialization last. No subscription advisory lock (its rows are only \
          read) and no Stripe call; no path takes a pool row and then a subscription's lock.",
};

/// Bring the subscription's own tier back over what displaced it; the items that came back.
#[tracing::instrument(name = "Resume a plan", skip(db), fields(organization_id = %organization_id))]
pub async fn resume_subscription(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
    subscription_id: SubscriptionId,
) -> Result<i32, ServiceError> {
    // Who may: an owner of the organization (no state of the pool is read here; the
    // subscription is read under the pool row).
    {
        let mut read = db.read().await?;
        super::plan_changes::plan_owner(read.conn(), who, organization_id).await?;
    }
    within_for(db, TxKind::Materializing, &RESUME_SUBSCRIPTION_LOCKS, async |tx: &mut Tx| {
        let pool =
            ent::default_pool_of(tx.conn(), organization_id).await?.ok_or(ServiceError::NotFound("organization"))?;
        ent::lock_pools(tx.conn(), &[pool]).await?;
        // The refusals' reads, under the row.
        let held = store::held_subscription(tx.conn(), organization_id, subscription_id)
            .await?
            .ok_or(ServiceError::NotFound("subscription"))?;
        if held.status.branch() != SubscriptionBranch::Active {
            return Err(ServiceError::Refused(format!(
                "The subscription is {}: only an active subscription's plan can be resumed.",
                held.status
            )));
        }
        let back = store::resume_subscription(tx.conn(), pool, subscription_id).await?;
        if back == 0 {
            return Err(ServiceError::Refused("Nothing displaces this subscription: its plan is in force.".into()));
        }
        // Its own reconcile lifts the collection pause; the organization's other subscriptions look
        // again at what this one took. Inserts, no lock.
        store::request_reconcile(tx.conn(), subscription_id, &held.stripe_subscription_id, "resume", 0.0).await?;
        billing_store::request_organization_reconciles(tx.conn(), organization_id, subscription_id, "resume").await?;
        ent::materialize_pool(tx.conn(), pool).await?;
        Ok(back)
    })
    .await
}
