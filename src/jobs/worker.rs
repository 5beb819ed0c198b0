//! The worker: fires due schedules, claims due jobs up to its concurrency, runs each on a tokio
//! task that renews the job's lease while it runs, and records the outcome. It wakes on a NOTIFY
//! from the enqueue trigger or on a poll tick, whichever comes first, and stops gracefully on a
//! watch signal, giving back the jobs it could not finish.

use std::{collections::HashMap, fmt, future::Future, sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::{
    sync::{Notify, watch},
    task::{Id, JoinError, JoinSet},
    time::Instant,
};
use tracing::Instrument;

use super::{
    job::{Job, JobContext, JobError},
    queue::{self, Backoff, ClaimedJob, FailOutcome, NOTIFY_CHANNEL},
    schedule,
};
use crate::{db::Db, ids::JobId};

/// A registered handler: an async function of the context and the payload.
pub type Handler = Arc<dyn Fn(JobContext, serde_json::Value) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// The job kinds a worker can run, each with its handler.
#[derive(Clone, Default)]
pub struct Handlers {
    map: HashMap<&'static str, Handler>,
}

impl Handlers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register the job type `J`, run with `ctx` (replacing any earlier handler of its kind):
    /// `handlers.register::<ExpireGrant>(())`. Its payload is read back as `J` first, and a
    /// payload that is not one fails the job permanently, naming it.
    pub fn register<J: Job>(&mut self, ctx: J::Context) -> &mut Self {
        self.register_kind(J::KIND, move |run, payload| {
            let ctx = ctx.clone();
            async move {
                let job = serde_json::from_value::<J>(payload.clone()).map_err(|e| {
                    JobError::Permanent(format!("the payload of a {} job is not one ({e}): {payload}", J::KIND))
                })?;
                job.run(&ctx, &run).await
            }
        })
    }

    /// Register a handler of raw payloads under `kind`, replacing any earlier one (tests, and
    /// wrappers around registered handlers): `handlers.register_kind("kind", |ctx, payload|
    /// async move { ... Ok(()) })`.
    pub fn register_kind<F, Fut>(&mut self, kind: &'static str, f: F) -> &mut Self
    where
        F: Fn(JobContext, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        self.map.insert(kind, Arc::new(move |ctx, payload| Box::pin(f(ctx, payload))));
        self
    }

    /// Add every handler of `other` (its own win on a clash).
    pub fn merge(&mut self, other: Handlers) -> &mut Self {
        self.map.extend(other.map);
        self
    }

    pub fn get(&self, kind: &str) -> Option<Handler> {
        self.map.get(kind).cloned()
    }

    /// The registered kinds, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k: Vec<_> = self.map.keys().copied().collect();
        k.sort_unstable();
        k
    }
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers").field("kinds", &self.kinds()).finish()
    }
}

/// The lease a claim or a renewal gives (`CONSOLE_JOB_LEASE_MS` overrides it).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How a worker runs. The defaults are production's; tests shorten the times.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Jobs run at once by this worker.
    pub concurrency: usize,
    /// How long a claim or a renewal keeps a job this worker's. The worker renews the lease of
    /// every job it runs every `lease / 3`, so a job may run far longer than its lease, and one
    /// missed renewal (a passing database error) still leaves a third of it. A job whose worker
    /// died is claimed again once the lease runs out: within `lease + poll_interval`.
    pub lease: Duration,
    /// The longest wait between looks for due jobs when no NOTIFY comes (retries and jobs due
    /// later are found this way).
    pub poll_interval: Duration,
    /// On shutdown, how long to wait for jobs in flight before stopping them and giving them back.
    pub shutdown_grace: Duration,
    pub backoff: Backoff,
    /// Whether this worker fires due schedules (every worker may; each slot fires once).
    pub fire_schedules: bool,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 4,
            lease: DEFAULT_LEASE,
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            backoff: Backoff::default(),
            fire_schedules: true,
        }
    }
}

/// A job worker. Any number may run, in one process or many, against the same database.
pub struct Worker {
    db: Db,
    handlers: Handlers,
    options: WorkerOptions,
    id: Arc<str>,
}

/// A job in flight, keyed by its task's id.
struct Running {
    job: ClaimedJob,
    span: tracing::Span,
    started: Instant,
}

/// How a job's task ended.
enum Ended {
    /// The handler returned.
    Returned(Result<(), JobError>),
    /// The lease was lost and the handler stopped, so it never runs beside another attempt.
    LeaseLost(LeaseLost),
}

/// Why a running job's lease is no longer this worker's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseLost {
    /// A renewal found the job held by another worker or a later attempt (or no longer running).
    Taken,
    /// No renewal succeeded before the lease last confirmed ran out: another worker may claim
    /// the job at any moment.
    RanOut,
}

