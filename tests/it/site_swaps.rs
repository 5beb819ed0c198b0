//! A swap's two halves and a create's name, against the local farm: a callback on the parked side
//! nudges the swap's own job (the park half never runs alone); a restart leaves the park half to
//! that job and the name of a create in flight to its create; a swap that does not happen gives
//! its cooldown back; a create the farm answers with a site it already had is brought to the
//! status the gate granted; and the lock order of the cooldown's restore.

use crate::common;
use crate::sites::{Sites, app, assert_usage_agrees, callback, post_callback, servable, setup};

use member_console::{
    ids::{RequestId, SiteDomain, WorkspaceId},
    services::fedwiki::{
        self, Ran,
        record::{self, Recorded},
        repair,
    },
    states::{RequestState, SiteStatus},
    store::{fedwiki as store, fedwiki_maintenance},
};

impl Sites {
    /// `live` active and `asleep` parked (a Free plan: one slot), and a swap asked for that
    /// activates `asleep` and parks `live`: (activation, park half).
    async fn swap_asked(&self) -> (RequestId, RequestId) {
        self.created("live").await;
        self.created("asleep").await;
        let (live, asleep) = (self.site_id("live").await, self.site_id("asleep").await);
        let activation = fedwiki::swap_active_site(
            &self.t.db,
            &self.settings,
            self.who,
            &fedwiki::SwapSites { activate: asleep.as_str().into(), park: live.as_str().into() },
        )
        .await
        .unwrap();
        let park = {
            let mut c = self.t.db.read().await.unwrap();
            store::swap_partner(c.conn(), activation).await.unwrap().expect("the park half").request_id
        };
        (activation, park)
    }

