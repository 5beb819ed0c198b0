//! The domains registry: claims (names a workspace or the farm's zone holds) and placements
//! (host names served by a provider's object). Every mutation here runs in a Registry
//! transaction, whose advisory lock guards the rules that span rows.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::ids::{SiteDomain, SiteId};

/// The claim at or above `name` (the most specific), as (name, owner).
pub async fn covering_claim(conn: &mut PgConnection, name: &SiteDomain) -> sqlx::Result<Option<(SiteDomain, String)>> {
    let r = sqlx::query!(
        "SELECT name, owner FROM domains.claims
          WHERE $1 = name OR right($1, length(name) + 1) = '.' || name
          ORDER BY length(name) DESC LIMIT 1",
        name.as_str()
    )
    .fetch_optional(conn)
    .await?;
    Ok(r.map(|r| (SiteDomain::from(r.name), r.owner)))
}

/// Whether another owner holds a claim under `name` (a new claim must not cover one).
pub async fn other_claim_under(conn: &mut PgConnection, name: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM domains.claims
                           WHERE right(name, length($1) + 1) = '.' || $1 AND owner <> $2) AS "e!""#,
        name.as_str(),
        owner
    )
    .fetch_one(conn)
    .await
}

pub async fn insert_claim(conn: &mut PgConnection, name: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO domains.claims (name, owner) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        name.as_str(),
        owner
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn delete_claim(conn: &mut PgConnection, name: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    let r = sqlx::query!("DELETE FROM domains.claims WHERE name = $1 AND owner = $2", name.as_str(), owner)
        .execute(conn)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Whether any placement lies at or under `name` (a claim with placements under it stays).
pub async fn placements_under(conn: &mut PgConnection, name: &SiteDomain) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM domains.placements
                           WHERE hostname = $1 OR right(hostname, length($1) + 1) = '.' || $1) AS "e!""#,
        name.as_str()
    )
    .fetch_one(conn)
    .await
}

/// The placement of a host name, as (owner, object id).
pub async fn placement(conn: &mut PgConnection, hostname: &SiteDomain) -> sqlx::Result<Option<(String, String)>> {
    let r = sqlx::query!("SELECT owner, object_id FROM domains.placements WHERE hostname = $1", hostname.as_str())
        .fetch_optional(conn)
        .await?;
    Ok(r.map(|r| (r.owner, r.object_id)))
}

/// Place a FedWiki site's host name; false when the name is already placed.
pub async fn insert_site_placement(
    conn: &mut PgConnection,
    hostname: &SiteDomain,
    owner: &str,
    site_id: &SiteId,
    servable: bool,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
         VALUES ($1, $2, 'fedwiki', $3, $4) ON CONFLICT DO NOTHING",
        hostname.as_str(),
        owner,
        site_id.as_str(),
        servable
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Release a site's names: its placement rows locked in hostname order, then deleted
/// (domains.delete_site_placements, migration 0006), the order the site trigger locks them in.
pub async fn delete_site_placements(conn: &mut PgConnection, site_id: &SiteId) -> sqlx::Result<u64> {
    let n = sqlx::query_scalar!(r#"SELECT domains.delete_site_placements($1) AS "n!""#, site_id.as_str())
        .fetch_one(conn)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Remove one placement of `owner`'s that no farm-zone name is (a site's own address goes only
/// with the site); false when there is none.
pub async fn delete_placement(conn: &mut PgConnection, hostname: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "DELETE FROM domains.placements p
          WHERE p.hostname = $1 AND p.owner = $2
            AND NOT EXISTS (SELECT 1 FROM domains.claims c
                             WHERE c.owner = 'farm'
                               AND (p.hostname = c.name OR right(p.hostname, length(c.name) + 1) = '.' || c.name))",
        hostname.as_str(),
        owner
    )
    .execute(&mut *conn)
    .await?;
    let gone = r.rows_affected() == 1;
    if gone {
        // The row's lock, held by its delete through commit (the lock trace; no trigger runs on
        // a placement's delete).
        crate::db::trace::note(conn, crate::db::locks::Lock::PlacementRows, hostname.as_str(), None).await?;
    }
    Ok(gone)
}

// Verification (issue 40, migration 0022). Every write below runs in a Registry transaction.

/// A pending claim as the verification reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingClaim {
    pub token: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A verified claim as its re-check reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedClaim {
    /// None for a claim no check applies to (the farm's zone).
    pub token: Option<String>,
    pub missing_since: Option<DateTime<Utc>>,
    pub lapsed_at: Option<DateTime<Utc>>,
}

/// What a check found, as the tables keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOutcome {
    Found,
    Missing,
    OtherValue,
    CouldNotCheck,
}

impl CheckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Found => "found",
            CheckOutcome::Missing => "missing",
            CheckOutcome::OtherValue => "other_value",
            CheckOutcome::CouldNotCheck => "could_not_check",
        }
    }
}

