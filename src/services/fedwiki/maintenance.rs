//! FedWiki maintenance (design: fedwiki.md "Maintenance"; spec: "In the farm sync", "In the
//! retention purge", "In the downgrade sweep and at boot"): one scheduled run, never two at once
//! (the job queue keeps one pending or running), that projects the farm into the console (the
//! sync), deletes archived sites past retention (the purge), then parks the active sites above a
//! plan's limit and brings back the ones it parked when room returns (quota reconciliation).
//! Every write is a transaction of one site (or one pool), at READ COMMITTED; the reads that
//! choose what to write hold no lock.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::{
    db::{
        Db, Tx, TxKind, begin_for,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
        trace::{self, steps},
        tx::{once_for, within, within_for},
    },
    ids::{PoolId, SiteDomain, SiteId, WorkspaceId},
    integrations::farm::{Farm, FarmError, FarmSite},
    services::ServiceError,
    states::SiteStatus,
    store::{domains as registry_store, fedwiki as sites_store, fedwiki_maintenance as store},
};

use super::{record::recount, registry};

pub static SYNC_INSERT_SITE_LOCKS: PathLocks = PathLocks {
    path: "SyncSitesToDB: a farm site with no row",
    function: "services::fedwiki::maintenance::insert_from_farm",
    kind: "Plain",
    locks: &[Lock::UsageRow],
    why: "The skip check again, without a lock (a request accepted on the domain, or one changed since the list \
          was taken: the pass's sets were read before its later pages were listed), then InsertSiteFromFarm (ON \
          CONFLICT DO NOTHING: a row a create recorded after the pass read its rows is left alone), then the \
          pool's recount: its usage row, the count in a statement of its own.",
};

pub static SYNC_OBSERVE_SITE_LOCKS: PathLocks = PathLocks {
    path: "SyncSitesToDB: the listed status equals the row's",
    function: "services::fedwiki::maintenance::observe",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows],
    why: "SetSiteObservedByDomain: the row's storage and modification, never its status, the row lock held through \
          commit; the status written as it is lets the site trigger correct a wrong placement flag. No usage row.",
};

pub static SYNC_WRITE_STATUS_LOCKS: PathLocks = PathLocks {
    path: "SyncSitesToDB: writeStatus",
    function: "services::fedwiki::maintenance::write_status",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow],
    why: "LockSiteStatusByDomain, then whether a request on the site is still accepted or changed since the list was \
          taken (then it commits with no write: the request's own record step writes the status last); otherwise \
          the status (the trigger moves the placements), then the pool's recount. A record step takes the same \
          site row, so one of the two waits for the other.",
};

pub static SYNC_REMOVE_SYSTEM_SITE_LOCKS: PathLocks = PathLocks {
    path: "SyncSitesToDB: a farm-absent System row",
    function: "services::fedwiki::maintenance::remove_system_site",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows],
    why: "The System workspace's row the farm no longer lists is deleted (its placements leave the servable set \
          through the trigger); the System workspace has no usage row, so nothing is recounted. The name is \
          released after the commit, in a registry transaction.",
};

pub static RECOUNT_ALL_LOCKS: PathLocks = PathLocks {
    path: "usage.RecountAll",
    function: "services::fedwiki::maintenance::recount_all",
    kind: "Plain",
    locks: &[Lock::UsageRow],
    why: "One transaction per pool: LockNumericUsage, then the count in a statement of its own, then the figure. No \
          other lock.",
};

pub static SYNC_PLACEMENT_LOCKS: PathLocks = PathLocks {
    path: "Registry: syncPlacement",
    function: "services::fedwiki::maintenance::sync_placement",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::SiteRowShare],
    why: "A creator: the registry lock and every skip check first (the name under the farm's zone, not placed), then \
          exactly one site FOR SHARE (GetSiteForPlacement) immediately before the placement's write; a missing \
          site places nothing. The sync runs it for a site it adopts, and a member's deletion that failed for \
          good runs it to give the site back the name it released.",
};

