//! The job queue's operations: enqueue (inside the caller's transaction), claim, complete, fail,
//! and the retry backoff. Workers call these; anything may enqueue.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::db::{
    Db, DbError, TxKind,
    locks::{Lock, PathLocks},
    tx,
};
pub use crate::store::jobs::ClaimedJob;
use crate::{ids::JobId, states::JobState, store::jobs as store};

/// The channel the enqueue trigger notifies (migrations/0003_jobs.sql).
pub const NOTIFY_CHANNEL: &str = "member_console_jobs";

/// Attempts a job gets when its type does not say; the column default repeats it.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 10;

/// A job to enqueue: what `Job::enqueue` builds from a job's type (`NewJob::of`, in `job`), and what a schedule's firing
/// builds from its name (a kind no type names here).
#[derive(Clone, Debug)]
pub struct NewJob<'a> {
    /// Which handler runs it.
    pub kind: &'a str,
    pub payload: serde_json::Value,
    /// Not before this; None: now.
    pub run_at: Option<DateTime<Utc>>,
    /// While a job with this key is pending or running, enqueueing another is a no-op.
    pub dedupe_key: Option<String>,
    /// While a job with this key in its payload is pending, enqueueing another is a no-op (see
    /// `Job::object_key`). Such a job is due now and has no dedupe key.
    pub object_key: Option<String>,
    /// None: `DEFAULT_MAX_ATTEMPTS`.
    pub max_attempts: Option<i32>,
}

impl<'a> NewJob<'a> {
    /// A job of `kind`, due now, no dedupe key, the default attempts.
    pub fn new(kind: &'a str, payload: serde_json::Value) -> Self {
        NewJob { kind, payload, run_at: None, dedupe_key: None, object_key: None, max_attempts: None }
    }
}

/// The queue's one insert, on the caller's connection, normally inside the transaction whose
/// write needs the job: it exists, and wakes the workers, only if that transaction commits.
/// Returns the new job's id, or None when its dedupe or object key already has an open job.
/// Services call `Job::enqueue`, which comes here.
#[tracing::instrument(name = "Enqueue a job", skip(conn, job), fields(kind = job.kind, dedupe_key = job.dedupe_key.as_deref(), object_key = job.object_key.as_deref()))]
pub async fn enqueue(conn: &mut PgConnection, job: NewJob<'_>) -> Result<Option<JobId>, DbError> {
    let max_attempts = job.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    let id = match job.object_key {
        Some(key) => {
            // The unique index reads the key from the payload (see `store::jobs::insert_object_job`).
            debug_assert!(
                job.run_at.is_none() && job.dedupe_key.is_none(),
                "an object job is due now, keyed by its object"
            );
            let mut payload = job.payload;
            if let Some(map) = payload.as_object_mut() {
                map.insert("object_key".into(), serde_json::Value::String(key));
            }
            store::insert_object_job(conn, job.kind, &payload, max_attempts).await?
        }
        None => {
            store::insert_job(conn, job.kind, &job.payload, job.run_at, job.dedupe_key.as_deref(), max_attempts).await?
        }
    };
    Ok(id)
}

/// The claim's lock declaration (DESIGN.md §2; rendered into docs/database-locks.md).
pub static CLAIM_LOCKS: PathLocks = PathLocks {
    path: "Claim due jobs",
    function: "jobs::queue::claim",
    kind: "Plain",
    locks: &[Lock::JobRows],
    why: "Due job rows are locked FOR UPDATE SKIP LOCKED in one statement that also leases them, \
          so concurrent workers claim disjoint jobs without ever waiting on each other.",
};

/// Claim up to `limit` due jobs of any kind for `worker`, leasing each for `lease`: pending jobs
/// whose run_at has come, and running jobs whose lease expired (their worker crashed). Each claim
/// counts an attempt. One statement (`store::jobs::claim_due_jobs`) in a Plain transaction.
pub async fn claim(db: &Db, worker: &str, limit: usize, lease: Duration) -> Result<Vec<ClaimedJob>, DbError> {
    claim_due(db, worker, None, limit, lease).await
}

