//! How the console is doing: `GET /metrics` in Prometheus' text format, the operator overview's
//! health of each subsystem, and the per-minute samples behind its charts. Reads only: one read
//! transaction, no lock of the spec's; the samples are plain inserts on their own table.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use crate::{
    db::{
        Db, DbError,
        locks::{Lock, PathLocks},
    },
    metrics::{self, family, sample},
    store::metrics::{self as store, Backlog, JobKindFigures, LastFarmRun, Sample},
};

/// Everything the overview shows of the subsystems.
#[derive(Debug, Clone)]
pub struct Health {
    pub jobs: Vec<JobKindFigures>,
    pub backlog: Backlog,
    pub last_farm_run: Option<LastFarmRun>,
    pub last_stripe_event: Option<DateTime<Utc>>,
    pub stripe_events_last_hour: i64,
}

impl Health {
    /// Jobs waiting to run, every kind together.
    pub fn queued(&self) -> i64 {
        self.jobs.iter().map(|j| j.queued).sum()
    }

    /// The longest any due job has waited, in seconds.
    pub fn oldest_due_seconds(&self) -> f64 {
        self.jobs.iter().map(|j| j.oldest_due_seconds).fold(0.0, f64::max)
    }

    pub fn failed_jobs(&self) -> i64 {
        self.jobs.iter().map(|j| j.failed).sum()
    }

    /// Moves the drains still owe: the draining rule changes' and the running plan acts'.
    pub fn drain_remaining(&self) -> i64 {
        self.backlog.rule_change_moves_owed + self.backlog.plan_act_moves_pending
    }
}

#[tracing::instrument(name = "Read the subsystems' health", skip_all)]
pub async fn health(db: &Db) -> Result<Health, DbError> {
    let mut tx = db.read().await?;
    let jobs = store::jobs_by_kind(&mut tx).await?;
    let backlog = store::backlog(&mut tx).await?;
    let last_farm_run = store::last_farm_run(&mut tx).await?;
    let (last_stripe_event, stripe_events_last_hour) = store::stripe_events(&mut tx).await?;
    Ok(Health { jobs, backlog, last_farm_run, last_stripe_event, stripe_events_last_hour })
}

/// Which outside systems this process is connected to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connected {
    pub stripe: bool,
    pub farm: bool,
}

/// The whole `/metrics` answer: this process's registry, its pool, and the database's figures.
#[tracing::instrument(name = "Read the metrics", skip_all)]
pub async fn prometheus_text(db: &Db, connected: Connected) -> Result<String, DbError> {
    let h = health(db).await?;
    let mut out = String::with_capacity(8 * 1024);
    metrics::global().render(&mut out);

    family(&mut out, "console_db_pool_connections", "gauge", "This process's database connections, by state.");
    let size = f64::from(db.pool.size());
    let idle = db.pool.num_idle() as f64;
    sample(&mut out, "console_db_pool_connections", &[("state", "idle")], idle);
    sample(&mut out, "console_db_pool_connections", &[("state", "in_use")], (size - idle).max(0.0));
    family(&mut out, "console_db_pool_max_connections", "gauge", "The most connections this process's pool opens.");
    sample(&mut out, "console_db_pool_max_connections", &[], f64::from(db.pool.options().get_max_connections()));

    family(&mut out, "console_jobs_queued", "gauge", "Jobs waiting to run, by kind.");
    for j in &h.jobs {
        sample(&mut out, "console_jobs_queued", &[("kind", &j.kind)], j.queued as f64);
    }
    family(&mut out, "console_jobs_running", "gauge", "Jobs a worker holds, by kind.");
    for j in &h.jobs {
        sample(&mut out, "console_jobs_running", &[("kind", &j.kind)], j.running as f64);
    }
    family(
        &mut out,
        "console_jobs_oldest_due_age_seconds",
        "gauge",
        "How long the oldest due job has waited, by kind.",
    );
    for j in &h.jobs {
        sample(&mut out, "console_jobs_oldest_due_age_seconds", &[("kind", &j.kind)], j.oldest_due_seconds);
    }
    family(&mut out, "console_jobs_failed", "gauge", "Jobs that failed for good and wait for an operator, by kind.");
    for j in &h.jobs {
        sample(&mut out, "console_jobs_failed", &[("kind", &j.kind)], j.failed as f64);
    }

    let b = &h.backlog;
    family(&mut out, "console_drains_in_progress", "gauge", "Rule changes draining and plan acts running.");
    sample(&mut out, "console_drains_in_progress", &[("kind", "rule_change")], b.rule_changes_draining as f64);
    sample(&mut out, "console_drains_in_progress", &[("kind", "plan_act")], b.plan_acts_running as f64);
    family(&mut out, "console_drain_moves_owed", "gauge", "Moves the drains still owe.");
    sample(&mut out, "console_drain_moves_owed", &[("kind", "rule_change")], b.rule_change_moves_owed as f64);
    sample(&mut out, "console_drain_moves_owed", &[("kind", "plan_act")], b.plan_act_moves_pending as f64);
    family(&mut out, "console_drain_moves_failed", "gauge", "Plan-act moves that failed and wait for a Retry.");
    sample(&mut out, "console_drain_moves_failed", &[("kind", "plan_act")], b.plan_act_moves_failed as f64);
    family(&mut out, "console_outbox_pending", "gauge", "Outbox rows (reconciles, product syncs) not yet processed.");
    sample(&mut out, "console_outbox_pending", &[], b.outbox_pending as f64);
    family(
        &mut out,
        "console_outbox_oldest_due_age_seconds",
        "gauge",
        "How long the oldest due outbox row has waited.",
    );
    sample(&mut out, "console_outbox_oldest_due_age_seconds", &[], b.outbox_oldest_due_seconds);
    family(
        &mut out,
        "console_desired_state_backlog",
        "gauge",
        "The relay's backlog: notices, records behind, records failing.",
    );
    sample(&mut out, "console_desired_state_backlog", &[("kind", "notices")], b.desired_state_notices as f64);
    sample(&mut out, "console_desired_state_backlog", &[("kind", "behind")], b.desired_state_behind as f64);
    sample(&mut out, "console_desired_state_backlog", &[("kind", "failing")], b.desired_state_failing as f64);
    family(&mut out, "console_desired_state_connections", "gauge", "Connected systems the relay pushes to.");
    sample(&mut out, "console_desired_state_connections", &[], b.live_connections as f64);

    family(&mut out, "console_connected", "gauge", "Whether this process is connected to Stripe and to the farm.");
    sample(&mut out, "console_connected", &[("system", "stripe")], if connected.stripe { 1.0 } else { 0.0 });
    sample(&mut out, "console_connected", &[("system", "farm")], if connected.farm { 1.0 } else { 0.0 });
    family(
        &mut out,
        "console_farm_last_run_ok",
        "gauge",
        "1 when the last farm maintenance run ended well, 0 when it failed.",
    );
    if let Some(run) = h.last_farm_run.as_ref().filter(|r| r.outcome.is_some()) {
        sample(&mut out, "console_farm_last_run_ok", &[], if run.outcome.as_deref() == Some("ok") { 1.0 } else { 0.0 });
    }
    family(&mut out, "console_stripe_events_last_hour", "gauge", "Stripe events received in the last hour.");
    sample(&mut out, "console_stripe_events_last_hour", &[], h.stripe_events_last_hour as f64);
    Ok(out)
}

