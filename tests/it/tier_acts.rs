//! Tier removal (RemoveTier) and the tier reorder (ReorderTiers): migrate and grandfather
//! outcomes, every refusal (and that it writes nothing), the lock order of each path, a reorder
//! that supersedes an earlier default change, a Retry beside a listing batch, the benign deadlock
//! between listings, the previews, and the operator's forms over HTTP.

use crate::common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{TestDb, acts::*, pages, pages::demo_db};
use member_console::{
    db::{TxKind, begin},
    demo,
    ids::{GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId},
    services::{
        organizations as orgs,
        plan_acts::{self as pa, Disposition, ReorderTiers},
        refusal::ServiceError,
        topology::{self as topo, RemoveTier},
    },
    store::plan_acts as store,
};
use reqwest::StatusCode;

// ---------- Harness (the shared part is tests/common/acts.rs) ----------

/// The default pool of the organization named `name`.
async fn pool_named(t: &TestDb, name: &str) -> PoolId {
    t.one(
        sqlx::query_scalar(
            "SELECT rp.pool_id FROM core.resource_pools rp JOIN core.organizations o USING (organization_id)
         WHERE o.name = $1 AND rp.is_default",
        )
        .bind(name),
    )
    .await
}

fn removal(ladder: LadderId, rank: i32, d: Option<Disposition>) -> RemoveTier {
    RemoveTier { ladder_id: ladder, rank, disposition: d, reason: "test".into(), actor: None }
}

fn reorder(ladder: LadderId, order: &[ProductId], d: Option<Disposition>) -> ReorderTiers {
    ReorderTiers { ladder_id: ladder, order: order.to_vec(), disposition: d, reason: "test".into(), actor: None }
}

/// The pool's positions: (ladder, rank, product, grant kind), by ladder name.
async fn positions(t: &TestDb, pool: PoolId) -> Vec<(String, i32, String, String)> {
    positions_of(t, pool).await.into_iter().map(|p| (p.ladder, p.rank, p.product, p.kind)).collect()
}

fn pos(ladder: &str, rank: i32, product: &str, kind: &str) -> (String, i32, String, String) {
    (ladder.into(), rank, product.into(), kind.into())
}

/// Every holding conferral of the pool: (product, grant kind, grant status, the grant's act, how
/// many ladders it holds), by product name.
async fn held(t: &TestDb, pool: PoolId) -> Vec<(String, String, String, Option<PlanActId>, i64)> {
    t.all(
        sqlx::query_as(
            "SELECT pr.name, g.kind, g.status, g.plan_act_id,
                (SELECT count(*) FROM core.positions p WHERE p.conferral_id = c.conferral_id)
         FROM core.conferrals c JOIN core.products pr ON pr.product_id = c.product_id
         JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE c.pool_id = $1 AND c.state = 'holding' ORDER BY pr.name",
        )
        .bind(pool),
    )
    .await
}

fn hd(
    product: &str,
    kind: &str,
    act: Option<PlanActId>,
    ladders: i64,
) -> (String, String, String, Option<PlanActId>, i64) {
    (product.into(), kind.into(), "active".into(), act, ladders)
}

/// A grant's (status, kind, act).
async fn grant_row(t: &TestDb, grant_id: GrantId) -> (String, String, Option<PlanActId>) {
    t.one(sqlx::query_as("SELECT status, kind, plan_act_id FROM core.grants WHERE grant_id = $1").bind(grant_id)).await
}

/// The grant's latest conferral: (state, ended_reason).
async fn latest_conferral(t: &TestDb, grant_id: GrantId) -> (String, Option<String>) {
    t.one(
        sqlx::query_as(
            "SELECT state, ended_reason FROM core.conferrals WHERE grant_id = $1 ORDER BY conferral_id DESC LIMIT 1",
        )
        .bind(grant_id),
    )
    .await
}

/// The grant's events other than its issue: (act, the plan act its detail names).
async fn events(t: &TestDb, grant_id: GrantId) -> Vec<(String, Option<PlanActId>)> {
    t.all(
        sqlx::query_as(
            "SELECT act, (detail->>'plan_act_id')::bigint FROM core.grant_events
         WHERE grant_id = $1 AND act <> 'issued' ORDER BY event_id",
        )
        .bind(grant_id),
    )
    .await
}

/// The pool's materialized entitlements: (key, number, flag), by key.
async fn ents(t: &TestDb, pool: PoolId) -> Vec<(String, Option<i64>, Option<bool>)> {
    t.all(
        sqlx::query_as(
            "SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements WHERE pool_id = $1
         ORDER BY resource_key COLLATE \"C\"",
        )
        .bind(pool),
    )
    .await
}

fn sites(n: i64) -> (String, Option<i64>, Option<bool>) {
    ("fedwiki.active_sites".into(), Some(n), None)
}

fn custom_domain() -> (String, Option<i64>, Option<bool>) {
    ("fedwiki.custom_domain".into(), None, Some(true))
}

fn support_flag(on: bool) -> (String, Option<i64>, Option<bool>) {
    ("support.priority".into(), None, Some(on))
}

/// Obligations of the act settled more than once, or never attempted although settled.
async fn not_once(t: &TestDb, act: PlanActId) -> i64 {
    scalar(
        t,
        &format!(
            "SELECT count(*) FROM core.plan_act_obligations
             WHERE plan_act_id = {act} AND state <> 'superseded' AND attempts <> 1"
        ),
    )
    .await
}

