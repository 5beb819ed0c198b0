//! A member's site requests and their recording, walked lock by lock (issue 36; the spec's paths
//! 32-41 and 55-57): each path runs as a member, or as the request's job, reaches it, under
//! `LockWalk`, which pauses it after each lock, shows it holds exactly the locks the spec's order
//! gives so far, each by its identity, and that a probe of the latest waits on it for that very
//! row or key. Rows a path inserts itself (a request, a created site's row, a first swap policy
//! row) are invisible to the administrator and are left out; the walks run where the rows they
//! lock exist before the path runs.

use crate::common;
use crate::sites::{Sites, assert_usage_agrees, instance, setup};

use std::time::Duration;

use common::locks::{Expect, LockWalk, RowMode, key_value};
use member_console::{
    db::keys::AdvisoryKey,
    ids::{RequestId, SiteId, WorkspaceId},
    services::{
        ServiceError,
        fedwiki::{
            self, Ran,
            gate::{self, Gate},
            handlers, intake,
            record::{self, Recorded},
            registry,
        },
    },
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki as store,
};

impl Sites {
    fn workspace(&self) -> WorkspaceId {
        WorkspaceId::from(format!("org-{}", self.org))
    }

    fn workspace_lock(&self) -> Expect {
        Expect::advisory(AdvisoryKey::Workspace(self.workspace()))
    }

    /// The swap policy row as the intake's upsert holds it (its ON CONFLICT update, no key).
    fn policy_row(&self) -> Expect {
        Expect::row_in("fedwiki.swap_policies", self.workspace(), RowMode::NoKeyUpdate)
    }

    /// The swap policy row as a failed swap's record holds it (FOR UPDATE, then its update).
    fn policy_row_locked(&self) -> Expect {
        Expect::row("fedwiki.swap_policies", self.workspace())
    }

    /// The workspace's swap policy row, stamped a day ago (an earlier swap and activation): the
    /// row a later rotation's upsert locks.
    async fn policy_stamped_a_day_ago(&self) {
        self.t
            .run(
                sqlx::query(
                    "INSERT INTO fedwiki.swap_policies (workspace_id, last_swap_at, last_activation_at)
                     VALUES ($1, now() - interval '1 day', now() - interval '1 day')",
                )
                .bind(self.workspace()),
            )
            .await;
    }

    /// A swap asked for that activates `asleep` (parked) and parks `live` (active), on a Free
    /// plan: (activation, park half).
    async fn swap_of(&self, live: &str, asleep: &str) -> (RequestId, RequestId) {
        let (l, a) = (self.site_id(live).await, self.site_id(asleep).await);
        let activation = fedwiki::swap_active_site(
            &self.t.db,
            &self.settings,
            self.who,
            &fedwiki::SwapSites { activate: a.as_str().into(), park: l.as_str().into() },
        )
        .await
        .unwrap();
        let park = {
            let mut c = self.t.db.read().await.unwrap();
            store::swap_partner(c.conn(), activation).await.unwrap().expect("the park half").request_id
        };
        (activation, park)
    }

    async fn ask(&self, site: &SiteId, kind: RequestKind) -> RequestId {
        fedwiki::change_status(&self.t.db, &self.settings, self.who, site, kind).await.unwrap()
    }
}

fn site_row(site_id: &SiteId) -> Expect {
    Expect::row("fedwiki.sites", site_id)
}

fn placement(name: &str) -> Expect {
    Expect::row("domains.placements", format!("{name}.wiki.localhost"))
}

/// A request row, by its outcome's UPDATE (no key column changes).
fn request_row(id: RequestId) -> Expect {
    Expect::row_in("fedwiki.lifecycle_requests", id.0, RowMode::NoKeyUpdate)
}

/// The lock and key of each row the traced transaction that took `lock` on `key` wrote, in order
/// (markers included: "path"/"step" with their names as keys).
async fn trace_of(t: &common::TestDb, lock: &str, key: &str) -> Vec<(String, Option<String>)> {
    t.all(
        sqlx::query_as(
            "SELECT lock, key FROM core.lock_trace
              WHERE xact = (SELECT xact FROM core.lock_trace WHERE lock = $1 AND key = $2 LIMIT 1)
              ORDER BY seq",
        )
        .bind(lock)
        .bind(key),
    )
    .await
}

