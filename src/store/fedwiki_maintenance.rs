//! FedWiki maintenance (spec: "In the farm sync", "In the retention purge", "In the downgrade
//! sweep and at boot"): the sync's reads and its one-site writes, the purge's, the quota's, and
//! the runs' record. Named as the spec names the queries where it names them.

use crate::db::locks::Lock;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use crate::{
    ids::{PoolId, SiteDomain, SiteId, WorkspaceId},
    states::SiteStatus,
};

// The sync ---------------------------------------------------------------------------------------

/// A RETURNING column that notes the site row a write just took (the lock trace), in the statement
/// itself: the site trigger (AFTER ROW) runs at the statement's end, so the placement rows it takes
/// are noted after the site row, in the order they were taken. Off, one setting read.
const NOTE_SITE_ROW: &str = "CASE WHEN current_setting('member_console.lock_trace', true) = 'on'
        THEN core.note_lock('SiteRow', site_id, 'FOR UPDATE', NULL)::text END";

/// A site as the console holds it, for the sync's comparison.
#[derive(Debug, Clone)]
pub struct KnownSite {
    pub site_id: SiteId,
    pub workspace_id: WorkspaceId,
    pub domain: SiteDomain,
    pub status: SiteStatus,
}

/// ListAllSites: one keyset page of the console's sites by domain, read with no lock.
pub async fn sites_after(conn: &mut PgConnection, after: &SiteDomain, limit: i64) -> sqlx::Result<Vec<KnownSite>> {
    sqlx::query_as!(
        KnownSite,
        r#"SELECT site_id, workspace_id, domain, status AS "status: SiteStatus"
           FROM fedwiki.sites WHERE domain > $1 ORDER BY domain LIMIT $2"#,
        after.as_str(),
        limit
    )
    .fetch_all(conn)
    .await
}

/// Whether a request is still accepted on `domain`, or one changed at or after `since`: the
/// sync's insert checks it again in its own transaction, since the pass's sets were read once,
/// before its later pages were listed.
pub async fn domain_has_request_since(
    conn: &mut PgConnection,
    domain: &SiteDomain,
    since: DateTime<Utc>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests
                           WHERE domain = $1 AND (state = 'accepted' OR updated_at >= $2)) AS "any!""#,
        domain.as_str(),
        since
    )
    .fetch_one(conn)
    .await
}

/// ListDomainsWithOpenRequests: the domains a request is still accepted on.
pub async fn domains_with_open_requests(conn: &mut PgConnection) -> sqlx::Result<Vec<SiteDomain>> {
    let d = sqlx::query_scalar!(
        "SELECT DISTINCT domain FROM fedwiki.lifecycle_requests WHERE state = 'accepted' ORDER BY 1"
    )
    .fetch_all(conn)
    .await?;
    Ok(d.into_iter().map(Into::into).collect())
}

/// ListDomainsWithRequestsUpdatedSince: the domains a request changed on at or after `since`.
pub async fn domains_with_requests_updated_since(
    conn: &mut PgConnection,
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<SiteDomain>> {
    let d = sqlx::query_scalar!(
        "SELECT DISTINCT domain FROM fedwiki.lifecycle_requests WHERE updated_at >= $1 ORDER BY 1",
        since
    )
    .fetch_all(conn)
    .await?;
    Ok(d.into_iter().map(Into::into).collect())
}

/// The workspaces that exist, of those the farm names as owners.
pub async fn existing_workspaces(conn: &mut PgConnection, ids: &[WorkspaceId]) -> sqlx::Result<Vec<WorkspaceId>> {
    let ids: Vec<&str> = ids.iter().map(WorkspaceId::as_str).collect();
    let w = sqlx::query_scalar!(
        "SELECT workspace_id FROM fedwiki.workspaces WHERE workspace_id = ANY ($1)",
        &ids as &[&str]
    )
    .fetch_all(conn)
    .await?;
    Ok(w.into_iter().map(WorkspaceId::from).collect())
}

/// A site the farm has and the console does not.
pub struct FarmOnly<'a> {
    pub site_id: &'a SiteId,
    pub workspace_id: &'a WorkspaceId,
    pub domain: &'a SiteDomain,
    pub status: SiteStatus,
    pub storage_bytes: i64,
    pub modified_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// writeStatus in one call (`fedwiki.write_farm_status`, an implicit transaction of its own):
/// the site row, whether a request is on it, the status, the pool's recount. True when written.
pub async fn write_farm_status(
    e: impl PgExecutor<'_>,
    domain: &SiteDomain,
    status: SiteStatus,
    storage_bytes: i64,
    modified_at: Option<DateTime<Utc>>,
    listed_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT fedwiki.write_farm_status($1, $2, $3, $4, $5) AS "written!""#,
        domain.as_str(),
        status as SiteStatus,
        storage_bytes,
        modified_at,
        listed_at
    )
    .fetch_one(e)
    .await
}

