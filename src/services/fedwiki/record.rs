//! The record step (spec "When recording an outcome"): finishAllWith, one READ COMMITTED
//! transaction: the requests' instance locks in the order they were recorded; the activity's
//! site-row writes; the requests' holds deleted; the usage row recounted; a swap's guard; the
//! request rows; a swap that did not happen gives its cooldown stamp back, on its policy row last. A request already finished (an earlier attempt recorded it) is left
//! alone, so a job that runs again records once.

use crate::{
    db::{
        Db, Tx, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
        tx::within_for,
    },
    ids::{PoolId, SiteId, WorkspaceId},
    services::ServiceError,
    states::{RequestState, SiteStatus},
    store::fedwiki::{self as store, RequestRow},
};

pub static RECORD_CREATED_SITE_LOCKS: PathLocks = PathLocks {
    path: "finishAllWith: RecordCreatedSiteActivity",
    function: "services::fedwiki::record::finish_all_with",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow, Lock::LifecycleRequestRows],
    why: "The instance lock, the site row's insert (its trigger marks the placement servable), the hold deleted, \
          the usage row and its recount, the request row last (rule 5).",
};

pub static RECORD_SITE_STATUS_LOCKS: PathLocks = PathLocks {
    path: "finishAllWith: RecordSiteStatusActivity",
    function: "services::fedwiki::record::finish_all_with",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow, Lock::LifecycleRequestRows],
    why: "The instance lock, the site row by id (LockSiteStatusByID, checked against the recorded workspace and \
          domain), its status, the placement flags through the trigger, the hold deleted, the usage row and its \
          recount, the request row last.",
};

pub static RECORD_SWAP_LOCKS: PathLocks = PathLocks {
    path: "finishAllWith: RecordSwapActivity",
    function: "services::fedwiki::record::finish_all_with",
    kind: "Plain",
    locks: &[
        Lock::LifecycleInstance,
        Lock::LifecycleInstance,
        Lock::SiteRow,
        Lock::SiteRow,
        Lock::PlacementRows,
        Lock::UsageRow,
        Lock::LifecycleRequestRows,
        Lock::SwapPolicyRow,
    ],
    why: "Both instance locks in the order the handler recorded them (the activated site's, then the parked \
          one's); the parked site's row, then the activated one's, both before either write; the usage row and \
          its recount; the guard reads the limit after the recount; both request rows; a swap that fails gives \
          its cooldown stamp back on the swap policy row last, as the handlers take it.",
};

pub static FINISH_LIFECYCLE_REQUESTS_LOCKS: PathLocks = PathLocks {
    path: "finishAllWith: FinishLifecycleRequestsActivity",
    function: "services::fedwiki::record::finish_all_with",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::UsageRow, Lock::LifecycleRequestRows, Lock::SwapPolicyRow],
    why: "A declined or failed outcome: the instance locks, no site row, the holds deleted, the usage row and \
          its recount, the request rows; a swap's gives its cooldown stamp back on the swap policy row last, as \
          the handlers take it.",
};

pub static DELETE_FEDWIKI_SITE_LOCKS: PathLocks = PathLocks {
    path: "DeleteFedWikiSiteActivity",
    function: "services::fedwiki::record::delete_fedwiki_site",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow],
    why: "The site row's delete, then the usage row and its recount, in a transaction of its own before the record \
          step (which recounts again).",
};

/// What the record step writes besides the requests' outcomes.
#[derive(Debug, Clone)]
pub enum Activity {
    /// RecordCreatedSiteActivity: the site row, in the status the gate chose.
    Created { status: SiteStatus },
    /// RecordSiteStatusActivity: the site's new status.
    Status { status: SiteStatus },
    /// RecordSwapActivity: the first request's site activated, the second's parked.
    Swap,
    /// RecordSiteDeletedActivity: the site is gone (DeleteFedWikiSiteActivity deleted it).
    Deleted,
    /// FinishLifecycleRequestsActivity: every request ends `state` with `outcome`.
    Finish { state: RequestState, outcome: String },
}

/// What the record step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Written, with the requests' final state and outcome.
    Done { state: RequestState, outcome: String },
    /// The requests were already finished: nothing written.
    AlreadyFinished,
    /// A swap's guard found the pool above its limit after the recount: rolled back.
    OverLimit { used: i64, limit: i64 },
}

