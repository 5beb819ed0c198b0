//! Row-level lock tests (issue 36): what a backend holds and what it waits on, each named by its
//! identity (a row by its table and primary key, read with `pgrowlocks`; an advisory lock by its
//! key's value), and a driver that walks a path lock by lock.
//!
//! # How to write a path's lock test
//!
//! List the locks the path takes, in order, each with its identity, and hand the path to
//! [`LockWalk::run`]. The walk runs the path on a traced connection that pauses right after each
//! lock it takes (the trace's pause hook, `core.note_lock`), and at the k-th pause asserts that
//! the path holds exactly the first k locks (the advisory keys, and the rows of every table the
//! list names), then starts a probe that takes the k-th lock in a conflicting mode and asserts
//! that the probe waits on that very row or key, held by the path. After the last lock it lets the
//! path finish, asserting it took no further lock, and returns its output for the test's own
//! assertions about the outcome.
//!
//! ```ignore
//! let t = TestDb::new().await;
//! // ... a grant `g` in pool `pool` ...
//! let out = LockWalk::run(
//!     &t,
//!     &grants::REVOKE_GRANT_LOCKS,
//!     &[Expect::rendezvous_shared(), Expect::row("core.resource_pools", pool), Expect::row("core.grants", g)],
//!     async move |db| grants::revoke_grant(&db, g).await,
//! )
//! .await;
//! assert!(out.is_ok());
//! ```
//!
//! Limits: a row the paused transaction inserted itself is invisible to the administrator, so it
//! is not named (lock a row that exists before the path runs); a wait on another transaction's
//! uncommitted insert (a unique key) is a wait on no row (`waits_on` answers None).
//!
//! For a real competing path instead of the probe, or for assertions between the steps, drive
//! the walk by hand: [`LockWalk::start`], then `paused_at(k)`, `assert_holds_exactly`,
//! `assert_waits(pid, &expect)` on any backend, `step()` to let the path take its next lock, and
//! `finish()`. A path that takes no lock of its own: `LockWalk::run(&t, &DECL, &[], path)`.

use std::{collections::BTreeSet, fmt, future::Future, time::Duration};

use member_console::db::{Db, keys::AdvisoryKey, locks::PathLocks, trace};
use sqlx::{Connection, PgConnection, PgPool, postgres::PgPoolOptions};

use super::{TEST_RUNTIME_PASSWORD, TestDb};

/// How long a walk waits for a backend to reach a pause, or to wait on a lock.
const WITHIN: Duration = Duration::from_secs(15);

/// A row lock's strength, as `pgrowlocks` reports it: an explicit lock and the matching write
/// are one strength ("For Update" and "Update", "For No Key Update" and "No Key Update").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RowMode {
    KeyShare,
    Share,
    NoKeyUpdate,
    Update,
}

impl RowMode {
    fn parse(m: &str) -> RowMode {
        match m {
            // Shared by several lockers, pgrowlocks names the modes without "For".
            "For Key Share" | "Key Share" => RowMode::KeyShare,
            "For Share" | "Share" => RowMode::Share,
            "For No Key Update" | "No Key Update" => RowMode::NoKeyUpdate,
            _ => RowMode::Update,
        }
    }
}

/// One lock a backend holds or waits for, by its identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// An advisory lock: its key, shared or not.
    Advisory { key: AdvisoryKey, shared: bool },
    /// A row: its table and its primary key's value (columns joined by ','), and the strength.
    Row { table: String, id: String, mode: RowMode },
}

impl Expect {
    pub fn rendezvous_shared() -> Expect {
        Expect::Advisory { key: AdvisoryKey::Rendezvous, shared: true }
    }
    pub fn rendezvous_exclusive() -> Expect {
        Expect::Advisory { key: AdvisoryKey::Rendezvous, shared: false }
    }
    /// An exclusive advisory lock (the workspace, an instance, the registry, ...).
    pub fn advisory(key: AdvisoryKey) -> Expect {
        Expect::Advisory { key, shared: false }
    }
    /// A row FOR UPDATE (or written by a DELETE or a key-changing UPDATE).
    pub fn row(table: &str, id: impl fmt::Display) -> Expect {
        Expect::row_in(table, id, RowMode::Update)
    }
    /// A row in another strength (FOR KEY SHARE, FOR SHARE, FOR NO KEY UPDATE or a plain UPDATE).
    pub fn row_in(table: &str, id: impl fmt::Display, mode: RowMode) -> Expect {
        Expect::Row { table: table.to_string(), id: id.to_string(), mode }
    }
    fn table(&self) -> Option<&str> {
        match self {
            Expect::Row { table, .. } => Some(table),
            Expect::Advisory { .. } => None,
        }
    }
}

