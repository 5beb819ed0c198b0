//! The transaction kinds: each one's isolation, lock bound and advisory lock; 55P03 under a held
//! exclusive rendezvous; the rendezvous assertion; the lock declarations against pg_locks.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestDb, pages::demo_db};
use member_console::db::{
    DbError, TxKind, begin,
    keys::AdvisoryKey,
    locks::Lock,
    tx::{TAKE_RENDEZVOUS_EXCLUSIVE, TAKE_RENDEZVOUS_SHARED, opening_statements},
};

async fn show(tx: &mut member_console::db::Tx, setting: &str) -> String {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}"))).fetch_one(tx.conn()).await.unwrap()
}

async fn my_pid(tx: &mut member_console::db::Tx) -> i32 {
    crate::common::backend_pid(tx.conn()).await
}

#[test]
fn each_kind_sets_its_bounds_before_its_advisory_lock() {
    let five = Duration::from_secs(5);
    let m = opening_statements(TxKind::Materializing, five).unwrap();
    assert_eq!(
        m,
        vec!["BEGIN ISOLATION LEVEL READ COMMITTED", "SET LOCAL lock_timeout = '5000ms'", TAKE_RENDEZVOUS_SHARED,]
    );
    let r = opening_statements(TxKind::RuleChange, five).unwrap();
    assert_eq!(r.last().unwrap(), TAKE_RENDEZVOUS_EXCLUSIVE);
    let g = opening_statements(TxKind::Registry, five).unwrap();
    assert_eq!(g.last().unwrap(), "SELECT pg_advisory_xact_lock(core.registry_key())");
    assert!(!g.iter().any(|s| s.contains("lock_timeout")));
    let p = opening_statements(TxKind::Plain, five).unwrap();
    assert_eq!(p.len(), 1);
    let w = opening_statements(TxKind::MaterializingWithin(Instant::now() + Duration::from_millis(800)), five).unwrap();
    let lock_pos = w.iter().position(|s| s.contains("take_rendezvous")).unwrap();
    assert_eq!(lock_pos, w.len() - 1, "the rendezvous comes after every SET: {w:?}");
    assert!(w.iter().any(|s| s.starts_with("SET LOCAL statement_timeout")));
    assert!(matches!(
        opening_statements(TxKind::MaterializingWithin(Instant::now()), five),
        Err(DbError::DeadlinePassed)
    ));
}

#[tokio::test]
async fn each_kind_holds_what_it_declares_in_the_server() {
    let t = TestDb::new().await;
    // Even where the server's default isolation is stricter, every kind runs READ COMMITTED.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET default_transaction_isolation = 'serializable'",
        t.name
    )))
    .execute(&t.admin)
    .await
    .unwrap();
    // A new pool, so its connections pick up the database's new default.
    let db = reconnect(&t).await;

    // The two sides of the rendezvous: the same bounds, each holding its own side.
    for (kind, side) in [
        (TxKind::Materializing, common::locks::Expect::rendezvous_shared()),
        (TxKind::RuleChange, common::locks::Expect::rendezvous_exclusive()),
    ] {
        let mut tx = begin(&db, kind).await.unwrap();
        assert_eq!(show(&mut tx, "transaction_isolation").await, "read committed", "{kind:?}");
        assert_eq!(show(&mut tx, "lock_timeout").await, "5s", "{kind:?}");
        let pid = my_pid(&mut tx).await;
        common::locks::assert_holds(&t.admin, pid, &[side]).await;
        tx.rollback().await.unwrap();
    }

    let mut g = begin(&db, TxKind::Registry).await.unwrap();
    assert_eq!(show(&mut g, "lock_timeout").await, "0");
    let pid = my_pid(&mut g).await;
    common::locks::assert_holds(&t.admin, pid, &[common::locks::Expect::advisory(AdvisoryKey::Registry)]).await;
    g.rollback().await.unwrap();

    let mut p = begin(&db, TxKind::Plain).await.unwrap();
    assert_eq!(show(&mut p, "transaction_isolation").await, "read committed");
    let pid = my_pid(&mut p).await;
    let held = common::granted_locks(&t.admin, pid).await;
    assert!(!held.iter().any(|(k, _, _)| k == "advisory"), "a plain transaction takes no advisory lock: {held:?}");
    p.rollback().await.unwrap();

    let mut w = begin(&db, TxKind::MaterializingWithin(Instant::now() + Duration::from_millis(1500))).await.unwrap();
    let st = show(&mut w, "statement_timeout").await;
    assert!(st.ends_with("ms") || st.ends_with('s'), "{st}");
    assert_ne!(st, "0");
    let pid = my_pid(&mut w).await;
    common::locks::assert_holds(&t.admin, pid, &[common::locks::Expect::rendezvous_shared()]).await;
    w.rollback().await.unwrap();
}

