//! The entitlement core against a real PostgreSQL: conferral semantics, materialization against
//! a from-scratch recomputation over random sequences of acts, and the lock order of each
//! conferral function.

use crate::common;

use std::time::Duration;

use common::{TestDb, acts::grant_status, locks::Expect};
use member_console::{
    db::{Db, TxKind, begin},
    demo,
    ids::{
        ConferralId, GrantId, LadderId, OrgTypeId, OrganizationId, PoolId, ProductId, SubscriptionId,
        SubscriptionItemId,
    },
    services::{
        entitlements::{self as svc},
        organizations::{self as orgs, OrgName},
    },
    states::{GrantKind, GrantStatus},
    store::{
        catalog,
        entitlements::{self as store, EntitlementValue, NewGrant},
    },
};
use sqlx::PgConnection;

/// The demo catalog (Free 1 site, Basic 3, Pro 10 on "Wiki hosting"; Community and Priority
/// support on "Support"), plus a bundle that is a tier of both ladders.
async fn catalog_fixture(t: &TestDb) {
    demo::load(&t.db).await.unwrap();
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let set = catalog::insert_entitlement_set(tx.conn(), "Bundle").await.unwrap().unwrap();
    catalog::put_rule(tx.conn(), set, &"fedwiki.active_sites".into(), Some(20), None).await.unwrap();
    catalog::put_rule(tx.conn(), set, &"support.priority".into(), None, Some(true)).await.unwrap();
    let p = catalog::insert_product(tx.conn(), "Bundle", Some(set), true).await.unwrap().unwrap();
    let addon_set = catalog::insert_entitlement_set(tx.conn(), "Extra sites").await.unwrap().unwrap();
    catalog::put_rule(tx.conn(), addon_set, &"fedwiki.active_sites".into(), Some(2), None).await.unwrap();
    catalog::insert_product(tx.conn(), "Extra sites", Some(addon_set), true).await.unwrap();
    let wiki = catalog::ensure_ladder(tx.conn(), "Wiki hosting", 0).await.unwrap();
    let support = catalog::ensure_ladder(tx.conn(), "Support", 1).await.unwrap();
    catalog::ensure_tier(tx.conn(), wiki, 3, p).await.unwrap();
    catalog::ensure_tier(tx.conn(), support, 2, p).await.unwrap();
    tx.commit().await.unwrap();
}

async fn product(db: &Db, name: &str) -> ProductId {
    let mut c = db.pool.acquire().await.unwrap();
    catalog::product_id_by_name(&mut c, name).await.unwrap().unwrap()
}

async fn org_type(t: &TestDb, name: &str) -> OrgTypeId {
    t.one(sqlx::query_scalar("SELECT org_type_id FROM core.org_types WHERE name = $1").bind(name)).await
}

async fn new_org(t: &TestDb, name: &str, type_name: &str) -> orgs::CreatedOrganization {
    let ty = org_type(t, type_name).await;
    orgs::create_organization(&t.db, &OrgName::parse(name).unwrap(), Some(ty)).await.unwrap()
}

fn operator_grant(org: OrganizationId, product_id: ProductId, quantity: i32) -> NewGrant {
    NewGrant {
        organization_id: Some(org),
        product_id,
        quantity,
        kind: GrantKind::Operator,
        status: GrantStatus::Active,
        starts_at: None,
        ends_at: None,
        reason: "test".into(),
        created_by: None,
        plan_act_id: None,
        provision_domain: None,
    }
}

async fn entitlements(db: &Db, pool: PoolId) -> Vec<EntitlementValue> {
    let mut c = db.pool.acquire().await.unwrap();
    store::pool_entitlements(&mut c, pool).await.unwrap()
}

async fn sites(db: &Db, pool: PoolId) -> Option<i64> {
    entitlements(db, pool)
        .await
        .into_iter()
        .find(|e| e.resource_key == "fedwiki.active_sites")
        .and_then(|e| e.numeric_value)
}

async fn flag(db: &Db, pool: PoolId, key: &str) -> Option<bool> {
    entitlements(db, pool).await.into_iter().find(|e| e.resource_key == key).and_then(|e| e.flag_value)
}

