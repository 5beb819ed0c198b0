//! The grants' paths, as acts.

use super::*;

/// The n-th email domain.
pub(in crate::stress) fn domain(n: u64) -> EmailDomain {
    EmailDomain::parse(&format!("stress{n}.example.org")).expect("a well-formed domain")
}

pub(in crate::stress) fn ms_ahead(rng: &mut Rng, (low, high): (u64, u64)) -> chrono::Duration {
    chrono::Duration::milliseconds((low + rng.next_u64() % (high - low + 1)) as i64)
}

/// `+N ms` from now, for the event log.
pub(in crate::stress) fn show_time(t: Option<DateTime<Utc>>) -> String {
    match t {
        None => "none".into(),
        Some(t) => format!("{:+} ms", (t - Utc::now()).num_milliseconds()),
    }
}

/// A typed refusal counts as refused (its reason kept in the log); a deadlock and any other
/// database error are failures.
pub(in crate::stress) fn grant_outcome<T>(r: Result<T, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            e @ (ServiceError::Refused(_)
            | ServiceError::Invalid(_)
            | ServiceError::NotFound(_)
            | ServiceError::ChangeInProgress
            | ServiceError::Db(DbError::LockNotAvailable)),
        ) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        // No path the stress runs calls Stripe: a remote failure here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(e.to_string())),
        Err(ServiceError::Db(e)) => Err(e.into()),
    }
}

/// A job-like act that found nothing to do (false) is refused: the job or another task was first.
pub(in crate::stress) fn due_outcome(r: Result<bool, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(true) => Ok(Outcome::Done),
        Ok(false) => {
            note.detail.push_str("; nothing to do (not live, or not due)");
            Ok(Outcome::Refused)
        }
        Err(e) => grant_outcome(Err::<(), _>(e), note),
    }
}

/// IssueGrant: to a shared organization now (open-ended, or ending 0.5-3 s ahead), from a start a
/// few hundred ms ahead, or to an email domain (the last one with an organization, or one of the
/// next few that have none yet).
pub(in crate::stress) async fn issue_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (product, name) = rng.pick(&ctx.fx.grantable).clone();
    let quantity = 1 + rng.below(3) as i32;
    let now = Utc::now();
    let roll = rng.below(20);
    let (recipient, starts_at, ends_at) = if roll < 5 {
        let next = ctx.domain_seq.load(Ordering::Relaxed);
        let d = domain((next + rng.below(4) as u64).saturating_sub(1));
        let starts = (rng.below(3) == 0).then(|| now + ms_ahead(rng, START_AHEAD_MS));
        let ends = (rng.below(2) == 0).then(|| starts.unwrap_or(now) + ms_ahead(rng, END_AHEAD_MS));
        (Recipient::Domain(d), starts, ends)
    } else {
        let (org, _) = hot_pool(ctx, rng, note);
        let (starts, ends) = match roll {
            5..=9 => (None, None),
            10..=14 => (None, Some(now + ms_ahead(rng, END_AHEAD_MS))),
            _ => {
                let s = now + ms_ahead(rng, START_AHEAD_MS);
                (Some(s), (rng.below(2) == 0).then(|| s + ms_ahead(rng, END_AHEAD_MS)))
            }
        };
        (Recipient::Organization(org), starts, ends)
    };
    let to = match &recipient {
        Recipient::Organization(o) => format!("organization {o}"),
        Recipient::Domain(d) => format!("domain {}", d.as_str()),
    };
    note.detail = format!("{name} x{quantity} to {to}, from {}, until {}", show_time(starts_at), show_time(ends_at));
    let g = IssueGrant {
        recipient,
        product_id: product,
        quantity,
        starts_at,
        ends_at,
        reason: "stress".into(),
        actor: None,
    };
    let r = grants::issue_grant(&ctx.db, &g).await;
    if let Ok(id) = &r {
        note.detail.push_str(&format!(" as grant {id}"));
        if note.pool.is_none() {
            note.pool = pool_of_grant(ctx, *id).await?;
        }
    }
    grant_outcome(r, note)
}

/// The default pool of the grant's organization (None while it names none).
pub(in crate::stress) async fn pool_of_grant(ctx: &Ctx, grant: GrantId) -> Result<Option<i64>, Failure> {
    Ok(sqlx::query_scalar(
        "SELECT rp.pool_id FROM core.grants g
         JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.grant_id = $1",
    )
    .bind(grant)
    .fetch_optional(&ctx.db.pool)
    .await?)
}

