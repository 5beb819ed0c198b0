//! The tier topology: AddTier, DeleteTier, ReorderPlanLadders — outcomes, refusals and locks.

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    TestDb,
    acts::{grant, ladder_id, new_product, org_of_type, product_id, scalar, spawn_grant, tiers, type_id},
    pages::demo_db,
};
use member_console::{
    db::{TxKind, begin},
    ids::{LadderId, PoolId, ProductId},
    services::{
        organizations as orgs,
        refusal::ServiceError,
        topology::{self as topo, AddTier},
    },
};

async fn setup() -> (TestDb, ProductId, LadderId) {
    let t = demo_db().await;
    // "Team": a published product with a set that is no tier yet.
    let team = new_product(&t, "Team", 5).await;
    let wiki = ladder_id(&t, "Wiki hosting").await;
    (t, team, wiki)
}

async fn org_named(t: &TestDb, name: &str, ty: &str) -> orgs::CreatedOrganization {
    org_of_type(t, name, type_id(t, ty).await).await
}

/// The pool's position on a ladder: (rank, product).
async fn position_on(t: &TestDb, pool: PoolId, ladder: LadderId) -> (i32, String) {
    t.one(
        sqlx::query_as(
            "SELECT p.rank, pr.name FROM core.positions p JOIN core.conferrals c USING (conferral_id)
         JOIN core.products pr ON pr.product_id = c.product_id
         WHERE p.pool_id = $1 AND p.plan_ladder_id = $2",
        )
        .bind(pool)
        .bind(ladder),
    )
    .await
}

fn add(ladder: LadderId, product: ProductId, rank: Option<i32>) -> AddTier {
    AddTier { ladder_id: ladder, product_id: product, rank, reason: "test".into(), actor: None }
}

#[tokio::test]
async fn a_tier_add_places_its_holders_on_the_ladder_and_renumbers_above_it() {
    let (t, team, wiki) = setup().await;
    // A Business organization (its floor is on Support) and an Initech-like Pro holder.
    let business = org_named(&t, "Holder", "Business").await;
    grant(&t, business.organization_id, team).await;
    let pro_org = org_named(&t, "Pro holder", "Business").await;
    grant(&t, pro_org.organization_id, product_id(&t, "Pro").await).await;
    let preview = topo::preview_add_tier(&t.db, &add(wiki, team, Some(2)), 100).await.unwrap();
    assert_eq!((preview.holders, preview.collisions, preview.refusal.is_none()), (1, 0, true));
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, 0, "a preview writes nothing");
    let (act, reach) = topo::add_tier(&t.db, &add(wiki, team, Some(2)), 100).await.unwrap();
    assert_eq!(reach.holders, 1);
    assert_eq!(
        tiers(&t, wiki).await,
        vec![(0, "Free".into()), (1, "Basic".into()), (2, "Team".into()), (3, "Pro".into())]
    );
    let (rank, product) = position_on(&t, business.pool_id, wiki).await;
    assert_eq!((rank, product.as_str()), (2, "Team"));
    // Pro's holder now sits at rank 3.
    assert_eq!(position_on(&t, pro_org.pool_id, wiki).await.0, 3);
    let kind: String =
        t.one(sqlx::query_scalar("SELECT kind FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await;
    assert_eq!(kind, "tier_add");
    let mut c = t.admin.acquire().await.unwrap();
    assert!(member_console::store::entitlements::pools_out_of_date(&mut c).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_tier_add_is_refused_on_collisions_the_cap_the_floor_and_bad_input() {
    let (t, team, wiki) = setup().await;
    let community = org_named(&t, "Floored", "Community").await;
    grant(&t, community.organization_id, team).await;
    // Its floor holds Wiki hosting: a collision, named.
    let e = topo::add_tier(&t.db, &add(wiki, team, None), 100).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("already hold a plan on this ladder")), "{e:?}");
    let p = topo::preview_add_tier(&t.db, &add(wiki, team, None), 100).await.unwrap();
    assert_eq!(p.colliding, vec!["Floored".to_string()]);
    // The cap.
    let support = ladder_id(&t, "Support").await;
    let e = topo::add_tier(&t.db, &add(support, team, None), 0).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("more than the 0")), "{e:?}");
    // Rank 0, a rank past the top, an unknown or unpublished product, a tier twice.
    assert!(matches!(topo::add_tier(&t.db, &add(support, team, Some(0)), 100).await, Err(ServiceError::Invalid(_))));
    assert!(matches!(topo::add_tier(&t.db, &add(support, team, Some(9)), 100).await, Err(ServiceError::Invalid(_))));
    assert!(matches!(
        topo::add_tier(&t.db, &add(support, ProductId(999_999), None), 100).await,
        Err(ServiceError::Invalid(_))
    ));
    let basic = product_id(&t, "Basic").await;
    assert!(matches!(topo::add_tier(&t.db, &add(wiki, basic, None), 100).await, Err(ServiceError::Invalid(_))));
    assert!(matches!(
        topo::add_tier(&t.db, &add(LadderId(999_999), team, None), 100).await,
        Err(ServiceError::NotFound(_))
    ));
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, 0, "nothing written");
    assert_eq!(tiers(&t, support).await.len(), 2);
}

