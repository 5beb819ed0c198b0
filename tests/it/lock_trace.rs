//! The lock trace and the row-level harness (issue 36): a path walked lock by lock, the trace it
//! leaves, and the defects found by reading that pauses at the exact step now show: the forgeable
//! pool mark (defect 3) and the multi-row writes with no order (defect 6).

use crate::common;

use std::time::Duration;

use common::{
    TestDb,
    acts::{community_org, grant, grant_status, grant_with, org_of_type, product_id, type_id},
    locks::{Expect, LockWalk, assert_waits, rows_held},
    pages::demo_db,
};
use member_console::{
    db::{TxKind, begin, trace},
    ids::{EntitlementSetId, PoolId},
    services::{grants, rule_changes as rc},
};

#[tokio::test]
async fn a_revocation_walked_lock_by_lock_takes_the_rendezvous_then_the_pool_row_then_the_lineage_head() {
    let t = demo_db().await;
    let org = community_org(&t, "Walked").await;
    let g = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    let expected = [
        Expect::rendezvous_shared(),
        Expect::row("core.resource_pools", org.pool_id.0),
        Expect::row("core.grants", g.0),
    ];
    let out = LockWalk::run(&t, &grants::REVOKE_GRANT_LOCKS, &expected, |db| async move {
        grants::revoke_grant(&db, g, None, &member_console::services::grants::Reason::parse("walked").unwrap()).await
    })
    .await;
    assert_eq!(out.unwrap(), g);
    assert_eq!(grant_status(&t, g).await, "revoked", "the walk changed nothing of the path's outcome");
}

/// A trace row as the test reads it: the lock, its key, its ordinal, its path.
type TracedLock = (String, Option<String>, Option<i64>, Option<String>);

#[tokio::test]
async fn the_trace_records_a_revocations_locks_in_order_under_its_path_and_nothing_when_off() {
    let t = demo_db().await;
    let org = community_org(&t, "Traced").await;
    let g = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    // Off (the default): nothing is written, though the SQL functions run their guards.
    grants::revoke_grant(&t.db, g, None, &member_console::services::grants::Reason::parse("untraced").unwrap())
        .await
        .unwrap();
    let none: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.lock_trace")).await;
    assert_eq!(none, 0);

    let g = grant(&t, org.organization_id, product_id(&t, "Pro").await).await;
    let traced = t.traced_db().await;
    grants::revoke_grant(&traced, g, None, &member_console::services::grants::Reason::parse("traced").unwrap())
        .await
        .unwrap();
    let rows: Vec<TracedLock> = t
        .all(
            sqlx::query_as(
                "SELECT lock, key, ordinal, path FROM core.lock_trace
              WHERE xact = (SELECT xact FROM core.lock_trace WHERE lock = 'GrantLineageHead' AND key = $1)
              ORDER BY seq",
            )
            .bind(g.0.to_string()),
        )
        .await;
    let locks: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    // The locks in order, then the markers of the sub-steps it ran under the pool row (the
    // spec's paths 11, 10 and 9).
    assert_eq!(locks, ["path", "RendezvousShared", "PoolRow", "GrantLineageHead", "step", "step", "step"], "{rows:?}");
    let steps: Vec<&str> = rows[4..].iter().filter_map(|r| r.1.as_deref()).collect();
    assert_eq!(
        steps,
        ["ResumeReplacedGrantsTx", "DeliverDisplacedSubscriptionsTx", "RequestPoolSubscriptionReconciles"]
    );
    assert!(rows.iter().all(|r| r.3.as_deref() == Some("RevokeGrantTx")), "every row carries its path: {rows:?}");
    assert_eq!(rows[2].1.as_deref(), Some(org.pool_id.0.to_string().as_str()));
    assert_eq!(rows[2].2, Some(org.pool_id.0), "a pool row carries its pool_id as the order's ordinal");
    trace::disable();
}

// Defect 3 -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_forged_locked_pool_mark_does_not_skip_the_pool_rows_lock() {
    let t = demo_db().await;
    let org = community_org(&t, "Forged").await;
    let (mut a, a_pid) = common::acts::hold_pool(&t, org.pool_id).await;
    // B: the run-time role writes the mark that made every conferral function skip the row's
    // FOR UPDATE, then materializes the pool.
    let db = t.db.clone();
    let pool = org.pool_id;
    let b = tokio::spawn(async move {
        let mut tx = begin(&db, TxKind::Materializing).await.unwrap();
        let b_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(tx.conn()).await.unwrap();
        sqlx::query("SELECT set_config('core.locked_pool', $1, true)")
            .bind(pool.0.to_string())
            .execute(tx.conn())
            .await
            .unwrap();
        let r = sqlx::query("SELECT core.materialize_pool($1)").bind(pool.0).execute(tx.conn()).await.map(|_| ());
        tx.commit().await.unwrap();
        (b_pid, r)
    });
    let b_pid = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    // It still waits on A for that pool's row.
    assert_waits(&t.admin, b_pid, a_pid, &Expect::row("core.resource_pools", pool.0)).await;
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
    let (pid, r) = b.await.unwrap();
    assert_eq!(pid, b_pid);
    r.unwrap();
}