    async fn on_farm(&self, name: &str) -> String {
        self.f.site(&format!("{name}.wiki.localhost")).await.expect("the farm has it")["status"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn jobs_keyed(&self, id: RequestId) -> i64 {
        self.count(&format!("SELECT count(*) FROM integration.jobs WHERE dedupe_key = 'fedwiki_request:{id}'")).await
    }

    async fn swap_stamp(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let mut c = self.t.db.read().await.unwrap();
        store::last_swap_at(c.conn(), &WorkspaceId::from(format!("org-{}", self.org))).await.unwrap()
    }
}

#[tokio::test]
async fn a_callback_on_a_swaps_parked_site_nudges_the_swaps_job_and_its_park_half_never_runs_alone() {
    let s = setup("Free").await;
    let (activation, park) = s.swap_asked().await;
    // The farm reports on the site the swap parks, before the swap's job ran.
    let app = app(&s).await;
    let now = chrono::Utc::now().timestamp();
    let (status, said) =
        post_callback(&app, &callback("cb-swap", "live.wiki.localhost", 10), common::farm::CALLBACK_SECRET, now).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(s.jobs_keyed(park).await, 0, "the park half has no job of its own");
    assert_eq!(s.jobs_keyed(activation).await, 1, "the swap's job carries it");
    // Even run by hand, the park half does nothing on its own.
    assert_eq!(s.run(park).await.unwrap(), Ran::Nothing);
    assert_eq!(s.on_farm("live").await, "active", "the farm was not asked");
    assert_eq!(s.request(park).await.state, RequestState::Accepted);
    // The swap's job records one outcome for both halves.
    let ran = s.run(activation).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    assert_eq!(
        (s.request(activation).await.state, s.request(park).await.state),
        (RequestState::Done, RequestState::Done)
    );
    assert_eq!((s.on_farm("asleep").await.as_str(), s.on_farm("live").await.as_str()), ("active", "parked"));
    assert_eq!((s.status("asleep").await.as_str(), s.status("live").await.as_str()), ("active", "parked"));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_restart_mid_swap_leaves_its_park_half_to_the_swaps_job_and_a_swap_no_job_carries_fails_whole() {
    let s = setup("Free").await;
    let (activation, park) = s.swap_asked().await;
    let done = repair::repair_at_start(&s.t.db).await.unwrap();
    assert_eq!((done.finished, done.handed_to_status_reconcile), (0, 0), "{done:?}");
    assert_eq!(s.request(park).await.state, RequestState::Accepted, "carried by the swap's job");
    let ran = s.run(activation).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    assert_eq!(s.request(park).await.state, RequestState::Done);

    // A swap back whose job was lost: both halves end failed, together.
    s.t.run(sqlx::query("UPDATE fedwiki.swap_policies SET last_swap_at = NULL")).await;
    let (live, asleep) = (s.site_id("live").await, s.site_id("asleep").await);
    let back = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: live.as_str().into(), park: asleep.as_str().into() },
    )
    .await
    .unwrap();
    s.t.run(sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM integration.jobs WHERE dedupe_key = 'fedwiki_request:{back}'"
    ))))
    .await;
    let done = repair::repair_at_start(&s.t.db).await.unwrap();
    assert_eq!(done.finished, 1, "one outcome for the two halves: {done:?}");
    let back_park = s.count(&format!("SELECT request_id FROM fedwiki.lifecycle_requests WHERE swap_of = {back}")).await;
    for id in [back, RequestId(back_park)] {
        let r = s.request(id).await;
        assert_eq!(r.state, RequestState::Failed, "{r:?}");
        assert!(r.outcome.unwrap().contains("stopped before"));
    }
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_restart_keeps_the_name_of_a_create_in_flight_and_removes_a_placement_no_request_stands_behind() {
    let s = setup("Basic").await;
    // A create accepted, its farm call failing: no site row yet, its name placed.
    let id = s.create("gamma").await.unwrap();
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    assert!(s.run(id).await.is_err());
    let done = repair::repair_at_start(&s.t.db).await.unwrap();
    assert_eq!(done.placements_removed, 0, "{done:?}");
    assert_eq!(servable(&s, "gamma.wiki.localhost").await, Some(false), "the create keeps its name");
    let e = s.create("gamma").await.unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    // The delete checks again in its own transaction.
    let (mut tx, _) = s.t.runtime_begin().await;
    assert!(
        !fedwiki_maintenance::delete_orphaned_placement(&mut tx, &SiteDomain::from("gamma.wiki.localhost"))
            .await
            .unwrap()
    );
    sqlx::query("ROLLBACK").execute(&mut tx).await.unwrap();
    let ran = s.run(id).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    assert_eq!(servable(&s, "gamma.wiki.localhost").await, Some(true));
    // A placement with no site and no request behind it is still removed.
    s.t.run(sqlx::query(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
           VALUES ('ghost.wiki.localhost', 'workspace:system', 'fedwiki', 's-ghost', true)",
    ))
    .await;
    assert_eq!(repair::repair_at_start(&s.t.db).await.unwrap().placements_removed, 1);
    assert_eq!(servable(&s, "ghost.wiki.localhost").await, None);
}

