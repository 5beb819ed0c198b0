//! The transaction kinds (DESIGN.md §2): the only place in the program that opens a transaction.
//! Each kind fixes the isolation level, the bound on lock waits, and the advisory lock it takes as
//! its first locking statement. The `SET LOCAL`s run before the advisory lock: a SET takes no
//! lock, and the rendezvous wait itself must be bounded, since that is where a rule change meets
//! a long materialization.

use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, PgConnection, Postgres, pool::PoolConnection, postgres::PgRow};

use super::{Db, DbError, keys::AdvisoryKey, locks::PathLocks};

/// The kinds of transaction the spec names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxKind {
    /// Shared rendezvous, READ COMMITTED, the standard lock timeout (5 s).
    Materializing,
    /// Shared rendezvous under a request's own, shorter deadline: the lock, statement and
    /// (client-side) transaction bounds all come from what is left of it.
    MaterializingWithin(Instant),
    /// Exclusive rendezvous, READ COMMITTED, the standard lock timeout.
    RuleChange,
    /// The domains registry's advisory lock, READ COMMITTED, no lock timeout.
    Registry,
    /// No advisory lock, READ COMMITTED, no lock timeout: the request's context bounds it.
    Plain,
}

impl TxKind {
    /// The kind's name as the docs and the lock declarations spell it.
    pub fn name(&self) -> &'static str {
        match self {
            TxKind::Materializing => "Materializing",
            TxKind::MaterializingWithin(_) => "MaterializingWithin",
            TxKind::RuleChange => "RuleChange",
            TxKind::Registry => "Registry",
            TxKind::Plain => "Plain",
        }
    }
}

/// An open transaction of a known kind. Dropping it without `commit` rolls it back (in a task
/// of its own, or by closing the connection outside a runtime), which also releases every
/// transaction-scoped advisory lock it took (spec rule 8).
pub struct Tx {
    /// Some while the transaction is open.
    conn: Option<PoolConnection<Postgres>>,
    kind: TxKind,
}

impl Tx {
    pub fn kind(&self) -> TxKind {
        self.kind
    }

    /// The connection to run statements on.
    pub fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("a Tx is open until commit or rollback consumes it")
    }

    pub async fn commit(mut self) -> Result<(), DbError> {
        let mut c = self.conn.take().expect("open");
        // COMMIT of a transaction that failed rolls it back and reports the failure.
        committing(sqlx::raw_sql("COMMIT").execute(&mut *c)).await?;
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), DbError> {
        let mut c = self.conn.take().expect("open");
        sqlx::raw_sql("ROLLBACK").execute(&mut *c).await?;
        Ok(())
    }

    /// End the transaction by the work's answer: commit on Ok; on Err roll back, awaited, so a
    /// refusal's locks are released before it is answered (a dropped `Tx` rolls back only when
    /// its spawned task gets to run). A failed ROLLBACK closes the connection, which ends the
    /// transaction on the server; the work's own error is what the caller gets.
    pub async fn end<T, E: From<DbError>>(mut self, answer: Result<T, E>) -> Result<T, E> {
        if answer.is_ok() {
            self.commit().await?;
            return answer;
        }
        let mut c = self.conn.take().expect("open");
        if sqlx::raw_sql("ROLLBACK").execute(&mut *c).await.is_err() {
            c.close_on_drop();
        }
        answer
    }

    /// `end` for work that may answer Ok and still give its writes back: `(answer, keep)`,
    /// committed when `keep`, else rolled back (awaited) before the answer.
    pub async fn end_keeping<T, E: From<DbError>>(self, answer: Result<(T, bool), E>) -> Result<T, E> {
        match answer {
            Ok((v, true)) => self.end(Ok(v)).await,
            Ok((v, false)) => {
                self.rollback().await?;
                Ok(v)
            }
            Err(e) => self.end(Err(e)).await,
        }
    }

    /// Take a further advisory lock, exclusive and transaction-scoped, inside this transaction.
    pub async fn lock(&mut self, key: &AdvisoryKey) -> Result<(), DbError> {
        self.lock_ordered(key, None).await
    }

    /// The same, with the value the spec orders such locks by (rule 6: a lifecycle instance's
    /// request id), which the lock trace records.
    pub async fn lock_ordered(&mut self, key: &AdvisoryKey, ordinal: Option<i64>) -> Result<(), DbError> {
        let (expr, binds) = key.expression(1);
        let traced = super::trace::is_on().then(|| key.lock()).flatten();
        // Traced, the note rides in the same statement, after the lock (a target list is
        // evaluated left to right).
        let sql = match traced {
            None => format!("SELECT pg_advisory_xact_lock({expr})"),
            Some(lock) => format!(
                "SELECT pg_advisory_xact_lock(k), core.note_lock({}, k::text, {}, ${}::bigint) FROM (SELECT {expr} AS k) s",
                super::trace::quote(lock.trace_name()),
                super::trace::quote(lock.mode()),
                binds.len() + 1
            ),
        };
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for b in binds {
            q = q.bind(b);
        }
        if traced.is_some() {
            q = q.bind(ordinal);
        }
        q.execute(self.conn()).await?;
        Ok(())
    }
}

