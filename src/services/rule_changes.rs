//! Rule changes, as the spec's "Rule change and drain" orders their locks: the batch commit
//! (RuleChangeBatchCommit) under the exclusive rendezvous, settling inline at or below the sync
//! cap; the drain (DrainChange), one pool per short materializing transaction; the failure
//! recorder (recordObligationFailure); and the operator's Retry.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx::within,
    },
    ids::{AccountId, EntitlementSetId, PoolId, ResourceKey, RuleChangeId},
    jobs::{Job, JobContext, JobError},
    services::{
        catalog::{RuleEntry, RuleValue},
        refusal::{ServiceError, change_path},
    },
    states::RuleChangeState,
    store::{catalog, entitlements as ent, rule_changes as store},
};

/// Pools a change may owe and still settle inside its commit.
pub const DEFAULT_SYNC_CAP: i64 = 100;
/// Tasks one drain runs at once, each over its own share of the pools.
pub const DEFAULT_DRAIN_PARALLELISM: i64 = 4;
pub const DRAIN_RULE_CHANGE: &str = "drain_rule_change";
/// Carrying pools one listing transaction owes.
pub const LISTING_BATCH: i32 = 5_000;
pub const RESUME_RULE_CHANGE_DRAINS: &str = "resume_rule_change_drains";

/// The drain of a rule change above the sync cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainRuleChange {
    pub change_id: RuleChangeId,
}

impl Job for DrainRuleChange {
    const KIND: &'static str = DRAIN_RULE_CHANGE;
    type Context = ();

    fn dedupe_key(&self) -> Option<String> {
        Some(format!("{DRAIN_RULE_CHANGE}:{}", self.change_id))
    }

    // The drain runs for as long as its work takes, far past a lease: the worker renews the
    // lease while it runs, and stops it (its move tasks with it, as their JoinSet is dropped) if
    // it is ever lost, so one drain never runs on two workers at once. It does not check the
    // lease itself; a move or settlement in flight when it stops is guarded by its own
    // obligation row, so it is applied once either way.
    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        drain_change(&job.db, self.change_id, DEFAULT_DRAIN_PARALLELISM).await?;
        Ok(())
    }
}

/// The schedule that enqueues the drains of changes still owing pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumeRuleChangeDrains {}

impl Job for ResumeRuleChangeDrains {
    const KIND: &'static str = RESUME_RULE_CHANGE_DRAINS;
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        resume_drains(&job.db).await?;
        Ok(())
    }
}

/// What a commit did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub change_id: RuleChangeId,
    pub acts: usize,
    pub pools_owed: i64,
    pub settled_inline: bool,
    /// From the exclusive rendezvous to the commit.
    pub hold: Duration,
}

pub static RULE_CHANGE_COMMIT_LOCKS: PathLocks = PathLocks {
    path: "RuleChangeBatchCommit",
    function: "services::rule_changes::commit_rule_change_batch",
    kind: "RuleChange",
    locks: &[
        Lock::RendezvousExclusive,
        Lock::EntitlementSetRow,
        Lock::RuleRow,
        Lock::PoolRow,
        Lock::ChangeObligationRow,
        // The next pool's row, after the previous pool's obligation rows: settled pool after pool.
        Lock::PoolRow,
    ],
    why: "The exclusive rendezvous, the set row once for the batch (LockEntitlementSet), then for each delta in \
          resource-key order the set row again and the rule row inside core.commit_rule_change; at or below \
          the sync cap each carrying pool in ascending pool_id order (settlePool: the pool row, then the \
          obligation rows of its owed acts; then the next pool's row, still holding those: no drain can meet \
          it, as every drain waits on the exclusive rendezvous).",
};

/// Why the operator changed a set's rules, kept with the change: free text, trimmed, blank
/// allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeNote(String);