#[tokio::test]
async fn a_tier_add_waits_for_a_materializing_transaction_and_a_conferral_waits_for_the_add() {
    let (t, team, _) = setup().await;
    let support = ladder_id(&t, "Wiki hosting").await;
    let _ = support;
    let business = org_named(&t, "Waiter", "Business").await;
    let wiki = ladder_id(&t, "Wiki hosting").await;
    // A: an open materializing transaction; the add waits for it.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let add_task = tokio::spawn(async move { topo::add_tier(&db, &add(wiki, team, None), 100).await });
    common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    a.commit().await.unwrap();
    add_task.await.unwrap().unwrap();

    // The other way: pause a second add inside its exclusive hold (the tier trigger waits on the
    // product row the admin holds); a conferral waits on the add, then sees the new shape.
    let team2: ProductId = t.one(sqlx::query_scalar("INSERT INTO core.products (name, entitlement_set_id, published) SELECT 'Team 2', entitlement_set_id, true FROM core.products WHERE name = 'Team' RETURNING product_id")).await;
    let supp = ladder_id(&t, "Support").await;
    let (mut hold, hold_pid) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.products WHERE product_id = {team2} FOR UPDATE")).await;
    let db = t.db.clone();
    let add2 = tokio::spawn(async move { topo::add_tier(&db, &add(supp, team2, None), 100).await });
    let adder = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, adder, &[common::locks::Expect::rendezvous_exclusive()]).await;
    // The tier trigger's FOR SHARE on the product's row is what it waits for.
    common::locks::assert_waits(&t.admin, adder, hold_pid, &common::locks::Expect::row("core.products", team2.0)).await;
    let conferral = spawn_grant(&t, business.organization_id, team2);
    common::wait_for_waiter(&t.admin, &t.name, adder).await;
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    add2.await.unwrap().unwrap();
    conferral.await.unwrap().unwrap();
    // The conferral came after the add: Team 2 took the Support ladder (displacing the floor).
    assert_eq!(position_on(&t, business.pool_id, supp).await.1, "Team 2");
}

#[tokio::test]
async fn a_tier_nobody_holds_is_deleted_and_the_ranks_close_up() {
    let (t, team, wiki) = setup().await;
    let business = org_named(&t, "Deleter", "Business").await;
    grant(&t, business.organization_id, product_id(&t, "Pro").await).await;
    // Basic (rank 1) has no holder: delete it; Pro's holder moves to rank 1.
    let act = topo::delete_tier(&t.db, wiki, 1, None, "unused").await.unwrap();
    assert_eq!(tiers(&t, wiki).await, vec![(0, "Free".into()), (1, "Pro".into())]);
    assert_eq!(position_on(&t, business.pool_id, wiki).await.0, 1);
    assert_eq!(
        scalar(&t, &format!("SELECT count(*) FROM core.plan_acts WHERE plan_act_id = {act} AND kind = 'tier_delete'"))
            .await,
        1
    );
    // Held tiers are refused; so is the last tier of a default ladder; nothing written.
    let acts = scalar(&t, "SELECT count(*) FROM core.plan_acts").await;
    let e = topo::delete_tier(&t.db, wiki, 1, None, "x").await.unwrap_err(); // Pro: ours and the demo's Initech
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("2 organizations hold")), "{e:?}");
    let e = topo::delete_tier(&t.db, wiki, 0, None, "x").await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("hold this tier")), "the floors hold rank 0: {e:?}");
    assert!(matches!(topo::delete_tier(&t.db, wiki, 7, None, "x").await, Err(ServiceError::NotFound(_))));
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, acts);
    let _ = team;
    // A ladder with one tier that a type defaults to keeps it.
    let lone: LadderId = t
        .one(sqlx::query_scalar(
            "INSERT INTO core.plan_ladders (name, sort_order) VALUES ('Lone', 5) RETURNING plan_ladder_id",
        ))
        .await;
    t.run(
        sqlx::query("INSERT INTO core.plan_ladder_tiers (plan_ladder_id, rank, product_id) VALUES ($1, 0, $2)")
            .bind(lone)
            .bind(team),
    )
    .await;
    t.run(sqlx::query("INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ('Solo', $1)").bind(lone))
        .await;
    let e = topo::delete_tier(&t.db, lone, 0, None, "x").await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("only tier")), "{e:?}");
}

