//! Site upkeep, as acts: the farm changed behind the console (a site it has and the console does
//! not, an organization's or no one's; an organization's site it parked; a System site it lost),
//! then the maintenance's sync pass over it; and a status reconcile that arrives after its
//! request's own record step (a duplicate job: it reads, finds the request finished, writes
//! nothing). So stress observes the sync's insert, its placement, its status write and its
//! System removal (the spec's paths 50, 52, 53, 62), and the status reconcile (46).

use super::*;

use crate::{
    ids::{SiteDomain, WorkspaceId},
    services::fedwiki,
    states::SiteStatus,
};

/// Drift the farm one way at random, then run a sync pass, as the maintenance schedule does.
pub(in crate::stress) async fn farm_drift_then_sync(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let read = |e: sqlx::Error| Failure::Error(format!("reading the sites: {e}"));
    match rng.below(4) {
        // A site the farm has and the console does not: an organization's (parked, so its
        // adoption takes no slot the plan lacks), or no one's (adopted into System).
        0 | 1 => {
            let name = format!("stray-{}.wiki.localhost", crate::config::random_hex(4));
            let owner = if rng.below(2) == 0 {
                let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
                note.pool = Some(pool.0);
                format!("org-{org}")
            } else {
                "nobody".to_string()
            };
            let status = if owner == "nobody" { SiteStatus::Active } else { SiteStatus::Parked };
            note.detail = format!("the farm gets {name} of {owner}, {status}");
            let (name, owner) = (SiteDomain::from(name), WorkspaceId::from(owner));
            ctx.farm.create_site(&name, &owner, status).await.map_err(|e| Failure::Error(format!("the farm: {e}")))?;
        }
        // An organization's active site with no request on it, parked on the farm.
        2 => {
            let domain: Option<SiteDomain> = sqlx::query_scalar(
                "SELECT s.domain FROM fedwiki.sites s
                  WHERE s.workspace_id <> 'system' AND s.status = 'active'
                    AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                                     WHERE r.instance_id = s.site_id AND r.state = 'accepted')
                  ORDER BY random() LIMIT 1",
            )
            .fetch_optional(&ctx.db.pool)
            .await
            .map_err(read)?;
            let Some(domain) = domain else {
                note.detail = "no active site to park on the farm".into();
                return Ok(Outcome::Refused);
            };
            note.detail = format!("the farm parks {domain}");
            ctx.farm
                .set_status(&domain, SiteStatus::Parked)
                .await
                .map_err(|e| Failure::Error(format!("the farm: {e}")))?;
        }
        // A System site the farm lost.
        _ => {
            let domain: Option<SiteDomain> = sqlx::query_scalar(
                "SELECT domain FROM fedwiki.sites WHERE workspace_id = 'system' ORDER BY random() LIMIT 1",
            )
            .fetch_optional(&ctx.db.pool)
            .await
            .map_err(read)?;
            let Some(domain) = domain else {
                note.detail = "no System site for the farm to lose".into();
                return Ok(Outcome::Refused);
            };
            note.detail = format!("the farm loses {domain}");
            // Another act may have had it deleted already: the sync's pass is the act.
            let _ = ctx.farm.delete_site(&domain).await;
        }
    }
    let mut counts = crate::store::fedwiki_maintenance::RunCounts::default();
    let r = fedwiki::maintenance::sync_sites(&ctx.db, &ctx.farm, &mut counts).await;
    note.detail.push_str(&format!("; sync: {counts:?}"));
    match r {
        Ok(()) => Ok(Outcome::Done),
        Err(ServiceError::Db(DbError::LockNotAvailable)) => Ok(Outcome::Refused),
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}

/// A status reconcile of a finished request (its job enqueued by a worker's start, its request
/// finished by its own record step since): it reads with no lock and writes nothing.
pub(in crate::stress) async fn late_status_reconcile(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let ids: Vec<crate::ids::RequestId> = sqlx::query_scalar(
        "SELECT request_id FROM fedwiki.lifecycle_requests WHERE state <> 'accepted' ORDER BY request_id DESC LIMIT 20",
    )
    .fetch_all(&ctx.db.pool)
    .await
    .map_err(|e| Failure::Error(format!("reading the requests: {e}")))?;
    if ids.is_empty() {
        note.detail = "no finished request".into();
        return Ok(Outcome::Refused);
    }
    let id = ids[rng.below(ids.len())];
    let r = fedwiki::repair::reconcile_site_status(&ctx.db, &ctx.farm, id).await;
    note.detail = format!("status reconcile of finished request {id}: {r:?}");
    match r {
        Ok(fedwiki::record::Recorded::AlreadyFinished) => Ok(Outcome::Done),
        Ok(other) => Err(Failure::Error(format!("a finished request was recorded again: {other:?}"))),
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}
