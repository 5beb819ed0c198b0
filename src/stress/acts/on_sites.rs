//! The FedWiki paths, as acts: a member's create, status change, swap and deletion on the shared
//! organizations' sites, each request then carried through its workflow here (the slot gate,
//! the run's own local farm, the record step) while the workers may run the same request's job
//! beside it. The farm is the run's own and injects no fault: a remote failure is a bug.

use super::*;

use crate::{
    ids::{SiteDomain, SiteId},
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

/// Withdraw a request before its job starts (DeleteUnstartedLifecycleRequest, as the member's
/// Withdraw does); refused when a worker started its job first, and then carried as usual.
async fn withdraw_or_carry(ctx: &Ctx, id: crate::ids::RequestId, note: &mut Note) -> Result<Outcome, Failure> {
    match fedwiki::withdraw_request(&ctx.db, ctx.site_member, id).await {
        Ok(_) => {
            note.detail.push_str(&format!("; request {id} withdrawn"));
            Ok(Outcome::Done)
        }
        Err(ServiceError::Refused(why)) => {
            note.detail.push_str(&format!("; not withdrawn: {why}"));
            carry(ctx, id, note).await
        }
        Err(e) => site_outcome(Err::<(), _>(e), note),
    }
}

/// A shared organization's site at random: (site id, status).
async fn some_site(ctx: &Ctx, rng: &mut Rng) -> Result<Option<(SiteId, String)>, Failure> {
    let (org, _) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let sites: Vec<(SiteId, String)> = sqlx::query_as(
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
        // Now and then withdrawn before its job starts: its name goes back.
        Ok(id) if rng.below(6) == 0 => withdraw_or_carry(ctx, id, note).await,
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
        // One time in four the member withdraws the request before its job starts (the spec's
        // path 57); a worker that took the job first keeps it, and the request is carried.
        Ok(id) if rng.below(4) == 0 => withdraw_or_carry(ctx, id, note).await,
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
    match fedwiki::swap_active_site(
        &ctx.db,
        &ctx.farm_settings,
        ctx.site_member,
        &fedwiki::SwapSites { activate: parked.as_str().into(), park: active.as_str().into() },
    )
    .await
    {
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

/// A shared organization's own domain, or (one time in four) a domain every one of them wants.
fn some_domain(org: crate::ids::OrganizationId, rng: &mut Rng) -> String {
    if rng.below(4) == 0 { "contested.example".into() } else { format!("o{org}.example") }
}

/// A host name at or under `domain`.
fn some_hostname(domain: &str, rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => domain.to_string(),
        1 => format!("wiki.{domain}"),
        _ => format!("docs.{domain}"),
    }
}

/// Claim a domain for a shared organization (refused when another holds it or the plan does not
/// allow it).
pub(in crate::stress) async fn claim_domain(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let domain = some_domain(org, rng);
    note.pool = Some(pool.0);
    note.detail = format!("claim {domain} for organization {org}");
    let claimed = match fedwiki::domains::parse_domain(&domain, &ctx.farm_settings) {
        Ok(domain) => fedwiki::domains::claim_domain(&ctx.db, ctx.site_member, org, &domain).await,
        Err(e) => Err(e),
    };
    site_outcome(claimed, note)
}

/// Serve a shared organization's site at a host name under one of its domains.
pub(in crate::stress) async fn place_site_under_domain(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let Some((site, status)) = some_site(ctx, rng).await? else { return Ok(Outcome::Skipped) };
    let org: i64 = sqlx::query_scalar("SELECT w.organization_id FROM fedwiki.sites s JOIN fedwiki.workspaces w USING (workspace_id) WHERE s.site_id = $1")
        .bind(&site)
        .fetch_optional(&ctx.db.pool)
        .await
        .map_err(|e| Failure::Error(format!("reading the site: {e}")))?
        .unwrap_or_default();
    let hostname = some_hostname(&some_domain(crate::ids::OrganizationId(org), rng), rng);
    note.detail = format!("serve {site} ({status}) at {hostname}");
    let hostname = SiteDomain::from(hostname);
    match fedwiki::domains::place_site_under_domain(&ctx.db, ctx.site_member, &site, &hostname).await {
        // The site was deleted since it was picked.
        Err(ServiceError::NotFound(_)) => Ok(Outcome::Skipped),
        r => site_outcome(r, note),
    }
}

/// Stop serving a host name of a shared organization's.
pub(in crate::stress) async fn stop_serving(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    // Mostly a name the organization serves a site at now; else one it may not.
    let served: Option<String> = sqlx::query_scalar(
        "SELECT hostname FROM domains.placements WHERE owner = 'workspace:org-' || $1::bigint
            AND hostname NOT LIKE '%.wiki.localhost' ORDER BY random() LIMIT 1",
    )
    .bind(org)
    .fetch_optional(&ctx.db.pool)
    .await
    .map_err(|e| Failure::Error(format!("reading the placements: {e}")))?;
    let hostname = match served {
        Some(h) if rng.below(4) > 0 => h,
        _ => some_hostname(&some_domain(org, rng), rng),
    };
    note.pool = Some(pool.0);
    note.detail = format!("stop serving {hostname} for organization {org}");
    let hostname = fedwiki::domains::HeldName::parse(&hostname).into_domain();
    site_outcome(fedwiki::domains::stop_serving(&ctx.db, ctx.site_member, org, &hostname).await, note)
}

/// Release a shared organization's domain.
pub(in crate::stress) async fn release_domain(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let domain = some_domain(org, rng);
    note.pool = Some(pool.0);
    note.detail = format!("release {domain} for organization {org}");
    let domain = fedwiki::domains::HeldName::parse(&domain).into_domain();
    site_outcome(fedwiki::domains::release_domain(&ctx.db, ctx.site_member, org, &domain).await, note)
}

/// The database's clock, `ahead` of now.
async fn clock_ahead(ctx: &Ctx, ahead: chrono::Duration) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
    let now: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT clock_timestamp()").fetch_one(&ctx.admin).await?;
    Ok(now + ahead)
}

/// A pending claim of a shared organization's, as (name, owner, token); one is made when none
/// waits, so the act always has one to check.
async fn some_pending(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Option<(SiteDomain, String, String)>, Failure> {
    let pick = || async {
        sqlx::query_as::<_, (String, String, String)>(
            "SELECT name, owner, token FROM domains.pending_claims ORDER BY random() LIMIT 1",
        )
        .fetch_optional(&ctx.admin)
        .await
    };
    if let Some((n, o, t)) = pick().await? {
        return Ok(Some((SiteDomain::from(n), o, t)));
    }
    claim_domain(ctx, rng, note).await?;
    Ok(pick().await?.map(|(n, o, t)| (SiteDomain::from(n), o, t)))
}

/// Verify a pending claim: its token published on the run's DNS (three times in four; else
/// nothing, or another value), beside the values already there (the contested domain's other
/// organizations' tokens).
pub(in crate::stress) async fn verify_domain(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    use fedwiki::verification;
    let Some((domain, owner, token)) = some_pending(ctx, rng, note).await? else { return Ok(Outcome::Skipped) };
    let record = verification::record_name(&domain);
    let mut values: Vec<String> =
        ctx.dns.records().into_iter().find(|r| r.name == record).map(|r| r.txt).unwrap_or_default();
    match rng.below(8) {
        0 => values.clear(),
        1 => values = vec!["mc-ffffffffffffffffffffffffffffffff".into()],
        _ if !values.contains(&token) => values.push(token.clone()),
        _ => {}
    }
    let set = if values.is_empty() {
        ctx.dns.remove_txt(&record).map(|_| ())
    } else {
        ctx.dns.set_txt(&record, values).map(|_| ())
    };
    set.map_err(|e| Failure::Error(format!("the local DNS: {e}")))?;
    note.detail = format!("verify {domain} for {owner}");
    let now = clock_ahead(ctx, chrono::Duration::zero()).await?;
    let r = verification::verify_pending_claim(&ctx.db, &ctx.resolver, &domain, &owner, now).await;
    note.detail = format!("verify {domain} for {owner}: {r:?}");
    site_outcome(r, note)
}

/// Check a verified claim again: its record kept, removed or put back, at a clock now, 73 hours
/// on (a lapse) or 11 days on (a release).
pub(in crate::stress) async fn recheck_domain(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    use fedwiki::verification;
    let picked: Option<(String, String, String)> = sqlx::query_as(
        "SELECT name, owner, token FROM domains.claims WHERE token IS NOT NULL ORDER BY random() LIMIT 1",
    )
    .fetch_optional(&ctx.admin)
    .await?;
    let (domain, owner, token) = match picked {
        Some((n, o, t)) => (SiteDomain::from(n), o, t),
        // None verified yet: verify one of the pending instead.
        None => return verify_domain(ctx, rng, note).await,
    };
    let record = verification::record_name(&domain);
    let set = match rng.below(3) {
        0 => ctx.dns.remove_txt(&record).map(|_| ()),
        _ => ctx.dns.set_txt(&record, vec![token]).map(|_| ()),
    };
    set.map_err(|e| Failure::Error(format!("the local DNS: {e}")))?;
    let ahead = match rng.below(4) {
        0 | 1 => chrono::Duration::zero(),
        2 => chrono::Duration::hours(73),
        _ => chrono::Duration::days(11),
    };
    let now = clock_ahead(ctx, ahead).await?;
    let r = verification::recheck_claim(&ctx.db, &ctx.resolver, &domain, &owner, now).await;
    note.detail = format!("re-check {domain} for {owner} at +{}h: {r:?}", ahead.num_hours());
    site_outcome(r, note)
}

/// Let a pending claim go at a clock eight days on.
pub(in crate::stress) async fn expire_pending_claim(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    use fedwiki::verification;
    let Some((domain, owner, _)) = some_pending(ctx, rng, note).await? else { return Ok(Outcome::Skipped) };
    let now = clock_ahead(ctx, chrono::Duration::days(8)).await?;
    let r = verification::expire_pending_claim(&ctx.db, &domain, &owner, now).await;
    note.detail = format!("expire {domain} for {owner}: {r:?}");
    site_outcome(r, note)
}

/// The maintenance's parts, as the schedule runs them, beside the members' requests: a sync pass
/// (one-site writes, then the recounts), the purge of archived sites past the run's short
/// retention, and the quota's parks and reactivations. Refused only on a lock wait past its bound.
pub(in crate::stress) async fn sync_sites(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let mut counts = crate::store::fedwiki_maintenance::RunCounts::default();
    let r = fedwiki::maintenance::sync_sites(&ctx.db, &ctx.farm, &mut counts).await;
    note.detail = format!("sync: {counts:?}");
    site_outcome(r, note)
}

pub(in crate::stress) async fn purge_archived(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let r = fedwiki::maintenance::purge_archived(&ctx.db, &ctx.farm, SITE_RETENTION).await;
    note.detail = format!("purge: {r:?}");
    site_outcome(r, note)
}

/// The quota reconciliation. One time in three the sweep first parks an active site no request
/// is on, as it does when the plan's limit has just fallen (parkSite: the farm first, then the
/// row), and the reconciliation then brings it back while the limit has room (reactivateSite), so
/// both race the members' requests on that site.
pub(in crate::stress) async fn reconcile_quota(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    if rng.below(3) == 0 {
        let site: Option<(SiteId, SiteDomain)> = sqlx::query_as(
            "SELECT s.site_id, s.domain FROM fedwiki.sites s
              WHERE s.workspace_id <> 'system' AND s.status = 'active'
                AND NOT EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests r
                                 WHERE r.instance_id = s.site_id AND r.state = 'accepted')
              ORDER BY random() LIMIT 1",
        )
        .fetch_optional(&ctx.db.pool)
        .await?;
        if let Some((site_id, domain)) = site {
            let parked = fedwiki::maintenance::park_site(&ctx.db, &ctx.farm, &site_id, &domain).await;
            note.detail = format!("the sweep parks {domain}: {parked:?}; ");
            if let Err(e) = parked {
                return site_outcome(Err::<(), _>(e), note);
            }
        }
    }
    let r = fedwiki::maintenance::reconcile_quota_now(&ctx.db, &ctx.farm).await;
    note.detail.push_str(&format!("quota: {r:?}"));
    site_outcome(r, note)
}

/// The repair a worker runs at its start. One time in three a crash is left for it first: the
/// names of a site purged by a worker that died between the purge's commit and the release of
/// its names (an orphaned placement), which the domains reconciliation removes.
pub(in crate::stress) async fn repair_at_start(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    if rng.below(3) == 0 {
        let gone = format!("purged-{}", crate::config::random_hex(6));
        sqlx::query(
            "INSERT INTO domains.placements (hostname, owner, provider, object_id)
             VALUES ($1 || '.wiki.localhost', 'workspace:system', 'fedwiki', $1)",
        )
        .bind(&gone)
        .execute(&ctx.db.pool)
        .await?;
        note.detail = format!("{gone}'s name left placed by a crash; ");
    }
    let r = fedwiki::repair::repair_at_start(&ctx.db).await;
    note.detail = format!("repair: {r:?}");
    site_outcome(r, note)
}
