//! Row-level walks of site upkeep and the registry (issue 36; the spec's paths 42 to 54 and 61 to
//! 63, as docs/database-locks.md numbers them): each path reached as the maintenance job, the
//! worker's start, a member or the farm's list reach it, paused after each of its locks, every
//! lock named by its identity (`tests/it/common/locks.rs`), then its outcome asserted.

use crate::common;
use crate::sites::{Sites, assert_usage_agrees, instance, setup};

use common::locks::{Expect, LockWalk, RowMode};
use member_console::{
    db::{Db, keys::AdvisoryKey},
    hostname::FarmZone,
    ids::{SiteDomain, SiteId, WorkspaceId},
    services::fedwiki::{
        self, Ran, domains, maintenance, record,
        record::Recorded,
        registry,
        repair::{self, Repaired},
    },
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki_maintenance::RunCounts,
};

const RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

fn registry_lock() -> Expect {
    Expect::advisory(AdvisoryKey::Registry)
}

fn site_row(site_id: &SiteId) -> Expect {
    Expect::row("fedwiki.sites", site_id)
}

fn placement(hostname: &str) -> Expect {
    Expect::row("domains.placements", hostname)
}

fn request_row(id: member_console::ids::RequestId) -> Expect {
    Expect::row_in("fedwiki.lifecycle_requests", id.0, RowMode::NoKeyUpdate)
}

/// A walk started by hand, driven as `LockWalk::run` drives it: for a path whose expected locks
/// are known only once it has paused (a row its own earlier transaction inserted).
async fn walk_on<T: Send + 'static>(t: &common::TestDb, mut w: LockWalk<T>, expected: &[Expect]) -> T {
    for k in 1..=expected.len() {
        assert!(w.pid.is_some(), "the path finished before its lock {k} ({:?})", expected[k - 1]);
        w.assert_holds_exactly(&expected[..k]).await;
        w.assert_probe_waits(t, &expected[k - 1]).await;
        let paused = w.step().await;
        if k < expected.len() {
            assert!(paused, "the path finished after {k} locks; expected {}", expected.len());
        } else {
            assert!(!paused, "the path took a lock after the {} expected", expected.len());
        }
    }
    w.finish().await
}

/// The markers (`trace::step`) and paths the trace recorded, of every traced transaction.
async fn traced_steps(s: &Sites) -> Vec<String> {
    s.t.all(sqlx::query_scalar("SELECT key FROM core.lock_trace WHERE lock = 'step' ORDER BY xact, seq")).await
}

/// The first pool the recounts take (usage.RecountAll reads them in pool_id order).
async fn first_counted_pool(s: &Sites) -> Expect {
    let pool = s
        .count("SELECT min(pool_id) FROM core.numeric_entitlement_usage WHERE resource_key = 'fedwiki.active_sites'")
        .await;
    Expect::row("core.numeric_entitlement_usage", format!("{pool},fedwiki.active_sites"))
}

async fn sync(db: &Db, farm: &std::sync::Arc<member_console::integrations::farm::Farm>) -> RunCounts {
    let mut counts = RunCounts::default();
    maintenance::sync_sites(db, farm, &mut counts).await.unwrap();
    counts
}

// 42, 43: the quota's park and reactivation ------------------------------------------------------------

/// A Free organization with Basic's two active sites, `kept` kept active: the downgrade leaves
/// `spare` to park.
async fn above_the_limit() -> (Sites, SiteId) {
    let s = setup("Free").await;
    let grant = common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    s.created("kept").await;
    let spare = s.created("spare").await;
    s.t.run(sqlx::query("UPDATE fedwiki.sites SET keep_active = true WHERE domain = 'kept.wiki.localhost'")).await;
    member_console::services::grants::revoke_grant(
        &s.t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("downgrade").unwrap(),
    )
    .await
    .unwrap();
    (s, spare)
}