pub async fn pending_claim(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
) -> sqlx::Result<Option<PendingClaim>> {
    let r = sqlx::query!(
        "SELECT token, created_at, expires_at FROM domains.pending_claims WHERE name = $1 AND owner = $2",
        name.as_str(),
        owner
    )
    .fetch_optional(conn)
    .await?;
    Ok(r.map(|r| PendingClaim { token: r.token, created_at: r.created_at, expires_at: r.expires_at }))
}

/// How many domains `owner` is waiting on (a workspace may wait on a bounded number).
pub async fn pending_count(conn: &mut PgConnection, owner: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM domains.pending_claims WHERE owner = $1"#, owner)
        .fetch_one(conn)
        .await
}

/// A new pending claim, first checked at once; false when `owner` already waits on `name`.
pub async fn insert_pending_claim(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
    token: &str,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO domains.pending_claims (name, owner, token, created_at, expires_at, next_check_at)
         VALUES ($1, $2, $3, $4, $5, $4) ON CONFLICT DO NOTHING",
        name.as_str(),
        owner,
        token,
        now,
        expires_at
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn delete_pending_claim(conn: &mut PgConnection, name: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    let r = sqlx::query!("DELETE FROM domains.pending_claims WHERE name = $1 AND owner = $2", name.as_str(), owner)
        .execute(conn)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Let go of every other owner's pending claim at, under or above `name` (now verified by
/// `owner`, none of them could verify); the (name, owner) of each, in name order.
pub async fn release_conflicting_pending(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
) -> sqlx::Result<Vec<(SiteDomain, String)>> {
    let rows = sqlx::query!(
        "DELETE FROM domains.pending_claims
          WHERE owner <> $2
            AND (name = $1 OR right(name, length($1) + 1) = '.' || $1 OR right($1, length(name) + 1) = '.' || name)
          RETURNING name, owner",
        name.as_str(),
        owner
    )
    .fetch_all(conn)
    .await?;
    let mut out: Vec<_> = rows.into_iter().map(|r| (SiteDomain::from(r.name), r.owner)).collect();
    out.sort();
    Ok(out)
}

/// `name` verified for `owner` with `token`, checked again at `next_check_at`.
pub async fn insert_verified_claim(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
    token: &str,
    now: DateTime<Utc>,
    next_check_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "INSERT INTO domains.claims (name, owner, claimed_at, token, verified_at, checked_at, check_outcome, next_check_at)
         VALUES ($1, $2, $3, $4, $3, $3, 'found', $5) ON CONFLICT DO NOTHING",
        name.as_str(),
        owner,
        now,
        token,
        next_check_at
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// A pending claim's check that did not find its token.
pub async fn record_pending_check(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
    now: DateTime<Utc>,
    outcome: CheckOutcome,
    detail: Option<&str>,
    next_check_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE domains.pending_claims SET checked_at = $3, check_outcome = $4, check_detail = $5, next_check_at = $6
          WHERE name = $1 AND owner = $2",
        name.as_str(),
        owner,
        now,
        outcome.as_str(),
        detail,
        next_check_at
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

pub async fn verified_claim(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
) -> sqlx::Result<Option<VerifiedClaim>> {
    let r = sqlx::query!(
        "SELECT token, missing_since, lapsed_at FROM domains.claims WHERE name = $1 AND owner = $2",
        name.as_str(),
        owner
    )
    .fetch_optional(conn)
    .await?;
    Ok(r.map(|r| VerifiedClaim { token: r.token, missing_since: r.missing_since, lapsed_at: r.lapsed_at }))
}

/// A verified claim's check, and the state it leaves the claim in.
#[allow(clippy::too_many_arguments)]
pub async fn record_claim_check(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
    now: DateTime<Utc>,
    outcome: CheckOutcome,
    detail: Option<&str>,
    missing_since: Option<DateTime<Utc>>,
    lapsed_at: Option<DateTime<Utc>>,
    next_check_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE domains.claims
            SET checked_at = $3, check_outcome = $4, check_detail = $5, missing_since = $6, lapsed_at = $7,
                next_check_at = $8
          WHERE name = $1 AND owner = $2",
        name.as_str(),
        owner,
        now,
        outcome.as_str(),
        detail,
        missing_since,
        lapsed_at,
        next_check_at
    )
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Whether `owner`'s claim covering `name` (the most specific) has lapsed.
pub async fn covering_claim_lapsed(conn: &mut PgConnection, name: &SiteDomain, owner: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM domains.claims
                           WHERE owner = $2 AND lapsed_at IS NOT NULL
                             AND ($1 = name OR right($1, length(name) + 1) = '.' || name)) AS "e!""#,
        name.as_str(),
        owner
    )
    .fetch_one(conn)
    .await
}

/// Remove every placement of `owner` at or under `name` (a lapsed claim released): the rows
/// locked in host name order first, the order the site trigger takes them in
/// (`domains.delete_placements_under`, migration 0022); their names.
pub async fn delete_placements_under(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
) -> sqlx::Result<Vec<SiteDomain>> {
    let hosts =
        sqlx::query_scalar!(r#"SELECT h AS "h!" FROM domains.delete_placements_under($1, $2) h"#, name.as_str(), owner)
            .fetch_all(conn)
            .await?;
    Ok(hosts.into_iter().map(SiteDomain::from).collect())
}

pub async fn insert_notice(
    conn: &mut PgConnection,
    owner: &str,
    name: &SiteDomain,
    sentence: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO domains.claim_notices (owner, name, sentence, created_at) VALUES ($1, $2, $3, $4)",
        owner,
        name.as_str(),
        sentence,
        now
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A member dismisses a notice of its workspace's; false when there is none.
pub async fn delete_notice(conn: &mut PgConnection, notice_id: i64, owner: &str) -> sqlx::Result<bool> {
    let r = sqlx::query!("DELETE FROM domains.claim_notices WHERE notice_id = $1 AND owner = $2", notice_id, owner)
        .execute(conn)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// A claim due for a check: pending or verified, with its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCheck {
    pub name: SiteDomain,
    pub owner: String,
    pub pending: bool,
}

/// Up to `limit` claims whose check is due at `now`, the most overdue first.
pub async fn due_checks(conn: &mut PgConnection, now: DateTime<Utc>, limit: i64) -> sqlx::Result<Vec<DueCheck>> {
    let rows = sqlx::query!(
        r#"SELECT name AS "name!", owner AS "owner!", pending AS "pending!" FROM (
             (SELECT name, owner, true AS pending, next_check_at FROM domains.pending_claims
               WHERE next_check_at <= $1 OR expires_at <= $1 ORDER BY next_check_at LIMIT $2)
             UNION ALL
             (SELECT name, owner, false, next_check_at FROM domains.claims
               WHERE next_check_at <= $1 ORDER BY next_check_at LIMIT $2)) d
           ORDER BY next_check_at LIMIT $2"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| DueCheck { name: SiteDomain::from(r.name), owner: r.owner, pending: r.pending })
        .collect())
}

/// A claim an operator watches on `/operator/farm`: pending, or verified with its record gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedClaim {
    pub name: String,
    pub organization: Option<(i64, String)>,
    pub pending: bool,
    pub since: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub missing_since: Option<DateTime<Utc>>,
    pub lapsed_at: Option<DateTime<Utc>>,
    pub checked_at: Option<DateTime<Utc>>,
    pub check_outcome: Option<String>,
    pub check_detail: Option<String>,
}

/// Pending claims and verified ones whose record is missing, lapsed first, then lapsing, then
/// pending; up to `limit`.
pub async fn watched_claims(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<WatchedClaim>> {
    let rows = sqlx::query!(
        r#"SELECT x.name AS "name!", x.pending AS "pending!", x.since AS "since!", x.expires_at, x.missing_since,
                  x.lapsed_at, x.checked_at, x.check_outcome, x.check_detail,
                  o.organization_id AS "organization_id?", o.name AS "organization_name?"
             FROM ((SELECT c.name, c.owner, false AS pending, coalesce(c.verified_at, c.claimed_at) AS since,
                           NULL::timestamptz AS expires_at, c.missing_since, c.lapsed_at, c.checked_at,
                           c.check_outcome, c.check_detail
                      FROM domains.claims c WHERE c.missing_since IS NOT NULL)
                   UNION ALL
                   (SELECT p.name, p.owner, true, p.created_at, p.expires_at, NULL, NULL, p.checked_at,
                           p.check_outcome, p.check_detail
                      FROM domains.pending_claims p)) x
             LEFT JOIN core.organizations o ON x.owner = 'workspace:org-' || o.organization_id
            ORDER BY (x.lapsed_at IS NULL), x.pending, x.since, x.name
            LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| WatchedClaim {
            name: r.name,
            organization: r.organization_id.zip(r.organization_name),
            pending: r.pending,
            since: r.since,
            expires_at: r.expires_at,
            missing_since: r.missing_since,
            lapsed_at: r.lapsed_at,
            checked_at: r.checked_at,
            check_outcome: r.check_outcome,
            check_detail: r.check_detail,
        })
        .collect())
}

/// `owner`'s pending claim at or above `name` (the most specific), by name.
pub async fn pending_covering(
    conn: &mut PgConnection,
    name: &SiteDomain,
    owner: &str,
) -> sqlx::Result<Option<SiteDomain>> {
    let r = sqlx::query_scalar!(
        "SELECT name FROM domains.pending_claims
          WHERE owner = $2 AND ($1 = name OR right($1, length(name) + 1) = '.' || name)
          ORDER BY length(name) DESC LIMIT 1",
        name.as_str(),
        owner
    )
    .fetch_optional(conn)
    .await?;
    Ok(r.map(SiteDomain::from))
}

/// Every workspace's verified claim with its token, as (name, owner, token), in name order.
pub async fn verified_tokens(conn: &mut PgConnection) -> sqlx::Result<Vec<(SiteDomain, String, String)>> {
    let rows = sqlx::query!(
        r#"SELECT name, owner, token AS "token!" FROM domains.claims WHERE token IS NOT NULL ORDER BY name"#
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (SiteDomain::from(r.name), r.owner, r.token)).collect())
}
