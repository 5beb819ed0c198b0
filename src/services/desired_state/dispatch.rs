//! One connection's dispatch: a test when one was asked, then batches of due records, each
//! stamped dispatched in one statement (StampDesiredStateRecordsDispatched), pushed, and its
//! answer written under the address lock (writePushAnswer). The first failure ends the run: no
//! further push of the batch starts, and the records it stamped but did not push are given back
//! as they were (due, no attempt counted), so a dead endpoint costs one bound per attempt; the
//! records that failed wait out their backoff.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};

use crate::{
    db::{
        Db, DbError, TxKind,
        locks::{Lock, PathLocks},
        trace, tx,
    },
    ids::{ConnectionId, RecordId},
    integrations::desired_state::{Answer, Relay},
    jobs::Backoff,
    services::ServiceError,
    store::desired_state::{self as store, ConnectionRow, StampedRecord},
};

pub static DISPATCH_LOCKS: PathLocks = PathLocks {
    path: "StampDesiredStateRecordsDispatched",
    function: "services::desired_state::dispatch::dispatch_connection",
    kind: "Plain",
    locks: &[Lock::DesiredStateRecord],
    why: "One statement locks the due records in identifier order before it stamps them, so two stamps \
          wait in one direction and the second skips what the first took; it takes no address lock. A run \
          that ends at a failure gives back the records it stamped and did not push in one statement that \
          locks them in the same order.",
};

pub static WRITE_PUSH_ANSWER_LOCKS: PathLocks = PathLocks {
    path: "writePushAnswer",
    function: "services::desired_state::dispatch::write_answer",
    kind: "Plain",
    locks: &[Lock::DesiredStateAddress, Lock::DesiredStateRecord],
    why: "The address lock, then the record row, then the answer, as a recompute does (rule 7), so an \
          answer never lands between a recompute's read and its write.",
};

/// Records one batch stamps.
pub const DISPATCH_BATCH: i64 = 64;
/// Pushes in flight at once for one connection.
pub const PUSHES_IN_FLIGHT: usize = 8;
/// How long one dispatch run keeps going while records are due (the relay asks again).
pub const DISPATCH_BUDGET: Duration = Duration::from_secs(20);
/// The backoff of a failing record: 5 s, 10 s, ... up to an hour.
pub const PUSH_BACKOFF: Backoff = Backoff { base: Duration::from_secs(5), cap: Duration::from_secs(3600) };

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dispatched {
    pub pushed: usize,
    pub confirmed: usize,
    pub failed: usize,
    pub tested: bool,
}

/// The secrets a push is signed with now: the current one, and the previous one while its overlap
/// lasts.
pub fn signing_secrets(c: &ConnectionRow) -> Vec<&str> {
    let mut s = vec![c.secret.as_str()];
    if let (Some(p), Some(until)) = (&c.previous_secret, c.previous_secret_until)
        && until > chrono::Utc::now()
    {
        s.push(p.as_str());
    }
    s
}

