//! FedWiki: workspaces, sites, lifecycle requests, slot holds, the usage row of
//! `fedwiki.active_sites`, the swap policy and the farm's callbacks. Named as the spec names the
//! queries where it names them (LockSiteStatusByID, LockNumericUsage, CountSlotsByPool, ...).

use crate::db::locks::Lock;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{AccountId, OrganizationId, PoolId, RequestId, SiteDomain, SiteId, WorkspaceId},
    states::{RequestKind, RequestState, SiteStatus},
};

/// The resource key whose usage the sites are.
pub const ACTIVE_SITES: &str = "fedwiki.active_sites";

// Workspaces ----------------------------------------------------------------------------------------

/// An organization's workspace id (made on its first site).
pub fn workspace_of(organization_id: OrganizationId) -> WorkspaceId {
    WorkspaceId::from(format!("org-{organization_id}"))
}

pub async fn ensure_workspace(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<WorkspaceId> {
    let id = workspace_of(organization_id);
    sqlx::query!(
        "INSERT INTO fedwiki.workspaces (workspace_id, organization_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        id.as_str(),
        organization_id as OrganizationId
    )
    .execute(conn)
    .await?;
    Ok(id)
}

/// The default pool of the workspace's organization (None for the System workspace).
pub async fn pool_of_workspace(conn: &mut PgConnection, workspace_id: &WorkspaceId) -> sqlx::Result<Option<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT p.pool_id AS "pool_id: PoolId" FROM fedwiki.workspaces w
           JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
           WHERE w.workspace_id = $1"#,
        workspace_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

// Sites ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, serde::Deserialize)]
pub struct SiteRow {
    pub site_id: SiteId,
    pub workspace_id: WorkspaceId,
    pub domain: SiteDomain,
    pub status: SiteStatus,
    pub keep_active: bool,
    pub storage_bytes: Option<i64>,
    pub modified_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Parked by the quota reconciliation (not by a member): it comes back when there is room.
    pub parked_by_sweep: bool,
    pub status_changed_at: DateTime<Utc>,
}

/// A site by id, without a lock.
pub async fn site(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<Option<SiteRow>> {
    sqlx::query_as!(
        SiteRow,
        r#"SELECT site_id, workspace_id, domain, status AS "status: SiteStatus", keep_active, storage_bytes,
                  modified_at, created_at, parked_by_sweep, status_changed_at
           FROM fedwiki.sites WHERE site_id = $1"#,
        site_id.as_str()
    )
    .fetch_optional(conn)
    .await
}

/// LockSiteStatusByID: the site's row FOR UPDATE.
pub async fn lock_site_status_by_id(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<Option<SiteRow>> {
    let r = sqlx::query_as!(
        SiteRow,
        r#"SELECT site_id, workspace_id, domain, status AS "status: SiteStatus", keep_active, storage_bytes,
                  modified_at, created_at, parked_by_sweep, status_changed_at
           FROM fedwiki.sites WHERE site_id = $1 FOR UPDATE"#,
        site_id.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::SiteRow, site_id.as_str(), None).await?;
    }
    Ok(r)
}

/// GetSiteForPlacement: the site's status, its row FOR SHARE (a placement creator's one site).
pub async fn get_site_for_placement(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<Option<SiteStatus>> {
    let r = sqlx::query_scalar!(
        r#"SELECT status AS "status: SiteStatus" FROM fedwiki.sites WHERE site_id = $1 FOR SHARE"#,
        site_id.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::SiteRowShare, site_id.as_str(), None).await?;
    }
    Ok(r)
}

/// RecordCreatedSiteActivity's insert; a repeat of it (the same site) writes nothing.
pub async fn insert_site(
    conn: &mut PgConnection,
    site_id: &SiteId,
    workspace_id: &WorkspaceId,
    domain: &SiteDomain,
    status: SiteStatus,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO fedwiki.sites (site_id, workspace_id, domain, status) VALUES ($1, $2, $3, $4)
         ON CONFLICT (site_id) DO NOTHING",
        site_id.as_str(),
        workspace_id.as_str(),
        domain.as_str(),
        status as SiteStatus
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn set_site_status(conn: &mut PgConnection, site_id: &SiteId, status: SiteStatus) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE fedwiki.sites SET status = $2, status_changed_at = now(), parked_by_sweep = false
         WHERE site_id = $1 AND status IS DISTINCT FROM $2",
        site_id.as_str(),
        status as SiteStatus
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_keep_active(conn: &mut PgConnection, site_id: &SiteId, keep: bool) -> sqlx::Result<bool> {
    let r = sqlx::query!("UPDATE fedwiki.sites SET keep_active = $2 WHERE site_id = $1", site_id.as_str(), keep)
        .execute(&mut *conn)
        .await?;
    let written = r.rows_affected() == 1;
    if written {
        // Keep active: the row's UPDATE, held through commit.
        crate::db::trace::note(conn, Lock::SiteRow, site_id.as_str(), None).await?;
    }
    Ok(written)
}

pub async fn delete_site(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<bool> {
    let r = sqlx::query!("DELETE FROM fedwiki.sites WHERE site_id = $1", site_id.as_str()).execute(&mut *conn).await?;
    let gone = r.rows_affected() == 1;
    if gone {
        // The row's lock, held by its delete through commit (the trace's; the trigger notes the
        // placement rows after it).
        crate::db::trace::note(conn, Lock::SiteRow, site_id.as_str(), None).await?;
    }
    Ok(gone)
}

/// What SetSiteObservedByDomain did with a callback's observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    Written,
    /// The row holds a later observation (`observed_as_of`, the farm's clock): nothing written.
    Older {
        known: DateTime<Utc>,
    },
    NoSite,
}

/// SetSiteObservedByDomain: what the farm reported of a site's storage and modification at
/// `occurred_at` (never its status), unless the row already holds a later observation. The row's
/// lock is held through commit; the condition is checked on the row as locked.
pub async fn set_site_observed_by_domain(
    conn: &mut PgConnection,
    domain: &SiteDomain,
    storage_bytes: i64,
    modified_at: Option<DateTime<Utc>>,
    occurred_at: DateTime<Utc>,
) -> sqlx::Result<Observed> {
    let r = sqlx::query!(
        "UPDATE fedwiki.sites SET storage_bytes = $2, modified_at = coalesce($3, modified_at), observed_at = now(),
                                  observed_as_of = $4
         WHERE domain = $1 AND (observed_as_of IS NULL OR observed_as_of <= $4)",
        domain.as_str(),
        storage_bytes,
        modified_at,
        occurred_at
    )
    .execute(&mut *conn)
    .await?;
    if r.rows_affected() == 1 {
        // The row's lock, held through commit (the callback's one lock), noted by the site's id:
        // read only when tracing, under the lock the UPDATE holds.
        if crate::db::trace::is_on() {
            let site_id: String = sqlx::query_scalar("SELECT site_id FROM fedwiki.sites WHERE domain = $1")
                .bind(domain.as_str())
                .fetch_one(&mut *conn)
                .await?;
            crate::db::trace::note(conn, Lock::SiteRow, site_id.as_str(), None).await?;
        }
        return Ok(Observed::Written);
    }
    // Only to say why nothing was written; the update above decided.
    let known = sqlx::query_scalar!("SELECT observed_as_of FROM fedwiki.sites WHERE domain = $1", domain.as_str())
        .fetch_optional(conn)
        .await?;
    Ok(match known {
        Some(Some(known)) => Observed::Older { known },
        // A row with no observation would have been written: gone between the two statements.
        Some(None) | None => Observed::NoSite,
    })
}

// Lifecycle requests ----------------------------------------------------------------------------------

#[derive(Debug, Clone, serde::Deserialize)]
pub struct RequestRow {
    pub request_id: RequestId,
    pub instance_id: SiteId,
    pub generation: i32,
    pub workspace_id: WorkspaceId,
    pub domain: SiteDomain,
    pub kind: RequestKind,
    pub swap_of: Option<RequestId>,
    pub state: RequestState,
    pub outcome: Option<String>,
    pub starts_as: Option<SiteStatus>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub async fn request(conn: &mut PgConnection, id: RequestId) -> sqlx::Result<Option<RequestRow>> {
    sqlx::query_as!(
        RequestRow,
        r#"SELECT request_id AS "request_id: RequestId", instance_id, generation, workspace_id, domain,
                  kind AS "kind: RequestKind", swap_of AS "swap_of: RequestId", state AS "state: RequestState",
                  outcome, starts_as AS "starts_as: SiteStatus", created_at, updated_at
           FROM fedwiki.lifecycle_requests WHERE request_id = $1"#,
        id as RequestId
    )
    .fetch_optional(conn)
    .await
}

/// The parked side of a swap whose activation is `activation`.
pub async fn swap_partner(conn: &mut PgConnection, activation: RequestId) -> sqlx::Result<Option<RequestRow>> {
    sqlx::query_as!(
        RequestRow,
        r#"SELECT request_id AS "request_id: RequestId", instance_id, generation, workspace_id, domain,
                  kind AS "kind: RequestKind", swap_of AS "swap_of: RequestId", state AS "state: RequestState",
                  outcome, starts_as AS "starts_as: SiteStatus", created_at, updated_at
           FROM fedwiki.lifecycle_requests WHERE swap_of = $1"#,
        activation as RequestId
    )
    .fetch_optional(conn)
    .await
}

/// An instance's latest request: its generation and state.
pub async fn latest_request(
    conn: &mut PgConnection,
    instance_id: &SiteId,
) -> sqlx::Result<Option<(i32, RequestState)>> {
    let r = sqlx::query!(
        r#"SELECT generation, state AS "state: RequestState" FROM fedwiki.lifecycle_requests
           WHERE instance_id = $1 ORDER BY generation DESC LIMIT 1"#,
        instance_id.as_str()
    )
    .fetch_optional(conn)
    .await?;
    Ok(r.map(|r| (r.generation, r.state)))
}

pub struct NewRequest<'a> {
    pub instance_id: &'a SiteId,
    pub generation: i32,
    pub workspace_id: &'a WorkspaceId,
    pub domain: &'a SiteDomain,
    pub kind: RequestKind,
    pub swap_of: Option<RequestId>,
    pub requested_by: Option<AccountId>,
}

pub async fn insert_request(conn: &mut PgConnection, r: &NewRequest<'_>) -> sqlx::Result<RequestId> {
    sqlx::query_scalar!(
        r#"INSERT INTO fedwiki.lifecycle_requests (instance_id, generation, workspace_id, domain, kind, swap_of, requested_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING request_id AS "id: RequestId""#,
        r.instance_id.as_str(),
        r.generation,
        r.workspace_id.as_str(),
        r.domain.as_str(),
        r.kind as RequestKind,
        r.swap_of as Option<RequestId>,
        r.requested_by as Option<AccountId>
    )
    .fetch_one(conn)
    .await
}

/// FinishLifecycleRequest: an accepted request's outcome; a finished one is left as it is.
pub async fn finish_request(
    conn: &mut PgConnection,
    id: RequestId,
    state: RequestState,
    outcome: &str,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE fedwiki.lifecycle_requests SET state = $2, outcome = $3, updated_at = clock_timestamp()
         WHERE request_id = $1 AND state = 'accepted'",
        id as RequestId,
        state as RequestState,
        outcome
    )
    .execute(&mut *conn)
    .await?;
    let written = r.rows_affected() == 1;
    if written {
        // The request row's lock, held by its UPDATE through commit (rule 5: the request rows last).
        crate::db::trace::note(conn, Lock::LifecycleRequestRows, id, Some(id.0)).await?;
    }
    Ok(written)
}

/// DeleteUnstartedLifecycleRequest: a request whose job has not started (still pending, no
/// attempt spent) is deleted with its job. No instance lock: a job claimed meanwhile keeps both.
pub async fn delete_unstarted_request(conn: &mut PgConnection, id: RequestId) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "WITH gone AS (
             DELETE FROM integration.jobs j
              WHERE j.dedupe_key = 'fedwiki_request:' || $1::bigint::text AND j.state = 'pending' AND j.attempts = 0
             RETURNING 1)
         DELETE FROM fedwiki.lifecycle_requests r
          WHERE r.request_id = $1 AND r.state = 'accepted' AND EXISTS (SELECT 1 FROM gone)",
        id as RequestId
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Whether a site row holds `domain`, and if so whether a deletion of it is under way (an
/// accepted delete request: its name is released before its row is deleted). None: no row.
pub async fn site_on_domain(conn: &mut PgConnection, domain: &SiteDomain) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                           WHERE r.instance_id = s.site_id AND r.kind = 'delete' AND r.state = 'accepted')
                  AS "deleting!"
             FROM fedwiki.sites s WHERE s.domain = $1"#,
        domain.as_str()
    )
    .fetch_optional(conn)
    .await
}