// Path 32: the swap --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_swap_walked_lock_by_lock_takes_the_workspace_lock_then_each_sites_instance_lock_then_the_policy_row() {
    let s = setup("Free").await;
    s.created("front").await;
    s.created("back").await;
    let (front, back) = (s.site_id("front").await, s.site_id("back").await);
    s.policy_stamped_a_day_ago().await;
    // Each instance key on its own: held, and waited on by a probe, one by one (the workspace
    // lock does not stand in for them).
    let expected = [s.workspace_lock(), instance(&back), instance(&front), s.policy_row()];
    let (settings, who, a, p) = (s.settings.clone(), s.who, back.clone(), front.clone());
    let out = LockWalk::run(&s.t, &handlers::SWAP_ACTIVE_SITE_LOCKS, &expected, |db| async move {
        fedwiki::swap_active_site(
            &db,
            &settings,
            who,
            &fedwiki::SwapSites { activate: a.as_str().into(), park: p.as_str().into() },
        )
        .await
    })
    .await;
    let activation = out.unwrap();
    let req = s.request(activation).await;
    assert_eq!(
        (req.kind, req.state, req.instance_id.as_str()),
        (RequestKind::Activate, RequestState::Accepted, back.as_str())
    );
    let half = {
        let mut c = s.t.db.read().await.unwrap();
        store::swap_partner(c.conn(), activation).await.unwrap().expect("the park half")
    };
    assert_eq!((half.kind, half.instance_id.as_str()), (RequestKind::Park, front.as_str()));
    let e = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: front.as_str().into(), park: back.as_str().into() },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("You can swap again"), "the walked swap stamped the cooldown: {e}");
}

// Paths 33 and 34: changeStatus with a cooldown and without ------------------------------------------------

#[tokio::test]
async fn an_activation_under_a_cooldown_walked_lock_by_lock_takes_the_workspace_lock_then_the_instance_lock_then_the_policy_row()
 {
    let mut s = setup("Basic").await;
    s.created("resting").await;
    let site = s.site_id("resting").await;
    let park = s.ask(&site, RequestKind::Park).await;
    s.run(park).await.unwrap();
    assert_eq!(s.status("resting").await, "parked");
    s.settings.activation_cooldown = Duration::from_secs(600);
    s.policy_stamped_a_day_ago().await;
    let expected = [s.workspace_lock(), instance(&site), s.policy_row()];
    let (settings, who, id) = (s.settings.clone(), s.who, site.clone());
    let out = LockWalk::run(&s.t, &handlers::CHANGE_STATUS_WITH_COOLDOWN_LOCKS, &expected, |db| async move {
        fedwiki::change_status(&db, &settings, who, &id, RequestKind::Activate).await
    })
    .await;
    let req = s.request(out.unwrap()).await;
    assert_eq!((req.kind, req.state), (RequestKind::Activate, RequestState::Accepted));
    let stamped: bool = s
        .t
        .one(
            sqlx::query_scalar(
                "SELECT last_activation_at > now() - interval '1 minute' FROM fedwiki.swap_policies WHERE workspace_id = $1",
            )
            .bind(s.workspace()),
        )
        .await;
    assert!(stamped, "the walked activation stamped its cooldown on the policy row");
}