/// A held or awaited lock as the server shows it: advisory keys by value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    Advisory { key: i64, shared: bool },
    Row { table: String, id: String, mode: RowMode },
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Advisory { key, shared } => {
                write!(f, "advisory {key} ({})", if *shared { "shared" } else { "exclusive" })
            }
            Seen::Row { table, id, mode } => write!(f, "{table} row {id} ({mode:?})"),
        }
    }
}

/// The value of an advisory key, computed by the SQL key functions (the one place keys are built).
pub async fn key_value(admin: &PgPool, key: &AdvisoryKey) -> i64 {
    let (expr, binds) = key.expression(1);
    let mut q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("SELECT {expr}")));
    for b in binds {
        q = q.bind(b);
    }
    q.fetch_one(admin).await.unwrap_or_else(|e| panic!("the key of {key:?}: {e}"))
}

/// What the server shows for an expectation (its advisory key's value).
pub async fn resolve(admin: &PgPool, e: &Expect) -> Seen {
    match e {
        Expect::Advisory { key, shared } => Seen::Advisory { key: key_value(admin, key).await, shared: *shared },
        Expect::Row { table, id, mode } => Seen::Row { table: table.clone(), id: id.clone(), mode: *mode },
    }
}

/// The SQL text of a table's primary key, columns joined by ',' (a row's id here).
async fn pk_expr(admin: &PgPool, table: &str) -> String {
    let cols: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(a.attname) FROM pg_index i
           CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          WHERE i.indrelid = $1::text::regclass AND i.indisprimary ORDER BY k.ord",
    )
    .bind(table)
    .fetch_all(admin)
    .await
    .unwrap_or_else(|e| panic!("the primary key of {table}: {e}"));
    assert!(!cols.is_empty(), "{table} has no primary key to name its rows by");
    format!("concat_ws(',', {})", cols.iter().map(|c| format!("t.{c}::text")).collect::<Vec<_>>().join(", "))
}

/// The rows of `table` that backend `pid` holds a lock on, with the lock's strength (pgrowlocks,
/// joined back to the table by ctid; created in the test template).
pub async fn rows_held(admin: &PgPool, pid: i32, table: &str) -> Vec<Seen> {
    let id = pk_expr(admin, table).await;
    let sql = format!(
        "SELECT {id}, l.modes[array_position(l.pids, $1)]
           FROM pgrowlocks($2) l JOIN {table} t ON t.ctid = l.locked_row
          WHERE $1 = ANY (l.pids)"
    );
    let rows: Vec<(String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(pid)
        .bind(table)
        .fetch_all(admin)
        .await
        .unwrap_or_else(|e| panic!("the row locks on {table}: {e}"));
    rows.into_iter().map(|(id, m)| Seen::Row { table: table.to_string(), id, mode: RowMode::parse(&m) }).collect()
}

/// The advisory locks backend `pid` holds, by value (the trace's pause keys left out).
pub async fn advisory_held(admin: &PgPool, pid: i32, ignore: &BTreeSet<i64>) -> Vec<Seen> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT ((classid::bigint << 32) | objid::bigint), mode FROM pg_locks
          WHERE pid = $1 AND granted AND locktype = 'advisory' AND objsubid = 1",
    )
    .bind(pid)
    .fetch_all(admin)
    .await
    .unwrap();
    rows.into_iter()
        .filter(|(k, _)| !ignore.contains(k))
        .map(|(key, mode)| Seen::Advisory { key, shared: mode == "ShareLock" })
        .collect()
}

/// Everything `pid` holds that a walk compares: its advisory keys, and its rows in `tables`.
pub async fn held(admin: &PgPool, pid: i32, tables: &BTreeSet<String>, ignore: &BTreeSet<i64>) -> BTreeSet<Seen> {
    let mut out: BTreeSet<Seen> = advisory_held(admin, pid, ignore).await.into_iter().collect();
    for t in tables {
        out.extend(rows_held(admin, pid, t).await);
    }
    out
}

