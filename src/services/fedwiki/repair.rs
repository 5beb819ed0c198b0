//! What keeps a request's outcome and the registry right across crashes (spec: "In the downgrade
//! sweep and at boot"): the status reconcile of a request whose outcome is unknown
//! (ReconcileFedWikiSiteStatusWorkflow), and, when a worker with a farm starts, settling the
//! requests no job carries any more (SettleOpenRequests), the recount of every pool, and the
//! domains reconciliation (one registry transaction per orphaned placement or unplaced site).

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace::{self, steps},
        tx::within,
    },
    ids::RequestId,
    integrations::farm::Farm,
    jobs::{Job, JobContext, JobError, remote_failure},
    services::ServiceError,
    states::{RequestKind, RequestState, SiteStatus},
    store::{
        fedwiki::{self as sites_store, RequestRow},
        fedwiki_maintenance as store,
    },
};

use super::{
    maintenance,
    record::{Activity, Recorded, finish_all_with},
    registry,
};

/// The status reconcile of one request: the farm says what became of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileSiteStatus {
    pub request_id: RequestId,
}

impl Job for ReconcileSiteStatus {
    const KIND: &'static str = "fedwiki_status_reconcile";
    type Context = super::FarmJobs;

    fn dedupe_key(&self) -> Option<String> {
        Some(format!("{}:{}", Self::KIND, self.request_id))
    }

    async fn run(&self, farm: &super::FarmJobs, job: &JobContext) -> Result<(), JobError> {
        reconcile_site_status(&job.db, &farm.farm, self.request_id).await.map_err(remote_failure)?;
        Ok(())
    }
}

pub static RECONCILE_DOMAINS_LOCKS: PathLocks = PathLocks {
    path: "Domains reconciliation at boot",
    function: "services::fedwiki::repair::reconcile_domains",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::SiteRowShare, Lock::PlacementRows],
    why: "One Registry.WithLock transaction per orphaned placement (the registry lock, then the placement row its \
          delete takes, while its site is still missing: no site row) or unplaced site (syncPlacement: the skip \
          checks, then that one site FOR SHARE before the placement).",
};

/// ReconcileFedWikiSiteStatusWorkflow: the request, its site row and the farm read with no lock;
/// the outcome through finishAllWith: the requested status recorded when the farm holds it, the
/// request ended failed otherwise; a site row gone ends it without reading the farm. Each
/// removes the request's hold and recounts.
#[tracing::instrument(name = "Reconcile a site's status", skip(db, farm))]
pub async fn reconcile_site_status(db: &Db, farm: &Farm, id: RequestId) -> Result<Recorded, ServiceError> {
    // The reads, with no lock; the transaction that reads is marked in the lock trace (a read's
    // commit is its rollback, and keeps the mark).
    let read = within(db, TxKind::Plain, async |tx: &mut Tx| {
        trace::step(tx.conn(), steps::STATUS_RECONCILE).await?;
        let Some(req) = sites_store::request(tx.conn(), id).await? else { return Ok(None) };
        let site = sites_store::site(tx.conn(), &req.instance_id).await?;
        Ok::<_, ServiceError>(Some((req, site)))
    })
    .await?;
    let Some((req, site)) = read else { return Ok(Recorded::AlreadyFinished) };
    if req.state != RequestState::Accepted {
        return Ok(Recorded::AlreadyFinished);
    }
    let one = std::slice::from_ref(&req);
    let not_made = |what: &str| Activity::Finish {
        state: RequestState::Failed,
        outcome: format!("The farm did not {what} {}; nothing was changed. Try again.", req.domain),
    };
    let wanted = match req.kind {
        RequestKind::Activate => SiteStatus::Active,
        RequestKind::Park => SiteStatus::Parked,
        RequestKind::Archive => SiteStatus::Archived,
        RequestKind::Create | RequestKind::Delete => {
            // Their outcome is the site's existence, which the request's own job reads again.
            let remote = farm.get_site(&req.domain).await.map_err(maintenance::farm_failure)?;
            let activity = match (req.kind, remote, site) {
                (RequestKind::Create, Some(f), _) => Activity::Created { status: f.status },
                (RequestKind::Create, None, _) => not_made("create"),
                (_, None, _) => Activity::Deleted,
                (_, Some(_), _) => not_made("delete"),
            };
            if matches!(activity, Activity::Deleted) {
                super::record::delete_fedwiki_site(db, &req.instance_id, &req.workspace_id).await?;
            }
            return finish_all_with(db, one, activity).await;
        }
    };
    if site.is_none() {
        return finish_all_with(db, one, not_made("keep")).await;
    }
    let remote = farm.get_site(&req.domain).await.map_err(maintenance::farm_failure)?;
    let activity = match remote.map(|f| f.status) {
        Some(status) if status == wanted => Activity::Status { status },
        _ => not_made(match wanted {
            SiteStatus::Active => "activate",
            SiteStatus::Parked => "park",
            SiteStatus::Archived => "archive",
        }),
    };
    finish_all_with(db, one, activity).await
}

