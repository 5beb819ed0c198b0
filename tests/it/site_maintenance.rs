//! FedWiki maintenance against the local farm: the sync's branches (a farm-only site adopted, a
//! status the farm changed behind the console, storage observed, a System row the farm lost
//! removed, an organization's the farm lost kept as drift, a request's site left to its record
//! step), the farm down for a run, the retention purge, the quota's parks after a downgrade and
//! its reactivations after an upgrade, and the lock order of each new path.

use crate::common;
use crate::{
    common::{pages::Session, pause_writes_on},
    sites::{Sites, app, assert_usage_agrees, callback_at, post_callback, servable, setup},
};

use std::time::Duration;

use member_console::{
    db::keys::AdvisoryKey,
    demo,
    ids::{SiteDomain, WorkspaceId},
    services::fedwiki::{
        self, Ran,
        maintenance::{self, run_maintenance},
        names::SiteName,
        record::Recorded,
    },
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki_maintenance::RunCounts,
};

const RETENTION: Duration = Duration::from_secs(30 * 86_400);

impl Sites {
    async fn maintain(&self) -> RunCounts {
        run_maintenance(&self.t.db, &self.f.farm, RETENTION).await.unwrap()
    }

    async fn set(&self, sql: &str) {
        self.t.run(sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))).await;
    }

    async fn storage(&self, name: &str) -> i64 {
        self.count(&format!("SELECT storage_bytes FROM fedwiki.sites WHERE domain = '{name}.wiki.localhost'")).await
    }

    async fn rows(&self, domain: &str) -> i64 {
        self.count(&format!("SELECT count(*) FROM fedwiki.sites WHERE domain = '{domain}'")).await
    }
}

