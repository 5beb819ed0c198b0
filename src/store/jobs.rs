//! Queries of `integration.jobs` and `integration.job_schedules`, and the purge of expired rows.
//! `jobs::queue` and `jobs::schedule` decide when these run; this module only says how.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use super::millis;
use crate::{ids::JobId, states::JobState};

/// A job a worker has just claimed: it holds the lease on it for this attempt.
#[derive(Clone, Debug)]
pub struct ClaimedJob {
    pub job_id: JobId,
    pub kind: String,
    pub payload: serde_json::Value,
    /// This attempt's number, counting from 1 (the claim counted it).
    pub attempts: i32,
    pub max_attempts: i32,
    /// The request that enqueued it, when one did: the worker runs it under that id.
    pub request_id: Option<String>,
}

/// Insert a job, or nothing when `dedupe_key` already has an open (pending or running) job.
/// The trigger `jobs_notify_inserted` wakes the workers when the caller's transaction commits.
pub async fn insert_job(
    conn: &mut PgConnection,
    kind: &str,
    payload: &serde_json::Value,
    run_at: Option<DateTime<Utc>>,
    dedupe_key: Option<&str>,
    max_attempts: i32,
) -> Result<Option<JobId>, sqlx::Error> {
    // The conflict target names the partial index's predicate, so only an open job conflicts.
    sqlx::query_scalar!(
        r#"INSERT INTO integration.jobs (kind, payload, run_at, dedupe_key, max_attempts, request_id)
           VALUES ($1, $2, coalesce($3, now()), $4, $5, $6)
           ON CONFLICT (dedupe_key) WHERE state IN ('pending', 'running') DO NOTHING
           RETURNING job_id AS "job_id: JobId""#,
        kind,
        payload,
        run_at,
        dedupe_key,
        max_attempts,
        crate::trace_context::current()
    )
    .fetch_optional(conn)
    .await
}

/// The claim, one statement: lock up to `limit` due rows (pending and due, or running with an
/// expired lease) in (run_at, job_id) order, skipping rows another worker has locked, and give
/// `worker` the lease on them for this attempt. A row whose lease expired on its last attempt
/// (its worker died, or ran past the lease, every time) is marked failed instead of run again,
/// so a job that kills its worker cannot loop forever.
pub async fn claim_due_jobs(
    conn: &mut PgConnection,
    worker: &str,
    kinds: Option<&[String]>,
    limit: i64,
    lease: Duration,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    // The columns come through a CTE, which hides their NOT NULL.
    sqlx::query_as!(
        ClaimedJob,
        r#"
WITH due AS (
    SELECT job_id, (state = 'running' AND attempts >= max_attempts) AS exhausted
    FROM integration.jobs
    WHERE run_at <= now()
      AND (state = 'pending' OR (state = 'running' AND locked_until < now()))
      AND ($4::text[] IS NULL OR kind = ANY ($4))
    ORDER BY run_at, job_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE integration.jobs AS j
    SET state = CASE WHEN due.exhausted THEN 'failed' ELSE 'running' END,
        attempts = CASE WHEN due.exhausted THEN j.attempts ELSE j.attempts + 1 END,
        locked_by = CASE WHEN due.exhausted THEN j.locked_by ELSE $1 END,
        locked_until = CASE WHEN due.exhausted THEN NULL ELSE now() + $3::bigint * interval '1 millisecond' END,
        finished_at = CASE WHEN due.exhausted THEN now() END,
        last_error = CASE WHEN due.exhausted
            THEN 'the lease of worker ' || j.locked_by || ' expired on the last attempt'
                 || coalesce(' (earlier error: ' || j.last_error || ')', '')
            ELSE j.last_error END
    FROM due
    WHERE j.job_id = due.job_id
    RETURNING j.job_id, j.kind, j.payload, j.attempts, j.max_attempts, j.state, j.request_id
)
SELECT job_id AS "job_id!", kind AS "kind!", payload AS "payload!", attempts AS "attempts!", max_attempts AS "max_attempts!",
       request_id
FROM taken WHERE state = 'running'
ORDER BY job_id"#,
        worker,
        limit,
        millis(lease),
        kinds
    )
    .fetch_all(conn)
    .await
}

