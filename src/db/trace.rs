//! The lock trace (issue 36): every lock a traced transaction takes, in the order it takes it,
//! with the path that took it, the lock's spec name, its key or row and its mode, written to
//! `core.lock_trace` (migration 0006). The SQL locking functions note their own locks
//! (`core.note_lock`, each call guarded by the setting `member_console.lock_trace`); the Rust
//! statements that lock note theirs here, right after the lock. `stress` reads the trace back and
//! checks it against the declarations (`crate::stress::observed`); the lock tests pause a path
//! after its n-th lock (`member_console.lock_pause`, see docs/database-locks.md, "The lock trace").
//!
//! Off (the default) it costs nothing: `note`, `path` and `step` test one atomic and return,
//! before formatting a key or sending a statement.

use std::{
    fmt::Display,
    sync::atomic::{AtomicBool, Ordering},
};

use sqlx::{PgConnection, postgres::PgConnectOptions};

use super::locks::{Lock, PathLocks};

/// The process-wide switch: stress and the lock tests turn it on.
static ON: AtomicBool = AtomicBool::new(false);

/// The setting that makes the SQL functions (and this module's statements) write the trace.
pub const SETTING: &str = "member_console.lock_trace";
/// The setting that pauses a traced transaction after each lock, on `AdvisoryKey::TracePause`.
pub const PAUSE_SETTING: &str = "member_console.lock_pause";

/// Turn tracing on in this process. The connections must carry the setting too (`options`):
/// a connection without it writes nothing.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

#[inline]
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// `opts` for a traced connection: the trace setting on, and, with a tag, the pause hook.
pub fn options(opts: PgConnectOptions, pause_tag: Option<&str>) -> PgConnectOptions {
    let opts = opts.options([(SETTING, "on")]);
    match pause_tag {
        Some(tag) => opts.options([(PAUSE_SETTING, tag)]),
        None => opts,
    }
}

/// Note a lock this transaction just took. `key` is the row's primary key (columns joined by
/// ',') or an advisory key's value; `ordinal` the value the spec orders the lock's keys by (a
/// pool id, a request id ...), where it orders them. The key is formatted only when tracing, and
/// the future holds no borrow of it.
#[inline]
pub fn note<'c>(
    conn: &'c mut PgConnection,
    lock: Lock,
    key: impl Display,
    ordinal: Option<i64>,
) -> impl Future<Output = sqlx::Result<()>> + Send + 'c {
    let key = is_on().then(|| key.to_string());
    async move {
        match key {
            None => Ok(()),
            Some(k) => note_on(conn, lock, k, ordinal).await,
        }
    }
}

/// Note several rows a statement took, in the order it took them.
#[inline]
pub fn note_rows<'c, K: Display>(
    conn: &'c mut PgConnection,
    lock: Lock,
    rows: impl IntoIterator<Item = (K, Option<i64>)>,
) -> impl Future<Output = sqlx::Result<()>> + Send + 'c {
    let rows: Vec<(String, Option<i64>)> =
        if is_on() { rows.into_iter().map(|(k, o)| (k.to_string(), o)).collect() } else { vec![] };
    async move {
        for (key, ordinal) in rows {
            note_on(conn, lock, key, ordinal).await?;
        }
        Ok(())
    }
}

/// A two-column primary key as the trace writes it ("a,b"), formatted only when tracing.
pub struct Key2<A, B>(pub A, pub B);

impl<A: Display, B: Display> Display for Key2<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0, self.1)
    }
}

async fn note_on(conn: &mut PgConnection, lock: Lock, key: String, ordinal: Option<i64>) -> sqlx::Result<()> {
    sqlx::query("SELECT core.note_lock($1, $2, $3, $4)")
        .bind(lock.trace_name())
        .bind(key)
        .bind(lock.mode())
        .bind(ordinal)
        .execute(conn)
        .await?;
    Ok(())
}