/// (ladder, product, grant kind or "subscription") of each live position, by ladder name.
async fn positions(t: &TestDb, pool: PoolId) -> Vec<(String, String, String)> {
    t.all(
        sqlx::query_as(
            "SELECT l.name, p.name, coalesce(g.kind, 'subscription')
         FROM core.positions ps JOIN core.plan_ladders l USING (plan_ladder_id)
         JOIN core.conferrals c ON c.conferral_id = ps.conferral_id JOIN core.products p ON p.product_id = c.product_id
         LEFT JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE ps.pool_id = $1 ORDER BY l.name",
        )
        .bind(pool),
    )
    .await
}

async fn conferral_of_grant(t: &TestDb, grant: GrantId) -> ConferralId {
    t.one(
        sqlx::query_scalar("SELECT conferral_id FROM core.conferrals WHERE grant_id = $1 AND state = 'holding'")
            .bind(grant),
    )
    .await
}

fn p(l: &str, prod: &str, k: &str) -> (String, String, String) {
    (l.into(), prod.into(), k.into())
}

#[tokio::test]
async fn a_new_organization_holds_its_floor() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Floored", "Community").await;
    assert!(org.floor_grant_id.is_some());
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Free", "floor")]);
    assert_eq!(sites(&t.db, org.pool_id).await, Some(1));
    // A usage row exists for the numeric key, with the limit beside it.
    let (used, limit): (i64, i64) = t.one(sqlx::query_as(
        "SELECT used, limit_value FROM core.pool_usage WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
    )
    .bind(org.pool_id)).await;
    assert_eq!((used, limit), (0, 1));
    // An organization without a type has a pool and no floor.
    let bare = orgs::create_organization(&t.db, &OrgName::parse("Untyped").unwrap(), None).await.unwrap();
    assert!(bare.floor_grant_id.is_none());
    assert!(positions(&t, bare.pool_id).await.is_empty());
}

#[tokio::test]
async fn a_newcomer_takes_the_ladder_and_what_it_displaced_comes_back_when_it_ends() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Climber", "Community").await;
    let floor = org.floor_grant_id.unwrap();
    let basic =
        svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Basic").await, 1)).await.unwrap();
    assert_eq!(grant_status(&t, floor).await, "ended", "a floor simply ends");
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Basic", "operator")]);
    assert_eq!(sites(&t.db, org.pool_id).await, Some(3));
    assert_eq!(flag(&t.db, org.pool_id, "fedwiki.custom_domain").await, Some(true));

    let pro =
        svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Pro").await, 1)).await.unwrap();
    assert_eq!(grant_status(&t, basic).await, "replaced");
    assert_eq!(sites(&t.db, org.pool_id).await, Some(10));

    // Pro ends: the replaced Basic grant resumes.
    let r = svc::end_conferral(&t.db, conferral_of_grant(&t, pro).await, "test").await.unwrap();
    assert_eq!(r.resumed_grants, 1);
    assert_eq!(grant_status(&t, basic).await, "active");
    assert_eq!(sites(&t.db, org.pool_id).await, Some(3));

    // Basic ends with nothing displaced: the floor comes back.
    let r = svc::end_conferral(&t.db, conferral_of_grant(&t, basic).await, "test").await.unwrap();
    assert!(r.floor_grant_id.is_some());
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Free", "floor")]);
    assert_eq!(sites(&t.db, org.pool_id).await, Some(1));
    assert_eq!(flag(&t.db, org.pool_id, "fedwiki.custom_domain").await, None);
}

#[tokio::test]
async fn floors_apply_only_when_their_ladder_is_vacant() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Held", "Community").await;
    svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Pro").await, 1)).await.unwrap();
    let mut tx = begin(&t.db, TxKind::Materializing).await.unwrap();
    assert_eq!(svc::reapply_defaults_if_vacant(&mut tx, org.pool_id, None).await.unwrap(), None);
    tx.commit().await.unwrap();
    let floors: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT count(*) FROM core.grants WHERE kind = 'floor' AND status = 'active' AND organization_id = $1",
            )
            .bind(org.organization_id),
        )
        .await;
    assert_eq!(floors, 0);
}

