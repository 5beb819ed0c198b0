//! FedWiki sites against the project's local farm: a member's create, park, activate, swap and
//! delete carried through the slot gate, the farm and the record step; bad names; the last slot
//! taken by two at once; the farm failing; the callbacks over HTTP; and the lock order of the
//! new paths (two transactions, one waits on the other).

use crate::common;

use std::{sync::Arc, time::Duration};

use common::{TestDb, farm::FarmFixture, locks::Expect, pages::demo_db, pause_on, pause_writes_on};
use member_console::db::keys::AdvisoryKey;
use member_console::{
    config::FarmSettings,
    demo,
    ids::{AccountId, OrganizationId, PoolId, RequestId, SiteDomain, SiteId, WorkspaceId},
    integrations::farm::signature,
    services::{
        ServiceError,
        fedwiki::{
            self, Ran,
            gate::{self, Gate},
            names::SiteName,
            record::{self, Recorded},
        },
    },
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki as store,
};

pub(crate) struct Sites {
    pub(crate) t: TestDb,
    pub(crate) f: FarmFixture,
    pub(crate) settings: FarmSettings,
    pub(crate) who: AccountId,
    pub(crate) org: OrganizationId,
    pub(crate) pool: PoolId,
}

/// A site's lifecycle instance lock, as the harness names it.
pub(crate) fn instance(site_id: &SiteId) -> Expect {
    Expect::advisory(AdvisoryKey::LifecycleInstance(site_id.clone()))
}

/// The demo, its member's organization granted `product` (Free: 1 active site, Basic: 3).
pub(crate) async fn setup(product: &str) -> Sites {
    let t = demo_db().await;
    let f = FarmFixture::start().await;
    let who = AccountId(
        t.one(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = $1").bind(demo::MEMBER_EMAIL))
            .await,
    );
    let org =
        OrganizationId(common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    let pool = PoolId(
        common::acts::scalar(
            &t,
            &format!("SELECT pool_id FROM core.resource_pools WHERE organization_id = {org} AND is_default"),
        )
        .await,
    );
    if product != "Free" {
        common::acts::grant(&t, org, common::acts::product_id(&t, product).await).await;
    }
    let settings = FarmSettings { swap_cooldown: Duration::from_secs(600), ..FarmSettings::default() };
    Sites { t, f, settings, who, org, pool }
}

impl Sites {
    pub(crate) async fn create(&self, name: &str) -> Result<RequestId, ServiceError> {
        fedwiki::create_site(&self.t.db, &self.settings, self.who, self.org, &SiteName::parse(name).unwrap()).await
    }

    /// Run a request's workflow as its job would (not its last attempt).
    pub(crate) async fn run(&self, id: RequestId) -> Result<Ran, ServiceError> {
        fedwiki::run_site_request(&self.t.db, &self.f.farm, id, false).await
    }

    /// A member's deletion of `site_id`, accepted (its workflow not run).
    pub(crate) async fn ask_delete(&self, site_id: &member_console::ids::SiteId) -> RequestId {
        fedwiki::change_status(&self.t.db, &self.settings, self.who, site_id, RequestKind::Delete).await.unwrap()
    }

    pub(crate) async fn created(&self, name: &str) -> member_console::ids::SiteId {
        let id = self.create(name).await.unwrap();
        assert!(matches!(self.run(id).await.unwrap(), Ran::Recorded(Recorded::Done { .. })));
        self.site_id(name).await
    }

    pub(crate) async fn site_id(&self, name: &str) -> member_console::ids::SiteId {
        common::farm::site_id(&self.t, name).await
    }

    pub(crate) async fn status(&self, name: &str) -> String {
        self.t
            .one(
                sqlx::query_scalar("SELECT status FROM fedwiki.sites WHERE domain = $1")
                    .bind(format!("{name}.wiki.localhost")),
            )
            .await
    }

    pub(crate) async fn request(&self, id: RequestId) -> store::RequestRow {
        let mut c = self.t.db.read().await.unwrap();
        store::request(c.conn(), id).await.unwrap().unwrap()
    }

    /// The pool's usage row of `fedwiki.active_sites`, as a lock.
    pub(crate) fn usage_row(&self) -> Expect {
        Expect::row("core.numeric_entitlement_usage", format!("{},fedwiki.active_sites", self.pool.0))
    }

    /// The usage row of `fedwiki.active_sites`, as last counted.
    pub(crate) async fn used(&self) -> i64 {
        self.count(&format!(
            "SELECT used FROM core.numeric_entitlement_usage WHERE pool_id = {} AND resource_key = 'fedwiki.active_sites'",
            self.pool
        ))
        .await
    }

    pub(crate) async fn count(&self, sql: &str) -> i64 {
        common::acts::scalar(&self.t, sql).await
    }
}

/// usage = active sites + open holds, for the test's pool (the stress invariant, here).
pub(crate) async fn assert_usage_agrees(s: &Sites) {
    let counted = s.count(&format!("SELECT fedwiki.count_slots({})", s.pool)).await;
    assert_eq!(s.used().await, counted, "the usage row agrees with the sites and holds");
}

#[tokio::test]
async fn a_member_creates_a_site_that_the_farm_holds_active_and_the_registry_serves() {
    let s = setup("Basic").await;
    let id = s.create("handbook").await.unwrap();
    assert_eq!(s.request(id).await.state, RequestState::Accepted);
    assert_eq!(s.count("SELECT count(*) FROM integration.jobs WHERE kind = 'fedwiki_request'").await, 1);
    let ran = s.run(id).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })), "{ran:?}");
    assert_eq!(s.status("handbook").await, "active");
    assert_eq!(s.used().await, 1);
    let on_farm = s.f.site("handbook.wiki.localhost").await.expect("the farm has it");
    assert_eq!(on_farm["status"], "active");
    assert_eq!(on_farm["owner"], format!("org-{}", s.org));
    let servable: bool = s
        .t
        .one(sqlx::query_scalar("SELECT servable FROM domains.placements WHERE hostname = 'handbook.wiki.localhost'"))
        .await;
    assert!(servable, "the site trigger marked its placement servable");
    // A crash after the record step: the job runs again and records nothing twice.
    assert_eq!(s.run(id).await.unwrap(), Ran::Nothing);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 1);
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn bad_and_taken_names_are_refused_and_nothing_is_written() {
    let s = setup("Basic").await;
    for bad in ["", "-x", "x-", "a.b", "a b", "Ünï", &"x".repeat(64)] {
        assert!(SiteName::parse(bad).is_err(), "{bad:?}");
    }
    s.created("taken").await;
    let before = s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await;
    let e = s.create("taken").await.unwrap_err();
    assert!(matches!(&e, ServiceError::Invalid(p) if p[0].0 == "name" && p[0].1.contains("taken")), "{e:?}");
    // Another organization's member cannot create under this organization.
    let stranger = common::acts::community_org(&s.t, "Strangers").await;
    let e =
        fedwiki::create_site(&s.t.db, &s.settings, s.who, stranger.organization_id, &SiteName::parse("mine").unwrap())
            .await
            .unwrap_err();
    assert!(matches!(e, ServiceError::NotFound(_)), "{e:?}");
    // A name under another owner's claim.
    s.t.run(sqlx::query("INSERT INTO domains.claims (name, owner) VALUES ('corp.wiki.localhost', 'workspace:other')"))
        .await;
    let e = s.create("corp").await.unwrap_err();
    assert!(e.to_string().contains("another owner holds"), "{e}");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await, before, "no request was written");
    assert_eq!(s.count("SELECT count(*) FROM domains.placements").await, 1, "no name was placed");
}

