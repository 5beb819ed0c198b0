//! `kill -9` of a worker process in the middle of a durable flow, then a restart: each effect
//! happens exactly once and nothing is lost. (The plan-act drain's is in jobs.rs, the site
//! request's in sites.rs, the subscription reconcile's in billing.rs, the replicas' in
//! replicas.rs.)

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use member_console::{demo, ids::EntitlementSetId, services::rule_changes as rc};

use crate::common::{
    TestDb,
    acts::{id_by_name, product_id, scalar, stale_pools, type_id},
    worker::WorkerProcess,
};

async fn wait_until<F: AsyncFn() -> bool>(what: &str, within: Duration, log: impl Fn() -> String, check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}\n{}", log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_change_drain_killed_midway_is_finished_by_the_next_worker_and_settles_every_pool_once() {
    const POOLS: i64 = 3000;
    let lease = Duration::from_secs(2);
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    let dir = std::env::temp_dir().join(format!("mc-crash-rc-{}", t.name));
    let (ty, basic) = (type_id(&t, "Community").await, product_id(&t, "Basic").await);
    member_console::bench::carrying_organizations(&t.admin, POOLS, ty.0, basic.0).await.unwrap();
    let set = EntitlementSetId(id_by_name(&t, "entitlement_sets", "entitlement_set_id", "Basic").await);
    let rules: BTreeMap<String, String> = [("fedwiki.active_sites", "5"), ("support.priority", "yes")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // Above the cap (0): the commit owes every pool and the drain job settles them.
    let c = rc::commit_rule_change_batch(&t.db, set, &rules, None, "crash test", 0).await.unwrap();
    let settled_sql = "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE state = 'settled'";
    // Two acts (one per rule), each owing every carrying pool, listed by the drain as it goes.
    let owed = 2 * POOLS;

    let mut first = WorkerProcess::start(&t, &dir, lease, "first");
    wait_until(
        "a tenth settled",
        Duration::from_secs(120),
        || first.log(),
        async || scalar(&t, settled_sql).await >= owed / 10,
    )
    .await;
    first.kill();
    let at_kill = scalar(&t, settled_sql).await;
    assert!(at_kill < owed, "the drain ended before the kill; give it more pools");

    let second = WorkerProcess::start(&t, &dir, lease, "second");
    let done = format!(
        "SELECT count(*) FROM core.entitlement_set_changes WHERE change_id = {} AND state = 'settled'",
        c.change_id.0
    );
    wait_until(
        "the change is settled",
        Duration::from_secs(180),
        || second.log(),
        async || scalar(&t, &done).await == 1,
    )
    .await;
    // Every obligation settled, each by one attempt; every pool's entitlements are fresh.
    let listed = scalar(&t, "SELECT count(*) FROM core.entitlement_set_change_obligations").await;
    assert!(listed >= owed, "{listed}");
    let not_once = scalar(
        &t,
        "SELECT count(*) FROM core.entitlement_set_change_obligations WHERE NOT (state = 'settled' AND attempts = 1)",
    )
    .await;
    assert_eq!(not_once, 0);
    assert!(stale_pools(&t).await.is_empty());
    let priority = scalar(
        &t,
        "SELECT count(*) FROM core.pool_entitlements WHERE resource_key = 'support.priority' AND flag_value",
    )
    .await;
    assert!(priority >= POOLS, "{priority}");
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
