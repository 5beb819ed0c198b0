//! What `/metrics` and the operator's overview read of the database: the job queue by kind, the
//! drains, the outboxes and the relay's backlog, the last farm run and Stripe event; and the
//! overview's per-minute samples. Every count here reads a partial index or a small table, so a
//! scrape does not grow with the number of organizations (a running drain's owed moves excepted,
//! which are the point).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

#[derive(Debug, Clone, PartialEq)]
pub struct JobKindFigures {
    pub kind: String,
    pub queued: i64,
    pub running: i64,
    /// How long the oldest due, unclaimed job of this kind has waited (0 when none is due).
    pub oldest_due_seconds: f64,
    pub failed: i64,
}

/// Open and failed jobs by kind (kinds with neither are absent).
pub async fn jobs_by_kind(conn: &mut PgConnection) -> sqlx::Result<Vec<JobKindFigures>> {
    sqlx::query_as!(
        JobKindFigures,
        r#"WITH open AS (
               SELECT kind,
                      count(*) FILTER (WHERE state = 'pending') AS queued,
                      count(*) FILTER (WHERE state = 'running') AS running,
                      extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now()))
                          AS oldest
                 FROM integration.jobs WHERE state IN ('pending', 'running') GROUP BY kind),
           failed AS (
               SELECT kind, count(*) AS failed FROM integration.jobs WHERE state = 'failed' GROUP BY kind)
           SELECT coalesce(o.kind, f.kind) AS "kind!",
                  coalesce(o.queued, 0) AS "queued!",
                  coalesce(o.running, 0) AS "running!",
                  coalesce(o.oldest, 0)::float8 AS "oldest_due_seconds!",
                  coalesce(f.failed, 0) AS "failed!"
             FROM open o FULL JOIN failed f ON f.kind = o.kind
            ORDER BY 1"#
    )
    .fetch_all(conn)
    .await
}

/// The drains, the outboxes and the relay, as counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Backlog {
    pub rule_changes_draining: i64,
    /// Moves the draining rule changes still owe (one per act and pool).
    pub rule_change_moves_owed: i64,
    pub plan_acts_running: i64,
    /// Moves the plan acts still owe, waiting for the drain.
    pub plan_act_moves_pending: i64,
    /// Moves that failed and wait for an operator's Retry.
    pub plan_act_moves_failed: i64,
    /// Reconcile requests and product syncs not yet processed.
    pub outbox_pending: i64,
    pub outbox_oldest_due_seconds: f64,
    /// Desired-state notices not yet turned into records.
    pub desired_state_notices: i64,
    /// Records whose latest generation the remote has not confirmed.
    pub desired_state_behind: i64,
    /// Records whose last push failed.
    pub desired_state_failing: i64,
    pub live_connections: i64,
}

pub async fn backlog(conn: &mut PgConnection) -> sqlx::Result<Backlog> {
    sqlx::query_as!(
        Backlog,
        r#"SELECT
             (SELECT count(*) FROM core.entitlement_set_changes WHERE state = 'draining') AS "rule_changes_draining!",
             (SELECT count(*) FROM core.entitlement_set_changes c
                JOIN core.entitlement_set_change_acts a ON a.change_id = c.change_id
                JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
               WHERE c.state = 'draining' AND o.state = 'owed') AS "rule_change_moves_owed!",
             (SELECT count(*) FROM core.plan_acts WHERE state = 'running') AS "plan_acts_running!",
             (SELECT count(*) FROM core.plan_act_obligations WHERE state IN ('pending', 'failed') AND state = 'pending')
                 AS "plan_act_moves_pending!",
             (SELECT count(*) FROM core.plan_act_obligations WHERE state IN ('pending', 'failed') AND state = 'failed')
                 AS "plan_act_moves_failed!",
             (SELECT count(*) FROM core.outbox WHERE processed_at IS NULL) AS "outbox_pending!",
             (SELECT coalesce(extract(epoch FROM now() - min(due_at)), 0)::float8 FROM core.outbox
               WHERE processed_at IS NULL AND due_at <= now()) AS "outbox_oldest_due_seconds!",
             (SELECT count(*) FROM core.desired_state_outbox) AS "desired_state_notices!",
             (SELECT count(*) FROM core.desired_state_records WHERE confirmed_generation < generation)
                 AS "desired_state_behind!",
             (SELECT count(*) FROM core.desired_state_records WHERE failures > 0) AS "desired_state_failing!",
             (SELECT count(*) FROM core.desired_state_connections WHERE deleted_at IS NULL) AS "live_connections!""#
    )
    .fetch_one(conn)
    .await
}

/// The last farm maintenance run, if any.
#[derive(Debug, Clone)]
pub struct LastFarmRun {
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// "ok", "failed", or None while it runs.
    pub outcome: Option<String>,
    pub error: Option<String>,
}

pub async fn last_farm_run(conn: &mut PgConnection) -> sqlx::Result<Option<LastFarmRun>> {
    sqlx::query_as!(
        LastFarmRun,
        r#"SELECT started_at, finished_at, outcome, error FROM fedwiki.maintenance_runs ORDER BY run_id DESC LIMIT 1"#
    )
    .fetch_optional(conn)
    .await
}

/// When the last Stripe event arrived, and how many arrived in the last hour.
pub async fn stripe_events(conn: &mut PgConnection) -> sqlx::Result<(Option<DateTime<Utc>>, i64)> {
    let r = sqlx::query!(
        r#"SELECT (SELECT max(received_at) FROM billing.stripe_events) AS last,
                  (SELECT count(*) FROM billing.stripe_events WHERE received_at > now() - interval '1 hour') AS "hour!""#
    )
    .fetch_one(conn)
    .await?;
    Ok((r.last, r.hour))
}

/// One per-minute sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub minute: DateTime<Utc>,
    pub value: f64,
}

/// Record a minute's samples: this process's `requests` under `source` (added to any it wrote for
/// that minute already), and the database's figures once per minute whoever writes first.
pub async fn write_samples(
    conn: &mut PgConnection,
    minute: DateTime<Utc>,
    source: &str,
    requests: f64,
    queue_depth: f64,
    drain_remaining: f64,
) -> sqlx::Result<()> {
    sqlx::query!(
        r#"INSERT INTO integration.metric_samples (name, minute, source, value)
           VALUES ('requests', date_trunc('minute', $1::timestamptz), $2, $3),
                  ('queue_depth', date_trunc('minute', $1::timestamptz), 'db', $4),
                  ('drain_remaining', date_trunc('minute', $1::timestamptz), 'db', $5)
           ON CONFLICT (name, minute, source) DO UPDATE
              SET value = integration.metric_samples.value + excluded.value
            WHERE excluded.name = 'requests'"#,
        minute,
        source,
        requests,
        queue_depth,
        drain_remaining
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Forget samples older than `before`.
pub async fn forget_samples(conn: &mut PgConnection, before: DateTime<Utc>) -> sqlx::Result<u64> {
    let r = sqlx::query!("DELETE FROM integration.metric_samples WHERE minute < $1", before).execute(conn).await?;
    Ok(r.rows_affected())
}

/// `name`'s samples since `since`, summed over sources, oldest first.
pub async fn samples(conn: &mut PgConnection, name: &str, since: DateTime<Utc>) -> sqlx::Result<Vec<Sample>> {
    sqlx::query_as!(
        Sample,
        r#"SELECT minute, sum(value)::float8 AS "value!" FROM integration.metric_samples
            WHERE name = $1 AND minute >= $2 GROUP BY minute ORDER BY minute"#,
        name,
        since
    )
    .fetch_all(conn)
    .await
}