/// (kind, disposition, state) of an act.
async fn act_row(t: &TestDb, act: PlanActId) -> (String, Option<String>, String) {
    t.one(sqlx::query_as("SELECT kind, disposition, state FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await
}

/// (product, rank, detail) of an act's detail row.
async fn act_detail(t: &TestDb, act: PlanActId) -> (Option<ProductId>, Option<i32>, serde_json::Value) {
    t.one(sqlx::query_as("SELECT product_id, rank, detail FROM core.plan_act_details WHERE plan_act_id = $1").bind(act))
        .await
}

async fn reached(t: &TestDb, act: PlanActId) -> Vec<(OrgTypeId, Option<LadderId>, Option<ProductId>)> {
    t.all(
        sqlx::query_as(
            "SELECT org_type_id, from_ladder_id, from_product_id FROM core.plan_act_reached_types
         WHERE plan_act_id = $1 ORDER BY org_type_id",
        )
        .bind(act),
    )
    .await
}

fn refused(e: ServiceError) -> String {
    match e {
        ServiceError::Refused(m) => m,
        other => panic!("expected Refused, got {other:?}"),
    }
}

/// Everything a refused act or a preview must leave alone, row by row.
async fn world(t: &TestDb) -> Vec<String> {
    let queries = [
        "SELECT format('tier %s %s %s', plan_ladder_id, rank, product_id) FROM core.plan_ladder_tiers",
        "SELECT format('position %s %s %s %s', pool_id, plan_ladder_id, conferral_id, rank) FROM core.positions",
        "SELECT format('grant %s %s %s %s', grant_id, status, kind, plan_act_id) FROM core.grants",
        "SELECT format('conferral %s %s %s', conferral_id, state, ended_reason) FROM core.conferrals",
        "SELECT format('act %s %s', plan_act_id, state) FROM core.plan_acts",
        "SELECT format('detail %s', plan_act_id) FROM core.plan_act_details",
        "SELECT format('reached %s %s', plan_act_id, org_type_id) FROM core.plan_act_reached_types",
        "SELECT format('obligation %s %s %s', plan_act_id, pool_id, state) FROM core.plan_act_obligations",
        "SELECT format('event %s', event_id) FROM core.grant_events",
        "SELECT format('outbox %s', outbox_id) FROM core.outbox",
        "SELECT format('job %s %s', kind, dedupe_key) FROM integration.jobs",
        "SELECT format('type %s %s %s', org_type_id, default_plan_ladder_id, default_owner_act_id) FROM core.org_types",
        "SELECT format('ent %s %s %s %s', pool_id, resource_key, numeric_value, flag_value) FROM core.pool_entitlements",
    ];
    let mut out = vec![];
    for q in queries {
        let rows: Vec<String> = t.all(sqlx::query_scalar(sqlx::AssertSqlSafe(q.to_string()))).await;
        out.extend(rows);
    }
    out.sort();
    out
}

/// A live and a canceled subscription of the organization (billing rows, set up directly).
async fn subscriptions(t: &TestDb, org: OrganizationId, prefix: &str) {
    t.run(
        sqlx::query(
            "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status)
         VALUES ($1, $2 || '_live', 'active'), ($1, $2 || '_gone', 'canceled')",
        )
        .bind(org)
        .bind(prefix),
    )
    .await;
}

/// The reconcile requests in the outbox: (stripe subscription, cause), by subscription.
async fn reconciles(t: &TestDb) -> Vec<(String, Option<String>)> {
    t.all(sqlx::query_as(
        "SELECT s.stripe_subscription_id, o.payload->>'cause' FROM core.outbox o
         JOIN core.subscriptions s USING (subscription_id)
         WHERE o.kind = 'reconcile_subscription' ORDER BY s.stripe_subscription_id",
    ))
    .await
}

/// The demo, and three organizations holding Basic (rank 1 of Wiki hosting): a Community one
/// (its Free floor displaced), a Business one (its floor is on Support), and a Community one whose
/// Pro grant Basic replaced.
struct BasicHolders {
    t: TestDb,
    wiki: LadderId,
    community: orgs::CreatedOrganization,
    business: orgs::CreatedOrganization,
    both: orgs::CreatedOrganization,
    /// The Basic grants of the three, and the replaced Pro grant.
    community_basic: GrantId,
    business_basic: GrantId,
    both_basic: GrantId,
    both_pro: GrantId,
}

async fn basic_holders(quantity: i32, ends_at: Option<DateTime<Utc>>) -> BasicHolders {
    let Demo { t, community: community_t, business: business_t, wiki, basic, pro, .. } = demo().await;
    let community = org_of_type(&t, "Basic community", community_t).await;
    let business = org_of_type(&t, "Basic business", business_t).await;
    let both = org_of_type(&t, "Pro then Basic", community_t).await;
    let community_basic = grant_with(&t, community.organization_id, basic, quantity, ends_at).await;
    let business_basic = grant(&t, business.organization_id, basic).await;
    let both_pro = grant(&t, both.organization_id, pro).await;
    let both_basic = grant(&t, both.organization_id, basic).await;
    // The preconditions the outcomes rest on.
    assert_eq!(grant_row(&t, both_pro).await.0, "replaced", "Basic replaced the Pro grant");
    assert_eq!(positions(&t, community.pool_id).await, vec![pos("Wiki hosting", 1, "Basic", "operator")]);
    assert_eq!(
        positions(&t, business.pool_id).await,
        vec![pos("Support", 0, "Community support", "floor"), pos("Wiki hosting", 1, "Basic", "operator")]
    );
    assert_eq!(positions(&t, both.pool_id).await, vec![pos("Wiki hosting", 1, "Basic", "operator")]);
    BasicHolders { t, wiki, community, business, both, community_basic, business_basic, both_basic, both_pro }
}

impl BasicHolders {
    /// Each of the three Basic grants ended by `act`: the grant, its conferral (ended for `why`)
    /// and its event.
    async fn assert_basic_grants_ended(&self, act: PlanActId, why: &str) {
        let t = &self.t;
        for g in [self.community_basic, self.business_basic, self.both_basic] {
            assert_eq!(grant_row(t, g).await, ("ended".into(), "operator".into(), None), "grant {g}");
            assert_eq!(latest_conferral(t, g).await, ("ended".into(), Some(why.into())), "grant {g}");
            assert_eq!(events(t, g).await, vec![("ended".into(), Some(act))], "grant {g}");
        }
    }
}

// ---------- 1. Tier removal with migrate ----------

#[tokio::test]
async fn a_tier_removal_with_migrate_ends_the_incumbents_closes_the_ranks_and_gives_back_the_floor() {
    let s = basic_holders(1, None).await;
    let t = &s.t;
    let initech = pool_named(t, "Initech").await;
    subscriptions(t, s.community.organization_id, "sub_community").await;
    assert_eq!(ents(t, s.community.pool_id).await, vec![sites(3), custom_domain()]);

    let (act, reach) = topo::remove_tier(&t.db, &removal(s.wiki, 1, Some(Disposition::Migrate)), 100).await.unwrap();
    assert_eq!((reach.holders, reach.product.as_str(), reach.refusal.as_deref()), (3, "Basic", None));
    assert_eq!(act_row(t, act).await, ("tier_removal".into(), Some("migrate".into()), "done".into()));
    let (product, rank, detail) = act_detail(t, act).await;
    assert_eq!((product, rank), (Some(product_id(t, "Basic").await), Some(1)));
    assert_eq!(detail["holders"], serde_json::json!(3));

    // The tier is gone; Pro closed the gap, and its holder's position followed.
    assert_eq!(tiers(t, s.wiki).await, tier_list(&["Free", "Pro"]));
    assert_eq!(positions(t, initech).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);

    // Every incumbent ended: conferral, grant and its event.
    s.assert_basic_grants_ended(act, "tier_removed").await;
    // The Community holder gets its type's floor back, naming the act.
    assert_eq!(held(t, s.community.pool_id).await, vec![hd("Free", "floor", Some(act), 1)]);
    assert_eq!(positions(t, s.community.pool_id).await, vec![pos("Wiki hosting", 0, "Free", "floor")]);
    assert_eq!(ents(t, s.community.pool_id).await, vec![sites(1)]);
    // The Business holder keeps its own floor (on Support) and gets none on Wiki hosting.
    assert_eq!(held(t, s.business.pool_id).await, vec![hd("Community support", "floor", None, 1)]);
    assert_eq!(ents(t, s.business.pool_id).await, vec![support_flag(false)]);
    // The replaced Pro grant resumes (at Pro's new rank), and no floor is given over it.
    assert_eq!(grant_row(t, s.both_pro).await.0, "active");
    assert_eq!(held(t, s.both.pool_id).await, vec![hd("Pro", "operator", None, 1)]);
    assert_eq!(positions(t, s.both.pool_id).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);
    assert_eq!(ents(t, s.both.pool_id).await, vec![sites(10), custom_domain()]);
    assert_eq!(
        scalar(t, &format!("SELECT count(*) FROM core.grants WHERE plan_act_id = {act}")).await,
        1,
        "one floor, for the one holder left with nothing on its default ladder"
    );

    assert!(stale_pools(t).await.is_empty(), "every pool's entitlements equal a fresh computation");
    // One reconcile request per live subscription of the holders' organizations.
    assert_eq!(reconciles(t).await, vec![("sub_community_live".into(), Some("tier_removed".into()))]);
}

// ---------- 2. Tier removal with grandfather ----------

/// A legacy grant: (grant, organization, product, quantity, end, status).
type LegacyRow = (GrantId, OrganizationId, String, i32, Option<DateTime<Utc>>, String);

#[tokio::test]
async fn a_tier_removal_with_grandfather_keeps_each_incumbent_as_a_legacy_grant_off_the_ladder() {
    let ends = Utc::now() + chrono::Duration::days(30);
    let s = basic_holders(2, Some(ends)).await;
    let t = &s.t;
    let initech = pool_named(t, "Initech").await;
    let (old_ends, old_quantity): (Option<DateTime<Utc>>, i32) = t
        .one(sqlx::query_as("SELECT ends_at, quantity FROM core.grants WHERE grant_id = $1").bind(s.community_basic))
        .await;
    assert_eq!(old_quantity, 2);
    assert!(old_ends.is_some());

    let (act, _) = topo::remove_tier(&t.db, &removal(s.wiki, 1, Some(Disposition::Grandfather)), 100).await.unwrap();
    assert_eq!(act_row(t, act).await, ("tier_removal".into(), Some("grandfather".into()), "done".into()));
    assert_eq!(tiers(t, s.wiki).await, tier_list(&["Free", "Pro"]));
    assert_eq!(positions(t, initech).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);

    s.assert_basic_grants_ended(act, "grandfathered").await;
    // Each holder has a legacy grant of Basic, of the act, holding no ladder.
    let legacy: Vec<LegacyRow> = t
        .all(
            sqlx::query_as(
                "SELECT g.grant_id, g.organization_id, p.name, g.quantity, g.ends_at, g.status FROM core.grants g
         JOIN core.products p USING (product_id) WHERE g.kind = 'legacy' AND g.plan_act_id = $1 ORDER BY g.grant_id",
            )
            .bind(act),
        )
        .await;
    assert_eq!(legacy.len(), 3, "{legacy:?}");
    let mine = legacy.iter().find(|l| l.1 == s.community.organization_id).unwrap();
    assert_eq!((mine.2.as_str(), mine.3, mine.4, mine.5.as_str()), ("Basic", 2, old_ends, "active"));
    for l in &legacy {
        assert_eq!(events(t, l.0).await, vec![("grandfathered".into(), Some(act))], "legacy grant {}", l.0);
    }
    assert_eq!(
        scalar(t, &format!("SELECT count(*) FROM core.grants WHERE kind = 'floor' AND plan_act_id = {act}")).await,
        0,
        "no floor is restored under grandfather"
    );

    // The Community holder keeps Basic (off the ladder), with no floor: it holds nothing on Wiki hosting.
    assert_eq!(held(t, s.community.pool_id).await, vec![hd("Basic", "legacy", Some(act), 0)]);
    assert!(positions(t, s.community.pool_id).await.is_empty());
    assert_eq!(ents(t, s.community.pool_id).await, vec![sites(6), custom_domain()]);
    assert_eq!(
        held(t, s.business.pool_id).await,
        vec![hd("Basic", "legacy", Some(act), 0), hd("Community support", "floor", None, 1)]
    );
    assert_eq!(ents(t, s.business.pool_id).await, vec![sites(3), custom_domain(), support_flag(false)]);
    // A grandfathered holder keeps what it had: the Pro grant Basic replaced does not come back.
    assert_eq!(grant_row(t, s.both_pro).await.0, "replaced");
    assert_eq!(held(t, s.both.pool_id).await, vec![hd("Basic", "legacy", Some(act), 0)]);
    assert!(positions(t, s.both.pool_id).await.is_empty());
    assert_eq!(ents(t, s.both.pool_id).await, vec![sites(3), custom_domain()]);
    assert!(stale_pools(t).await.is_empty());
}

// ---------- 3. Removing a default ladder's rank 0 ----------

#[tokio::test]
async fn removing_the_floor_of_a_default_ladder_with_migrate_gives_the_next_tier_as_the_floor() {
    let Demo { t, community, wiki, .. } = demo().await;
    let ours = org_of_type(&t, "Floored", community).await;
    let (acme, umbrella, initech, globex) = (
        pool_named(&t, demo::DEMO_ORGANIZATION).await,
        pool_named(&t, "Umbrella Wikis").await,
        pool_named(&t, "Initech").await,
        pool_named(&t, "Globex").await,
    );
    let old_floors = [floor_grant_on(&t, acme, wiki).await.0, floor_grant_on(&t, ours.pool_id, wiki).await.0];
    let globex_before = held(&t, globex).await;

    let (act, reach) = topo::remove_tier(&t.db, &removal(wiki, 0, Some(Disposition::Migrate)), 100).await.unwrap();
    assert_eq!((reach.holders, reach.floor_after.as_deref()), (3, Some("Basic")));
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Basic", "Pro"]));
    for p in [acme, umbrella, ours.pool_id] {
        assert_eq!(held(&t, p).await, vec![hd("Basic", "floor", Some(act), 1)], "pool {p}");
        assert_eq!(positions(&t, p).await, vec![pos("Wiki hosting", 0, "Basic", "floor")], "pool {p}");
        assert_eq!(ents(&t, p).await, vec![sites(3), custom_domain()], "pool {p}");
    }
    for g in old_floors {
        assert_eq!(grant_row(&t, g).await.0, "ended");
        assert_eq!(latest_conferral(&t, g).await, ("ended".into(), Some("tier_removed".into())));
        assert_eq!(events(&t, g).await, vec![("ended".into(), Some(act))]);
    }
    assert_eq!(positions(&t, initech).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);
    assert_eq!(held(&t, globex).await, globex_before, "another type's organization is untouched");
    assert!(stale_pools(&t).await.is_empty());
    // A new organization of the type gets the new floor.
    let late = org_of_type(&t, "Late", community).await;
    assert_eq!(held(&t, late.pool_id).await, vec![hd("Basic", "floor", None, 1)]);
}

// ---------- 4. Removal refusals ----------

#[tokio::test]
async fn every_removal_refusal_writes_nothing_and_a_tier_nobody_holds_goes_without_a_disposition() {
    let t = demo_db().await;
    let wiki = ladder_id(&t, "Wiki hosting").await;
    let initech = pool_named(&t, "Initech").await;
    // A ladder with one tier, that a type defaults to, with an organization on its floor.
    let team = new_product(&t, "Team", 5).await;
    let lone = new_ladder(&t, "Lone", &[team]).await;
    let solo = new_type(&t, "Solo", lone).await;
    let soloist = org_of_type(&t, "Soloist", solo).await;
    assert_eq!(held(&t, soloist.pool_id).await, vec![hd("Team", "floor", None, 1)]);
    let before = world(&t).await;

    // The only tier of a default ladder: refused under either disposition, and without one.
    for d in [Some(Disposition::Migrate), Some(Disposition::Grandfather), None] {
        let m = refused(topo::remove_tier(&t.db, &removal(lone, 0, d), 100).await.unwrap_err());
        assert!(m.contains("only tier of a ladder that Solo defaults to"), "{d:?}: {m}");
    }
    // Above the holder cap (Acme and Umbrella hold Free): refused under either disposition.
    for d in [Some(Disposition::Migrate), Some(Disposition::Grandfather)] {
        let m = refused(topo::remove_tier(&t.db, &removal(wiki, 0, d), 1).await.unwrap_err());
        assert!(m.contains("2 organizations hold this tier, more than the 1"), "{d:?}: {m}");
    }
    // The gate: holders and no disposition, refused on the disposition field.
    let p = field_errors(topo::remove_tier(&t.db, &removal(wiki, 0, None), 100).await.unwrap_err());
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "disposition");
    assert!(p[0].1.contains("2 organizations hold this tier: choose whether they migrate"), "{p:?}");
    let p = field_errors(topo::remove_tier(&t.db, &removal(wiki, 2, None), 100).await.unwrap_err());
    assert_eq!(p[0].0, "disposition");
    assert!(p[0].1.contains("1 organization holds this tier"), "{p:?}");
    // No such tier, no such ladder.
    assert!(matches!(
        topo::remove_tier(&t.db, &removal(wiki, 3, Some(Disposition::Migrate)), 100).await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(matches!(
        topo::remove_tier(&t.db, &removal(LadderId(999_999), 0, Some(Disposition::Migrate)), 100).await,
        Err(ServiceError::NotFound(_))
    ));
    assert_eq!(world(&t).await, before, "no refusal wrote anything");

    // Basic has no holder: it goes without a disposition, like a delete.
    let (act, reach) = topo::remove_tier(&t.db, &removal(wiki, 1, None), 100).await.unwrap();
    assert_eq!(reach.holders, 0);
    assert_eq!(act_row(&t, act).await, ("tier_removal".into(), None, "done".into()));
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Pro"]));
    assert_eq!(positions(&t, initech).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);
    let grants_of = |w: &[String]| w.iter().filter(|r| r.starts_with("grant ")).cloned().collect::<Vec<_>>();
    assert_eq!(grants_of(&world(&t).await), grants_of(&before), "no grant changed");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, 1);
}

// ---------- 5. Removal lock order ----------

#[tokio::test]
async fn a_tier_removal_waits_for_a_materializing_transaction_and_a_conferral_waits_for_the_removal() {
    let Demo { t, community, wiki, basic, pro, .. } = demo().await;
    let holder = org_of_type(&t, "Holder", community).await;
    grant(&t, holder.organization_id, basic).await;
    let waiter_org = org_of_type(&t, "Waiter", community).await;
    let initech = pool_named(&t, "Initech").await;

    // A: an open materializing transaction (the shared rendezvous); the removal waits for it,
    // before it reads or locks anything.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let remove =
        tokio::spawn(async move { topo::remove_tier(&db, &removal(wiki, 1, Some(Disposition::Migrate)), 100).await });
    let remover = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    let locks = common::granted_locks(&t.admin, remover).await;
    assert!(!locks.iter().any(|(_, r, _)| r == "core.resource_pools"), "the rendezvous comes first: {locks:?}");
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic", "Pro"]));
    a.commit().await.unwrap();
    remove.await.unwrap().unwrap();
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Pro"]));
    assert_eq!(held(&t, holder.pool_id).await.len(), 1);

    // The other way: pause a removal of Pro (Initech's) at its last statement, the reconcile
    // request, whose foreign key waits on the subscription row the admin holds. It holds every
    // lock it declares; a conferral started meanwhile waits for it, then sees Pro off the ladder.
    let initech_org =
        OrganizationId(scalar(&t, "SELECT organization_id FROM core.organizations WHERE name = 'Initech'").await);
    subscriptions(&t, initech_org, "sub").await;
    let (mut hold, hold_pid) =
        common::hold_open(&t, "SELECT 1 FROM core.subscriptions WHERE stripe_subscription_id = 'sub_live' FOR UPDATE")
            .await;
    let db = t.db.clone();
    let remove =
        tokio::spawn(async move { topo::remove_tier(&db, &removal(wiki, 1, Some(Disposition::Migrate)), 100).await });
    let remover = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    // The exclusive rendezvous, by its key (its pool and grant rows are the per-path test's).
    common::locks::assert_holds(&t.admin, remover, &[common::locks::Expect::rendezvous_exclusive()]).await;
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Pro"]), "nothing committed yet");
    let conferral = spawn_grant(&t, waiter_org.organization_id, pro);
    common::wait_for_waiter(&t.admin, &t.name, remover).await;
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    drop(hold);
    let (act, _) = remove.await.unwrap().unwrap();
    conferral.await.unwrap().unwrap();
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free"]));
    assert_eq!(held(&t, initech).await, vec![hd("Free", "floor", Some(act), 1)]);
    // The conferral came after the removal: Pro is no tier, so it displaced nothing and holds no
    // ladder; the Free floor it would have displaced is the one the organization had.
    assert_eq!(held(&t, waiter_org.pool_id).await, vec![hd("Free", "floor", None, 1), hd("Pro", "operator", None, 0)]);
    assert_eq!(reconciles(&t).await, vec![("sub_live".into(), Some("tier_removed".into()))]);
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 6. Reorder keeping rank 0 ----------

#[tokio::test]
async fn a_reorder_that_keeps_rank_0_renumbers_the_positions_and_reaches_no_one() {
    let Demo { t, community, wiki, free, basic, pro, .. } = demo().await;
    let holder = org_of_type(&t, "Basic holder", community).await;
    grant(&t, holder.organization_id, basic).await;
    let (acme, initech) = (pool_named(&t, demo::DEMO_ORGANIZATION).await, pool_named(&t, "Initech").await);

    // No disposition: organizations hold the floor, but the floor does not change.
    let act = pa::reorder_tiers(&t.db, &reorder(wiki, &[free, pro, basic], None), None).await.unwrap();
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Pro", "Basic"]));
    assert_eq!(positions(&t, holder.pool_id).await, vec![pos("Wiki hosting", 2, "Basic", "operator")]);
    assert_eq!(positions(&t, initech).await, vec![pos("Wiki hosting", 1, "Pro", "operator")]);
    assert_eq!(positions(&t, acme).await, vec![pos("Wiki hosting", 0, "Free", "floor")]);
    assert_eq!(act_row(&t, act).await, ("tier_reorder".into(), None, "done".into()));
    let (product, rank, _) = act_detail(&t, act).await;
    assert_eq!((product, rank), (Some(free), Some(0)), "the act names the ladder's rank 0");
    assert!(reached(&t, act).await.is_empty(), "no type reached");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_act_obligations").await, 0);
    assert_eq!(scalar(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'drain_plan_act'").await, 0);
    assert_eq!(type_default(&t, community).await, (Some(wiki), None), "the type's default is not taken over");
    assert!(stale_pools(&t).await.is_empty());

    // A ladder no type defaults to: even a change of rank 0 reaches no type, and is done at once.
    let (a, b) = (new_product(&t, "Team A", 2).await, new_product(&t, "Team B", 4).await);
    let spare = new_ladder(&t, "Spare", &[a, b]).await;
    let act = pa::reorder_tiers(&t.db, &reorder(spare, &[b, a], None), None).await.unwrap();
    assert_eq!(tiers(&t, spare).await, tier_list(&["Team B", "Team A"]));
    assert_eq!(act_row(&t, act).await.2, "done");
    assert!(reached(&t, act).await.is_empty());
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_act_obligations").await, 0);
}

// ---------- 7. Reorder changing rank 0 ----------

/// The demo plus six Community organizations, one holding Basic and one Pro, and a Business one
/// holding Basic (not reached: its type defaults to Support). Returns the pools holding the Free
/// floor and the others of the type.
async fn reorder_setup(t: &TestDb) -> (Vec<PoolId>, Vec<PoolId>, PoolId) {
    let (community, business) = (type_id(t, "Community").await, type_id(t, "Business").await);
    let (basic, pro) = (product_id(t, "Basic").await, product_id(t, "Pro").await);
    let created = orgs_of_type(t, community, "Reordered", 6).await;
    grant(t, created[1].organization_id, basic).await;
    grant(t, created[4].organization_id, pro).await;
    let outsider = org_of_type(t, "Outsider", business).await;
    grant(t, outsider.organization_id, basic).await;
    let (mut floors, mut others) = (vec![], vec![]);
    for (_, _, p) in members_of(t, community).await {
        if positions(t, p).await == vec![pos("Wiki hosting", 0, "Free", "floor")] {
            floors.push(p);
        } else {
            others.push(p);
        }
    }
    // Acme, Umbrella and four of ours; Initech and our Basic and Pro holders.
    assert_eq!((floors.len(), others.len()), (6, 3));
    (floors, others, outsider.pool_id)
}

#[tokio::test]
async fn a_reorder_changing_rank_0_with_migrate_moves_every_floor_to_the_new_rank_0() {
    let Demo { t, community, wiki, free, basic, pro, .. } = demo().await;
    let (floors, others, outsider) = reorder_setup(&t).await;
    let old_floors: Vec<GrantId> = floor_grants_on(&t, &floors, wiki).await.into_iter().map(|f| f.0).collect();
    let outsider_before = held(&t, outsider).await;

    let act =
        pa::reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Migrate)), None).await.unwrap();
    // T0: the ranks, the reached type (from the old rank 0), the type's transition taken over.
    assert_eq!(act_row(&t, act).await, ("tier_reorder".into(), Some("migrate".into()), "running".into()));
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Basic", "Free", "Pro"]));
    assert_eq!(reached(&t, act).await, vec![(community, Some(wiki), Some(free))]);
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(act)));
    assert_eq!(positions(&t, floors[0]).await, vec![pos("Wiki hosting", 1, "Free", "floor")], "ranks follow");

    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.listed, d.moved, d.failed, d.finished), (9, 9, 0, true));
    assert_eq!(counts(&t, act).await, (0, 6, 0, 3, 0, 0));
    assert_eq!(not_once(&t, act).await, 0, "every obligation settled exactly once");
    for (p, g) in floors.iter().zip(&old_floors) {
        assert_eq!(held(&t, *p).await, vec![hd("Basic", "floor", Some(act), 1)], "pool {p}");
        assert_eq!(positions(&t, *p).await, vec![pos("Wiki hosting", 0, "Basic", "floor")], "pool {p}");
        assert_eq!(grant_row(&t, *g).await.0, "ended", "pool {p}'s Free floor");
        assert_eq!(latest_conferral(&t, *g).await, ("ended".into(), Some("migrated".into())));
        assert_eq!(ents(&t, *p).await, vec![sites(3), custom_domain()]);
    }
    // The vacant ones keep what they hold, and get no floor over it.
    let mut vacant_held = vec![];
    for p in &others {
        vacant_held.push(held(&t, *p).await);
    }
    vacant_held.sort();
    assert_eq!(
        vacant_held,
        vec![
            vec![hd("Basic", "operator", None, 1)],
            vec![hd("Pro", "operator", None, 1)],
            vec![hd("Pro", "operator", None, 1)]
        ]
    );
    assert_eq!(held(&t, outsider).await, outsider_before, "a type that does not default to the ladder is untouched");
    assert_eq!(act_state(&t, act).await, "done");
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(act)));
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn a_reorder_changing_rank_0_with_grandfather_keeps_the_old_floor_as_a_legacy_grant_at_its_new_rank() {
    let Demo { t, community, wiki, free, basic, pro, .. } = demo().await;
    let (floors, others, outsider) = reorder_setup(&t).await;
    let old_floors: Vec<GrantId> = floor_grants_on(&t, &floors, wiki).await.into_iter().map(|f| f.0).collect();
    let outsider_before = held(&t, outsider).await;

    let act = pa::reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Grandfather)), None)
        .await
        .unwrap();
    assert_eq!(reached(&t, act).await, vec![(community, Some(wiki), Some(free))]);
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.listed, d.moved, d.failed, d.finished), (9, 9, 0, true));
    assert_eq!(counts(&t, act).await, (0, 0, 6, 3, 0, 0));
    assert_eq!(not_once(&t, act).await, 0);
    for (p, g) in floors.iter().zip(&old_floors) {
        assert_eq!(held(&t, *p).await, vec![hd("Free", "legacy", Some(act), 1)], "pool {p}");
        assert_eq!(positions(&t, *p).await, vec![pos("Wiki hosting", 1, "Free", "legacy")], "pool {p}");
        assert_eq!(grant_row(&t, *g).await.0, "ended");
        assert_eq!(latest_conferral(&t, *g).await, ("ended".into(), Some("grandfathered".into())));
        assert_eq!(ents(&t, *p).await, vec![sites(1)], "pool {p} keeps its wiki");
    }
    let legacy: Vec<GrantId> = t
        .all(
            sqlx::query_scalar("SELECT grant_id FROM core.grants WHERE kind = 'legacy' AND plan_act_id = $1").bind(act),
        )
        .await;
    assert_eq!(legacy.len(), 6);
    for g in legacy {
        assert_eq!(events(&t, g).await, vec![("grandfathered".into(), Some(act))]);
    }
    assert_eq!(
        scalar(&t, &format!("SELECT count(*) FROM core.grants WHERE kind = 'floor' AND plan_act_id = {act}")).await,
        0,
        "no new floor for the grandfathered (nor for the vacant ones, which hold the ladder)"
    );
    for p in &others {
        assert_eq!(held(&t, *p).await.len(), 1, "pool {p}");
        assert_eq!(held(&t, *p).await[0].1, "operator");
    }
    assert_eq!(held(&t, outsider).await, outsider_before);
    assert_eq!(act_state(&t, act).await, "done");
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 8. Reorder refusals ----------