/// A transaction is a connection to run statements on.
impl std::ops::Deref for Tx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.conn.as_ref().expect("a Tx is open until commit or rollback consumes it")
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn()
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        let Some(mut c) = self.conn.take() else { return };
        match tokio::runtime::Handle::try_current() {
            // The connection goes back to the pool once its transaction is rolled back.
            Ok(rt) => {
                rt.spawn(async move {
                    if sqlx::raw_sql("ROLLBACK").execute(&mut *c).await.is_err() {
                        c.close_on_drop();
                    }
                });
            }
            // No runtime to roll back in: closing the connection ends the transaction.
            Err(_) => c.close_on_drop(),
        }
    }
}

tokio::task_local! {
    /// The deadline of the request this task serves (set by the web layer). A transaction opened
    /// under it carries it to the server as its statement timeout, so a request answered 503 at
    /// its deadline also stops waiting in PostgreSQL and rolls back, instead of waiting on.
    pub static REQUEST_DEADLINE: Instant;
}

tokio::task_local! {
    /// What the request this task serves has committed so far, so its answer at a deadline can
    /// say whether anything was saved (set by the web layer).
    pub static REQUEST_WRITES: std::sync::Arc<WriteLedger>;
}

/// A request's commits: whether one finished, and whether one was on its way when the request
/// stopped (its outcome then unknown to the console).
#[derive(Debug, Default)]
pub struct WriteLedger {
    committed: std::sync::atomic::AtomicBool,
    committing: std::sync::atomic::AtomicBool,
}

/// What a request that stopped early had saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    Nothing,
    /// A commit finished; more was to come.
    Partly,
    /// A COMMIT was sent and its answer not received.
    Unknown,
}

impl WriteLedger {
    pub fn saved(&self) -> Saved {
        use std::sync::atomic::Ordering::SeqCst;
        if self.committing.load(SeqCst) {
            Saved::Unknown
        } else if self.committed.load(SeqCst) {
            Saved::Partly
        } else {
            Saved::Nothing
        }
    }

    fn note(f: impl FnOnce(&WriteLedger)) {
        let _ = REQUEST_WRITES.try_with(|l| f(l));
    }
}