/// Assert that backend `pid` holds each of `expected` (and maybe more).
pub async fn assert_holds(admin: &PgPool, pid: i32, expected: &[Expect]) {
    let tables: BTreeSet<String> = expected.iter().filter_map(|e| e.table().map(str::to_string)).collect();
    let held = held(admin, pid, &tables, &BTreeSet::new()).await;
    for e in expected {
        let want = resolve(admin, e).await;
        assert!(held.contains(&want), "backend {pid} does not hold {want} ({e:?}); it holds {}", show(&held));
    }
}

fn show(s: &BTreeSet<Seen>) -> String {
    let v: Vec<String> = s.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// What a waiting backend waits on: the row (its tuple lock, granted while it waits for the
/// holder's transaction, or waited for behind another waiter) or the advisory key. None while it
/// waits on nothing, or on a transaction with no row (a unique index's insert).
pub async fn waits_on(admin: &PgPool, pid: i32) -> Option<Seen> {
    let advisory: Option<(i64, String)> = sqlx::query_as(
        "SELECT ((classid::bigint << 32) | objid::bigint), mode FROM pg_locks
          WHERE pid = $1 AND NOT granted AND locktype = 'advisory' AND objsubid = 1",
    )
    .bind(pid)
    .fetch_optional(admin)
    .await
    .unwrap();
    if let Some((key, mode)) = advisory {
        return Some(Seen::Advisory { key, shared: mode == "ShareLock" });
    }
    let waiting: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)")
        .bind(pid)
        .fetch_one(admin)
        .await
        .unwrap();
    if !waiting {
        return None;
    }
    let tuple: Option<(String, String, String)> = sqlx::query_as(
        "SELECT relation::regclass::text, format('(%s,%s)', page, tuple), mode FROM pg_locks
          WHERE pid = $1 AND locktype = 'tuple' LIMIT 1",
    )
    .bind(pid)
    .fetch_optional(admin)
    .await
    .unwrap();
    let (table, ctid, _) = tuple?;
    let id = pk_expr(admin, &table).await;
    let id: Option<String> =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {id} FROM {table} t WHERE t.ctid = $1::text::tid")))
            .bind(&ctid)
            .fetch_optional(admin)
            .await
            .unwrap();
    // The strength is the holder's business: a waiter's row is compared by table and id.
    Some(Seen::Row { table, id: id.unwrap_or(ctid), mode: RowMode::Update })
}

fn same_target(a: &Seen, b: &Seen) -> bool {
    match (a, b) {
        (Seen::Advisory { key: x, .. }, Seen::Advisory { key: y, .. }) => x == y,
        (Seen::Row { table: t1, id: i1, .. }, Seen::Row { table: t2, id: i2, .. }) => t1 == t2 && i1 == i2,
        _ => false,
    }
}

/// Assert that backend `waiter` comes to wait on `holder` for exactly `on` (that row or that key),
/// and that `holder` holds it: "B waits on A for pool row 42".
pub async fn assert_waits(admin: &PgPool, waiter: i32, holder: i32, on: &Expect) {
    let want = resolve(admin, on).await;
    let started = std::time::Instant::now();
    loop {
        let blockers: Vec<i32> =
            sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))").bind(waiter).fetch_all(admin).await.unwrap();
        if blockers.contains(&holder) {
            let target = waits_on(admin, waiter).await;
            match &target {
                Some(t) if same_target(t, &want) => break,
                // A first waiter's tuple lock shows a moment after its wait begins.
                _ if started.elapsed() < Duration::from_millis(500) => {}
                _ => panic!("backend {waiter} waits on {holder} for {target:?}, not for {want} ({on:?})"),
            }
        }
        assert!(
            started.elapsed() < WITHIN,
            "backend {waiter} did not come to wait on {holder} for {want} within {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tables: BTreeSet<String> = on.table().map(str::to_string).into_iter().collect();
    let held = held(admin, holder, &tables, &BTreeSet::new()).await;
    assert!(
        held.iter().any(|h| same_target(h, &want)),
        "backend {holder} blocks {waiter} but does not hold {want}; it holds {}",
        show(&held)
    );
}

