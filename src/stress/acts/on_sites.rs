//! The FedWiki paths, as acts: a member's create, status change, swap and deletion on the shared
//! organizations' sites, each request then carried through its workflow here (the slot gate,
//! the run's own local farm, the record step) while the workers may run the same request's job
//! beside it. The farm is the run's own and injects no fault: a remote failure is a bug.

use super::*;

use crate::{
    services::fedwiki::{self, names::SiteName},
    states::RequestKind,
};

/// The names the creates pick from: few, so that they meet on one name.
const SITE_NAMES: [&str; 6] = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];

/// The sites' refusals (a name taken, a request already in flight, a cooldown, a site in the
/// wrong status for the act) count as refused; a remote failure, a missing row and any other
/// database error are failures.
fn site_outcome<T>(r: Result<T, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            e @ (ServiceError::Refused(_) | ServiceError::Invalid(_) | ServiceError::Db(DbError::LockNotAvailable)),
        ) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(format!("the farm failed: {e}"))),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e @ (ServiceError::NotFound(_) | ServiceError::ChangeInProgress)) => Err(Failure::Error(e.to_string())),
    }
}

/// Carry a recorded request through its workflow, as its job would; its outcome (done,
/// declined, failed) is the request's, and the act was done either way.
async fn carry(ctx: &Ctx, id: crate::ids::RequestId, note: &mut Note) -> Result<Outcome, Failure> {
    let ran = fedwiki::run_site_request(&ctx.db, &ctx.farm, id, false).await;
    note.detail.push_str(&format!("; request {id}: {ran:?}"));
    site_outcome(ran, note)
}

/// A shared organization's site at random: (site id, status).
async fn some_site(ctx: &Ctx, rng: &mut Rng) -> Result<Option<(String, String)>, Failure> {
    let (org, _) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let sites: Vec<(String, String)> = sqlx::query_as(
        "SELECT site_id, status FROM fedwiki.sites WHERE workspace_id = 'org-' || $1::bigint ORDER BY site_id",
    )
    .bind(org)
    .fetch_all(&ctx.db.pool)
    .await
    .map_err(|e| Failure::Error(format!("reading the sites: {e}")))?;
    Ok((!sites.is_empty()).then(|| sites[rng.below(sites.len())].clone()))
}

/// Create a site: a shared organization, a name from a few.
pub(in crate::stress) async fn create_site(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let name = SITE_NAMES[rng.below(SITE_NAMES.len())];
    note.pool = Some(pool.0);
    note.detail = format!("create {name} for organization {org}");
    let parsed = SiteName::parse(name).map_err(Failure::Error)?;
    match fedwiki::create_site(&ctx.db, &ctx.farm_settings, ctx.site_member, org, &parsed).await {
        Ok(id) => carry(ctx, id, note).await,
        Err(e) => site_outcome(Err::<(), _>(e), note),
    }
}

/// Park, activate or archive a site at random (an activation under the run's short cooldown).
pub(in crate::stress) async fn change_site_status(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let Some((site, status)) = some_site(ctx, rng).await? else { return Ok(Outcome::Skipped) };
    let kind = [RequestKind::Activate, RequestKind::Park, RequestKind::Archive][rng.below(3)];
    note.detail = format!("{kind} {site} ({status})");
    match fedwiki::change_status(&ctx.db, &ctx.farm_settings, ctx.site_member, &site, kind).await {
        Ok(id) => carry(ctx, id, note).await,
        // The site was deleted since it was picked.
        Err(ServiceError::NotFound(_)) => Ok(Outcome::Skipped),
        Err(e) => site_outcome(Err::<(), _>(e), note),
    }
}

/// Swap a parked site in for an active one of the same organization.
pub(in crate::stress) async fn swap_sites(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    note.pool = Some(pool.0);
    let pick = |status: &'static str| {
        sqlx::query_scalar::<_, String>(
            "SELECT site_id FROM fedwiki.sites WHERE workspace_id = 'org-' || $1::bigint AND status = $2
             ORDER BY random() LIMIT 1",
        )
        .bind(org)
        .bind(status)
        .fetch_optional(&ctx.db.pool)
    };
    let read = |e: sqlx::Error| Failure::Error(format!("reading the sites: {e}"));
    let (Some(parked), Some(active)) = (pick("parked").await.map_err(read)?, pick("active").await.map_err(read)?)
    else {
        return Ok(Outcome::Skipped);
    };
    note.detail = format!("swap {parked} in for {active}");
    match fedwiki::swap_active_site(&ctx.db, &ctx.farm_settings, ctx.site_member, &parked, &active).await {
        Ok(id) => carry(ctx, id, note).await,
        Err(ServiceError::NotFound(_)) => Ok(Outcome::Skipped),
        Err(e) => site_outcome(Err::<(), _>(e), note),
    }
}

/// Delete a site at random.
pub(in crate::stress) async fn delete_site(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((site, status)) = some_site(ctx, rng).await? else { return Ok(Outcome::Skipped) };
    note.detail = format!("delete {site} ({status})");
    match fedwiki::change_status(&ctx.db, &ctx.farm_settings, ctx.site_member, &site, RequestKind::Delete).await {
        Ok(id) => carry(ctx, id, note).await,
        Err(ServiceError::NotFound(_)) => Ok(Outcome::Skipped),
        Err(e) => site_outcome(Err::<(), _>(e), note),
    }
}