/// Run a COMMIT (or a batch ending in one), keeping the request's ledger: on the way, then done
/// or, when the server answered with an error other than a timeout, not done.
async fn committing<T>(commit: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, sqlx::Error> {
    use std::sync::atomic::Ordering::SeqCst;
    WriteLedger::note(|l| l.committing.store(true, SeqCst));
    let r = commit.await;
    match &r {
        Ok(_) => WriteLedger::note(|l| {
            l.committed.store(true, SeqCst);
            l.committing.store(false, SeqCst);
        }),
        // A timeout may have come after the commit was durable: the outcome stays unknown.
        Err(e) if super::sqlstate(e).as_deref() == Some(super::QUERY_CANCELED) => {}
        Err(_) => WriteLedger::note(|l| l.committing.store(false, SeqCst)),
    }
    r
}

/// The opening statement that takes the rendezvous: a `core_owner` function that takes the
/// advisory lock and then seals the transaction's mark, which core.assert_rendezvous checks
/// (migration 0013): the run-time role cannot make the mark itself.
pub const TAKE_RENDEZVOUS_SHARED: &str = "SELECT core.take_rendezvous_shared()";
pub const TAKE_RENDEZVOUS_EXCLUSIVE: &str = "SELECT core.take_rendezvous_exclusive()";

/// `SET LOCAL application_name` to the path running (the current span's name), so a deadlock's
/// report can name the other path from `pg_stat_activity`.
fn application_name() -> Option<String> {
    let span = tracing::Span::current();
    let name = span.metadata()?.name();
    let clean: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || " ,.()-_".contains(*c)).take(60).collect();
    Some(format!("SET LOCAL application_name = 'mc: {clean}'"))
}

/// What a kind's opening statements are, in order: exposed so the tests and the docs can show
/// them, and so there is one definition.
pub fn opening_statements(kind: TxKind, lock_timeout: Duration) -> Result<Vec<String>, DbError> {
    let mut s = vec!["BEGIN ISOLATION LEVEL READ COMMITTED".to_string()];
    s.extend(bounds_and_locks(kind, lock_timeout, true)?);
    Ok(s)
}

/// A kind's statements after BEGIN: its bounds, the path's name when `named`, its advisory lock.
fn bounds_and_locks(kind: TxKind, lock_timeout: Duration, named: bool) -> Result<Vec<String>, DbError> {
    let mut s = vec![];
    match kind {
        TxKind::Materializing => {
            s.push(format!("SET LOCAL lock_timeout = '{}ms'", lock_timeout.as_millis()));
            s.push(TAKE_RENDEZVOUS_SHARED.into());
        }
        TxKind::MaterializingWithin(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                return Err(DbError::DeadlinePassed);
            }
            let ms = left.as_millis();
            let lock_ms = ms.min(lock_timeout.as_millis());
            s.push(format!("SET LOCAL lock_timeout = '{lock_ms}ms'"));
            s.push(format!("SET LOCAL statement_timeout = '{ms}ms'"));
            s.push(format!("SET LOCAL idle_in_transaction_session_timeout = '{ms}ms'"));
            s.push(TAKE_RENDEZVOUS_SHARED.into());
        }
        TxKind::RuleChange => {
            s.push(format!("SET LOCAL lock_timeout = '{}ms'", lock_timeout.as_millis()));
            s.push(TAKE_RENDEZVOUS_EXCLUSIVE.into());
        }
        TxKind::Registry if super::trace::is_on() => s.push(
            "SELECT pg_advisory_xact_lock(core.registry_key()), \
             core.note_lock('Registry', core.registry_key()::text, 'exclusive', NULL)"
                .into(),
        ),
        TxKind::Registry => s.push("SELECT pg_advisory_xact_lock(core.registry_key())".into()),
        TxKind::Plain => {}
    }
    if named && let Some(set) = application_name() {
        // Before the locks: a SET takes none.
        s.insert(0, set);
    }
    if !matches!(kind, TxKind::MaterializingWithin(_))
        && let Ok(deadline) = REQUEST_DEADLINE.try_with(|d| *d)
    {
        let left = deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(1) {
            return Err(DbError::DeadlinePassed);
        }
        // Before the advisory lock, so the rendezvous wait is bounded too.
        s.insert(0, format!("SET LOCAL statement_timeout = '{}ms'", left.as_millis()));
    }
    Ok(s)
}

impl Db {
    /// A transaction for reads: Plain, so under a request its statements are bounded by the
    /// request's deadline. Dropping it ends it (rolled back off the request's path).
    pub async fn read(&self) -> Result<Tx, DbError> {
        begin(self, TxKind::Plain).await
    }
}

