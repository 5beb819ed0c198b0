//! The rule changes' paths, as acts.

use super::*;

/// A typed refusal (another change holds the rendezvous, nothing changed) counts as refused; a
/// set or change the tool picked that is gone is an error, as are a deadlock and any other
/// database error.
pub(in crate::stress) fn rule_change_outcome<T>(
    r: Result<T, ServiceError>,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(e @ (ServiceError::Invalid(_) | ServiceError::Refused(_) | ServiceError::ChangeInProgress)) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(ServiceError::Db(DbError::LockNotAvailable)) => {
            note.detail.push_str("; refused: a lock wait timed out");
            Ok(Outcome::Refused)
        }
        Err(e @ ServiceError::NotFound(_)) => Err(Failure::Error(e.to_string())),
        // No path the stress runs calls Stripe: a remote failure here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(e.to_string())),
        Err(ServiceError::Db(e)) => Err(e.into()),
    }
}

/// RuleChangeBatchCommit on a set the organizations carry: the site limit to one of a few
/// values and the flag to yes or no (sometimes what they are already: "Nothing changed"). Half
/// under the console's sync cap (settled inline when the set owes at most that many pools),
/// half with cap 0, so that the change drains (the drain job, and the tasks' DrainChange).
pub(in crate::stress) async fn commit_rule_change(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let set = rng.pick(&ctx.fx.carried_sets);
    let sites = *rng.pick(set.sites);
    let flag = *rng.pick(&["yes", "no"]);
    let cap = if rng.below(2) == 0 { ctx.sync_cap } else { 0 };
    note.detail = format!("set {} ({}): sites {sites:?}, {} {flag}, cap {cap}", set.id, set.name, set.flag);
    let submitted = rules(&[("fedwiki.active_sites", sites), (set.flag, flag)]);
    let r = rc::commit_rule_change_batch(&ctx.db, set.id, &submitted, None, &"stress".into(), cap).await;
    if let Ok(c) = &r {
        note.detail.push_str(&format!(
            " → change {}: {} acts, {} pools, {}, held {} ms",
            c.change_id,
            c.acts,
            c.pools_owed,
            if c.settled_inline { "settled inline" } else { "draining" },
            c.hold.as_millis()
        ));
    }
    rule_change_outcome(r, note)
}

/// DrainChange on a draining change (one committed here when none is), beside the drain job doing
/// the same (and the other tasks): 1-4 pools at a time. A pass that found nothing due (the job
/// settled it first, or its failed pools wait for their next attempt) is refused; with no change
/// to drain and none committed (nothing changed, a refusal), skipped.
pub(in crate::stress) async fn drain_change(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let ids: Vec<RuleChangeId> = sqlx::query_scalar(
        "SELECT change_id FROM core.entitlement_set_changes WHERE state = 'draining' ORDER BY change_id",
    )
    .fetch_all(&ctx.db.pool)
    .await?;
    // With none draining (the workers' drain of a few pools is quick), commit one above the cap
    // first, as the commit act does half the time, so the pass has a change to meet the job on.
    let ids = if ids.is_empty() {
        let set = rng.pick(&ctx.fx.carried_sets);
        let (sites, flag) = (*rng.pick(set.sites), *rng.pick(&["yes", "no"]));
        let submitted = rules(&[("fedwiki.active_sites", sites), (set.flag, flag)]);
        match rc::commit_rule_change_batch(&ctx.db, set.id, &submitted, None, &"stress".into(), 0).await {
            Ok(c) if !c.settled_inline => vec![c.change_id],
            Ok(_) => return Ok(Outcome::Skipped),
            Err(ServiceError::Db(e)) if !matches!(e, DbError::LockNotAvailable) => return Err(e.into()),
            // Nothing changed, another change in progress, a lock wait past its bound.
            Err(_) => return Ok(Outcome::Skipped),
        }
    } else {
        ids
    };
    let change = *rng.pick(&ids);
    let parallelism = 1 + rng.below(4) as i64;
    note.detail = format!("change {change}, {parallelism} pools at a time");
    let r = rc::drain_change(&ctx.db, change, parallelism).await.map(|d| {
        (format!(": {} settled, {} failed, finished {}", d.settled, d.failed, d.finished), d.settled + d.failed > 0)
    });
    super::drain_outcome(r, "; nothing due", note)
}

/// "Retry a rule change's failed pools" on a change with failed pools. Nothing fails on its own
/// in a healthy run, so when none has, one owed pool of a draining change is failed first, as
/// the drain records a pool whose settlement rolled back (`record_obligation_failure`, with
/// `SIMULATED_FAILURE`); the drains must then settle it once retried. A retry that found
/// nothing failed any more (a drain settled it first) is refused.
pub(in crate::stress) async fn retry_rule_change(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    pub(in crate::stress) const FAILED: &str =
        "SELECT DISTINCT a.change_id, o.pool_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE o.state = 'failed' ORDER BY a.change_id, o.pool_id LIMIT 40";
    pub(in crate::stress) const OWED: &str =
        "SELECT DISTINCT a.change_id, o.pool_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id)
         JOIN core.entitlement_set_changes ch ON ch.change_id = a.change_id
         WHERE ch.state = 'draining' AND o.state = 'owed' ORDER BY o.pool_id DESC LIMIT 8";
    let failed: Vec<(RuleChangeId, i64)> = sqlx::query_as(FAILED).fetch_all(&ctx.db.pool).await?;
    let change = if let Some((change, pool)) = (!failed.is_empty()).then(|| *rng.pick(&failed)) {
        note.pool = Some(pool);
        note.detail = format!("change {change} (pool {pool} failed)");
        change
    } else {
        let owed: Vec<(RuleChangeId, PoolId)> = sqlx::query_as(OWED).fetch_all(&ctx.db.pool).await?;
        if owed.is_empty() {
            // Nothing failed and nothing owed at this moment (the workers' drains are quick):
            // the operator's Retry would find nothing either.
            note.detail = "nothing failed or owed to retry".into();
            return Ok(Outcome::Refused);
        }
        // Among the last owed pools: the drains go in ascending pool_id, so these are still
        // owed when the failure is recorded more often than not.
        let (change, pool) = *rng.pick(&owed);
        note.pool = Some(pool.0);
        note.detail = format!("change {change}, after failing pool {pool}");
        match rc::record_obligation_failure(&ctx.db, change, pool, SIMULATED_FAILURE).await {
            Ok(()) => {}
            Err(DbError::LockNotAvailable) => {
                note.detail.push_str("; refused: a lock wait timed out recording the failure");
                return Ok(Outcome::Refused);
            }
            Err(e) => return Err(e.into()),
        }
        change
    };
    let r = rc::retry_failed(&ctx.db, change).await;
    match &r {
        Ok(0) => {
            note.detail.push_str(": nothing failed any more (a drain settled it first)");
            return Ok(Outcome::Refused);
        }
        Ok(n) => note.detail.push_str(&format!(": {n} obligations due now")),
        Err(_) => {}
    }
    rule_change_outcome(r, note)
}
