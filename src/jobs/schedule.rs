//! Recurring jobs. A schedule's name is the kind of job it enqueues. Every worker fires due
//! schedules; the row lock (SKIP LOCKED) lets one of them fire each, and the dedupe key
//! `schedule:<name>` keeps a run that is still pending or running from getting a second one.

use std::time::Duration;

use serde_json::json;

use super::queue::{self, NewJob};
use crate::db::{
    Db, DbError, TxKind,
    locks::{Lock, PathLocks},
    tx,
};
use crate::store::jobs as store;

/// The dedupe key of a schedule's runs.
pub fn dedupe_key(name: &str) -> String {
    format!("schedule:{name}")
}

/// Firing's lock declaration. The enqueue inside it inserts job rows and locks no existing one.
pub static FIRE_SCHEDULES_LOCKS: PathLocks = PathLocks {
    path: "Fire due schedules",
    function: "jobs::schedule::fire_due_schedules",
    kind: "Plain",
    locks: &[Lock::ScheduleRows],
    why: "Due schedule rows are locked FOR UPDATE SKIP LOCKED until their run is enqueued and \
          next_run_at advanced, so two workers never fire the same schedule for the same slot.",
};

/// Enqueue a run of every due schedule and advance each to the first multiple of its interval
/// after now (no catch-up storm after downtime). A schedule whose previous run is still open
/// enqueues nothing this time, but still advances. Returns how many runs were enqueued.
#[tracing::instrument(name = "Fire due schedules", skip(db))]
pub async fn fire_due_schedules(db: &Db) -> Result<usize, DbError> {
    let mut tx = tx::begin_for(db, TxKind::Plain, &FIRE_SCHEDULES_LOCKS).await?;
    let due = store::lock_due_schedules(tx.conn()).await?;
    // The statement locked them all, in name order; noted one by one after it.
    crate::db::trace::note_rows(tx.conn(), Lock::ScheduleRows, due.iter().map(|s| (s.name.as_str(), None))).await?;
    let mut enqueued = 0;
    for s in &due {
        let job = NewJob {
            kind: &s.name,
            payload: json!({ "schedule": s.name, "due_at": s.next_run_at }),
            run_at: None,
            dedupe_key: Some(dedupe_key(&s.name)),
            max_attempts: None,
        };
        let id = queue::enqueue(tx.conn(), job).await?;
        match id {
            Some(job_id) => {
                tracing::info!(schedule = %s.name, job_id = job_id.0, "schedule fired");
                enqueued += 1;
            }
            None => tracing::info!(schedule = %s.name, "previous run still open; this slot is skipped"),
        }
        store::advance_schedule(tx.conn(), &s.name, id.is_some()).await?;
    }
    tx.commit().await?;
    Ok(enqueued)
}

/// Create the schedule `name` (first run due at once) or change its interval; a no-op when it
/// already exists with this interval, so every replica calls it at start-up. `every` is a fixed
/// length of at least a second.
pub async fn ensure_schedule(db: &Db, name: &str, every: Duration) -> Result<(), DbError> {
    store::upsert_schedule(&db.pool, name, every).await?;
    Ok(())
}
