//! `kill -9` of a worker process in the middle of a durable flow, then a restart: each effect
//! happens exactly once and nothing is lost. (The plan-act drain's is in jobs.rs, the site
//! request's in sites.rs, the subscription reconcile's in billing.rs, the replicas' in
//! replicas.rs.)

use std::time::{Duration, Instant};

use member_console::{ids::EntitlementSetId, services::rule_changes as rc};

use crate::common::{
    self,
    acts::{id_by_name, product_id, scalar, stale_pools, type_id},
    pages::demo_db,
    wait_until,
    worker::WorkerProcess,
};

/// A worker process on the sites fixture's local farm, its maintenance due every 10 s.
fn farm_worker(s: &crate::sites::Sites, dir: &std::path::Path, lease: Duration, name: &str) -> WorkerProcess {
    let base = s.f.local.base_url();
    let env = [
        ("FARM_URL", base.as_str()),
        ("FARM_TOKEN", common::farm::TOKEN),
        ("FARM_CALLBACK_SECRET", common::farm::CALLBACK_SECRET),
        ("FEDWIKI_MAINTENANCE_EVERY_S", "10"),
    ];
    WorkerProcess::start_with(&s.t, dir, lease, name, &env)
}

/// Wait until a maintenance run ended well having purged one site.
async fn until_a_run_purged_one(s: &crate::sites::Sites, worker: &WorkerProcess) {
    let purged = "SELECT count(*) FROM fedwiki.maintenance_runs WHERE outcome = 'ok' AND purged = 1";
    wait_until(
        "a run ended well and purged",
        Duration::from_secs(90),
        || worker.log(),
        async || s.count(purged).await == 1,
    )
    .await;
}