pub static PURGE_ARCHIVED_SITE_LOCKS: PathLocks = PathLocks {
    path: "purgeArchivedSite",
    function: "services::fedwiki::maintenance::purge_archived_site",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance, Lock::SiteRow, Lock::PlacementRows],
    why: "The site's instance lock, then LockArchivedSiteForPurge (only a row still archived past retention: one \
          whose eligibility changed during the wait is skipped), then the check for an accepted request; the \
          farm's DELETE and the row's deletion under both locks, through commit. No usage lock: the row is \
          archived. Its names are released after the commit.",
};

pub static PARK_SITE_LOCKS: PathLocks = PathLocks {
    path: "parkSite (sweepLocally)",
    function: "services::fedwiki::maintenance::park_site",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow],
    why: "The farm call first, with no lock held; then the site row, the status and the quota's mark (the trigger \
          moves the placements), then the pool's recount. A row a member's request changed meanwhile rolls it \
          back, and the farm's site is set back to the row's status, with no lock held.",
};

pub static REACTIVATE_SITE_LOCKS: PathLocks = PathLocks {
    path: "reactivateSite",
    function: "services::fedwiki::maintenance::reactivate_site",
    kind: "Plain",
    locks: &[Lock::SiteRow, Lock::PlacementRows, Lock::UsageRow],
    why: "The farm call first, with no slot taken; then the site row, the status, the recount and the pool's limit \
          read in the same transaction: a figure above the limit rolls it back (and the farm's site is parked \
          again); so does a row a member's request changed meanwhile (and the farm's site is set back to its \
          status, with no lock held).",
};

/// The console's sites and the farm's, read per page: a pass stays flat in memory.
const PAGE: i64 = 1000;
const FARM_PAGE: usize = 1000;

/// The farm's list and the console's rows walked side by side by domain, a page of each at a
/// time (each console page read on its own with no lock), so a pass's memory does not grow with
/// the number of sites.
struct SiteMerge<'a> {
    farm: &'a Farm,
    /// The first page's time: every change the list does not show happened after it.
    listed_at: Option<DateTime<Utc>>,
    farm_page: std::collections::VecDeque<FarmSite>,
    farm_next: Option<SiteDomain>,
    farm_done: bool,
    farm_seen: usize,
    console_page: std::collections::VecDeque<store::KnownSite>,
    console_after: SiteDomain,
    console_done: bool,
    console_seen: usize,
}

/// One domain, as the two sides hold it.
enum Pair {
    FarmOnly(FarmSite),
    ConsoleOnly(store::KnownSite),
    Both(FarmSite, store::KnownSite),
}