// Defect 6 -------------------------------------------------------------------------------------------

/// A rule change of two acts owed by one pool, both failed (so a Retry brings them forward), the
/// second act's row stored before the first's: the change, the acts (ascending), the pool.
async fn two_failed_obligations(t: &TestDb) -> (i64, [i64; 2], PoolId) {
    let org = org_of_type(t, "Owing", type_id(t, "Community").await).await;
    grant_with(t, org.organization_id, product_id(t, "Basic").await, 1, None).await;
    let basic = EntitlementSetId(common::acts::id_by_name(t, "entitlement_sets", "entitlement_set_id", "Basic").await);
    let rules = crate::common::rules(&[("fedwiki.active_sites", "5"), ("support.priority", "yes")]);
    // Above the sync cap (0): the drain lists the pools, here by hand.
    let c = rc::commit_rule_change_batch(&t.db, basic, &rules, None, &"".into(), 0).await.unwrap();
    let change = c.change_id.0;
    let mut tx = begin(&t.db, TxKind::Materializing).await.unwrap();
    sqlx::query("SELECT core.list_rule_change_obligations($1, 100)").bind(change).execute(tx.conn()).await.unwrap();
    tx.commit().await.unwrap();
    let acts: Vec<i64> = t
        .all(
            sqlx::query_scalar(
                "SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1 ORDER BY act_id",
            )
            .bind(change),
        )
        .await;
    assert_eq!(acts.len(), 2);
    t.run(
        sqlx::query(
            "UPDATE core.entitlement_set_change_obligations SET state = 'failed', last_error = 'x' WHERE pool_id = $1",
        )
        .bind(org.pool_id.0),
    )
    .await;
    // The first act's row written again: its new version is stored after the second's.
    t.run(
        sqlx::query(
            "UPDATE core.entitlement_set_change_obligations SET attempts = attempts WHERE act_id = $1 AND pool_id = $2",
        )
        .bind(acts[0])
        .bind(org.pool_id.0),
    )
    .await;
    (change, [acts[0], acts[1]], org.pool_id)
}

/// Retry's statement (store::bring_failed_forward), as the administrator runs it.
const RETRY: &str = "UPDATE core.entitlement_set_change_obligations o SET next_attempt_at = now()
     WHERE (o.act_id, o.pool_id) IN (
         SELECT f.act_id, f.pool_id FROM core.entitlement_set_change_obligations f
         JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE a.change_id = $1 AND f.state = 'failed' ORDER BY f.pool_id, f.act_id FOR UPDATE OF f)";

#[tokio::test]
async fn a_drains_settle_and_a_retry_take_one_pools_obligation_rows_in_act_order_and_never_deadlock() {
    let t = demo_db().await;
    let (change, [first, second], pool) = two_failed_obligations(&t).await;
    // The drain's settle, paused right after its pool row (its second lock, after the rendezvous).
    let mut walk = LockWalk::start(&t, &rc::DRAIN_CHANGE_LOCKS, 3, move |db| async move {
        let mut tx = member_console::db::begin_for(&db, TxKind::Materializing, &rc::DRAIN_CHANGE_LOCKS).await?;
        // Whatever plan the settle's statements get (here a scan in storage order, as a large or
        // bloated table may get), the rows must be taken in act order.
        sqlx::raw_sql("SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off").execute(tx.conn()).await?;
        let settled: bool = sqlx::query_scalar("SELECT core.settle_change_pool($1, $2)")
            .bind(change)
            .bind(pool.0)
            .fetch_one(tx.conn())
            .await?;
        tx.commit().await?;
        Ok::<_, member_console::db::DbError>(settled)
    })
    .await;
    walk.assert_holds_exactly(&[Expect::rendezvous_shared()]).await;
    assert!(walk.step().await, "paused after the pool row");
    walk.assert_holds_exactly(&[Expect::rendezvous_shared(), Expect::row("core.resource_pools", pool.0)]).await;
    let settle_pid = walk.paused_pid();
    // A Retry's statement has locked the pool's first row in its (pool_id, act_id) order.
    let mut retry = t.admin.begin().await.unwrap();
    let retry_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *retry).await.unwrap();
    sqlx::query("SELECT 1 FROM core.entitlement_set_change_obligations WHERE act_id = $1 AND pool_id = $2 FOR UPDATE")
        .bind(first)
        .bind(pool.0)
        .execute(&mut *retry)
        .await
        .unwrap();
    // The settle goes on: it waits on the Retry for the first act's row, holding no other
    // obligation row (before the fix its bare UPDATE held the second act's row, stored first).
    walk.release().await;
    let first_row = Expect::row("core.entitlement_set_change_obligations", format!("{first},{}", pool.0));
    assert_waits(&t.admin, settle_pid, retry_pid, &first_row).await;
    assert_eq!(rows_held(&t.admin, settle_pid, "core.entitlement_set_change_obligations").await, vec![]);
    // The Retry takes the rest of its rows (the second act's) and commits: no deadlock.
    let n = sqlx::query(RETRY).bind(change).execute(&mut *retry).await.unwrap().rows_affected();
    assert_eq!(n, 2, "the Retry brought both failed rows forward");
    retry.commit().await.unwrap();
    assert!(walk.finish().await.unwrap(), "the settle settled the pool after the Retry");
    let states: Vec<String> = t
        .all(
            sqlx::query_scalar(
                "SELECT state FROM core.entitlement_set_change_obligations WHERE pool_id = $1 ORDER BY act_id",
            )
            .bind(pool.0),
        )
        .await;
    assert_eq!(states, ["settled", "settled"]);
    let _ = second;
}