#[tokio::test]
async fn a_park_walked_lock_by_lock_takes_the_site_row_then_its_placement_then_the_usage_row() {
    let (s, spare) = above_the_limit().await;
    let expected = [site_row(&spare), placement("spare.wiki.localhost"), s.usage_row()];
    let farm = s.f.farm.clone();
    let counts = LockWalk::run(&s.t, &maintenance::PARK_SITE_LOCKS, &expected, |db| async move {
        maintenance::reconcile_quota_now(&db, &farm).await
    })
    .await
    .unwrap();
    assert_eq!(counts.parked, 1, "{counts:?}");
    assert_eq!(s.status("spare").await, "parked");
    assert_eq!(s.f.site("spare.wiki.localhost").await.unwrap()["status"], "parked");
    assert_eq!(crate::sites::servable(&s, "spare.wiki.localhost").await, Some(false));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_park_that_finds_a_members_archive_walked_lock_by_lock_takes_only_the_site_row_rolls_back_and_sets_the_farm_back()
 {
    let (s, spare) = above_the_limit().await;
    // The quota read `spare` as active; the member archived it before the park's transaction.
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &spare, RequestKind::Archive).await.unwrap();
    s.run(archive).await.unwrap();
    let (farm, id) = (s.f.farm.clone(), spare.clone());
    let parked = LockWalk::run(&s.t, &maintenance::PARK_SITE_LOCKS, &[site_row(&spare)], |db| async move {
        maintenance::park_site(&db, &farm, &id, &SiteDomain::from("spare.wiki.localhost")).await
    })
    .await
    .unwrap();
    assert!(!parked, "the member's archive stands");
    assert_eq!(s.status("spare").await, "archived");
    assert_eq!(s.f.site("spare.wiki.localhost").await.unwrap()["status"], "archived", "the farm is set back to it");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_reactivation_walked_lock_by_lock_takes_the_site_row_then_its_placement_then_the_usage_row() {
    let (s, spare) = above_the_limit().await;
    maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
    assert_eq!(s.status("spare").await, "parked");
    // Room again.
    common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    let expected = [site_row(&spare), placement("spare.wiki.localhost"), s.usage_row()];
    let farm = s.f.farm.clone();
    let counts = LockWalk::run(&s.t, &maintenance::REACTIVATE_SITE_LOCKS, &expected, |db| async move {
        maintenance::reconcile_quota_now(&db, &farm).await
    })
    .await
    .unwrap();
    assert_eq!(counts.reactivated, 1, "{counts:?}");
    assert_eq!(s.status("spare").await, "active");
    assert_eq!(crate::sites::servable(&s, "spare.wiki.localhost").await, Some(true));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_reactivation_above_the_limit_walked_lock_by_lock_takes_the_same_locks_then_rolls_back_and_parks_the_farms_site_again()
 {
    let (s, spare) = above_the_limit().await;
    maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
    // No room: the limit is 1 and `kept` is active (a gate took the slot after the quota read).
    let expected = [site_row(&spare), placement("spare.wiki.localhost"), s.usage_row()];
    let (farm, id, pool) = (s.f.farm.clone(), spare.clone(), s.pool);
    let back = LockWalk::run(&s.t, &maintenance::REACTIVATE_SITE_LOCKS, &expected, |db| async move {
        maintenance::reactivate_site(&db, &farm, &id, &SiteDomain::from("spare.wiki.localhost"), pool).await
    })
    .await
    .unwrap();
    assert!(!back, "above the limit: rolled back");
    assert_eq!(s.status("spare").await, "parked");
    assert_eq!(s.f.site("spare.wiki.localhost").await.unwrap()["status"], "parked", "the farm's site parked again");
    assert_usage_agrees(&s).await;
}

// 44, 45, 46: at a worker's start ----------------------------------------------------------------------

#[tokio::test]
async fn a_recount_at_boot_walked_lock_by_lock_takes_only_the_usage_row_and_is_marked_as_the_boots() {
    let s = setup("Basic").await;
    s.created("docs").await;
    // A count gone wrong (a crash between two steps): the boot's recount repairs it.
    s.t.run(sqlx::query(
        "UPDATE core.numeric_entitlement_usage SET used = 7 WHERE resource_key = 'fedwiki.active_sites'",
    ))
    .await;
    let expected = [first_counted_pool(&s).await];
    let done = LockWalk::run(&s.t, &maintenance::RECOUNT_ALL_LOCKS, &expected, |db| async move {
        repair::repair_at_start(&db).await
    })
    .await
    .unwrap();
    assert_eq!(done, Repaired::default());
    assert_eq!(s.used().await, 1);
    assert_usage_agrees(&s).await;
    let steps = traced_steps(&s).await;
    assert!(steps.iter().any(|k| k == "Recount at boot"), "{steps:?}");
    assert!(!steps.iter().any(|k| k == "Sync: the end of the pass"), "{steps:?}");
}

/// Lose a request's job, as a crash that outlived its attempts would.
async fn lose_job(s: &Sites, id: member_console::ids::RequestId) {
    s.t.run(sqlx::query("DELETE FROM integration.jobs WHERE dedupe_key = $1").bind(format!("fedwiki_request:{id}")))
        .await;
}

#[tokio::test]
async fn a_settle_walked_lock_by_lock_finishes_a_stranded_park_under_its_instance_lock_then_the_usage_row_then_its_request()
 {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    let lost = fedwiki::change_status(&s.t.db, &s.settings, s.who, &docs, RequestKind::Park).await.unwrap();
    lose_job(&s, lost).await;
    // finishAllWith (FinishLifecycleRequestsActivity): no site row, no hold.
    let expected = [instance(&docs), s.usage_row(), request_row(lost)];
    let done = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        repair::settle_open_requests(&db).await
    })
    .await
    .unwrap();
    assert_eq!((done.finished, done.handed_to_status_reconcile), (1, 0), "{done:?}");
    assert_eq!(s.request(lost).await.state, RequestState::Failed);
    assert_eq!(s.status("docs").await, "active");
    assert!(traced_steps(&s).await.iter().any(|k| k == "SettleOpenRequests"));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_settle_walked_lock_by_lock_hands_an_activation_holding_a_slot_to_the_status_reconcile_and_takes_no_lock() {
    let s = setup("Basic").await;
    s.created("docs").await;
    let notes = s.created("notes").await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &notes, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    let activation = fedwiki::change_status(&s.t.db, &s.settings, s.who, &notes, RequestKind::Activate).await.unwrap();
    let req = s.request(activation).await;
    assert!(matches!(fedwiki::gate::hold_site_slot(&s.t.db, &req).await.unwrap(), fedwiki::gate::Gate::Held));
    lose_job(&s, activation).await;
    // No finishAllWith runs (it would pause after its first lock), and nothing else locks.
    let done = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &[], |db| async move {
        repair::settle_open_requests(&db).await
    })
    .await
    .unwrap();
    assert_eq!((done.finished, done.handed_to_status_reconcile), (0, 1), "{done:?}");
    let locks = s.count("SELECT count(*) FROM core.lock_trace WHERE lock NOT IN ('path', 'step')").await;
    assert_eq!(locks, 0, "settle took no lock");
    assert!(traced_steps(&s).await.iter().any(|k| k == "SettleOpenRequests"));
    assert_eq!(s.request(activation).await.state, RequestState::Accepted, "handed over, not finished");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 1, "its hold stays");
}