impl<'a> SiteMerge<'a> {
    /// The first farm page is read at once (its time is the pass's `listed_at`).
    async fn start(farm: &'a Farm) -> Result<SiteMerge<'a>, ServiceError> {
        let mut m = SiteMerge {
            farm,
            listed_at: None,
            farm_page: Default::default(),
            farm_next: Some(SiteDomain::from("")),
            farm_done: false,
            farm_seen: 0,
            console_page: Default::default(),
            console_after: SiteDomain::from(""),
            console_done: false,
            console_seen: 0,
        };
        m.fill_farm().await?;
        Ok(m)
    }

    async fn fill_farm(&mut self) -> Result<(), ServiceError> {
        if !self.farm_page.is_empty() || self.farm_done {
            return Ok(());
        }
        let Some(after) = self.farm_next.take() else {
            self.farm_done = true;
            return Ok(());
        };
        let page = self.farm.list_page(&after, FARM_PAGE).await.map_err(farm_failure)?;
        self.listed_at.get_or_insert(page.listed_at);
        self.farm_seen += page.sites.len();
        self.farm_next = page.next;
        self.farm_done = page.sites.is_empty();
        self.farm_page = page.sites.into();
        Ok(())
    }

    async fn fill_console(&mut self, db: &Db) -> Result<(), ServiceError> {
        if !self.console_page.is_empty() || self.console_done {
            return Ok(());
        }
        let page = {
            let mut read = db.read().await?;
            store::sites_after(read.conn(), &self.console_after, PAGE).await?
        };
        match page.last() {
            Some(last) => self.console_after = last.domain.clone(),
            None => self.console_done = true,
        }
        self.console_seen += page.len();
        self.console_page = page.into();
        Ok(())
    }

    async fn next(&mut self, db: &Db) -> Result<Option<Pair>, ServiceError> {
        self.fill_farm().await?;
        self.fill_console(db).await?;
        let pair = match (self.farm_page.front(), self.console_page.front()) {
            (None, None) => return Ok(None),
            (Some(_), None) => Pair::FarmOnly(self.farm_page.pop_front().expect("a farm site")),
            (None, Some(_)) => Pair::ConsoleOnly(self.console_page.pop_front().expect("a console site")),
            (Some(f), Some(c)) => match f.domain.cmp(&c.domain) {
                std::cmp::Ordering::Less => Pair::FarmOnly(self.farm_page.pop_front().expect("a farm site")),
                std::cmp::Ordering::Greater => {
                    Pair::ConsoleOnly(self.console_page.pop_front().expect("a console site"))
                }
                std::cmp::Ordering::Equal => Pair::Both(
                    self.farm_page.pop_front().expect("a farm site"),
                    self.console_page.pop_front().expect("a console site"),
                ),
            },
        };
        Ok(Some(pair))
    }
}

pub(super) fn farm_failure(e: FarmError) -> ServiceError {
    ServiceError::Remote { transient: e.is_transient(), sentence: e.to_string() }
}

/// Run the maintenance once: sync, purge, quota. Recorded in `fedwiki.maintenance_runs`; a farm
/// that fails ends the run failed (nothing half-written; the next run repairs).
#[tracing::instrument(name = "FedWiki maintenance", skip_all)]
pub async fn run_maintenance(
    db: &Db,
    farm: &Farm,
    retention: std::time::Duration,
) -> Result<store::RunCounts, ServiceError> {
    let run_id =
        within(db, TxKind::Plain, async |tx: &mut Tx| Ok::<_, ServiceError>(store::start_run(tx.conn()).await?))
            .await?;
    let mut counts = store::RunCounts::default();
    let outcome = async {
        sync_sites(db, farm, &mut counts).await?;
        counts.purged = purge_archived(db, farm, retention).await?;
        reconcile_quota(db, farm, &mut counts).await
    }
    .await;
    let failure = outcome.as_ref().err().map(|e| e.to_string());
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        Ok::<_, ServiceError>(store::finish_run(tx.conn(), run_id, &counts, failure.as_deref()).await?)
    })
    .await?;
    outcome.map(|()| counts)
}

// The sync -----------------------------------------------------------------------------------------

