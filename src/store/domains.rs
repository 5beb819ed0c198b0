//! The domains registry: claims (names a workspace or the farm's zone holds) and placements
//! (host names served by a provider's object). Every mutation here runs in a Registry
//! transaction, whose advisory lock guards the rules that span rows.

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