impl ChangeNote {
    pub fn parse(s: &str) -> Result<ChangeNote, String> {
        Ok(ChangeNote::from(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Any text is a note (trimmed), so the demo's and the tests' notes are made without a parse.
impl From<&str> for ChangeNote {
    fn from(s: &str) -> Self {
        ChangeNote(s.trim().to_string())
    }
}

/// RuleChangeBatchCommit: the submitted rules of one set (key → what was written, blank = no rule)
/// become one change with an act per delta. Settled in the commit when it owes at most
/// `sync_cap` pools; otherwise drained by the `drain_rule_change` job.
#[tracing::instrument(name = "RuleChangeBatchCommit", skip(db, submitted), fields(set_id))]
pub async fn commit_rule_change_batch(
    db: &Db,
    set_id: EntitlementSetId,
    submitted: &BTreeMap<ResourceKey, RuleEntry>,
    actor: Option<AccountId>,
    note: &ChangeNote,
    sync_cap: i64,
) -> Result<Committed, ServiceError> {
    change_path(crate::db::tx::within_for(db, TxKind::RuleChange, &RULE_CHANGE_COMMIT_LOCKS, async |tx: &mut Tx| {
        let started = Instant::now();
        if !catalog::lock_entitlement_set(tx.conn(), set_id).await? {
            return Err(ServiceError::NotFound("entitlement set"));
        }
        let deltas = deltas(tx, set_id, submitted).await?;
        if deltas.is_empty() {
            return Err(ServiceError::invalid_form("Nothing changed: every rule already has the value given."));
        }
        let change_id = store::insert_change(tx.conn(), set_id, actor, note.as_str()).await?;
        // At or below the cap the commit owes and settles every carrying pool itself; above it, the
        // drain lists them after the commit, so the exclusive hold stays short however many there are.
        let carrying = store::count_carrying_pools(tx.conn(), set_id).await?;
        let inline = carrying <= sync_cap;
        for (position, (key, value)) in deltas.iter().enumerate() {
            let (n, f) = match value {
                Some(RuleValue::Numeric(n)) => (Some(*n), None),
                Some(RuleValue::Flag(b)) => (None, Some(*b)),
                None => (None, None),
            };
            store::commit_rule_change(tx.conn(), change_id, position as i32, set_id, key, n, f, inline).await?;
        }
        let owed = if inline {
            let pools = store::owed_pools(tx.conn(), change_id).await?;
            for pool in &pools {
                settle_pool(tx, change_id, *pool).await?;
            }
            store::finish_if_settled(tx.conn(), change_id).await?;
            pools.len() as i64
        } else {
            store::set_unlisted(tx.conn(), change_id).await?;
            enqueue_drain(tx, change_id).await?;
            0
        };
        let hold = started.elapsed();
        store::set_outcome(tx.conn(), change_id, owed, inline, hold.as_secs_f64() * 1000.0).await?;
        Ok(Committed { change_id, acts: deltas.len(), pools_owed: carrying, settled_inline: inline, hold })
    }))
    .await
}

/// The deltas in resource-key (byte) order: each key whose submitted value differs from the
/// set's rule now. Refuses unknown keys and values of the wrong kind, naming each.
async fn deltas(
    tx: &mut Tx,
    set_id: EntitlementSetId,
    submitted: &BTreeMap<ResourceKey, RuleEntry>,
) -> Result<Vec<(ResourceKey, Option<RuleValue>)>, ServiceError> {
    let keys = catalog::resource_keys(tx.conn()).await?;
    let current = catalog::rules_of_set(tx.conn(), set_id).await?;
    let mut problems = vec![];
    let mut out = vec![];
    for (key, raw) in submitted {
        let Some(k) = keys.iter().find(|k| k.resource_key == key.as_str()) else {
            problems.push((format!("rule.{key}"), format!("There is no resource key {key}.")));
            continue;
        };
        match RuleValue::parse(key.as_str(), k.kind, raw) {
            Err(m) => problems.push((format!("rule.{key}"), m)),
            Ok(v) => {
                let now = current.iter().find(|r| r.resource_key == key.as_str()).map(|r| {
                    match (r.numeric_value, r.flag_value) {
                        (Some(n), _) => RuleValue::Numeric(n),
                        (_, f) => RuleValue::Flag(f.unwrap_or(false)),
                    }
                });
                if now != v {
                    out.push((key.clone(), v));
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(ServiceError::Invalid(problems));
    }
    out.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    Ok(out)
}

async fn enqueue_drain(tx: &mut Tx, change_id: RuleChangeId) -> Result<(), DbError> {
    DrainRuleChange { change_id }.enqueue(tx.conn()).await?;
    Ok(())
}

/// settlePool (`core.settle_change_pool`, one round trip): under the pool row, materialize once
/// with the new rules, then settle the obligation rows of the pool's owed acts in one statement
/// (after the pool row, as core.settle_obligation takes them). False when nothing was owed any
/// more (another pass settled it).
pub async fn settle_pool(tx: &mut Tx, change_id: RuleChangeId, pool_id: PoolId) -> Result<bool, DbError> {
    Ok(store::settle_change_pool(tx.conn(), change_id, pool_id).await?)
}

pub static LIST_CHANGE_LOCKS: PathLocks = PathLocks {
    path: "List a rule change's carrying pools",
    function: "services::rule_changes::drain_change",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::RuleChangeRow],
    why: "Above the sync cap the drain lists the carrying pools after the commit, a batch per transaction: the \
          shared rendezvous, then the change's row FOR UPDATE (two drains list one after the other), then the \
          obligation inserts; no pool row.",
};

pub static DRAIN_CHANGE_LOCKS: PathLocks = PathLocks {
    path: "DrainChange",
    function: "services::rule_changes::drain_change",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::ChangeObligationRow],
    why: "One short transaction per owed pool: the rendezvous, the pool row (settlePool, core.settle_change_pool), \
          then the obligation rows of the pool's owed acts FOR UPDATE in act order (the order a Retry takes them \
          in), settled in one statement.",
};

pub static RECORD_FAILURE_LOCKS: PathLocks = PathLocks {
    path: "recordObligationFailure",
    function: "services::rule_changes::record_obligation_failure",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::ChangeObligationRow],
    why: "After a pool's settlement rolled back, a second transaction: the rendezvous, then through \
          core.settle_obligation the pool row before the obligation row of each owed act in batch order.",
};

/// What one drain pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    pub settled: u64,
    pub failed: u64,
    /// Whether the change is settled now.
    pub finished: bool,
}

/// DrainChange: settle every due pool of the change, `parallelism` pools at a time (each task
/// takes its own share of pool ids, in ascending order, so they never meet on a pool).
#[tracing::instrument(name = "DrainChange", skip(db), fields(change_id = change_id.0, parallelism = parallelism))]
pub async fn drain_change(db: &Db, change_id: RuleChangeId, parallelism: i64) -> Result<Drained, DbError> {
    // First the listing, when the commit left it to the drain: batch after batch.
    loop {
        let n = crate::db::tx::within_for(db, TxKind::Materializing, &LIST_CHANGE_LOCKS, async |tx: &mut Tx| {
            Ok::<_, DbError>(store::list_obligations(tx.conn(), change_id, LISTING_BATCH).await?)
        })
        .await?;
        if n < LISTING_BATCH {
            break;
        }
    }
    let parts = parallelism.max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..parts {
        let db = db.clone();
        tasks.spawn(async move { drain_part(&db, change_id, part, parts).await });
    }
    let mut total = Drained::default();
    while let Some(r) = tasks.join_next().await {
        let d = r.map_err(|e| DbError::Sql(sqlx::Error::Protocol(format!("a drain task failed: {e}"))))??;
        total.settled += d.settled;
        total.failed += d.failed;
    }
    total.finished = within(db, TxKind::Plain, async |tx: &mut Tx| {
        Ok::<_, DbError>(store::finish_if_settled(tx, change_id).await? || is_settled(tx, change_id).await?)
    })
    .await?;
    Ok(total)
}

async fn is_settled(conn: &mut sqlx::PgConnection, change_id: RuleChangeId) -> Result<bool, DbError> {
    Ok(store::change(conn, change_id).await?.is_some_and(|c| c.state == RuleChangeState::Settled))
}

async fn drain_part(db: &Db, change_id: RuleChangeId, part: i64, parts: i64) -> Result<Drained, DbError> {
    let mut done = Drained::default();
    let mut after = PoolId(0);
    loop {
        let pools = {
            let mut conn = db.read().await?;
            store::next_due_pools(&mut conn, change_id, part, parts, after, 500).await?
        };
        let Some(last) = pools.last().copied() else { return Ok(done) };
        let mut rest = &pools[..];
        while !rest.is_empty() {
            let run = &rest[..SETTLE_BATCH.min(rest.len())];
            let (settled, failure) = settle_run(db, change_id, run).await?;
            done.settled += settled.iter().filter(|s| **s).count() as u64;
            rest = &rest[settled.len()..];
            if let Some(e) = failure {
                let pool = rest[0];
                tracing::warn!(change_id = change_id.0, pool_id = pool.0, error = %e, "a pool failed to settle");
                record_obligation_failure(db, change_id, pool, &e.to_string()).await?;
                done.failed += 1;
                rest = &rest[1..];
            }
        }
        after = last;
    }
}

/// Pools a drain settles per round trip, each in a transaction of its own.
pub const SETTLE_BATCH: usize = 8;

/// A run of pools, each in a transaction of its own (a failure rolls back that pool alone), all
/// sent in one round trip (`tx::each_once_for`): whether each committed settle settled anything,
/// in order, and the error of the one that failed, after which none of the run was tried.
async fn settle_run(
    db: &Db,
    change_id: RuleChangeId,
    pools: &[PoolId],
) -> Result<(Vec<bool>, Option<DbError>), DbError> {
    let statements: Vec<String> = pools.iter().map(|p| store::settle_change_pool_statement(change_id, *p)).collect();
    let r = crate::db::tx::each_once_for(db, TxKind::Materializing, &DRAIN_CHANGE_LOCKS, &statements).await;
    let settled = r.committed.iter().map(|rows| Ok(store::settled(rows)?)).collect::<Result<_, DbError>>()?;
    Ok((settled, r.failed))
}

/// recordObligationFailure: the attempt, recorded against each still-owed act of the pool.
#[tracing::instrument(name = "Record a failed settlement", skip_all, fields(change_id = change_id.0, pool_id = pool_id.0))]
pub async fn record_obligation_failure(
    db: &Db,
    change_id: RuleChangeId,
    pool_id: PoolId,
    error: &str,
) -> Result<(), DbError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &RECORD_FAILURE_LOCKS, async |tx: &mut Tx| {
        ent::lock_pools(tx.conn(), &[pool_id]).await?;
        for act in store::owed_acts_of_pool(tx.conn(), change_id, pool_id).await? {
            store::settle_obligation(tx.conn(), act, pool_id, Some(error)).await?;
        }
        Ok(())
    })
    .await
}

pub static RETRY_RULE_CHANGE_LOCKS: PathLocks = PathLocks {
    path: "Retry a rule change's failed pools",
    function: "services::rule_changes::retry_failed",
    kind: "Plain",
    locks: &[Lock::ChangeObligationRow],
    why: "The failed obligation rows, FOR UPDATE in (pool, act) order, made due now, and a drain job enqueued; \
          it takes no pool row and waits on nothing else, so it cannot close a cycle with a drain.",
};

/// The operator's Retry: failed pools are due now, and a drain runs.
#[tracing::instrument(name = "Retry a rule change", skip(db), fields(change_id = change_id.0))]
pub async fn retry_failed(db: &Db, change_id: RuleChangeId) -> Result<u64, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Plain, &RETRY_RULE_CHANGE_LOCKS, async |tx: &mut Tx| {
        if store::change(tx.conn(), change_id).await?.is_none() {
            return Err(ServiceError::NotFound("rule change"));
        }
        let n = store::bring_failed_forward(tx.conn(), change_id).await?;
        if n > 0 {
            enqueue_drain(tx, change_id).await?;
        }
        Ok(n)
    })
    .await
}

/// The poller: a drain job for every change still draining with something due (after a crash,
/// a restart, or a failed pool's backoff).
#[tracing::instrument(name = "Resume the rule changes' drains", skip_all)]
pub async fn resume_drains(db: &Db) -> Result<usize, DbError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let due = store::draining_changes_due(tx.conn()).await?;
        for id in &due {
            enqueue_drain(tx, *id).await?;
        }
        Ok(due.len())
    })
    .await
}