/// An activation of a parked site that took its slot, its job lost: the status reconcile's.
async fn held_activation(s: &Sites, name: &str) -> (SiteId, member_console::ids::RequestId) {
    let id = s.created(name).await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &id, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    let activation = fedwiki::change_status(&s.t.db, &s.settings, s.who, &id, RequestKind::Activate).await.unwrap();
    let req = s.request(activation).await;
    assert!(matches!(fedwiki::gate::hold_site_slot(&s.t.db, &req).await.unwrap(), fedwiki::gate::Gate::Held));
    lose_job(s, activation).await;
    (id, activation)
}

#[tokio::test]
async fn a_status_reconcile_walked_lock_by_lock_records_the_farms_status_under_the_instance_lock_the_site_row_its_placement_the_usage_row_then_the_request()
 {
    let s = setup("Basic").await;
    let (notes, activation) = held_activation(&s, "notes").await;
    s.f.farm.set_status(&SiteDomain::from("notes.wiki.localhost"), SiteStatus::Active).await.unwrap();
    let expected =
        [instance(&notes), site_row(&notes), placement("notes.wiki.localhost"), s.usage_row(), request_row(activation)];
    let farm = s.f.farm.clone();
    let r = LockWalk::run(&s.t, &record::RECORD_SITE_STATUS_LOCKS, &expected, |db| async move {
        repair::reconcile_site_status(&db, &farm, activation).await
    })
    .await
    .unwrap();
    assert!(matches!(r, Recorded::Done { state: RequestState::Done, .. }), "{r:?}");
    assert_eq!(s.status("notes").await, "active");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0, "the hold removed");
    assert!(traced_steps(&s).await.iter().any(|k| k == "ReconcileFedWikiSiteStatusWorkflow"));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_status_reconcile_the_farm_did_not_carry_out_walked_lock_by_lock_takes_the_instance_lock_the_usage_row_then_the_request()
 {
    let s = setup("Basic").await;
    let (notes, activation) = held_activation(&s, "notes").await;
    // The farm still holds it parked.
    let expected = [instance(&notes), s.usage_row(), request_row(activation)];
    let farm = s.f.farm.clone();
    let r = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        repair::reconcile_site_status(&db, &farm, activation).await
    })
    .await
    .unwrap();
    assert!(
        matches!(&r, Recorded::Done { state: RequestState::Failed, outcome } if outcome.contains("did not activate")),
        "{r:?}"
    );
    assert_eq!(s.status("notes").await, "parked");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0, "the hold removed");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_status_reconcile_of_a_site_gone_walked_lock_by_lock_takes_the_instance_lock_the_usage_row_then_the_request_without_the_farm()
 {
    let s = setup("Basic").await;
    let (notes, activation) = held_activation(&s, "notes").await;
    s.t.run(sqlx::query("DELETE FROM fedwiki.sites WHERE site_id = $1").bind(&notes)).await;
    // The farm answers nothing: the branch does not ask it.
    s.f.faults(serde_json::json!({"fail_next": 5, "status": 503})).await;
    let expected = [instance(&notes), s.usage_row(), request_row(activation)];
    let farm = s.f.farm.clone();
    let r = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        repair::reconcile_site_status(&db, &farm, activation).await
    })
    .await
    .unwrap();
    assert!(matches!(r, Recorded::Done { state: RequestState::Failed, .. }), "{r:?}");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0, "the hold removed");
    assert_usage_agrees(&s).await;
}

