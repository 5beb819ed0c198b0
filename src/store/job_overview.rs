//! What the operator's overview shows of the job queue.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::ids::JobId;

#[derive(Debug, Default)]
pub struct JobCounts {
    pub pending: i64,
    pub running: i64,
    pub failed: i64,
    pub done: i64,
}

#[derive(Debug)]
pub struct FailedJob {
    pub job_id: JobId,
    pub kind: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub failed_at: DateTime<Utc>,
}

pub async fn job_counts(conn: &mut PgConnection) -> sqlx::Result<JobCounts> {
    sqlx::query_as!(
        JobCounts,
        r#"SELECT count(*) FILTER (WHERE state = 'pending') AS "pending!",
                  count(*) FILTER (WHERE state = 'running') AS "running!",
                  count(*) FILTER (WHERE state = 'failed') AS "failed!",
                  count(*) FILTER (WHERE state = 'done') AS "done!"
           FROM integration.jobs"#
    )
    .fetch_one(conn)
    .await
}

pub async fn recent_failed_jobs(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<FailedJob>> {
    sqlx::query_as!(
        FailedJob,
        r#"SELECT job_id, kind, attempts, last_error, coalesce(finished_at, run_at) AS "failed_at!"
           FROM integration.jobs WHERE state = 'failed' ORDER BY coalesce(finished_at, run_at) DESC LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}