/// Name the transaction's path (its declaration). The first path named in a transaction is the
/// one its locks are counted under; a later one (a path run inside another's transaction) is
/// recorded as observed.
#[inline]
pub async fn path(conn: &mut PgConnection, decl: &PathLocks) -> sqlx::Result<()> {
    marker(conn, "path", decl.path).await
}

/// Mark a sub-step or branch that has no declaration of its own (the spec's paths 9, 10, 11, the
/// reconcile's branches, ...), so stress counts it as observed.
#[inline]
pub async fn step(conn: &mut PgConnection, name: &'static str) -> sqlx::Result<()> {
    marker(conn, "step", name).await
}

async fn marker(conn: &mut PgConnection, kind: &'static str, name: &'static str) -> sqlx::Result<()> {
    if !is_on() {
        return Ok(());
    }
    sqlx::query("SELECT core.note_marker($1, $2)").bind(kind).bind(name).execute(conn).await?;
    Ok(())
}

/// The statement that names a path, for an opening batch (no parameters: the name is quoted).
pub fn path_statement(decl: &PathLocks) -> String {
    format!("SELECT core.note_marker('path', {})", quote(decl.path))
}

pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// One row of `core.lock_trace`, as read back.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow, serde::Serialize, serde::Deserialize)]
pub struct TraceRow {
    /// The transaction (its id as text).
    pub xact: String,
    pub seq: i32,
    pub path: Option<String>,
    /// A `Lock::trace_name`, or "path" / "step" for a marker.
    pub lock: String,
    pub key: Option<String>,
    pub ordinal: Option<i64>,
    pub mode: String,
}

/// The whole trace, in order (transaction, then sequence), as the administrator reads it.
pub async fn read_all(conn: &mut PgConnection) -> sqlx::Result<Vec<TraceRow>> {
    sqlx::query_as(
        "SELECT xact::text AS xact, seq, path, lock, key, ordinal, mode FROM core.lock_trace ORDER BY xact, seq",
    )
    .fetch_all(conn)
    .await
}

/// The markers of the spec's sub-steps and branches that have no declaration of their own
/// (`step`), so stress can count them as observed (`crate::lock_paths::SPEC_PATHS`).
pub mod steps {
    /// Path 9: the reconcile requests (no lock).
    pub const REQUEST_POOL_SUBSCRIPTION_RECONCILES: &str = "RequestPoolSubscriptionReconciles";
    /// Path 10: under the caller's pool row.
    pub const DELIVER_DISPLACED_SUBSCRIPTIONS: &str = "DeliverDisplacedSubscriptionsTx";
    /// Path 11: the pool row.
    pub const RESUME_REPLACED_GRANTS: &str = "ResumeReplacedGrantsTx";
    /// Paths 12, 14 and 15: the subscription reconcile's branches.
    pub const RECONCILE_ACTIVE: &str = "Subscription reconcile, active branch";
    pub const RECONCILE_ENDED: &str = "Subscription reconcile, ended branch";
    pub const RECONCILE_SUSPENDED: &str = "Subscription reconcile, suspended branch";
    /// Path 16: the collection pause.
    pub const APPLY_SUBSCRIPTION_COLLECTION: &str = "ApplySubscriptionCollection";
    /// Path 36: the record step's frame.
    pub const FINISH_ALL_WITH: &str = "finishAllWith";
    /// Path 44: the recount at boot, from the domains reconciliation.
    pub const RECOUNT_AT_BOOT: &str = "Recount at boot";
    /// Path 54: the sync's recount at the end of its pass.
    pub const SYNC_END_OF_PASS: &str = "Sync: the end of the pass";
    /// Path 45.
    pub const SETTLE_OPEN_REQUESTS: &str = "SettleOpenRequests";
    /// Path 46.
    pub const STATUS_RECONCILE: &str = "ReconcileFedWikiSiteStatusWorkflow";
    /// Path 61: written by the site trigger (migration 0006) when it changes placement rows.
    pub const FLAG_ONLY_CORRECTIONS: &str = "Registry: flag-only corrections by the site trigger";
}