/// `op`, one prepared statement that commits on its own, on a connection of the prepared pool
/// (`prepared`). That pool lends connections without a ping, so a connection the server has
/// closed since its last use (a restart, an administrator's terminate) fails `op`, which then
/// runs once more on a new connection. A connection lost mid-statement may have run it, so `op`
/// must be a read or a write that is the same done twice.
pub async fn on_prepared<T>(db: &Db, op: impl AsyncFn(&mut PgConnection) -> sqlx::Result<T>) -> Result<T, DbError> {
    let mut conn = prepared(db).await?;
    match op(&mut conn).await {
        Err(e) if connection_lost(&e) => {
            tracing::info!(error = %e, "a pooled connection was found closed; the statement runs on a new one");
            conn.close_on_drop();
            drop(conn);
            let mut conn = live_prepared(db).await?;
            Ok(op(&mut conn).await?)
        }
        answer => Ok(answer?),
    }
}

/// A connection of the prepared pool that answers a ping: when one was found closed, the others
/// the pool keeps may be too (a restart ends them all), so this path, and only this one, pings
/// before it lends, closing each that does not answer.
async fn live_prepared(db: &Db) -> Result<PoolConnection<Postgres>, DbError> {
    let mut last = None;
    for _ in 0..=db.prepared.options().get_max_connections() {
        let mut conn = db.prepared.acquire().await?;
        match sqlx::Connection::ping(&mut *conn).await {
            Ok(()) => return bounded(db, conn).await,
            Err(e) => {
                conn.close_on_drop();
                last = Some(e);
            }
        }
    }
    Err(last.map(DbError::from).unwrap_or(DbError::Sql(sqlx::Error::PoolTimedOut)))
}

/// Whether an error says the connection itself is gone (its socket, or the server ending the
/// session: SQLSTATE class 57P, "operator intervention"), rather than the statement failing.
fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        _ => super::sqlstate(e).is_some_and(|c| c.starts_with("57P")),
    }
}

/// A connection for one prepared statement that commits on its own: the reads every page view
/// opens with (its session, the member's home). Sent as text after a `SET LOCAL`, such a
/// statement is parsed and planned on every request, which costs PostgreSQL more than running
/// it; prepared, it is one round trip of Bind and Execute. It needs no `SET LOCAL` because its
/// connection (from `Db::prepared`) carries `Db::prepared_bound` as its own statement timeout,
/// and under a request that bound is within the deadline: a request whose deadline is nearer
/// gets the time left set on the connection first (one more round trip), and the connection is
/// then closed rather than reused with a bound that is not the pool's.
async fn prepared(db: &Db) -> Result<PoolConnection<Postgres>, DbError> {
    bounded(db, db.prepared.acquire().await?).await
}

/// A lent connection of the prepared pool, bounded by the request's deadline (`prepared`).
async fn bounded(db: &Db, mut conn: PoolConnection<Postgres>) -> Result<PoolConnection<Postgres>, DbError> {
    if let Ok(deadline) = REQUEST_DEADLINE.try_with(|d| *d) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(1) {
            return Err(DbError::DeadlinePassed);
        }
        if left < db.prepared_bound {
            conn.close_on_drop();
            let set = format!("SET statement_timeout = '{}ms'", left.as_millis());
            sqlx::raw_sql(AssertSqlSafe(set)).execute(&mut *conn).await?;
        }
    }
    Ok(conn)
}

/// Open a transaction of `kind`. A lock wait past the kind's bound surfaces as
/// `DbError::LockNotAvailable` (SQLSTATE 55P03), with nothing held.
pub async fn begin(db: &Db, kind: TxKind) -> Result<Tx, DbError> {
    begin_named(db, kind, None).await
}

/// `begin`, for the path `decl` declares: when the lock trace is on, the opening batch names the
/// path first, so every lock the transaction takes (its kind's own included) is counted under it.
/// Off, it is `begin`.
pub async fn begin_for(db: &Db, kind: TxKind, decl: &'static PathLocks) -> Result<Tx, DbError> {
    begin_named(db, kind, Some(decl)).await
}