/// The requests whose jobs carry the accepted requests on a domain (a callback nudges those
/// jobs). A swap's park half has no job of its own: it rides on its activation's, so the
/// activation is named in its place, and the park is never run as a park of its own.
pub async fn open_requests_on_domain(conn: &mut PgConnection, domain: &SiteDomain) -> sqlx::Result<Vec<RequestId>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT coalesce(swap_of, request_id) AS "id!: RequestId" FROM fedwiki.lifecycle_requests
           WHERE domain = $1 AND state = 'accepted' ORDER BY 1"#,
        domain.as_str()
    )
    .fetch_all(conn)
    .await
}

// The slot gate ---------------------------------------------------------------------------------------

/// HoldSiteSlotActivity as one call to `fedwiki.hold_site_slot` (migration 0021).
pub fn hold_site_slot_statement(request: RequestId, instance: &SiteId) -> Option<String> {
    // Runtime SQL: a `tx::once` statement (simple protocol, one round trip) takes no parameters,
    // so the instance is written in as a literal, and only an id the console mints (letters,
    // digits and hyphens) is.
    let instance = instance.as_str();
    let minted = !instance.is_empty() && instance.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    minted.then(|| format!("SELECT fedwiki.hold_site_slot({request}, '{instance}')"))
}

/// The gate's answer: (outcome, used, limit), the outcome one of held, full, already_active, gone.
pub fn gate_answer(rows: &[sqlx::postgres::PgRow]) -> sqlx::Result<(String, i64, i64)> {
    use sqlx::Row;
    let text: String = match rows.first() {
        Some(r) => r.try_get(0)?,
        None => return Err(sqlx::Error::RowNotFound),
    };
    let parts: Vec<&str> = text.split(' ').collect();
    match parts.as_slice() {
        [outcome, used, limit] => match (used.parse(), limit.parse()) {
            (Ok(used), Ok(limit)) => Ok((outcome.to_string(), used, limit)),
            _ => Err(sqlx::Error::Protocol(format!("fedwiki.hold_site_slot answered {text:?}"))),
        },
        _ => Err(sqlx::Error::Protocol(format!("fedwiki.hold_site_slot answered {text:?}"))),
    }
}

