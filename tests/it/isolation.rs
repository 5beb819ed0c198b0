//! Issue 36, defect 4: every session the console opens runs at READ COMMITTED, whatever the
//! database defaults to. Each test sets its database's `default_transaction_isolation` to
//! REPEATABLE READ (as an operator's server might), reconnects the console, and runs a
//! count-after-lock path whose lock wait ends after the other side's commit: under REPEATABLE
//! READ that lock fails with "could not serialize access due to concurrent update"; at READ
//! COMMITTED it waits, then counts what the other committed.

use crate::common;

use std::time::Duration;

use common::{
    TestDb,
    locks::{Expect, RowMode},
    pause_writes_on,
};
use member_console::{
    db::{Db, keys::AdvisoryKey, migrate},
    ids::PoolId,
    services::{
        fedwiki::{
            self, gate,
            gate::Gate,
            maintenance,
            record::{self, Recorded},
        },
        plan_acts::{self as pa, Disposition},
        rule_changes as rc,
    },
    states::{RequestKind, SiteStatus},
};
use sqlx::{Connection, PgConnection};

/// The database defaults to REPEATABLE READ from now on, and the test's console handle is a new
/// pool (new sessions, which start under that default unless the console says otherwise).
async fn repeatable_read_by_default(t: &mut TestDb) {
    let sql = format!("ALTER DATABASE \"{}\" SET default_transaction_isolation = 'repeatable read'", t.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&t.admin).await.unwrap();
    let opts = migrate::runtime_options(&t.admin_url, common::TEST_RUNTIME_PASSWORD).unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(10).connect_with(opts).await.unwrap();
    let mut db = Db::new(pool);
    db.lock_timeout = Duration::from_secs(5);
    std::mem::replace(&mut t.db, db).close().await;
    // A session of the role that does not ask for anything gets the database's default.
    let plain: sqlx::postgres::PgConnectOptions = t.admin_url.parse().unwrap();
    let plain = plain.username(migrate::RUNTIME_ROLE).password(common::TEST_RUNTIME_PASSWORD);
    let mut c = PgConnection::connect_with(&plain).await.unwrap();
    let level: String = sqlx::query_scalar("SHOW default_transaction_isolation").fetch_one(&mut c).await.unwrap();
    assert_eq!(level, "repeatable read", "the database defaults to REPEATABLE READ");
}

async fn session_isolation(db: &Db) -> (String, String) {
    let mut c = db.pool.acquire().await.unwrap();
    let session: String = sqlx::query_scalar("SHOW default_transaction_isolation").fetch_one(&mut *c).await.unwrap();
    let statement: String =
        sqlx::query_scalar("SELECT current_setting('transaction_isolation')").fetch_one(&mut *c).await.unwrap();
    (session, statement)
}

#[tokio::test]
async fn the_consoles_sessions_and_one_round_trip_transactions_run_at_read_committed_under_a_repeatable_read_default() {
    let mut t = TestDb::new().await;
    repeatable_read_by_default(&mut t).await;
    let rc = ("read committed".to_string(), "read committed".to_string());
    assert_eq!(session_isolation(&t.db).await, rc, "the run-time pool");
    let mut p = t.db.prepared.acquire().await.unwrap();
    let prepared: String = sqlx::query_scalar("SHOW default_transaction_isolation").fetch_one(&mut *p).await.unwrap();
    assert_eq!(prepared, "read committed", "the prepared pool");
    // A one-round-trip transaction (`tx::once`, as the gate and a move run) says so itself too.
    let rows = member_console::db::tx::once(
        &t.db,
        member_console::db::TxKind::Plain,
        "SELECT current_setting('transaction_isolation')".into(),
    )
    .await
    .unwrap();
    let level: String = sqlx::Row::get(&rows[0], 0);
    assert_eq!(level, "read committed");
}