#[tokio::test]
async fn a_swap_that_fails_gives_its_cooldown_back_to_the_last_swap_that_happened() {
    let s = setup("Free").await;
    let (activation, _) = s.swap_asked().await;
    s.run(activation).await.unwrap();
    // Time passes beyond the cooldown: the done swap's stamp (and its request's time) move back.
    s.t.run(sqlx::query(
        "UPDATE fedwiki.lifecycle_requests SET created_at = now() - interval '15 minutes'
          WHERE swap_of IS NOT NULL OR request_id IN (SELECT swap_of FROM fedwiki.lifecycle_requests)",
    ))
    .await;
    s.t.run(sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE fedwiki.swap_policies
            SET last_swap_at = (SELECT created_at FROM fedwiki.lifecycle_requests WHERE request_id = {activation})"
    ))))
    .await;
    let earlier = s.swap_stamp().await.expect("stamped");
    let (live, asleep) = (s.site_id("live").await, s.site_id("asleep").await);
    let back = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: live.as_str().into(), park: asleep.as_str().into() },
    )
    .await
    .unwrap();
    assert!(s.swap_stamp().await > Some(earlier), "the intake stamps the cooldown");
    // The farm fails the swap for good.
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    let ran = fedwiki::run_site_request(&s.t.db, &s.f.farm, back, true).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Failed, .. })), "{ran:?}");
    assert_eq!(s.swap_stamp().await, Some(earlier), "the stamp is the last swap that happened");
    // So the member may swap again at once.
    let again = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: live.as_str().into(), park: asleep.as_str().into() },
    )
    .await
    .unwrap();
    s.run(again).await.unwrap();
    assert_eq!((s.status("live").await.as_str(), s.status("asleep").await.as_str()), ("active", "parked"));
    // A swap that happened keeps its stamp: the next is refused inside the cooldown.
    let e = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: asleep.as_str().into(), park: live.as_str().into() },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("You can swap again in 10 minutes"), "{e}");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_create_the_farm_already_holds_active_is_parked_there_when_the_gate_grants_no_slot() {
    let s = setup("Free").await;
    s.created("one").await;
    let id = s.create("two").await.unwrap();
    // The farm already has the site for this owner, active (made by an earlier attempt, or by hand).
    s.f.farm
        .create_site(
            &SiteDomain::from("two.wiki.localhost"),
            &WorkspaceId::from(format!("org-{}", s.org)),
            SiteStatus::Active,
        )
        .await
        .unwrap();
    let ran = s.run(id).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    assert_eq!(s.status("two").await, "parked", "no slot was free");
    assert_eq!(s.on_farm("two").await, "parked", "the farm agrees with the console");
    assert_eq!(s.on_farm("one").await, "active");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_failed_swaps_record_step_takes_the_swap_policy_row_after_its_request_rows() {
    let s = setup("Free").await;
    let (activation, park) = s.swap_asked().await;
    let (req, half) = (s.request(activation).await, s.request(park).await);
    let holding = [
        crate::sites::instance(&req.instance_id),
        crate::sites::instance(&half.instance_id),
        s.usage_row(),
        common::locks::Expect::row_in(
            "fedwiki.lifecycle_requests",
            req.request_id.0,
            common::locks::RowMode::NoKeyUpdate,
        ),
        common::locks::Expect::row_in(
            "fedwiki.lifecycle_requests",
            half.request_id.0,
            common::locks::RowMode::NoKeyUpdate,
        ),
    ];
    // A handler's intake at its last statement: the policy row upserted, not committed.
    let (mut intake, intake_pid) = s.t.runtime_begin().await;
    store::upsert_swap_policy(&mut intake, &req.workspace_id, true).await.unwrap();
    let holding_workspace = req.workspace_id.clone();
    let db = s.t.db.clone();
    let recording = tokio::spawn(async move {
        let failed = record::Activity::Finish { state: RequestState::Failed, outcome: "The farm failed.".into() };
        record::finish_all_with(&db, &[req, half], failed).await
    });
    let recorder = common::wait_for_waiter(&s.t.admin, &s.t.name, intake_pid).await;
    // Waiting on the policy row, the record step holds everything it takes before it.
    let declared = record::FINISH_LIFECYCLE_REQUESTS_LOCKS.locks;
    assert_eq!(declared.last(), Some(&member_console::db::locks::Lock::SwapPolicyRow));
    common::locks::assert_holds(&s.t.admin, recorder, &holding).await;
    let policy = common::locks::Expect::row("fedwiki.swap_policies", &holding_workspace);
    common::locks::assert_waits(&s.t.admin, recorder, intake_pid, &policy).await;
    sqlx::query("COMMIT").execute(&mut intake).await.unwrap();
    let r = recording.await.unwrap().unwrap();
    assert!(matches!(r, Recorded::Done { state: RequestState::Failed, .. }), "{r:?}");
    assert_eq!(s.swap_stamp().await, None, "no swap happened: no cooldown");
    assert_usage_agrees(&s).await;
}