/// SyncSitesToDBActivity: the farm's list (a page at a time) and the console's sets, read with no
/// lock held; then one site per transaction; then RecountAll.
pub async fn sync_sites(db: &Db, farm: &Farm, counts: &mut store::RunCounts) -> Result<(), ServiceError> {
    let mut merge = SiteMerge::start(farm).await?;
    let listed_at = merge.listed_at.unwrap_or_else(Utc::now);
    let (open, recent) = {
        let mut read = db.read().await?;
        let open: HashSet<SiteDomain> = store::domains_with_open_requests(read.conn()).await?.into_iter().collect();
        let recent: HashSet<SiteDomain> =
            store::domains_with_requests_updated_since(read.conn(), listed_at).await?.into_iter().collect();
        (open, recent)
    };
    while let Some(pair) = merge.next(db).await? {
        match pair {
            Pair::ConsoleOnly(row) if row.workspace_id == super::SYSTEM_WORKSPACE => {
                if remove_system_site(db, &row.site_id).await? {
                    registry::release_site_names(db, &row.site_id).await?;
                    counts.removed += 1;
                }
            }
            // An organization's site the farm lost: the operators see it as drift; the member's
            // row stays (the farm may list it again, or a member deletes it).
            Pair::ConsoleOnly(_) => counts.missing_on_farm += 1,
            // A create in flight records this site itself (its record step inserts the row).
            Pair::FarmOnly(site) if open.contains(&site.domain) || recent.contains(&site.domain) => {
                counts.statuses_left += 1;
            }
            Pair::FarmOnly(site) => {
                // Adopted into its owner's workspace when the console knows it, else System's.
                let known = {
                    let mut read = db.read().await?;
                    !store::existing_workspaces(read.conn(), std::slice::from_ref(&site.owner)).await?.is_empty()
                };
                let workspace = if known { site.owner.clone() } else { WorkspaceId::from(super::SYSTEM_WORKSPACE) };
                let status = site.status;
                if let Some(site_id) = insert_from_farm(db, &site, &workspace, status, listed_at).await? {
                    sync_placement(db, &site_id, &site.domain, &workspace).await?;
                    counts.adopted += 1;
                }
            }
            Pair::Both(site, row) => {
                let listed = site.status;
                if listed == row.status {
                    if observe(db, &site, listed_at).await? {
                        counts.observed += 1;
                    }
                } else if open.contains(&row.domain) || recent.contains(&row.domain) {
                    // A request is on it: its record step writes the status.
                    counts.statuses_left += 1;
                } else if write_status(db, &site, listed, listed_at).await? {
                    counts.statuses_written += 1;
                } else {
                    counts.statuses_left += 1;
                }
            }
        }
    }
    counts.farm_sites = merge.farm_seen as i32;
    recount_pools(db, Some(steps::SYNC_END_OF_PASS)).await
}

/// A farm site with no row: inserted, then its pool recounted, unless a request is on its domain
/// now or changed it since `listed_at`. The new row's id, when inserted.
pub async fn insert_from_farm(
    db: &Db,
    site: &FarmSite,
    workspace_id: &WorkspaceId,
    status: SiteStatus,
    listed_at: DateTime<Utc>,
) -> Result<Option<SiteId>, ServiceError> {
    let site_id = SiteId::from(format!("s-{}", crate::config::random_hex(10)));
    within_for(db, TxKind::Plain, &SYNC_INSERT_SITE_LOCKS, async |tx: &mut Tx| {
        // A create in flight records its site itself, and a deletion that finished after the list was
        // taken must not bring its site back: the sets the pass read may predate this page.
        if store::domain_has_request_since(tx.conn(), &site.domain, listed_at).await? {
            return Ok(None);
        }
        let row = store::FarmOnly {
            site_id: &site_id,
            workspace_id,
            domain: &site.domain,
            status,
            storage_bytes: site.storage_bytes,
            modified_at: site.modified_at,
            created_at: site.created_at,
        };
        if !store::insert_listed_site(tx.conn(), &row, listed_at).await? {
            return Ok(None);
        }
        let pool = sites_store::pool_of_workspace(tx.conn(), workspace_id).await?;
        recount(tx, pool).await?;
        Ok(Some(site_id))
    })
    .await
}

/// The listed status equals the row's: what the farm measured, unless a callback that occurred
/// after the list was taken is already recorded.
async fn observe(db: &Db, site: &FarmSite, listed_at: DateTime<Utc>) -> Result<bool, ServiceError> {
    within_for(db, TxKind::Plain, &SYNC_OBSERVE_SITE_LOCKS, async |tx: &mut Tx| {
        let done = store::observe_listed_site(tx.conn(), &site.domain, site.storage_bytes, site.modified_at, listed_at)
            .await?;
        Ok(done)
    })
    .await
}