#[tokio::test]
async fn a_reorder_is_refused_at_the_gate_and_on_bad_orders_and_writes_nothing() {
    let Demo { t, community, wiki, support, free, basic, pro, .. } = demo().await;
    let priority = product_id(&t, "Priority support").await;
    let team = new_product(&t, "Team", 5).await;
    let lone = new_ladder(&t, "Lone", &[team]).await;
    let before = world(&t).await;

    // The gate: rank 0 changes, organizations hold the old floor, no disposition.
    let p = field_errors(pa::reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], None), None).await.unwrap_err());
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "disposition");
    assert!(p[0].1.contains("choose whether they migrate to the new floor or are grandfathered"), "{p:?}");
    let support_order = [priority, product_id(&t, "Community support").await];
    let p = field_errors(pa::reorder_tiers(&t.db, &reorder(support, &support_order, None), None).await.unwrap_err());
    assert_eq!(p[0].0, "disposition", "Globex holds the Support floor");
    assert_eq!(world(&t).await, before, "the gate wrote nothing");
    assert_eq!(type_default(&t, community).await, (Some(wiki), None));
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic", "Pro"]));

    // Orders that are not a new permutation of the ladder's tiers, and a ladder with one tier.
    let bad: &[(&[ProductId], &str)] = &[
        (&[free, basic], "Give every tier"),
        (&[free, free, pro], "Give every tier"),
        (&[free, basic, pro, priority], "Give every tier"),
        (&[basic, pro, priority], "Give every tier"),
        (&[], "Give every tier"),
        (&[free, basic, pro], "already"),
    ];
    for d in [None, Some(Disposition::Migrate)] {
        for (order, message) in bad {
            let p = field_errors(pa::reorder_tiers(&t.db, &reorder(wiki, order, d), None).await.unwrap_err());
            assert!(p.iter().any(|(_, m)| m.contains(message)), "{order:?} ({d:?}): {p:?}");
        }
        let p = field_errors(pa::reorder_tiers(&t.db, &reorder(lone, &[team], d), None).await.unwrap_err());
        assert!(p[0].1.contains("fewer than two tiers"), "{p:?}");
        assert!(matches!(
            pa::reorder_tiers(&t.db, &reorder(LadderId(999_999), &[free, basic], d), None).await,
            Err(ServiceError::NotFound(_))
        ));
    }
    assert_eq!(world(&t).await, before, "nothing written");

    // A type defaulting to a ladder, with no organization yet: allowed without a disposition, the
    // type reached and taken over, and the act done at once.
    let (a, b) = (new_product(&t, "Team A", 2).await, new_product(&t, "Team B", 4).await);
    let spare = new_ladder(&t, "Spare", &[a, b]).await;
    let quiet = new_type(&t, "Quiet", spare).await;
    let act = pa::reorder_tiers(&t.db, &reorder(spare, &[b, a], None), None).await.unwrap();
    assert_eq!(act_row(&t, act).await.2, "done");
    assert_eq!(reached(&t, act).await, vec![(quiet, Some(spare), Some(a))]);
    assert_eq!(type_default(&t, quiet).await, (Some(spare), Some(act)));
    assert_eq!(tiers(&t, spare).await, tier_list(&["Team B", "Team A"]));
}