#[tokio::test]
async fn two_creates_racing_for_the_last_slot_leave_one_active_and_one_parked() {
    let s = Arc::new(setup("Free").await);
    let (a, b) = (s.create("first").await.unwrap(), s.create("second").await.unwrap());
    let (s1, s2) = (s.clone(), s.clone());
    let (ra, rb) = tokio::join!(async move { s1.run(a).await }, async move { s2.run(b).await });
    ra.unwrap();
    rb.unwrap();
    let mut statuses = vec![s.status("first").await, s.status("second").await];
    statuses.sort();
    assert_eq!(statuses, ["active", "parked"], "one took the slot, the other was created parked");
    assert_eq!(s.used().await, 1);
    let parked = if s.status("first").await == "parked" { a } else { b };
    let outcome = s.request(parked).await.outcome.unwrap();
    assert!(outcome.contains("parked"), "{outcome}");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn an_activation_above_the_limit_is_declined_with_what_to_do() {
    let s = setup("Free").await;
    s.created("one").await;
    s.created("two").await;
    assert_eq!(s.status("two").await, "parked");
    let two = s.site_id("two").await;
    let id = fedwiki::change_status(&s.t.db, &s.settings, s.who, &two, RequestKind::Activate).await.unwrap();
    s.run(id).await.unwrap();
    let r = s.request(id).await;
    assert_eq!(r.state, RequestState::Declined);
    assert!(r.outcome.unwrap().contains("1 of 1 active sites are in use: park one or upgrade your plan"));
    assert_eq!(s.status("two").await, "parked");
    assert_eq!(s.f.site("two.wiki.localhost").await.unwrap()["status"], "parked", "the farm was never asked");
    // Park the first, then the second activates.
    let one = s.site_id("one").await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &one, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    let again = fedwiki::change_status(&s.t.db, &s.settings, s.who, &two, RequestKind::Activate).await.unwrap();
    s.run(again).await.unwrap();
    assert_eq!((s.status("one").await.as_str(), s.status("two").await.as_str()), ("parked", "active"));
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_swap_parks_one_and_activates_the_other_and_a_second_inside_the_cooldown_is_refused() {
    let s = setup("Free").await;
    s.created("live").await;
    s.created("asleep").await;
    let (live, asleep) = (s.site_id("live").await, s.site_id("asleep").await);
    let id = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: asleep.as_str().into(), park: live.as_str().into() },
    )
    .await
    .unwrap();
    // While the swap is in flight, another act on either site is refused.
    let e = fedwiki::change_status(&s.t.db, &s.settings, s.who, &live, RequestKind::Archive).await.unwrap_err();
    assert!(e.to_string().contains("already in progress"), "{e}");
    s.run(id).await.unwrap();
    assert_eq!((s.status("live").await.as_str(), s.status("asleep").await.as_str()), ("parked", "active"));
    assert_eq!(s.f.site("asleep.wiki.localhost").await.unwrap()["status"], "active");
    assert_eq!(s.f.site("live.wiki.localhost").await.unwrap()["status"], "parked");
    let e = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: live.as_str().into(), park: asleep.as_str().into() },
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("You can swap again in 10 minutes"), "{e}");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_farm_that_fails_is_retried_and_on_the_last_attempt_the_request_fails_with_a_reason_and_frees_the_name() {
    let s = setup("Basic").await;
    let id = s.create("flaky").await.unwrap();
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    let e = s.run(id).await.unwrap_err();
    assert!(matches!(e, ServiceError::Remote { transient: true, .. }), "{e:?}");
    assert_eq!(s.request(id).await.state, RequestState::Accepted, "retried, not failed");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 1, "the slot stays held between attempts");
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    let ran = fedwiki::run_site_request(&s.t.db, &s.f.farm, id, true).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Failed, .. })), "{ran:?}");
    let outcome = s.request(id).await.outcome.unwrap();
    assert!(outcome.contains("The farm failed to create the site on the farm"), "{outcome}");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM domains.placements").await, 0, "the name is free again");
    assert_eq!(s.used().await, 0);
    s.created("flaky").await;
}

#[tokio::test]
async fn a_slow_farm_past_the_call_bound_is_a_retry_and_nothing_is_half_written() {
    let mut s = setup("Basic").await;
    s.f = FarmFixture::start_with(local_farm::WikiMode::Off, Duration::from_millis(300)).await;
    let id = s.create("slow").await.unwrap();
    s.f.faults(serde_json::json!({ "delay_ms": 1000 })).await;
    let e = s.run(id).await.unwrap_err();
    assert!(e.to_string().contains("did not answer in time"), "{e}");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0);
    s.f.faults(serde_json::json!({ "delay_ms": 0 })).await;
    assert!(matches!(s.run(id).await.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 1, "recorded once");
}

#[tokio::test]
async fn a_deletion_releases_the_name_removes_the_site_everywhere_and_recounts() {
    let s = setup("Basic").await;
    s.created("gone").await;
    let id = s.ask_delete(&s.site_id("gone").await).await;
    s.run(id).await.unwrap();
    assert_eq!(s.request(id).await.state, RequestState::Done);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM domains.placements").await, 0);
    assert!(s.f.site("gone.wiki.localhost").await.is_none());
    assert_eq!(s.used().await, 0);
    s.created("gone").await;
}