#[tokio::test]
async fn a_bundle_displaces_whole_holders_and_each_comes_back() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    // Business defaults to Support: its floor is Community support.
    let org = new_org(&t, "Bundled", "Business").await;
    let basic =
        svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Basic").await, 1)).await.unwrap();
    assert_eq!(
        positions(&t, org.pool_id).await,
        vec![p("Support", "Community support", "floor"), p("Wiki hosting", "Basic", "operator")]
    );
    let bundle = svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Bundle").await, 1))
        .await
        .unwrap();
    assert_eq!(
        positions(&t, org.pool_id).await,
        vec![p("Support", "Bundle", "operator"), p("Wiki hosting", "Bundle", "operator")]
    );
    assert_eq!(grant_status(&t, basic).await, "replaced");
    assert_eq!(sites(&t.db, org.pool_id).await, Some(20));
    assert_eq!(flag(&t.db, org.pool_id, "support.priority").await, Some(true));
    svc::end_conferral(&t.db, conferral_of_grant(&t, bundle).await, "test").await.unwrap();
    assert_eq!(
        positions(&t, org.pool_id).await,
        vec![p("Support", "Community support", "floor"), p("Wiki hosting", "Basic", "operator")]
    );
    assert_eq!(flag(&t.db, org.pool_id, "support.priority").await, Some(false));
}

async fn subscription_with_item(
    t: &TestDb,
    org: OrganizationId,
    product_id: ProductId,
    quantity: i32,
) -> (SubscriptionId, SubscriptionItemId) {
    let n = member_console::config::random_hex(4);
    let sub: SubscriptionId = t.one(sqlx::query_scalar(
        "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status) VALUES ($1, $2, 'active') RETURNING subscription_id",
    )
    .bind(org)
    .bind(format!("sub_{n}"))).await;
    let item: SubscriptionItemId = t.one(sqlx::query_scalar(
        "INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, quantity) VALUES ($1, $2, $3, $4) RETURNING subscription_item_id",
    )
    .bind(sub)
    .bind(format!("si_{n}"))
    .bind(product_id)
    .bind(quantity)).await;
    (sub, item)
}

async fn provision(
    db: &Db,
    pool: PoolId,
    product_id: ProductId,
    item: SubscriptionItemId,
    quantity: i32,
) -> ConferralId {
    let mut tx = begin(db, TxKind::Materializing).await.unwrap();
    let c = store::confer(tx.conn(), pool, product_id, None, Some(item), quantity).await.unwrap();
    store::materialize_pool(tx.conn(), pool).await.unwrap();
    tx.commit().await.unwrap();
    c
}

#[tokio::test]
async fn suspended_provisions_hold_their_ladder_but_confer_nothing() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Subscriber", "Community").await;
    let basic = product(&t.db, "Basic").await;
    let (sub, item) = subscription_with_item(&t, org.organization_id, basic, 1).await;
    provision(&t.db, org.pool_id, basic, item, 1).await;
    assert_eq!(sites(&t.db, org.pool_id).await, Some(3));
    assert_eq!(svc::sync_source_status(&t.db, sub, "suspended").await.unwrap(), 1);
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Basic", "subscription")]);
    assert_eq!(sites(&t.db, org.pool_id).await, None, "a suspended provision confers nothing, and no floor returns");
    assert_eq!(svc::sync_source_status(&t.db, sub, "active").await.unwrap(), 1);
    assert_eq!(sites(&t.db, org.pool_id).await, Some(3));
    assert!(svc::sync_source_status(&t.db, sub, "gone").await.is_err());
}

#[tokio::test]
async fn a_displaced_subscription_is_delivered_when_the_grant_over_it_ends() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Displaced", "Community").await;
    let basic = product(&t.db, "Basic").await;
    let (_sub, item) = subscription_with_item(&t, org.organization_id, basic, 1).await;
    provision(&t.db, org.pool_id, basic, item, 1).await;
    let pro =
        svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Pro").await, 1)).await.unwrap();
    let open: i64 = t
        .one(sqlx::query_scalar("SELECT count(*) FROM core.subscription_displacements WHERE delivered_at IS NULL"))
        .await;
    assert_eq!(open, 1, "the provision got a displacement record");
    let r = svc::end_conferral(&t.db, conferral_of_grant(&t, pro).await, "test").await.unwrap();
    assert_eq!(r.delivered_subscriptions, 1);
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Basic", "subscription")]);
    assert_eq!(sites(&t.db, org.pool_id).await, Some(3));
}