/// A grant (id, start, pool) of one of `statuses`, not a floor, at random: half the time of a
/// shared organization; a quarter, a grant of the email domain whose organization is being
/// created now or is next (so that the act meets its provisioning); else any.
pub(in crate::stress) async fn pick_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
    statuses: &[&str],
) -> Result<Option<(GrantId, DateTime<Utc>)>, Failure> {
    let statuses: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    let (scope, org) = match rng.below(4) {
        0 | 1 => ("hot", Some(hot_pool(ctx, rng, note).0)),
        2 => ("creating", None),
        _ => ("any", None),
    };
    let next = ctx.domain_seq.load(Ordering::Relaxed);
    let domains: Vec<String> = [next.saturating_sub(1), next].iter().map(|k| domain(*k).as_str().to_string()).collect();
    let rows: Vec<(GrantId, DateTime<Utc>, Option<i64>)> = sqlx::query_as(
        "SELECT g.grant_id, g.starts_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = ANY($1) AND g.kind <> 'floor'
           AND CASE $2 WHEN 'hot' THEN g.organization_id = $3
                       WHEN 'creating' THEN g.provision_domain = ANY($4)
                       ELSE true END
         ORDER BY g.grant_id DESC LIMIT 40",
    )
    .bind(&statuses)
    .bind(scope)
    .bind(org)
    .bind(&domains)
    .fetch_all(&ctx.db.pool)
    .await?;
    if rows.is_empty() {
        return own_grant(ctx, rng, note, &statuses).await;
    }
    let (grant, starts, pool) = *rng.pick(&rows);
    note.pool = pool;
    Ok(Some((grant, starts)))
}

/// None of the asked statuses where the act looked: a grant of its own to a shared
/// organization, waiting an hour when only a waiting one will do, otherwise live now, so that a
/// short run on a busy machine still does every act on grants.
async fn own_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
    statuses: &[String],
) -> Result<Option<(GrantId, DateTime<Utc>)>, Failure> {
    let now = Utc::now();
    let starts_at = match statuses {
        [only] if only == "waiting" => Some(now + chrono::Duration::hours(1)),
        _ if statuses.iter().any(|s| s == "active") => None,
        _ => return Ok(None),
    };
    let (org, pool) = hot_pool(ctx, rng, note);
    let (product, _) = rng.pick(&ctx.fx.grantable).clone();
    let g = IssueGrant {
        recipient: Recipient::Organization(org),
        product_id: product,
        quantity: 1,
        starts_at,
        ends_at: None,
        reason: "stress".into(),
        actor: None,
    };
    match grants::issue_grant(&ctx.db, &g).await {
        Ok(id) => {
            note.pool = Some(pool.0);
            Ok(Some((id, starts_at.unwrap_or(now))))
        }
        Err(_) => Ok(None),
    }
}

/// A grant whose date (`column`) comes within `DUE_WITHIN_MS`, waited for: (grant, pool).
pub(in crate::stress) async fn due_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    sql: &str,
) -> Result<Option<(GrantId, Option<i64>)>, Failure> {
    let rows: Vec<(GrantId, DateTime<Utc>, Option<i64>)> = sqlx::query_as(AssertSqlSafe(sql.to_string()))
        .bind(DUE_WITHIN_MS as f64 / 1000.0)
        .fetch_all(&ctx.db.pool)
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let (grant, at, pool) = *rng.pick(&rows);
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait + Duration::from_millis(1)).await;
    }
    Ok(Some((grant, pool)))
}

/// Which moment of a grant an act races its job to.
#[derive(Clone, Copy)]
pub(in crate::stress) enum Moment {
    Start,
    End,
}

/// A grant whose start (or end) comes now, as `due_grant` finds one; when none does (the jobs
/// got to them all), one of the act's own, starting (or ending) moments ahead, so that a short
/// run on a busy machine still races each of those acts against its job.
pub(in crate::stress) async fn due_or_own(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
    sql: &str,
    moment: Moment,
) -> Result<Option<(GrantId, Option<i64>)>, Failure> {
    if let Some(due) = due_grant(ctx, rng, sql).await? {
        return Ok(Some(due));
    }
    let (org, _) = hot_pool(ctx, rng, note);
    let (product, _) = rng.pick(&ctx.fx.grantable).clone();
    let soon = Utc::now() + chrono::Duration::milliseconds(100);
    let (starts_at, ends_at) = match moment {
        Moment::Start => (Some(soon), None),
        Moment::End => (None, Some(soon)),
    };
    let g = IssueGrant {
        recipient: Recipient::Organization(org),
        product_id: product,
        quantity: 1,
        starts_at,
        ends_at,
        reason: "stress".into(),
        actor: None,
    };
    if grants::issue_grant(&ctx.db, &g).await.is_err() {
        return Ok(None);
    }
    due_grant(ctx, rng, sql).await
}