#[tokio::test]
async fn a_name_whose_deletion_is_still_under_way_is_refused_until_the_deletion_is_done() {
    let s = setup("Basic").await;
    s.created("again").await;
    let old = s.site_id("again").await;
    let delete = s.ask_delete(&old).await;
    // The deletion releases the name, then the farm fails: the row and the farm's site stay until
    // the retry.
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    assert!(matches!(s.run(delete).await.unwrap_err(), ServiceError::Remote { transient: true, .. }));
    assert_eq!(s.count("SELECT count(*) FROM domains.placements").await, 0, "the name was released first");
    let requests = s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await;
    let e = s.create("again").await.unwrap_err();
    assert!(
        matches!(&e, ServiceError::Invalid(p) if p[0].0 == "name" && p[0].1.contains("is still being deleted")),
        "{e:?}"
    );
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await, requests, "no request was written");
    assert_eq!(s.count("SELECT count(*) FROM domains.placements").await, 0, "no name was placed");
    // Once the deletion is done, the name makes a new site, recorded once.
    assert!(matches!(s.run(delete).await.unwrap(), Ran::Recorded(Recorded::Done { state: RequestState::Done, .. })));
    s.created("again").await;
    assert_ne!(s.site_id("again").await, old);
    assert_eq!(s.f.site("again.wiki.localhost").await.expect("the farm has the new site")["status"], "active");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_deletion_the_farm_fails_for_good_keeps_the_site_and_gives_it_its_name_back() {
    let s = setup("Basic").await;
    s.created("kept").await;
    let site = s.site_id("kept").await;
    let delete = s.ask_delete(&site).await;
    s.f.faults(serde_json::json!({ "fail_next": 1 })).await;
    let ran = fedwiki::run_site_request(&s.t.db, &s.f.farm, delete, true).await.unwrap();
    assert!(matches!(ran, Ran::Recorded(Recorded::Done { state: RequestState::Failed, .. })), "{ran:?}");
    assert_eq!(s.site_id("kept").await, site, "the site stays");
    assert!(s.f.site("kept.wiki.localhost").await.is_some(), "and stays on the farm");
    assert_eq!(servable(&s, "kept.wiki.localhost").await, Some(true), "its name is placed again and served");
    let e = s.create("kept").await.unwrap_err();
    assert!(e.to_string().contains("taken"), "{e}");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn an_unstarted_request_is_deleted_with_its_job_and_a_started_one_is_kept() {
    let s = setup("Basic").await;
    let id = s.create("later").await.unwrap();
    assert!(fedwiki::intake::delete_unstarted_lifecycle_request(&s.t.db, id).await.unwrap());
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM integration.jobs WHERE kind = 'fedwiki_request'").await, 0);
    let started = s.create("now").await.unwrap();
    s.t.run(sqlx::query("UPDATE integration.jobs SET attempts = 1 WHERE kind = 'fedwiki_request'")).await;
    assert!(!fedwiki::intake::delete_unstarted_lifecycle_request(&s.t.db, started).await.unwrap());
}

// The farm's callbacks over HTTP ---------------------------------------------------------------------

pub(crate) async fn app(s: &Sites) -> common::TestApp {
    common::TestApp::spawn_connected(&s.t, None, Some(s.f.farm.clone())).await
}

pub(crate) fn callback(id: &str, domain: &str, storage: i64) -> String {
    callback_at(id, domain, storage, "2026-12-03T10:00:00Z", "2026-12-03T09:59:00Z")
}

/// A `site.modified` that occurred at `occurred_at` (the farm's clock), the site modified at
/// `modified_at`.
pub(crate) fn callback_at(id: &str, domain: &str, storage: i64, occurred_at: &str, modified_at: &str) -> String {
    serde_json::json!({
        "id": id, "type": "site.modified", "occurred_at": occurred_at,
        "site": { "domain": domain, "owner": "x", "status": "active", "storage_bytes": storage,
                  "modified_at": modified_at, "created_at": "2026-12-03T09:00:00Z" }
    })
    .to_string()
}

pub(crate) async fn post_callback(app: &common::TestApp, body: &str, secret: &str, t: i64) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(app.url("/farm/callbacks"))
        .header("Farm-Timestamp", t.to_string())
        .header("Farm-Signature", signature::sign(secret, t, body.as_bytes()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_signed_callback_records_what_the_farm_observed_once_and_a_bad_signature_writes_nothing() {
    let s = setup("Basic").await;
    s.created("watched").await;
    let app = app(&s).await;
    let now = chrono::Utc::now().timestamp();
    let body = callback("cb-1", "watched.wiki.localhost", 4096);
    let (status, said) = post_callback(&app, &body, "not-the-secret", now).await;
    assert_eq!(status, 400, "{said}");
    let (status, _) = post_callback(&app, &body, common::farm::CALLBACK_SECRET, now - 3600).await;
    assert_eq!(status, 400, "outside the tolerance");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.farm_callbacks").await, 0);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites WHERE storage_bytes IS NOT NULL").await, 0);
    let (status, said) = post_callback(&app, &body, common::farm::CALLBACK_SECRET, now).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(s.count("SELECT storage_bytes FROM fedwiki.sites").await, 4096);
    let (status, said) = post_callback(&app, &body, common::farm::CALLBACK_SECRET, now).await;
    assert_eq!((status, said.trim()), (200, "already recorded"));
    // An unknown site is recorded as received and writes no site.
    let (status, _) =
        post_callback(&app, &callback("cb-2", "nobody.wiki.localhost", 1), common::farm::CALLBACK_SECRET, now).await;
    assert_eq!(status, 200);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 1);
    assert_eq!(s.status("watched").await, "active", "a callback never writes a status");
}

#[tokio::test]
async fn a_callback_delivered_after_a_later_one_is_answered_and_writes_nothing() {
    let s = setup("Basic").await;
    s.created("watched").await;
    let app = app(&s).await;
    let now = chrono::Utc::now().timestamp();
    let secret = common::farm::CALLBACK_SECRET;
    let domain = "watched.wiki.localhost";
    let later = callback_at("cb-later", domain, 999_999, "2026-12-03T21:40:00Z", "2026-12-03T21:39:00Z");
    assert_eq!(post_callback(&app, &later, secret, now).await.0, 200);
    // Sent first, delivered second (a retry held it back), under its own id.
    let earlier = callback_at("cb-earlier", domain, 10, "2026-12-03T21:30:00Z", "2026-12-03T21:29:00Z");
    let (status, said) = post_callback(&app, &earlier, secret, now).await;
    assert_eq!((status, said.trim()), (200, "recorded; nothing observed; 0 request(s) nudged"));
    let (storage, modified): (Option<i64>, Option<chrono::DateTime<chrono::Utc>>) =
        s.t.one(sqlx::query_as("SELECT storage_bytes, modified_at FROM fedwiki.sites")).await;
    assert_eq!(storage, Some(999_999), "the later observation stands");
    assert_eq!(modified, Some("2026-12-03T21:39:00Z".parse().unwrap()), "the modification time does not go back");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.farm_callbacks").await, 2, "both recorded by their ids");
    // One at the same moment as the latest, or after it, is written.
    let next = callback_at("cb-next", domain, 20, "2026-12-03T21:40:00Z", "2026-12-03T21:40:00Z");
    assert_eq!(post_callback(&app, &next, secret, now).await.0, 200);
    assert_eq!(s.count("SELECT storage_bytes FROM fedwiki.sites").await, 20);
}

// Lock order: one path paused mid-transaction, the other shown waiting on it --------------------------

impl Sites {
    /// Ask for `kind` on `site`, and run the request's record step (to `status`) on a task of its
    /// own, paused at its recount (the usage table held): the pause, the task, and the record
    /// step's backend.
    pub(crate) async fn paused_status_record(
        &self,
        site: &SiteId,
        kind: RequestKind,
        status: SiteStatus,
    ) -> (sqlx::pool::PoolConnection<sqlx::Postgres>, tokio::task::JoinHandle<Result<Recorded, ServiceError>>, i32)
    {
        let id = fedwiki::change_status(&self.t.db, &self.settings, self.who, site, kind).await.unwrap();
        let req = self.request(id).await;
        let (pause, pause_pid) = pause_on(&self.t, "core.numeric_entitlement_usage").await;
        let db = self.t.db.clone();
        let record =
            tokio::spawn(
                async move { record::finish_all_with(&db, &[req], record::Activity::Status { status }).await },
            );
        let record_pid = common::wait_for_waiter(&self.t.admin, &self.t.name, pause_pid).await;
        (pause, record, record_pid)
    }
}

#[tokio::test]
async fn two_gates_for_one_pool_queue_on_the_usage_row_and_the_second_counts_the_firsts_hold() {
    let s = setup("Free").await;
    let (a, b) = (s.create("gate-a").await.unwrap(), s.create("gate-b").await.unwrap());
    let (ra, rb) = (s.request(a).await, s.request(b).await);
    let (instance_a, instance_b) = (instance(&ra.instance_id), instance(&rb.instance_id));
    // Pause the first gate at its hold's insert: it then holds the instance lock and the usage row.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.slot_holds").await;
    let db = s.t.db.clone();
    let first = tokio::spawn(async move { gate::hold_site_slot(&db, &ra).await });
    let first_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    common::locks::assert_holds(&s.t.admin, first_pid, &[instance_a, s.usage_row()]).await;
    let db = s.t.db.clone();
    let second = tokio::spawn(async move { gate::hold_site_slot(&db, &rb).await });
    let second_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, first_pid).await;
    // The second holds its own instance lock and waits for the usage row the first holds.
    common::locks::assert_holds(&s.t.admin, second_pid, &[instance_b]).await;
    common::locks::assert_waits(&s.t.admin, second_pid, first_pid, &s.usage_row()).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(first.await.unwrap().unwrap(), Gate::Held);
    assert_eq!(second.await.unwrap().unwrap(), Gate::Full { used: 1, limit: 1 });
}