/// A probe: an administrator's transaction that takes `on` in a mode that conflicts with any
/// holder's (FOR UPDATE for a row, exclusive for a key), started on a connection of its own.
/// Returns its backend and the task (which ends when the probe gets the lock or is cancelled).
pub async fn probe(t: &TestDb, on: &Expect) -> (i32, tokio::task::JoinHandle<Result<(), sqlx::Error>>) {
    let sql = match on {
        Expect::Advisory { key, .. } => format!("SELECT pg_advisory_xact_lock({})", key_value(&t.admin, key).await),
        Expect::Row { table, id, .. } => {
            let pk = pk_expr(&t.admin, table).await;
            format!("SELECT 1 FROM {table} t WHERE {pk} = {} FOR UPDATE OF t", trace_quote(id))
        }
    };
    let mut conn = PgConnection::connect(&t.admin_url).await.unwrap();
    let pid = super::backend_pid(&mut conn).await;
    let task = tokio::spawn(async move {
        sqlx::raw_sql("BEGIN").execute(&mut conn).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
        sqlx::raw_sql("ROLLBACK").execute(&mut conn).await?;
        Ok(())
    });
    (pid, task)
}

fn trace_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Cancel a probe that waits and let its task end.
pub async fn cancel(admin: &PgPool, pid: i32, task: tokio::task::JoinHandle<Result<(), sqlx::Error>>) {
    let _: bool = sqlx::query_scalar("SELECT pg_cancel_backend($1)").bind(pid).fetch_one(admin).await.unwrap();
    let _ = tokio::time::timeout(WITHIN, task).await.expect("a cancelled probe ends");
}

/// A path run on a traced connection that pauses after each of its locks.
pub struct LockWalk<T> {
    admin: PgPool,
    /// The administrator's connection holding the pause keys still ahead of the path.
    keys: PgConnection,
    tag: String,
    /// The pause steps whose keys `keys` still holds.
    held_from: i32,
    held_to: i32,
    pause_keys: BTreeSet<i64>,
    db: Db,
    task: Option<tokio::task::JoinHandle<T>>,
    /// The paused backend, once seen.
    pub pid: Option<i32>,
    /// The tables the walk compares rows in.
    tables: BTreeSet<String>,
}