/// Mark this attempt done. False when the worker no longer holds the lease for this attempt (it
/// expired and another worker, or a later attempt, has the job): then the outcome is not ours
/// to record.
pub async fn mark_job_done<'e>(
    db: impl PgExecutor<'e>,
    job_id: JobId,
    worker: &str,
    attempt: i32,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE integration.jobs
         SET state = 'done', finished_at = now(), locked_until = NULL
         WHERE job_id = $1 AND state = 'running' AND locked_by = $2 AND attempts = $3",
        job_id as JobId,
        worker,
        attempt
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Record a failed attempt: back to pending, due again after `retry_in`, or `failed` when the
/// attempts are used up or `retry_in` is None (a permanent failure). Returns the new state, or
/// None when the worker no longer holds the lease for this attempt.
pub async fn mark_job_failed<'e>(
    db: impl PgExecutor<'e>,
    job_id: JobId,
    worker: &str,
    attempt: i32,
    error: &str,
    retry_in: Option<Duration>,
) -> Result<Option<JobState>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"UPDATE integration.jobs
         SET state = CASE WHEN $5::bigint IS NULL OR attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
             run_at = CASE WHEN $5::bigint IS NULL OR attempts >= max_attempts THEN run_at
                           ELSE now() + $5::bigint * interval '1 millisecond' END,
             finished_at = CASE WHEN $5::bigint IS NULL OR attempts >= max_attempts THEN now() END,
             locked_until = NULL,
             last_error = $4
         WHERE job_id = $1 AND state = 'running' AND locked_by = $2 AND attempts = $3
         RETURNING state AS "state: JobState""#,
        job_id as JobId,
        worker,
        attempt,
        error,
        retry_in.map(millis)
    )
    .fetch_optional(db)
    .await
}

/// Renew this attempt's lease: it runs until `lease` from now. False when the worker no longer
/// holds the job for this attempt (the same guard as done and failed): the lease ran out and
/// another worker, or a later attempt, has the job.
pub async fn renew_job_lease<'e>(
    db: impl PgExecutor<'e>,
    job_id: JobId,
    worker: &str,
    attempt: i32,
    lease: Duration,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query!(
        "UPDATE integration.jobs
         SET locked_until = now() + $4::bigint * interval '1 millisecond'
         WHERE job_id = $1 AND state = 'running' AND locked_by = $2 AND attempts = $3",
        job_id as JobId,
        worker,
        attempt,
        millis(lease)
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Give an unfinished attempt back (a worker shutting down stopped it): pending, due now, the
/// lease cleared, and the attempt the claim counted not spent. Under the same guard as done and
/// failed; locked_by keeps the last holder for operators, as after any run. When it gives the
/// job back it wakes the workers on the enqueue trigger's channel (migrations/0003_jobs.sql),
/// at its commit. False when the worker no longer held the job for this attempt.
pub async fn give_back_job<'e>(
    db: impl PgExecutor<'e>,
    job_id: JobId,
    worker: &str,
    attempt: i32,
) -> Result<bool, sqlx::Error> {
    let given = sqlx::query!(
        "WITH given AS (
             UPDATE integration.jobs
             SET state = 'pending', run_at = now(), attempts = attempts - 1, locked_until = NULL
             WHERE job_id = $1 AND state = 'running' AND locked_by = $2 AND attempts = $3
             RETURNING job_id
         )
         SELECT job_id, pg_notify('member_console_jobs', '') AS notified FROM given",
        job_id as JobId,
        worker,
        attempt
    )
    .fetch_optional(db)
    .await?;
    Ok(given.is_some())
}

/// A schedule that is due, locked by this transaction.
#[derive(Clone, Debug)]
pub struct DueSchedule {
    pub name: String,
    pub next_run_at: DateTime<Utc>,
}