/// A farm-absent System row deleted: its row's lock noted as the DELETE takes it, before the
/// site trigger takes the placement rows. True when deleted.
pub async fn delete_system_site(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<bool> {
    let gone: Option<(String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "DELETE FROM fedwiki.sites WHERE site_id = $1 RETURNING site_id, {NOTE_SITE_ROW}"
    )))
    .bind(site_id.as_str())
    .fetch_optional(conn)
    .await?;
    Ok(gone.is_some())
}

/// usage.Recount in one call (`fedwiki.recount_site_usage`, an implicit transaction of its own):
/// the usage row, the count, the write; none when the pool has no usage row.
pub async fn recount_site_usage(e: impl PgExecutor<'_>, pool: PoolId) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT fedwiki.recount_site_usage($1)", pool as PoolId).fetch_one(e).await
}

/// SiteHasOpenRequest: a request on the site still accepted.
pub async fn site_has_open_request(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests WHERE instance_id = $1 AND state = 'accepted') AS "e!""#,
        site_id.as_str()
    )
    .fetch_one(conn)
    .await
}

/// Every pool with a usage row of active sites (usage.RecountAll's list), read with no lock.
pub async fn pools_with_site_usage(conn: &mut PgConnection) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT pool_id AS "pool_id: PoolId" FROM core.numeric_entitlement_usage
           WHERE resource_key = 'fedwiki.active_sites' ORDER BY pool_id"#
    )
    .fetch_all(conn)
    .await
}

// The retention purge ----------------------------------------------------------------------------

/// A site the purge or the quota acts on: its id, and the domain the farm knows it by.
#[derive(Debug, Clone)]
pub struct SiteOnDomain {
    pub site_id: SiteId,
    pub domain: SiteDomain,
}

/// The archived sites past retention, read with no lock.
pub async fn expired_archived_sites(
    conn: &mut PgConnection,
    retention_secs: f64,
    limit: i64,
) -> sqlx::Result<Vec<SiteOnDomain>> {
    sqlx::query_as!(
        SiteOnDomain,
        "SELECT site_id, domain FROM fedwiki.sites
          WHERE status = 'archived' AND status_changed_at < now() - make_interval(secs => $1)
          ORDER BY status_changed_at, site_id LIMIT $2",
        retention_secs,
        limit
    )
    .fetch_all(conn)
    .await
}

/// LockArchivedSiteForPurge: the row, only while it is still archived past retention, FOR
/// UPDATE; its domain.
pub async fn lock_archived_site_for_purge(
    conn: &mut PgConnection,
    site_id: &SiteId,
    retention_secs: f64,
) -> sqlx::Result<Option<SiteDomain>> {
    let r = sqlx::query_scalar!(
        "SELECT domain FROM fedwiki.sites
          WHERE site_id = $1 AND status = 'archived' AND status_changed_at < now() - make_interval(secs => $2)
          FOR UPDATE",
        site_id.as_str(),
        retention_secs
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::SiteRow, site_id.as_str(), None).await?;
    }
    Ok(r.map(SiteDomain::from))
}

// Quota reconciliation ---------------------------------------------------------------------------

/// An organization's pool whose active sites and limit differ: more active than allowed, or room
/// with sites the quota parked earlier.
#[derive(Debug, Clone)]
pub struct PoolQuota {
    pub pool_id: PoolId,
    pub workspace_id: WorkspaceId,
    pub active: i64,
    pub limit: i64,
    pub parked_by_sweep: i64,
}