// 48: the domains reconciliation at boot ---------------------------------------------------------------

#[tokio::test]
async fn a_domains_reconciliation_walked_lock_by_lock_deletes_an_orphaned_placement_under_the_registry_lock_then_its_row()
 {
    let s = setup("Basic").await;
    s.created("docs").await;
    s.t.run(sqlx::query(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
           VALUES ('ghost.wiki.localhost', 'workspace:system', 'fedwiki', 's-ghost', true)",
    ))
    .await;
    let expected = [registry_lock(), placement("ghost.wiki.localhost")];
    let done = LockWalk::run(&s.t, &repair::RECONCILE_DOMAINS_LOCKS, &expected, |db| async move {
        repair::repair_at_start(&db).await
    })
    .await
    .unwrap();
    assert_eq!((done.placements_removed, done.sites_placed), (1, 0), "{done:?}");
    assert_eq!(crate::sites::servable(&s, "ghost.wiki.localhost").await, None);
}

#[tokio::test]
async fn a_domains_reconciliation_walked_lock_by_lock_places_an_unplaced_site_under_the_registry_lock_then_its_row_for_share()
 {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    s.t.run(sqlx::query("DELETE FROM domains.placements WHERE object_id = $1").bind(&docs)).await;
    let expected = [registry_lock(), Expect::row_in("fedwiki.sites", &docs, RowMode::Share)];
    let done = LockWalk::run(&s.t, &repair::RECONCILE_DOMAINS_LOCKS, &expected, |db| async move {
        repair::repair_at_start(&db).await
    })
    .await
    .unwrap();
    assert_eq!((done.placements_removed, done.sites_placed), (0, 1), "{done:?}");
    assert_eq!(crate::sites::servable(&s, "docs.wiki.localhost").await, Some(true));
}

// 49: the retention purge ------------------------------------------------------------------------------

/// An archived site past retention.
async fn archived_long_ago(s: &Sites, name: &str) -> SiteId {
    let site = s.created(name).await;
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Archive).await.unwrap();
    s.run(archive).await.unwrap();
    s.t.run(
        sqlx::query("UPDATE fedwiki.sites SET status_changed_at = now() - interval '31 days' WHERE site_id = $1")
            .bind(&site),
    )
    .await;
    site
}