pub(in crate::stress) async fn revoke_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((g, _)) = pick_grant(ctx, rng, note, &["active", "replaced", "waiting"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let reason = grants::Reason::parse("stress").map_err(Failure::Error)?;
    let r = grants::revoke_grant(&ctx.db, g, None, &reason).await;
    note.detail = match &r {
        Ok(head) if *head == g => format!("grant {g} revoked"),
        Ok(head) => format!("grant {g}: its lineage's head grant {head} revoked"),
        Err(_) => format!("grant {g}"),
    };
    grant_outcome(r, note)
}

/// ExpireGrantTx as the sweep calls it, on a grant whose end comes now, racing its job.
pub(in crate::stress) async fn expire_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    pub(in crate::stress) const DUE: &str = "SELECT g.grant_id, g.ends_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status IN ('active', 'replaced', 'waiting') AND g.ends_at < now() + make_interval(secs => $1)
         ORDER BY g.ends_at LIMIT 8";
    let Some((g, pool)) = due_or_own(ctx, rng, note, DUE, Moment::End).await? else { return Ok(Outcome::Skipped) };
    note.pool = pool;
    note.detail = format!("grant {g}");
    due_outcome(grants::expire_grant(&ctx.db, g).await, note)
}

/// "Start a waiting grant" on a grant whose start comes now, racing its job.
pub(in crate::stress) async fn start_waiting_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    pub(in crate::stress) const DUE: &str = "SELECT g.grant_id, g.starts_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'waiting' AND g.organization_id IS NOT NULL
           AND g.starts_at < now() + make_interval(secs => $1) AND (g.ends_at IS NULL OR g.ends_at > now())
         ORDER BY g.starts_at LIMIT 8";
    let Some((g, pool)) = due_or_own(ctx, rng, note, DUE, Moment::Start).await? else { return Ok(Outcome::Skipped) };
    note.pool = pool;
    note.detail = format!("grant {g}");
    due_outcome(grants::start_waiting_grant(&ctx.db, g).await, note)
}

/// ManageGrantTx on an active (or replaced) grant: the lineage is extended, open-ended, to an
/// end 0.5-3 s ahead, or an hour ahead.
pub(in crate::stress) async fn manage_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((g, _)) = pick_grant(ctx, rng, note, &["active", "replaced"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let now = Utc::now();
    let ends_at = match rng.below(3) {
        0 => None,
        1 => Some(now + ms_ahead(rng, END_AHEAD_MS)),
        _ => Some(now + chrono::Duration::hours(1)),
    };
    let m = ManageGrant {
        starts_at: None,
        ends_at,
        quantity: 1 + rng.below(3) as i32,
        reason: "stress".into(),
        actor: None,
    };
    note.detail = format!("grant {g} x{} until {}", m.quantity, show_time(ends_at));
    let r = grants::manage_grant(&ctx.db, g, &m).await;
    match &r {
        Ok(new) if *new != g => note.detail.push_str(&format!(": extended as grant {new}")),
        Ok(_) => {
            note.detail.push_str(": rescheduled in place (it was waiting)");
            note.taken = Some(StressPath::ExtendWaitingGrant);
        }
        Err(_) => {}
    }
    grant_outcome(r, note)
}

/// ExtendWaitingGrantTx (a manage of a waiting grant): a new start a few hundred ms ahead, or
/// the same start (the form's start left empty); an end after it, or none.
pub(in crate::stress) async fn extend_waiting_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let Some((g, starts)) = pick_grant(ctx, rng, note, &["waiting"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let now = Utc::now();
    let starts_at = (rng.below(2) == 0).then(|| now + ms_ahead(rng, START_AHEAD_MS));
    let from = starts_at.unwrap_or(starts).max(now);
    let ends_at = (rng.below(2) == 0).then(|| from + ms_ahead(rng, END_AHEAD_MS));
    let m = ManageGrant { starts_at, ends_at, quantity: 1 + rng.below(3) as i32, reason: "stress".into(), actor: None };
    note.detail = format!(
        "grant {g} x{} from {} until {}",
        m.quantity,
        if starts_at.is_some() { show_time(starts_at) } else { "its start".into() },
        show_time(ends_at)
    );
    let r = grants::manage_grant(&ctx.db, g, &m).await;
    if let Ok(new) = &r
        && *new != g
    {
        // It started meanwhile, and a manage that keeps the start extends it.
        note.detail.push_str(&format!(": it had started; extended as grant {new}"));
        note.taken = Some(StressPath::ManageGrant);
    }
    grant_outcome(r, note)
}