/// writeStatus: the farm's status where no request is on the site. True when written. One round
/// trip (`fedwiki.write_farm_status`): LockSiteStatusByDomain, then whether a request is on the
/// site in a statement of its own (a request committed before the lock is seen), then the status
/// and the pool's recount.
pub async fn write_status(
    db: &Db,
    site: &FarmSite,
    listed: SiteStatus,
    listed_at: DateTime<Utc>,
) -> Result<bool, ServiceError> {
    if trace::is_on() {
        // Traced, the same call in a transaction that names its path first: an autocommit call
        // has no statement before its lock to name it in. The locks and their order are the
        // function's either way.
        return within_for(db, TxKind::Plain, &SYNC_WRITE_STATUS_LOCKS, async |tx: &mut Tx| {
            let written = store::write_farm_status(
                tx.conn(),
                &site.domain,
                listed,
                site.storage_bytes,
                site.modified_at,
                listed_at,
            )
            .await?;
            Ok::<_, ServiceError>(written)
        })
        .await;
    }
    Ok(store::write_farm_status(&db.pool, &site.domain, listed, site.storage_bytes, site.modified_at, listed_at)
        .await?)
}

/// A farm-absent System row: deleted (System has no usage row). True when deleted.
async fn remove_system_site(db: &Db, site_id: &SiteId) -> Result<bool, ServiceError> {
    within_for(db, TxKind::Plain, &SYNC_REMOVE_SYSTEM_SITE_LOCKS, async |tx: &mut Tx| {
        let gone = store::delete_system_site(tx.conn(), site_id).await?;
        Ok(gone)
    })
    .await
}

/// usage.RecountAll: every pool with a usage row of active sites, one transaction each.
pub async fn recount_all(db: &Db) -> Result<(), ServiceError> {
    recount_pools(db, None).await
}

/// usage.RecountAll from the domains reconciliation at a worker's start (the spec's path 44).
pub async fn recount_all_at_boot(db: &Db) -> Result<(), ServiceError> {
    recount_pools(db, Some(steps::RECOUNT_AT_BOOT)).await
}

/// usage.RecountAll, each pool's transaction marked with `step` in the lock trace (the boot's, or
/// the end of a sync pass).
async fn recount_pools(db: &Db, step: Option<&'static str>) -> Result<(), ServiceError> {
    let pools: Vec<PoolId> = {
        let mut read = db.read().await?;
        store::pools_with_site_usage(read.conn()).await?
    };
    for pool in pools {
        // usage.Recount, one round trip: its usage row, the count, the write; the path named
        // first and the step marked after, when tracing (the statement carries only the pool id).
        let mark = match step.filter(|_| trace::is_on()) {
            Some(name) => format!("; SELECT core.note_marker('step', {})", trace::quote(name)),
            None => String::new(),
        };
        once_for(db, TxKind::Plain, &RECOUNT_ALL_LOCKS, format!("SELECT fedwiki.recount_site_usage({}){mark}", pool.0))
            .await?;
    }
    Ok(())
}

/// syncPlacement: an adopted site's own name placed (under the farm's zone, not placed yet),
/// reading that one site FOR SHARE right before the write.
pub async fn sync_placement(
    db: &Db,
    site_id: &SiteId,
    domain: &SiteDomain,
    workspace_id: &WorkspaceId,
) -> Result<bool, ServiceError> {
    place_listed_site(db, &SYNC_PLACEMENT_LOCKS, site_id, domain, workspace_id).await
}

/// syncPlacement's transaction, named for the path that runs it (the sync's adoption, a failed
/// deletion's give-back, or the domains reconciliation at boot).
pub(super) async fn place_listed_site(
    db: &Db,
    decl: &'static PathLocks,
    site_id: &SiteId,
    domain: &SiteDomain,
    workspace_id: &WorkspaceId,
) -> Result<bool, ServiceError> {
    let owner = registry::workspace_owner(workspace_id);
    registry::with_lock_for(db, decl, async |tx: &mut Tx| {
        // Every skip check first.
        match registry_store::covering_claim(tx.conn(), domain).await? {
            Some((_, o)) if o == "farm" || o == owner => {}
            _ => return Ok(false),
        }
        if registry_store::placement(tx.conn(), domain).await?.is_some() {
            return Ok(false);
        }
        let Some(status) = sites_store::get_site_for_placement(tx.conn(), site_id).await? else { return Ok(false) };
        Ok(registry_store::insert_site_placement(tx.conn(), domain, &owner, site_id, status == SiteStatus::Active)
            .await?)
    })
    .await
}