#[tokio::test]
async fn a_park_without_a_cooldown_walked_lock_by_lock_takes_only_the_instance_lock_and_names_its_intake() {
    let s = setup("Basic").await;
    s.created("busy").await;
    let site = s.site_id("busy").await;
    let (settings, who, id) = (s.settings.clone(), s.who, site.clone());
    assert!(settings.activation_cooldown.is_zero(), "activations and parks have no cooldown here");
    let out = LockWalk::run(&s.t, &handlers::CHANGE_STATUS_LOCKS, &[instance(&site)], |db| async move {
        fedwiki::change_status(&db, &settings, who, &id, RequestKind::Park).await
    })
    .await;
    let req = s.request(out.unwrap()).await;
    assert_eq!((req.kind, req.state), (RequestKind::Park, RequestState::Accepted));
    // Its transaction is the path's, and RecordLifecycleRequest (path 55) runs in it: the handler
    // takes the instance lock itself before it reads the site again, so the intake's own taking
    // of it is a lock already held (not a new acquisition), after its name.
    let key = key_value(&s.t.admin, &AdvisoryKey::LifecycleInstance(site.clone())).await.to_string();
    let trace = trace_of(&s.t, "LifecycleInstance", &key).await;
    let seen: Vec<(&str, Option<&str>)> = trace.iter().map(|(l, k)| (l.as_str(), k.as_deref())).collect();
    assert_eq!(
        seen,
        [
            ("path", Some("changeStatus (without a cooldown)")),
            ("LifecycleInstance", Some(key.as_str())),
            ("path", Some("RecordLifecycleRequest")),
        ]
    );
}

// Path 55: RecordLifecycleRequest ---------------------------------------------------------------------------

#[tokio::test]
async fn a_request_recorded_while_another_is_in_flight_walked_lock_by_lock_takes_the_instance_lock_then_is_refused() {
    let s = setup("Basic").await;
    s.created("inflight").await;
    let site = s.site_id("inflight").await;
    let first = s.ask(&site, RequestKind::Park).await;
    // The second request's latest-generation check runs under the instance lock, and finds the
    // first still accepted.
    let (settings, who, id) = (s.settings.clone(), s.who, site.clone());
    let out = LockWalk::run(&s.t, &handlers::CHANGE_STATUS_LOCKS, &[instance(&site)], |db| async move {
        fedwiki::change_status(&db, &settings, who, &id, RequestKind::Archive).await
    })
    .await;
    let e = out.unwrap_err();
    assert!(matches!(e, ServiceError::Refused(_)) && e.to_string().contains("already in progress"), "{e}");
    let asked =
        format!("SELECT count(*) FROM fedwiki.lifecycle_requests WHERE instance_id = '{site}' AND kind <> 'create'");
    assert_eq!(s.count(&asked).await, 1, "nothing was recorded for the refused request");
    assert_eq!(s.request(first).await.state, RequestState::Accepted, "the first is untouched");
}

// Path 56: RecordFirstLifecycleRequest, in the create's registry transaction --------------------------------

#[tokio::test]
async fn a_create_walked_lock_by_lock_takes_the_registry_lock_then_the_new_sites_instance_lock_for_its_first_request() {
    let s = setup("Basic").await;
    // The new site's id is made inside the path, so the walk is driven by hand: the instance key
    // held at the second pause is named by the request the create recorded, once it commits.
    let (settings, who, org) = (s.settings.clone(), s.who, s.org);
    let mut w = LockWalk::start(&s.t, &registry::PLACE_SITE_NAME_LOCKS, 2, |db| async move {
        let name = fedwiki::names::SiteName::parse("firstling").unwrap();
        fedwiki::create_site(&db, &settings, who, org, &name).await
    })
    .await;
    let registry_lock = Expect::advisory(AdvisoryKey::Registry);
    w.assert_holds_exactly(std::slice::from_ref(&registry_lock)).await;
    w.assert_probe_waits(&s.t, &registry_lock).await;
    assert!(w.step().await, "the create paused after its second lock");
    let held = w.held_now().await;
    let registry_key = key_value(&s.t.admin, &AdvisoryKey::Registry).await;
    let others: Vec<i64> = held
        .iter()
        .filter_map(|h| match h {
            common::locks::Seen::Advisory { key, shared: false } if *key != registry_key => Some(*key),
            _ => None,
        })
        .collect();
    assert_eq!(others.len(), 1, "the registry lock and one more: {held:?}");
    assert_eq!(held.len(), 2, "nothing else: {held:?}");
    // A probe of that key waits on the paused create.
    let (probe, task) = common::locks::probe_key(&s.t, others[0]).await;
    common::locks::assert_waits_on_key(&s.t.admin, probe, w.paused_pid(), others[0]).await;
    common::locks::cancel(&s.t.admin, probe, task).await;
    assert!(!w.step().await, "no lock after the instance lock");
    let id = w.finish().await.unwrap();
    let req = s.request(id).await;
    assert_eq!((req.kind, req.state, req.generation), (RequestKind::Create, RequestState::Accepted, 1));
    assert_eq!(
        others[0],
        key_value(&s.t.admin, &AdvisoryKey::LifecycleInstance(req.instance_id.clone())).await,
        "the second lock was the new site's instance lock"
    );
    // RecordFirstLifecycleRequest is named inside the create's transaction, before that lock.
    let trace = trace_of(&s.t, "LifecycleInstance", &others[0].to_string()).await;
    let seen: Vec<&str> =
        trace.iter().map(|(l, k)| if l == "path" { k.as_deref().unwrap() } else { l.as_str() }).collect();
    assert_eq!(
        seen,
        ["Registry: place a member's site name", "Registry", "RecordFirstLifecycleRequest", "LifecycleInstance"]
    );
}