/// As [`claim`], only jobs of `kinds`: what a worker has handlers for. A job of a kind it cannot
/// run is left to a worker that can (a worker without the farm never takes a site's request, so
/// it does not spend the request's attempts on "no handler" while the one that can waits out the
/// backoff).
pub async fn claim_kinds(
    db: &Db,
    worker: &str,
    kinds: &[String],
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, DbError> {
    claim_due(db, worker, Some(kinds), limit, lease).await
}

async fn claim_due(
    db: &Db,
    worker: &str,
    kinds: Option<&[String]>,
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, DbError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut tx = tx::begin_for(db, TxKind::Plain, &CLAIM_LOCKS).await?;
    let jobs = store::claim_due_jobs(tx.conn(), worker, kinds, limit, lease).await?;
    // The statement locked them all; noted one by one after it (a row whose lease ran out on its
    // last attempt, marked failed by the same statement, is locked too but not returned).
    crate::db::trace::note_rows(tx.conn(), Lock::JobRows, jobs.iter().map(|j| (j.job_id.0, None))).await?;
    tx.commit().await?;
    Ok(jobs)
}

/// Mark an attempt done. False (and nothing written) when `worker` no longer holds the job for
/// this attempt: its lease expired and the job was re-claimed.
pub async fn complete(db: &Db, job_id: JobId, worker: &str, attempt: i32) -> Result<bool, DbError> {
    Ok(store::mark_job_done(&db.pool, job_id, worker, attempt).await?)
}

/// Renew `worker`'s lease on a job for this attempt: it runs `lease` from now. One UPDATE under
/// the guard of `complete` and `fail`; false (and nothing written) when the worker no longer
/// holds the job for this attempt. The worker renews every job it runs (see `worker`).
pub async fn renew(db: &Db, job_id: JobId, worker: &str, attempt: i32, lease: Duration) -> Result<bool, DbError> {
    Ok(store::renew_job_lease(&db.pool, job_id, worker, attempt, lease).await?)
}

/// Give back an attempt `worker` stopped unfinished (at shutdown): the job is pending and due
/// now, its lease cleared, and the attempt its claim counted is not spent. One UPDATE under the
/// guard of `complete` and `fail`; false (and nothing written) when the worker no longer holds
/// the job for this attempt.
pub async fn give_back(db: &Db, job_id: JobId, worker: &str, attempt: i32) -> Result<bool, DbError> {
    Ok(store::give_back_job(&db.pool, job_id, worker, attempt).await?)
}

/// What became of a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOutcome {
    /// Pending again, due after the backoff.
    WillRetry,
    /// Attempts used up, or the failure was permanent.
    Failed,
    /// The worker no longer held the job for this attempt; nothing was written.
    LeaseLost,
}

/// Record a failed attempt with its error (kept in last_error). `retry_in`: when to try again
/// (see `backoff`); None makes the failure permanent. Attempts used up also end in `failed`.
pub async fn fail(
    db: &Db,
    job_id: JobId,
    worker: &str,
    attempt: i32,
    error: &str,
    retry_in: Option<Duration>,
) -> Result<FailOutcome, DbError> {
    let state = store::mark_job_failed(&db.pool, job_id, worker, attempt, error, retry_in).await?;
    Ok(match state {
        None => FailOutcome::LeaseLost,
        Some(JobState::Pending) => FailOutcome::WillRetry,
        Some(_) => FailOutcome::Failed,
    })
}

/// Retry delays: exponential from `base`, capped at `cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    /// 2 s, 4 s, 8 s, ... up to 10 minutes.
    fn default() -> Self {
        Backoff { base: Duration::from_secs(2), cap: Duration::from_secs(600) }
    }
}

impl Backoff {
    /// The delay after failed attempt `attempt` (1-based), with random jitter.
    pub fn delay(&self, attempt: i32) -> Duration {
        self.delay_with_jitter(attempt, random_unit())
    }

    /// The delay with a given jitter in [0, 1]: "equal jitter", between half and all of the
    /// exponential step, so retries of many jobs failing together spread out yet still grow.
    pub fn delay_with_jitter(&self, attempt: i32, jitter: f64) -> Duration {
        let exp = attempt.clamp(1, 31) as u32 - 1;
        let step = self.base.saturating_mul(2u32.saturating_pow(exp)).min(self.cap);
        step.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// A uniform number in [0, 1); 0.5 if the OS has no randomness to give (jitter is a nicety).
fn random_unit() -> f64 {
    getrandom::u64().map(|r| (r >> 11) as f64 / (1u64 << 53) as f64).unwrap_or(0.5)
}