/// Lock the due schedules, skipping any another worker is firing right now.
pub async fn lock_due_schedules(conn: &mut PgConnection) -> Result<Vec<DueSchedule>, sqlx::Error> {
    sqlx::query_as!(
        DueSchedule,
        "SELECT name, next_run_at FROM integration.job_schedules
         WHERE next_run_at <= now()
         ORDER BY name
         FOR UPDATE SKIP LOCKED"
    )
    .fetch_all(conn)
    .await
}

/// Move a fired schedule to the first multiple of its interval (counted from its current
/// next_run_at) that is after now: after downtime it fires once, not once per missed interval.
pub async fn advance_schedule(conn: &mut PgConnection, name: &str, enqueued: bool) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE integration.job_schedules
         SET next_run_at = next_run_at
                 + every * (floor(extract(epoch FROM now() - next_run_at) / extract(epoch FROM every)) + 1),
             last_enqueued_at = CASE WHEN $2 THEN now() ELSE last_enqueued_at END
         WHERE name = $1",
        name,
        enqueued
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Create a schedule (first due now), or change its interval. Unchanged schedules are not
/// written, so every replica can call this at start-up.
pub async fn upsert_schedule<'e>(db: impl PgExecutor<'e>, name: &str, every: Duration) -> Result<(), sqlx::Error> {
    // A shorter interval brings the next run no later than one new interval from now.
    sqlx::query!(
        "INSERT INTO integration.job_schedules AS s (name, every)
         VALUES ($1, $2::bigint * interval '1 millisecond')
         ON CONFLICT (name) DO UPDATE
         SET every = EXCLUDED.every, next_run_at = least(s.next_run_at, now() + EXCLUDED.every)
         WHERE s.every IS DISTINCT FROM EXCLUDED.every",
        name,
        millis(every)
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Delete web sessions past their expiry. Returns how many.
pub async fn delete_expired_web_sessions<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r =
        sqlx::query!("DELETE FROM core.web_sessions WHERE expires_at < now() OR ends_at < now()").execute(db).await?;
    Ok(r.rows_affected())
}

/// Delete sign-in throttle rows a day old (a day without failures forgets them anyway) and
/// address windows long over, in one statement.
pub async fn delete_old_sign_in_failures<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let n: i64 = sqlx::query_scalar!(
        r#"WITH t AS (DELETE FROM core.sign_in_throttle WHERE last_failure_at < now() - interval '1 day' RETURNING 1),
                a AS (DELETE FROM core.sign_in_addresses WHERE window_started_at < now() - interval '1 day' RETURNING 1)
           SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM a) AS "deleted!""#
    )
    .fetch_one(db)
    .await?;
    Ok(n as u64)
}

/// Delete done jobs finished more than 7 days ago. Failed jobs stay until an operator acts.
pub async fn delete_old_done_jobs<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r =
        sqlx::query!("DELETE FROM integration.jobs WHERE state = 'done' AND finished_at < now() - interval '7 days'")
            .execute(db)
            .await?;
    Ok(r.rows_affected())
}

/// Insert a job about one outside object (its payload's `object_key`) unless one about the same
/// object is still pending: that one has not read the object yet, so it will see what this one
/// would. A running one does not count: it may have read the object before the change that
/// asked for this job.
pub async fn insert_object_job(
    conn: &mut PgConnection,
    kind: &str,
    payload: &serde_json::Value,
    max_attempts: i32,
) -> Result<Option<JobId>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO integration.jobs (kind, payload, max_attempts, request_id)
           VALUES ($1, $2, $3, $4)
           ON CONFLICT ((payload->>'object_key')) WHERE state = 'pending' AND payload ? 'object_key' DO NOTHING
           RETURNING job_id AS "job_id: JobId""#,
        kind,
        payload,
        max_attempts,
        crate::trace_context::current()
    )
    .fetch_optional(conn)
    .await
}
