//! The slot gate (spec "At the slot gate"): HoldSiteSlotActivity, one READ COMMITTED
//! transaction: the request's instance lock, for an activation the site row by id, the pool's
//! limit read without a lock, the usage row, the count in a statement of its own, the hold, the
//! recount. Two gates of one pool queue on the usage row, and the second counts the first's
//! hold: two creates cannot both take the last slot. No workspace lock.

use crate::{
    db::{
        Db, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
    },
    services::ServiceError,
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki::{self as store, RequestRow},
};

pub static HOLD_SITE_SLOT_LOCKS: PathLocks = PathLocks {
    path: "HoldSiteSlotActivity",
    function: "services::fedwiki::gate::hold_site_slot",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::UsageRow],
    why: "The instance lock, the site row (an activation only), then the usage row and the count as a statement \
          of its own after it, so the count reads every hold and site committed before the lock was granted. \
          The hold row is written under its request's instance lock, so no one waits on it.",
};

/// What the gate decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// A slot is held for the request (now or by an earlier attempt).
    Held,
    /// No slot is free: `used` of `limit`.
    Full { used: i64, limit: i64 },
    /// The site is already active: no slot is needed.
    AlreadyActive,
    /// The site is gone, or the request is no longer accepted: nothing to do.
    Gone,
}

/// HoldSiteSlotActivity for a create or an activation.
#[tracing::instrument(name = "Hold a site slot", skip(db, req), fields(request_id = %req.request_id, domain = %req.domain))]
pub async fn hold_site_slot(db: &Db, req: &RequestRow) -> Result<Gate, ServiceError> {
    debug_assert!(matches!(req.kind, RequestKind::Create | RequestKind::Activate));
    let mut tx = crate::db::begin(db, TxKind::Plain).await?;
    tx.lock(&AdvisoryKey::LifecycleInstance(req.instance_id.clone())).await?;
    let current = store::request(tx.conn(), req.request_id).await?;
    if current.as_ref().is_none_or(|r| r.state != RequestState::Accepted) {
        return Ok(Gate::Gone);
    }
    if store::hold_exists(tx.conn(), req.request_id).await? {
        return Ok(Gate::Held);
    }
    if req.kind == RequestKind::Activate {
        match store::lock_site_status_by_id(tx.conn(), &req.instance_id).await? {
            None => return Ok(Gate::Gone),
            Some(site) if site.status == SiteStatus::Active => return Ok(Gate::AlreadyActive),
            Some(_) => {}
        }
    }
    let Some(pool) = store::pool_of_workspace(tx.conn(), &req.workspace_id).await? else {
        return Ok(Gate::Full { used: 0, limit: 0 });
    };
    let limit = store::active_sites_limit(tx.conn(), pool).await?;
    let gate = match store::lock_numeric_usage(tx.conn(), pool).await? {
        // No usage row: the pool has no entitlement to sites.
        None => Gate::Full { used: 0, limit: 0 },
        Some(_) => {
            let used = store::count_slots_by_pool(tx.conn(), pool).await?;
            if used < limit {
                store::insert_hold(tx.conn(), req.request_id, pool).await?;
                let recount = store::count_slots_by_pool(tx.conn(), pool).await?;
                store::write_usage(tx.conn(), pool, recount).await?;
                Gate::Held
            } else {
                Gate::Full { used, limit }
            }
        }
    };
    if req.kind == RequestKind::Create {
        let starts = if gate == Gate::Held { SiteStatus::Active } else { SiteStatus::Parked };
        store::set_starts_as(tx.conn(), req.request_id, starts).await?;
    }
    tx.commit().await?;
    Ok(gate)
}