#[tokio::test]
async fn ladders_are_reordered_and_a_second_reorder_waits_for_the_first() {
    let (t, _, wiki) = setup().await;
    let support = ladder_id(&t, "Support").await;
    let order = move |w: i32, s: i32| BTreeMap::from([(wiki, w), (support, s)]);
    assert_eq!(topo::reorder_plan_ladders(&t.db, &order(2, 1)).await.unwrap(), 2);
    let names: Vec<String> = t.all(sqlx::query_scalar("SELECT name FROM core.plan_ladders ORDER BY sort_order")).await;
    assert_eq!(names, vec!["Support", "Wiki hosting"]);
    for bad in [order(1, 1), BTreeMap::from([(wiki, 1)]), order(1, 3)] {
        assert!(matches!(topo::reorder_plan_ladders(&t.db, &bad).await, Err(ServiceError::Invalid(_))), "{bad:?}");
    }
    // A holds every ladder row (as a reorder does); B waits, then writes against A's commit.
    let mut a = begin(&t.db, TxKind::Plain).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    member_console::store::topology::lock_plan_ladder_order(a.conn()).await.unwrap();
    member_console::store::topology::set_sort_order(a.conn(), wiki, 0).await.unwrap();
    member_console::store::topology::set_sort_order(a.conn(), support, 1).await.unwrap();
    let db = t.db.clone();
    let b = tokio::spawn(async move { topo::reorder_plan_ladders(&db, &order(1, 2)).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    let ladders: Vec<i64> = t.all(sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders ORDER BY 1")).await;
    let every_ladder: Vec<common::locks::Expect> = ladders
        .iter()
        .map(|l| common::locks::Expect::row_in("core.plan_ladders", l, common::locks::RowMode::NoKeyUpdate))
        .collect();
    common::locks::assert_holds(&t.admin, a_pid, &every_ladder).await;
    // The second reorder waits on the first ladder row, the first it takes.
    common::locks::assert_waits(&t.admin, waiter, a_pid, &every_ladder[0]).await;
    a.commit().await.unwrap();
    assert_eq!(b.await.unwrap().unwrap(), 0, "B saw A's order, which is already the one it asked for");
}

#[tokio::test]
async fn a_tier_add_while_another_change_holds_the_rendezvous_is_refused() {
    let (t, team, _) = setup().await;
    let support = ladder_id(&t, "Support").await;
    let _held = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let mut short = t.db.clone();
    short.lock_timeout = Duration::from_millis(200);
    assert!(matches!(
        topo::add_tier(&short, &add(support, team, None), 100).await,
        Err(ServiceError::ChangeInProgress)
    ));
    assert!(matches!(topo::delete_tier(&short, support, 1, None, "x").await, Err(ServiceError::ChangeInProgress)));
}

/// The two triggers that keep a tier's product on an entitlement set raise under a constraint
/// name, which the tier add and the product edit map to the field concerned (not by SQLSTATE).
#[tokio::test]
async fn the_tier_triggers_refuse_under_their_constraint_names() {
    let (t, _, wiki) = setup().await;
    let loose: i64 = t
        .one(sqlx::query_scalar(
            "INSERT INTO core.products (name, published) VALUES ('Loose', true) RETURNING product_id",
        ))
        .await;
    let constraint = |e: sqlx::Error| e.as_database_error().and_then(|d| d.constraint().map(str::to_string));
    let e = sqlx::query("INSERT INTO core.plan_ladder_tiers (plan_ladder_id, rank, product_id) VALUES ($1, 99, $2)")
        .bind(wiki)
        .bind(loose)
        .execute(&t.admin)
        .await
        .unwrap_err();
    assert_eq!(constraint(e).as_deref(), Some("plan_ladder_tiers_product_has_set"));
    let basic = scalar(&t, "SELECT product_id FROM core.products WHERE name = 'Basic'").await;
    let e = sqlx::query("UPDATE core.products SET entitlement_set_id = NULL WHERE product_id = $1")
        .bind(basic)
        .execute(&t.admin)
        .await
        .unwrap_err();
    assert_eq!(constraint(e).as_deref(), Some("products_keep_set_while_tier"));
}