/// finishAllWith: `requests` in the order they were recorded.
#[tracing::instrument(name = "Record a lifecycle outcome", skip(db, requests), fields(request_id = %requests[0].request_id, domain = %requests[0].domain))]
pub async fn finish_all_with(db: &Db, requests: &[RequestRow], activity: Activity) -> Result<Recorded, ServiceError> {
    let decl = match &activity {
        Activity::Created { .. } => &RECORD_CREATED_SITE_LOCKS,
        Activity::Status { .. } => &RECORD_SITE_STATUS_LOCKS,
        Activity::Swap => &RECORD_SWAP_LOCKS,
        Activity::Deleted | Activity::Finish { .. } => &FINISH_LIFECYCLE_REQUESTS_LOCKS,
    };
    let mut tx = crate::db::begin_for(db, TxKind::Plain, decl).await?;
    // What was recorded, and whether to keep it (a swap above the limit is given back).
    let recorded: Result<_, ServiceError> = async {
        crate::db::trace::step(tx.conn(), crate::db::trace::steps::FINISH_ALL_WITH).await?;
        for r in requests {
            // Rule 6: in the order the requests were recorded (the trace's ordinal).
            tx.lock_ordered(&AdvisoryKey::LifecycleInstance(r.instance_id.clone()), Some(r.request_id.0)).await?;
        }
        for r in requests {
            let now = store::request(tx.conn(), r.request_id).await?;
            if now.is_none_or(|n| n.state != RequestState::Accepted) {
                return Ok((Recorded::AlreadyFinished, true));
            }
        }
        let first = &requests[0];
        let (state, outcome) = match &activity {
            Activity::Created { status } => {
                store::insert_site(tx.conn(), &first.instance_id, &first.workspace_id, &first.domain, *status).await?;
                let outcome = match status {
                    SiteStatus::Active => format!("{} was created and is active.", first.domain),
                    _ => format!("{} was created parked: every active slot of the plan was taken.", first.domain),
                };
                (RequestState::Done, outcome)
            }
            Activity::Status { status } => match checked_site(&mut tx, first).await? {
                Ok(()) => {
                    store::set_site_status(tx.conn(), &first.instance_id, *status).await?;
                    (RequestState::Done, format!("{} is {status}.", first.domain))
                }
                Err(why) => (RequestState::Failed, why),
            },
            Activity::Swap => {
                let (activated, parked) = (&requests[0], &requests[1]);
                let checks = (checked_site(&mut tx, parked).await?, checked_site(&mut tx, activated).await?);
                match checks {
                    (Ok(()), Ok(())) => {
                        store::set_site_status(tx.conn(), &parked.instance_id, SiteStatus::Parked).await?;
                        store::set_site_status(tx.conn(), &activated.instance_id, SiteStatus::Active).await?;
                        (RequestState::Done, format!("{} is active and {} is parked.", activated.domain, parked.domain))
                    }
                    (Err(why), _) | (_, Err(why)) => (RequestState::Failed, why),
                }
            }
            Activity::Deleted => (RequestState::Done, format!("{} was deleted.", first.domain)),
            Activity::Finish { state, outcome } => (*state, outcome.clone()),
        };
        let ids: Vec<_> = requests.iter().map(|r| r.request_id).collect();
        store::delete_holds(tx.conn(), &ids).await?;
        let pool = store::pool_of_workspace(tx.conn(), &first.workspace_id).await?;
        let used = recount(&mut tx, pool).await?;
        if matches!(activity, Activity::Swap)
            && state == RequestState::Done
            && let (Some(pool), Some(used)) = (pool, used)
        {
            let limit = store::active_sites_limit(tx.conn(), pool).await?;
            if used > limit {
                return Ok((Recorded::OverLimit { used, limit }, false));
            }
        }
        for id in &ids {
            store::finish_request(tx.conn(), *id, state, &outcome).await?;
        }
        // A swap that did not happen does not start the swap cooldown its intake stamped: the policy
        // row last, as the handlers take it.
        if state != RequestState::Done && requests.iter().any(|r| r.swap_of.is_some()) {
            store::restore_swap_stamp(tx.conn(), &first.workspace_id, &ids).await?;
        }
        Ok((Recorded::Done { state, outcome }, true))
    }
    .await;
    tx.end_keeping(recorded).await
}

/// LockSiteStatusByID, checked against what the request recorded: Err(why) when the site is
/// gone or is no longer the one the request names.
async fn checked_site(tx: &mut Tx, r: &RequestRow) -> Result<Result<(), String>, ServiceError> {
    Ok(match store::lock_site_status_by_id(tx.conn(), &r.instance_id).await? {
        None => Err(format!("{} was deleted before the change could be recorded.", r.domain)),
        Some(s) if s.workspace_id != r.workspace_id || s.domain != r.domain => {
            Err(format!("{} changed hands before the change could be recorded.", r.domain))
        }
        Some(_) => Ok(()),
    })
}

/// usage.Recount in the caller's transaction: the usage row, the count as a statement of its
/// own, the write. A pool with no usage row takes no lock and writes no count.
pub async fn recount(tx: &mut Tx, pool: Option<PoolId>) -> Result<Option<i64>, ServiceError> {
    let Some(pool) = pool else { return Ok(None) };
    if store::lock_numeric_usage(tx.conn(), pool).await?.is_none() {
        return Ok(None);
    }
    let used = store::count_slots_by_pool(tx.conn(), pool).await?;
    store::write_usage(tx.conn(), pool, used).await?;
    Ok(Some(used))
}

/// DeleteFedWikiSiteActivity: the site row deleted and the pool recounted, on their own.
#[tracing::instrument(name = "Delete a FedWiki site row", skip(db))]
pub async fn delete_fedwiki_site(db: &Db, site_id: &SiteId, workspace_id: &WorkspaceId) -> Result<bool, ServiceError> {
    within_for(db, TxKind::Plain, &DELETE_FEDWIKI_SITE_LOCKS, async |tx: &mut Tx| {
        let gone = store::delete_site(tx.conn(), site_id).await?;
        let pool = store::pool_of_workspace(tx.conn(), workspace_id).await?;
        recount(tx, pool).await?;
        Ok(gone)
    })
    .await
}