async fn reconnect(t: &TestDb) -> member_console::db::Db {
    let opts = member_console::db::migrate::runtime_options(&t.admin_url, common::TEST_RUNTIME_PASSWORD).unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect_with(opts).await.unwrap();
    member_console::db::Db::new(pool)
}

#[tokio::test]
async fn a_held_exclusive_rendezvous_refuses_others_past_the_bound() {
    let t = TestDb::new().await;
    let mut short = t.db.clone();
    short.lock_timeout = Duration::from_millis(300);

    // A: a rule change holds the exclusive rendezvous.
    let mut a = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let a_pid = my_pid(&mut a).await;

    // B: a materializing transaction waits on A, then is refused with 55P03.
    let b = tokio::spawn({
        let short = short.clone();
        async move { begin(&short, TxKind::Materializing).await.err() }
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    assert!(waiter > 0, "B waits on A");
    assert!(matches!(b.await.unwrap(), Some(DbError::LockNotAvailable)));
    // A second rule change is refused the same way.
    assert!(matches!(begin(&short, TxKind::RuleChange).await.err(), Some(DbError::LockNotAvailable)));
    a.commit().await.unwrap();
    // With A gone, both go through.
    begin(&short, TxKind::Materializing).await.unwrap().rollback().await.unwrap();
    begin(&short, TxKind::RuleChange).await.unwrap().rollback().await.unwrap();
}

#[tokio::test]
async fn materializing_transactions_share_the_rendezvous_and_a_rule_change_waits_for_them() {
    let t = TestDb::new().await;
    let mut m1 = begin(&t.db, TxKind::Materializing).await.unwrap();
    let m1_pid = my_pid(&mut m1).await;
    // A second materializing transaction does not wait on the first.
    let m2 = tokio::time::timeout(Duration::from_secs(2), begin(&t.db, TxKind::Materializing)).await;
    let m2 = m2.expect("shared holders do not wait on each other").unwrap();
    // A rule change waits on both, and goes through once they commit.
    let rc = tokio::spawn({
        let db = t.db.clone();
        async move { begin(&db, TxKind::RuleChange).await.map(|tx| tx.kind()) }
    });
    common::wait_for_waiter(&t.admin, &t.name, m1_pid).await;
    m1.commit().await.unwrap();
    m2.commit().await.unwrap();
    assert_eq!(rc.await.unwrap().unwrap(), TxKind::RuleChange);
}

#[tokio::test]
async fn materializing_within_a_deadline_gives_up_at_the_deadline() {
    let t = TestDb::new().await;
    let _a = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let started = Instant::now();
    let r = begin(&t.db, TxKind::MaterializingWithin(Instant::now() + Duration::from_millis(400))).await;
    assert!(matches!(r.err(), Some(DbError::LockNotAvailable | DbError::DeadlinePassed)));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn the_rendezvous_assertion_refuses_a_transaction_without_it() {
    let t = TestDb::new().await;
    let mut p = begin(&t.db, TxKind::Plain).await.unwrap();
    let e = sqlx::query("SELECT core.assert_rendezvous()").execute(p.conn()).await.unwrap_err();
    assert!(e.to_string().contains("materialization_rendezvous_missing"), "{e}");
    assert_eq!(member_console::db::sqlstate(&e).as_deref(), Some("MC001"));
    drop(p);
    for kind in [TxKind::Materializing, TxKind::RuleChange] {
        let mut tx = begin(&t.db, kind).await.unwrap();
        sqlx::query("SELECT core.assert_rendezvous()").execute(tx.conn()).await.unwrap();
        tx.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn a_forged_or_copied_rendezvous_mark_is_refused() {
    let t = TestDb::new().await;
    let mut c = t.runtime_conn().await;
    let assert_refused = |e: sqlx::Error| {
        assert_eq!(member_console::db::sqlstate(&e).as_deref(), Some("MC001"), "{e}");
    };
    // The old mark, and anything else the run-time role might write, is not a seal.
    for forged in ["yes", "0000", "x"] {
        sqlx::query("BEGIN").execute(&mut c).await.unwrap();
        for setting in ["core.holds_rendezvous", "core.rendezvous_mark"] {
            sqlx::query("SELECT set_config($1, $2, true)").bind(setting).bind(forged).execute(&mut c).await.unwrap();
        }
        assert_refused(sqlx::query("SELECT core.assert_rendezvous()").execute(&mut c).await.unwrap_err());
        sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
    }
    // A true mark copied from a transaction that held the rendezvous is refused in the next.
    sqlx::query("BEGIN").execute(&mut c).await.unwrap();
    sqlx::query("SELECT core.take_rendezvous_shared()").execute(&mut c).await.unwrap();
    sqlx::query("SELECT core.assert_rendezvous()").execute(&mut c).await.unwrap();
    let mark: String =
        sqlx::query_scalar("SELECT current_setting('core.rendezvous_mark')").fetch_one(&mut c).await.unwrap();
    sqlx::query("COMMIT").execute(&mut c).await.unwrap();
    sqlx::query("BEGIN").execute(&mut c).await.unwrap();
    sqlx::query("SELECT set_config('core.rendezvous_mark', $1, true)").bind(&mark).execute(&mut c).await.unwrap();
    assert_refused(sqlx::query("SELECT core.assert_rendezvous()").execute(&mut c).await.unwrap_err());
    sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
    // And the role can neither compute a seal nor read the secret behind it.
    for sql in ["SELECT core.rendezvous_seal()", "SELECT secret FROM core.rendezvous_secret"] {
        let e = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await.unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{sql}: {e}");
    }
}

/// The `_held` bodies skip the assertion their public entries make (migration 0023): the run-time
/// role may call none of them, and nobody but their owner may; each entry still refuses a
/// transaction without the rendezvous before any of its work.
#[tokio::test]
async fn the_held_bodies_are_reachable_only_through_an_entry_that_asserts_the_rendezvous() {
    let t = TestDb::new().await;
    let (bodies, entries): (Vec<String>, Vec<String>) = {
        let rows: Vec<(String, String)> = t
            .all(sqlx::query_as(
                "SELECT p.oid::regprocedure::text, e.oid::regprocedure::text
                   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                   JOIN pg_proc e ON e.pronamespace = p.pronamespace AND e.proname || '_held' = p.proname
                                 AND e.proargtypes = p.proargtypes
                  WHERE n.nspname = 'core' AND p.proname LIKE '%\\_held' ORDER BY 1",
            ))
            .await;
        rows.into_iter().unzip()
    };
    assert_eq!(bodies.len(), 8, "every held body has its entry: {bodies:?}");
    let open: Vec<String> = t
        .all(sqlx::query_scalar(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
              WHERE n.nspname = 'core' AND p.proname LIKE '%\\_held' AND a.grantee <> p.proowner",
        ))
        .await;
    assert!(open.is_empty(), "held bodies others may execute: {open:?}");
    let mut c = t.runtime_conn().await;
    let call = |f: &str| {
        // Each argument NULL of its type: the refusal comes before any of them is read.
        let (name, args) = f.split_once('(').unwrap();
        let args = args.trim_end_matches(')');
        let nulls: Vec<String> =
            if args.is_empty() { vec![] } else { args.split(',').map(|a| format!("NULL::{a}")).collect() };
        format!("SELECT {name}({})", nulls.join(", "))
    };
    for body in &bodies {
        let e = sqlx::query(sqlx::AssertSqlSafe(call(body))).execute(&mut c).await.unwrap_err();
        assert!(e.to_string().contains("permission denied"), "{body}: {e}");
    }
    for entry in entries.iter().filter(|e| !e.starts_with("core.lock_pool(")) {
        let e = sqlx::query(sqlx::AssertSqlSafe(call(entry))).execute(&mut c).await.unwrap_err();
        assert_eq!(member_console::db::sqlstate(&e).as_deref(), Some("MC001"), "{entry}: {e}");
    }
}

#[tokio::test]
async fn security_definer_functions_pin_their_search_path_and_nobody_makes_temporary_objects() {
    let t = TestDb::new().await;
    let loose: Vec<String> = t
        .all(sqlx::query_scalar(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE p.prosecdef AND n.nspname IN ('core', 'fedwiki', 'domains', 'integration')
           AND NOT coalesce('search_path=pg_catalog, core, pg_temp' = ANY (p.proconfig), false)",
        ))
        .await;
    assert!(loose.is_empty(), "SECURITY DEFINER without the pinned search_path: {loose:?}");
    let mut c = t.runtime_conn().await;
    let e = sqlx::query("CREATE TEMPORARY TABLE shadow (x int)").execute(&mut c).await.unwrap_err();
    assert!(e.to_string().contains("permission denied"), "{e}");
}

#[tokio::test]
async fn the_run_time_role_has_backstop_bounds_and_a_plain_transaction_sets_none_of_its_own() {
    let t = TestDb::new().await;
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    assert_eq!(show(&mut tx, "statement_timeout").await, "1min");
    assert_eq!(show(&mut tx, "idle_in_transaction_session_timeout").await, "1min");
    assert_eq!(show(&mut tx, "lock_timeout").await, "0");
    drop(tx);
    // The kinds keep their own bounds on top.
    let mut tx = begin(&t.db, TxKind::Materializing).await.unwrap();
    assert_eq!(show(&mut tx, "lock_timeout").await, "5s");
}

#[tokio::test]
async fn a_rollback_releases_every_advisory_lock() {
    let t = TestDb::new().await;
    let mut a = begin(&t.db, TxKind::RuleChange).await.unwrap();
    a.lock(&member_console::db::keys::AdvisoryKey::Workspace("w-1".into())).await.unwrap();
    let pid = my_pid(&mut a).await;
    assert_eq!(common::granted_locks(&t.admin, pid).await.iter().filter(|(k, _, _)| k == "advisory").count(), 2);
    a.rollback().await.unwrap();
    // The connection went back to the pool; nothing advisory is held by it any more.
    let held: i64 = t
        .one(sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'").bind(pid))
        .await;
    assert_eq!(held, 0);
}

#[tokio::test]
async fn sign_in_takes_the_address_row_then_the_pair_row_as_it_declares() {
    use member_console::services::auth::{AuthError, Email, SIGN_IN_LOCKS, sign_in};
    let t = demo_db().await;
    let email = Email::parse(member_console::demo::MEMBER_EMAIL).unwrap();
    assert_eq!(SIGN_IN_LOCKS.locks, &[Lock::SignInAddressRow, Lock::SignInThrottleRow]);

    t.run(sqlx::query(
        "INSERT INTO core.sign_in_addresses (address, window_started_at, failures) VALUES ('127.0.0.1', now(), 0)",
    ))
    .await;
    // Transaction A holds the (email, address) row, as an attempt on the same pair would.
    let (mut a, a_pid) = t.runtime_begin().await;
    sqlx::query("INSERT INTO core.sign_in_throttle (email_key, address, failures) VALUES (lower($1), '127.0.0.1', 1)")
        .bind(email.as_str())
        .execute(&mut a)
        .await
        .unwrap();
    // B, the path, takes the address row and then waits for the pair's row.
    let db = t.db.clone();
    let e2 = email.clone();
    let b = tokio::spawn(async move { sign_in(&db, &e2, "wrong password", "127.0.0.1", None).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    // The address row, by its key (made before B ran, so the administrator can read it: a row the
    // waiting transaction inserted itself is invisible to the row-level reader). B waits on A's
    // uncommitted insert of the pair's row, a wait on no row yet.
    let address_row = common::locks::Expect::row("core.sign_in_addresses", "127.0.0.1");
    common::locks::assert_holds(&t.admin, waiter, &[address_row]).await;
    // A's attempt counts, so B's reads it: two failures.
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    assert!(matches!(b.await.unwrap(), Err(AuthError::InvalidCredentials)));
    let failures: i32 =
        t.one(sqlx::query_scalar("SELECT failures FROM core.sign_in_throttle WHERE address = '127.0.0.1'")).await;
    assert_eq!(failures, 2);
}

#[tokio::test]
async fn a_compaction_waits_on_another_and_folds_each_row_once_while_inserts_never_wait() {
    use member_console::services::organizations::{COMPACT_COUNTS_LOCKS, compact_counts};
    let t = TestDb::new().await;
    let count = async || -> (i64, i64) {
        t.one(sqlx::query_as(
            "SELECT (SELECT coalesce(sum(delta), 0)::bigint FROM core.organization_counts),
                    (SELECT count(*) FROM core.organizations)",
        ))
        .await
    };
    for i in 0..3 {
        t.run(sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO core.organizations (name) VALUES ('Counted {i}')"
        ))))
        .await;
    }

    // A compacts and holds its transaction open.
    let (mut a, a_pid) = t.runtime_begin().await;
    let folded: i64 = sqlx::query_scalar("SELECT core.compact_organization_counts()").fetch_one(&mut a).await.unwrap();
    assert_eq!(folded, 2, "three rows became one");
    // An organization created meanwhile appends without waiting.
    let started = Instant::now();
    t.run(sqlx::query("INSERT INTO core.organizations (name) VALUES ('Counted meanwhile')")).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!common::anyone_waits_on(&t.admin, &t.name, a_pid).await);
    // B, the path, waits on the rows A deleted.
    let db = t.db.clone();
    let b = tokio::spawn(async move { compact_counts(&db).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    // What B waits for is a row of the counts (it holds the row's tuple lock while it waits).
    assert_eq!(COMPACT_COUNTS_LOCKS.locks, &[Lock::OrganizationCountRows]);
    let on_counts = common::lock_types_on(&t.admin, waiter, "core.organization_counts").await;
    assert!(on_counts.iter().any(|k| k == "tuple"), "B waits on a count row: {on_counts:?}");
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    // B skips what A folded; nothing is counted twice or lost.
    b.await.unwrap().unwrap();
    let (kept, real) = count().await;
    assert_eq!((kept, real), (4, 4));
    compact_counts(&t.db).await.unwrap();
    assert_eq!(count().await, (4, 4));
    let rows: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.organization_counts")).await;
    assert_eq!(rows, 1, "one row for the one type (none)");
}

#[test]
fn the_docs_page_shows_the_declared_orders() {
    use member_console::{
        db::locks::{ORDERS_BEGIN, ORDERS_END, render_orders, strip_counts},
        lock_paths::declared,
    };
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/database-locks.md")).unwrap();
    let start = page.find(ORDERS_BEGIN).expect("the begin marker") + ORDERS_BEGIN.len();
    let end = page.find(ORDERS_END).expect("the end marker");
    // The observed counts (a stress run's, `lock-orders --observed`) are left out of the comparison.
    assert_eq!(
        strip_counts(page[start..end].trim()),
        strip_counts(render_orders(&declared()).trim()),
        "docs/database-locks.md is out of date: run `member-console lock-orders --observed <stress json>` and paste its output"
    );
}

#[tokio::test]
async fn the_docs_page_shows_the_sql_functions_in_force() {
    use member_console::db::sql_functions::{FUNCTIONS_BEGIN, FUNCTIONS_END, render};
    let t = TestDb::new().await;
    let mut conn = t.admin.acquire().await.unwrap();
    let rendered = render(&mut conn).await.unwrap();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sql-functions.md")).unwrap();
    let start = page.find(FUNCTIONS_BEGIN).expect("the begin marker") + FUNCTIONS_BEGIN.len();
    let end = page.find(FUNCTIONS_END).expect("the end marker");
    assert_eq!(
        page[start..end].trim(),
        rendered.trim(),
        "docs/sql-functions.md is out of date: run `member-console sql-functions` and paste its output"
    );
}

#[tokio::test]
async fn consoles_creating_the_same_role_at_once_all_succeed() {
    let t = TestDb::new().await;
    let role = format!("mc_race_{}", member_console::config::random_hex(6));
    let tries: Vec<_> = (0..8)
        .map(|_| {
            let (admin, role) = (t.admin.clone(), role.clone());
            tokio::spawn(async move { member_console::db::migrate::ensure_role(&admin, &role).await })
        })
        .collect();
    for t in tries {
        t.await.unwrap().expect("a create that loses the race is no error");
    }
    let exists: bool =
        t.one(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)").bind(&role)).await;
    assert!(exists);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP ROLE \"{role}\""))).execute(&t.admin).await.unwrap();
}

#[tokio::test]
async fn a_prepared_statement_is_bounded_by_its_pool_or_by_a_nearer_request_deadline() {
    use member_console::db::{
        Db,
        tx::{REQUEST_DEADLINE, on_prepared},
    };
    let t = TestDb::new().await;
    let db = Db::with_prepared_bound(t.db.pool.clone(), Duration::from_secs(2));
    async fn timeout_of(db: &Db) -> String {
        on_prepared(db, async |c| sqlx::query_scalar("SHOW statement_timeout").fetch_one(c).await).await.unwrap()
    }
    // Outside a request, and under one with more time left than the bound: the pool's own bound,
    // with no statement of its own before the query.
    assert_eq!(timeout_of(&db).await, "2s");
    let roomy = Instant::now() + Duration::from_secs(30);
    assert_eq!(REQUEST_DEADLINE.scope(roomy, timeout_of(&db)).await, "2s");

    // A request with less left than the bound: the time left, and the statement stops there.
    let near = Instant::now() + Duration::from_millis(400);
    let started = Instant::now();
    let sleep = on_prepared(&db, async |c| sqlx::query("SELECT pg_sleep(5)").execute(c).await.map(|_| ()));
    let e = REQUEST_DEADLINE.scope(near, sleep).await.unwrap_err();
    assert!(matches!(e, DbError::DeadlinePassed), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // That connection was closed, not handed back with a bound that is not the pool's.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        assert_eq!(timeout_of(&db).await, "2s");
    }

    // A deadline already passed: nothing is sent.
    let past = Instant::now();
    let e = REQUEST_DEADLINE.scope(past, on_prepared(&db, async |_| Ok(()))).await.unwrap_err();
    assert!(matches!(e, DbError::DeadlinePassed), "{e:?}");
    db.close().await;
}

/// The prepared pool lends connections without a ping (a round trip before every page view's
/// statement): a connection the server ended meanwhile fails the statement, which runs once more
/// on a new connection, so the member's page answers.
#[tokio::test]
async fn a_prepared_statement_on_a_connection_the_server_ended_runs_again_on_a_new_one() {
    use member_console::db::{Db, tx::on_prepared};
    let t = TestDb::new().await;
    let db = Db::new(t.db.pool.clone());
    let pid = async |db: &Db| {
        on_prepared(db, async |c| sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(c).await).await
    };
    let first = pid(&db).await.unwrap();
    // The pool keeps that one connection; the server ends its session, as a restart or an
    // administrator's pg_terminate_backend would.
    let ended: bool = t.one(sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)").bind(first)).await;
    assert!(ended);
    let second = pid(&db).await.expect("the statement ran again on a new connection");
    assert_ne!(second, first);
    // Run once more by the same path, a member's home read answers too.
    member_console::demo::load(&t.db).await.unwrap();
    let again: bool = t.one(sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)").bind(second)).await;
    assert!(again);
    let member: i64 = t
        .one(
            sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = $1")
                .bind(member_console::demo::MEMBER_EMAIL),
        )
        .await;
    let home = member_console::services::reads::member_home(&db, member_console::ids::AccountId(member)).await.unwrap();
    assert!(!home.is_empty());

    // A restart ends every connection the pool keeps: the statement that finds its connection
    // closed runs again on one that answers, not on the next closed one.
    let kept = i64::from(Db::prepared_connections());
    let sleep =
        async || on_prepared(&db, async |c| sqlx::query("SELECT pg_sleep(0.3)").execute(c).await.map(|_| ())).await;
    for done in futures_util::future::join_all((0..kept).map(|_| sleep())).await {
        done.unwrap();
    }
    let ended: i64 = t
        .one(sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
          WHERE datname = current_database() AND usename = 'console_runtime' AND pid <> pg_backend_pid()) t",
        ))
        .await;
    assert!(ended >= kept, "{ended} connections ended");
    let home = member_console::services::reads::member_home(&db, member_console::ids::AccountId(member)).await.unwrap();
    assert!(!home.is_empty());
    db.close().await;
}

#[tokio::test]
async fn databases_of_one_server_migrating_at_once_all_succeed() {
    use sqlx::{Connection, postgres::PgPoolOptions};
    // Every start sets the run-time role's own bounds where missing (`role_backstops`): a row of
    // the server's, not of any database. Eight fresh databases migrating together on one server
    // each check and may write it; they must not fail on one another.
    let root = common::root_admin_url();
    let names: Vec<String> = (0..8).map(|_| format!("mc_test_{}", member_console::config::random_hex(6))).collect();
    let mut conn = sqlx::PgConnection::connect(&root).await.unwrap();
    for n in &names {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{n}\""))).execute(&mut conn).await.unwrap();
    }
    let runs: Vec<_> = names
        .iter()
        .map(|n| {
            let url = common::with_database(&root, n);
            tokio::spawn(async move {
                let admin = PgPoolOptions::new().max_connections(2).connect(&url).await.unwrap();
                let r = member_console::db::migrate::run(&admin, &url, common::TEST_RUNTIME_PASSWORD).await;
                admin.close().await;
                r
            })
        })
        .collect();
    let mut outcomes = vec![];
    for r in runs {
        outcomes.push(r.await.unwrap());
    }
    for n in &names {
        let drop = format!("DROP DATABASE IF EXISTS \"{n}\" WITH (FORCE)");
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&mut conn).await.unwrap();
    }
    for o in outcomes {
        o.expect("every database migrates");
    }
}