// Slot holds and usage ----------------------------------------------------------------------------------

/// DeleteSlotHolds
pub async fn delete_holds(conn: &mut PgConnection, requests: &[RequestId]) -> sqlx::Result<()> {
    let ids: Vec<i64> = requests.iter().map(|r| r.0).collect();
    sqlx::query!("DELETE FROM fedwiki.slot_holds WHERE request_id = ANY($1)", &ids).execute(conn).await?;
    Ok(())
}

/// LockNumericUsage: the pool's usage row of `fedwiki.active_sites`, FOR UPDATE; None when the
/// pool has none (no entitlement to sites, or the System workspace's).
pub async fn lock_numeric_usage(conn: &mut PgConnection, pool: PoolId) -> sqlx::Result<Option<i64>> {
    let r = sqlx::query_scalar!(
        "SELECT used FROM core.numeric_entitlement_usage WHERE pool_id = $1 AND resource_key = $2 FOR UPDATE",
        pool as PoolId,
        ACTIVE_SITES
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::UsageRow, crate::db::trace::Key2(pool, ACTIVE_SITES), Some(pool.0)).await?;
    }
    Ok(r)
}

/// CountSlotsByPool: active sites plus open holds. A statement of its own, after the usage lock.
pub async fn count_slots_by_pool(conn: &mut PgConnection, pool: PoolId) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT fedwiki.count_slots($1) AS "n!""#, pool as PoolId).fetch_one(conn).await
}

