//! Recurring jobs. A schedule's name is the kind of job it enqueues. Every worker fires due
//! schedules; the row lock (SKIP LOCKED) lets one of them fire each, and the dedupe key
//! `schedule:<name>` keeps a run that is still pending or running from getting a second one.

use std::time::Duration;

use serde_json::json;
use sqlx::PgConnection;

use super::{
    job::Job,
    queue::{self, NewJob},
};
use crate::db::{
    Db, DbError, TxKind,
    locks::{Lock, PathLocks},
    tx,
};
use crate::{ids::JobId, store::jobs as store};

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
        let id = enqueue_run(tx.conn(), &s.name, json!({ "schedule": s.name, "due_at": s.next_run_at })).await?;
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

/// A run of schedule `name` (its job's kind), keyed as every run of it, so none overlaps.
async fn enqueue_run(
    conn: &mut PgConnection,
    name: &str,
    payload: serde_json::Value,
) -> Result<Option<JobId>, DbError> {
    queue::enqueue(conn, NewJob { dedupe_key: Some(dedupe_key(name)), ..NewJob::new(name, payload) }).await
}

/// A run of `J`'s schedule now, off its slot, asked for by `asked` ("operator"): None, and
/// nothing enqueued, while a run is queued or running.
pub async fn run_now<J: Job>(conn: &mut PgConnection, asked: &str) -> Result<Option<JobId>, DbError> {
    enqueue_run(conn, J::KIND, json!({ "schedule": J::KIND, "asked": asked })).await
}

/// `ensure_schedule` for a job type: its runs every `every`.
pub async fn ensure_schedule_of<J: Job>(db: &Db, every: Duration) -> Result<(), DbError> {
    ensure_schedule(db, J::KIND, every).await
}

/// Create the schedule `name` (first run due at once) or change its interval; a no-op when it
/// already exists with this interval, so every replica calls it at start-up. `every` is a fixed
/// length of at least a second.
pub async fn ensure_schedule(db: &Db, name: &str, every: Duration) -> Result<(), DbError> {
    store::upsert_schedule(&db.pool, name, every).await?;
    Ok(())
}