#[tokio::test]
async fn a_gate_waits_on_a_recount_that_holds_the_usage_row_and_counts_what_it_committed() {
    let s = setup("Basic").await;
    s.created("counted").await;
    let id = s.create("waiting").await.unwrap();
    let req = s.request(id).await;
    // A recount (usage.Recount) paused after LockNumericUsage, on a connection of the test's own.
    let mut recount = s.t.runtime_conn().await;
    let recount_pid = common::backend_pid(&mut recount).await;
    sqlx::query("BEGIN").execute(&mut recount).await.unwrap();
    sqlx::query("SELECT used FROM core.numeric_entitlement_usage WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites' FOR UPDATE")
        .bind(s.pool)
        .execute(&mut recount)
        .await
        .unwrap();
    let db = s.t.db.clone();
    let gate_instance = instance(&req.instance_id);
    let gate = tokio::spawn(async move { gate::hold_site_slot(&db, &req).await });
    let gate_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, recount_pid).await;
    // The gate holds its instance lock and waits for the usage row, never the other way round.
    common::locks::assert_holds(&s.t.admin, gate_pid, &[gate_instance]).await;
    common::locks::assert_waits(&s.t.admin, gate_pid, recount_pid, &s.usage_row()).await;
    sqlx::query("UPDATE core.numeric_entitlement_usage SET used = fedwiki.count_slots($1) WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'")
        .bind(s.pool)
        .execute(&mut recount)
        .await
        .unwrap();
    sqlx::query("COMMIT").execute(&mut recount).await.unwrap();
    assert_eq!(gate.await.unwrap().unwrap(), Gate::Held);
    assert_eq!(s.used().await, 2, "the gate counted the site the recount saw, and its own hold");
    assert_usage_agrees(&s).await;
}

#[tokio::test]
async fn a_swaps_record_step_takes_the_activated_sites_instance_lock_first_and_a_status_record_on_it_waits() {
    let s = setup("Free").await;
    s.created("front").await;
    s.created("back").await;
    let (front, back) = (s.site_id("front").await, s.site_id("back").await);
    let swap = fedwiki::swap_active_site(
        &s.t.db,
        &s.settings,
        s.who,
        &fedwiki::SwapSites { activate: back.as_str().into(), park: front.as_str().into() },
    )
    .await
    .unwrap();
    let activated = s.request(swap).await;
    let parked = {
        let mut c = s.t.db.read().await.unwrap();
        store::swap_partner(c.conn(), swap).await.unwrap().unwrap()
    };
    assert!(activated.request_id < parked.request_id, "the activation is recorded first");
    // Pause the record step at its usage write: it holds both instance locks and both site rows.
    let (mut pause, pause_pid) = pause_on(&s.t, "core.numeric_entitlement_usage").await;
    let db = s.t.db.clone();
    let both = [activated.clone(), parked.clone()];
    let record = tokio::spawn(async move { record::finish_all_with(&db, &both, record::Activity::Swap).await });
    let record_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    let holding = [
        instance(&activated.instance_id),
        instance(&parked.instance_id),
        Expect::row("fedwiki.sites", &parked.instance_id),
        Expect::row("fedwiki.sites", &activated.instance_id),
    ];
    common::locks::assert_holds(&s.t.admin, record_pid, &holding).await;
    // A status record on the parked site (its request is the swap's) waits on its instance lock.
    let db = s.t.db.clone();
    let other = tokio::spawn(async move {
        record::finish_all_with(&db, &[parked], record::Activity::Status { status: SiteStatus::Active }).await
    });
    common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(record.await.unwrap().unwrap(), Recorded::Done { state: RequestState::Done, .. }));
    assert_eq!(
        other.await.unwrap().unwrap(),
        Recorded::AlreadyFinished,
        "it finds the swap's outcome and writes nothing"
    );
    assert_eq!((s.status("front").await.as_str(), s.status("back").await.as_str()), ("parked", "active"));
}

#[tokio::test]
async fn a_swap_intake_takes_the_workspace_lock_before_the_instance_locks_and_a_second_tab_waits() {
    let s = setup("Free").await;
    s.created("tab-a").await;
    s.created("tab-b").await;
    let (a, b) = (s.site_id("tab-a").await, s.site_id("tab-b").await);
    // Writes to the policy table wait (its cooldown read passes): the swap pauses at its upsert,
    // its last step. (Held in ACCESS EXCLUSIVE mode, the table stopped the swap at its cooldown
    // read, before its instance locks, and a check that took any advisory lock for each of them
    // passed on the workspace's lock alone.)
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.swap_policies").await;
    let (db, settings, who, a1, b1) = (s.t.db.clone(), s.settings.clone(), s.who, b.clone(), a.clone());
    let first = tokio::spawn(async move {
        fedwiki::swap_active_site(
            &db,
            &settings,
            who,
            &fedwiki::SwapSites { activate: a1.as_str().into(), park: b1.as_str().into() },
        )
        .await
    });
    let first_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    // Everything it takes before the policy row, on which it waits: the workspace's lock and BOTH
    // sites' instance locks, each by its key (the workspace's lock does not stand in for them).
    let declared = fedwiki::handlers::SWAP_ACTIVE_SITE_LOCKS.locks;
    assert_eq!(declared.last(), Some(&member_console::db::locks::Lock::SwapPolicyRow));
    let workspace = Expect::advisory(AdvisoryKey::Workspace(WorkspaceId::from(format!("org-{}", s.org.0))));
    common::locks::assert_holds(&s.t.admin, first_pid, &[workspace.clone(), instance(&a), instance(&b)]).await;
    let (db, settings, who) = (s.t.db.clone(), s.settings.clone(), s.who);
    let second = tokio::spawn(async move {
        fedwiki::swap_active_site(
            &db,
            &settings,
            who,
            &fedwiki::SwapSites { activate: b.as_str().into(), park: a.as_str().into() },
        )
        .await
    });
    let second_pid = common::wait_for_waiter(&s.t.admin, &s.t.name, first_pid).await;
    common::locks::assert_waits(&s.t.admin, second_pid, first_pid, &workspace).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    first.await.unwrap().unwrap();
    let e = second.await.unwrap().unwrap_err();
    assert!(e.to_string().contains("You can swap again"), "the second tab read the first's stamp: {e}");
}

// The member's page over HTTP ------------------------------------------------------------------------