#[tokio::test]
async fn the_sync_adopts_what_only_the_farm_has_follows_its_statuses_and_keeps_what_it_lost_as_drift() {
    let s = setup("Basic").await;
    s.created("docs").await;
    s.created("notes").await;
    // The farm gets a site no organization asked for, and parks one behind the console's back.
    s.f.farm
        .create_site(&SiteDomain::from("stray.wiki.localhost"), &WorkspaceId::from("someone-else"), SiteStatus::Active)
        .await
        .unwrap();
    s.f.farm.set_status(&SiteDomain::from("docs.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    let c = s.maintain().await;
    assert_eq!((c.farm_sites, c.adopted, c.statuses_written), (3, 1, 1), "{c:?}");
    assert!(c.observed >= 1, "{c:?}");
    let stray: (String, String) =
        s.t.one(sqlx::query_as("SELECT workspace_id, status FROM fedwiki.sites WHERE domain = 'stray.wiki.localhost'"))
            .await;
    assert_eq!(stray, ("system".to_string(), "active".to_string()), "adopted into the System workspace");
    assert_eq!(servable(&s, "stray.wiki.localhost").await, Some(true), "its name is placed");
    assert_eq!(s.status("docs").await, "parked");
    assert_eq!(s.used().await, 1, "recounted");
    assert_usage_agrees(&s).await;
    assert!(
        s.count("SELECT count(*) FROM fedwiki.sites WHERE observed_at IS NULL AND workspace_id <> 'system'").await == 0,
        "every listed site was observed"
    );
    // Run again: nothing to write.
    let again = s.maintain().await;
    assert_eq!((again.adopted, again.statuses_written, again.removed), (0, 0, 0), "{again:?}");

    // The farm loses the System site and an organization's one.
    s.f.farm.delete_site(&SiteDomain::from("stray.wiki.localhost")).await.unwrap();
    s.f.farm.delete_site(&SiteDomain::from("notes.wiki.localhost")).await.unwrap();
    let c = s.maintain().await;
    assert_eq!((c.removed, c.missing_on_farm), (1, 1), "{c:?}");
    assert_eq!(s.rows("stray.wiki.localhost").await, 0);
    assert_eq!(servable(&s, "stray.wiki.localhost").await, None, "its name is released");
    assert_eq!(s.rows("notes.wiki.localhost").await, 1, "a member's site the farm lost stays, as drift");
}

#[tokio::test]
async fn a_site_with_a_request_in_flight_keeps_its_status_for_the_request_to_write() {
    let s = setup("Basic").await;
    let site = s.created("busy").await;
    // A park accepted, not carried yet; the farm (an operator's hand) parks it already.
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Park).await.unwrap();
    s.f.farm.set_status(&SiteDomain::from("busy.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    let c = s.maintain().await;
    assert_eq!((c.statuses_written, c.statuses_left), (0, 1), "{c:?}");
    assert_eq!(s.status("busy").await, "active", "the request's record step writes it");
    s.run(park).await.unwrap();
    assert_eq!(s.status("busy").await, "parked");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn the_sync_and_the_callbacks_order_what_they_write_by_the_farms_clock() {
    let s = setup("Basic").await;
    for name in ["docs", "notes", "plain"] {
        s.created(name).await;
    }
    let app = app(&s).await;
    let secret = common::farm::CALLBACK_SECRET;
    let now = chrono::Utc::now();
    let at = |d: chrono::Duration| (now + d).to_rfc3339();
    // Two callbacks that occur after the list below is taken, recorded before the sync writes.
    for (id, name) in [("cb-docs", "docs"), ("cb-notes", "notes")] {
        let body = callback_at(
            id,
            &format!("{name}.wiki.localhost"),
            999_999,
            &at(chrono::Duration::hours(1)),
            &at(chrono::Duration::hours(1)),
        );
        assert_eq!(post_callback(&app, &body, secret, now.timestamp()).await.0, 200);
    }
    // The farm parks docs behind the console: the sync writes its status, not its older storage.
    s.f.farm.set_status(&SiteDomain::from("docs.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    let c = s.maintain().await;
    assert_eq!(c.statuses_written, 1, "{c:?}");
    assert_eq!(s.status("docs").await, "parked");
    assert_eq!(s.storage("docs").await, 999_999, "the later callback's storage stands through a status write");
    assert_eq!(s.storage("notes").await, 999_999, "and through an observation");
    let listed = s.storage("plain").await;
    assert!(listed < 999_999, "plain was observed from the list: {listed}");
    // A callback that occurred before the list was taken, delivered after it, writes nothing.
    let late = callback_at(
        "cb-late",
        "plain.wiki.localhost",
        7,
        &at(-chrono::Duration::hours(1)),
        &at(-chrono::Duration::hours(1)),
    );
    let (status, said) = post_callback(&app, &late, secret, now.timestamp()).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(s.storage("plain").await, listed, "the list's observation stands");
}

#[tokio::test]
async fn a_farm_down_for_a_run_fails_it_writes_nothing_and_the_next_run_repairs() {
    let s = setup("Basic").await;
    s.created("docs").await;
    s.f.farm.set_status(&SiteDomain::from("docs.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    s.f.faults(serde_json::json!({"fail_next": 1, "status": 503})).await;
    let e = run_maintenance(&s.t.db, &s.f.farm, RETENTION).await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("farm"), "{e}");
    assert_eq!(s.status("docs").await, "active", "nothing written");
    let failed: (String, Option<String>) =
        s.t.one(sqlx::query_as("SELECT outcome, error FROM fedwiki.maintenance_runs ORDER BY run_id DESC LIMIT 1"))
            .await;
    assert_eq!(failed.0, "failed");
    s.maintain().await;
    assert_eq!(s.status("docs").await, "parked", "the next run repairs");
}

#[tokio::test]
async fn retention_deletes_archived_sites_past_it_on_the_farm_and_here_and_keeps_the_rest() {
    let s = setup("Basic").await;
    for name in ["old", "young", "wanted"] {
        let site = s.created(name).await;
        let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Archive).await.unwrap();
        s.run(archive).await.unwrap();
    }
    s.set("UPDATE fedwiki.sites SET status_changed_at = now() - interval '31 days' WHERE domain <> 'young.wiki.localhost'")
        .await;
    // A request is still open on `wanted`: it is not purged.
    let wanted = s.site_id("wanted").await;
    let activation = fedwiki::change_status(&s.t.db, &s.settings, s.who, &wanted, RequestKind::Activate).await.unwrap();
    let c = s.maintain().await;
    assert_eq!(c.purged, 1, "{c:?}");
    assert_eq!(s.rows("old.wiki.localhost").await, 0);
    assert!(s.f.site("old.wiki.localhost").await.is_none(), "deleted on the farm");
    assert_eq!(servable(&s, "old.wiki.localhost").await, None, "its name is released");
    assert_eq!(s.rows("young.wiki.localhost").await, 1);
    assert_eq!(s.rows("wanted.wiki.localhost").await, 1);
    s.run(activation).await.unwrap();
    assert_eq!(s.status("wanted").await, "active");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_downgrade_parks_the_least_recently_modified_sites_keep_active_last_and_an_upgrade_brings_them_back() {
    let s = setup("Free").await;
    let grant = common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    for name in ["alpha", "beta", "gamma"] {
        s.created(name).await;
    }
    // alpha is the oldest and kept active; gamma the most recently modified.
    s.set("UPDATE fedwiki.sites SET modified_at = now() - interval '3 days', keep_active = true WHERE domain LIKE 'alpha.%'")
        .await;
    s.set("UPDATE fedwiki.sites SET modified_at = now() - interval '2 days' WHERE domain LIKE 'beta.%'").await;
    s.set("UPDATE fedwiki.sites SET modified_at = now() - interval '1 day' WHERE domain LIKE 'gamma.%'").await;
    // The sync would read the farm's own times: keep the test's by leaving the farm unmeasured.
    member_console::services::grants::revoke_grant(
        &s.t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("downgrade").unwrap(),
    )
    .await
    .unwrap();
    let c = maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
    assert_eq!(c.parked, 2, "{c:?}");
    assert_eq!(
        (s.status("alpha").await, s.status("beta").await, s.status("gamma").await),
        ("active".into(), "parked".into(), "parked".into()),
        "the kept one stays"
    );
    assert_eq!(s.f.site("beta.wiki.localhost").await.unwrap()["status"], "parked", "on the farm too");
    assert_eq!(s.used().await, 1);
    // The member reads which and why.
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/sites").await;
    assert!(page.body.contains("Parked because the plan allows 1 active site"), "{}", page.body);

    // An upgrade: both come back, the most recently modified first; then nothing more to do.
    common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    let c = maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
    assert_eq!(c.reactivated, 2, "{c:?}");
    assert_eq!((s.status("beta").await, s.status("gamma").await), ("active".into(), "active".into()));
    assert_usage_agrees(&s).await;
    assert_eq!(maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap(), RunCounts::default());
}

/// A Free organization that had Basic's two active sites: the downgrade's quota run parked one
/// of them (its name returned).
async fn two_sites_one_parked_by_a_downgrade() -> (Sites, &'static str) {
    let s = setup("Free").await;
    let grant = common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    s.created("first").await;
    s.created("second").await;
    member_console::services::grants::revoke_grant(
        &s.t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("downgrade").unwrap(),
    )
    .await
    .unwrap();
    maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
    let parked = if s.status("first").await == "parked" { "first" } else { "second" };
    (s, parked)
}

#[tokio::test]
async fn a_reactivation_that_finds_the_site_archived_meanwhile_sets_the_farm_back_to_archived() {
    let (s, parked) = two_sites_one_parked_by_a_downgrade().await;
    let domain = SiteDomain::from(format!("{parked}.wiki.localhost"));
    // Room again; the quota reads its candidates, then the member archives the parked site before
    // the quota's reactivation runs its steps.
    common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    let id = s.site_id(parked).await;
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &id, RequestKind::Archive).await.unwrap();
    s.run(archive).await.unwrap();
    assert_eq!(s.status(parked).await, "archived");
    let back = maintenance::reactivate_site(&s.t.db, &s.f.farm, &id, &domain, s.pool).await.unwrap();
    assert!(!back, "the member's archive stands");
    assert_eq!(s.f.site(domain.as_str()).await.unwrap()["status"], "archived", "the farm is set back to it");
    // The next sync finds nothing to write: the member's archive is still what the console holds.
    s.maintain().await;
    assert_eq!(s.status(parked).await, "archived");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_park_whose_transaction_finds_a_members_archive_sets_the_farm_back_to_archived_and_the_sync_keeps_it() {
    let s = setup("Free").await;
    let grant = common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    s.created("kept").await;
    let id = s.created("archived").await;
    let domain = SiteDomain::from("archived.wiki.localhost");
    // Two active sites above the Free plan's one: the quota will park one of them.
    member_console::services::grants::revoke_grant(
        &s.t.db,
        grant,
        None,
        &member_console::services::grants::Reason::parse("downgrade").unwrap(),
    )
    .await
    .unwrap();
    // The member's archive: its farm call done, its record step paused at its recount, holding the
    // site row it wrote.
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &id, RequestKind::Archive).await.unwrap();
    let req = s.request(archive).await;
    s.f.farm.set_status(&domain, SiteStatus::Archived).await.unwrap();
    let (mut pause, pause_pid) = common::pause_on(&s.t, "core.numeric_entitlement_usage").await;
    let db = s.t.db.clone();
    let record = tokio::spawn(async move {
        fedwiki::record::finish_all_with(
            &db,
            &[req],
            fedwiki::record::Activity::Status { status: SiteStatus::Archived },
        )
        .await
    });
    let record_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    // The quota's park of the same site: its farm call lands after the member's, then its
    // transaction waits on the site row the record step holds.
    let (db, farm, site, on_farm) = (s.t.db.clone(), s.f.farm.clone(), id.clone(), domain.clone());
    let park = tokio::spawn(async move { maintenance::park_site(&db, &farm, &site, &on_farm).await });
    let parker = common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    assert!(parker > 0, "the park waits on the site row, its farm call made");
    assert_eq!(s.f.site(domain.as_str()).await.unwrap()["status"], "parked", "the park's farm call came last");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(record.await.unwrap().unwrap(), Recorded::Done { state: RequestState::Done, .. }));
    assert!(!park.await.unwrap().unwrap(), "the member's archive stands");
    assert_eq!(
        s.f.site(domain.as_str()).await.unwrap()["status"],
        "archived",
        "the farm is set back to the row's status"
    );
    // The next sync writes nothing over the archive, so retention can purge it.
    let c = s.maintain().await;
    assert_eq!(c.statuses_written, 0, "{c:?}");
    assert_eq!(s.status("archived").await, "archived");
    assert_usage_agrees(&s).await;
}

// Lock order ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_sync_status_write_waits_on_the_site_row_a_record_step_holds_and_leaves_the_status_to_it() {
    let s = setup("Basic").await;
    let site = s.created("contested").await;
    let listed_at = chrono::Utc::now() - chrono::Duration::seconds(5);
    // The park's record step, paused at its recount: it holds the site row it wrote.
    let (mut pause, recording, record_pid) = s.paused_status_record(&site, RequestKind::Park, SiteStatus::Parked).await;
    // The sync read the farm before the park: it saw the site active.
    let mut seen = s.f.farm.get_site(&SiteDomain::from("contested.wiki.localhost")).await.unwrap().unwrap();
    seen.status = SiteStatus::Active;
    let db = s.t.db.clone();
    let write = tokio::spawn(async move { maintenance::write_status(&db, &seen, SiteStatus::Active, listed_at).await });
    let writer = common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    assert!(writer > 0, "writeStatus waits on the site row");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(recording.await.unwrap().unwrap(), Recorded::Done { state: RequestState::Done, .. }));
    assert!(!write.await.unwrap().unwrap(), "the request changed since the list: no write");
    assert_eq!(s.status("contested").await, "parked", "the request's status stands");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_purge_waits_on_an_activations_instance_lock_and_then_skips_the_site_it_revived() {
    let s = setup("Basic").await;
    let site = s.created("revived").await;
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Archive).await.unwrap();
    s.run(archive).await.unwrap();
    s.set("UPDATE fedwiki.sites SET status_changed_at = now() - interval '31 days'").await;
    // The activation's record step, paused at its recount, holds the instance lock and the row.
    let (mut pause, recording, record_pid) =
        s.paused_status_record(&site, RequestKind::Activate, SiteStatus::Active).await;
    let (db, farm, id) = (s.t.db.clone(), s.f.farm.clone(), site.clone());
    let purge =
        tokio::spawn(async move { maintenance::purge_archived_site(&db, &farm, &id, RETENTION.as_secs_f64()).await });
    let purger = common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    assert!(purger > 0, "the purge waits on the instance lock");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    recording.await.unwrap().unwrap();
    assert!(!purge.await.unwrap().unwrap(), "no longer archived: skipped");
    assert_eq!(s.status("revived").await, "active");
    assert!(s.f.site("revived.wiki.localhost").await.is_some(), "the farm keeps it");
}

#[tokio::test]
async fn a_reactivation_waits_on_the_usage_row_a_slot_gate_holds_and_stays_within_the_limit() {
    let (s, parked) = two_sites_one_parked_by_a_downgrade().await;
    // Room for one again, and a member's create racing the quota for it.
    common::acts::grant(&s.t, s.org, common::acts::product_id(&s.t, "Basic").await).await;
    s.set("UPDATE core.pool_entitlements SET numeric_value = 2 WHERE resource_key = 'fedwiki.active_sites'").await;
    let create = s.create("third").await.unwrap();
    // The gate paused at its hold: it holds the usage row.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.slot_holds").await;
    let (db, farm) = (s.t.db.clone(), s.f.farm.clone());
    let gate = tokio::spawn(async move { fedwiki::run_site_request(&db, &farm, create, false).await });
    let gate_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    let (db, farm, id, pool) = (s.t.db.clone(), s.f.farm.clone(), s.site_id(parked).await, s.pool);
    let domain = SiteDomain::from(format!("{parked}.wiki.localhost"));
    let reactivate = tokio::spawn(async move { maintenance::reactivate_site(&db, &farm, &id, &domain, pool).await });
    let waiter = common::wait_for_waiter(&s.t.admin, &s.t.name, gate_pid).await;
    assert!(waiter > 0, "the reactivation waits on the usage row");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    gate.await.unwrap().unwrap();
    let back = reactivate.await.unwrap().unwrap();
    assert!(!back, "the gate took the last slot first: the reactivation rolls back");
    assert_eq!(s.status(parked).await, "parked");
    assert_eq!(s.f.site(&format!("{parked}.wiki.localhost")).await.unwrap()["status"], "parked", "on the farm too");
    assert!(s.used().await <= 2);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn an_operator_sees_the_runs_and_the_drift_and_runs_the_maintenance_now_once() {
    let s = setup("Basic").await;
    s.created("docs").await;
    s.maintain().await;
    s.f.farm.set_status(&SiteDomain::from("docs.wiki.localhost"), SiteStatus::Parked).await.unwrap();
    s.f.farm
        .create_site(&SiteDomain::from("stray.wiki.localhost"), &WorkspaceId::from("nobody"), SiteStatus::Active)
        .await
        .unwrap();
    let app = app(&s).await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let page = op.get("/operator/farm").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Maintenance") && page.body.contains("Run now"), "{}", page.body);
    assert!(page.body.contains("observed"), "the last run's counts: {}", page.body);
    let drift = op.get("/operator/farm?drift=1").await;
    assert!(drift.body.contains("2 differ"), "{}", drift.body);
    assert!(drift.body.contains("stray.wiki.localhost") && drift.body.contains("no row"), "{}", drift.body);
    let run = op.post("/operator/farm/run", &[], false).await;
    assert_eq!(run.header("location"), Some("/operator/farm?ran=1"), "{}", run.body);
    let again = op.post("/operator/farm/run", &[], false).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("already queued or running"), "{}", again.body);
    // A member reaches none of it.
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_ne!(member.get("/operator/farm").await.status, 200);
    assert_ne!(member.post("/operator/farm/run", &[], false).await.status, 303);
}

// Settle, the status reconcile and the domains at start ---------------------------------------------------

impl Sites {
    /// Lose a request's job, as a crash that outlived its attempts would.
    async fn lose_job(&self, id: member_console::ids::RequestId) {
        self.set(&format!("DELETE FROM integration.jobs WHERE dedupe_key = 'fedwiki_request:{id}'")).await;
    }

    async fn request_state(&self, id: member_console::ids::RequestId) -> (RequestState, Option<String>) {
        let r = self.request(id).await;
        (r.state, r.outcome)
    }
}

#[tokio::test]
async fn settle_finishes_a_request_no_job_carries_and_hands_one_holding_a_slot_to_the_status_reconcile() {
    use fedwiki::repair;
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    s.created("notes").await;
    let notes = s.site_id("notes").await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &notes, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    // A park whose job was lost, and an activation that took its slot and reached the farm.
    let lost = fedwiki::change_status(&s.t.db, &s.settings, s.who, &docs, RequestKind::Park).await.unwrap();
    s.lose_job(lost).await;
    let activation = fedwiki::change_status(&s.t.db, &s.settings, s.who, &notes, RequestKind::Activate).await.unwrap();
    let req = s.request(activation).await;
    assert!(matches!(fedwiki::gate::hold_site_slot(&s.t.db, &req).await.unwrap(), fedwiki::gate::Gate::Held));
    s.f.farm.set_status(&SiteDomain::from("notes.wiki.localhost"), SiteStatus::Active).await.unwrap();
    s.lose_job(activation).await;

    let done = repair::repair_at_start(&s.t.db).await.unwrap();
    assert_eq!((done.finished, done.handed_to_status_reconcile), (1, 1), "{done:?}");
    let (state, outcome) = s.request_state(lost).await;
    assert_eq!(state, RequestState::Failed);
    assert!(outcome.unwrap().contains("stopped before"));
    assert_eq!(s.request(activation).await.state, RequestState::Accepted, "handed over, not finished");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 1, "its hold stays");
    let queued = s
        .count(&format!(
            "SELECT count(*) FROM integration.jobs WHERE dedupe_key = 'fedwiki_status_reconcile:{activation}'"
        ))
        .await;
    assert_eq!(queued, 1);
    // The status reconcile: the farm holds it active, so the activation is recorded.
    let r = repair::reconcile_site_status(&s.t.db, &s.f.farm, activation).await.unwrap();
    assert!(matches!(r, Recorded::Done { state: RequestState::Done, .. }), "{r:?}");
    assert_eq!(s.status("notes").await, "active");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn the_status_reconcile_fails_a_request_the_farm_did_not_carry_out_and_one_whose_site_is_gone() {
    use fedwiki::repair;
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &docs, RequestKind::Park).await.unwrap();
    let r = repair::reconcile_site_status(&s.t.db, &s.f.farm, park).await.unwrap();
    assert!(
        matches!(&r, Recorded::Done { state: RequestState::Failed, outcome } if outcome.contains("did not park")),
        "{r:?}"
    );
    assert_eq!(s.status("docs").await, "active", "nothing changed");
    // A request on a site whose row went (an operator's hand): ended without asking the farm.
    let archive = fedwiki::change_status(&s.t.db, &s.settings, s.who, &docs, RequestKind::Archive).await.unwrap();
    s.set(&format!("DELETE FROM fedwiki.sites WHERE site_id = '{docs}'")).await;
    s.f.faults(serde_json::json!({"fail_next": 5, "status": 503})).await;
    let r = repair::reconcile_site_status(&s.t.db, &s.f.farm, archive).await.unwrap();
    assert!(matches!(r, Recorded::Done { state: RequestState::Failed, .. }), "{r:?}");
    // Run again: already finished.
    assert_eq!(repair::reconcile_site_status(&s.t.db, &s.f.farm, archive).await.unwrap(), Recorded::AlreadyFinished);
}

#[tokio::test]
async fn the_domains_reconciliation_removes_placements_of_missing_sites_and_places_sites_without_one() {
    let s = setup("Basic").await;
    let docs = s.created("docs").await;
    s.set(&format!("DELETE FROM domains.placements WHERE object_id = '{docs}'")).await;
    s.set(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
           VALUES ('ghost.wiki.localhost', 'workspace:system', 'fedwiki', 's-ghost', true)",
    )
    .await;
    let (removed, placed) = fedwiki::repair::reconcile_domains(&s.t.db).await.unwrap();
    assert_eq!((removed, placed), (1, 1));
    assert_eq!(servable(&s, "ghost.wiki.localhost").await, None);
    assert_eq!(servable(&s, "docs.wiki.localhost").await, Some(true));
    assert_eq!(fedwiki::repair::reconcile_domains(&s.t.db).await.unwrap(), (0, 0), "nothing more");
}

#[tokio::test]
async fn the_domains_reconciliation_between_a_creates_placement_and_its_request_frees_no_name() {
    let s = setup("Basic").await;
    // Stark Wikis, a second organization of the member's, will want the same name.
    let stark = common::acts::community_org(&s.t, "Stark Wikis").await.organization_id;
    s.set(&format!(
        "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ({stark}, {}, 'owner')",
        s.who
    ))
    .await;
    // The create pauses at its request's insert: its name is placed, its request not recorded.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.lifecycle_requests").await;
    let (db, settings, who, org) = (s.t.db.clone(), s.settings.clone(), s.who, s.org);
    let create = tokio::spawn(async move {
        fedwiki::create_site(&db, &settings, who, org, &SiteName::parse("contested").unwrap()).await
    });
    let creator = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    assert!(creator > 0, "the create waits at its request's insert");
    // It holds the registry lock and one more key, the new site's instance lock (its id is not
    // visible before the commit: it is checked against the request below): one transaction.
    let registry = common::locks::Expect::advisory(AdvisoryKey::Registry);
    common::locks::assert_holds(&s.t.admin, creator, std::slice::from_ref(&registry)).await;
    let registry = common::locks::resolve(&s.t.admin, &registry).await;
    let held: Vec<_> = common::locks::advisory_held(&s.t.admin, creator, &Default::default())
        .await
        .into_iter()
        .filter(|k| *k != registry)
        .collect();
    // The boot's domains reconciliation runs exactly there.
    let (removed, _) = fedwiki::repair::reconcile_domains(&s.t.db).await.unwrap();
    assert_eq!(removed, 0, "the create's name is not an orphan");
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    let id = create.await.unwrap().unwrap();
    let instance = AdvisoryKey::LifecycleInstance(s.request(id).await.instance_id);
    let instance = common::locks::resolve(&s.t.admin, &common::locks::Expect::advisory(instance)).await;
    assert_eq!(held, vec![instance], "beside the registry lock, the create held its site's instance lock");
    assert_eq!(servable(&s, "contested.wiki.localhost").await, Some(false), "the name stays placed for the create");
    // Another organization cannot take it.
    let other = fedwiki::create_site(&s.t.db, &s.settings, s.who, stark, &SiteName::parse("contested").unwrap()).await;
    assert!(common::acts::field_errors(other.unwrap_err()).iter().any(|(f, m)| f == "name" && m.contains("is taken")));
    // The create carries on to its site under its name.
    assert!(matches!(s.run(id).await.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(servable(&s, "contested.wiki.localhost").await, Some(true));
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites WHERE domain = 'contested.wiki.localhost'").await, 1);
}

#[tokio::test]
async fn the_sync_leaves_a_site_a_create_in_flight_made_on_the_farm_to_that_creates_record_step() {
    let s = setup("Basic").await;
    let id = s.create("fresh").await.unwrap();
    // The create reached the farm; its record step has not run (a worker died in between).
    s.f.farm
        .create_site(
            &SiteDomain::from("fresh.wiki.localhost"),
            &WorkspaceId::from(format!("org-{}", s.org)),
            SiteStatus::Active,
        )
        .await
        .unwrap();
    let c = s.maintain().await;
    assert_eq!((c.adopted, c.statuses_left), (0, 1), "{c:?}");
    assert_eq!(s.rows("fresh.wiki.localhost").await, 0, "not adopted");
    s.run(id).await.unwrap();
    assert_eq!(s.status("fresh").await, "active", "the create records it");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn the_syncs_insert_checks_again_for_a_request_its_sets_predate_and_leaves_the_site_alone() {
    let s = setup("Basic").await;
    let owner = WorkspaceId::from(format!("org-{}", s.org));
    // A create accepted and made on the farm after the pass read its sets (here: never read),
    // then listed on a later page.
    let id = s.create("late").await.unwrap();
    s.f.farm.create_site(&SiteDomain::from("late.wiki.localhost"), &owner, SiteStatus::Active).await.unwrap();
    // A site deleted here and on the farm after the list was taken, still on that list.
    s.created("gone").await;
    let page = s.f.farm.list_page(&SiteDomain::from(""), 100).await.unwrap();
    let listed = |domain: &str| page.sites.iter().find(|f| f.domain == domain).cloned().expect("listed");
    let delete = s.ask_delete(&s.site_id("gone").await).await;
    s.run(delete).await.unwrap();
    for site in [listed("late.wiki.localhost"), listed("gone.wiki.localhost")] {
        let adopted =
            maintenance::insert_from_farm(&s.t.db, &site, &owner, SiteStatus::Active, page.listed_at).await.unwrap();
        assert_eq!(adopted, None, "{} was left alone", site.domain);
        assert_eq!(s.rows(site.domain.as_str()).await, 0, "{}", site.domain);
    }
    // The create's record step records its site once; the deleted one stays deleted.
    assert!(matches!(s.run(id).await.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.rows("late.wiki.localhost").await, 1);
    assert_eq!(s.rows("gone.wiki.localhost").await, 0);
    assert_usage_agrees(&s).await;
}