// ---------- 9. Reorder T0's locks ----------

#[tokio::test]
async fn reorder_t0_waits_on_an_open_materializing_transaction_and_takes_no_pool_or_obligation_row() {
    let Demo { t, community, wiki, free, basic, pro, .. } = demo().await;
    orgs_of_type(&t, community, "Rendezvous", 3).await;
    // A: an open materializing transaction; T0 waits for the exclusive rendezvous first.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let t0 = tokio::spawn(async move {
        pa::reorder_tiers(&db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Migrate)), None).await
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    let locks = common::granted_locks(&t.admin, waiter).await;
    assert!(!locks.iter().any(|(_, r, _)| r == "core.org_types" || r == "core.plan_ladder_tiers"), "{locks:?}");
    assert_no_pool_nor_obligation(&locks);
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic", "Pro"]));
    a.commit().await.unwrap();
    let act1 = t0.await.unwrap().unwrap();
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Basic", "Free", "Pro"]));
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(act1)));

    // Paused at its last statement (the drain job's insert, on a dedupe key the admin holds
    // open): T0 holds everything it declares, and still no pool or obligation row.
    let (mut hold, hold_pid, next) = hold_next_drain_key(&t).await;
    assert_eq!(next.0, act1.0 + 1);
    let db = t.db.clone();
    let t0 = tokio::spawn(async move {
        pa::reorder_tiers(&db, &reorder(wiki, &[free, basic, pro], Some(Disposition::Grandfather)), None).await
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, waiter, &[common::locks::Expect::rendezvous_exclusive()]).await;
    assert_no_pool_nor_obligation(&common::granted_locks(&t.admin, waiter).await);
    sqlx::query("ROLLBACK").execute(&mut *hold).await.unwrap();
    drop(hold);
    let act2 = t0.await.unwrap().unwrap();
    assert_eq!(act2, next);
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic", "Pro"]));
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(act2)));
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_act_obligations").await, 0, "T0 writes no obligation");
}