/// The pools above their limit or with room for a site the quota parked, read with no lock.
pub async fn pools_out_of_quota(conn: &mut PgConnection) -> sqlx::Result<Vec<PoolQuota>> {
    sqlx::query_as!(
        PoolQuota,
        r#"SELECT p.pool_id AS "pool_id: PoolId", w.workspace_id,
                  count(*) FILTER (WHERE s.status = 'active') AS "active!",
                  coalesce(max(e.numeric_value), 0) AS "limit!",
                  count(*) FILTER (WHERE s.status = 'parked' AND s.parked_by_sweep) AS "parked_by_sweep!"
           FROM fedwiki.workspaces w
           JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
           JOIN fedwiki.sites s ON s.workspace_id = w.workspace_id
           LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
           GROUP BY p.pool_id, w.workspace_id
           HAVING count(*) FILTER (WHERE s.status = 'active') > coalesce(max(e.numeric_value), 0)
               OR (count(*) FILTER (WHERE s.status = 'active') < coalesce(max(e.numeric_value), 0)
                   AND count(*) FILTER (WHERE s.status = 'parked' AND s.parked_by_sweep) > 0)
           ORDER BY p.pool_id"#
    )
    .fetch_all(conn)
    .await
}

/// The workspace's active sites to park first: not "Keep active" before kept ones, least recently
/// modified (or created, for a site never observed) first; none with a request in flight.
pub async fn sites_to_park(
    conn: &mut PgConnection,
    workspace_id: &WorkspaceId,
    n: i64,
) -> sqlx::Result<Vec<SiteOnDomain>> {
    sqlx::query_as!(
        SiteOnDomain,
        "SELECT s.site_id, s.domain FROM fedwiki.sites s
          WHERE s.workspace_id = $1 AND s.status = 'active'
            AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                             WHERE r.instance_id = s.site_id AND r.state = 'accepted')
          ORDER BY s.keep_active, coalesce(s.modified_at, s.created_at), s.site_id
          LIMIT $2",
        workspace_id.as_str(),
        n
    )
    .fetch_all(conn)
    .await
}

/// The sites the quota parked, to reactivate first: most recently modified first.
pub async fn sites_to_reactivate(
    conn: &mut PgConnection,
    workspace_id: &WorkspaceId,
    n: i64,
) -> sqlx::Result<Vec<SiteOnDomain>> {
    sqlx::query_as!(
        SiteOnDomain,
        "SELECT s.site_id, s.domain FROM fedwiki.sites s
          WHERE s.workspace_id = $1 AND s.status = 'parked' AND s.parked_by_sweep
            AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                             WHERE r.instance_id = s.site_id AND r.state = 'accepted')
          ORDER BY coalesce(s.modified_at, s.created_at) DESC, s.site_id
          LIMIT $2",
        workspace_id.as_str(),
        n
    )
    .fetch_all(conn)
    .await
}

/// sweepLocally's write for a park: the status and the quota's mark, on the row the transaction
/// locked. False when the row is no longer `from` (a member's request wrote it meanwhile).
pub async fn sweep_status(
    conn: &mut PgConnection,
    site_id: &SiteId,
    from: SiteStatus,
    to: SiteStatus,
    parked_by_sweep: bool,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE fedwiki.sites SET status = $3, parked_by_sweep = $4, status_changed_at = now()
          WHERE site_id = $1 AND status = $2",
        site_id.as_str(),
        from as SiteStatus,
        to as SiteStatus,
        parked_by_sweep
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

// The runs ---------------------------------------------------------------------------------------

/// What one maintenance run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunCounts {
    pub farm_sites: i32,
    pub adopted: i32,
    pub observed: i32,
    pub statuses_written: i32,
    pub statuses_left: i32,
    pub removed: i32,
    pub missing_on_farm: i32,
    pub purged: i32,
    pub parked: i32,
    pub reactivated: i32,
}

pub async fn start_run(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!("INSERT INTO fedwiki.maintenance_runs DEFAULT VALUES RETURNING run_id").fetch_one(conn).await
}