#[tokio::test]
async fn a_purge_walked_lock_by_lock_takes_the_instance_lock_then_the_archived_row_and_releases_the_names_after() {
    let s = setup("Basic").await;
    let old = archived_long_ago(&s, "old").await;
    // An archived site's placements are not servable: its delete changes no flag, so the trigger
    // takes no placement row.
    let expected = [instance(&old), site_row(&old)];
    let farm = s.f.farm.clone();
    let purged = LockWalk::run(&s.t, &maintenance::PURGE_ARCHIVED_SITE_LOCKS, &expected, |db| async move {
        maintenance::purge_archived(&db, &farm, RETENTION).await
    })
    .await
    .unwrap();
    assert_eq!(purged, 1);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0);
    assert!(s.f.site("old.wiki.localhost").await.is_none(), "deleted on the farm");
    assert_eq!(crate::sites::servable(&s, "old.wiki.localhost").await, None, "its name is released");
}

#[tokio::test]
async fn a_purge_has_committed_and_holds_nothing_when_it_waits_for_the_registry_lock_to_release_the_names() {
    let s = setup("Basic").await;
    let old = archived_long_ago(&s, "old").await;
    // A registry transaction under way (a placement creator, which may wait for this very site's
    // row: GetSiteForPlacement).
    let mut registry = s.t.admin.begin().await.unwrap();
    let registry_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *registry).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(core.registry_key())").execute(&mut *registry).await.unwrap();
    let (db, farm, id) = (s.t.db.clone(), s.f.farm.clone(), old.clone());
    let purge =
        tokio::spawn(async move { maintenance::purge_archived_site(&db, &farm, &id, RETENTION.as_secs_f64()).await });
    let releaser = common::wait_for_waiter(&s.t.admin, &s.t.name, registry_pid).await;
    common::locks::assert_waits(&s.t.admin, releaser, registry_pid, &registry_lock()).await;
    // The purge's own transaction is over: the row is gone for everyone, and no backend holds the
    // site's row or its instance lock while the names wait for the registry.
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0, "the purge committed before the release");
    let instance_key = common::locks::resolve(&s.t.admin, &instance(&old)).await;
    let holders: Vec<i32> =
        s.t.all(sqlx::query_scalar(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()",
        ))
        .await;
    for pid in holders {
        let held = common::locks::advisory_held(&s.t.admin, pid, &Default::default()).await;
        assert!(!held.contains(&instance_key), "backend {pid} still holds the purged site's instance lock");
    }
    registry.rollback().await.unwrap();
    assert!(purge.await.unwrap().unwrap());
    assert_eq!(crate::sites::servable(&s, "old.wiki.localhost").await, None, "its name is released");
}

// 50 to 54, 61, 62: the farm sync ----------------------------------------------------------------------

