//! Rule changes: the commit with its sync cap, the drain, failures and retry, crash recovery,
//! the lock order against materializing transactions, and bad input.

use crate::common;

use std::time::Duration;

use common::{
    TestDb,
    acts::{
        break_pool, grant_with, id_by_name, mend_pools, org_of_type, org_sites, product_id, scalar, stale_pools,
        type_id,
    },
    pages::demo_db,
};
use member_console::{
    db::{TxKind, begin},
    ids::{EntitlementSetId, PoolId},
    services::{
        entitlements::{self as ent},
        reads,
        refusal::ServiceError,
        rule_changes as rc,
    },
};

async fn set_id(t: &TestDb, name: &str) -> EntitlementSetId {
    EntitlementSetId(id_by_name(t, "entitlement_sets", "entitlement_set_id", name).await)
}

/// `n` organizations that hold Basic by an operator grant (so they carry the "Basic" set).
async fn basic_pools(t: &TestDb, n: usize) -> Vec<PoolId> {
    let ty = type_id(t, "Community").await;
    let basic = product_id(t, "Basic").await;
    let mut pools = vec![];
    for i in 0..n {
        let org = org_of_type(t, &format!("Carrier {i:03}"), ty).await;
        grant_with(t, org.organization_id, basic, 1 + (i % 3) as i32, None).await;
        pools.push(org.pool_id);
    }
    pools
}

use crate::common::rules;

async fn entitlements_by_org(t: &TestDb) -> Vec<(String, String, Option<i64>, Option<bool>)> {
    t.all(sqlx::query_as(
        "SELECT o.name, e.resource_key, e.numeric_value, e.flag_value FROM core.pool_entitlements e
         JOIN core.resource_pools p USING (pool_id) JOIN core.organizations o USING (organization_id)
         ORDER BY o.name, e.resource_key",
    ))
    .await
}

async fn setup(n: usize) -> (TestDb, Vec<PoolId>) {
    let t = demo_db().await;
    let pools = basic_pools(&t, n).await;
    (t, pools)
}

const CHANGE: &[(&str, &str)] = &[("fedwiki.active_sites", "5"), ("support.priority", "yes")];

#[tokio::test]
async fn the_sync_path_and_the_drain_path_give_identical_entitlements() {
    let (inline_db, _) = setup(12).await;
    let (drained_db, _) = setup(12).await;
    let basic = set_id(&inline_db, "Basic").await;
    let c = rc::commit_rule_change_batch(&inline_db.db, basic, &rules(CHANGE), None, &"".into(), 100).await.unwrap();
    assert!(c.settled_inline);
    assert_eq!(c.pools_owed, 12);
    assert_eq!(c.acts, 2);
    let basic2 = set_id(&drained_db, "Basic").await;
    let d = rc::commit_rule_change_batch(&drained_db.db, basic2, &rules(CHANGE), None, &"".into(), 5).await.unwrap();
    assert!(!d.settled_inline, "above the cap it drains");
    assert!(!stale_pools(&drained_db).await.is_empty(), "before the drain the carriers are owed");
    let drained = rc::drain_change(&drained_db.db, d.change_id, 3).await.unwrap();
    assert_eq!(drained.settled, 12);
    assert!(drained.finished);
    assert_eq!(entitlements_by_org(&inline_db).await, entitlements_by_org(&drained_db).await);
    assert!(stale_pools(&inline_db).await.is_empty());
    assert!(stale_pools(&drained_db).await.is_empty());
    // Quantity multiplies the new value: carriers with 2 Basic have 10 sites.
    assert_eq!(org_sites(&drained_db, "Carrier 001").await, 10);
}