pub async fn finish_run(conn: &mut PgConnection, run_id: i64, c: &RunCounts, error: Option<&str>) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE fedwiki.maintenance_runs
            SET finished_at = clock_timestamp(), outcome = CASE WHEN $3::text IS NULL THEN 'ok' ELSE 'failed' END,
                error = $3, farm_sites = $2, adopted = $4, observed = $5, statuses_written = $6, statuses_left = $7,
                removed = $8, missing_on_farm = $9, purged = $10, parked = $11, reactivated = $12
          WHERE run_id = $1",
        run_id,
        c.farm_sites,
        error,
        c.adopted,
        c.observed,
        c.statuses_written,
        c.statuses_left,
        c.removed,
        c.missing_on_farm,
        c.purged,
        c.parked,
        c.reactivated
    )
    .execute(&mut *conn)
    .await?;
    // Keep the last thousand runs.
    sqlx::query!(
        "DELETE FROM fedwiki.maintenance_runs WHERE run_id < (SELECT min(run_id) FROM
           (SELECT run_id FROM fedwiki.maintenance_runs ORDER BY run_id DESC LIMIT 1000) k)"
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One recorded run, as operators read it.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub run_id: i64,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub farm_sites: Option<i32>,
    pub adopted: i32,
    pub observed: i32,
    pub statuses_written: i32,
    pub statuses_left: i32,
    pub removed: i32,
    pub missing_on_farm: i32,
    pub purged: i32,
    pub parked: i32,
    pub reactivated: i32,
}

pub async fn recent_runs(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<RunRow>> {
    sqlx::query_as!(
        RunRow,
        "SELECT run_id, started_at, finished_at, outcome, error, farm_sites, adopted, observed, statuses_written,
                statuses_left, removed, missing_on_farm, purged, parked, reactivated
         FROM fedwiki.maintenance_runs ORDER BY run_id DESC LIMIT $1",
        limit
    )
    .fetch_all(conn)
    .await
}

/// The maintenance schedule: when it fires next, and its run's state when one is queued or
/// running ("pending", "running").
pub async fn schedule_state(
    conn: &mut PgConnection,
    name: &str,
) -> sqlx::Result<(Option<DateTime<Utc>>, Option<String>)> {
    let r = sqlx::query!(
        r#"SELECT (SELECT next_run_at FROM integration.job_schedules WHERE name = $1) AS next_run_at,
                  (SELECT state FROM integration.jobs WHERE dedupe_key = 'schedule:' || $1
                     AND state IN ('pending', 'running') LIMIT 1) AS state"#,
        name
    )
    .fetch_one(conn)
    .await?;
    Ok((r.next_run_at, r.state))
}

// Settle and the domains at boot -------------------------------------------------------------------

/// An accepted request no job carries any more (its job failed for good, or was lost), with
/// whether it holds a slot (SlotHoldExists), read with no lock. A swap's park half is carried by
/// its activation's job (`swap_of`), never by one of its own.
#[derive(Debug, Clone)]
pub struct Stranded {
    pub request_id: crate::ids::RequestId,
    pub holds_slot: bool,
}

pub async fn stranded_requests(conn: &mut PgConnection) -> sqlx::Result<Vec<Stranded>> {
    sqlx::query_as!(
        Stranded,
        r#"SELECT r.request_id AS "request_id: crate::ids::RequestId",
                  EXISTS (SELECT 1 FROM fedwiki.slot_holds h WHERE h.request_id = r.request_id) AS "holds_slot!"
           FROM fedwiki.lifecycle_requests r
           WHERE r.state = 'accepted'
             AND NOT EXISTS (SELECT 1 FROM integration.jobs j
                              WHERE j.state IN ('pending', 'running')
                                AND j.dedupe_key IN ('fedwiki_request:' || coalesce(r.swap_of, r.request_id),
                                                     'fedwiki_status_reconcile:' || r.request_id))
           ORDER BY r.request_id"#
    )
    .fetch_all(conn)
    .await
}

/// Placements of FedWiki sites that no longer exist, read with no lock: (host name, site id). A
/// create in flight has no site row until its record step: its placement (an accepted request
/// on the object) is not an orphan.
pub async fn orphaned_placements(conn: &mut PgConnection) -> sqlx::Result<Vec<(SiteDomain, SiteId)>> {
    let rows = sqlx::query!(
        "SELECT p.hostname, p.object_id FROM domains.placements p
          WHERE p.provider = 'fedwiki' AND NOT EXISTS (SELECT 1 FROM fedwiki.sites s WHERE s.site_id = p.object_id)
            AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                             WHERE r.instance_id = p.object_id AND r.state = 'accepted')
          ORDER BY p.hostname"
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.hostname.into(), r.object_id.into())).collect())
}