// Path 35: the slot gate --------------------------------------------------------------------------------------

#[tokio::test]
async fn a_creates_slot_gate_walked_lock_by_lock_takes_the_instance_lock_then_the_usage_row_then_its_request_row() {
    let s = setup("Basic").await;
    let id = s.create("gated").await.unwrap();
    let site = s.request(id).await.instance_id;
    // A create's gate writes the status it chose for the site (starts_as) on the request's row,
    // last.
    let expected = [instance(&site), s.usage_row(), request_row(id)];
    let farm = s.f.farm.clone();
    // The job as the worker runs it: only its gate's transaction is the walked path.
    let out = LockWalk::run(&s.t, &gate::HOLD_SITE_SLOT_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.status("gated").await, "active");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn an_activations_slot_gate_walked_lock_by_lock_takes_the_instance_lock_then_the_site_row_then_the_usage_row() {
    let s = setup("Basic").await;
    s.created("waking").await;
    let site = s.site_id("waking").await;
    let park = s.ask(&site, RequestKind::Park).await;
    s.run(park).await.unwrap();
    let id = s.ask(&site, RequestKind::Activate).await;
    let req = s.request(id).await;
    let expected = [instance(&site), site_row(&site), s.usage_row()];
    let out = LockWalk::run(&s.t, &gate::HOLD_SITE_SLOT_LOCKS, &expected, |db| async move {
        gate::hold_site_slot(&db, &req).await
    })
    .await;
    assert_eq!(out.unwrap(), Gate::Held);
    assert_eq!(s.count(&format!("SELECT count(*) FROM fedwiki.slot_holds WHERE request_id = {id}")).await, 1);
    assert_usage_agrees(&s).await;
}

// Path 36: finishAllWith, the record step's frame ---------------------------------------------------------------

#[tokio::test]
async fn the_record_steps_frame_walked_lock_by_lock_takes_the_instance_lock_then_leaves_a_finished_request_alone() {
    let s = setup("Basic").await;
    s.created("twice").await;
    let site = s.site_id("twice").await;
    let park = s.ask(&site, RequestKind::Park).await;
    s.run(park).await.unwrap();
    let req = s.request(park).await;
    assert_eq!(req.state, RequestState::Done);
    let used = s.used().await;
    // A second record of the same outcome (a job run again after its record committed): the
    // frame takes the instance lock, reads the request under it, and writes nothing.
    let out = LockWalk::run(&s.t, &record::RECORD_SITE_STATUS_LOCKS, &[instance(&site)], |db| async move {
        record::finish_all_with(&db, &[req], record::Activity::Status { status: SiteStatus::Parked }).await
    })
    .await;
    assert_eq!(out.unwrap(), Recorded::AlreadyFinished);
    assert_eq!(s.used().await, used);
    // The frame marks itself (the spec's path 36) before its first lock.
    let key = key_value(&s.t.admin, &AdvisoryKey::LifecycleInstance(site.clone())).await.to_string();
    let trace = trace_of(&s.t, "LifecycleInstance", &key).await;
    let seen: Vec<(&str, Option<&str>)> = trace.iter().map(|(l, k)| (l.as_str(), k.as_deref())).collect();
    assert_eq!(
        seen,
        [
            ("path", Some("finishAllWith: RecordSiteStatusActivity")),
            ("step", Some("finishAllWith")),
            ("LifecycleInstance", Some(key.as_str())),
        ]
    );
}

// Path 37: RecordCreatedSiteActivity ------------------------------------------------------------------------

#[tokio::test]
async fn a_created_sites_record_walked_lock_by_lock_takes_the_instance_lock_then_its_placement_then_the_usage_row_then_its_request()
 {
    let s = setup("Basic").await;
    let id = s.create("newborn").await.unwrap();
    let site = s.request(id).await.instance_id;
    // The activity's own write is the site row's insert, a row no one else can see: it locks no
    // row that existed before. Its trigger marks the placement (placed with the request) servable.
    let expected = [instance(&site), placement("newborn"), s.usage_row(), request_row(id)];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::RECORD_CREATED_SITE_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.status("newborn").await, "active");
    assert_eq!(crate::sites::servable(&s, "newborn.wiki.localhost").await, Some(true));
    assert_usage_agrees(&s).await;
}