#[tokio::test]
async fn replicas_of_one_database_starting_at_once_all_succeed() {
    use sqlx::{Connection, postgres::PgPoolOptions};
    // Every start grants the ledger to the run-time role and revokes TEMP on the database: two
    // starts on one database update the same catalog rows, and the loser saw "tuple concurrently
    // updated" and did not start (often, not always). Migrated first, as a running replica's
    // database is; then eight start together, twice.
    let root = common::root_admin_url();
    let name = format!("mc_test_{}", member_console::config::random_hex(6));
    let mut conn = sqlx::PgConnection::connect(&root).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut conn).await.unwrap();
    let url = common::with_database(&root, &name);
    let start = |url: String| async move {
        let admin = PgPoolOptions::new().max_connections(2).connect(&url).await.unwrap();
        let r = member_console::db::migrate::run(&admin, &url, common::TEST_RUNTIME_PASSWORD).await;
        admin.close().await;
        r
    };
    let first = start(url.clone()).await;
    let mut outcomes = vec![first];
    for _ in 0..2 {
        let runs: Vec<_> = (0..8).map(|_| tokio::spawn(start(url.clone()))).collect();
        for r in runs {
            outcomes.push(r.await.unwrap());
        }
    }
    let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop)).execute(&mut conn).await.unwrap();
    for o in outcomes {
        o.expect("every replica starts");
    }
}