/// Enqueue the status reconcile of a request (deduplicated while one is open).
pub async fn enqueue_status_reconcile(tx: &mut Tx, id: RequestId) -> Result<(), ServiceError> {
    ReconcileSiteStatus { request_id: id }.enqueue(tx.conn()).await?;
    Ok(())
}

/// What a repair at start did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repaired {
    pub handed_to_status_reconcile: usize,
    pub finished: usize,
    pub placements_removed: usize,
    pub sites_placed: usize,
}

/// At a worker's start, with a farm: settle, recount, reconcile the domains.
#[tracing::instrument(name = "Repair the sites at start", skip(db))]
pub async fn repair_at_start(db: &Db) -> Result<Repaired, ServiceError> {
    let mut done = settle_open_requests(db).await?;
    maintenance::recount_all_at_boot(db).await?;
    let (removed, placed) = reconcile_domains(db).await?;
    done.placements_removed = removed;
    done.sites_placed = placed;
    Ok(done)
}

/// SettleOpenRequests: each accepted request no job carries. One that holds a slot is handed to
/// the status reconcile (not finished here, its hold left in place); any other is finished
/// failed (the next sync writes whatever status the farm holds).
pub async fn settle_open_requests(db: &Db) -> Result<Repaired, ServiceError> {
    // Read with no lock, in a transaction marked in the lock trace (a read's commit is its
    // rollback, and keeps the mark).
    let stranded = within(db, TxKind::Plain, async |tx: &mut Tx| {
        trace::step(tx.conn(), steps::SETTLE_OPEN_REQUESTS).await?;
        Ok::<_, ServiceError>(store::stranded_requests(tx.conn()).await?)
    })
    .await?;
    let mut done = Repaired::default();
    for s in stranded {
        if s.holds_slot {
            within(db, TxKind::Plain, async |tx: &mut Tx| {
                trace::step(tx.conn(), steps::SETTLE_OPEN_REQUESTS).await?;
                enqueue_status_reconcile(tx, s.request_id).await
            })
            .await?;
            done.handed_to_status_reconcile += 1;
            continue;
        }
        let requests = {
            let mut read = db.read().await?;
            swap_halves(read.conn(), s.request_id).await?
        };
        if requests.is_empty() {
            continue;
        }
        let finished = finish_all_with(
            db,
            &requests,
            Activity::Finish {
                state: RequestState::Failed,
                outcome: "The console stopped before this request was carried out. Try again.".into(),
            },
        )
        .await?;
        if matches!(finished, Recorded::Done { .. }) {
            done.finished += 1;
        }
    }
    Ok(done)
}

/// The request and, for a swap, its other half, in the order they were recorded (the activation,
/// then the park): a swap has one outcome for both halves. Only those still accepted.
async fn swap_halves(conn: &mut sqlx::PgConnection, id: RequestId) -> Result<Vec<RequestRow>, ServiceError> {
    let Some(req) = sites_store::request(conn, id).await? else { return Ok(vec![]) };
    let activation = match req.swap_of {
        Some(a) => sites_store::request(conn, a).await?,
        None => Some(req.clone()),
    };
    let partner = match &activation {
        Some(a) => sites_store::swap_partner(conn, a.request_id).await?,
        None => None,
    };
    let mut halves: Vec<RequestRow> = activation.into_iter().chain(partner).collect();
    if halves.is_empty() {
        halves.push(req);
    }
    halves.retain(|r| r.state == RequestState::Accepted);
    Ok(halves)
}

/// The domains reconciliation: orphaned placements removed, unplaced sites placed, one registry
/// transaction each. (removed, placed).
pub async fn reconcile_domains(db: &Db) -> Result<(usize, usize), ServiceError> {
    let (orphans, unplaced) = {
        let mut read = db.read().await?;
        (store::orphaned_placements(read.conn()).await?, store::unplaced_sites(read.conn()).await?)
    };
    let mut removed = 0;
    for (hostname, _) in orphans {
        let gone = registry::with_lock_for(db, &RECONCILE_DOMAINS_LOCKS, async |tx: &mut Tx| {
            Ok(store::delete_orphaned_placement(tx.conn(), &hostname).await?)
        })
        .await?;
        removed += usize::from(gone);
    }
    let mut placed = 0;
    for (site_id, domain, workspace) in unplaced {
        placed += usize::from(
            maintenance::place_listed_site(db, &RECONCILE_DOMAINS_LOCKS, &site_id, &domain, &workspace).await?,
        );
    }
    Ok((removed, placed))
}