pub async fn write_usage(conn: &mut PgConnection, pool: PoolId, used: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.numeric_entitlement_usage SET used = $3, counted_at = now()
         WHERE pool_id = $1 AND resource_key = $2",
        pool as PoolId,
        ACTIVE_SITES,
        used
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The pool's limit of active sites, read without a lock (0 when it has none).
pub async fn active_sites_limit(conn: &mut PgConnection, pool: PoolId) -> sqlx::Result<i64> {
    let v = sqlx::query_scalar!(
        "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = $2",
        pool as PoolId,
        ACTIVE_SITES
    )
    .fetch_optional(conn)
    .await?;
    Ok(v.flatten().unwrap_or(0))
}

/// Whether the pool's organization may put a site under a domain of its own.
pub async fn custom_domain_allowed(conn: &mut PgConnection, pool: PoolId) -> sqlx::Result<bool> {
    let v = sqlx::query_scalar!(
        "SELECT flag_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = 'fedwiki.custom_domain'",
        pool as PoolId
    )
    .fetch_optional(conn)
    .await?;
    Ok(v.flatten().unwrap_or(false))
}

// The swap policy ---------------------------------------------------------------------------------------

pub async fn last_swap_at(conn: &mut PgConnection, workspace_id: &WorkspaceId) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar!("SELECT last_swap_at FROM fedwiki.swap_policies WHERE workspace_id = $1", workspace_id.as_str())
        .fetch_optional(conn)
        .await
        .map(Option::flatten)
}