// A refusal's locks are gone when it is answered ----------------------------------------------------

/// Run `checks` (label, SQL answering one bool: true when the lock is free) from a thread of its
/// own, with its own runtime and its own connection as the administrator, and return the labels
/// answered false. The caller's thread blocks on the join, so a task its current-thread runtime
/// spawned (a dropped transaction's ROLLBACK) cannot run meanwhile: what is free here was freed
/// before the path answered. The caller awaits nothing between the answer and this call.
fn still_held(admin_url: &str, checks: Vec<(&'static str, String)>) -> Vec<&'static str> {
    let url = admin_url.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            let mut held = vec![];
            for (label, sql) in checks {
                // Each check in a transaction of its own; a row still locked fails its NOWAIT.
                sqlx::query("BEGIN").execute(&mut c).await.unwrap();
                let free: Result<bool, _> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut c).await;
                sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
                match free {
                    Ok(true) => {}
                    Ok(false) => held.push(label),
                    Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("55P03") => {
                        held.push(label)
                    }
                    Err(e) => panic!("{label}: {e}"),
                }
            }
            held
        })
    })
    .join()
    .unwrap()
}

/// No advisory lock of key `key_sql` is held in the test's database.
fn advisory_free(label: &'static str, key_sql: &str) -> (&'static str, String) {
    (
        label,
        format!(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
              WHERE d.datname = current_database() AND l.locktype = 'advisory' AND l.granted
                AND ((l.classid::bigint << 32) | l.objid::bigint) = {key_sql})"
        ),
    )
}