// The retention purge ------------------------------------------------------------------------------

/// Every archived site past retention, one transaction each. How many were deleted.
pub async fn purge_archived(db: &Db, farm: &Farm, retention: std::time::Duration) -> Result<i32, ServiceError> {
    let secs = retention.as_secs_f64();
    let mut purged = 0;
    loop {
        let candidates = {
            let mut read = db.read().await?;
            store::expired_archived_sites(read.conn(), secs, 100).await?
        };
        let mut any = false;
        for site in &candidates {
            if purge_archived_site(db, farm, &site.site_id, secs).await? {
                purged += 1;
                any = true;
            }
        }
        if candidates.len() < 100 || !any {
            return Ok(purged);
        }
    }
}

/// purgeArchivedSite: instance lock, the still-expired archived row, no accepted request; the
/// farm's delete and the row's under both locks; the names released after the commit.
pub async fn purge_archived_site(
    db: &Db,
    farm: &Farm,
    site_id: &SiteId,
    retention_secs: f64,
) -> Result<bool, ServiceError> {
    let purged = within_for(db, TxKind::Plain, &PURGE_ARCHIVED_SITE_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::LifecycleInstance(site_id.clone())).await?;
        let Some(domain) = store::lock_archived_site_for_purge(tx.conn(), site_id, retention_secs).await? else {
            return Ok(false);
        };
        if store::site_has_open_request(tx.conn(), site_id).await? {
            return Ok(false);
        }
        farm.delete_site(&domain).await.map_err(farm_failure)?;
        sites_store::delete_site(tx.conn(), site_id).await?;
        Ok::<_, ServiceError>(true)
    })
    .await?;
    // After the commit, in a registry transaction of its own (spec: "Placement release uses a
    // separate registry transaction after commit"): run inside, it waited for the registry lock
    // while holding the instance lock and the site row, which a placement creator holding the
    // registry lock waits for (GetSiteForPlacement).
    if purged {
        registry::release_site_names(db, site_id).await?;
    }
    Ok(purged)
}

// Quota reconciliation -------------------------------------------------------------------------------