pub async fn last_activation_at(
    conn: &mut PgConnection,
    workspace_id: &WorkspaceId,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar!(
        "SELECT last_activation_at FROM fedwiki.swap_policies WHERE workspace_id = $1",
        workspace_id.as_str()
    )
    .fetch_optional(conn)
    .await
    .map(Option::flatten)
}

/// The swap policy row, upserted last by a swap (or, with `activation`, by an activation under
/// its cooldown).
pub async fn upsert_swap_policy(
    conn: &mut PgConnection,
    workspace_id: &WorkspaceId,
    activation: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO fedwiki.swap_policies (workspace_id, last_swap_at, last_activation_at)
         VALUES ($1, CASE WHEN $2 THEN NULL ELSE now() END, CASE WHEN $2 THEN now() END)
         ON CONFLICT (workspace_id) DO UPDATE
            SET last_swap_at = CASE WHEN $2 THEN fedwiki.swap_policies.last_swap_at ELSE now() END,
                last_activation_at = CASE WHEN $2 THEN now() ELSE fedwiki.swap_policies.last_activation_at END",
        workspace_id.as_str(),
        activation
    )
    .execute(&mut *conn)
    .await?;
    // The policy row's lock (an existing row's by the upsert's update; a new row's by its insert),
    // held through commit: last, as the handlers take it.
    crate::db::trace::note(conn, Lock::SwapPolicyRow, workspace_id.as_str(), None).await?;
    Ok(())
}

// Callbacks -----------------------------------------------------------------------------------------------

/// Record a callback's id; false when it was already received (a duplicate does nothing).
pub async fn record_callback(
    conn: &mut PgConnection,
    event_id: &str,
    kind: &str,
    domain: &SiteDomain,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO fedwiki.farm_callbacks (event_id, kind, domain) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        event_id,
        kind,
        domain.as_str()
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

// Membership -------------------------------------------------------------------------------------------------

/// The organization of a workspace the account is a member of.
pub async fn member_workspace_org(
    conn: &mut PgConnection,
    account: AccountId,
    workspace_id: &WorkspaceId,
) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT w.organization_id AS "o!: OrganizationId" FROM fedwiki.workspaces w
           JOIN core.organization_members m ON m.organization_id = w.organization_id
           WHERE w.workspace_id = $1 AND m.account_id = $2"#,
        workspace_id.as_str(),
        account as AccountId
    )
    .fetch_optional(conn)
    .await
}

// A swap that did not happen -----------------------------------------------------------------------------

/// A swap that ended failed or declined gives its cooldown back: the stamp its intake wrote goes
/// back to the latest swap that still counts (done or in flight, other than the `ended` requests),
/// or to none. The row is locked first, in a statement of its own, so the update (READ COMMITTED:
/// a snapshot of its own) sees a swap whose intake committed while it waited.
pub async fn restore_swap_stamp(
    conn: &mut PgConnection,
    workspace_id: &WorkspaceId,
    ended: &[RequestId],
) -> sqlx::Result<()> {
    let ids: Vec<i64> = ended.iter().map(|r| r.0).collect();
    let locked = sqlx::query_scalar!(
        r#"SELECT 1 AS "one!" FROM fedwiki.swap_policies WHERE workspace_id = $1 FOR UPDATE"#,
        workspace_id.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?;
    if locked.is_none() {
        return Ok(());
    }
    crate::db::trace::note(&mut *conn, Lock::SwapPolicyRow, workspace_id.as_str(), None).await?;
    sqlx::query!(
        "UPDATE fedwiki.swap_policies SET last_swap_at =
            (SELECT max(a.created_at) FROM fedwiki.lifecycle_requests a
              WHERE a.workspace_id = $1 AND a.state IN ('accepted', 'done') AND a.request_id <> ALL ($2)
                AND EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests p WHERE p.swap_of = a.request_id))
          WHERE workspace_id = $1",
        workspace_id.as_str(),
        &ids
    )
    .execute(conn)
    .await?;
    Ok(())
}