// ---------- 10. A reorder over an earlier default change ----------

#[tokio::test]
async fn a_reorder_changing_rank_0_supersedes_an_earlier_default_change_and_moves_each_organization_once() {
    let Demo { t, community, wiki, support, free, basic, pro, .. } = demo().await;
    orgs_of_type(&t, community, "Earlier", 8).await;
    let members = members_of(&t, community).await;
    assert_eq!(members.len(), 11);
    // The type goes to Support and all of it moves; then back to Wiki hosting, listed but only
    // four organizations moved (Initech among them).
    let first = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert!(pa::drain_plan_act(&t.db, first, None).await.unwrap().finished);
    let second = change(&t, community, wiki, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, second, community, 500).await, 11);
    let initech = members.iter().find(|m| m.1 == "Initech").unwrap().2;
    let moved_by_second: Vec<PoolId> = members.iter().take(4).map(|m| m.2).collect();
    assert!(moved_by_second.contains(&initech));
    for p in &moved_by_second {
        assert!(pa::enact_obligation(&t.db, second, *p, None).await.unwrap());
    }
    assert_eq!(counts(&t, second).await, (7, 4, 0, 0, 0, 0));
    assert_eq!(held(&t, members[0].2).await, vec![hd("Free", "floor", Some(second), 1)]);
    assert_eq!(held(&t, members[10].2).await, vec![hd("Community support", "floor", Some(first), 1)]);

    // The reorder changes Wiki hosting's rank 0 and takes the type's transition over.
    let third =
        pa::reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Migrate)), None).await.unwrap();
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(third)));
    assert_eq!(counts(&t, second).await.0, 7, "still pending until the reorder's listing");
    assert_eq!(list_batch(&t, third, community, 500).await, 11);
    assert_eq!(counts(&t, second).await, (0, 4, 0, 0, 0, 7), "the listing superseded the earlier act's open ones");
    let (a, b) = tokio::join!(pa::drain_plan_act(&t.db, third, None), pa::drain_plan_act(&t.db, second, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.moved, a.failed, a.finished), (11, 0, true));
    assert_eq!((b.moved, b.failed), (0, 0), "the superseded act moves no one");
    pa::drain_plan_act(&t.db, second, None).await.unwrap();
    assert_eq!(act_state(&t, second).await, "done");
    assert_eq!(act_state(&t, third).await, "done");

    // Those the earlier act moved hold Free at rank 1 now (migrated again); the others still
    // held the Support floor (off the default: migrated); Initech holds Pro (vacant).
    assert_eq!(counts(&t, third).await, (0, 10, 0, 1, 0, 0));
    assert_eq!(not_once(&t, third).await, 0);
    assert_eq!(not_once(&t, second).await, 0);
    for (_, name, pool) in &members {
        let expected = if *pool == initech {
            vec![hd("Pro", "operator", None, 1)]
        } else {
            vec![hd("Basic", "floor", Some(third), 1)]
        };
        assert_eq!(held(&t, *pool).await, expected, "{name}");
    }
    assert_eq!(active_floors(&t, community, "").await, 10, "one floor each, no organization given two");
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 11. Retry beside a listing batch; listings of one act ----------