/// The row `select` names can be locked at once (its SELECT with FOR UPDATE NOWAIT).
fn row_free(label: &'static str, select: &str) -> (&'static str, String) {
    (label, format!("SELECT true FROM ({select} FOR UPDATE NOWAIT) r"))
}

/// No transaction of the test's database is left open (other than the checker's own).
fn no_open_transaction() -> (&'static str, String) {
    (
        "an open transaction",
        "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
          AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%')"
            .into(),
    )
}

#[tokio::test]
async fn a_rule_changes_refusal_has_released_the_exclusive_rendezvous_and_the_set_row_when_it_is_answered() {
    use member_console::services::{ServiceError, rule_changes};
    let t = demo_db().await;
    let basic = common::pages::set_id(&t, "Basic").await;
    let now: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT numeric_value FROM core.entitlement_set_rules
              WHERE entitlement_set_id = $1 AND resource_key = 'fedwiki.active_sites'",
            )
            .bind(basic),
        )
        .await;
    // The rules as they are: refused ("Nothing changed") after the rendezvous and the set row.
    let submitted = crate::common::rules(&[("fedwiki.active_sites", &now.to_string())]);
    let e = rule_changes::commit_rule_change_batch(
        &t.db,
        member_console::ids::EntitlementSetId(basic),
        &submitted,
        None,
        &"t".into(),
        100,
    )
    .await
    .unwrap_err();
    assert!(matches!(&e, ServiceError::Invalid(_)), "{e:?}");
    let held = still_held(
        &t.admin_url,
        vec![
            advisory_free("the rendezvous", "core.rendezvous_key()"),
            row_free("the set row", &format!("SELECT 1 FROM core.entitlement_sets WHERE entitlement_set_id = {basic}")),
            no_open_transaction(),
        ],
    );
    assert!(held.is_empty(), "still held when the refusal was answered: {held:?}");
}