impl Worker {
    /// A worker running up to `concurrency` jobs at once, the other options at their defaults.
    pub fn new(db: Db, handlers: Handlers, concurrency: usize) -> Self {
        let options = WorkerOptions { concurrency, ..WorkerOptions::default() };
        Worker { db, handlers, options, id: new_worker_id().into() }
    }

    /// Replace every option, `concurrency` included.
    pub fn with_options(mut self, options: WorkerOptions) -> Self {
        self.options = options;
        self
    }

    /// This worker's id, as the jobs' `locked_by` shows it: hostname-pid-random.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Run until `shutdown` turns true (or its sender is dropped). Then claim nothing more, wait
    /// up to the grace period for the jobs in flight (renewing their leases meanwhile), stop any
    /// still running and give each back (pending, due now, its attempt not spent), and return.
    /// Database errors are logged and retried on the next tick, never returned: a worker
    /// outlives a database restart.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let span = tracing::info_span!("Job worker", worker_id = %self.id);
        self.run_loop(shutdown).instrument(span).await
    }

    async fn run_loop(self, mut shutdown: watch::Receiver<bool>) {
        let opts = self.options.clone();
        let concurrency = opts.concurrency.max(1);
        let wake = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(self.db.clone(), wake.clone(), opts.poll_interval).in_current_span());
        let mut tasks: JoinSet<Ended> = JoinSet::new();
        let mut in_flight: HashMap<Id, Running> = HashMap::new();
        let mut next_fire = Instant::now();
        tracing::info!(concurrency, kinds = ?self.handlers.kinds(), "worker started");
        // It claims only what it can run: a job of another kind waits for a worker that can.
        let kinds: Vec<String> = self.handlers.kinds().iter().map(|k| k.to_string()).collect();

        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            // Schedules at most once a tick, not after every finished job.
            if opts.fire_schedules && Instant::now() >= next_fire {
                next_fire = Instant::now() + opts.poll_interval;
                if let Err(e) = schedule::fire_due_schedules(&self.db).await {
                    tracing::warn!(error = %e, "firing schedules failed; trying again next tick");
                }
            }
            let free = concurrency.saturating_sub(tasks.len());
            if free > 0 {
                // The lease runs from no earlier than this: the database starts it later.
                let claimed_at = Instant::now();
                match queue::claim_kinds(&self.db, &self.id, &kinds, free, opts.lease).await {
                    Ok(jobs) => {
                        for job in jobs {
                            self.start(&mut tasks, &mut in_flight, job, claimed_at);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "claiming jobs failed; trying again next tick"),
                }
            }
            tokio::select! {
                changed = shutdown.changed() => {
                    // A dropped sender can never say "go on": stop as if told to.
                    if changed.is_err() {
                        break;
                    }
                }
                Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    self.finish(joined, &mut in_flight).await;
                }
                _ = wake.notified() => {}
                _ = tokio::time::sleep(opts.poll_interval) => {}
            }
            // Record every other job that has finished, so their slots are free for the claim.
            while let Some(joined) = tasks.try_join_next_with_id() {
                self.finish(joined, &mut in_flight).await;
            }
        }

        if !tasks.is_empty() {
            tracing::info!(
                in_flight = tasks.len(),
                grace_ms = opts.shutdown_grace.as_millis() as u64,
                "stopping: waiting for the jobs in flight"
            );
            let deadline = Instant::now() + opts.shutdown_grace;
            loop {
                match tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await {
                    Ok(Some(joined)) => self.finish(joined, &mut in_flight).await,
                    Ok(None) => break,
                    Err(_) => {
                        let ids: Vec<JobId> = in_flight.values().map(|r| r.job.job_id).collect();
                        tracing::warn!(job_ids = ?ids, "grace period over: stopping these jobs and giving them back");
                        self.stop_and_give_back(&mut tasks, &mut in_flight).await;
                        break;
                    }
                }
            }
        }
        listener.abort();
        tracing::info!("worker stopped");
    }

    /// Stop every job still running, then give back each one that was stopped unfinished: its
    /// attempt is not spent and another worker may claim it at once. A job whose handler
    /// returned before it could be stopped is recorded as usual instead. Only once its task has
    /// ended is a job given back, so it never runs here and elsewhere at once.
    async fn stop_and_give_back(&self, tasks: &mut JoinSet<Ended>, in_flight: &mut HashMap<Id, Running>) {
        tasks.abort_all();
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Err(e) if e.is_cancelled() => {
                    let Some(Running { job, span, started }) = in_flight.remove(&e.id()) else { continue };
                    let elapsed_ms = started.elapsed().as_millis() as u64;
                    async {
                        match queue::give_back(&self.db, job.job_id, &self.id, job.attempts).await {
                            Ok(true) => tracing::info!(
                                elapsed_ms,
                                "job stopped unfinished and given back; its attempt is not spent"
                            ),
                            Ok(false) => tracing::warn!(
                                elapsed_ms,
                                "job stopped unfinished; its lease had already passed to another attempt"
                            ),
                            // The lease runs out and the job is claimed again, this attempt counted.
                            Err(e) => tracing::error!(error = %e, "could not give back the stopped job"),
                        }
                    }
                    .instrument(span)
                    .await
                }
                other => self.finish(other, in_flight).await,
            }
        }
    }

    /// Run `job` on a task of its own, in a span with its kind and id, renewing its lease until
    /// the handler returns; a lost lease stops the handler.
    fn start(
        &self,
        tasks: &mut JoinSet<Ended>,
        in_flight: &mut HashMap<Id, Running>,
        job: ClaimedJob,
        claimed_at: Instant,
    ) {
        let span = tracing::info_span!(
            "Run a job",
            kind = %job.kind,
            job_id = job.job_id.0,
            attempt = job.attempts,
            request_id = tracing::field::Empty
        );
        if let Some(id) = &job.request_id {
            span.record("request_id", id.as_str());
        }
        // Its calls out carry the id of the request that enqueued it (`trace_context`).
        let request_id = job.request_id.clone();
        let ctx = JobContext {
            db: self.db.clone(),
            job_id: job.job_id,
            kind: job.kind.clone(),
            attempt: job.attempts,
            max_attempts: job.max_attempts,
            worker_id: self.id.clone(),
            lease: self.options.lease,
        };
        let handler = self.handlers.get(&job.kind);
        let payload = job.payload.clone();
        let unknown = format!(
            "no handler for job kind '{}' on worker {} (it runs: {})",
            job.kind,
            self.id,
            self.handlers.kinds().join(", ")
        );
        let lease = Lease {
            db: self.db.clone(),
            job_id: job.job_id,
            worker: self.id.clone(),
            attempt: job.attempts,
            length: self.options.lease,
        };
        // The handler is called inside the task, so even a panic while building its future is
        // the task's panic, caught as its JoinError.
        let fut = async move {
            let kind = ctx.kind.clone();
            let run = async move {
                match handler {
                    Some(h) => {
                        let handled = crate::trace_context::maybe_scope(request_id, h(ctx, payload));
                        let (r, lock_refused) = crate::metrics::watching_lock_waits(handled).await;
                        if lock_refused && r.is_err() {
                            crate::metrics::global().lock_refusal(&format!("job {kind}"));
                        }
                        r
                    }
                    None => Err(JobError::Retry(unknown)),
                }
            };
            tokio::select! {
                r = run => Ended::Returned(r),
                // Dropping the handler's future stops it, and with it the tasks it owns in a
                // JoinSet (the drains' move tasks): nothing of this attempt runs on beside the
                // attempt that took the job over.
                lost = lease.keep(claimed_at) => {
                    match lost {
                        LeaseLost::Taken => tracing::warn!(
                            "the job's lease passed to another worker or attempt: stopping it here so it does not run twice"
                        ),
                        LeaseLost::RanOut => tracing::warn!(
                            "the job's lease ran out before a renewal succeeded: stopping it here so it does not run twice"
                        ),
                    }
                    Ended::LeaseLost(lost)
                }
            }
        };
        let handle = tasks.spawn(fut.instrument(span.clone()));
        span.in_scope(|| tracing::debug!("job started"));
        in_flight.insert(handle.id(), Running { job, span, started: Instant::now() });
    }

    /// Record how a task ended: done, failed (with backoff), or panicked (a failure too); a job
    /// stopped for a lost lease is not ours to record.
    async fn finish(&self, joined: Result<(Id, Ended), JoinError>, in_flight: &mut HashMap<Id, Running>) {
        let (id, outcome) = match joined {
            Ok((id, r)) => (id, Ok(r)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(Running { job, span, started }) = in_flight.remove(&id) else {
            return;
        };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        async {
            match outcome {
                // The task said why when it stopped the handler; the outcome is another attempt's.
                Ok(Ended::LeaseLost(lost)) => {
                    tracing::debug!(elapsed_ms, ?lost, "job stopped after losing its lease; not recorded")
                }
                Ok(Ended::Returned(Ok(()))) => {
                    match queue::complete(&self.db, job.job_id, &self.id, job.attempts).await {
                        Ok(true) => tracing::info!(elapsed_ms, "job done"),
                        Ok(false) => tracing::warn!(
                            elapsed_ms,
                            "job finished after its lease passed to another attempt; not recorded"
                        ),
                        // The lease runs out and the job runs again: at least once, never lost.
                        Err(e) => tracing::error!(error = %e, "could not record the job as done"),
                    }
                }
                Ok(Ended::Returned(Err(e))) => {
                    let permanent = matches!(e, JobError::Permanent(_));
                    self.record_failure(&job, &e.describe(), permanent, elapsed_ms).await
                }
                Err(e) if e.is_panic() => {
                    let msg = format!("the handler panicked: {}", panic_message(e));
                    self.record_failure(&job, &msg, false, elapsed_ms).await
                }
                Err(e) => self.record_failure(&job, &format!("the handler's task ended: {e}"), false, elapsed_ms).await,
            }
        }
        .instrument(span)
        .await
    }

    async fn record_failure(&self, job: &ClaimedJob, error: &str, permanent: bool, elapsed_ms: u64) {
        let retry_in = (!permanent).then(|| self.options.backoff.delay(job.attempts));
        match queue::fail(&self.db, job.job_id, &self.id, job.attempts, error, retry_in).await {
            Ok(FailOutcome::WillRetry) => tracing::warn!(
                error,
                elapsed_ms,
                retry_in_ms = retry_in.unwrap_or_default().as_millis() as u64,
                "job failed; it will be retried"
            ),
            Ok(FailOutcome::Failed) => {
                tracing::error!(error, elapsed_ms, attempts = job.attempts, "job failed for good")
            }
            Ok(FailOutcome::LeaseLost) => {
                tracing::warn!(error, "job failed after its lease passed to another attempt; not recorded")
            }
            Err(e) => tracing::error!(error = %e, job_error = error, "could not record the job's failure"),
        }
    }
}

/// What a running job's task needs to keep its lease.
struct Lease {
    db: Db,
    job_id: JobId,
    worker: Arc<str>,
    attempt: i32,
    length: Duration,
}

impl Lease {
    /// How often a lease is renewed: a third of it, so one missed renewal still leaves a third.
    fn renew_every(&self) -> Duration {
        (self.length / 3).max(Duration::from_millis(10))
    }

    /// Renew the lease every `renew_every` from `confirmed` (when the claim was sent) until it is
    /// lost, and say how. A renewal that fails (a passing database error) is tried again at the
    /// next tick. The lease is counted from when each successful renewal was sent, which is no
    /// later than the database's own start of it; once that count runs out with no renewal
    /// through, the job is treated as lost, since another worker may claim it at any moment.
    async fn keep(self, mut confirmed: Instant) -> LeaseLost {
        let every = self.renew_every();
        let mut next = confirmed + every;
        loop {
            let runs_out = confirmed + self.length;
            tokio::time::sleep_until(next.min(runs_out)).await;
            let sent = Instant::now();
            if sent >= runs_out {
                return LeaseLost::RanOut;
            }
            let renewal = queue::renew(&self.db, self.job_id, &self.worker, self.attempt, self.length);
            match tokio::time::timeout_at(runs_out, renewal).await {
                Ok(Ok(true)) => {
                    confirmed = sent;
                    tracing::debug!(lease_ms = self.length.as_millis() as u64, "lease renewed");
                }
                Ok(Ok(false)) => return LeaseLost::Taken,
                Ok(Err(e)) => tracing::warn!(
                    error = %e,
                    left_ms = runs_out.saturating_duration_since(Instant::now()).as_millis() as u64,
                    "renewing the job's lease failed; trying again at the next tick"
                ),
                Err(_) => return LeaseLost::RanOut,
            }
            next = sent + every;
        }
    }
}

/// Wake the worker on every NOTIFY of the enqueue trigger. Runs on a connection of its own
/// (not the pool the handlers use), for the worker's life; on a lost connection it reconnects,
/// and the poll tick covers whatever was missed meanwhile.
async fn listen(db: Db, wake: Arc<Notify>, retry: Duration) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with((*db.pool.connect_options()).clone());
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "could not connect to listen for new jobs; polling meanwhile");
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
            tracing::warn!(error = %e, "could not LISTEN for new jobs; polling meanwhile");
            tokio::time::sleep(retry).await;
            continue;
        }
        loop {
            match listener.recv().await {
                Ok(_) => wake.notify_one(),
                Err(e) => {
                    tracing::warn!(error = %e, "listening for new jobs failed; reconnecting");
                    break;
                }
            }
        }
        tokio::time::sleep(retry).await;
    }
}

fn panic_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".into()),
        Err(e) => e.to_string(),
    }
}

/// hostname-pid-random: unique across processes and restarts, and says where a job ran (and
/// which server a sample of requests came from).
pub fn new_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}-{}-{}", std::process::id(), crate::config::random_hex(3))
}