#[tokio::test]
async fn a_materializing_transaction_waits_for_the_commit_and_sees_its_rules() {
    let (t, pools) = setup(3).await;
    let basic = set_id(&t, "Basic").await;
    // Pause the commit after its rendezvous: the admin holds the set row it takes next.
    let (mut hold, hold_pid) = common::hold_open(
        &t,
        &format!("SELECT 1 FROM core.entitlement_sets WHERE entitlement_set_id = {basic} FOR UPDATE"),
    )
    .await;
    let db = t.db.clone();
    let commit =
        tokio::spawn(
            async move { rc::commit_rule_change_batch(&db, basic, &rules(CHANGE), None, &"".into(), 100).await },
        );
    let committer = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, committer, &[common::locks::Expect::rendezvous_exclusive()]).await;
    let set_row = common::locks::Expect::row("core.entitlement_sets", basic.0);
    common::locks::assert_waits(&t.admin, committer, hold_pid, &set_row).await;
    // B: a materialization of a carrying pool waits on the commit.
    let db = t.db.clone();
    let pool = pools[0];
    let mat = tokio::spawn(async move { ent::materialize_pool(&db, pool).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, committer).await;
    assert!(waiter > 0);
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    commit.await.unwrap().unwrap();
    mat.await.unwrap().unwrap();
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn a_commit_waits_for_an_open_materializing_transaction() {
    let (t, _) = setup(2).await;
    let basic = set_id(&t, "Basic").await;
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let commit =
        tokio::spawn(
            async move { rc::commit_rule_change_batch(&db, basic, &rules(CHANGE), None, &"".into(), 100).await },
        );
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    a.commit().await.unwrap();
    assert!(commit.await.unwrap().unwrap().settled_inline);
}

#[tokio::test]
async fn another_change_holding_the_rendezvous_refuses_the_commit_and_nothing_is_written() {
    let (t, _) = setup(1).await;
    let basic = set_id(&t, "Basic").await;
    let _held = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let mut short = t.db.clone();
    short.lock_timeout = Duration::from_millis(200);
    let e = rc::commit_rule_change_batch(&short, basic, &rules(CHANGE), None, &"".into(), 100).await.unwrap_err();
    assert!(matches!(e, ServiceError::ChangeInProgress), "{e:?}");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.entitlement_set_changes").await, 0);
}

#[tokio::test]
async fn two_drains_of_one_change_settle_each_obligation_once() {
    let (t, _) = setup(20).await;
    let basic = set_id(&t, "Basic").await;
    let c = rc::commit_rule_change_batch(&t.db, basic, &rules(CHANGE), None, &"".into(), 0).await.unwrap();
    let (a, b) = tokio::join!(rc::drain_change(&t.db, c.change_id, 2), rc::drain_change(&t.db, c.change_id, 3));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.settled + b.settled, 20, "each pool settled by exactly one of them");
    assert_eq!(
        scalar(
            &t,
            "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE state = 'settled' AND attempts = 1"
        )
        .await,
        40
    );
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn a_failing_pool_is_recorded_the_others_settle_and_retry_finishes_it() {
    let (t, pools) = setup(6).await;
    let bad = pools[2];
    // A pool whose entitlements cannot be written: the admin's trigger refuses it.
    break_pool(&t, bad).await;
    let basic = set_id(&t, "Basic").await;
    let c = rc::commit_rule_change_batch(&t.db, basic, &rules(CHANGE), None, &"".into(), 0).await.unwrap();
    let d = rc::drain_change(&t.db, c.change_id, 2).await.unwrap();
    assert_eq!((d.settled, d.failed, d.finished), (5, 1, false));
    let (state, attempts, error): (String, i32, String) = t.one(sqlx::query_as(
        "SELECT state, attempts, last_error FROM core.entitlement_set_change_obligations WHERE pool_id = $1 LIMIT 1",
    )
    .bind(bad)).await;
    assert_eq!((state.as_str(), attempts), ("failed", 1));
    assert!(error.contains("is broken"), "{error}");
    // Not due again yet: a second pass leaves it alone.
    assert_eq!(rc::drain_change(&t.db, c.change_id, 2).await.unwrap().failed, 0);
    mend_pools(&t).await;
    assert_eq!(rc::retry_failed(&t.db, c.change_id).await.unwrap(), 2, "both acts' obligations of the pool");
    let d = rc::drain_change(&t.db, c.change_id, 2).await.unwrap();
    assert_eq!((d.settled, d.finished), (1, true));
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn a_drain_killed_midway_resumes_and_settles_every_obligation_once() {
    let (t, _) = setup(30).await;
    let basic = set_id(&t, "Basic").await;
    let c = rc::commit_rule_change_batch(&t.db, basic, &rules(CHANGE), None, &"".into(), 0).await.unwrap();
    let db = t.db.clone();
    let id = c.change_id;
    let drain = tokio::spawn(async move { rc::drain_change(&db, id, 1).await });
    // Kill it once some pools settled.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while scalar(&t, "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE state = 'settled'").await < 10
    {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drain.abort();
    let _ = drain.await;
    let open =
        scalar(&t, "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE state <> 'settled'").await;
    assert!(open > 0, "the drain was stopped before the end");
    // On restart the poller enqueues the drain job and a worker finishes it.
    assert_eq!(rc::resume_drains(&t.db).await.unwrap(), 1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(
        member_console::jobs::Worker::new(t.db.clone(), member_console::job_registry::standard_handlers(), 2)
            .run(stop_rx),
    );
    while scalar(
        &t,
        &format!("SELECT count(*) FROM core.entitlement_set_changes WHERE change_id = {id} AND state = 'settled'"),
    )
    .await
        == 0
    {
        assert!(std::time::Instant::now() < deadline + Duration::from_secs(20), "the drain did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    worker.await.unwrap();
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE NOT (state = 'settled' AND attempts = 1)").await, 0);
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn bad_input_is_refused_by_field_and_nothing_is_written() {
    let (t, _) = setup(2).await;
    let basic = set_id(&t, "Basic").await;
    let before = scalar(&t, "SELECT count(*) FROM core.entitlement_set_rules").await;
    let field = |e: ServiceError| match e {
        ServiceError::Invalid(p) => p.into_iter().map(|(f, m)| format!("{f}: {m}")).collect::<Vec<_>>().join("; "),
        other => panic!("{other:?}"),
    };
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("nope.nope", "3")], "There is no resource key nope.nope"),
        (&[("fedwiki.active_sites", "-1")], "cannot be negative"),
        (&[("fedwiki.active_sites", "many")], "not a whole number"),
        (&[("support.priority", "3")], "is a flag"),
        (&[("fedwiki.active_sites", "3")], "Nothing changed"),
    ];
    for (submitted, expected) in cases {
        let e = rc::commit_rule_change_batch(&t.db, basic, &rules(submitted), None, &"".into(), 100).await.unwrap_err();
        let text = field(e);
        assert!(text.contains(expected), "{submitted:?}: {text}");
    }
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.entitlement_set_changes").await, 0);
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.entitlement_set_rules").await, before);
    assert!(matches!(
        rc::commit_rule_change_batch(&t.db, EntitlementSetId(999_999), &rules(CHANGE), None, &"".into(), 100).await,
        Err(ServiceError::NotFound(_))
    ));
}

#[tokio::test]
async fn removing_a_rule_and_adding_one_is_one_change() {
    let (t, pools) = setup(3).await;
    let basic = set_id(&t, "Basic").await;
    let c = rc::commit_rule_change_batch(
        &t.db,
        basic,
        &rules(&[("fedwiki.custom_domain", ""), ("support.priority", "no")]),
        None,
        &"simplify".into(),
        100,
    )
    .await
    .unwrap();
    assert_eq!(c.acts, 2);
    let flags: Vec<(String, Option<bool>)> = t.all(sqlx::query_as(
        "SELECT resource_key, flag_value FROM core.pool_entitlements WHERE pool_id = $1 AND flag_value IS NOT NULL ORDER BY 1",
    )
    .bind(pools[0])).await;
    assert_eq!(flags, vec![("support.priority".to_string(), Some(false))]);
}

#[tokio::test]
async fn a_draining_changes_rate_counts_only_the_pools_settled_in_the_last_minute() {
    let (t, pools) = setup(12).await;
    let basic = set_id(&t, "Basic").await;
    let d = rc::commit_rule_change_batch(&t.db, basic, &rules(CHANGE), None, &"".into(), 5).await.unwrap();
    assert!(!d.settled_inline);
    rc::drain_change(&t.db, d.change_id, 2).await.unwrap();
    let settled = reads::rule_change(&t.db, d.change_id).await.unwrap().unwrap();
    assert_eq!(settled.recent, None, "a settled change reads no rate");
    // Stand the change mid-drain, older than the window: of its 12 pools (every act of a pool
    // alike) 4 are owed again, 3 settled five minutes ago, 5 in the last minute.
    t.run(
        sqlx::query(
            "UPDATE core.entitlement_set_changes SET state = 'draining', settled_at = NULL,
                committed_at = now() - interval '10 minutes' WHERE change_id = $1",
        )
        .bind(d.change_id),
    )
    .await;
    t.run(
        sqlx::query(
            "WITH p AS (SELECT pool_id, row_number() OVER (ORDER BY pool_id) AS n FROM unnest($2::bigint[]) AS pool_id)
         UPDATE core.entitlement_set_change_obligations o
            SET state = CASE WHEN p.n <= 4 THEN 'owed' ELSE 'settled' END,
                settled_at = CASE WHEN p.n <= 4 THEN NULL WHEN p.n <= 7 THEN now() - interval '5 minutes'
                                  ELSE now() - interval '20 seconds' END
           FROM p, core.entitlement_set_change_acts a
          WHERE a.change_id = $1 AND o.act_id = a.act_id AND o.pool_id = p.pool_id",
        )
        .bind(d.change_id)
        .bind(pools.iter().map(|p| p.0).collect::<Vec<i64>>()),
    )
    .await;
    let draining = reads::rule_change(&t.db, d.change_id).await.unwrap().unwrap();
    assert_eq!((draining.change.owed, draining.change.settled), (12, 8));
    let recent = draining.recent.expect("a draining change reads its rate");
    assert_eq!(recent.settled, 5, "pools, not obligations, and only the last minute's");
    assert!((recent.seconds - 60.0).abs() < 1.0, "a minute: the change is older than that ({})", recent.seconds);
}