// Path 38: RecordSiteStatusActivity -------------------------------------------------------------------------

#[tokio::test]
async fn a_status_record_walked_lock_by_lock_takes_the_instance_lock_then_the_site_row_then_its_placement_then_the_usage_row_then_its_request()
 {
    let s = setup("Basic").await;
    s.created("dozing").await;
    let site = s.site_id("dozing").await;
    let id = s.ask(&site, RequestKind::Park).await;
    let expected = [instance(&site), site_row(&site), placement("dozing"), s.usage_row(), request_row(id)];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::RECORD_SITE_STATUS_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.status("dozing").await, "parked");
    assert_eq!(crate::sites::servable(&s, "dozing.wiki.localhost").await, Some(false));
    assert_usage_agrees(&s).await;
}

// Path 39: RecordSwapActivity -------------------------------------------------------------------------------

#[tokio::test]
async fn a_swaps_record_walked_lock_by_lock_takes_both_instance_locks_then_the_parked_then_the_activated_site_then_their_placements_then_the_usage_row_then_both_requests()
 {
    let s = setup("Free").await;
    s.created("live").await;
    s.created("asleep").await;
    let (live, asleep) = (s.site_id("live").await, s.site_id("asleep").await);
    let (activation, park) = s.swap_of("live", "asleep").await;
    let expected = [
        instance(&asleep),
        instance(&live),
        site_row(&live),
        site_row(&asleep),
        placement("live"),
        placement("asleep"),
        s.usage_row(),
        request_row(activation),
        request_row(park),
    ];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::RECORD_SWAP_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, activation, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!((s.status("live").await.as_str(), s.status("asleep").await.as_str()), ("parked", "active"));
    assert_eq!(s.request(park).await.state, RequestState::Done);
    assert_usage_agrees(&s).await;
}

// Path 40: RecordSiteDeletedActivity / FinishLifecycleRequestsActivity ------------------------------------------