#[tokio::test]
async fn a_grants_refusal_has_released_the_pool_row_and_the_lineage_head_when_it_is_answered() {
    use member_console::services::{ServiceError, grants};
    let t = demo_db().await;
    let org = common::acts::community_org(&t, "Refused Grants Ltd").await;
    let grant = common::acts::grant(&t, org.organization_id, common::acts::product_id(&t, "Basic").await).await;
    grants::revoke_grant(&t.db, grant, None, &member_console::services::grants::Reason::parse("once").unwrap())
        .await
        .unwrap();
    let pool: i64 = t
        .one(
            sqlx::query_scalar("SELECT pool_id FROM core.resource_pools WHERE organization_id = $1 AND is_default")
                .bind(org.organization_id),
        )
        .await;
    // Revoked already: refused after the rendezvous, the pool row and the lineage head. Nothing is
    // awaited between the answer and the check.
    let e =
        grants::revoke_grant(&t.db, grant, None, &member_console::services::grants::Reason::parse("twice").unwrap())
            .await
            .unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("already")), "{e:?}");
    let held = still_held(
        &t.admin_url,
        vec![
            advisory_free("the rendezvous", "core.rendezvous_key()"),
            row_free("the pool row", &format!("SELECT 1 FROM core.resource_pools WHERE pool_id = {pool}")),
            row_free("the lineage head", &format!("SELECT 1 FROM core.grants WHERE grant_id = {grant}")),
            no_open_transaction(),
        ],
    );
    assert!(held.is_empty(), "still held when the refusal was answered: {held:?}");
}