#[tokio::test]
async fn a_retry_and_a_listing_batch_on_other_pools_do_not_wait_on_each_other() {
    let Demo { t, community, business, wiki, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Retry", 4).await;
    let bad = created[1].pool_id;
    break_pool(&t, bad).await;
    let failing = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    let d = pa::drain_plan_act(&t.db, failing, None).await.unwrap();
    assert_eq!((d.moved, d.failed, d.finished), (6, 1, true));
    mend_pools(&t).await;
    orgs_of_type(&t, business, "Listed", 3).await;
    let other = change(&t, business, wiki, Some(Disposition::Migrate)).await.unwrap();

    // A Retry's requeue held open (the act's row, its failed obligation): another act's listing
    // batch, on other pools, completes meanwhile.
    let mut retry_tx = begin(&t.db, TxKind::Materializing).await.unwrap();
    let retry_pid = common::backend_pid(retry_tx.conn()).await;
    assert_eq!(store::requeue(retry_tx.conn(), failing).await.unwrap(), 1);
    let listing = spawn_list_batch(&t, other, business, 500);
    let n = tokio::time::timeout(Duration::from_secs(3), listing)
        .await
        .expect("the listing batch completed while the Retry's requeue was open")
        .unwrap();
    assert_eq!(n, 4, "Globex and our three");
    assert!(!common::anyone_waits_on(&t.admin, &t.name, retry_pid).await);
    retry_tx.rollback().await.unwrap();

    // The other way: a listing batch held open (a third act, on a third type's pools), and the
    // Retry itself completes meanwhile.
    let partners = new_type(&t, "Partners", wiki).await;
    orgs_of_type(&t, partners, "Partner", 2).await;
    let third = change(&t, partners, support, Some(Disposition::Migrate)).await.unwrap();
    let mut batch = begin(&t.db, TxKind::Materializing).await.unwrap();
    let batch_pid = common::backend_pid(batch.conn()).await;
    assert_eq!(store::write_obligations(batch.conn(), third, partners, 500).await.unwrap(), 2);
    let partner_pools: Vec<i64> = t
        .all(
            sqlx::query_scalar(
                "SELECT rp.pool_id FROM core.resource_pools rp JOIN core.organizations o USING (organization_id)
              WHERE o.org_type_id = $1 AND rp.is_default ORDER BY 1",
            )
            .bind(partners.0),
        )
        .await;
    let mut batch_locks = vec![common::locks::Expect::rendezvous_shared()];
    batch_locks.extend(
        partner_pools
            .iter()
            .map(|p| common::locks::Expect::row_in("core.resource_pools", p, common::locks::RowMode::KeyShare)),
    );
    common::locks::assert_holds(&t.admin, batch_pid, &batch_locks).await;
    let retry = tokio::time::timeout(Duration::from_secs(3), pa::retry_plan_act(&t.db, failing, None))
        .await
        .expect("the Retry completed while the listing batch was open")
        .unwrap();
    assert!(retry > third);
    assert!(!common::anyone_waits_on(&t.admin, &t.name, batch_pid).await);
    batch.commit().await.unwrap();

    let (state, attempts, _) = obligation(&t, failing, bad).await;
    assert_eq!((state.as_str(), attempts), ("pending", 1), "requeued by the Retry");
    for act in [failing, other, third] {
        let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
        assert!(d.finished && d.failed == 0, "act {act}: {d:?}");
    }
    assert_eq!(counts(&t, failing).await, (0, 6, 0, 1, 0, 0));
    assert_eq!(counts(&t, other).await, (0, 4, 0, 0, 0, 0));
    assert_eq!(counts(&t, third).await, (0, 2, 0, 0, 0, 0));
    assert_eq!(held(&t, bad).await, vec![hd("Community support", "floor", Some(failing), 1)]);
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn a_listing_batch_broken_by_a_deadlock_is_listed_again_by_the_next_pass() {
    let Demo { t, community, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Deadlock", 3).await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();

    // T holds the act's listing row (the batch updates it last), with a long deadlock timeout so
    // that the batch, not T, is the transaction PostgreSQL breaks.
    let (mut tconn, t_pid) = common::hold_open(
        &t,
        &format!(
            "SET LOCAL deadlock_timeout = '10s';
             SELECT 1 FROM core.plan_act_reached_types WHERE plan_act_id = {act} AND org_type_id = {community} FOR UPDATE"
        ),
    )
    .await;
    let db = t.db.clone();
    let drain = tokio::spawn(async move { pa::drain_plan_act(&db, act, None).await });
    common::wait_for_waiter(&t.admin, &t.name, t_pid).await;
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_act_obligations").await, 0, "nothing committed");
    // T now asks for a pool row the waiting batch holds FOR KEY SHARE: a cycle. T gets the row
    // only once the batch's transaction is gone, and the batch could not commit (it waits on T).
    let started = Instant::now();
    sqlx::query("SELECT 1 FROM core.resource_pools WHERE pool_id = $1 FOR UPDATE")
        .bind(created[0].pool_id)
        .execute(&mut *tconn)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(500), "T waited for the batch's key-share lock ({waited:?})");
    assert!(waited < Duration::from_secs(5), "the deadlock was broken on the batch's side ({waited:?})");
    // The next pass lists the batch again, and waits on T once more.
    common::wait_for_waiter(&t.admin, &t.name, t_pid).await;
    sqlx::query("COMMIT").execute(&mut *tconn).await.unwrap();
    drop(tconn);
    let d = tokio::time::timeout(Duration::from_secs(10), drain).await.expect("the drain finished").unwrap().unwrap();
    assert_eq!((d.listed, d.moved, d.failed, d.finished), (6, 6, 0, true));
    assert_eq!(counts(&t, act).await, (0, 5, 0, 1, 0, 0));
    assert_eq!(not_once(&t, act).await, 0);
    assert_eq!(act_state(&t, act).await, "done");
    assert!(stale_pools(&t).await.is_empty());
}

#[tokio::test]
async fn two_drains_of_one_act_at_once_settle_every_obligation_exactly_once() {
    let Demo { t, community, wiki, free, basic, pro, .. } = demo().await;
    orgs_of_type(&t, community, "Twin", 40).await;
    let act =
        pa::reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Migrate)), None).await.unwrap();
    let (a, b) = tokio::join!(pa::drain_plan_act(&t.db, act, None), pa::drain_plan_act(&t.db, act, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.failed, b.failed), (0, 0));
    assert_eq!(a.moved + b.moved, 43, "{a:?} {b:?}");
    assert!(a.finished != b.finished, "exactly one of them finished the act: {a:?} {b:?}");
    assert_eq!(counts(&t, act).await, (0, 42, 0, 1, 0, 0));
    assert_eq!(not_once(&t, act).await, 0);
    assert_eq!(act_state(&t, act).await, "done");
    assert_eq!(
        active_floors(&t, community, &format!("AND g.product_id = {basic} AND g.plan_act_id = {act}")).await,
        42,
        "one new floor each"
    );
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 12. Previews ----------