#[tokio::test]
async fn a_declined_activations_record_walked_lock_by_lock_takes_the_instance_lock_then_the_usage_row_then_its_request()
{
    let s = setup("Free").await;
    s.created("first").await;
    s.created("second").await;
    assert_eq!(s.status("second").await, "parked", "the one slot was taken");
    let site = s.site_id("second").await;
    let id = s.ask(&site, RequestKind::Activate).await;
    let expected = [instance(&site), s.usage_row(), request_row(id)];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Declined, .. })));
    assert_eq!(s.status("second").await, "parked");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_deleted_sites_record_walked_lock_by_lock_takes_the_instance_lock_then_the_usage_row_then_its_request() {
    let s = setup("Basic").await;
    s.created("goner").await;
    let site = s.site_id("goner").await;
    let id = s.ask_delete(&site).await;
    let expected = [instance(&site), s.usage_row(), request_row(id)];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites WHERE domain = 'goner.wiki.localhost'").await, 0);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_failed_swaps_record_walked_lock_by_lock_takes_both_instance_locks_then_the_usage_row_then_both_requests_then_the_policy_row()
 {
    let s = setup("Free").await;
    s.created("live").await;
    s.created("asleep").await;
    let (live, asleep) = (s.site_id("live").await, s.site_id("asleep").await);
    let (activation, park) = s.swap_of("live", "asleep").await;
    // The farm fails the swap's first call on the job's last attempt: the swap ends failed and
    // gives its cooldown stamp back, on the policy row (which its intake wrote) last.
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    let expected = [
        instance(&asleep),
        instance(&live),
        s.usage_row(),
        request_row(activation),
        request_row(park),
        s.policy_row_locked(),
    ];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::FINISH_LIFECYCLE_REQUESTS_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, activation, true).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Failed, .. })));
    assert_eq!((s.status("live").await.as_str(), s.status("asleep").await.as_str()), ("active", "parked"));
    let stamp: Option<chrono::DateTime<chrono::Utc>> =
        s.t.one(
            sqlx::query_scalar("SELECT last_swap_at FROM fedwiki.swap_policies WHERE workspace_id = $1")
                .bind(s.workspace()),
        )
        .await;
    assert_eq!(stamp, None, "the failed swap gave its cooldown back");
    assert_usage_agrees(&s).await;
}

// Path 41: DeleteFedWikiSiteActivity ------------------------------------------------------------------------

#[tokio::test]
async fn a_site_rows_deletion_walked_lock_by_lock_takes_the_site_row_then_the_usage_row() {
    let s = setup("Basic").await;
    s.created("erased").await;
    let site = s.site_id("erased").await;
    let id = s.ask_delete(&site).await;
    // The names were released before (a member's deletion releases them first): no placement row.
    let expected = [site_row(&site), s.usage_row()];
    let farm = s.f.farm.clone();
    let out = LockWalk::run(&s.t, &record::DELETE_FEDWIKI_SITE_LOCKS, &expected, |db| async move {
        fedwiki::run_site_request(&db, &farm, id, false).await
    })
    .await;
    assert!(matches!(out.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites WHERE domain = 'erased.wiki.localhost'").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'erased.wiki.localhost'").await, 0);
    assert_usage_agrees(&s).await;
}

// Path 57: DeleteUnstartedLifecycleRequest --------------------------------------------------------------------

#[tokio::test]
async fn an_unstarted_requests_withdrawal_walked_takes_no_lock_and_deletes_it_with_its_job() {
    let s = setup("Basic").await;
    s.created("idle").await;
    let site = s.site_id("idle").await;
    let id = s.ask(&site, RequestKind::Park).await;
    let out = LockWalk::run(&s.t, &intake::DELETE_UNSTARTED_LIFECYCLE_REQUEST_LOCKS, &[], |db| async move {
        intake::delete_unstarted_lifecycle_request(&db, id).await
    })
    .await;
    assert!(out.unwrap());
    assert_eq!(s.count(&format!("SELECT count(*) FROM fedwiki.lifecycle_requests WHERE request_id = {id}")).await, 0);
    assert_eq!(
        s.count(&format!("SELECT count(*) FROM integration.jobs WHERE dedupe_key = 'fedwiki_request:{id}'")).await,
        0
    );
    assert_eq!(s.status("idle").await, "active");
}

// The member's Withdraw (path 57's production caller) -------------------------------------------------------

