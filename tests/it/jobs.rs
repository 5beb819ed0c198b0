//! The job queue, the worker and the schedules, against a real PostgreSQL.
use crate::common;

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use common::{TestDb, worker::WorkerProcess};
use member_console::{
    db::{Db, TxKind, begin},
    ids::{JobId, OrgTypeId},
    jobs::{
        self, Backoff, FailOutcome, Handlers, JobError, NewJob, Worker, WorkerOptions, enqueue, ensure_schedule,
        fire_due_schedules, queue,
    },
};
use serde_json::json;
use sqlx::{PgPool, postgres::PgListener};
use tokio::{sync::watch, task::JoinHandle};

/// Production's behaviour with test-sized times.
fn fast() -> WorkerOptions {
    WorkerOptions {
        concurrency: 4,
        lease: Duration::from_secs(60),
        poll_interval: Duration::from_millis(50),
        shutdown_grace: Duration::from_secs(30),
        backoff: Backoff { base: Duration::from_millis(20), cap: Duration::from_millis(200) },
        fire_schedules: false,
    }
}

struct Running {
    id: String,
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

fn spawn(worker: Worker) -> Running {
    let id = worker.id().to_string();
    let (stop, rx) = watch::channel(false);
    let handle = tokio::spawn(worker.run(rx));
    Running { id, stop, handle }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .expect("the worker stops")
            .expect("the worker's task did not panic");
    }
}

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[derive(Debug, sqlx::FromRow)]
struct JobRow {
    kind: String,
    payload: serde_json::Value,
    state: String,
    attempts: i32,
    max_attempts: i32,
    last_error: Option<String>,
    locked_by: Option<String>,
    locked_until: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    dedupe_key: Option<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_job_gets_its_payload_back_and_a_payload_that_is_not_one_fails_once_naming_it() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Echo {
        n: i64,
    }
    impl member_console::jobs::Job for Echo {
        const KIND: &'static str = "test_echo";
        type Context = ();

        async fn run(&self, _: &(), ctx: &member_console::jobs::JobContext) -> Result<(), JobError> {
            // The payload's number, recorded where the job's id would be.
            sqlx::query("INSERT INTO public.job_effects (job_id, worker) VALUES ($1, $2)")
                .bind(self.n)
                .bind(&*ctx.worker_id)
                .execute(&ctx.db.pool)
                .await?;
            Ok(())
        }
    }
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let mut h = Handlers::new();
    h.register::<Echo>(());
    let w = spawn(Worker::new(t.db.clone(), h, 1).with_options(WorkerOptions { concurrency: 1, ..fast() }));
    let good = enqueue_committed(&t.db, NewJob::of(&Echo { n: 42 })).await;
    let bad =
        enqueue_committed(&t.db, NewJob { max_attempts: Some(5), ..NewJob::new("test_echo", json!({ "m": "x" })) })
            .await;
    wait_until("both are final", Duration::from_secs(20), || async {
        state_of(&t.admin, good).await == "done" && state_of(&t.admin, bad).await == "failed"
    })
    .await;
    w.stop().await;
    let seen: Vec<i64> = t.all(sqlx::query_scalar("SELECT job_id FROM public.job_effects")).await;
    assert_eq!(seen, vec![42]);
    let b = job(&t.admin, bad).await.unwrap();
    assert_eq!(b.attempts, 1, "a payload that is not one is not retried");
    let err = b.last_error.unwrap_or_default();
    assert!(err.contains("the payload of a test_echo job is not one") && err.contains("\"m\""), "{err}");
}

async fn job(admin: &PgPool, id: JobId) -> Option<JobRow> {
    sqlx::query_as(
        "SELECT kind, payload, state, attempts, max_attempts, last_error, locked_by, locked_until, finished_at,
                dedupe_key
         FROM integration.jobs WHERE job_id = $1",
    )
    .bind(id)
    .fetch_optional(admin)
    .await
    .unwrap()
}

async fn state_of(admin: &PgPool, id: JobId) -> String {
    job(admin, id).await.expect("the job exists").state
}

async fn count(admin: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(admin).await.unwrap()
}

/// Enqueue and commit, as a service would.
async fn enqueue_committed(db: &Db, job: NewJob<'_>) -> JobId {
    let mut tx = begin(db, TxKind::Plain).await.unwrap();
    let id = enqueue(tx.conn(), job).await.unwrap().expect("a new job");
    tx.commit().await.unwrap();
    id
}

/// `public.job_effects`: what handlers did, with the worker that did it and when.
async fn create_effects_table(t: &TestDb) {
    sqlx::raw_sql(
        "CREATE TABLE public.job_effects (
             job_id bigint NOT NULL, worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
         GRANT INSERT, SELECT ON public.job_effects TO console_runtime;",
    )
    .execute(&t.admin)
    .await
    .unwrap();
}