/// Park what a pool has above its limit; bring back what the quota parked while there is room.
pub async fn reconcile_quota(db: &Db, farm: &Farm, counts: &mut store::RunCounts) -> Result<(), ServiceError> {
    let pools = {
        let mut read = db.read().await?;
        store::pools_out_of_quota(read.conn()).await?
    };
    for p in pools {
        if p.active > p.limit {
            let park = {
                let mut read = db.read().await?;
                store::sites_to_park(read.conn(), &p.workspace_id, p.active - p.limit).await?
            };
            for site in park {
                if park_site(db, farm, &site.site_id, &site.domain).await? {
                    counts.parked += 1;
                }
            }
        } else {
            let back = {
                let mut read = db.read().await?;
                store::sites_to_reactivate(read.conn(), &p.workspace_id, p.limit - p.active).await?
            };
            for site in back {
                if reactivate_site(db, farm, &site.site_id, &site.domain, p.pool_id).await? {
                    counts.reactivated += 1;
                } else {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Quota reconciliation alone (what a run does after the sync and the purge), for an operator's
/// "run now" of it and for tests: what it parked and brought back.
pub async fn reconcile_quota_now(db: &Db, farm: &Farm) -> Result<store::RunCounts, ServiceError> {
    let mut counts = store::RunCounts::default();
    reconcile_quota(db, farm, &mut counts).await?;
    Ok(counts)
}

/// What a quota move's transaction found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moved {
    /// Written and recounted: kept.
    Done,
    /// The row is gone: a member deleted the site, and the deletion removes the farm's site too.
    Gone,
    /// The row stays in this status (a member's request decided it, or the limit has no room):
    /// rolled back, and the farm's site is set back to it.
    Stays(SiteStatus),
}

/// Commit a quota move's transaction only when it moved the site; then the farm follows the row.
async fn end_quota_move(
    tx: crate::db::Tx,
    farm: &Farm,
    domain: &SiteDomain,
    farm_now: SiteStatus,
    moved: Result<Moved, ServiceError>,
) -> Result<bool, ServiceError> {
    match tx.end_keeping(moved.map(|m| (m, m == Moved::Done))).await? {
        Moved::Done => Ok(true),
        Moved::Stays(status) if status != farm_now => {
            farm.set_status(domain, status).await.map_err(farm_failure)?;
            Ok(false)
        }
        Moved::Stays(_) | Moved::Gone => Ok(false),
    }
}

/// parkSite: the farm first, no lock held; then sweepLocally. False when a member's request
/// changed the site meanwhile: its own status stands, and the farm's site is set back to it.
pub async fn park_site(db: &Db, farm: &Farm, site_id: &SiteId, domain: &SiteDomain) -> Result<bool, ServiceError> {
    farm.set_status(domain, SiteStatus::Parked).await.map_err(farm_failure)?;
    let mut tx = begin_for(db, TxKind::Plain, &PARK_SITE_LOCKS).await?;
    let moved = async {
        let Some(row) = sites_store::lock_site_status_by_id(tx.conn(), site_id).await? else { return Ok(Moved::Gone) };
        // No longer active: a member's request decided it and its status stands. The farm goes
        // back to it (the row as locked), or the next sync, with no request open, would write
        // "parked" over an archive, which retention then never purges.
        if !store::sweep_status(tx.conn(), site_id, SiteStatus::Active, SiteStatus::Parked, true).await? {
            return Ok(Moved::Stays(row.status));
        }
        let pool = sites_store::pool_of_workspace(tx.conn(), &row.workspace_id).await?;
        recount(&mut tx, pool).await?;
        Ok(Moved::Done)
    }
    .await;
    end_quota_move(tx, farm, domain, SiteStatus::Parked, moved).await
}

/// reactivateSite: the farm first, no slot taken; then the row, the status, the recount and the
/// limit in one transaction, rolled back (and the farm's site parked again) above the limit.
/// A row a member's request changed meanwhile keeps its status, and the farm's site is set back
/// to it. False when it did not come back.
pub async fn reactivate_site(
    db: &Db,
    farm: &Farm,
    site_id: &SiteId,
    domain: &SiteDomain,
    pool: PoolId,
) -> Result<bool, ServiceError> {
    farm.set_status(domain, SiteStatus::Active).await.map_err(farm_failure)?;
    let mut tx = begin_for(db, TxKind::Plain, &REACTIVATE_SITE_LOCKS).await?;
    let moved = async {
        let Some(row) = sites_store::lock_site_status_by_id(tx.conn(), site_id).await? else { return Ok(Moved::Gone) };
        // No longer parked: a member's request decided it and its status stands. The farm goes
        // back to it (the row as locked), or the next sync would write "active" over an archive.
        if !store::sweep_status(tx.conn(), site_id, SiteStatus::Parked, SiteStatus::Active, false).await? {
            return Ok(Moved::Stays(row.status));
        }
        let used = recount(&mut tx, Some(pool)).await?.unwrap_or(i64::MAX);
        let limit = sites_store::active_sites_limit(tx.conn(), pool).await?;
        Ok(if used <= limit { Moved::Done } else { Moved::Stays(SiteStatus::Parked) })
    }
    .await;
    end_quota_move(tx, farm, domain, SiteStatus::Active, moved).await
}

// The operators' view ---------------------------------------------------------------------------------

/// A site the farm and the console disagree about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub domain: SiteDomain,
    pub farm_status: Option<SiteStatus>,
    pub console_status: Option<SiteStatus>,
    pub workspace_id: Option<WorkspaceId>,
}

/// `/operator/farm`: the recent runs, the schedule, and (when asked) the drift between the farm's
/// list and the console's rows, at most `DRIFT_SHOWN` of it.
#[derive(Debug, Clone)]
pub struct FarmOverview {
    pub runs: Vec<store::RunRow>,
    pub next_run_at: Option<DateTime<Utc>>,
    /// "pending" or "running" while a run is queued or going.
    pub run_state: Option<String>,
    pub drift: Option<DriftReport>,
    /// Domains waiting on DNS: pending claims, and verified ones whose record is missing.
    pub claims: Vec<crate::store::domains::WatchedClaim>,
}

#[derive(Debug, Clone)]
pub struct DriftReport {
    pub farm_sites: usize,
    pub console_sites: usize,
    pub rows: Vec<Drift>,
    pub total: usize,
    /// The farm did not answer: its sentence.
    pub farm_error: Option<String>,
}

pub const DRIFT_SHOWN: usize = 100;
pub const RUNS_SHOWN: i64 = 20;
/// How many waiting domains the farm page lists.
pub const CLAIMS_SHOWN: i64 = 200;

#[tracing::instrument(name = "Read the farm's overview", skip_all)]
pub async fn farm_overview(db: &Db, farm: Option<&Farm>, with_drift: bool) -> Result<FarmOverview, ServiceError> {
    use crate::jobs::Job;
    let (runs, state_and_claims) = {
        let mut read = db.read().await?;
        let runs = store::recent_runs(read.conn(), RUNS_SHOWN).await?;
        let state = store::schedule_state(read.conn(), super::FedwikiMaintenance::KIND).await?;
        let claims = crate::store::domains::watched_claims(read.conn(), CLAIMS_SHOWN).await?;
        (runs, (state, claims))
    };
    let (next_run_at, run_state) = state_and_claims.0;
    let claims = state_and_claims.1;
    let drift = match (with_drift, farm) {
        (true, Some(farm)) => Some(drift(db, farm).await?),
        _ => None,
    };
    Ok(FarmOverview { runs, next_run_at, run_state, drift, claims })
}

/// The farm's list beside the console's rows, a page of each at a time.
async fn drift(db: &Db, farm: &Farm) -> Result<DriftReport, ServiceError> {
    let mut merge = match SiteMerge::start(farm).await {
        Ok(m) => m,
        Err(e) => {
            let farm_error = Some(e.to_string());
            return Ok(DriftReport { farm_sites: 0, console_sites: 0, rows: vec![], total: 0, farm_error });
        }
    };
    let (mut rows, mut total) = (vec![], 0);
    loop {
        let pair = match merge.next(db).await {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(ServiceError::Remote { sentence, .. }) => {
                let farm_error = Some(sentence);
                return Ok(DriftReport { farm_sites: 0, console_sites: 0, rows: vec![], total: 0, farm_error });
            }
            Err(e) => return Err(e),
        };
        let d = match pair {
            Pair::Both(f, c) if f.status == c.status => continue,
            Pair::Both(f, c) => Drift {
                domain: c.domain,
                farm_status: Some(f.status),
                console_status: Some(c.status),
                workspace_id: Some(c.workspace_id),
            },
            Pair::ConsoleOnly(c) => Drift {
                domain: c.domain,
                farm_status: None,
                console_status: Some(c.status),
                workspace_id: Some(c.workspace_id),
            },
            Pair::FarmOnly(f) => {
                Drift { domain: f.domain, farm_status: Some(f.status), console_status: None, workspace_id: None }
            }
        };
        total += 1;
        if rows.len() < DRIFT_SHOWN {
            rows.push(d);
        }
    }
    Ok(DriftReport { farm_sites: merge.farm_seen, console_sites: merge.console_seen, rows, total, farm_error: None })
}

/// "Run now": a maintenance run enqueued at once, refused while one is queued or running (the
/// schedule's key keeps one open run).
#[tracing::instrument(name = "Run the maintenance now", skip(db))]
pub async fn run_now(db: &Db) -> Result<(), ServiceError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        if crate::jobs::schedule::run_now::<super::FedwikiMaintenance>(tx.conn(), "operator").await?.is_none() {
            return Err(ServiceError::Refused(
                "A maintenance run is already queued or running: its result shows below when it ends.".into(),
            ));
        }
        Ok(())
    })
    .await
}