// The harness API the per-path tests use; not every method has a caller yet.
#[allow(dead_code)]
impl<T: Send + 'static> LockWalk<T> {
    /// Start `path` (given a traced `Db`) under the walk, its transactions of `decl`'s path pausing
    /// after each of their first `steps + 1` locks, and wait for the first pause (or the end).
    pub async fn start<F, Fut>(t: &TestDb, decl: &'static PathLocks, steps: usize, path: F) -> LockWalk<T>
    where
        F: FnOnce(Db) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        trace::enable();
        let tag = member_console::config::random_hex(4);
        let mut keys = PgConnection::connect(&t.admin_url).await.unwrap();
        let last = steps as i32 + 1;
        let mut pause_keys = BTreeSet::new();
        for n in 1..=last {
            let key = key_value(&t.admin, &AdvisoryKey::TracePause { tag: tag.clone(), n }).await;
            pause_keys.insert(key);
            // Session-level, in the harness only: held across the walk, released one by one.
            sqlx::query("SELECT pg_advisory_lock($1)").bind(key).execute(&mut keys).await.unwrap();
        }
        let opts =
            member_console::db::migrate::runtime_options(&t.admin_url, TEST_RUNTIME_PASSWORD).unwrap().options([
                (trace::SETTING, "on"),
                (trace::PAUSE_SETTING, tag.as_str()),
                ("member_console.lock_pause_path", decl.path),
            ]);
        let pool = PgPoolOptions::new().max_connections(6).connect_with(opts).await.unwrap();
        let mut db = Db::new(pool);
        // A paused path must not be refused by its own bound while the test looks at it.
        db.lock_timeout = Duration::from_secs(120);
        let task = tokio::spawn(path(db.clone()));
        let mut w = LockWalk {
            admin: t.admin.clone(),
            keys,
            tag,
            held_from: 1,
            held_to: last,
            pause_keys,
            db,
            task: Some(task),
            pid: None,
            tables: BTreeSet::new(),
        };
        w.reach(1).await;
        w
    }

    /// The traced handle the path runs on (for a competitor that should be traced too).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Wait until the path is paused after its `n`-th lock (true) or has finished (false).
    async fn reach(&mut self, n: i32) -> bool {
        let key = key_value(&self.admin, &AdvisoryKey::TracePause { tag: self.tag.clone(), n }).await;
        let started = std::time::Instant::now();
        loop {
            let pid: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
                   AND ((classid::bigint << 32) | objid::bigint) = $1 AND mode = 'ShareLock' LIMIT 1",
            )
            .bind(key)
            .fetch_optional(&self.admin)
            .await
            .unwrap();
            if let Some(pid) = pid {
                self.pid = Some(pid);
                return true;
            }
            if self.task.as_ref().is_some_and(|t| t.is_finished()) {
                return false;
            }
            assert!(
                started.elapsed() < WITHIN,
                "the path neither paused after lock {n} nor finished within {WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The paused backend.
    pub fn paused_pid(&self) -> i32 {
        self.pid.expect("the path paused")
    }

    /// Compare rows in these tables too (the walk compares the tables its expectations name).
    pub fn compare_tables(&mut self, tables: &[&str]) {
        self.tables.extend(tables.iter().map(|t| t.to_string()));
    }

    /// Assert the paused path holds exactly `expected`: its advisory keys, and its rows in the
    /// tables the walk compares.
    pub async fn assert_holds_exactly(&mut self, expected: &[Expect]) {
        self.tables.extend(expected.iter().filter_map(|e| e.table().map(str::to_string)));
        let pid = self.paused_pid();
        let held = held(&self.admin, pid, &self.tables, &self.pause_keys).await;
        let mut want = BTreeSet::new();
        for e in expected {
            want.insert(resolve(&self.admin, e).await);
        }
        assert_eq!(show(&held), show(&want), "what the paused path (backend {pid}) holds, against what it should");
    }

    /// Start the default probe on `on` and assert it waits on the paused path for that row or
    /// key; then cancel it.
    pub async fn assert_probe_waits(&self, t: &TestDb, on: &Expect) {
        let (pid, task) = probe(t, on).await;
        assert_waits(&self.admin, pid, self.paused_pid(), on).await;
        cancel(&self.admin, pid, task).await;
    }

    /// Let the path go on past its current pause: true when it paused again (after its next lock),
    /// false when it finished.
    pub async fn step(&mut self) -> bool {
        assert!(self.held_from <= self.held_to, "the walk has no pause left to release");
        let key = key_value(&self.admin, &AdvisoryKey::TracePause { tag: self.tag.clone(), n: self.held_from }).await;
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(key).execute(&mut self.keys).await.unwrap();
        self.held_from += 1;
        if self.held_from > self.held_to {
            return false;
        }
        self.reach(self.held_from).await
    }

    /// Let the path go on past its current pause without waiting for its next one (it may come to
    /// wait on a lock another holds: see `assert_waits`).
    pub async fn release(&mut self) {
        let key = key_value(&self.admin, &AdvisoryKey::TracePause { tag: self.tag.clone(), n: self.held_from }).await;
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(key).execute(&mut self.keys).await.unwrap();
        self.held_from += 1;
    }

    /// Release every pause and wait for the path's output.
    pub async fn finish(mut self) -> T {
        let _ = sqlx::query("SELECT pg_advisory_unlock_all()").execute(&mut self.keys).await;
        let out = tokio::time::timeout(Duration::from_secs(60), self.task.take().expect("running"))
            .await
            .expect("the path finished within 60 s of its release")
            .expect("the path's task did not panic");
        self.db.close().await;
        out
    }

    /// The whole walk: pause after each of `expected` in turn, assert the first k are held
    /// exactly and a probe of the k-th waits on the path for it; then assert the path took no
    /// further lock in that transaction, and return its output.
    pub async fn run<F, Fut>(t: &TestDb, decl: &'static PathLocks, expected: &[Expect], path: F) -> T
    where
        F: FnOnce(Db) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let mut w = LockWalk::start(t, decl, expected.len(), path).await;
        for k in 1..=expected.len() {
            assert!(
                w.pid.is_some() && w.held_from == k as i32,
                "the path finished before its lock {k} ({:?})",
                expected[k - 1]
            );
            w.assert_holds_exactly(&expected[..k]).await;
            w.assert_probe_waits(t, &expected[k - 1]).await;
            let paused = w.step().await;
            if k < expected.len() {
                assert!(paused, "the path finished after {k} locks; expected {}", expected.len());
            } else if paused {
                let extra = held(&w.admin, w.paused_pid(), &w.tables, &w.pause_keys).await;
                panic!("the path took a lock after the {} expected; it now holds {}", expected.len(), show(&extra));
            }
        }
        if expected.is_empty() {
            assert!(w.pid.is_none(), "a path expected to take no lock paused after one (backend {:?})", w.pid);
        }
        w.finish().await
    }
}

/// A probe of an advisory key known by its value alone (a key built from an id the path makes
/// itself, named once the path has committed): an administrator's transaction that takes it
/// exclusively, on a connection of its own.
pub async fn probe_key(t: &TestDb, key: i64) -> (i32, tokio::task::JoinHandle<Result<(), sqlx::Error>>) {
    let mut conn = PgConnection::connect(&t.admin_url).await.unwrap();
    let pid = super::backend_pid(&mut conn).await;
    let task = tokio::spawn(async move {
        sqlx::raw_sql("BEGIN").execute(&mut conn).await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(key).execute(&mut conn).await?;
        sqlx::raw_sql("ROLLBACK").execute(&mut conn).await?;
        Ok(())
    });
    (pid, task)
}

/// Assert that backend `waiter` comes to wait on `holder` for the advisory key `key` (by value).
pub async fn assert_waits_on_key(admin: &PgPool, waiter: i32, holder: i32, key: i64) {
    let started = std::time::Instant::now();
    loop {
        let blockers: Vec<i32> =
            sqlx::query_scalar("SELECT unnest(pg_blocking_pids($1))").bind(waiter).fetch_all(admin).await.unwrap();
        if blockers.contains(&holder) {
            let target = waits_on(admin, waiter).await;
            assert!(
                matches!(target, Some(Seen::Advisory { key: k, .. }) if k == key),
                "backend {waiter} waits on {holder} for {target:?}, not for advisory {key}"
            );
            return;
        }
        assert!(started.elapsed() < WITHIN, "backend {waiter} did not come to wait on {holder} within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[allow(dead_code)]
impl<T: Send + 'static> LockWalk<T> {
    /// What the paused path holds now: its advisory keys (the walk's pause keys left out) and its
    /// rows in the tables the walk compares (for a lock whose identity the test learns later).
    pub async fn held_now(&self) -> BTreeSet<Seen> {
        held(&self.admin, self.paused_pid(), &self.tables, &self.pause_keys).await
    }
}

/// One pause of a walk: a lock the administrator can see, or a lock the trace notes on a row the
/// path inserted itself earlier in its transaction (invisible to the administrator: the harness's
/// "Limits"), which the walk passes over after checking the visible ones are still exactly held.
pub enum Step {
    Lock(Expect),
    /// Rows one statement locks in its order (`ORDER BY ... FOR UPDATE`): the trace notes them one
    /// by one once the statement has them all, so at each of their pauses all of them are held.
    Rows(Vec<Expect>),
    Own(&'static str),
}

impl Step {
    /// How many locks the trace notes for it (a pause each).
    pub fn notes(&self) -> usize {
        match self {
            Step::Rows(rows) => rows.len(),
            _ => 1,
        }
    }
}

/// `LockWalk::run`, for a path whose statements lock several rows at once or that notes locks on
/// rows it inserted itself.
pub async fn walk<T, F, Fut>(t: &TestDb, decl: &'static PathLocks, steps: &[Step], path: F) -> T
where
    T: Send + 'static,
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let total: usize = steps.iter().map(Step::notes).sum();
    let mut w = LockWalk::start(t, decl, total, path).await;
    assert!(w.pid.is_some(), "the path finished before its first lock");
    let mut seen = vec![];
    let mut k = 0;
    for s in steps {
        let (what, probes) = match s {
            Step::Lock(e) => (format!("{e:?}"), vec![e.clone()]),
            Step::Rows(rows) => (format!("{rows:?}"), rows.clone()),
            Step::Own(what) => (what.to_string(), vec![]),
        };
        seen.extend(probes.iter().cloned());
        for n in 0..s.notes() {
            w.assert_holds_exactly(&seen).await;
            if n == 0 {
                for e in &probes {
                    w.assert_probe_waits(t, e).await;
                }
            }
            k += 1;
            let paused = w.step().await;
            if k < total {
                assert!(paused, "the path finished after {k} locks (the last: {what}); expected {total}");
            } else {
                assert!(!paused, "the path took a lock after the {total} expected");
            }
        }
    }
    w.finish().await
}