#[tokio::test]
async fn a_site_write_and_a_release_of_its_names_take_its_placement_rows_in_hostname_order() {
    let s = crate::sites::setup("Basic").await;
    let site = s.created("ordered").await;
    let own: String =
        s.t.one(sqlx::query_scalar("SELECT hostname FROM domains.placements WHERE object_id = $1").bind(&site)).await;
    // A second name of the site, before its own in hostname order, stored after it.
    let extra = "aaa.example.org";
    assert!(extra < own.as_str());
    s.t.run(
        sqlx::query("INSERT INTO domains.placements (hostname, owner, provider, object_id, servable) SELECT $1, owner, provider, object_id, servable FROM domains.placements WHERE hostname = $2")
            .bind(extra)
            .bind(&own),
    )
    .await;
    // A release of the site's names, paused after the first row in hostname order.
    let mut release = s.t.admin.begin().await.unwrap();
    let release_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *release).await.unwrap();
    sqlx::query("SELECT 1 FROM domains.placements WHERE hostname = $1 FOR UPDATE")
        .bind(extra)
        .execute(&mut *release)
        .await
        .unwrap();
    // A status write on the site: its trigger changes both rows' flag.
    let db = s.t.db.clone();
    let id = site.clone();
    let write = tokio::spawn(async move {
        let mut tx = begin(&db, TxKind::Plain).await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(tx.conn()).await.unwrap();
        let r = sqlx::query("UPDATE fedwiki.sites SET status = 'parked' WHERE site_id = $1")
            .bind(&id)
            .execute(tx.conn())
            .await;
        match r {
            Ok(_) => tx.commit().await.map(|_| pid).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
    let writer = common::wait_for_waiter(&s.t.admin, &s.t.name, release_pid).await;
    // The trigger waits on the release for the first row, holding no placement row (before the
    // fix it had updated the site's own row, stored first, and held it).
    assert_waits(&s.t.admin, writer, release_pid, &Expect::row("domains.placements", extra)).await;
    assert_eq!(rows_held(&s.t.admin, writer, "domains.placements").await, vec![]);
    // The release takes its next row and deletes both: no deadlock.
    sqlx::query("SELECT 1 FROM domains.placements WHERE hostname = $1 FOR UPDATE")
        .bind(&own)
        .execute(&mut *release)
        .await
        .unwrap();
    release.rollback().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), write).await.unwrap().unwrap().expect("the status write committed");
    let flags: Vec<bool> =
        s.t.all(sqlx::query_scalar("SELECT servable FROM domains.placements WHERE object_id = $1").bind(&site)).await;
    assert_eq!(flags, [false, false], "both names stopped serving with the park");
}

// Every path walked -----------------------------------------------------------------------------------

/// Paths walked only inside another path's transaction, under that path's declaration (the pause
/// hook pauses the path a transaction names first): where.
const WALKED_INSIDE: &[(&str, &str)] = &[
    ("RECORD_LIFECYCLE_REQUEST_LOCKS", "inside changeStatus: walk_sites::a_park_without_a_cooldown_walked_..."),
    ("RECORD_FIRST_LIFECYCLE_REQUEST_LOCKS", "inside a create's registry transaction: walk_sites::a_create_walked_..."),
];

/// The rule a path added later falls under: every declaration the lock-order registry lists is
/// walked lock by lock by some test (its name in a walk file), or listed above with where.
#[test]
fn every_declared_path_has_a_row_level_walk() {
    let root = env!("CARGO_MANIFEST_DIR");
    let registry = std::fs::read_to_string(format!("{root}/src/lock_paths.rs")).unwrap();
    let declared: Vec<&str> = registry
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.ends_with("_LOCKS") && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    assert!(declared.len() > 60, "the registry's declarations were not read: {declared:?}");
    let mut walks = String::new();
    for entry in std::fs::read_dir(format!("{root}/tests/it")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("walk_") || name == "lock_trace.rs" {
            walks.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let unwalked: Vec<&&str> = declared
        .iter()
        .filter(|d| !WALKED_INSIDE.iter().any(|(w, _)| w == *d))
        .filter(|d| {
            // Its name as a whole word in a walk file (not only as a part of a longer name).
            !walks.match_indices(**d).any(|(i, _)| {
                let before = walks[..i].chars().next_back();
                !before.is_some_and(|c| c.is_ascii_uppercase() || c == '_')
            })
        })
        .collect();
    assert!(unwalked.is_empty(), "declared paths with no row-level walk: {unwalked:?}");
}
