//! Background work (DESIGN.md §2): a durable job queue in PostgreSQL (`integration.jobs`),
//! recurring schedules (`integration.job_schedules`), and the worker that runs both.
//!
//! A job is enqueued with `Job::enqueue` on the caller's own transaction, so it exists only if that
//! transaction commits. Workers claim due jobs with FOR UPDATE SKIP LOCKED and a short lease
//! (30 s), renewed while the job runs, so any number of them run against one database and each
//! job runs once per attempt however long it takes; a crashed worker's jobs are re-claimed when
//! their lease expires, and a worker shutting down gives back what it could not finish.
//! Delivery is at least once: handlers must be safe to run again.
//!
//! The queue knows no service: each service defines its jobs, each in one place (a [`Job`]: its
//! type is its payload; its impl says its kind, attempts, keys and how it runs), every caller
//! enqueues one with `job.enqueue(conn)`, and `crate::job_registry` lists the types each worker
//! runs, with the schedules.

pub mod failure;
pub mod job;
pub mod queue;
pub mod schedule;
pub mod worker;

pub use failure::{grant_failure, remote_failure};
pub use job::{Job, JobContext, JobError};
pub use queue::{Backoff, ClaimedJob, DEFAULT_MAX_ATTEMPTS, FailOutcome, NewJob, enqueue};
pub use schedule::{ensure_schedule, ensure_schedule_of, fire_due_schedules};
pub use worker::{DEFAULT_LEASE, Handler, Handlers, Worker, WorkerOptions};

use crate::db::{Db, DbError};
use crate::store::jobs as store;

/// The kind (and schedule name) of the hourly purge.
pub const PURGE_EXPIRED: &str = "purge_expired";
/// The hourly purge, as a typed job (a schedule's payload carries more; it is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PurgeExpired {}

impl Job for PurgeExpired {
    const KIND: &'static str = PURGE_EXPIRED;
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        purge_expired(&job.db).await?;
        Ok(())
    }
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