#[tokio::test]
async fn the_previews_count_whom_each_act_reaches_name_its_refusal_and_write_nothing() {
    let Demo { t, community, business, wiki, support, free, basic, pro } = demo().await;
    let team = new_product(&t, "Team", 5).await;
    let lone = new_ladder(&t, "Lone", &[team]).await;
    new_type(&t, "Solo", lone).await;
    let before = world(&t).await;

    // Tier removal.
    let p = topo::preview_remove_tier(&t.db, &removal(wiki, 0, None), 100).await.unwrap();
    assert_eq!((p.ladder.as_str(), p.product.as_str(), p.product_id), ("Wiki hosting", "Free", free));
    assert_eq!((p.holders, p.floor_after.as_deref(), p.needs_disposition), (2, Some("Basic"), true));
    assert!(p.refusal.as_deref().unwrap_or_default().contains("2 organizations hold this tier"), "{p:?}");
    let p = topo::preview_remove_tier(&t.db, &removal(wiki, 0, Some(Disposition::Migrate)), 100).await.unwrap();
    assert_eq!((p.holders, p.refusal.as_deref(), p.needs_disposition), (2, None, false));
    let p = topo::preview_remove_tier(&t.db, &removal(wiki, 0, Some(Disposition::Grandfather)), 1).await.unwrap();
    assert!(p.refusal.as_deref().unwrap_or_default().contains("more than the 1"), "{p:?}");
    assert!(!p.needs_disposition);
    let p = topo::preview_remove_tier(&t.db, &removal(wiki, 1, None), 100).await.unwrap();
    assert_eq!((p.product.as_str(), p.holders, p.refusal.as_deref()), ("Basic", 0, None));
    let p = topo::preview_remove_tier(&t.db, &removal(wiki, 2, None), 100).await.unwrap();
    assert_eq!((p.holders, p.floor_after.as_deref()), (1, Some("Free")));
    assert!(p.refusal.as_deref().unwrap_or_default().contains("1 organization holds this tier"), "{p:?}");
    let p = topo::preview_remove_tier(&t.db, &removal(lone, 0, Some(Disposition::Migrate)), 100).await.unwrap();
    assert_eq!(p.floor_after, None);
    assert!(p.refusal.as_deref().unwrap_or_default().contains("only tier"), "{p:?}");
    assert!(matches!(
        topo::preview_remove_tier(&t.db, &removal(wiki, 5, None), 100).await,
        Err(ServiceError::NotFound(_))
    ));

    // Reorder.
    let p = pa::preview_reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], None)).await.unwrap();
    assert_eq!(p.types, vec!["Community".to_string()]);
    assert_eq!((p.organizations, p.holding_floor, p.vacant), (3, 2, 1));
    assert_eq!((p.from_floor.as_deref(), p.to_floor.as_deref()), (Some("Free"), Some("Basic")));
    assert!(p.refusal.as_deref().unwrap_or_default().contains("choose whether they migrate"), "{p:?}");
    let p = pa::preview_reorder_tiers(&t.db, &reorder(wiki, &[basic, free, pro], Some(Disposition::Grandfather)))
        .await
        .unwrap();
    assert_eq!((p.organizations, p.holding_floor, p.vacant, p.refusal.as_deref()), (3, 2, 1, None));
    let p = pa::preview_reorder_tiers(&t.db, &reorder(wiki, &[free, pro, basic], None)).await.unwrap();
    assert!(p.types.is_empty());
    assert_eq!((p.organizations, p.holding_floor, p.vacant, p.refusal.as_deref()), (0, 0, 0, None));
    assert_eq!((p.from_floor.as_deref(), p.to_floor.as_deref()), (Some("Free"), Some("Free")));
    assert!(matches!(
        pa::preview_reorder_tiers(&t.db, &reorder(wiki, &[free, basic], None)).await,
        Err(ServiceError::Invalid(_))
    ));

    // Default change.
    let p = pa::preview_default_change(&t.db, community, support, None).await.unwrap();
    assert_eq!(p.types, vec!["Community".to_string()]);
    assert_eq!((p.organizations, p.holding_floor, p.vacant), (3, 2, 1));
    assert_eq!((p.from_floor.as_deref(), p.to_floor.as_deref()), (Some("Free"), Some("Community support")));
    assert!(p.refusal.as_deref().unwrap_or_default().contains("hold the current default"), "{p:?}");
    let p = pa::preview_default_change(&t.db, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!((p.organizations, p.holding_floor, p.refusal.as_deref()), (3, 2, None));
    let p = pa::preview_default_change(&t.db, business, wiki, None).await.unwrap();
    assert_eq!((p.organizations, p.holding_floor, p.vacant), (1, 1, 0));
    assert_eq!((p.from_floor.as_deref(), p.to_floor.as_deref()), (Some("Community support"), Some("Free")));
    assert!(p.refusal.is_some());
    let e = pa::preview_default_change(&t.db, community, wiki, None).await.unwrap_err();
    assert_eq!(field_errors(e)[0].0, "plan_ladder_id");
    assert!(matches!(
        pa::preview_default_change(&t.db, OrgTypeId(999_999), wiki, None).await,
        Err(ServiceError::NotFound(_))
    ));

    assert_eq!(world(&t).await, before, "no preview wrote anything");
}

// ---------- 13. The operator's forms ----------