#[tokio::test]
async fn a_fedwiki_intakes_refusal_has_released_the_instance_lock_when_it_is_answered() {
    use member_console::{services::fedwiki, states::RequestKind};
    let s = crate::sites::setup("Basic").await;
    let site = s.created("busy").await;
    fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Park).await.unwrap();
    // A second act while the park is in flight: refused after the instance lock.
    let e = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Archive).await.unwrap_err();
    assert!(e.to_string().contains("already in progress"), "{e}");
    let held = still_held(
        &s.t.admin_url,
        vec![
            advisory_free("the instance lock", &format!("core.lifecycle_instance_key('{site}')")),
            no_open_transaction(),
        ],
    );
    assert!(held.is_empty(), "still held when the refusal was answered: {held:?}");
}

#[tokio::test]
async fn a_registry_refusal_has_released_the_registry_lock_when_it_is_answered() {
    use member_console::services::fedwiki::{self, names::SiteName};
    let s = crate::sites::setup("Basic").await;
    s.created("taken").await;
    // The name is placed: refused after the registry lock.
    let e =
        fedwiki::create_site(&s.t.db, &s.settings, s.who, s.org, &SiteName::parse("taken").unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("is taken"), "{e}");
    let held = still_held(
        &s.t.admin_url,
        vec![advisory_free("the registry lock", "core.registry_key()"), no_open_transaction()],
    );
    assert!(held.is_empty(), "still held when the refusal was answered: {held:?}");
}