async fn begin_named(db: &Db, kind: TxKind, decl: Option<&'static PathLocks>) -> Result<Tx, DbError> {
    let mut statements = opening_statements(kind, db.lock_timeout)?;
    if let Some(d) = decl.filter(|_| super::trace::is_on()) {
        statements.insert(1, super::trace::path_statement(d));
    }
    let mut conn = db.pool.acquire().await?;
    // BEGIN, the SETs and the advisory lock in one round trip: the statements carry no input,
    // only numbers this module formats. A lock wait past its bound fails the batch; the
    // transaction it opened is rolled back here, on the connection this handle owns, before the
    // connection goes back to the pool.
    match sqlx::raw_sql(AssertSqlSafe(statements.join(";\n"))).execute(&mut *conn).await {
        Ok(_) => Ok(Tx { conn: Some(conn), kind }),
        Err(e) => {
            if sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err() {
                conn.close_on_drop();
            }
            Err(e.into())
        }
    }
}

/// Run `work` in a transaction of `kind`, ended by its answer (`Tx::end`): committed on Ok,
/// rolled back before an Err is returned. `work` ends the transaction only through its answer.
pub async fn within<T, E: From<DbError>>(
    db: &Db,
    kind: TxKind,
    work: impl AsyncFnOnce(&mut Tx) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = begin(db, kind).await?;
    let answer = work(&mut tx).await;
    tx.end(answer).await
}

/// `within`, for the path `decl` declares (named first when the lock trace is on, as `begin_for`).
pub async fn within_for<T, E: From<DbError>>(
    db: &Db,
    kind: TxKind,
    decl: &'static PathLocks,
    work: impl AsyncFnOnce(&mut Tx) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = begin_for(db, kind, decl).await?;
    let answer = work(&mut tx).await;
    tx.end(answer).await
}

/// A transaction of `kind` that runs one statement and commits, all in one round trip: the
/// kind's bounds and lock, then the statement, as one implicit transaction. Its rows (text), or the first error with the
/// transaction rolled back. The statement is SQL whose only values are numbers the caller
/// formatted (the simple protocol carries no parameters).
pub async fn once(db: &Db, kind: TxKind, statement: String) -> Result<Vec<PgRow>, DbError> {
    once_named(db, kind, None, statement).await
}

/// `once`, for the path `decl` declares (named first when the lock trace is on, as `begin_for`).
pub async fn once_for(
    db: &Db,
    kind: TxKind,
    decl: &'static PathLocks,
    statement: String,
) -> Result<Vec<PgRow>, DbError> {
    once_named(db, kind, Some(decl), statement).await
}