#[tokio::test]
async fn quantity_multiplies_and_add_ons_stack_on_the_plan() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Many", "Community").await;
    let g =
        svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Basic").await, 3)).await.unwrap();
    assert_eq!(sites(&t.db, org.pool_id).await, Some(9));
    svc::update_conferral_bounds(&t.db, conferral_of_grant(&t, g).await, 2, None).await.unwrap();
    assert_eq!(sites(&t.db, org.pool_id).await, Some(6));
    // A product that is no tier takes no ladder and adds to what the plan confers.
    svc::confer_grant(&t.db, &operator_grant(org.organization_id, product(&t.db, "Extra sites").await, 2))
        .await
        .unwrap();
    assert_eq!(sites(&t.db, org.pool_id).await, Some(10));
    assert_eq!(positions(&t, org.pool_id).await, vec![p("Wiki hosting", "Basic", "operator")]);
    assert!(svc::update_conferral_bounds(&t.db, conferral_of_grant(&t, g).await, 0, None).await.is_err());
}

/// A tiny deterministic generator, so a failing sequence can be replayed from its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

async fn assert_materialized_equals_fresh(c: &mut PgConnection, pool: PoolId, context: &str) {
    let stored = store::pool_entitlements(c, pool).await.unwrap();
    let fresh = store::computed_entitlements(c, pool).await.unwrap();
    assert_eq!(stored, fresh, "{context}");
}

#[tokio::test]
async fn materialization_equals_a_fresh_computation_after_any_sequence_of_acts() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let products: Vec<ProductId> = {
        let mut v = vec![];
        for n in ["Free", "Basic", "Pro", "Community support", "Priority support", "Bundle", "Extra sites"] {
            v.push(product(&t.db, n).await);
        }
        v
    };
    for seed in [7u64, 42, 1234] {
        let mut rng = Rng(seed);
        let org = new_org(&t, &format!("Random {seed}"), if seed % 2 == 0 { "Community" } else { "Business" }).await;
        let (sub, item) = subscription_with_item(&t, org.organization_id, products[1], 1).await;
        let mut log = vec![];
        for step in 0..60 {
            let holding: Vec<ConferralId> = t
                .all(
                    sqlx::query_scalar(
                        "SELECT conferral_id FROM core.conferrals WHERE pool_id = $1 AND state = 'holding' ORDER BY 1",
                    )
                    .bind(org.pool_id),
                )
                .await;
            match rng.below(6) {
                0 | 1 => {
                    let prod = products[rng.below(products.len())];
                    let q = 1 + rng.below(3) as i32;
                    log.push(format!("grant {prod} x{q}"));
                    svc::confer_grant(&t.db, &operator_grant(org.organization_id, prod, q)).await.unwrap();
                }
                2 if !holding.is_empty() => {
                    let c = holding[rng.below(holding.len())];
                    log.push(format!("end {c}"));
                    svc::end_conferral(&t.db, c, "random").await.unwrap();
                }
                3 => {
                    let status = if rng.below(2) == 0 { "suspended" } else { "active" };
                    log.push(format!("subscription {status}"));
                    svc::sync_source_status(&t.db, sub, status).await.unwrap();
                }
                4 if !holding.is_empty() => {
                    let c = holding[rng.below(holding.len())];
                    let q = 1 + rng.below(4) as i32;
                    log.push(format!("quantity {c} -> {q}"));
                    svc::update_conferral_bounds(&t.db, c, q, None).await.unwrap();
                }
                _ => {
                    // As the reconcile does: no new provision while one holds or another plan
                    // displaced it.
                    let live: bool = t.one(sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM core.conferrals WHERE subscription_item_id = $1 AND state = 'holding')
                             OR EXISTS (SELECT 1 FROM core.subscription_displacements WHERE subscription_item_id = $1 AND delivered_at IS NULL)",
                    )
                    .bind(item)).await;
                    if !live {
                        log.push("provision".into());
                        provision(&t.db, org.pool_id, products[1], item, 1).await;
                    }
                }
            }
            let mut c = t.admin.acquire().await.unwrap();
            assert_materialized_equals_fresh(&mut c, org.pool_id, &format!("seed {seed} step {step}: {log:?}")).await;
            // The default ladder is never left vacant.
            let default_held: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM core.positions ps JOIN core.org_types ot ON ot.default_plan_ladder_id = ps.plan_ladder_id
                 JOIN core.organizations o ON o.org_type_id = ot.org_type_id WHERE ps.pool_id = $1 AND o.organization_id = $2)",
            )
            .bind(org.pool_id)
            .bind(org.organization_id)
            .fetch_one(&mut *c)
            .await
            .unwrap();
            assert!(default_held, "seed {seed} step {step}: the default ladder is vacant after {log:?}");
        }
    }
    let mut c = t.admin.acquire().await.unwrap();
    assert!(store::pools_out_of_date(&mut c).await.unwrap().is_empty());
}

