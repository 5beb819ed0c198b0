//! Lifecycle intake (spec "Lifecycle intake"): a request is recorded under its instance's
//! advisory lock, which makes the latest-generation check and the insert one step. Each takes
//! the caller's transaction (its own, or the handler's under the workspace lock), and enqueues
//! the request's job on it, so the request exists only with its job.

use crate::{
    db::{
        Tx,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
    },
    ids::{AccountId, RequestId, SiteDomain, SiteId, WorkspaceId},
    jobs::Job,
    services::ServiceError,
    states::{RequestKind, RequestState},
    store::fedwiki as store,
};

use super::RunSiteRequest;

pub static RECORD_LIFECYCLE_REQUEST_LOCKS: PathLocks = PathLocks {
    path: "RecordLifecycleRequest",
    function: "services::fedwiki::intake::record_lifecycle_request",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance],
    why: "The instance lock first, then the latest generation, then the insert: two requests on one site \
          cannot both pass the check that none is in flight.",
};

pub static RECORD_FIRST_LIFECYCLE_REQUEST_LOCKS: PathLocks = PathLocks {
    path: "RecordFirstLifecycleRequest",
    function: "services::fedwiki::intake::record_first_lifecycle_request",
    kind: "Registry",
    locks: &[Lock::LifecycleInstance],
    why: "The instance lock once and the latest generation read once: an instance that already holds a request \
          is refused, so a create is recorded once. It runs on the create's registry transaction, after the \
          placement (see \"Registry: place a member's site name\").",
};

pub static DELETE_UNSTARTED_LIFECYCLE_REQUEST_LOCKS: PathLocks = PathLocks {
    path: "DeleteUnstartedLifecycleRequest",
    function: "services::fedwiki::intake::delete_unstarted_lifecycle_request",
    kind: "Plain",
    locks: &[],
    why: "No instance lock: it deletes a request whose job has not started, with the job, in one statement; a \
          job claimed meanwhile keeps both. A member's Withdraw calls it (handlers::withdraw_request).",
};

/// A request to record.
pub struct Intake<'a> {
    pub instance_id: &'a SiteId,
    pub workspace_id: &'a WorkspaceId,
    pub domain: &'a SiteDomain,
    pub kind: RequestKind,
    /// The activation's request, for the parked side of a swap (which rides on its job).
    pub swap_of: Option<RequestId>,
    pub requested_by: Option<AccountId>,
}

/// RecordLifecycleRequest on the caller's transaction.
#[tracing::instrument(name = "Record a lifecycle request", skip(tx, r), fields(instance = %r.instance_id, kind = %r.kind))]
pub async fn record_lifecycle_request(tx: &mut Tx, r: &Intake<'_>) -> Result<RequestId, ServiceError> {
    // Run inside the caller's transaction (a handler's), so recorded as observed there.
    crate::db::trace::path(tx.conn(), &RECORD_LIFECYCLE_REQUEST_LOCKS).await?;
    tx.lock(&AdvisoryKey::LifecycleInstance(r.instance_id.clone())).await?;
    let latest = store::latest_request(tx.conn(), r.instance_id).await?;
    decide(tx, r, latest).await
}

/// RecordFirstLifecycleRequest on the caller's transaction: refused when the instance already
/// holds a request.
#[tracing::instrument(name = "Record a first lifecycle request", skip(tx, r), fields(instance = %r.instance_id))]
pub async fn record_first_lifecycle_request(tx: &mut Tx, r: &Intake<'_>) -> Result<RequestId, ServiceError> {
    // Run inside the create's registry transaction, so recorded as observed there.
    crate::db::trace::path(tx.conn(), &RECORD_FIRST_LIFECYCLE_REQUEST_LOCKS).await?;
    tx.lock(&AdvisoryKey::LifecycleInstance(r.instance_id.clone())).await?;
    let latest = store::latest_request(tx.conn(), r.instance_id).await?;
    if latest.is_some() {
        return Err(ServiceError::Refused(format!("{} was already asked for.", r.domain)));
    }
    decide(tx, r, latest).await
}

async fn decide(tx: &mut Tx, r: &Intake<'_>, latest: Option<(i32, RequestState)>) -> Result<RequestId, ServiceError> {
    if let Some((_, RequestState::Accepted)) = latest {
        return Err(ServiceError::Refused(format!(
            "A change to {} is already in progress: wait for it to finish, then try again.",
            r.domain
        )));
    }
    let generation = latest.map(|(g, _)| g + 1).unwrap_or(1);
    let id = store::insert_request(
        tx.conn(),
        &store::NewRequest {
            instance_id: r.instance_id,
            generation,
            workspace_id: r.workspace_id,
            domain: r.domain,
            kind: r.kind,
            swap_of: r.swap_of,
            requested_by: r.requested_by,
        },
    )
    .await?;
    if r.swap_of.is_none() {
        RunSiteRequest { request_id: id }.enqueue(tx.conn()).await?;
    }
    Ok(id)
}

/// The dedupe key of a request's job.
pub fn job_key(id: RequestId) -> String {
    format!("fedwiki_request:{id}")
}

/// DeleteUnstartedLifecycleRequest: true when the request and its job were deleted.
#[tracing::instrument(name = "Delete an unstarted lifecycle request", skip(db))]
pub async fn delete_unstarted_lifecycle_request(db: &crate::db::Db, id: RequestId) -> Result<bool, ServiceError> {
    crate::db::tx::within_for(
        db,
        crate::db::TxKind::Plain,
        &DELETE_UNSTARTED_LIFECYCLE_REQUEST_LOCKS,
        async |tx: &mut Tx| {
            let gone = store::delete_unstarted_request(tx.conn(), id).await?;
            Ok(gone)
        },
    )
    .await
}