#[tokio::test]
async fn a_member_creates_a_site_from_the_page_and_a_bad_name_is_told_beside_its_field_with_nothing_written() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = member.get("/sites").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("0 of 3 active") && page.body.contains("Create site"), "{}", page.body);
    let org = s.org.to_string();
    let bad = member.post("/sites", &[("organization_id", &org), ("name", "-bad-")], false).await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("cannot be a site") && bad.body.contains("value=\"-bad-\""), "{}", bad.body);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await, 0);
    let made = member.post("/sites", &[("organization_id", &org), ("name", "pages")], false).await;
    assert_eq!((made.status.as_u16(), made.header("location")), (303, Some("/sites?asked=create")));
    let id = RequestId(s.count("SELECT max(request_id) FROM fedwiki.lifecycle_requests").await);
    let live = member.get("/sites/live").await;
    assert!(live.body.contains("every 2s") && live.body.contains("in flight"), "polls while in flight: {}", live.body);
    s.run(id).await.unwrap();
    let after = member.get("/sites").await;
    assert!(
        after.body.contains("pages.wiki.localhost was created and is active.") && after.body.contains("1 of 3 active")
    );
    assert!(!after.body.contains("every 2s"), "no polling once settled");
    // Taken: told beside the name, 422.
    let taken = member.post("/sites", &[("organization_id", &org), ("name", "pages")], true).await;
    assert_eq!(taken.status, 422);
    assert!(taken.body.contains("is taken"), "{}", taken.body);
}

#[tokio::test]
async fn a_member_cannot_touch_another_organizations_site_and_a_refused_act_says_why_in_place() {
    use common::pages::Session;
    let s = setup("Free").await;
    s.created("mine").await;
    // Another organization's site, on the farm too.
    let other = common::acts::community_org(&s.t, "Others").await;
    s.t.run(
        sqlx::query("INSERT INTO fedwiki.workspaces (workspace_id, organization_id) VALUES ($1, $2)")
            .bind(format!("org-{}", other.organization_id))
            .bind(other.organization_id),
    )
    .await;
    s.t.run(sqlx::query("INSERT INTO fedwiki.sites (site_id, workspace_id, domain, status) VALUES ('s-theirs', $1, 'theirs.wiki.localhost', 'active')")
        .bind(format!("org-{}", other.organization_id))).await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    for (path, fields) in [
        ("/sites/s-theirs/status", vec![("to", "park")]),
        ("/sites/s-theirs/delete", vec![]),
        ("/sites/s-theirs/keep-active", vec![("keep", "1")]),
    ] {
        let a = member.post(path, &fields, false).await;
        assert_eq!(a.status, 404, "{path}: {}", a.body);
    }
    let swap = member
        .post("/sites/swap", &[("activate", "s-theirs"), ("park", s.site_id("mine").await.as_str())], false)
        .await;
    assert_eq!(swap.status, 404);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await, 1, "only the create of mine");
    // Parking an already parked site is refused where it was asked, with the reason.
    let mine = s.site_id("mine").await;
    let park = member.post(&format!("/sites/{mine}/status"), &[("to", "park")], false).await;
    assert_eq!(park.status, 303);
    let again = member.post(&format!("/sites/{mine}/status"), &[("to", "archive")], true).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("already in progress"), "{}", again.body);
}