#[tokio::test]
async fn a_syncs_insert_walked_lock_by_lock_takes_only_the_usage_row_of_the_adopting_pool() {
    let s = setup("Basic").await;
    s.created("docs").await;
    // A site of the organization's the farm has and the console does not.
    s.f.farm
        .create_site(
            &SiteDomain::from("stray.wiki.localhost"),
            &WorkspaceId::from(format!("org-{}", s.org)),
            SiteStatus::Active,
        )
        .await
        .unwrap();
    // The new row is the path's own insert: invisible, not named.
    let expected = [s.usage_row()];
    let farm = s.f.farm.clone();
    let c = LockWalk::run(
        &s.t,
        &maintenance::SYNC_INSERT_SITE_LOCKS,
        &expected,
        |db| async move { sync(&db, &farm).await },
    )
    .await;
    assert_eq!(c.adopted, 1, "{c:?}");
    assert_eq!(s.status("stray").await, "active");
    assert_eq!(s.used().await, 2);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_syncs_insert_into_the_system_workspace_walked_lock_by_lock_takes_no_lock() {
    let s = setup("Basic").await;
    s.f.farm
        .create_site(&SiteDomain::from("stray.wiki.localhost"), &WorkspaceId::from("nobody"), SiteStatus::Active)
        .await
        .unwrap();
    let farm = s.f.farm.clone();
    let c = LockWalk::run(&s.t, &maintenance::SYNC_INSERT_SITE_LOCKS, &[], |db| async move { sync(&db, &farm).await })
        .await;
    assert_eq!(c.adopted, 1, "{c:?}");
    let ws: String =
        s.t.one(sqlx::query_scalar("SELECT workspace_id FROM fedwiki.sites WHERE domain = 'stray.wiki.localhost'"))
            .await;
    assert_eq!(ws, "system");
}

#[tokio::test]
async fn a_syncs_placement_of_an_adopted_site_walked_lock_by_lock_takes_the_registry_lock_then_that_one_site_for_share()
{
    let s = setup("Basic").await;
    s.created("docs").await;
    s.f.farm
        .create_site(
            &SiteDomain::from("stray.wiki.localhost"),
            &WorkspaceId::from(format!("org-{}", s.org)),
            SiteStatus::Active,
        )
        .await
        .unwrap();
    let farm = s.f.farm.clone();
    let w =
        LockWalk::start(&s.t, &maintenance::SYNC_PLACEMENT_LOCKS, 2, |db| async move { sync(&db, &farm).await }).await;
    // Paused after the registry lock: the adopted row is committed by now (its own transaction).
    let stray = s.site_id("stray").await;
    let c = walk_on(&s.t, w, &[registry_lock(), Expect::row_in("fedwiki.sites", &stray, RowMode::Share)]).await;
    assert_eq!(c.adopted, 1, "{c:?}");
    assert_eq!(crate::sites::servable(&s, "stray.wiki.localhost").await, Some(true), "its name is placed");
}

#[tokio::test]
async fn a_syncs_observation_walked_lock_by_lock_takes_only_the_site_row() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    let farm = s.f.farm.clone();
    // SetSiteObservedByDomain's UPDATE changes no key: FOR NO KEY UPDATE strength.
    let observed = [Expect::row_in("fedwiki.sites", &docs, RowMode::NoKeyUpdate)];
    let c =
        LockWalk::run(
            &s.t,
            &maintenance::SYNC_OBSERVE_SITE_LOCKS,
            &observed,
            |db| async move { sync(&db, &farm).await },
        )
        .await;
    assert_eq!((c.observed, c.statuses_written), (1, 0), "{c:?}");
    let observed = s.count("SELECT count(*) FROM fedwiki.sites WHERE observed_at IS NOT NULL").await;
    assert_eq!(observed, 1);
    assert!(!traced_steps(&s).await.iter().any(|k| k == "Registry: flag-only corrections by the site trigger"));
}

#[tokio::test]
async fn a_flag_only_correction_by_the_site_trigger_walked_lock_by_lock_takes_the_site_row_then_the_placement_row() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    // A wrong flag: the observation's status write lets the trigger correct it.
    s.t.run(sqlx::query("UPDATE domains.placements SET servable = false WHERE hostname = 'docs.wiki.localhost'")).await;
    let farm = s.f.farm.clone();
    let expected = [Expect::row_in("fedwiki.sites", &docs, RowMode::NoKeyUpdate), placement("docs.wiki.localhost")];
    let c =
        LockWalk::run(
            &s.t,
            &maintenance::SYNC_OBSERVE_SITE_LOCKS,
            &expected,
            |db| async move { sync(&db, &farm).await },
        )
        .await;
    assert_eq!(c.observed, 1, "{c:?}");
    assert_eq!(crate::sites::servable(&s, "docs.wiki.localhost").await, Some(true), "corrected");
    assert!(traced_steps(&s).await.iter().any(|k| k == "Registry: flag-only corrections by the site trigger"));
}