/// Sites whose own name has no placement (adopted, or a crash between two steps), read with no
/// lock: (site id, domain, workspace).
pub async fn unplaced_sites(conn: &mut PgConnection) -> sqlx::Result<Vec<(SiteId, SiteDomain, WorkspaceId)>> {
    let rows = sqlx::query!(
        "SELECT s.site_id, s.domain, s.workspace_id FROM fedwiki.sites s
          WHERE NOT EXISTS (SELECT 1 FROM domains.placements p WHERE p.hostname = s.domain)
          ORDER BY s.domain"
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.site_id.into(), r.domain.into(), r.workspace_id.into())).collect())
}

/// Delete one placement, only while its site is still missing and no request is accepted on it
/// (checked again here: a create may have been recorded since the list was read).
pub async fn delete_orphaned_placement(conn: &mut PgConnection, hostname: &SiteDomain) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "DELETE FROM domains.placements p WHERE p.hostname = $1 AND p.provider = 'fedwiki'
            AND NOT EXISTS (SELECT 1 FROM fedwiki.sites s WHERE s.site_id = p.object_id)
            AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                             WHERE r.instance_id = p.object_id AND r.state = 'accepted')",
        hostname.as_str()
    )
    .execute(&mut *conn)
    .await?;
    let gone = r.rows_affected() == 1;
    if gone {
        // The row's lock, held by its delete through commit (the lock trace; no trigger runs on a
        // placement's delete).
        crate::db::trace::note(conn, Lock::PlacementRows, hostname.as_str(), None).await?;
    }
    Ok(gone)
}

// The sync's observations, ordered by the farm's clock ----------------------------------------------

/// InsertSiteFromFarm with the list's moment as the row's first observation (`observed_as_of`), so
/// a callback that occurred before the list was taken and arrives later writes nothing. ON CONFLICT
/// DO NOTHING, as InsertSiteFromFarm. True when inserted.
pub async fn insert_listed_site(
    conn: &mut PgConnection,
    s: &FarmOnly<'_>,
    listed_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO fedwiki.sites (site_id, workspace_id, domain, status, storage_bytes, modified_at, observed_at,
                                    observed_as_of, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, now(), $7, $8) ON CONFLICT DO NOTHING",
        s.site_id.as_str(),
        s.workspace_id.as_str(),
        s.domain.as_str(),
        s.status as SiteStatus,
        s.storage_bytes,
        s.modified_at,
        listed_at,
        s.created_at
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// SetSiteObservedByDomain for the sync, as a list taken at `listed_at` saw the site: storage and
/// modification unless the row holds a later observation (a callback that occurred after the list
/// was taken), never a status; the status is written as it is either way, so the site's trigger
/// also corrects a wrong placement flag. The row's lock is held through commit. True when the
/// list's values were written; false when the row is gone or holds a later observation.
pub async fn observe_listed_site(
    conn: &mut PgConnection,
    domain: &SiteDomain,
    storage_bytes: i64,
    modified_at: Option<DateTime<Utc>>,
    listed_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    // The site row's lock is noted in RETURNING, as the UPDATE takes it: before the site trigger
    // (AFTER ROW, fired at the statement's end) takes and notes the placement rows it corrects.
    // The condition reads the row as locked (a callback committed meanwhile is seen).
    let written: Option<(bool, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE fedwiki.sites SET status = status,
                storage_bytes = CASE WHEN observed_as_of IS NULL OR observed_as_of <= $4 THEN $2 ELSE storage_bytes END,
                modified_at = CASE WHEN observed_as_of IS NULL OR observed_as_of <= $4
                                   THEN coalesce($3, modified_at) ELSE modified_at END,
                observed_at = CASE WHEN observed_as_of IS NULL OR observed_as_of <= $4 THEN now() ELSE observed_at END,
                observed_as_of = CASE WHEN observed_as_of IS NULL OR observed_as_of <= $4 THEN $4 ELSE observed_as_of END
          WHERE domain = $1
      RETURNING observed_as_of = $4, {NOTE_SITE_ROW}"
    )))
    .bind(domain.as_str())
    .bind(storage_bytes)
    .bind(modified_at)
    .bind(listed_at)
    .fetch_optional(conn)
    .await?;
    let written = written.map(|(w, _)| w);
    Ok(written == Some(true))
}