/// The overview's charts: the last hour, a point per minute.
#[derive(Debug, Clone, Default)]
pub struct Charts {
    /// Requests per minute, every server together.
    pub requests: Vec<Sample>,
    pub queue_depth: Vec<Sample>,
    pub drain_remaining: Vec<Sample>,
}

/// How far back the charts look.
pub const CHART_SPAN: TimeDelta = TimeDelta::hours(1);

#[tracing::instrument(name = "Read the overview's charts", skip_all)]
pub async fn charts(db: &Db) -> Result<Charts, DbError> {
    let since = Utc::now() - CHART_SPAN;
    let mut tx = db.read().await?;
    Ok(Charts {
        requests: store::samples(&mut tx, "requests", since).await?,
        queue_depth: store::samples(&mut tx, "queue_depth", since).await?,
        drain_remaining: store::samples(&mut tx, "drain_remaining", since).await?,
    })
}

/// How long samples are kept.
pub const KEEP_SAMPLES: TimeDelta = TimeDelta::hours(2);
/// How often a server samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// The sample's lock declaration: its figures are read in a read transaction first, then one
/// INSERT ... ON CONFLICT writes the minute.
pub static SAMPLE_LOCKS: PathLocks = PathLocks {
    path: "Sample the overview's figures",
    function: "services::observability::sample_minute",
    kind: "Plain",
    locks: &[Lock::MetricSampleRows],
    why: "One statement, alone in its transaction, writes the server's own request row for the minute \
          and the minute's shared rows (queue depth, drain moves owed); a second server sampling the \
          same minute waits on the first's shared rows for that statement and keeps the first's figures.",
};

/// Record the minute at `at`: `requests` answered by this process (`source`) since its last
/// sample, and the database's queue depth and drains; then forget what is past keeping.
#[tracing::instrument(name = "Sample the overview's figures", skip(db))]
pub async fn sample_minute(db: &Db, source: &str, requests: u64, at: DateTime<Utc>) -> Result<(), DbError> {
    let h = health(db).await?;
    let minute = at.duration_trunc(TimeDelta::minutes(1)).unwrap_or(at);
    // The write, alone in its transaction (named, so the trace counts its rows under the path).
    crate::db::tx::within_for(db, crate::db::TxKind::Plain, &SAMPLE_LOCKS, async |tx: &mut crate::db::Tx| {
        store::write_samples(tx.conn(), minute, source, requests as f64, h.queued() as f64, h.drain_remaining() as f64)
            .await?;
        // Its conflict took each of the minute's rows it met (an update, or a lock when it writes
        // nothing) and inserted the others, in the order of its values; noted after it.
        let key = |name: &str, source: &str| format!("{name},{},{source}", minute.format("%Y-%m-%d %H:%M:%S+00"));
        let rows = [key("requests", source), key("queue_depth", "db"), key("drain_remaining", "db")];
        crate::db::trace::note_rows(tx.conn(), Lock::MetricSampleRows, rows.into_iter().map(|k| (k, None))).await?;
        Ok::<_, DbError>(())
    })
    .await?;
    let mut conn = db.pool.acquire().await.map_err(DbError::from)?;
    store::forget_samples(&mut conn, at - KEEP_SAMPLES).await?;
    Ok(())
}

/// Sample once a minute until `stop` says so: this process's requests since the last sample
/// (so none is counted twice or lost when a write fails: the next one carries them).
pub async fn run_sampler(db: Db, source: String, mut stop: tokio::sync::watch::Receiver<bool>) {
    let registry = metrics::global();
    let mut written = registry.requests_total();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let total = registry.requests_total();
        match sample_minute(&db, &source, total.saturating_sub(written), Utc::now()).await {
            Ok(()) => written = total,
            Err(e) => tracing::warn!(error = %e, "the overview's sample could not be written; the next one carries it"),
        }
    }
}