#[tokio::test]
async fn an_operator_removes_a_tier_and_reorders_a_ladder_on_the_topology_page() {
    let (t, op) = pages::operator_session().await;
    let community = type_id(&t, "Community").await;
    let (wiki, support) = (ladder_id(&t, "Wiki hosting").await, ladder_id(&t, "Support").await);
    let (free, basic) = (product_id(&t, "Free").await, product_id(&t, "Basic").await);
    let before = world(&t).await;

    // The default change's preview: its counts and the gate.
    let preview = format!("/operator/topology/org-types/{community}/default/preview?plan_ladder_id={support}");
    let a = op.get(&format!("{preview}&disposition=")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("reaches 3 organizations of Community."), "{}", a.body);
    assert!(a.body.contains("2 organizations hold <strong>Free</strong>"), "{}", a.body);
    assert!(a.body.contains("1 organization holds no floor to move"), "{}", a.body);
    assert!(a.body.contains("This act would be refused"), "{}", a.body);
    assert!(a.body.contains("Organizations hold the current default"), "{}", a.body);
    let a = op.get(&format!("{preview}&disposition=migrate")).await;
    assert!(a.body.contains("reaches 3 organizations of Community.") && !a.body.contains("would be refused"));

    // The removal's preview: holders, and the gate without a disposition.
    let remove = |rank: i32| format!("/operator/topology/ladders/{wiki}/tiers/{rank}/remove");
    let a = op.get(&format!("{}/preview?disposition=migrate", remove(2))).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("reaches 1 organization that holds it."), "{}", a.body);
    assert!(a.body.contains("Nothing stands in the way"), "{}", a.body);
    let a = op.get(&format!("{}/preview?disposition=", remove(0))).await;
    assert!(a.body.contains("reaches 2 organizations that hold it."), "{}", a.body);
    assert!(a.body.contains("This tier cannot be removed"), "{}", a.body);
    assert!(a.body.contains("2 organizations hold this tier: choose whether they migrate"), "{}", a.body);

    // A removal without a disposition: 422, the message, nothing written.
    let fields = [("disposition", ""), ("reason", "tidy up")];
    let a = op.post(&remove(0), &fields, false).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(a.body.contains("2 organizations hold this tier: choose whether they migrate"), "{}", a.body);
    assert!(a.body.contains("<html") || a.body.to_lowercase().contains("<!doctype"), "the whole page");
    let a = op.post(&remove(0), &fields, true).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(a.body.starts_with(&format!(r#"<div class="tier-remove" id="remove-tier-{wiki}-0">"#)), "{}", a.body);
    assert!(a.body.contains("2 organizations hold this tier: choose whether they migrate"), "{}", a.body);
    assert_eq!(world(&t).await, before, "no preview or refusal wrote anything");

    // Remove Pro with migrate: 303 to the act; Initech is back on the floor.
    let a = op.post(&remove(2), &[("disposition", "migrate"), ("reason", "retire Pro")], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let act = PlanActId(scalar(&t, "SELECT max(plan_act_id) FROM core.plan_acts").await);
    let to = format!("/operator/plan-acts/{act}");
    assert_eq!(a.header("location"), Some(to.as_str()));
    assert_eq!(act_row(&t, act).await, ("tier_removal".into(), Some("migrate".into()), "done".into()));
    let actor: Option<i64> =
        t.one(sqlx::query_scalar("SELECT created_by FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await;
    assert!(actor.is_some(), "the act names the operator");
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic"]));
    assert_eq!(held(&t, pool_named(&t, "Initech").await).await, vec![hd("Free", "floor", Some(act), 1)]);
    assert_eq!(op.get(&to).await.status, StatusCode::OK);

    // Reorder Wiki hosting (Basic becomes the floor) without a disposition: refused at the gate.
    let order = format!("/operator/topology/ladders/{wiki}/tier-order");
    let (rank_basic, rank_free) = (format!("rank.{basic}"), format!("rank.{free}"));
    let refused_fields = [(rank_basic.as_str(), "0"), (rank_free.as_str(), "1"), ("disposition", "")];
    let acts = scalar(&t, "SELECT count(*) FROM core.plan_acts").await;
    let a = op.post(&order, &refused_fields, false).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(a.body.contains("choose whether they migrate to the new floor"), "{}", a.body);
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, acts);
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic"]));

    // With migrate: 303 to the act, which moves every floor to Basic.
    let fields = [
        (rank_basic.as_str(), "0"),
        (rank_free.as_str(), "1"),
        ("disposition", "migrate"),
        ("reason", "Basic for everyone"),
    ];
    let a = op.post(&order, &fields, false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let reorder_act =
        PlanActId(scalar(&t, "SELECT max(plan_act_id) FROM core.plan_acts WHERE kind = 'tier_reorder'").await);
    assert_eq!(a.header("location"), Some(format!("/operator/plan-acts/{reorder_act}").as_str()));
    if act_state(&t, reorder_act).await != "done" {
        pa::drain_plan_act(&t.db, reorder_act, None).await.unwrap();
    }
    assert_eq!(act_state(&t, reorder_act).await, "done");
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Basic", "Free"]));
    assert_eq!(counts(&t, reorder_act).await, (0, 3, 0, 0, 0, 0));
    assert_eq!(
        held(&t, pool_named(&t, demo::DEMO_ORGANIZATION).await).await,
        vec![hd("Basic", "floor", Some(reorder_act), 1)]
    );
    assert!(stale_pools(&t).await.is_empty());
    op.app.handle.stop(false).await;
}

/// A field a plan act's form does not have is refused naming it (in place for a preview), a
/// missing one gets its field's message, and a Retry with nothing to retry is a conflict (409, as
/// every refusal of an act is): none of them writes anything.
#[tokio::test]
async fn a_misspelt_or_missing_field_on_a_plan_act_form_is_refused_by_name_and_an_empty_retry_is_a_conflict() {
    let (t, op) = pages::operator_session().await;
    let (community, business) = (type_id(&t, "Community").await, type_id(&t, "Business").await);
    let (wiki, support) = (ladder_id(&t, "Wiki hosting").await, ladder_id(&t, "Support").await);
    let basic = product_id(&t, "Basic").await;
    let default = format!("/operator/topology/org-types/{community}/default");
    let order = format!("/operator/topology/ladders/{wiki}/tier-order");
    let remove = format!("/operator/topology/ladders/{wiki}/tiers/2/remove");
    let (support_s, rank_basic) = (support.to_string(), format!("rank.{basic}"));
    let misspelt = [
        (default.as_str(), &[("plan_ladder_id", support_s.as_str()), ("dispositon", "migrate")][..], "dispositon"),
        (order.as_str(), &[(rank_basic.as_str(), "0"), ("rnk.1", "1"), ("disposition", "migrate")][..], "rnk.1"),
        (remove.as_str(), &[("disposition", "migrate"), ("reasons", "tidy")][..], "reasons"),
    ];
    let missing = [
        (default.as_str(), &[("disposition", "migrate")][..], "Choose a ladder."),
        (remove.as_str(), &[("reason", "tidy")][..], "1 organization holds this tier: choose whether"),
    ];
    op.refuse_misspelt_and_missing(&misspelt, &missing, async || world(&t).await).await;
    // A preview reads its form the same way, and says so in place.
    let a = op.get(&format!("{default}/preview?plan_ladder_id={support}&dispositon=migrate")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("This default cannot be changed"), "{}", a.body);
    assert!(a.body.contains("This form has no field “dispositon”"), "{}", a.body);

    // A Retry of an act none of whose organizations failed: 409, and no retry act is kept.
    let act = change(&t, business, wiki, Some(Disposition::Migrate)).await.unwrap();
    pa::drain_plan_act(&t.db, act, None).await.unwrap();
    let acts = scalar(&t, "SELECT count(*) FROM core.plan_acts").await;
    for htmx in [false, true] {
        let a = op.post(&format!("/operator/plan-acts/{act}/retry"), &[], htmx).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "htmx {htmx}: {}", a.body);
        assert!(a.body.contains("Nothing to retry"), "htmx {htmx}: {}", a.body);
    }
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, acts);
    op.app.handle.stop(false).await;
}

/// An incumbent whose end came before the expiry sweep got to it: its legacy grant keeps the
/// incumbent's own window (the grant row's check refuses an end before its start), and the sweep
/// expires it as it would have the incumbent.
#[tokio::test]
async fn a_grandfathered_incumbent_whose_end_has_come_keeps_its_window() {
    let ends = Utc::now() + chrono::Duration::days(30);
    let s = basic_holders(1, Some(ends)).await;
    let t = &s.t;
    // Its end comes while the grant is still active (the sweep has not run).
    let past = Utc::now() - chrono::Duration::minutes(1);
    let started = Utc::now() - chrono::Duration::days(1);
    t.run(
        sqlx::query("UPDATE core.grants SET starts_at = $2, ends_at = $3 WHERE grant_id = $1")
            .bind(s.community_basic)
            .bind(started)
            .bind(past),
    )
    .await;
    t.run(
        sqlx::query(
            "UPDATE core.conferrals SET starts_at = $2, ends_at = $3 WHERE grant_id = $1 AND state = 'holding'",
        )
        .bind(s.community_basic)
        .bind(started)
        .bind(past),
    )
    .await;

    let (act, _) = topo::remove_tier(&t.db, &removal(s.wiki, 1, Some(Disposition::Grandfather)), 100).await.unwrap();
    let (starts, ends_at): (DateTime<Utc>, Option<DateTime<Utc>>) = t.one(sqlx::query_as(
        "SELECT starts_at, ends_at FROM core.grants WHERE kind = 'legacy' AND plan_act_id = $1 AND organization_id = $2",
    )
    .bind(act)
    .bind(s.community.organization_id)).await;
    assert_eq!(
        (starts.timestamp_micros(), ends_at.map(|e| e.timestamp_micros())),
        (started.timestamp_micros(), Some(past.timestamp_micros()))
    );
    assert!(stale_pools(t).await.is_empty());
}

/// A removal, a reorder and a default change that wait past their bound on another change's
/// exclusive rendezvous answer "another change is in progress", and write nothing.
#[tokio::test]
async fn removal_reorder_and_default_change_behind_another_change_are_refused_as_in_progress() {
    let Demo { t, community, wiki, support, free, basic, pro, .. } = demo().await;
    let held = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let mut short = t.db.clone();
    short.lock_timeout = Duration::from_millis(200);
    assert!(matches!(
        topo::remove_tier(&short, &removal(wiki, 2, Some(Disposition::Migrate)), 100).await,
        Err(ServiceError::ChangeInProgress)
    ));
    assert!(matches!(
        pa::reorder_tiers(&short, &reorder(wiki, &[basic, free, pro], Some(Disposition::Migrate)), None).await,
        Err(ServiceError::ChangeInProgress)
    ));
    assert!(matches!(
        pa::change_org_type_default(&short, community, support, Some(Disposition::Migrate), None, "", None).await,
        Err(ServiceError::ChangeInProgress)
    ));
    held.rollback().await.unwrap();
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, 0);
    assert_eq!(tiers(&t, wiki).await, tier_list(&["Free", "Basic", "Pro"]));
}
