//! The slot gate (spec "At the slot gate"): HoldSiteSlotActivity, one READ COMMITTED
//! transaction (one call to `fedwiki.hold_site_slot`): the request's instance lock, for an activation the site row by id, the pool's
//! limit read without a lock, the usage row, the count in a statement of its own, the hold, the
//! recount. Two gates of one pool queue on the usage row, and the second counts the first's
//! hold: two creates cannot both take the last slot. No workspace lock.

use crate::{
    db::{
        Db, TxKind,
        locks::{Lock, PathLocks},
    },
    services::ServiceError,
    states::RequestKind,
    store::fedwiki::{self as store, RequestRow},
};

pub static HOLD_SITE_SLOT_LOCKS: PathLocks = PathLocks {
    path: "HoldSiteSlotActivity",
    function: "services::fedwiki::gate::hold_site_slot",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::UsageRow, Lock::LifecycleRequestRows],
    why: "The instance lock, the site row (an activation only), then the usage row and the count as a statement \
          of its own after it, so the count reads every hold and site committed before the lock was granted. \
          The hold row is written under its request's instance lock, so no one waits on it. A create's request \
          row last, by the write of the status the gate chose for it (starts_as; rule 5: the request rows last).",
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

/// HoldSiteSlotActivity for a create or an activation: the transaction, the call to
/// `fedwiki.hold_site_slot` (which takes the locks above, in that order) and the commit in one
/// round trip.
#[tracing::instrument(name = "Hold a site slot", skip(db, req), fields(request_id = %req.request_id, domain = %req.domain))]
pub async fn hold_site_slot(db: &Db, req: &RequestRow) -> Result<Gate, ServiceError> {
    debug_assert!(matches!(req.kind, RequestKind::Create | RequestKind::Activate));
    let Some(statement) = store::hold_site_slot_statement(req.request_id, &req.instance_id) else {
        return Err(ServiceError::invalid_form(format!("{} is not a site id the console made.", req.instance_id)));
    };
    let rows = crate::db::tx::once_for(db, TxKind::Plain, &HOLD_SITE_SLOT_LOCKS, statement).await?;
    let (outcome, used, limit) = store::gate_answer(&rows)?;
    Ok(match outcome.as_str() {
        "held" => Gate::Held,
        "full" => Gate::Full { used, limit },
        "already_active" => Gate::AlreadyActive,
        _ => Gate::Gone,
    })
}