// Lock order -------------------------------------------------------------------------------------

#[tokio::test]
async fn every_conferral_function_takes_the_pool_row() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Locked", "Community").await;
    let basic = product(&t.db, "Basic").await;
    // An add-on grant (no ladder) and a provision, both holding, so every function has work.
    let extra = product(&t.db, "Extra sites").await;
    let g = svc::confer_grant(&t.db, &operator_grant(org.organization_id, extra, 1)).await.unwrap();
    let c = conferral_of_grant(&t, g).await;
    let (sub, item) = subscription_with_item(&t, org.organization_id, basic, 1).await;
    provision(&t.db, org.pool_id, basic, item, 1).await;
    let calls: Vec<(&str, String)> = vec![
        ("core.confer", format!("SELECT core.confer({}, {basic}, NULL, {item}, 1)", org.pool_id)),
        ("core.end_conferral", format!("SELECT core.end_conferral({c}, 'test')")),
        ("core.align_conferral_shape", format!("SELECT core.align_conferral_shape({c})")),
        ("core.update_conferral_bounds", format!("SELECT core.update_conferral_bounds({c}, 2, NULL)")),
        ("core.sync_source_status", format!("SELECT core.sync_source_status({sub}, 'suspended')")),
        ("core.materialize_pool", format!("SELECT core.materialize_pool({})", org.pool_id)),
        ("core.reapply_defaults_if_vacant", format!("SELECT core.reapply_defaults_if_vacant({})", org.pool_id)),
    ];
    for (name, sql) in calls {
        let (mut a, a_pid) = common::acts::hold_pool(&t, org.pool_id).await;
        let db = t.db.clone();
        // B: the function in a materializing transaction, rolled back after.
        let b = tokio::spawn(async move {
            let mut tx = begin(&db, TxKind::Materializing).await.unwrap();
            let r = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(tx.conn()).await.map(|_| ());
            tx.rollback().await.unwrap();
            r
        });
        eprintln!("{name} waits on the pool row");
        let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
        common::locks::assert_holds(&t.admin, waiter, &[Expect::rendezvous_shared()]).await;
        common::locks::assert_waits(&t.admin, waiter, a_pid, &Expect::row("core.resource_pools", org.pool_id.0)).await;
        sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
        b.await.unwrap().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[tokio::test]
async fn a_conferral_waiting_on_the_pool_row_sees_what_the_holder_committed() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Queued", "Community").await;
    // A: a grant of Basic, uncommitted, holding the pool row.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let basic = svc::confer_grant_tx(&mut a, &operator_grant(org.organization_id, product(&t.db, "Basic").await, 1))
        .await
        .unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    // B: a grant of Pro on the same organization waits for A.
    let db = t.db.clone();
    let pro_product = product(&t.db, "Pro").await;
    let b =
        tokio::spawn(async move { svc::confer_grant(&db, &operator_grant(org.organization_id, pro_product, 1)).await });
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    a.commit().await.unwrap();
    b.await.unwrap().unwrap();
    // B displaced what A committed.
    assert_eq!(grant_status(&t, basic).await, "replaced");
    assert_eq!(sites(&t.db, org.pool_id).await, Some(10));
}

#[tokio::test]
async fn a_materializing_function_without_the_rendezvous_is_refused() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let org = new_org(&t, "Bare", "Community").await;
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let e = sqlx::query("SELECT core.materialize_pool($1)").bind(org.pool_id).execute(tx.conn()).await.unwrap_err();
    assert!(e.to_string().contains("materialization_rendezvous_missing"), "{e}");
    drop(tx);
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    let e =
        sqlx::query("SELECT core.confer($1, 1, NULL, NULL, 1)").bind(org.pool_id).execute(tx.conn()).await.unwrap_err();
    assert!(e.to_string().contains("materialization_rendezvous_missing"), "{e}");
}

