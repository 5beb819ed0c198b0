//! Background work (DESIGN.md §2): a durable job queue in PostgreSQL (`integration.jobs`),
//! recurring schedules (`integration.job_schedules`), and the worker that runs both.
//!
//! A job is enqueued with `enqueue` on the caller's own transaction, so it exists only if that
//! transaction commits. Workers claim due jobs with FOR UPDATE SKIP LOCKED and a short lease
//! (30 s), renewed while the job runs, so any number of them run against one database and each
//! job runs once per attempt however long it takes; a crashed worker's jobs are re-claimed when
//! their lease expires, and a worker shutting down gives back what it could not finish.
//! Delivery is at least once: handlers must be safe to run again.

pub mod queue;
pub mod schedule;
pub mod worker;

use std::time::Duration;

pub use queue::{Backoff, ClaimedJob, FailOutcome, NewJob, enqueue};
pub use schedule::{ensure_schedule, fire_due_schedules};
pub use worker::{DEFAULT_LEASE, Handler, Handlers, JobContext, JobError, Worker, WorkerOptions};

use crate::db::{Db, DbError};
use crate::store::jobs as store;

/// The kind (and schedule name) of the hourly purge.
pub const PURGE_EXPIRED: &str = "purge_expired";
pub const PURGE_EXPIRED_EVERY: Duration = Duration::from_secs(3600);
/// The organization counts' appended rows are folded this often (their readers sum what is
/// appended since).
pub const COMPACT_COUNTS: &str = "compact_organization_counts";
pub const COMPACT_COUNTS_EVERY: Duration = Duration::from_secs(60);

/// How often the grant sweep runs: a missed expiry or start job is caught within this.
pub const SWEEP_GRANTS_EVERY: Duration = Duration::from_secs(60);

/// The grant id a grant job's payload names.
fn grant_id(payload: &serde_json::Value) -> Result<i64, JobError> {
    payload
        .get("grant_id")
        .and_then(|v| v.as_i64())
        .ok_or_else(|| JobError::Permanent(format!("the payload names no grant_id: {payload}")))
}

fn grant_failure(e: crate::services::grants::GrantError) -> JobError {
    use crate::services::grants::GrantError;
    match e {
        GrantError::Db(d) => JobError::Db(d),
        other => JobError::Permanent(other.to_string()),
    }
}

/// The handlers of the console's own jobs.
pub fn standard_handlers() -> Handlers {
    use crate::services::grants::{self, EXPIRE_GRANT, START_GRANT, SWEEP_GRANTS};
    use crate::services::plan_acts as pa;
    use crate::services::rule_changes as rc;
    let mut h = Handlers::new();
    h.register(PURGE_EXPIRED, |ctx, _payload| async move {
        purge_expired(&ctx.db).await?;
        Ok(())
    });
    h.register(COMPACT_COUNTS, |ctx, _payload| async move {
        crate::services::organizations::compact_counts(&ctx.db).await?;
        Ok(())
    });
    // ExpireGrantActivity: idempotent, so a repeat (two workers, a restart) changes nothing.
    h.register(EXPIRE_GRANT, |ctx, payload| async move {
        grants::expire_grant(&ctx.db, grant_id(&payload)?).await.map_err(grant_failure)?;
        Ok(())
    });
    h.register(START_GRANT, |ctx, payload| async move {
        grants::start_waiting_grant(&ctx.db, grant_id(&payload)?).await.map_err(grant_failure)?;
        Ok(())
    });
    h.register(SWEEP_GRANTS, |ctx, _payload| async move {
        grants::sweep_grants(&ctx.db).await.map_err(grant_failure)?;
        Ok(())
    });
    // The two drains run for as long as their work takes, far past a lease: the worker renews
    // the lease while they run, and stops them (their move tasks with them, as their JoinSet is
    // dropped) if it is ever lost, so one drain job never runs on two workers at once. Neither
    // checks the lease itself; a move or settlement in flight when a drain stops is guarded by
    // its own obligation row, so it is applied once either way.
    //
    // The drain of a rule change above the sync cap; the poller re-enqueues what is still due.
    h.register(rc::DRAIN_RULE_CHANGE, |ctx, payload| async move {
        let id = payload
            .get("change_id")
            .and_then(|v| v.as_i64())
            .ok_or_else(|| JobError::Permanent(format!("the payload names no change_id: {payload}")))?;
        rc::drain_change(&ctx.db, id, rc::DEFAULT_DRAIN_PARALLELISM).await?;
        Ok(())
    });
    h.register(rc::RESUME_RULE_CHANGE_DRAINS, |ctx, _payload| async move {
        rc::resume_drains(&ctx.db).await?;
        Ok(())
    });
    // A default change's listing and moves after the request that made it; the poller resumes it.
    h.register(pa::DRAIN_PLAN_ACT, |ctx, payload| async move {
        let id = payload
            .get("plan_act_id")
            .and_then(|v| v.as_i64())
            .ok_or_else(|| JobError::Permanent(format!("the payload names no plan_act_id: {payload}")))?;
        pa::drain_plan_act(&ctx.db, id, None).await?;
        Ok(())
    });
    h.register(pa::RESUME_PLAN_ACT_DRAINS, |ctx, _payload| async move {
        pa::resume_drains(&ctx.db).await?;
        Ok(())
    });
    h
}

/// How often the poller looks for rule changes with pools still owed.
pub const RESUME_DRAINS_EVERY: Duration = Duration::from_secs(30);

/// Create the console's schedules, or bring their intervals up to date (idempotent; every
/// replica calls it at start-up).
pub async fn register_standard_schedules(db: &Db) -> Result<(), DbError> {
    ensure_schedule(db, PURGE_EXPIRED, PURGE_EXPIRED_EVERY).await?;
    ensure_schedule(db, COMPACT_COUNTS, COMPACT_COUNTS_EVERY).await?;
    ensure_schedule(db, crate::services::grants::SWEEP_GRANTS, SWEEP_GRANTS_EVERY).await?;
    ensure_schedule(db, crate::services::rule_changes::RESUME_RULE_CHANGE_DRAINS, RESUME_DRAINS_EVERY).await?;
    ensure_schedule(db, crate::services::plan_acts::RESUME_PLAN_ACT_DRAINS, RESUME_DRAINS_EVERY).await
}

/// How many rows one purge deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    pub web_sessions: u64,
    pub sign_in_failures: u64,
    pub done_jobs: u64,
}

/// Delete expired web sessions, failed sign-ins older than a day, and done jobs finished more
/// than 7 days ago. Three separate statements, no transaction around them: each is complete on
/// its own, and none holds its row locks while the next runs.
#[tracing::instrument(name = "Purge expired rows", skip(db))]
pub async fn purge_expired(db: &Db) -> Result<Purged, DbError> {
    let purged = Purged {
        web_sessions: store::delete_expired_web_sessions(&db.pool).await?,
        sign_in_failures: store::delete_old_sign_in_failures(&db.pool).await?,
        done_jobs: store::delete_old_done_jobs(&db.pool).await?,
    };
    tracing::info!(?purged, "purged expired rows");
    Ok(purged)
}