/// A handler that records its job in `job_effects`, after sleeping `payload.sleep_ms`.
fn effect_handlers(kind: &'static str) -> Handlers {
    let mut h = Handlers::new();
    h.register_kind(kind, |ctx, payload| async move {
        let ms = payload.get("sleep_ms").and_then(|v| v.as_u64()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        sqlx::query("INSERT INTO public.job_effects (job_id, worker) VALUES ($1, $2)")
            .bind(ctx.job_id)
            .bind(&*ctx.worker_id)
            .execute(&ctx.db.pool)
            .await?;
        Ok(())
    });
    h
}

/// A worker of the recording handler (`effect_handlers`) with these options.
fn effect_worker(t: &TestDb, options: WorkerOptions) -> Running {
    spawn(Worker::new(t.db.clone(), effect_handlers("test_effect"), options.concurrency).with_options(options))
}

/// A recorded job that sleeps `sleep_ms`, committed; returns once a worker is running it.
async fn slow_job_running(t: &TestDb, sleep_ms: u64) -> JobId {
    let slow = enqueue_committed(&t.db, NewJob::new("test_effect", json!({ "sleep_ms": sleep_ms }))).await;
    wait_until("the slow job is running", Duration::from_secs(10), || async {
        state_of(&t.admin, slow).await == "running"
    })
    .await;
    slow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_belongs_to_the_callers_transaction() {
    let t = TestDb::new().await;
    let mut listener = PgListener::connect_with(&t.db.pool).await.unwrap();
    listener.listen(queue::NOTIFY_CHANNEL).await.unwrap();

    // Rolled back: no job, and no worker woken.
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let gone = enqueue(tx.conn(), NewJob::new("test_kind", json!({ "n": 1 }))).await.unwrap().expect("inserted");
    tx.rollback().await.unwrap();
    assert!(job(&t.admin, gone).await.is_none(), "a rolled-back enqueue left a job");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.recv()).await.is_err(),
        "a rolled-back enqueue woke the workers"
    );

    // Committed: visible, pending, with the defaults, and the workers are woken.
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let job_in = NewJob { dedupe_key: Some("test:one".into()), ..NewJob::new("test_kind", json!({ "n": 2 })) };
    let id = enqueue(tx.conn(), job_in).await.unwrap().expect("inserted");
    // Invisible to others until commit.
    assert!(job(&t.admin, id).await.is_none());
    tx.commit().await.unwrap();
    let row = job(&t.admin, id).await.expect("a committed enqueue is visible");
    assert_eq!((row.kind.as_str(), row.state.as_str(), row.attempts), ("test_kind", "pending", 0));
    assert_eq!(row.payload, json!({ "n": 2 }));
    assert_eq!(row.max_attempts, queue::DEFAULT_MAX_ATTEMPTS);
    assert_eq!(row.max_attempts, 10, "the column default and the Rust default agree");
    assert_eq!(row.dedupe_key.as_deref(), Some("test:one"));
    let n = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a committed enqueue notifies")
        .unwrap();
    assert_eq!(n.channel(), queue::NOTIFY_CHANNEL);

    // The same key while that job is open: nothing enqueued.
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let again = NewJob { dedupe_key: Some("test:one".into()), ..NewJob::new("test_kind", json!({})) };
    assert_eq!(enqueue(tx.conn(), again).await.unwrap(), None);
    let other = NewJob { dedupe_key: Some("test:two".into()), ..NewJob::new("test_kind", json!({})) };
    assert!(enqueue(tx.conn(), other).await.unwrap().is_some());
    tx.commit().await.unwrap();
    assert_eq!(count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE dedupe_key = 'test:one'").await, 1);

    // Once the job is done, its key is free again.
    t.run(sqlx::query("UPDATE integration.jobs SET state = 'done', finished_at = now() WHERE job_id = $1").bind(id))
        .await;
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let third = NewJob { dedupe_key: Some("test:one".into()), ..NewJob::new("test_kind", json!({})) };
    assert!(enqueue(tx.conn(), third).await.unwrap().is_some());
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_runs_exactly_once_across_two_workers() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let a = effect_worker(&t, fast());
    let b = effect_worker(&t, fast());
    // Let both reach their first wait, so the NOTIFY wakes both.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..40 {
        let id =
            enqueue(tx.conn(), NewJob::new("test_effect", json!({ "i": i, "sleep_ms": 30 }))).await.unwrap().unwrap();
        ids.push(id);
    }
    tx.commit().await.unwrap();

    wait_until("all 40 jobs are done", Duration::from_secs(60), || async {
        count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE state = 'done'").await == 40
    })
    .await;
    let (a_id, b_id) = (a.id.clone(), b.id.clone());
    a.stop().await;
    b.stop().await;

    let per_job: Vec<(JobId, i64)> =
        t.all(sqlx::query_as("SELECT job_id, count(*) FROM public.job_effects GROUP BY job_id ORDER BY job_id")).await;
    assert_eq!(per_job.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids, "every job ran");
    assert!(per_job.iter().all(|(_, n)| *n == 1), "a job ran more than once: {per_job:?}");
    let not_once: i64 =
        count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE state <> 'done' OR attempts <> 1").await;
    assert_eq!(not_once, 0, "every job is done on its first attempt");
    // The worker that ran each job is the one that held its lease.
    let mismatched = count(
        &t.admin,
        "SELECT count(*) FROM public.job_effects e JOIN integration.jobs j USING (job_id) WHERE j.locked_by <> e.worker",
    )
    .await;
    assert_eq!(mismatched, 0);
    let workers: Vec<String> =
        t.all(sqlx::query_scalar("SELECT DISTINCT worker FROM public.job_effects ORDER BY 1")).await;
    let mut expected = vec![a_id, b_id];
    expected.sort();
    assert_eq!(workers, expected, "both workers took part");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_is_retried_with_backoff_then_fails() {
    let t = TestDb::new().await;
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut h = Handlers::new();
    let seen = calls.clone();
    h.register_kind("test_fail", move |ctx, _payload| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(Instant::now());
            Err(JobError::retry(format!("boom on attempt {}", ctx.attempt)))
        }
    });
    let base = Duration::from_millis(200);
    let opts = WorkerOptions { backoff: Backoff { base, cap: Duration::from_secs(10) }, ..fast() };
    let w = spawn(Worker::new(t.db.clone(), h, 2).with_options(opts));
    let id = enqueue_committed(&t.db, NewJob { max_attempts: Some(3), ..NewJob::new("test_fail", json!({})) }).await;

    wait_until("the job has failed", Duration::from_secs(20), || async { state_of(&t.admin, id).await == "failed" })
        .await;
    w.stop().await;

    let row = job(&t.admin, id).await.unwrap();
    assert_eq!(row.attempts, 3);
    assert_eq!(row.last_error.as_deref(), Some("boom on attempt 3"), "the last error is kept");
    assert!(row.finished_at.is_some() && row.locked_until.is_none());
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "ran once per attempt, no more");
    // Equal jitter: each wait is at least half of base * 2^(attempt - 1).
    assert!(calls[1] - calls[0] >= base / 2, "first retry came after {:?}", calls[1] - calls[0]);
    assert!(calls[2] - calls[1] >= base, "second retry came after {:?}", calls[2] - calls[1]);

    // With the production backoff, a first failure is due again 1-2 s later.
    let id = enqueue_committed(&t.db, NewJob::new("test_direct", json!({}))).await;
    let claimed = queue::claim(&t.db, "test-worker", 10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(claimed.iter().map(|j| j.job_id).collect::<Vec<_>>(), vec![id]);
    let delay = Backoff::default().delay(claimed[0].attempts);
    let outcome = queue::fail(&t.db, id, "test-worker", 1, "first failure", Some(delay)).await.unwrap();
    assert_eq!(outcome, FailOutcome::WillRetry);
    let (state, wait): (String, f64) = t
        .one(
            sqlx::query_as(
                "SELECT state, extract(epoch FROM run_at - now())::float8 FROM integration.jobs WHERE job_id = $1",
            )
            .bind(id),
        )
        .await;
    assert_eq!(state, "pending");
    assert!((0.8..=2.0).contains(&wait), "due again in {wait} s");
    assert!(queue::claim(&t.db, "test-worker", 10, Duration::from_secs(60)).await.unwrap().is_empty(), "not due yet");
}