#[tokio::test]
async fn the_tier_trigger_and_a_set_clear_cannot_both_commit() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let extra = product(&t.db, "Extra sites").await;
    let wiki: LadderId =
        t.one(sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders WHERE name = 'Wiki hosting'")).await;

    // A inserts a tier of the product (its trigger holds the product row FOR SHARE); B, clearing
    // the product's set, waits, then is refused because the product is now a tier.
    let mut a = begin(&t.db, TxKind::Plain).await.unwrap();
    catalog::ensure_tier(a.conn(), wiki, 4, extra).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let b = tokio::spawn(async move {
        member_console::services::catalog::update_product(
            &db,
            extra,
            &member_console::services::catalog::ProductName::parse("Extra sites").unwrap(),
            None,
            true,
        )
        .await
    });
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    a.commit().await.unwrap();
    let refused = b.await.unwrap().unwrap_err();
    assert!(
        refused.to_string().contains("entitlement set") || format!("{refused:?}").contains("entitlement_set_id"),
        "{refused:?}"
    );

    // The other way: A clears a product's set (uncommitted); B's tier insert waits in its trigger,
    // then is refused because the product has no set.
    let addon: ProductId = t.one(sqlx::query_scalar("INSERT INTO core.products (name, entitlement_set_id, published) SELECT 'Other', entitlement_set_id, true FROM core.entitlement_sets WHERE name = 'Free' RETURNING product_id")).await;
    let (mut a, a_pid) = common::hold_open(
        &t,
        &format!("UPDATE core.products SET entitlement_set_id = NULL WHERE product_id = {addon}"),
    )
    .await;
    let db = t.db.clone();
    let b = tokio::spawn(async move {
        let mut tx = begin(&db, TxKind::Plain).await.unwrap();
        catalog::ensure_tier(tx.conn(), wiki, 5, addon).await
    });
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    let e = b.await.unwrap().unwrap_err();
    assert_eq!(member_console::db::sqlstate(&e).as_deref(), Some("MC003"), "{e}");
}

#[tokio::test]
async fn an_organization_insert_does_not_wait_on_its_types_no_key_update_lock() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let ty = org_type(&t, "Community").await;
    let (mut a, _) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.org_types WHERE org_type_id = {ty} FOR NO KEY UPDATE"))
            .await;
    let created = tokio::time::timeout(
        Duration::from_secs(3),
        orgs::create_organization(&t.db, &OrgName::parse("Unblocked").unwrap(), Some(ty)),
    )
    .await
    .expect("FOR KEY SHARE does not conflict with FOR NO KEY UPDATE")
    .unwrap();
    assert!(created.floor_grant_id.is_some());
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
    drop(a);
    // But a FOR UPDATE on the type (a key change) would hold it back.
    let (mut a, a_pid) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.org_types WHERE org_type_id = {ty} FOR UPDATE")).await;
    let db = t.db.clone();
    let b = tokio::spawn(
        async move { orgs::create_organization(&db, &OrgName::parse("Blocked").unwrap(), Some(ty)).await },
    );
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    sqlx::query("ROLLBACK").execute(&mut *a).await.unwrap();
    b.await.unwrap().unwrap();
}

#[tokio::test]
async fn register_providers_and_an_entitlement_insert_of_the_same_key_wait_in_one_direction() {
    let t = TestDb::new().await;
    catalog_fixture(&t).await;
    let ty = org_type(&t, "Community").await;
    // A: an open materialization whose entitlement insert holds fedwiki.active_sites FOR KEY SHARE.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    orgs::create_organization_tx(&mut a, &OrgName::parse("Inserting").unwrap(), Some(ty)).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    // A stamp that changes the key's provider waits for A.
    sqlx::query("UPDATE core.resource_keys SET provider = 'someone-else' WHERE resource_key = 'fedwiki.active_sites'")
        .execute(&t.admin)
        .await
        .unwrap_or_default();
    let db = t.db.clone();
    let b = tokio::spawn(async move { svc::register_providers(&db).await });
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    a.commit().await.unwrap();
    b.await.unwrap().unwrap();
    let provider: String = t
        .one(sqlx::query_scalar("SELECT provider FROM core.resource_keys WHERE resource_key = 'fedwiki.active_sites'"))
        .await;
    assert_eq!(provider, "fedwiki");
}