#[tokio::test]
async fn a_syncs_status_write_walked_lock_by_lock_takes_the_site_row_then_its_placement_then_the_usage_row() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    s.f.farm.set_status(&SiteDomain::from("docs.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    let farm = s.f.farm.clone();
    let expected = [site_row(&docs), placement("docs.wiki.localhost"), s.usage_row()];
    let c =
        LockWalk::run(
            &s.t,
            &maintenance::SYNC_WRITE_STATUS_LOCKS,
            &expected,
            |db| async move { sync(&db, &farm).await },
        )
        .await;
    assert_eq!(c.statuses_written, 1, "{c:?}");
    assert_eq!(s.status("docs").await, "parked");
    assert_eq!(s.used().await, 0);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_syncs_status_write_a_request_overtook_walked_lock_by_lock_takes_only_the_site_row_and_writes_nothing() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    let listed_at = chrono::Utc::now() - chrono::Duration::seconds(5);
    // A park that finished after the list was taken: the farm holds it parked, the list saw it
    // active.
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &docs, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    let mut seen = s.f.farm.get_site(&SiteDomain::from("docs.wiki.localhost")).await.unwrap().unwrap();
    seen.status = SiteStatus::Active;
    let written = LockWalk::run(&s.t, &maintenance::SYNC_WRITE_STATUS_LOCKS, &[site_row(&docs)], |db| async move {
        maintenance::write_status(&db, &seen, SiteStatus::Active, listed_at).await
    })
    .await
    .unwrap();
    assert!(!written);
    assert_eq!(s.status("docs").await, "parked", "the request's status stands");
}

#[tokio::test]
async fn a_syncs_removal_of_a_farm_absent_system_row_walked_lock_by_lock_takes_the_site_row_then_its_placement() {
    let s = setup("Basic").await;
    s.f.farm
        .create_site(&SiteDomain::from("stray.wiki.localhost"), &WorkspaceId::from("nobody"), SiteStatus::Active)
        .await
        .unwrap();
    sync(&s.t.db, &s.f.farm).await;
    let stray = s.site_id("stray").await;
    s.f.farm.delete_site(&SiteDomain::from("stray.wiki.localhost")).await.unwrap();
    let farm = s.f.farm.clone();
    let expected = [site_row(&stray), placement("stray.wiki.localhost")];
    let c = LockWalk::run(&s.t, &maintenance::SYNC_REMOVE_SYSTEM_SITE_LOCKS, &expected, |db| async move {
        sync(&db, &farm).await
    })
    .await;
    assert_eq!(c.removed, 1, "{c:?}");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0);
    assert_eq!(crate::sites::servable(&s, "stray.wiki.localhost").await, None, "its name released after");
}

#[tokio::test]
async fn a_syncs_end_of_pass_recount_walked_lock_by_lock_takes_only_the_usage_row_and_is_marked_as_the_passs() {
    let s = setup("Basic").await;
    s.created("docs").await;
    s.t.run(sqlx::query(
        "UPDATE core.numeric_entitlement_usage SET used = 7 WHERE resource_key = 'fedwiki.active_sites'",
    ))
    .await;
    let expected = [first_counted_pool(&s).await];
    let farm = s.f.farm.clone();
    LockWalk::run(&s.t, &maintenance::RECOUNT_ALL_LOCKS, &expected, |db| async move { sync(&db, &farm).await }).await;
    assert_eq!(s.used().await, 1);
    let steps = traced_steps(&s).await;
    assert!(steps.iter().any(|k| k == "Sync: the end of the pass"), "{steps:?}");
    assert!(!steps.iter().any(|k| k == "Recount at boot"), "{steps:?}");
}

// 63: Registry.WithLock ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_site_names_placement_walked_lock_by_lock_takes_the_registry_lock_then_the_new_sites_instance_lock() {
    let s = setup("Basic").await;
    let (settings, who, org) = (s.settings.clone(), s.who, s.org);
    let mut w = LockWalk::start(&s.t, &registry::PLACE_SITE_NAME_LOCKS, 2, |db| async move {
        fedwiki::create_site(&db, &settings, who, org, &fedwiki::names::SiteName::parse("fresh").unwrap()).await
    })
    .await;
    w.assert_holds_exactly(&[registry_lock()]).await;
    w.assert_probe_waits(&s.t, &registry_lock()).await;
    assert!(w.step().await, "paused after the instance lock");
    // The new site's id is the path's own (no row yet): its key, beside the registry's.
    let pid = w.paused_pid();
    let registry_key = common::locks::resolve(&s.t.admin, &registry_lock()).await;
    let others: Vec<_> = common::locks::advisory_held(&s.t.admin, pid, &Default::default())
        .await
        .into_iter()
        // The walk's pause keys the path passed are shared: left out, as the walk leaves them out.
        .filter(|k| *k != registry_key && matches!(k, common::locks::Seen::Advisory { shared: false, .. }))
        .collect();
    assert!(!w.step().await, "no lock after the instance lock");
    let id = w.finish().await.unwrap();
    let site = s.request(id).await.instance_id;
    let mine = common::locks::resolve(&s.t.admin, &instance(&site)).await;
    assert_eq!(others, vec![mine], "beside the registry lock, the create held its site's instance lock alone");
    assert!(matches!(s.run(id).await.unwrap(), Ran::Recorded(Recorded::Done { .. })));
    assert_eq!(crate::sites::servable(&s, "fresh.wiki.localhost").await, Some(true));
}