#[tokio::test]
async fn a_refused_act_on_a_site_shows_in_its_own_organizations_section() {
    use common::pages::Session;
    let s = setup("Basic").await;
    s.created("alpha").await;
    // The member belongs to a second organization (after Acme Wikis on the page), with an active site.
    let stark = common::acts::community_org(&s.t, "Stark Wikis").await.organization_id;
    s.t.run(
        sqlx::query(
            "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, 'owner')",
        )
        .bind(stark)
        .bind(s.who),
    )
    .await;
    let made =
        fedwiki::create_site(&s.t.db, &s.settings, s.who, stark, &SiteName::parse("beta").unwrap()).await.unwrap();
    s.run(made).await.unwrap();
    let beta = s.site_id("beta").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    // Each refused act on Stark's site: its reason in Stark's section, none in Acme's.
    for (path, fields) in [
        (format!("/sites/{beta}/status"), vec![("to", "activate")]),
        ("/sites/swap".to_string(), vec![("activate", beta.as_str()), ("park", beta.as_str())]),
    ] {
        for htmx in [true, false] {
            let a = member.post(&path, &fields, htmx).await;
            assert!(a.status == 409 || a.status == 422, "{path}: {} {}", a.status, a.body);
            let (acme_at, stark_at) = (
                a.body.find(&format!(r#"id="sites-{}""#, s.org)).expect("Acme's section"),
                a.body.find(&format!(r#"id="sites-{stark}""#)).expect("Stark's section"),
            );
            assert!(acme_at < stark_at, "Acme Wikis comes first");
            let (acme, stark_section) = (&a.body[acme_at..stark_at], &a.body[stark_at..]);
            assert!(!acme.contains(r#"role="alert""#), "{path}: no refusal under Acme Wikis: {acme}");
            assert!(
                stark_section.contains(r#"role="alert""#),
                "{path}: the refusal under Stark Wikis: {stark_section}"
            );
        }
    }
}

#[tokio::test]
async fn a_request_in_flight_behind_a_long_history_still_marks_its_site_and_keeps_the_page_polling() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let kept = s.created("kept").await;
    // A park accepted (its job still retrying), then more finished requests than the page's history shows.
    fedwiki::change_status(&s.t.db, &s.settings, s.who, &kept, RequestKind::Park).await.unwrap();
    let newer = fedwiki::reads::REQUESTS_SHOWN + 5;
    s.t.run(
        sqlx::query(
            "INSERT INTO fedwiki.lifecycle_requests (instance_id, generation, workspace_id, domain, kind, state, outcome)
             SELECT 'old-' || i, 1, $1, 'old-' || i || '.wiki.localhost', 'create', 'failed', 'refused by the farm'
               FROM generate_series(1, $2) i",
        )
        .bind(store::workspace_of(s.org))
        .bind(newer),
    )
    .await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    for page in [member.get("/sites").await, member.get_htmx("/sites/live", "member-sites").await] {
        assert_eq!(page.status, 200);
        assert!(page.body.contains(r#"hx-get="/sites/live""#), "still polling: {}", page.body);
        assert!(page.body.contains("parking…"), "the site is marked in flight: {}", page.body);
        assert!(!page.body.contains("aria-label=\"Park kept"), "no acts on it meanwhile: {}", page.body);
    }
}

#[tokio::test]
async fn a_worker_killed_between_the_farm_call_and_the_record_step_resumes_after_a_restart_and_records_once() {
    use common::worker::WorkerProcess;
    let s = setup("Basic").await;
    let id = s.create("survivor").await.unwrap();
    let data_dir = std::env::temp_dir().join(format!("mc-sites-crash-{}", s.t.name));
    let lease = Duration::from_secs(2);
    let base = s.f.local.base_url();
    let env = [
        ("FARM_URL", base.as_str()),
        ("FARM_TOKEN", common::farm::TOKEN),
        ("FARM_CALLBACK_SECRET", common::farm::CALLBACK_SECRET),
    ];
    // The record step's insert waits here, after the gate and the farm call; the worker dies there.
    let (mut pause, pause_pid) = pause_writes_on(&s.t, "fedwiki.sites").await;
    let mut first = WorkerProcess::start_with(&s.t, &data_dir, lease, "first", &env);
    let waiter = common::wait_for_waiter(&s.t.admin, &s.t.name, pause_pid).await;
    assert!(waiter > 0, "the worker reached the record step: {}", first.log());
    assert_eq!(s.f.site("survivor.wiki.localhost").await.expect("the farm has it")["status"], "active");
    first.kill();
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 0, "the killed transaction left nothing");
    let second = WorkerProcess::start_with(&s.t, &data_dir, lease, "second", &env);
    let started = std::time::Instant::now();
    while s.request(id).await.state == RequestState::Accepted {
        assert!(started.elapsed() < Duration::from_secs(30), "not recorded after the restart: {}", second.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.request(id).await.state, RequestState::Done);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.sites").await, 1, "recorded once");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.slot_holds").await, 0);
    assert_eq!(s.used().await, 1);
    assert_usage_agrees(&s).await;
}

// Custom domains ----------------------------------------------------------------------------------------

pub(crate) async fn servable(s: &Sites, hostname: &str) -> Option<bool> {
    s.t.optional(sqlx::query_scalar("SELECT servable FROM domains.placements WHERE hostname = $1").bind(hostname)).await
}

/// A member's claim of the domain typed as `typed`, as the page makes it: the domain's rules
/// (which refuse a bad name or the farm's zone) and then the claim, verified through a real DNS
/// server that answers its record (issue 40).
pub(crate) async fn claim(s: &Sites, org: OrganizationId, typed: &str) -> Result<SiteDomain, ServiceError> {
    let domain = fedwiki::domains::parse_domain(typed, &s.settings)?;
    let pending = fedwiki::domains::claim_domain(&s.t.db, s.who, org, &domain).await?;
    verify_through_dns(s, org, &pending.domain, &pending.token).await;
    Ok(pending.domain)
}

/// Publish `token` for `domain` on a local DNS server of the test's own and verify the pending
/// claim against it.
pub(crate) async fn verify_through_dns(s: &Sites, org: OrganizationId, domain: &SiteDomain, token: &str) {
    use fedwiki::verification::{self, Verification};
    let dns = local_dns::LocalDns::start(local_dns::Config::default()).await.expect("the local DNS");
    dns.set_txt(&verification::record_name(domain), vec![token.to_string()]).unwrap();
    let resolver =
        member_console::integrations::dns::Resolver::new(Some(dns.dns_addr()), Duration::from_secs(2)).unwrap();
    let owner = format!("workspace:org-{org}");
    let done = verification::verify_pending_claim(&s.t.db, &resolver, domain, &owner, chrono::Utc::now()).await;
    assert_eq!(done.unwrap(), Verification::Verified, "{domain}");
    dns.stop().await;
}

/// The page's own add, then the record published and verified, as a member does at their DNS.
pub(crate) async fn verify_added(s: &Sites, org: OrganizationId, domain: &str) {
    let token: String =
        s.t.one(
            sqlx::query_scalar("SELECT token FROM domains.pending_claims WHERE name = $1 AND owner = $2")
                .bind(domain)
                .bind(format!("workspace:org-{org}")),
        )
        .await;
    verify_through_dns(s, org, &SiteDomain::from(domain), &token).await;
}

/// A name a member lets go of, in the registry's form, as the page reads it.
pub(crate) fn held(typed: &str) -> SiteDomain {
    fedwiki::domains::HeldName::parse(typed).into_domain()
}

#[tokio::test]
async fn a_member_claims_a_domain_the_plan_allows_and_serves_a_site_under_it_which_follows_the_sites_status() {
    use fedwiki::domains::place_site_under_domain;
    let free = setup("Free").await;
    let e = claim(&free, free.org, "wiki.example.org").await.unwrap_err();
    assert!(e.to_string().contains("does not include custom domains"), "{e}");

    let s = setup("Basic").await;
    let site = s.created("docs").await;
    for (bad, why) in
        [("not a domain", "not a domain"), ("x.wiki.localhost", "farm's own zone"), ("localhost", "not a domain")]
    {
        let e = claim(&s, s.org, bad).await.unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    assert_eq!(claim(&s, s.org, " Wiki.Example.ORG. ").await.unwrap(), "wiki.example.org");
    // Another owner's claims above and below are refused to this one, and this one's to them.
    s.t.run(sqlx::query("INSERT INTO domains.claims (name, owner) VALUES ('other.org', 'workspace:someone')")).await;
    for taken in ["other.org", "a.other.org"] {
        let e = claim(&s, s.org, taken).await.unwrap_err();
        assert!(e.to_string().contains("another owner holds"), "{taken}: {e}");
    }
    s.t.run(sqlx::query("INSERT INTO domains.claims (name, owner) VALUES ('deep.corp.net', 'workspace:someone')"))
        .await;
    let e = claim(&s, s.org, "corp.net").await.unwrap_err();
    assert!(e.to_string().contains("Another owner holds a name under corp.net"), "{e}");

    place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.example.org")).await.unwrap();
    assert_eq!(servable(&s, "wiki.example.org").await, Some(true), "an active site's placement serves");
    let e = place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.example.org")).await.unwrap_err();
    assert!(e.to_string().contains("already serves a site"), "{e}");
    let e = place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("www.other.org")).await.unwrap_err();
    assert!(e.to_string().contains("no domain of yours"), "{e}");
    // Parking the site stops the placement serving; deleting it releases the name.
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &site, RequestKind::Park).await.unwrap();
    s.run(park).await.unwrap();
    assert_eq!(servable(&s, "wiki.example.org").await, Some(false));
    let delete = s.ask_delete(&site).await;
    s.run(delete).await.unwrap();
    assert_eq!(servable(&s, "wiki.example.org").await, None);
    assert_eq!(
        s.count("SELECT count(*) FROM domains.claims WHERE name = 'wiki.example.org'").await,
        1,
        "the claim stays"
    );
}

#[tokio::test]
async fn a_placement_creator_waits_on_the_site_row_a_record_step_holds_and_sees_its_status() {
    let s = setup("Basic").await;
    let site = s.created("moving").await;
    claim(&s, s.org, "moving.example.org").await.unwrap();
    // The park's record step, paused at its recount: it holds the site row it wrote.
    let (mut pause, record, record_pid) = s.paused_status_record(&site, RequestKind::Park, SiteStatus::Parked).await;
    let (db, who, id) = (s.t.db.clone(), s.who, site.clone());
    let place = tokio::spawn(async move {
        fedwiki::domains::place_site_under_domain(&db, who, &id, &SiteDomain::from("moving.example.org")).await
    });
    let placer = common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    // The creator holds the registry lock and waits for the one site, FOR SHARE.
    common::locks::assert_holds(&s.t.admin, placer, &[Expect::advisory(AdvisoryKey::Registry)]).await;
    common::locks::assert_waits(&s.t.admin, placer, record_pid, &Expect::row("fedwiki.sites", &site)).await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(record.await.unwrap().unwrap(), Recorded::Done { state: RequestState::Done, .. }));
    place.await.unwrap().unwrap();
    assert_eq!(servable(&s, "moving.example.org").await, Some(false), "placed after the park committed: not servable");
    assert_eq!(s.status("moving").await, "parked");
}

#[tokio::test]
async fn a_domain_is_released_only_once_nothing_is_served_under_it_and_a_sites_own_address_cannot_be_stopped() {
    use fedwiki::domains::{place_site_under_domain, release_domain, stop_serving};
    let s = setup("Basic").await;
    let site = s.created("docs").await;
    claim(&s, s.org, "example.org").await.unwrap();
    place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("wiki.example.org")).await.unwrap();
    let e = release_domain(&s.t.db, s.who, s.org, &held("example.org")).await.unwrap_err();
    assert!(e.to_string().contains("still serves a site"), "{e}");
    // Not this organization's: another owner's claim, a name it never claimed, the farm's zone.
    s.t.run(sqlx::query("INSERT INTO domains.claims (name, owner) VALUES ('other.org', 'workspace:someone')")).await;
    for foreign in ["other.org", "never.example", "wiki.localhost", "wiki.example.org"] {
        let e = release_domain(&s.t.db, s.who, s.org, &held(foreign)).await.unwrap_err();
        assert!(e.to_string().contains("not one of your domains"), "{foreign}: {e}");
    }
    for foreign in ["docs.wiki.localhost", "www.example.org"] {
        let e = stop_serving(&s.t.db, s.who, s.org, &held(foreign)).await.unwrap_err();
        assert!(e.to_string().contains("serves no site of yours"), "{foreign}: {e}");
    }
    // An organization the member does not belong to is not found.
    let other = common::acts::community_org(&s.t, "Others").await;
    let e = stop_serving(&s.t.db, s.who, other.organization_id, &held("wiki.example.org")).await.unwrap_err();
    assert!(matches!(e, ServiceError::NotFound(_)), "{e}");
    assert_eq!(servable(&s, "wiki.example.org").await, Some(true), "nothing was removed");
    assert_eq!(stop_serving(&s.t.db, s.who, s.org, &held("WIKI.example.org.")).await.unwrap(), "wiki.example.org");
    assert_eq!(servable(&s, "wiki.example.org").await, None);
    assert_eq!(servable(&s, "docs.wiki.localhost").await, Some(true), "the site's own address stays");
    release_domain(&s.t.db, s.who, s.org, &held("example.org")).await.unwrap();
    assert_eq!(s.count("SELECT count(*) FROM domains.claims WHERE owner <> 'farm' AND name = 'example.org'").await, 0);
    let e = release_domain(&s.t.db, s.who, s.org, &held("example.org")).await.unwrap_err();
    assert!(e.to_string().contains("not one of your domains"), "a second release: {e}");
}

#[tokio::test]
async fn stopping_serving_waits_on_the_placement_row_a_sites_status_write_holds() {
    let s = setup("Basic").await;
    let site = s.created("moving").await;
    claim(&s, s.org, "moving.example.org").await.unwrap();
    fedwiki::domains::place_site_under_domain(&s.t.db, s.who, &site, &SiteDomain::from("moving.example.org"))
        .await
        .unwrap();
    // The park's record step, paused at its recount: it holds the site row and, through the
    // site's trigger, the placement rows whose flag it changed.
    let (mut pause, record, record_pid) = s.paused_status_record(&site, RequestKind::Park, SiteStatus::Parked).await;
    let (db, who, org) = (s.t.db.clone(), s.who, s.org);
    let stop =
        tokio::spawn(async move { fedwiki::domains::stop_serving(&db, who, org, &held("moving.example.org")).await });
    let stopper = common::wait_for_waiter(&s.t.admin, &s.t.name, record_pid).await;
    // The registry lock is held; the placement row is what it waits for.
    common::locks::assert_holds(&s.t.admin, stopper, &[Expect::advisory(AdvisoryKey::Registry)]).await;
    common::locks::assert_waits(
        &s.t.admin,
        stopper,
        record_pid,
        &Expect::row("domains.placements", "moving.example.org"),
    )
    .await;
    sqlx::query("COMMIT").execute(&mut *pause).await.unwrap();
    assert!(matches!(record.await.unwrap().unwrap(), Recorded::Done { state: RequestState::Done, .. }));
    stop.await.unwrap().unwrap();
    assert_eq!(servable(&s, "moving.example.org").await, None);
    assert_eq!(s.status("moving").await, "parked");
}

#[tokio::test]
async fn a_member_adds_a_domain_and_serves_a_site_at_it_from_the_page_and_a_bad_domain_is_told_beside_its_field() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let site = s.created("front").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let org = s.org.to_string();
    assert!(member.get("/sites").await.body.contains("Your domains"));
    let bad = member.post("/sites/domains", &[("organization_id", &org), ("domain", "nope")], false).await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    assert!(bad.body.contains("is not a domain name"), "{}", bad.body);
    let added = member.post("/sites/domains", &[("organization_id", &org), ("domain", "acme.example")], false).await;
    assert_eq!(added.header("location"), Some("/sites?asked=domain"), "{}", added.body);
    // Pending: the page shows the record to add, and no site may be served there yet.
    let page = member.get("/sites?asked=domain").await;
    assert!(page.body.contains("_member-console-challenge.acme.example"), "{}", page.body);
    let early = member
        .post(
            "/sites/domains",
            &[("organization_id", &org), ("site", site.as_str()), ("hostname", "wiki.acme.example")],
            false,
        )
        .await;
    assert_eq!(early.status, 422, "{}", early.body);
    assert!(early.body.contains("acme.example is not verified yet"), "{}", early.body);
    verify_added(&s, s.org, "acme.example").await;
    let served = member
        .post(
            "/sites/domains",
            &[("organization_id", &org), ("site", site.as_str()), ("hostname", "wiki.acme.example")],
            false,
        )
        .await;
    assert_eq!(served.header("location"), Some("/sites?asked=hostname"), "{}", served.body);
    let page = member.get("/sites").await;
    assert!(page.body.contains("also wiki.acme.example") && page.body.contains("acme.example"), "{}", page.body);
    assert_eq!(servable(&s, "wiki.acme.example").await, Some(true));
    // Releasing the domain while it serves is refused beside the list; stopping, then releasing, works.
    let org_field = ("organization_id", org.as_str());
    let early = member.post("/sites/domains/remove", &[org_field, ("domain", "acme.example")], false).await;
    assert_eq!(early.status, 422, "{}", early.body);
    assert!(early.body.contains("still serves a site: stop serving it there first"), "{}", early.body);
    let stop = member.post("/sites/domains/remove", &[org_field, ("hostname", "wiki.acme.example")], false).await;
    assert_eq!(stop.header("location"), Some("/sites?asked=stop"), "{}", stop.body);
    let release = member.post("/sites/domains/remove", &[org_field, ("domain", "acme.example")], false).await;
    assert_eq!(release.header("location"), Some("/sites?asked=release"), "{}", release.body);
    let page = member.get("/sites?asked=release").await;
    assert!(page.body.contains("The domain is released.") && !page.body.contains("acme.example"), "{}", page.body);
    let both = member
        .post("/sites/domains/remove", &[org_field, ("domain", "a.example"), ("hostname", "b.example")], false)
        .await;
    assert_eq!(both.status, 400, "{}", both.body);
}

#[tokio::test]
async fn a_deletion_racing_an_activation_of_one_site_records_one_of_them_and_refuses_the_other() {
    let s = Arc::new(setup("Basic").await);
    s.created("contested").await;
    let park = fedwiki::change_status(&s.t.db, &s.settings, s.who, &s.site_id("contested").await, RequestKind::Park)
        .await
        .unwrap();
    s.run(park).await.unwrap();
    let site = s.site_id("contested").await;
    let (a, b) = (s.clone(), s.clone());
    let (s1, s2) = (site.clone(), site.clone());
    let (activate, delete) = tokio::join!(
        async move { fedwiki::change_status(&a.t.db, &a.settings, a.who, &s1, RequestKind::Activate).await },
        async move { fedwiki::change_status(&b.t.db, &b.settings, b.who, &s2, RequestKind::Delete).await },
    );
    let (won, lost) = match (activate, delete) {
        (Ok(id), Err(e)) | (Err(e), Ok(id)) => (id, e),
        other => panic!("exactly one of them is recorded: {other:?}"),
    };
    assert!(lost.to_string().contains("already in progress"), "{lost}");
    s.run(won).await.unwrap();
    assert_eq!(s.request(won).await.state, RequestState::Done);
    let left = s.count("SELECT count(*) FROM fedwiki.sites").await;
    let on_farm = s.f.site("contested.wiki.localhost").await;
    match s.request(won).await.kind {
        RequestKind::Delete => assert!(left == 0 && on_farm.is_none()),
        _ => assert!(left == 1 && on_farm.unwrap()["status"] == "active"),
    }
    assert_usage_agrees(&s).await;
}

// Names and domains a member may not take ------------------------------------------------------------

/// What a refused create or claim must leave as it was: the organization's workspace, the
/// registry's claims and placements, and the requests.
async fn written(s: &Sites) -> (i64, i64, i64, i64) {
    (
        s.count(&format!("SELECT count(*) FROM fedwiki.workspaces WHERE organization_id = {}", s.org)).await,
        s.count("SELECT count(*) FROM domains.claims").await,
        s.count("SELECT count(*) FROM domains.placements").await,
        s.count("SELECT count(*) FROM fedwiki.lifecycle_requests").await,
    )
}

/// The message shown under the form field whose id is `field` (its error paragraph).
fn beside(body: &str, field: &str, message: &str) -> bool {
    let opening = format!("<p class=\"field-error\" id=\"{field}-error\">");
    body.split(&opening).nth(1).and_then(|rest| rest.split("</p>").next()).is_some_and(|told| told.contains(message))
}

#[tokio::test]
async fn a_long_site_name_outside_ascii_is_refused_beside_its_field_by_its_character_count_and_nothing_is_written() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let org = s.org.to_string();
    let field = format!("site-name-{org}");
    // 71 characters (141 bytes), and 41 characters (81 bytes, over a label's 63): a cut by bytes
    // at 20 fell inside an "é" and the request panicked.
    let long = format!("a{}", "é".repeat(70));
    let shorter = format!("a{}", "é".repeat(40));
    let unprocessable = reqwest::StatusCode::UNPROCESSABLE_ENTITY;
    member
        .refuse_all(
            "/sites",
            "member-sites",
            &[
                (
                    "71 characters",
                    vec![("organization_id", &org), ("name", &long)],
                    unprocessable,
                    "is at most 63 characters, and this one has 71.",
                ),
                (
                    "41 characters",
                    vec![("organization_id", &org), ("name", &shorter)],
                    unprocessable,
                    "cannot be a site",
                ),
            ],
            async || written(&s).await,
        )
        .await;
    let a = member.post("/sites", &[("organization_id", &org), ("name", &long)], false).await;
    let head = format!("“a{}…” is too long", "é".repeat(19));
    assert!(beside(&a.body, &field, &head), "the first 20 characters, beside the name: {}", a.body);
    let (workspaces, _, placements, requests) = written(&s).await;
    assert_eq!((workspaces, placements, requests), (0, 0, 0), "no workspace, no placement, no request");
}

#[tokio::test]
async fn a_refused_first_site_or_first_domain_writes_no_workspace_and_an_accepted_one_does() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let org = s.org.to_string();
    // Another workspace holds a site's name and a domain; this organization has no site yet.
    s.t.run(sqlx::query(
        "INSERT INTO domains.placements (hostname, owner, provider, object_id, servable)
         VALUES ('handbook.wiki.localhost', 'workspace:other', 'fedwiki', 's-other', false)",
    ))
    .await;
    s.t.run(sqlx::query("INSERT INTO domains.claims (name, owner) VALUES ('other.org', 'workspace:other')")).await;
    assert_eq!(written(&s).await.0, 0, "no workspace before");
    let unprocessable = reqwest::StatusCode::UNPROCESSABLE_ENTITY;
    member
        .refuse_all(
            "/sites",
            "member-sites",
            &[("taken", vec![("organization_id", &org), ("name", "handbook")], unprocessable, "is taken")],
            async || written(&s).await,
        )
        .await;
    member
        .refuse_all(
            "/sites/domains",
            "member-sites",
            &[(
                "another owner's",
                vec![("organization_id", &org), ("domain", "wiki.other.org")],
                unprocessable,
                "another owner holds",
            )],
            async || written(&s).await,
        )
        .await;
    assert_eq!(written(&s).await.0, 0, "the refusals made no workspace");
    // A claim that is accepted makes it, with the claim.
    let added = member.post("/sites/domains", &[("organization_id", &org), ("domain", "acme.example")], false).await;
    assert_eq!(added.header("location"), Some("/sites?asked=domain"), "{}", added.body);
    assert_eq!(written(&s).await.0, 1, "the accepted claim made the workspace");
}