#[tokio::test]
async fn a_member_withdraws_a_request_before_its_job_starts_and_a_started_or_finished_one_is_refused() {
    let s = setup("Basic").await;
    s.created("steady").await;
    let site = s.site_id("steady").await;
    // A park not yet started: withdrawn with its job; the site stays as it was.
    let park = s.ask(&site, RequestKind::Park).await;
    let gone = fedwiki::withdraw_request(&s.t.db, s.who, park).await.unwrap();
    assert_eq!((gone.request_id, gone.kind), (park, RequestKind::Park));
    assert_eq!(s.count(&format!("SELECT count(*) FROM fedwiki.lifecycle_requests WHERE request_id = {park}")).await, 0);
    assert_eq!(
        s.count(&format!("SELECT count(*) FROM integration.jobs WHERE dedupe_key = 'fedwiki_request:{park}'")).await,
        0
    );
    assert_eq!(s.status("steady").await, "active");
    // A create not yet started: withdrawn, and its name is free again at once.
    let create = s.create("second-thoughts").await.unwrap();
    fedwiki::withdraw_request(&s.t.db, s.who, create).await.unwrap();
    assert_eq!(
        s.count("SELECT count(*) FROM domains.placements WHERE hostname = 'second-thoughts.wiki.localhost'").await,
        0
    );
    let again = s.create("second-thoughts").await.unwrap();
    // Once a worker took its job: refused, and kept.
    s.t.run(sqlx::query("UPDATE integration.jobs SET attempts = 1 WHERE dedupe_key = $1").bind(intake::job_key(again)))
        .await;
    let e = fedwiki::withdraw_request(&s.t.db, s.who, again).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("has started")), "{e}");
    assert_eq!(s.request(again).await.state, RequestState::Accepted);
    // Finished: refused.
    let done = s.ask(&site, RequestKind::Archive).await;
    s.run(done).await.unwrap();
    let e = fedwiki::withdraw_request(&s.t.db, s.who, done).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("already finished")), "{e}");
    // Another member's organization's request is not found.
    let stranger: i64 =
        s.t.one(sqlx::query_scalar("SELECT min(account_id) FROM core.accounts WHERE account_id <> $1").bind(s.who))
            .await;
    let other = s.ask(&site, RequestKind::Activate).await;
    let e = fedwiki::withdraw_request(&s.t.db, member_console::ids::AccountId(stranger), other).await.unwrap_err();
    assert!(matches!(e, ServiceError::NotFound(_)), "{e}");
}

#[tokio::test]
async fn a_swap_is_not_withdrawn_half_by_half() {
    let s = setup("Free").await;
    s.created("live").await;
    s.created("asleep").await;
    let (activation, park) = s.swap_of("live", "asleep").await;
    for id in [activation, park] {
        let e = fedwiki::withdraw_request(&s.t.db, s.who, id).await.unwrap_err();
        assert!(matches!(&e, ServiceError::Refused(m) if m.contains("cannot be withdrawn")), "{e}");
    }
    assert_eq!(s.request(activation).await.state, RequestState::Accepted);
}

#[tokio::test]
async fn a_member_withdraws_a_waiting_request_from_the_sites_page_and_a_started_one_is_refused_in_place() {
    use common::pages::Session;
    let s = setup("Basic").await;
    s.created("paged").await;
    let site = s.site_id("paged").await;
    let app = crate::sites::app(&s).await;
    let member =
        Session::sign_in(&app, member_console::demo::MEMBER_EMAIL, member_console::demo::MEMBER_PASSWORD).await;
    let park = s.ask(&site, RequestKind::Park).await;
    let page = member.get("/sites").await;
    let action = format!("/sites/requests/{park}/withdraw");
    assert!(page.body.contains(&action) && page.body.contains("Withdraw"), "{}", page.body);
    let out = member.post(&action, &[], false).await;
    assert_eq!((out.status.as_u16(), out.header("location")), (303, Some("/sites?asked=withdraw")), "{}", out.body);
    assert_eq!(s.count(&format!("SELECT count(*) FROM fedwiki.lifecycle_requests WHERE request_id = {park}")).await, 0);
    assert!(!member.get("/sites").await.body.contains(&action), "nothing left to withdraw");
    // Started before the click: 409, the reason beside the organization's sites, nothing changed.
    let park = s.ask(&site, RequestKind::Park).await;
    s.t.run(sqlx::query("UPDATE integration.jobs SET attempts = 1 WHERE dedupe_key = $1").bind(intake::job_key(park)))
        .await;
    let refused = member.post(&format!("/sites/requests/{park}/withdraw"), &[], true).await;
    assert_eq!(refused.status.as_u16(), 409, "{}", refused.body);
    assert!(refused.body.contains("has started: it can no longer be withdrawn"), "{}", refused.body);
    assert_eq!(s.request(park).await.state, RequestState::Accepted);
}