#[tokio::test]
async fn a_release_of_a_deleted_sites_names_walked_lock_by_lock_takes_the_registry_lock_then_its_placement_rows_in_hostname_order()
 {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    // A second name of the site's, before its own in hostname order.
    s.t.run(sqlx::query(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
         SELECT 'aaa.wiki.localhost', owner, provider, object_id, servable FROM domains.placements
          WHERE hostname = 'docs.wiki.localhost'",
    ))
    .await;
    let delete = s.ask_delete(&docs).await;
    let farm = s.f.farm.clone();
    let mut w = LockWalk::start(&s.t, &registry::RELEASE_SITE_NAME_LOCKS, 3, |db| async move {
        fedwiki::run_site_request(&db, &farm, delete, false).await
    })
    .await;
    w.assert_holds_exactly(&[registry_lock()]).await;
    w.assert_probe_waits(&s.t, &registry_lock()).await;
    // One statement (domains.delete_site_placements) takes the site's rows, in hostname order,
    // before it notes the first: paused after each note, the path holds both. Their order
    // against a competitor: lock_trace::a_site_write_and_a_release_of_its_names_take_its_placement_rows_in_hostname_order.
    let all = [registry_lock(), placement("aaa.wiki.localhost"), placement("docs.wiki.localhost")];
    for row in &all[1..] {
        assert!(w.step().await, "paused after {row:?}");
        w.assert_holds_exactly(&all).await;
        w.assert_probe_waits(&s.t, row).await;
    }
    assert!(!w.step().await, "no lock after the site's placement rows");
    let ran = w.finish().await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    let left = s.count(&format!("SELECT count(*) FROM domains.placements WHERE object_id = '{docs}'")).await;
    assert_eq!(left, 0, "both names released");
}

#[tokio::test]
async fn an_ensure_farm_zone_walked_lock_by_lock_takes_only_the_registry_lock() {
    let s = setup("Basic").await;
    LockWalk::run(&s.t, &registry::ENSURE_FARM_ZONE_LOCKS, &[registry_lock()], |db| async move {
        registry::ensure_farm_zone(&db, &FarmZone::parse("wiki.localhost").unwrap()).await
    })
    .await
    .unwrap();
    let owner: String =
        s.t.one(sqlx::query_scalar("SELECT owner FROM domains.claims WHERE name = 'wiki.localhost'")).await;
    assert_eq!(owner, "farm");
}

#[tokio::test]
async fn a_members_domain_claimed_served_stopped_and_released_walked_lock_by_lock_under_the_registry_lock() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    let (who, org) = (s.who, s.org);
    // Claim: the registry lock alone (the claim and the workspace are the path's own inserts).
    let domain = domains::parse_domain("example.org", &s.settings).unwrap();
    let claimed = LockWalk::run(&s.t, &domains::CLAIM_DOMAIN_LOCKS, &[registry_lock()], |db| async move {
        domains::claim_domain(&db, who, org, &domain).await
    })
    .await
    .unwrap();
    assert_eq!(claimed.domain, "example.org");
    crate::sites::verify_through_dns(&s, org, &claimed.domain, &claimed.token).await;
    // Serve the site there: the registry lock, then that one site FOR SHARE.
    let id = docs.clone();
    let expected = [registry_lock(), Expect::row_in("fedwiki.sites", &docs, RowMode::Share)];
    LockWalk::run(&s.t, &domains::PLACE_SITE_UNDER_DOMAIN_LOCKS, &expected, |db| async move {
        domains::place_site_under_domain(&db, who, &id, &SiteDomain::from("wiki.example.org")).await
    })
    .await
    .unwrap();
    assert_eq!(crate::sites::servable(&s, "wiki.example.org").await, Some(true));
    // Stop serving it: the registry lock, then that placement row.
    let expected = [registry_lock(), placement("wiki.example.org")];
    LockWalk::run(&s.t, &domains::STOP_SERVING_LOCKS, &expected, |db| async move {
        domains::stop_serving(&db, who, org, &domains::HeldName::parse("wiki.example.org").into_domain()).await
    })
    .await
    .unwrap();
    assert_eq!(crate::sites::servable(&s, "wiki.example.org").await, None);
    // Release the domain: the registry lock alone.
    LockWalk::run(&s.t, &domains::RELEASE_DOMAIN_LOCKS, &[registry_lock()], |db| async move {
        domains::release_domain(&db, who, org, &domains::HeldName::parse("example.org").into_domain()).await
    })
    .await
    .unwrap();
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE name = 'example.org'").await, 0);
}