#[test]
fn backoff_doubles_from_two_seconds_and_caps_at_ten_minutes() {
    let b = Backoff::default();
    let s = Duration::from_secs;
    assert_eq!(b.delay_with_jitter(1, 1.0), s(2));
    assert_eq!(b.delay_with_jitter(1, 0.0), s(1));
    assert_eq!(b.delay_with_jitter(2, 1.0), s(4));
    assert_eq!(b.delay_with_jitter(5, 1.0), s(32));
    assert_eq!(b.delay_with_jitter(9, 1.0), s(512));
    assert_eq!(b.delay_with_jitter(10, 1.0), s(600));
    assert_eq!(b.delay_with_jitter(10_000, 1.0), s(600));
    assert_eq!(b.delay_with_jitter(10_000, 0.0), s(300));
    for attempt in 1..12 {
        let d = b.delay(attempt);
        assert!(d >= b.delay_with_jitter(attempt, 0.0) && d <= b.delay_with_jitter(attempt, 1.0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_permanent_errors_fail_without_stopping_the_worker_and_an_unknown_kind_waits_for_its_own() {
    let t = TestDb::new().await;
    let mut h = Handlers::new();
    h.register_kind("test_panic", |_ctx, _payload| async move {
        if true {
            panic!("handler exploded");
        }
        Ok(())
    });
    h.register_kind(
        "test_permanent",
        |_ctx, _payload| async move { Err(JobError::permanent("the payload is unusable")) },
    );
    h.register_kind("test_ok", |_ctx, _payload| async move { Ok(()) });
    let w = spawn(Worker::new(t.db.clone(), h, 1).with_options(WorkerOptions { concurrency: 1, ..fast() }));

    let once = |kind| NewJob { max_attempts: Some(1), ..NewJob::new(kind, json!({})) };
    let panics = enqueue_committed(&t.db, once("test_panic")).await;
    let unknown = enqueue_committed(&t.db, once("test_nobody")).await;
    let permanent =
        enqueue_committed(&t.db, NewJob { max_attempts: Some(5), ..NewJob::new("test_permanent", json!({})) }).await;
    let ok = enqueue_committed(&t.db, NewJob::new("test_ok", json!({}))).await;

    wait_until("the job after them is done", Duration::from_secs(20), || async {
        state_of(&t.admin, ok).await == "done"
    })
    .await;
    wait_until("the others are final", Duration::from_secs(20), || async {
        count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE state = 'failed'").await == 2
    })
    .await;
    w.stop().await;

    let p = job(&t.admin, panics).await.unwrap();
    let err = p.last_error.unwrap_or_default();
    assert!(err.contains("panicked") && err.contains("handler exploded"), "{err}");
    // A kind this worker has no handler for is never claimed by it: it waits, its attempts
    // unspent, for a worker that can run it.
    let u = job(&t.admin, unknown).await.unwrap();
    assert_eq!((u.state.as_str(), u.attempts, u.locked_by.as_deref()), ("pending", 0, None));
    let w = spawn(
        Worker::new(
            t.db.clone(),
            {
                let mut h = Handlers::new();
                h.register_kind("test_nobody", |_ctx, _payload| async move { Ok(()) });
                h
            },
            1,
        )
        .with_options(WorkerOptions { concurrency: 1, ..fast() }),
    );
    wait_until("a worker that runs it does", Duration::from_secs(20), || async {
        state_of(&t.admin, unknown).await == "done"
    })
    .await;
    w.stop().await;
    let perm = job(&t.admin, permanent).await.unwrap();
    assert_eq!((perm.state.as_str(), perm.attempts), ("failed", 1), "a permanent error is not retried");
    assert_eq!(perm.last_error.as_deref(), Some("the payload is unusable"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_workers_expired_lease_is_claimed_again() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let job_a = enqueue_committed(&t.db, NewJob::new("test_effect", json!({}))).await;
    let job_b =
        enqueue_committed(&t.db, NewJob { max_attempts: Some(1), ..NewJob::new("test_effect", json!({})) }).await;

    // A worker claims both and dies without a word.
    let lease = Duration::from_millis(1500);
    let claimed = queue::claim(&t.db, "crashed-worker", 10, lease).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let lease_end = job(&t.admin, job_a).await.unwrap().locked_until.expect("a lease");
    // While the lease holds, nobody else gets them.
    assert!(queue::claim(&t.db, "someone-else", 10, lease).await.unwrap().is_empty());

    let w = effect_worker(&t, fast());
    wait_until("the job is done by the new worker", Duration::from_secs(15), || async {
        state_of(&t.admin, job_a).await == "done"
    })
    .await;
    wait_until("the exhausted job is failed", Duration::from_secs(15), || async {
        state_of(&t.admin, job_b).await == "failed"
    })
    .await;
    let w_id = w.id.clone();
    w.stop().await;

    let a = job(&t.admin, job_a).await.unwrap();
    assert_eq!(a.attempts, 2, "the crashed attempt counts");
    assert_eq!(a.locked_by.as_deref(), Some(w_id.as_str()));
    let effects: Vec<(JobId, String, DateTime<Utc>)> =
        t.all(sqlx::query_as("SELECT job_id, worker, at FROM public.job_effects")).await;
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!((effects[0].0, effects[0].1.as_str()), (job_a, w_id.as_str()));
    assert!(effects[0].2 >= lease_end, "re-run at {} before the lease ended at {lease_end}", effects[0].2);

    // On its last attempt an expired lease ends the job instead of running it again.
    let b = job(&t.admin, job_b).await.unwrap();
    assert_eq!(b.attempts, 1);
    let err = b.last_error.unwrap_or_default();
    assert!(err.contains("crashed-worker") && err.contains("expired on the last attempt"), "{err}");

    // The crashed worker, come back, cannot record an outcome it no longer owns.
    assert!(!queue::complete(&t.db, job_a, "crashed-worker", 1).await.unwrap());
    let outcome = queue::fail(&t.db, job_a, "crashed-worker", 1, "late", None).await.unwrap();
    assert_eq!(outcome, FailOutcome::LeaseLost);
    assert_eq!(state_of(&t.admin, job_a).await, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_once_per_slot_and_never_overlaps() {
    let t = TestDb::new().await;
    let hour = Duration::from_secs(3600);
    ensure_schedule(&t.db, "test_tick", hour).await.unwrap();
    let first: DateTime<Utc> =
        t.one(sqlx::query_scalar("SELECT next_run_at FROM integration.job_schedules WHERE name = 'test_tick'")).await;
    ensure_schedule(&t.db, "test_tick", hour).await.unwrap();
    let again: DateTime<Utc> =
        t.one(sqlx::query_scalar("SELECT next_run_at FROM integration.job_schedules WHERE name = 'test_tick'")).await;
    assert_eq!(first, again, "ensure_schedule is idempotent");

    // A worker in the middle of firing holds the row: another skips it instead of waiting.
    let mut a = t.runtime_conn().await;
    sqlx::query("BEGIN").execute(&mut a).await.unwrap();
    sqlx::query("SELECT 1 FROM integration.job_schedules WHERE name = 'test_tick' FOR UPDATE")
        .execute(&mut a)
        .await
        .unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(3), fire_due_schedules(&t.db))
        .await
        .expect("firing does not wait on a locked schedule")
        .unwrap();
    assert_eq!(fired, 0);
    sqlx::query("ROLLBACK").execute(&mut a).await.unwrap();

    // Eight workers fire at the same moment: one run.
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let db = t.db.clone();
        set.spawn(async move { fire_due_schedules(&db).await.unwrap() });
    }
    let total: usize = set.join_all().await.into_iter().sum();
    assert_eq!(total, 1);
    let runs = || count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE kind = 'test_tick'");
    assert_eq!(runs().await, 1);
    let (dedupe, payload): (Option<String>, serde_json::Value) =
        t.one(sqlx::query_as("SELECT dedupe_key, payload FROM integration.jobs WHERE kind = 'test_tick'")).await;
    assert_eq!(dedupe.as_deref(), Some("schedule:test_tick"));
    assert_eq!(payload["schedule"], "test_tick");
    let advanced: bool = t
        .one(sqlx::query_scalar(
            "SELECT next_run_at > now() AND next_run_at <= now() + interval '1 hour' AND last_enqueued_at IS NOT NULL
         FROM integration.job_schedules WHERE name = 'test_tick'",
        ))
        .await;
    assert!(advanced);

    // Due again while the first run is still pending: no second run, and the slot passes.
    t.run(sqlx::query("UPDATE integration.job_schedules SET next_run_at = now() - interval '1 second'")).await;
    assert_eq!(fire_due_schedules(&t.db).await.unwrap(), 0);
    assert_eq!(runs().await, 1);
    let passed: bool = t.one(sqlx::query_scalar("SELECT next_run_at > now() FROM integration.job_schedules")).await;
    assert!(passed);

    // After ten and a half hours down, with the run done: one run, not ten, and the next slot
    // stays on the schedule's grid.
    t.run(sqlx::query("UPDATE integration.jobs SET state = 'done', finished_at = now() WHERE kind = 'test_tick'"))
        .await;
    let anchor: DateTime<Utc> = t.one(sqlx::query_scalar(
        "UPDATE integration.job_schedules SET next_run_at = now() - interval '10 hours 30 minutes' RETURNING next_run_at",
    )).await;
    assert_eq!(fire_due_schedules(&t.db).await.unwrap(), 1);
    assert_eq!(runs().await, 2);
    let next: DateTime<Utc> = t.one(sqlx::query_scalar("SELECT next_run_at FROM integration.job_schedules")).await;
    assert_eq!(next - anchor, chrono::Duration::hours(11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_job_in_flight() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let w = effect_worker(&t, fast());
    let slow = slow_job_running(&t, 1500).await;

    let asked = Instant::now();
    let _ = w.stop.send(true);
    // Enqueued after the signal: the stopping worker must not take it.
    let late = enqueue_committed(&t.db, NewJob::new("test_effect", json!({}))).await;
    tokio::time::timeout(Duration::from_secs(20), w.handle).await.expect("the worker stops").unwrap();
    let waited = asked.elapsed();

    assert!(waited >= Duration::from_millis(500), "returned after {waited:?}, before the job could finish");
    assert_eq!(state_of(&t.admin, slow).await, "done", "the job in flight finished and was recorded");
    assert_eq!(count(&t.admin, "SELECT count(*) FROM public.job_effects").await, 1);
    let l = job(&t.admin, late).await.unwrap();
    assert_eq!((l.state.as_str(), l.attempts), ("pending", 0), "nothing is claimed after the signal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_grace_period_a_job_is_given_back_without_spending_an_attempt_and_another_worker_claims_it_at_once() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let opts = WorkerOptions { shutdown_grace: Duration::from_millis(300), ..fast() };
    let a = effect_worker(&t, opts);
    let slow = slow_job_running(&t, 3000).await;
    let mut listener = PgListener::connect_with(&t.db.pool).await.unwrap();
    listener.listen(queue::NOTIFY_CHANNEL).await.unwrap();

    let a_id = a.id.clone();
    let asked = Instant::now();
    a.stop().await;
    let stopped = asked.elapsed();
    assert!(stopped < Duration::from_secs(3), "stopped after {stopped:?}");
    assert!(stopped >= Duration::from_millis(300), "stopped after {stopped:?}, before the grace period was over");

    // Given back as it was before the claim: pending, due now, no lease, the attempt not spent.
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("pending", 0), "given back, its attempt not spent");
    assert!(row.locked_until.is_none() && row.finished_at.is_none());
    assert_eq!(row.locked_by.as_deref(), Some(a_id.as_str()), "the last holder is kept for operators");
    let due: bool =
        t.one(sqlx::query_scalar("SELECT run_at <= now() FROM integration.jobs WHERE job_id = $1").bind(slow)).await;
    assert!(due, "given back due now");
    // The give-back woke the workers, as an enqueue does.
    tokio::time::timeout(Duration::from_secs(1), listener.recv()).await.expect("the give-back notifies").unwrap();

    // Another worker, which otherwise looks for jobs only every 30 s, claims it at once.
    let b_opts = WorkerOptions { poll_interval: Duration::from_secs(30), ..fast() };
    let b = effect_worker(&t, b_opts);
    let b_id = b.id.clone();
    let b_started = Instant::now();
    wait_until("the other worker has claimed the job", Duration::from_secs(2), || async {
        job(&t.admin, slow).await.unwrap().locked_by.as_deref() == Some(b_id.as_str())
    })
    .await;
    println!("the other worker claimed the given-back job {:?} after it started", b_started.elapsed());
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("running", 1), "the other worker's claim is the first attempt");

    wait_until("the job is done", Duration::from_secs(10), || async { state_of(&t.admin, slow).await == "done" }).await;
    b.stop().await;
    let effects: Vec<String> = t.all(sqlx::query_scalar("SELECT worker FROM public.job_effects")).await;
    assert_eq!(effects, vec![b_id], "the stopped handler did nothing; the other worker ran the job once");
    assert_eq!(job(&t.admin, slow).await.unwrap().attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_job_that_runs_longer_than_its_lease_from_being_claimed_by_a_second_worker() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let lease = Duration::from_secs(2);
    // One job at a time each, so the quick job below must go to the second worker.
    let opts = WorkerOptions { concurrency: 1, lease, ..fast() };
    let a = effect_worker(&t, opts.clone());
    let slow = slow_job_running(&t, 6000).await;
    let started = Instant::now();
    let first_lease_end = job(&t.admin, slow).await.unwrap().locked_until.expect("a lease");
    let b = effect_worker(&t, opts);

    // Well past the first lease, the job is still the first worker's, on a renewed lease...
    tokio::time::sleep((lease + lease / 2).saturating_sub(started.elapsed())).await;
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("running", 1));
    assert_eq!(row.locked_by.as_deref(), Some(a.id.as_str()));
    let renewed_until = row.locked_until.expect("a lease");
    assert!(renewed_until > first_lease_end, "the lease was renewed: {renewed_until} after {first_lease_end}");
    let left = renewed_until - Utc::now();
    assert!(left > chrono::Duration::zero() && left <= chrono::Duration::from_std(lease).unwrap(), "{left}");
    // ... while the second worker is claiming: it takes the job it can.
    let quick = enqueue_committed(&t.db, NewJob::new("test_effect", json!({}))).await;
    wait_until("the quick job is done", Duration::from_secs(5), || async { state_of(&t.admin, quick).await == "done" })
        .await;
    assert_eq!(job(&t.admin, quick).await.unwrap().locked_by.as_deref(), Some(b.id.as_str()));

    wait_until("the slow job is done", Duration::from_secs(15), || async { state_of(&t.admin, slow).await == "done" })
        .await;
    let ran_for = started.elapsed();
    let (a_id, b_id) = (a.id.clone(), b.id.clone());
    a.stop().await;
    b.stop().await;
    assert!(ran_for >= lease * 2, "the job ran {ran_for:?}, more than its lease");
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!((row.attempts, row.locked_by.as_deref()), (1, Some(a_id.as_str())), "one attempt, the first worker's");
    let ran: Vec<(JobId, String)> =
        t.all(sqlx::query_as("SELECT job_id, worker FROM public.job_effects ORDER BY job_id")).await;
    assert_eq!(ran, vec![(slow, a_id), (quick, b_id)], "the slow job ran once, on the first worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_fails_is_tried_again_at_the_next_tick_and_the_job_runs_on_once() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    // Renewed every second; the job runs past two leases.
    let lease = Duration::from_secs(3);
    let w = effect_worker(&t, WorkerOptions { lease, ..fast() });
    let slow = slow_job_running(&t, 6500).await;
    let lease_end = || async { job(&t.admin, slow).await.unwrap().locked_until.expect("a lease") };
    let claimed_until = lease_end().await;
    wait_until("the first renewal", Duration::from_secs(3), || async { lease_end().await > claimed_until }).await;
    let renewed_until = lease_end().await;

    // The next renewal fails: the run-time role may not write the lease for a while.
    sqlx::raw_sql("REVOKE UPDATE (locked_until) ON integration.jobs FROM console_runtime")
        .execute(&t.admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(lease_end().await, renewed_until, "no renewal got through meanwhile");
    sqlx::raw_sql("GRANT UPDATE (locked_until) ON integration.jobs TO console_runtime")
        .execute(&t.admin)
        .await
        .unwrap();

    // The one after it does, within the lease, and the job runs on to its end, once.
    wait_until("a renewal after the failed one", Duration::from_millis(1500), || async {
        lease_end().await > renewed_until
    })
    .await;
    wait_until("the job is done", Duration::from_secs(10), || async { state_of(&t.admin, slow).await == "done" }).await;
    let w_id = w.id.clone();
    w.stop().await;
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!((row.attempts, row.locked_by.as_deref()), (1, Some(w_id.as_str())));
    let effects: Vec<String> = t.all(sqlx::query_scalar("SELECT worker FROM public.job_effects")).await;
    assert_eq!(effects, vec![w_id], "the job ran to its end once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_lease_passed_to_another_worker_is_stopped_and_not_recorded() {
    let t = TestDb::new().await;
    create_effects_table(&t).await;
    let lease = Duration::from_millis(1500);
    let w = effect_worker(&t, WorkerOptions { lease, ..fast() });
    let slow = slow_job_running(&t, 3000).await;
    // Another worker takes the job over, as its claim would after a lease ran out.
    t.run(
        sqlx::query(
            "UPDATE integration.jobs SET locked_by = 'other-worker', attempts = attempts + 1,
                locked_until = now() + interval '1 hour'
         WHERE job_id = $1",
        )
        .bind(slow),
    )
    .await;

    // The first worker's next renewal finds the lease gone and stops its handler, which would
    // have recorded its effect at 3 s.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    assert_eq!(count(&t.admin, "SELECT count(*) FROM public.job_effects").await, 0, "the stopped handler ran on");
    let row = job(&t.admin, slow).await.unwrap();
    assert_eq!(
        (row.state.as_str(), row.attempts, row.locked_by.as_deref()),
        ("running", 2, Some("other-worker")),
        "the other worker's attempt is untouched"
    );
    // Its slot is free again: it runs the next job.
    let next = enqueue_committed(&t.db, NewJob::new("test_effect", json!({}))).await;
    wait_until("the next job is done", Duration::from_secs(5), || async { state_of(&t.admin, next).await == "done" })
        .await;
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_expired_deletes_exactly_the_expired_rows() {
    let t = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO core.accounts (email, password_hash) VALUES ('purge@example.org', 'x');
         INSERT INTO core.web_sessions (token_hash, account_id, expires_at, ends_at, address)
         SELECT '\\x01'::bytea, account_id, now() - interval '1 minute', now() + interval '1 day', '127.0.0.1' FROM core.accounts
         UNION ALL
         SELECT '\\x02'::bytea, account_id, now() + interval '1 hour', now() + interval '1 day', '127.0.0.1' FROM core.accounts
         UNION ALL
         SELECT '\\x03'::bytea, account_id, now() + interval '1 hour', now() - interval '1 second', '127.0.0.1' FROM core.accounts;
         INSERT INTO core.sign_in_throttle (email_key, address, failures, last_failure_at) VALUES
             ('old@example.org', '10.0.0.1', 3, now() - interval '2 days'),
             ('recent@example.org', '10.0.0.1', 3, now() - interval '1 hour');
         INSERT INTO core.sign_in_addresses (address, window_started_at, failures) VALUES
             ('10.0.0.1', now() - interval '2 days', 6), ('10.0.0.2', now() - interval '1 hour', 6);
         INSERT INTO integration.jobs (kind, state, finished_at, last_error) VALUES
             ('old_done', 'done', now() - interval '8 days', NULL),
             ('recent_done', 'done', now() - interval '6 days', NULL),
             ('old_failed', 'failed', now() - interval '30 days', 'kept for operators');
         INSERT INTO integration.jobs (kind, run_at) VALUES ('later', now() + interval '1 day');",
    )
    .execute(&t.admin)
    .await
    .unwrap();

    // Through the real wiring: the start-up schedule fires at once and the standard handler runs.
    member_console::job_registry::register_standard_schedules(&t.db).await.unwrap();
    let opts = WorkerOptions { fire_schedules: true, ..fast() };
    let w = spawn(Worker::new(t.db.clone(), member_console::job_registry::standard_handlers(), 2).with_options(opts));
    wait_until("the purge has run", Duration::from_secs(15), || async {
        count(&t.admin, "SELECT count(*) FROM integration.jobs WHERE kind = 'purge_expired' AND state = 'done'").await
            == 1
    })
    .await;
    w.stop().await;

    let sessions: Vec<Vec<u8>> = t.all(sqlx::query_scalar("SELECT token_hash FROM core.web_sessions")).await;
    assert_eq!(sessions, vec![vec![2u8]]);
    let failures: Vec<String> = t.all(sqlx::query_scalar("SELECT email_key FROM core.sign_in_throttle")).await;
    assert_eq!(failures, vec!["recent@example.org".to_string()]);
    let windows: Vec<String> = t.all(sqlx::query_scalar("SELECT address FROM core.sign_in_addresses")).await;
    assert_eq!(windows, vec!["10.0.0.2".to_string()]);
    // Other standard schedules (the grant sweep) fire too; they are not the purge's business.
    let kinds: Vec<String> = t.all(sqlx::query_scalar(
        "SELECT kind FROM integration.jobs WHERE kind NOT IN (SELECT name FROM integration.job_schedules WHERE name <> 'purge_expired') ORDER BY kind",
    )).await;
    assert_eq!(kinds, vec!["later", "old_failed", "purge_expired", "recent_done"]);

    // Nothing left to purge.
    assert_eq!(jobs::purge_expired(&t.db).await.unwrap(), jobs::Purged::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_mid_drain_has_its_drain_resumed_within_the_lease_and_moves_everyone_once() {
    use common::acts::{act_state, active_floors, change, counts, floored_type, ladder_id, scalar, stale_pools};
    use member_console::services::plan_acts::{DRAIN_PLAN_ACT, Disposition};

    // As many organizations as the default change had.
    const ORGS: i64 = 8000;
    let lease = Duration::from_secs(2);
    let t = common::pages::demo_db().await;
    let data_dir = std::env::temp_dir().join(format!("mc-jobs-kill-{}", t.name));
    let (wiki, support) = (ladder_id(&t, "Wiki hosting").await, ladder_id(&t, "Support").await);
    let ty = floored_type(&t, "Kill test", wiki, ORGS).await;
    // T0 only: the listing and the moves are left to the drain job.
    let act = change(&t, OrgTypeId(ty), support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(act_state(&t, act).await, "running");
    let drain_job: JobId =
        t.one(sqlx::query_scalar("SELECT job_id FROM integration.jobs WHERE kind = $1").bind(DRAIN_PLAN_ACT)).await;
    let moved_sql =
        format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND state = 'migrated'");

    // The first worker process drains for longer than its lease, then is killed midway.
    let mut first = WorkerProcess::start(&t, &data_dir, lease, "first");
    let first_prefix = first.worker_id_prefix();
    let started = Instant::now();
    let mut running_since: Option<(Instant, DateTime<Utc>)> = None;
    loop {
        let moved = scalar(&t, &moved_sql).await;
        let row = job(&t.admin, drain_job).await.unwrap();
        if let (None, "running", Some(until)) = (running_since, row.state.as_str(), row.locked_until) {
            running_since = Some((Instant::now(), until));
        }
        assert!(moved < ORGS, "the drain ended before the kill; give it more organizations");
        if moved >= ORGS / 10 && running_since.is_some_and(|(since, _)| since.elapsed() >= lease) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the drain did not get going:\n{}", first.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first_lease_end = running_since.map(|(_, until)| until);
    let row = job(&t.admin, drain_job).await.unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("running", 1), "the drain still runs its first attempt");
    assert!(row.locked_by.as_deref().is_some_and(|w| w.starts_with(&first_prefix)), "{:?}", row.locked_by);
    let (first_end, renewed_end) = (first_lease_end.expect("a lease"), row.locked_until.expect("a lease"));
    assert!(renewed_end > first_end, "a drain longer than its lease keeps a renewed lease");

    let killed_at: DateTime<Utc> = t.one(sqlx::query_scalar("SELECT clock_timestamp()")).await;
    let killed = Instant::now();
    first.kill();
    // The dead worker's statements in flight end; then nothing moves until someone resumes.
    wait_until("the dead worker's statements are over", Duration::from_secs(10), || async {
        count(
            &t.admin,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND usename = 'console_runtime' AND state <> 'idle'",
        )
        .await
            == 0
    })
    .await;
    let quiet_at: DateTime<Utc> = t.one(sqlx::query_scalar("SELECT clock_timestamp()")).await;
    let moved_at_kill = scalar(&t, &moved_sql).await;
    assert!(0 < moved_at_kill && moved_at_kill < ORGS, "killed midway: {moved_at_kill} of {ORGS} moved");
    assert_eq!(job(&t.admin, drain_job).await.unwrap().state, "running", "the dead worker's job keeps its lease");

    // The restart: a second worker process resumes the moves once the dead one's lease is over.
    let second = WorkerProcess::start(&t, &data_dir, lease, "second");
    let within = lease + Duration::from_secs(5);
    loop {
        if scalar(&t, &moved_sql).await > moved_at_kill {
            break;
        }
        assert!(
            killed.elapsed() < within,
            "no move within {within:?} of the kill; the second worker's log:\n{}",
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_until("the act is done", Duration::from_secs(180), || async { act_state(&t, act).await == "done" }).await;
    let first_resumed: DateTime<Utc> = t
        .one(
            sqlx::query_scalar(
                "SELECT min(settled_at) FROM core.plan_act_obligations WHERE plan_act_id = $1 AND settled_at > $2",
            )
            .bind(act)
            .bind(quiet_at),
        )
        .await;
    let resumed_after = (first_resumed - killed_at).to_std().unwrap();
    println!(
        "killed at {moved_at_kill} of {ORGS} moves; the remaining {} resumed {:.2} s after the kill (lease {:.1} s)",
        ORGS - moved_at_kill,
        resumed_after.as_secs_f64(),
        lease.as_secs_f64()
    );
    assert!(resumed_after <= within, "resumed {resumed_after:?} after the kill");

    // The second worker ran the drain's second attempt to the end. The act is done in the
    // drain's last transaction; the job is recorded done after it, once the handler returns.
    wait_until("the drain's job is recorded", Duration::from_secs(10), || async {
        state_of(&t.admin, drain_job).await != "running"
    })
    .await;
    let row = job(&t.admin, drain_job).await.unwrap();
    assert_eq!((row.state.as_str(), row.attempts), ("done", 2), "the killed attempt and the one that finished");
    let second_prefix = second.worker_id_prefix();
    assert!(row.locked_by.as_deref().is_some_and(|w| w.starts_with(&second_prefix)), "{:?}", row.locked_by);
    drop(second);
    let _ = std::fs::remove_dir_all(&data_dir);

    // Every organization was moved, and moved once.
    assert_eq!(counts(&t, act).await, (0, ORGS, 0, 0, 0, 0));
    let not_once = scalar(
        &t,
        &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND attempts <> 1"),
    )
    .await;
    assert_eq!(not_once, 0, "every obligation settled exactly once");
    assert_eq!(active_floors(&t, OrgTypeId(ty), "").await, ORGS, "one floor each, none given twice");
    let act_floors = format!("SELECT count(*) FROM core.grants WHERE kind = 'floor' AND plan_act_id = {act}");
    assert_eq!(scalar(&t, &act_floors).await, ORGS, "the act gave each organization one new floor");
    assert!(stale_pools(&t).await.is_empty(), "every pool's entitlements equal a fresh computation");
}