#[tokio::test]
async fn reserved_and_encoded_site_names_and_public_suffixes_are_refused_beside_their_fields_with_nothing_written() {
    use common::pages::Session;
    let s = setup("Basic").await;
    let app = app(&s).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let org = s.org.to_string();
    let o = ("organization_id", org.as_str());
    let unprocessable = reqwest::StatusCode::UNPROCESSABLE_ENTITY;
    let hyphens = "two hyphens in the third and fourth places";
    member
        .refuse_all(
            "/sites",
            "member-sites",
            &[
                ("www", vec![o, ("name", "www")], unprocessable, "is kept for the farm"),
                ("admin", vec![o, ("name", "Admin")], unprocessable, "is kept for the farm"),
                ("hyphens in 3-4", vec![o, ("name", "ab--cd")], unprocessable, hyphens),
                ("punycode", vec![o, ("name", "xn--abc")], unprocessable, hyphens),
            ],
            async || written(&s).await,
        )
        .await;
    let a = member.post("/sites", &[o, ("name", "www")], false).await;
    assert!(beside(&a.body, &format!("site-name-{org}"), "is kept for the farm"), "{}", a.body);
    member
        .refuse_all(
            "/sites/domains",
            "member-sites",
            &[
                ("co.uk", vec![o, ("domain", "co.uk")], unprocessable, "co.uk is a public suffix: claim a domain you"),
                ("github.io", vec![o, ("domain", "GitHub.io")], unprocessable, "github.io is a public suffix"),
                ("hyphens in 3-4", vec![o, ("domain", "ab--cd.example.org")], unprocessable, hyphens),
                (
                    "bad punycode",
                    vec![o, ("domain", "xn--abc.example")],
                    unprocessable,
                    "not a valid internationalized",
                ),
            ],
            async || written(&s).await,
        )
        .await;
    let a = member.post("/sites/domains", &[o, ("domain", "co.uk")], false).await;
    assert!(beside(&a.body, &format!("domain-{org}"), "such as example.co.uk"), "{}", a.body);
    // A name registered under a public suffix is the member's to claim, and an encoded one too.
    for mine in ["bbc.co.uk", "xn--bcher-kva.example"] {
        let added = member.post("/sites/domains", &[o, ("domain", mine)], false).await;
        assert_eq!(added.header("location"), Some("/sites?asked=domain"), "{mine}: {}", added.body);
    }
    let claims = "SELECT count(*) FROM domains.pending_claims WHERE name IN ('bbc.co.uk', 'xn--bcher-kva.example')";
    assert_eq!(s.count(claims).await, 2);
}