#[tokio::test]
async fn two_slot_gates_on_the_last_slot_queue_and_the_second_counts_the_firsts_hold_under_a_repeatable_read_default() {
    let mut s = crate::sites::setup("Free").await;
    repeatable_read_by_default(&mut s.t).await;
    let (a, b) = (s.create("gate-a").await.unwrap(), s.create("gate-b").await.unwrap());
    let (ra, rb) = (s.request(a).await, s.request(b).await);
    // The first gate paused at its hold's insert: it holds its instance lock and the usage row.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.slot_holds").await;
    let db = s.t.db.clone();
    let first = tokio::spawn(async move { gate::hold_site_slot(&db, &ra).await });
    let first_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    // The second takes its snapshot now, then waits for the usage row the first holds.
    let db = s.t.db.clone();
    let second = tokio::spawn(async move { gate::hold_site_slot(&db, &rb).await });
    common::wait_for_waiter(&s.t.admin, &s.t.name, first_pid).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(first.await.unwrap().unwrap(), Gate::Held);
    // No serialization failure: the second's lock read the first's commit, and its count the hold.
    assert_eq!(second.await.unwrap().unwrap(), Gate::Full { used: 1, limit: 1 });
    crate::sites::assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_recount_waiting_on_a_record_steps_usage_row_counts_what_it_committed_under_a_repeatable_read_default() {
    let mut s = crate::sites::setup("Basic").await;
    let site = s.created("counted").await;
    repeatable_read_by_default(&mut s.t).await;
    assert_eq!(s.used().await, 1);
    // The park's record step, paused at its request rows (written last): it has written the
    // status and holds the usage row it recounted.
    let id = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Park).await.unwrap();
    let req = s.request(id).await;
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.lifecycle_requests").await;
    let db = s.t.db.clone();
    let record = tokio::spawn(async move {
        record::finish_all_with(&db, &[req], record::Activity::Status { status: SiteStatus::Parked }).await
    });
    let record_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    let usage = format!("{},fedwiki.active_sites", s.pool.0);
    let held = [
        Expect::advisory(AdvisoryKey::LifecycleInstance(site.clone())),
        Expect::row("fedwiki.sites", &site),
        Expect::row_in("core.numeric_entitlement_usage", usage, RowMode::Update),
    ];
    common::locks::assert_holds(&s.t.admin, record_pid, &held).await;
    // usage.RecountAll (one autocommit call per pool) waits for that row.
    let db = s.t.db.clone();
    let recount = tokio::spawn(async move { maintenance::recount_all(&db).await });
    common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(record.await.unwrap().unwrap(), Recorded::Done { .. }));
    recount.await.unwrap().expect("the recount runs without a serialization failure");
    assert_eq!(s.status("counted").await, "parked");
    assert_eq!(s.used().await, 0, "the recount counted the parked site out");
    crate::sites::assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_move_waiting_on_a_rule_change_reads_its_rules_and_settles_under_a_repeatable_read_default() {
    let common::acts::Demo { mut t, community, support, .. } = common::acts::demo().await;
    let created = common::acts::orgs_of_type(&t, community, "Isolated", 2).await;
    let pool: PoolId = created[0].pool_id;
    let act = common::acts::change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    common::acts::list_batch(&t, act, community, 500).await;
    repeatable_read_by_default(&mut t).await;
    // A rule change of the Free set (the floor these organizations hold), paused after its
    // exclusive rendezvous: the admin holds the set row it takes next.
    let free = common::acts::id_by_name(&t, "entitlement_sets", "entitlement_set_id", "Free").await;
    let (mut hold, hold_pid) = common::hold_open(
        &t,
        &format!("SELECT 1 FROM core.entitlement_sets WHERE entitlement_set_id = {free} FOR UPDATE"),
    )
    .await;
    let db = t.db.clone();
    let rules = crate::common::rules(&[("fedwiki.active_sites", "2")]);
    let set = member_console::ids::EntitlementSetId(free);
    let commit =
        tokio::spawn(async move { rc::commit_rule_change_batch(&db, set, &rules, None, &"".into(), 100).await });
    let committer = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, committer, &[Expect::rendezvous_exclusive()]).await;
    common::locks::assert_waits(&t.admin, committer, hold_pid, &Expect::row("core.entitlement_sets", free)).await;
    // One organization's move (EnactObligation, one round trip) waits on the rendezvous.
    let db = t.db.clone();
    let mover = tokio::spawn(async move { pa::enact_obligation(&db, act, pool, None).await });
    common::wait_for_waiter(&t.admin, &t.name, committer).await;
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    assert!(commit.await.unwrap().unwrap().settled_inline, "the change settled the carriers in its commit");
    assert!(mover.await.unwrap().expect("the move runs without a serialization failure"), "it moved");
    assert_eq!(common::acts::obligation(&t, act, pool).await.0, "migrated");
    assert_eq!(common::acts::stale_pools(&t).await, vec![], "entitlements equal a fresh materialization");
}