/// The statements that open a one-round-trip transaction of `kind`: READ COMMITTED first, before
/// any statement takes a snapshot (whatever the session's default; the sessions start so too:
/// `migrate::read_committed`), the path's name when the lock trace is on, then the kind's bounds
/// and lock.
fn opening_of(db: &Db, kind: TxKind, decl: Option<&'static PathLocks>) -> Result<Vec<String>, DbError> {
    let mut statements = bounds_and_locks(kind, db.lock_timeout, !matches!(kind, TxKind::Plain))?;
    if let Some(d) = decl.filter(|_| super::trace::is_on()) {
        statements.insert(0, super::trace::path_statement(d));
    }
    statements.insert(0, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED".into());
    Ok(statements)
}

/// What `each_once_for` did: the rows of each statement committed, in order, and the error of
/// the one that failed, if one did. The statements after a failed one were not run.
pub struct EachOnce {
    pub committed: Vec<Vec<PgRow>>,
    pub failed: Option<DbError>,
}

/// Several statements, each in a transaction of its own exactly as `once_for` runs one (BEGIN,
/// the kind's bounds and lock, the statement, COMMIT), all sent in one round trip: a drain's run
/// of moves. The server runs them in order and stops at the first that fails, whose transaction
/// rolls back; those before it stay committed. Not for a kind with a deadline: the bounds are
/// computed once, when the batch is made.
pub async fn each_once_for(db: &Db, kind: TxKind, decl: &'static PathLocks, statements: &[String]) -> EachOnce {
    use futures_util::TryStreamExt;
    debug_assert!(!matches!(kind, TxKind::MaterializingWithin(_)), "a deadline is per transaction");
    let failed = |e: DbError| EachOnce { committed: vec![], failed: Some(e) };
    let opening = match opening_of(db, kind, Some(decl)) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    // Each transaction is BEGIN, the opening, the statement and COMMIT, each ending in one
    // result; the statement's rows come after BEGIN's and the opening's results.
    let (per, rows_at) = (opening.len() + 3, opening.len() + 1);
    let mut batch = Vec::with_capacity(statements.len() * per);
    for s in statements {
        batch.push("BEGIN".to_string());
        batch.extend(opening.iter().cloned());
        batch.push(s.clone());
        batch.push("COMMIT".to_string());
    }
    let mut conn = match db.pool.acquire().await {
        Ok(c) => c,
        Err(e) => return failed(e.into()),
    };
    let (mut committed, mut rows, mut finished) = (vec![], vec![], 0usize);
    let run = async {
        let mut stream = sqlx::raw_sql(AssertSqlSafe(batch.join(";\n"))).fetch_many(&mut *conn);
        while let Some(item) = stream.try_next().await? {
            match item {
                sqlx::Either::Left(_) => {
                    finished += 1;
                    if finished.is_multiple_of(per) {
                        committed.push(std::mem::take(&mut rows));
                    }
                }
                sqlx::Either::Right(row) if finished % per == rows_at => rows.push(row),
                sqlx::Either::Right(_) => {}
            }
        }
        Ok::<_, sqlx::Error>(())
    };
    let outcome = committing(run).await;
    let failed = match outcome {
        Ok(()) => None,
        Err(e @ sqlx::Error::Database(_)) => {
            // An error inside an explicit transaction leaves the session in it, aborted (an
            // error in COMMIT ends it: this ROLLBACK then only warns).
            if sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err() {
                conn.close_on_drop();
            }
            Some(e.into())
        }
        Err(e) => {
            conn.close_on_drop();
            Some(e.into())
        }
    };
    EachOnce { committed, failed }
}

async fn once_named(
    db: &Db,
    kind: TxKind,
    decl: Option<&'static PathLocks>,
    statement: String,
) -> Result<Vec<PgRow>, DbError> {
    use futures_util::TryStreamExt;
    // No BEGIN or COMMIT: PostgreSQL runs a query string of several statements as one implicit
    // transaction (SET LOCAL applies to it, an advisory xact lock is held to its end, and its
    // commit comes before the answer's end), so the batch is two statements fewer. A Plain one
    // takes no lock, so it sets no path name either.
    let mut statements = opening_of(db, kind, decl)?;
    let opening = statements.len();
    statements.push(statement);
    let mut conn = db.pool.acquire().await?;
    // Each statement's rows come before its result; only the rows after the opening
    // statements' results and before the statement's own are the statement's.
    let batch = async {
        let mut stream = sqlx::raw_sql(AssertSqlSafe(statements.join(";\n"))).fetch_many(&mut *conn);
        let (mut finished, mut rows) = (0, vec![]);
        while let Some(item) = stream.try_next().await? {
            match item {
                sqlx::Either::Left(_) => finished += 1,
                sqlx::Either::Right(row) if finished == opening => rows.push(row),
                sqlx::Either::Right(_) => {}
            }
        }
        Ok::<_, sqlx::Error>(rows)
    };
    match committing(batch).await {
        Ok(rows) => Ok(rows),
        // The server rolled the implicit transaction back at the failed statement.
        Err(e @ sqlx::Error::Database(_)) => Err(e.into()),
        // Anything else (the connection broke mid-batch): the connection is not reused.
        Err(e) => {
            conn.close_on_drop();
            Err(e.into())
        }
    }
}