/// A site `name` created and archived; `expired`: archived 31 days ago, past the retention.
async fn archived(s: &crate::sites::Sites, name: &str, expired: bool) {
    use member_console::{services::fedwiki, states::RequestKind};
    let site = s.created(name).await;
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Archive).await.unwrap();
    s.run(archive).await.unwrap();
    if expired {
        s.t.run(
            sqlx::query("UPDATE fedwiki.sites SET status_changed_at = now() - interval '31 days' WHERE site_id = $1")
                .bind(&site),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_change_drain_killed_midway_is_finished_by_the_next_worker_and_settles_every_pool_once() {
    const POOLS: i64 = 3000;
    let lease = Duration::from_secs(2);
    let t = demo_db().await;
    let dir = std::env::temp_dir().join(format!("mc-crash-rc-{}", t.name));
    let (ty, basic) = (type_id(&t, "Community").await, product_id(&t, "Basic").await);
    member_console::bench::carrying_organizations(&t.admin, POOLS, ty.0, basic.0).await.unwrap();
    let set = EntitlementSetId(id_by_name(&t, "entitlement_sets", "entitlement_set_id", "Basic").await);
    let rules = crate::common::rules(&[("fedwiki.active_sites", "5"), ("support.priority", "yes")]);
    // Above the cap (0): the commit owes every pool and the drain job settles them.
    let c = rc::commit_rule_change_batch(&t.db, set, &rules, None, &"crash test".into(), 0).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_relay_leaves_the_rest_to_the_next_and_every_record_reaches_the_receiver_once() {
    use desired_state_receiver::{Config as ReceiverConfig, Receiver};
    use member_console::{
        services::desired_state::connections::{self, NewConnection},
        store::desired_state as store,
    };
    const ORGS: i64 = 400;
    let lease = Duration::from_secs(2);
    let t = demo_db().await;
    let dir = std::env::temp_dir().join(format!("mc-crash-relay-{}", t.name));
    let (ty, basic) = (type_id(&t, "Community").await, product_id(&t, "Basic").await);
    member_console::bench::carrying_organizations(&t.admin, ORGS, ty.0, basic.0).await.unwrap();
    // Each push answered after 20 ms, so the first worker dies with pushes in flight.
    let receiver = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await.unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}/_receiver/faults", receiver.url()))
        .json(&serde_json::json!({ "delay_ms": 20 }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let form = NewConnection::parse(
        "Crash receiver",
        &receiver.push_url(),
        "fedwiki.active_sites, fedwiki.custom_domain",
        false,
    )
    .unwrap();
    let c = connections::create_connection(&t.db, &form).await.unwrap();
    receiver.set_secrets(&[store::connection(&t.db.pool, c).await.unwrap().unwrap().secret]).unwrap();
    let all = scalar(&t, "SELECT count(*) FROM core.organizations").await;
    let held = |r: &Receiver| r.snapshot()["recipients"].as_array().map_or(0, |a| a.len()) as i64;

    let mut first = WorkerProcess::start(&t, &dir, lease, "first");
    wait_until(
        "a tenth reached the receiver",
        Duration::from_secs(120),
        || first.log(),
        async || held(&receiver) >= all / 10,
    )
    .await;
    first.kill();
    let at_kill = held(&receiver);
    assert!(at_kill < all, "the relay ended before the kill; give it more organizations");

    let second = WorkerProcess::start(&t, &dir, lease, "second");
    let confirmed = format!(
        "SELECT count(*) FROM core.desired_state_records WHERE connection_id = {} AND confirmed_generation = generation",
        c.0
    );
    wait_until(
        "every record confirmed",
        Duration::from_secs(120),
        || second.log(),
        async || scalar(&t, &confirmed).await == all,
    )
    .await;
    // One record per organization, at generation 1 (nothing changed, so no generation was made
    // twice), and the receiver holds each at that generation with the record's content.
    assert_eq!(
        scalar(&t, &format!("SELECT count(*) FROM core.desired_state_records WHERE connection_id = {}", c.0)).await,
        all
    );
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.desired_state_records WHERE generation <> 1").await, 0);
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.desired_state_outbox").await, 0, "every notice handled");
    let snapshot = receiver.snapshot();
    let recipients = snapshot["recipients"].as_array().unwrap();
    assert_eq!(recipients.len() as i64, all);
    let contents: Vec<(String, serde_json::Value)> = t
        .all(
            sqlx::query_as(
                "SELECT recipient_id::text, content FROM core.desired_state_records WHERE connection_id = $1",
            )
            .bind(c.0),
        )
        .await;
    for (id, content) in contents {
        let r = recipients.iter().find(|r| r["id"] == serde_json::json!(id)).unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(r["generation"], 1, "{r}");
        assert_eq!(r["content"], content, "{id}");
    }
    drop(second);
    receiver.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_maintenance_writes_nothing_half_and_the_next_run_adopts_and_purges_once() {
    use crate::sites::{assert_usage_agrees, servable, setup};
    use common::pause_writes_on;
    const STRAYS: usize = 12;
    let lease = Duration::from_secs(2);
    let s = setup("Basic").await;
    let dir = std::env::temp_dir().join(format!("mc-crash-farm-{}", s.t.name));
    // Sites only the farm has (to adopt), and an archived site past retention (to purge).
    for i in 0..STRAYS {
        s.f.farm
            .create_site(
                &member_console::ids::SiteDomain::from(format!("stray{i}.wiki.localhost")),
                &member_console::ids::WorkspaceId::from("someone-else"),
                member_console::states::SiteStatus::Active,
            )
            .await
            .unwrap();
    }
    archived(&s, "old", true).await;

    // The first run's first write to the sites waits here; the worker dies there.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.sites").await;
    let mut first = farm_worker(&s, &dir, lease, "first");
    let waiter = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    assert!(waiter > 0, "the maintenance run reached its writes: {}", first.log());
    first.kill();
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    let adopted_sql = "SELECT count(*) FROM fedwiki.sites WHERE domain LIKE 'stray%'";
    assert!(s.count(adopted_sql).await < STRAYS as i64, "the killed run did not finish its adoptions");

    // The next worker runs the maintenance again (the dead one's job, once its lease is over).
    let second = farm_worker(&s, &dir, lease, "second");
    until_a_run_purged_one(&s, &second).await;
    // Every stray adopted once, into the System workspace, its name placed; the old site gone
    // on both sides and its name released; the usage counts agree.
    assert_eq!(s.count(adopted_sql).await, STRAYS as i64);
    assert_eq!(
        s.count("SELECT count(*) FROM (SELECT domain FROM fedwiki.sites GROUP BY domain HAVING count(*) > 1) d").await,
        0
    );
    assert_eq!(
        s.count("SELECT count(*) FROM fedwiki.sites WHERE domain LIKE 'stray%' AND workspace_id <> 'system'").await,
        0
    );
    for i in 0..STRAYS {
        assert_eq!(servable(&s, &format!("stray{i}.wiki.localhost")).await, Some(true));
    }
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites WHERE domain = 'old.wiki.localhost'").await, 0);
    assert!(s.f.site("old.wiki.localhost").await.is_none(), "deleted on the farm");
    assert_eq!(servable(&s, "old.wiki.localhost").await, None);
    assert_usage_agrees(&s).await;
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_expiry_rolls_it_back_and_the_next_expires_each_grant_once() {
    use common::acts::{grant_with, orgs_of_type};
    const GRANTS: usize = 20;
    let lease = Duration::from_secs(2);
    let t = demo_db().await;
    let dir = std::env::temp_dir().join(format!("mc-crash-expiry-{}", t.name));
    let (ty, pro) = (type_id(&t, "Community").await, product_id(&t, "Pro").await);
    let orgs = orgs_of_type(&t, ty, "Expiring", GRANTS).await;
    // Far enough ahead that every grant is issued before it ends, however loaded the machine.
    let ends = chrono::Utc::now() + chrono::TimeDelta::seconds(5);
    let mut ids = vec![];
    for org in orgs {
        ids.push(grant_with(&t, org.organization_id, pro, 1, Some(ends)).await.0);
    }
    let ids = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let expired = format!("SELECT count(*) FROM core.grants WHERE grant_id IN ({ids}) AND status = 'expired'");

    // The first expiry's write to its grant waits here; the worker dies there.
    let (mut pause, pause_pid) = common::pause_writes_on(&t, "core.grants").await;
    tokio::time::sleep((ends - chrono::Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(100)).await;
    let mut first = WorkerProcess::start(&t, &dir, lease, "first");
    let waiter = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    assert!(waiter > 0, "an expiry reached its write: {}", first.log());
    first.kill();
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(scalar(&t, &expired).await, 0, "the killed expiry left nothing");

    let second = WorkerProcess::start(&t, &dir, lease, "second");
    wait_until(
        "every grant expired",
        Duration::from_secs(60),
        || second.log(),
        async || scalar(&t, &expired).await == GRANTS as i64,
    )
    .await;
    // One expiry event each, and every pool back on what it holds without the grant.
    let events =
        scalar(&t, &format!("SELECT count(*) FROM core.grant_events WHERE grant_id IN ({ids}) AND act = 'expired'"))
            .await;
    assert_eq!(events, GRANTS as i64);
    assert!(stale_pools(&t).await.is_empty());
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_outbox_row_leaves_it_due_after_the_lease_and_stripe_gets_each_product_once() {
    use member_console::services::billing;
    let lease = Duration::from_millis(1500);
    let (t, s) = common::stripe::demo_with_stripe().await;
    let dir = std::env::temp_dir().join(format!("mc-crash-outbox-{}", t.name));
    // Two products priced and sent to the outbox: two sync rows.
    for (name, amount) in [("Basic", "12"), ("Pro", "30")] {
        let product = product_id(&t, name).await;
        billing::set_price(&t.db, product, &crate::common::stripe::new_price("month", amount, "eur").unwrap())
            .await
            .unwrap();
        billing::sync_product(&t.db, product).await.unwrap();
    }
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.outbox WHERE processed_at IS NULL").await, 2);
    let env = [
        ("STRIPE_SECRET_KEY", common::stripe::SECRET_KEY),
        ("STRIPE_API_BASE", s.base.as_str()),
        ("STRIPE_WEBHOOK_SECRET", "whsec_unused"),
    ];

    // The first row's write of what Stripe answered waits here, after Stripe made the product;
    // the worker dies there, the row claimed.
    let (mut pause, pause_pid) = common::pause_writes_on(&t, "billing.product_mappings").await;
    let mut first = WorkerProcess::start_with(&t, &dir, lease, "first", &env);
    let waiter = common::wait_for_waiter(&t.admin, &t.name, pause_pid).await;
    assert!(waiter > 0, "the outbox reached its record step: {}", first.log());
    assert_eq!(s.get("/products?limit=100").await["data"].as_array().unwrap().len(), 1, "Stripe made it");
    first.kill();
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    let claimed = "SELECT count(*) FROM core.outbox WHERE processed_at IS NULL AND claimed_until > now()";
    assert_eq!(scalar(&t, claimed).await, 1, "one row claimed, by the dead worker: the other was never taken");
    assert_eq!(
        scalar(&t, "SELECT count(*) FROM billing.product_mappings WHERE stripe_product_id IS NOT NULL").await,
        0
    );

    // The next worker takes the dead one's row once its (job-length) lease is over.
    let killed = Instant::now();
    let second = WorkerProcess::start_with(&t, &dir, lease, "second", &env);
    wait_until(
        "every outbox row done",
        Duration::from_secs(30),
        || second.log(),
        async || scalar(&t, "SELECT count(*) FROM core.outbox WHERE processed_at IS NULL").await == 0,
    )
    .await;
    // Well within a minute: the lease, then the next pass of the schedule.
    assert!(killed.elapsed() < Duration::from_secs(20), "resumed after {:?}", killed.elapsed());
    let attempts: Vec<i32> = t.all(sqlx::query_scalar("SELECT attempts FROM core.outbox ORDER BY attempts")).await;
    assert_eq!(attempts, [1, 2], "the killed row twice, the other once");
    // Stripe holds each product and price once (the killed row's create was answered again by
    // its idempotency key), and the console recorded what it holds.
    let products = s.get("/products?limit=100").await;
    assert_eq!(products["data"].as_array().unwrap().len(), 2, "{products}");
    let prices = s.get("/prices?limit=100").await;
    assert_eq!(prices["data"].as_array().unwrap().len(), 2, "{prices}");
    let unsynced = "SELECT count(*) FROM billing.product_mappings WHERE sync_state <> 'synced'";
    assert_eq!(scalar(&t, unsynced).await, 0);
    for p in products["data"].as_array().unwrap() {
        let recorded = format!(
            "SELECT count(*) FROM billing.product_mappings WHERE stripe_product_id = '{}'",
            p["id"].as_str().unwrap()
        );
        assert_eq!(scalar(&t, &recorded).await, 1, "{p}");
    }
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_the_farms_delete_and_the_purges_commit_leaves_the_row_and_the_next_run_purges_once() {
    use crate::sites::{assert_usage_agrees, servable, setup};
    let lease = Duration::from_secs(2);
    let s = setup("Basic").await;
    let dir = std::env::temp_dir().join(format!("mc-crash-purge-{}", s.t.name));
    archived(&s, "old", true).await;
    archived(&s, "kept", false).await;

    // The farm does a DELETE at once and holds its answer: the purge's transaction is open, the
    // site gone from the farm, when the worker dies.
    s.f.faults(serde_json::json!({ "method": "DELETE", "hold_answer_ms": 25_000 })).await;
    let mut first = farm_worker(&s, &dir, lease, "first");
    wait_until(
        "the farm deleted the site",
        Duration::from_secs(30),
        || first.log(),
        async || s.f.site("old.wiki.localhost").await.is_none(),
    )
    .await;
    let unlocked = "SELECT count(*) FROM (SELECT 1 FROM fedwiki.sites WHERE domain = 'old.wiki.localhost'
                                          FOR UPDATE SKIP LOCKED) r";
    assert_eq!(s.count(unlocked).await, 0, "the purge's transaction holds the row, waiting for the farm's answer");
    first.kill();
    s.f.faults(serde_json::json!({ "method": "", "hold_answer_ms": 0 })).await;
    let row = "SELECT count(*) FROM fedwiki.sites WHERE domain = 'old.wiki.localhost'";
    assert_eq!(s.count(row).await, 1, "the killed purge's delete rolled back: the row stays, archived");

    // The next run finds it gone from the farm already (a 404 is done) and deletes the row once.
    let second = farm_worker(&s, &dir, lease, "second");
    until_a_run_purged_one(&s, &second).await;
    assert_eq!(s.count(row).await, 0);
    assert_eq!(servable(&s, "old.wiki.localhost").await, None, "its name released");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.maintenance_runs WHERE purged > 1").await, 0);
    // The archived site within retention is untouched on both sides.
    assert_eq!(s.status("kept").await, "archived");
    assert!(s.f.site("kept.wiki.localhost").await.is_some());
    assert_usage_agrees(&s).await;
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