/// A push's body (docs/desired-state.md).
pub fn push_body(c: &ConnectionRow, r: &StampedRecord) -> Vec<u8> {
    let body = serde_json::json!({
        "type": "desired_state.updated",
        "connection": c.name,
        "recipient": { "kind": r.recipient_kind, "id": r.recipient_id.to_string() },
        "generation": r.generation,
        "content": r.content,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Whether an answer confirms `generation`, and the words the operators see.
pub fn judge(answer: &Answer, generation: i64) -> (bool, String) {
    match answer {
        Answer::Accepted { status, generation: None } => (true, format!("{status}")),
        Answer::Accepted { status, generation: Some(g) } if *g == generation => (true, format!("{status}, holds {g}")),
        Answer::Accepted { status, generation: Some(g) } => {
            (false, format!("answered {status} but holds generation {g}, not {generation}"))
        }
        Answer::Failed(why) => (false, why.clone()),
    }
}

/// writePushAnswer: through `core.write_desired_state_push_answer` (the address lock, then the
/// record row); a failure makes the record due after `PUSH_BACKOFF` grown by its failures.
#[tracing::instrument(name = "writePushAnswer", skip(db, answer), fields(record_id = %record))]
pub async fn write_answer(
    db: &Db,
    record: RecordId,
    generation: i64,
    ok: bool,
    answer: &str,
    url: &str,
) -> Result<bool, ServiceError> {
    let (base, cap) = (PUSH_BACKOFF.base.as_secs_f64(), PUSH_BACKOFF.cap.as_secs_f64());
    if !trace::is_on() {
        return Ok(store::write_push_answer(&db.pool, record, generation, ok, answer, base, cap, url).await?);
    }
    // Traced: the one statement in a transaction that names its path first (the function's
    // locks are noted inside it), so the trace and the pause hook count them under writePushAnswer.
    tx::within_for(db, TxKind::Plain, &WRITE_PUSH_ANSWER_LOCKS, async |t: &mut tx::Tx| {
        Ok(store::write_push_answer(t.conn(), record, generation, ok, answer, base, cap, url).await?)
    })
    .await
}

/// StampDesiredStateRecordsDispatched: one statement that commits on its own. Traced, it runs in a
/// transaction that names its path first and notes the records the statement locked, in the
/// order it locked them (record id), before the commit.
pub async fn stamp_dispatched(
    db: &Db,
    connection: ConnectionId,
    limit: i64,
    bound_secs: f64,
) -> Result<Vec<StampedRecord>, ServiceError> {
    if !trace::is_on() {
        return Ok(store::stamp_dispatched(&db.pool, connection, limit, bound_secs).await?);
    }
    tx::within_for(db, TxKind::Plain, &DISPATCH_LOCKS, async |t: &mut tx::Tx| {
        let batch = store::stamp_dispatched(t.conn(), connection, limit, bound_secs).await?;
        // The statement's CTE locks them in record id order; its RETURNING lists them in the
        // update's join order.
        let mut ids: Vec<RecordId> = batch.iter().map(|r| r.record_id).collect();
        ids.sort();
        note_records(t, ids).await?;
        Ok(batch)
    })
    .await
}

/// The stamp given back for records a run did not push (one statement, the records locked in id
/// order, as the stamp takes them); named and noted as the stamp is when traced.
async fn unstamp_unsent(db: &Db, unsent: &[StampedRecord]) -> Result<u64, ServiceError> {
    if !trace::is_on() {
        return Ok(store::unstamp_unsent(&db.pool, unsent).await?);
    }
    tx::within_for(db, TxKind::Plain, &DISPATCH_LOCKS, async |t: &mut tx::Tx| {
        let n = store::unstamp_unsent(t.conn(), unsent).await?;
        let mut ids: Vec<RecordId> = unsent.iter().map(|r| r.record_id).collect();
        ids.sort();
        note_records(t, ids).await?;
        Ok(n)
    })
    .await
}

async fn note_records(t: &mut tx::Tx, ids: Vec<RecordId>) -> Result<(), DbError> {
    let rows: Vec<(i64, Option<i64>)> = ids.iter().map(|id| (id.0, Some(id.0))).collect();
    trace::note_rows(t.conn(), Lock::DesiredStateRecord, rows).await?;
    Ok(())
}

/// Send the test a connection's page asked for, and keep its answer on the connection.
async fn send_test(db: &Db, relay: &Relay, c: &ConnectionRow) -> Result<(), ServiceError> {
    let body = serde_json::json!({
        "type": "desired_state.test",
        "connection": c.name,
        "sent_at": chrono::Utc::now().to_rfc3339(),
    });
    // A random part keeps two tests apart at the remote.
    let id = format!("dt_{}_{}", c.connection_id, crate::config::random_hex(8));
    let answer = relay.post(&c.url, &signing_secrets(c), &id, serde_json::to_vec(&body).unwrap_or_default()).await;
    let (ok, words) = match &answer {
        Answer::Accepted { status, .. } => (true, format!("answered {status}")),
        Answer::Failed(why) => (false, why.clone()),
    };
    store::write_test_answer(&db.pool, c.connection_id, ok, &words).await?;
    Ok(())
}

/// What became of one stamped record in a run.
enum Pushed {
    /// Pushed, and its answer written: whether it confirmed.
    Sent(Result<bool, ServiceError>),
    /// Not pushed: an earlier push of the run failed.
    Unsent(StampedRecord),
}

/// Dispatch one connection: its test when asked, then its due records until none is due, a push
/// fails, or the run's budget is spent.
#[tracing::instrument(name = "Dispatch a connection", skip(db, relay), fields(connection_id = %connection))]
pub async fn dispatch_connection(
    db: &Db,
    relay: &Relay,
    connection: ConnectionId,
    budget: Duration,
) -> Result<Dispatched, ServiceError> {
    let started = Instant::now();
    let mut out = Dispatched::default();
    let Some(c) = store::connection(&db.pool, connection).await? else { return Ok(out) };
    if c.deleted_at.is_some() {
        return Ok(out);
    }
    if c.test_requested_at.is_some() && c.test_requested_at > c.last_test_at {
        send_test(db, relay, &c).await?;
        out.tested = true;
    }
    let secrets = signing_secrets(&c);
    let c = &c;
    // The stamp's bound: past every push of the batch, so no second dispatcher sends one meanwhile.
    let bound = relay.timeout().as_secs_f64() * 3.0 + 5.0;
    loop {
        let batch = stamp_dispatched(db, connection, DISPATCH_BATCH, bound).await?;
        if batch.is_empty() {
            break;
        }
        // Each answer is written as its push returns (writePushAnswer, one address each), so the
        // writes overlap the other pushes rather than queue behind the batch. The first failure
        // stops further pushes from starting: those already in flight finish and are written,
        // the rest are given back unstamped.
        let stop = AtomicBool::new(false);
        let outcomes: Vec<Pushed> = stream::iter(batch)
            .map(|r| {
                let secrets = &secrets;
                let stop = &stop;
                async move {
                    if stop.load(Ordering::SeqCst) {
                        return Pushed::Unsent(r);
                    }
                    let id = format!("ds_{}_{}", r.record_id, r.generation);
                    let a = relay.post(&c.url, secrets, &id, push_body(c, &r)).await;
                    let (ok, words) = judge(&a, r.generation);
                    if !ok {
                        stop.store(true, Ordering::SeqCst);
                    }
                    let written = write_answer(db, r.record_id, r.generation, ok, &words, &c.url).await;
                    if written.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    Pushed::Sent(written.map(|_| ok))
                }
            })
            .buffer_unordered(PUSHES_IN_FLIGHT)
            .collect()
            .await;
        let mut unsent = vec![];
        let mut sent = vec![];
        for o in outcomes {
            match o {
                Pushed::Unsent(r) => unsent.push(r),
                Pushed::Sent(ok) => sent.push(ok),
            }
        }
        if !unsent.is_empty() {
            unstamp_unsent(db, &unsent).await?;
        }
        let mut any_failed = false;
        for ok in sent {
            out.pushed += 1;
            if ok? {
                out.confirmed += 1;
            } else {
                out.failed += 1;
                any_failed = true;
            }
        }
        if any_failed || started.elapsed() >= budget {
            break;
        }
    }
    Ok(out)
}
