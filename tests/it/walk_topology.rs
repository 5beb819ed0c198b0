//! Row-level lock walks (issue 36) of the topology's and the plan acts' paths, the spec's 19 to 29:
//! each runs the real service function under `LockWalk`, pausing after each lock it takes, and
//! shows it holds exactly the locks the spec's order gives so far, each by identity, and that a
//! probe of the last one waits on it; then asserts the path's outcome.

use crate::common;

use std::{collections::BTreeMap, future::Future};

use common::{
    TestDb,
    acts::{
        act_state, counts, floor_grant_on, grant, grant_status, ladder_id, list_batch, new_ladder, new_product,
        new_type, obligation, org_of_type, tiers, type_default, type_id,
    },
    locks::{Expect, LockWalk, RowMode, assert_waits},
    pages::demo_db,
};
use member_console::{
    db::{Db, locks::PathLocks},
    ids::{LadderId, OrgTypeId, PlanActId, PoolId, ProductId},
    services::{
        plan_acts::{self as pa, Disposition, ReorderTiers},
        refusal::ServiceError,
        topology::{self as topo, AddTier, RemoveTier},
    },
};

// ---------- Harness ----------

/// A walk of a path some of whose statements lock several rows at once: `groups` lists the locks
/// statement by statement, in order. A statement that takes several rows (ORDER BY ... FOR UPDATE,
/// or PL/pgSQL's FOR loop over such a query, which fetches its rows ten at a time before the loop
/// body notes the first) holds them all at its first pause, so at each pause of group g the path
/// holds exactly the locks of groups 0..=g, and a probe of the pause's own lock waits on the path
/// for it. Then, with `then` (a row an administrator holds FOR SHARE from the start, a write's
/// row lock the trace does not note), the path, let go past its last pause, comes to wait on the
/// administrator for that row, still holding every expected lock. `compare` names tables whose
/// rows the walk compares beyond those the expectations name (to show the path holds none there).
/// Returns the path's output.
pub async fn walk_statements<T, F, Fut>(
    t: &TestDb,
    decl: &'static PathLocks,
    groups: &[Vec<Expect>],
    then: Option<(&str, i64)>,
    compare: &[&str],
    path: F,
) -> T
where
    T: Send + 'static,
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let hold = match then {
        Some((table, id)) => {
            let pk = match table {
                "core.grants" => "grant_id",
                other => panic!("no key column known for {other}"),
            };
            Some(common::hold_open(t, &format!("SELECT 1 FROM {table} WHERE {pk} = {id} FOR SHARE")).await)
        }
        None => None,
    };
    let all: Vec<Expect> = groups.iter().flatten().cloned().collect();
    let mut w = LockWalk::start(t, decl, all.len(), path).await;
    w.compare_tables(compare);
    let mut k = 0;
    for (g, group) in groups.iter().enumerate() {
        let held: Vec<Expect> = groups[..=g].iter().flatten().cloned().collect();
        for lock in group {
            k += 1;
            assert!(w.pid.is_some(), "the path finished before its lock {k} ({lock:?})");
            w.assert_holds_exactly(&held).await;
            w.assert_probe_waits(t, lock).await;
            if k == all.len() && hold.is_some() {
                break;
            }
            let paused = w.step().await;
            assert_eq!(paused, k < all.len(), "the path paused after {k} locks; expected {}", all.len());
        }
    }
    if let (Some((mut conn, hold_pid)), Some((table, id))) = (hold, then) {
        let pid = w.paused_pid();
        w.release().await;
        assert_waits(&t.admin, pid, hold_pid, &Expect::row(table, id)).await;
        common::locks::assert_holds(&t.admin, pid, &all).await;
        sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    }
    w.finish().await
}

/// `walk_statements` of one statement that locks every one of `rows`.
pub async fn walk_one_statement<T, F, Fut>(t: &TestDb, decl: &'static PathLocks, rows: &[Expect], path: F) -> T
where
    T: Send + 'static,
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    walk_statements(t, decl, &[rows.to_vec()], None, &[], path).await
}

/// The tables a T0 holds no row of.
const NO_POOL_NOR_OBLIGATION: &[&str] = &["core.resource_pools", "core.plan_act_obligations"];

fn pools_ascending(mut p: Vec<PoolId>) -> Vec<PoolId> {
    p.sort();
    p
}

fn pool_rows(pools: &[PoolId], mode: RowMode) -> Vec<Expect> {
    pools.iter().map(|p| Expect::row_in("core.resource_pools", p.0, mode)).collect()
}

fn obligation_row(act: PlanActId, pool: PoolId) -> Expect {
    Expect::row("core.plan_act_obligations", format!("{},{}", act.0, pool.0))
}

/// A ladder of new products (rank 0 first), named `name`, and its products.
async fn ladder_of(t: &TestDb, name: &str, n: usize) -> (LadderId, Vec<ProductId>) {
    let mut products = vec![];
    for i in 0..n {
        products.push(new_product(t, &format!("{name} {i}"), 1 + i as i64).await);
    }
    (new_ladder(t, name, &products).await, products)
}

/// A new organization type defaulting to the demo's "Wiki hosting", with `n` organizations on
/// its Free floor; the type and their pools (ascending).
async fn walked_type(t: &TestDb, name: &str, n: usize) -> (OrgTypeId, Vec<PoolId>) {
    let ty = new_type(t, name, ladder_id(t, "Wiki hosting").await).await;
    let mut pools = vec![];
    for i in 0..n {
        pools.push(org_of_type(t, &format!("{name} {i}"), ty).await.pool_id);
    }
    (ty, pools_ascending(pools))
}

async fn change(db: &Db, ty: OrgTypeId, to: LadderId, d: Option<Disposition>) -> Result<PlanActId, ServiceError> {
    pa::change_org_type_default(db, ty, to, d, None, "walked", None).await
}

/// The floor grant of each of `pools` on "Wiki hosting".
async fn wiki_floor(t: &TestDb, pool: PoolId) -> i64 {
    floor_grant_on(t, pool, ladder_id(t, "Wiki hosting").await).await.0.0
}

/// Make the entitlements of `pools` unwritable, so a move of them fails (undone by `mend`).
async fn break_pools(t: &TestDb, pools: &[PoolId]) {
    let ids: Vec<String> = pools.iter().map(|p| p.0.to_string()).collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION public.walk_refuse_pool() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.pool_id IN ({}) THEN RAISE EXCEPTION 'pool % is broken', NEW.pool_id; END IF; RETURN NEW; END $$;
         CREATE TRIGGER walk_refuse_pool BEFORE INSERT OR UPDATE ON core.pool_entitlements
           FOR EACH ROW EXECUTE FUNCTION public.walk_refuse_pool();",
        ids.join(", ")
    )))
    .execute(&t.admin)
    .await
    .unwrap();
}

async fn mend(t: &TestDb) {
    sqlx::raw_sql("DROP TRIGGER walk_refuse_pool ON core.pool_entitlements; DROP FUNCTION public.walk_refuse_pool()")
        .execute(&t.admin)
        .await
        .unwrap();
}

// ---------- 19. Tier add ----------

#[tokio::test]
async fn a_tier_add_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_each_holders_pool_row_ascending_then_the_product_row_for_share()
 {
    let t = demo_db().await;
    let team = new_product(&t, "Team", 5).await;
    let wiki = ladder_id(&t, "Wiki hosting").await;
    let business = type_id(&t, "Business").await;
    // Two holders of the product, the later organization granted first.
    let a = org_of_type(&t, "Holder A", business).await;
    let b = org_of_type(&t, "Holder B", business).await;
    grant(&t, b.organization_id, team).await;
    grant(&t, a.organization_id, team).await;
    let pools = pools_ascending(vec![a.pool_id, b.pool_id]);
    // LockPools takes the pool rows in one statement, ascending.
    let expected = [
        vec![Expect::rendezvous_exclusive()],
        pool_rows(&pools, RowMode::Update),
        vec![Expect::row_in("core.products", team.0, RowMode::Share)],
    ];
    let add = AddTier { ladder_id: wiki, product_id: team, rank: Some(2), reason: "walked".into(), actor: None };
    let out = walk_statements(&t, &topo::ADD_TIER_LOCKS, &expected, None, &[], |db| async move {
        topo::add_tier(&db, &add, 100).await
    })
    .await;
    let (_, reach) = out.unwrap();
    assert_eq!(reach.holders, 2);
    let names: Vec<String> = tiers(&t, wiki).await.into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["Free", "Basic", "Team", "Pro"]);
    for p in &pools {
        let rank: i32 = t
            .one(
                sqlx::query_scalar("SELECT rank FROM core.positions WHERE pool_id = $1 AND plan_ladder_id = $2")
                    .bind(p)
                    .bind(wiki),
            )
            .await;
        assert_eq!(rank, 2, "pool {p} holds the new tier");
    }
}

// ---------- 20. Tier removal ----------

#[tokio::test]
async fn a_tier_removal_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_each_holders_pool_row_ascending_then_ends_their_grants()
 {
    let t = demo_db().await;
    let (ladder, products) = ladder_of(&t, "Walked ladder", 2).await;
    let business = type_id(&t, "Business").await;
    let a = org_of_type(&t, "Incumbent A", business).await;
    let b = org_of_type(&t, "Incumbent B", business).await;
    let gb = grant(&t, b.organization_id, products[1]).await;
    let ga = grant(&t, a.organization_id, products[1]).await;
    let pools = pools_ascending(vec![a.pool_id, b.pool_id]);
    let expected = [vec![Expect::rendezvous_exclusive()], pool_rows(&pools, RowMode::Update)];
    // The first incumbent's grant, ended under its pool row (core.end_conferral).
    let first = if pools[0] == a.pool_id { ga } else { gb };
    let r = RemoveTier {
        ladder_id: ladder,
        rank: 1,
        disposition: Some(Disposition::Migrate),
        reason: "walked".into(),
        actor: None,
    };
    let out = walk_statements(
        &t,
        &topo::REMOVE_TIER_LOCKS,
        &expected,
        Some(("core.grants", first.0)),
        &[],
        |db| async move { topo::remove_tier(&db, &r, 100).await },
    )
    .await;
    let (_, reach) = out.unwrap();
    assert_eq!(reach.holders, 2);
    assert_eq!(tiers(&t, ladder).await.len(), 1);
    assert_eq!((grant_status(&t, ga).await, grant_status(&t, gb).await), ("ended".into(), "ended".into()));
}

// ---------- 21. Tier delete ----------

#[tokio::test]
async fn a_tier_delete_walked_lock_by_lock_takes_the_exclusive_rendezvous_and_no_other_lock() {
    let t = demo_db().await;
    let (ladder, _) = ladder_of(&t, "Unheld ladder", 2).await;
    let out = LockWalk::run(&t, &topo::DELETE_TIER_LOCKS, &[Expect::rendezvous_exclusive()], |db| async move {
        topo::delete_tier(&db, ladder, 1, None, "walked").await
    })
    .await;
    assert!(out.is_ok(), "{out:?}");
    let names: Vec<String> = tiers(&t, ladder).await.into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["Unheld ladder 0"]);
}

// ---------- 22. Default change T0 ----------

#[tokio::test]
async fn a_default_changes_t0_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_the_org_type_row_and_no_pool_row()
{
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Defaulted", 2).await;
    let (to, _) = ladder_of(&t, "New default", 1).await;
    let expected =
        [vec![Expect::rendezvous_exclusive()], vec![Expect::row_in("core.org_types", ty.0, RowMode::NoKeyUpdate)]];
    // With no disposition and organizations on the old floor: the gate refuses, and the walk is
    // the same.
    let refused =
        walk_statements(&t, &pa::CHANGE_DEFAULT_T0_LOCKS, &expected, None, NO_POOL_NOR_OBLIGATION, |db| async move {
            change(&db, ty, to, None).await
        })
        .await;
    assert!(matches!(refused, Err(ServiceError::Invalid(_))), "{refused:?}");
    assert_eq!(type_default(&t, ty).await.0, Some(ladder_id(&t, "Wiki hosting").await), "refused: nothing changed");
    let act =
        walk_statements(&t, &pa::CHANGE_DEFAULT_T0_LOCKS, &expected, None, NO_POOL_NOR_OBLIGATION, |db| async move {
            change(&db, ty, to, Some(Disposition::Migrate)).await
        })
        .await
        .unwrap();
    assert_eq!(type_default(&t, ty).await, (Some(to), Some(act)));
    assert_eq!(act_state(&t, act).await, "running", "T0 leaves the moves to the drain");
    assert_eq!(counts(&t, act).await.0, 0, "T0 writes no obligation");
    assert_eq!(pools.len(), 2);
}

// ---------- 23. Reorder T0 ----------

#[tokio::test]
async fn a_reorders_t0_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_the_reached_types_row_only_when_rank_0_changes()
 {
    let t = demo_db().await;
    let (ladder, p) = ladder_of(&t, "Reordered", 3).await;
    let ty = new_type(&t, "Reordered type", ladder).await;
    org_of_type(&t, "Reordered org", ty).await;
    let reorder = |order: Vec<ProductId>| ReorderTiers {
        ladder_id: ladder,
        order,
        disposition: Some(Disposition::Migrate),
        reason: "walked".into(),
        actor: None,
    };
    // Rank 0 kept: the renumbering alone, under the exclusive rendezvous.
    let keep = reorder(vec![p[0], p[2], p[1]]);
    let only = [vec![Expect::rendezvous_exclusive()]];
    let act = walk_statements(&t, &pa::REORDER_TIERS_T0_LOCKS, &only, None, NO_POOL_NOR_OBLIGATION, |db| async move {
        pa::reorder_tiers(&db, &keep, None).await
    })
    .await
    .unwrap();
    assert_eq!(type_default(&t, ty).await, (Some(ladder), None), "a reorder that keeps rank 0 reaches no type");
    assert_eq!(counts(&t, act).await, (0, 0, 0, 0, 0, 0));
    // Rank 0 changed: the type defaulting to the ladder is reached, its row taken by the UPDATE
    // that hands its default transition to the act.
    let change0 = reorder(vec![p[1], p[0], p[2]]);
    let expected =
        [vec![Expect::rendezvous_exclusive()], vec![Expect::row_in("core.org_types", ty.0, RowMode::NoKeyUpdate)]];
    let act =
        walk_statements(&t, &pa::REORDER_TIERS_T0_LOCKS, &expected, None, NO_POOL_NOR_OBLIGATION, |db| async move {
            pa::reorder_tiers(&db, &change0, None).await
        })
        .await
        .unwrap();
    assert_eq!(type_default(&t, ty).await, (Some(ladder), Some(act)));
    let names: Vec<String> = tiers(&t, ladder).await.into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["Reordered 1", "Reordered 0", "Reordered 2"]);
}

// ---------- 24. ListPlanActBatch ----------

#[tokio::test]
async fn a_listing_batch_walked_lock_by_lock_takes_the_shared_rendezvous_then_its_pool_rows_for_key_share_then_the_earlier_acts_open_obligations_ascending()
 {
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Listed", 2).await;
    let (first_to, _) = ladder_of(&t, "First default", 1).await;
    let first = change(&t.db, ty, first_to, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, first, ty, 500).await, 2, "the first act's obligations, still pending");
    let second = change(&t.db, ty, ladder_id(&t, "Wiki hosting").await, Some(Disposition::Migrate)).await.unwrap();
    let expected = [
        vec![Expect::rendezvous_shared()],
        pool_rows(&pools, RowMode::KeyShare),
        pools.iter().map(|p| obligation_row(first, *p)).collect(),
    ];
    let drained = walk_statements(&t, &pa::LIST_BATCH_LOCKS, &expected, None, &[], |db| async move {
        pa::drain_plan_act(&db, second, None).await
    })
    .await
    .unwrap();
    assert_eq!((drained.listed, drained.finished), (2, true));
    assert_eq!(counts(&t, first).await, (0, 0, 0, 0, 0, 2), "the first act's obligations were superseded");
    assert_eq!(counts(&t, second).await.0, 0);
}

// ---------- 25. EnactObligation ----------

#[tokio::test]
async fn a_move_walked_lock_by_lock_takes_the_shared_rendezvous_then_the_pool_row_then_the_obligation_row_then_ends_the_floor_grant()
 {
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Moved", 1).await;
    let pool = pools[0];
    let (to, _) = ladder_of(&t, "Moved to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, act, ty, 500).await, 1);
    let floor = wiki_floor(&t, pool).await;
    let expected = [
        vec![Expect::rendezvous_shared()],
        vec![Expect::row("core.resource_pools", pool.0)],
        vec![obligation_row(act, pool)],
    ];
    let moved = walk_statements(
        &t,
        &pa::ENACT_OBLIGATION_LOCKS,
        &expected,
        Some(("core.grants", floor)),
        &[],
        |db| async move { pa::enact_obligation(&db, act, pool, None).await },
    )
    .await;
    assert!(moved.unwrap(), "the move settled the obligation");
    assert_eq!(obligation(&t, act, pool).await.0, "migrated");
    assert_eq!(grant_status(&t, member_console::ids::GrantId(floor)).await, "ended");
}

#[tokio::test]
async fn a_grandfathering_move_walked_lock_by_lock_takes_the_same_locks_and_ends_the_floor_grant_under_them() {
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Grandfathered", 1).await;
    let pool = pools[0];
    let (to, _) = ladder_of(&t, "Grandfathered to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Grandfather)).await.unwrap();
    assert_eq!(list_batch(&t, act, ty, 500).await, 1);
    let floor = wiki_floor(&t, pool).await;
    let expected = [
        vec![Expect::rendezvous_shared()],
        vec![Expect::row("core.resource_pools", pool.0)],
        vec![obligation_row(act, pool)],
    ];
    let moved = walk_statements(
        &t,
        &pa::ENACT_OBLIGATION_LOCKS,
        &expected,
        Some(("core.grants", floor)),
        &[],
        |db| async move { pa::enact_obligation(&db, act, pool, None).await },
    )
    .await;
    assert!(moved.unwrap());
    assert_eq!(obligation(&t, act, pool).await.0, "grandfathered");
    assert_eq!(grant_status(&t, member_console::ids::GrantId(floor)).await, "ended");
}

#[tokio::test]
async fn a_vacant_move_walked_lock_by_lock_takes_the_shared_rendezvous_then_the_pool_row_then_the_obligation_row() {
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Vacant", 1).await;
    let pool = pools[0];
    // Pro displaces the Free floor: the organization holds no floor of the outgoing default.
    let org: i64 = t
        .one(sqlx::query_scalar("SELECT organization_id FROM core.resource_pools WHERE pool_id = $1").bind(pool))
        .await;
    grant(&t, member_console::ids::OrganizationId(org), common::acts::product_id(&t, "Pro").await).await;
    let (to, _) = ladder_of(&t, "Vacant to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, act, ty, 500).await, 1);
    let expected = [Expect::rendezvous_shared(), Expect::row("core.resource_pools", pool.0), obligation_row(act, pool)];
    let moved = LockWalk::run(&t, &pa::ENACT_OBLIGATION_LOCKS, &expected, |db| async move {
        pa::enact_obligation(&db, act, pool, None).await
    })
    .await;
    assert!(moved.unwrap());
    assert_eq!(obligation(&t, act, pool).await.0, "vacant");
}

// ---------- 26. Recording a failed move ----------

#[tokio::test]
async fn a_failed_moves_record_walked_lock_by_lock_updates_the_one_obligation_row_and_takes_no_rendezvous_nor_pool_row()
{
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Failing", 1).await;
    let pool = pools[0];
    let (to, _) = ladder_of(&t, "Failing to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Migrate)).await.unwrap();
    break_pools(&t, &pools).await;
    let expected =
        [vec![Expect::row_in("core.plan_act_obligations", format!("{},{}", act.0, pool.0), RowMode::NoKeyUpdate)]];
    let drained = walk_statements(
        &t,
        &pa::RECORD_MOVE_FAILURE_LOCKS,
        &expected,
        None,
        &["core.resource_pools"],
        |db| async move { pa::drain_plan_act(&db, act, None).await },
    )
    .await
    .unwrap();
    assert_eq!((drained.moved, drained.failed), (0, 1));
    let (state, attempts, error) = obligation(&t, act, pool).await;
    assert_eq!((state.as_str(), attempts), ("failed", 1));
    assert!(error.unwrap_or_default().contains("is broken"));
    mend(&t).await;
}

// ---------- 27. The act's last probe ----------

#[tokio::test]
async fn the_acts_last_probe_walked_lock_by_lock_takes_the_shared_rendezvous_then_the_act_row() {
    let t = demo_db().await;
    let (ty, _) = walked_type(&t, "Probed", 2).await;
    let (to, _) = ladder_of(&t, "Probed to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Migrate)).await.unwrap();
    let expected = [Expect::rendezvous_shared(), Expect::row("core.plan_acts", act.0)];
    let drained =
        LockWalk::run(
            &t,
            &pa::LAST_PROBE_LOCKS,
            &expected,
            |db| async move { pa::drain_plan_act(&db, act, None).await },
        )
        .await
        .unwrap();
    assert_eq!((drained.moved, drained.finished), (2, true));
    assert_eq!(act_state(&t, act).await, "done");
}

// ---------- 28. RetryPlanAct ----------

#[tokio::test]
async fn a_retry_walked_lock_by_lock_takes_the_shared_rendezvous_then_the_act_row_then_its_failed_obligations_ascending()
 {
    let t = demo_db().await;
    let (ty, pools) = walked_type(&t, "Retried", 3).await;
    let (to, _) = ladder_of(&t, "Retried to", 1).await;
    let act = change(&t.db, ty, to, Some(Disposition::Migrate)).await.unwrap();
    // The first and the last fail; the middle one moves.
    let failed = [pools[0], pools[2]];
    break_pools(&t, &failed).await;
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.moved, d.failed), (1, 2));
    mend(&t).await;
    // The act's row, then the failed obligations in one statement, ascending.
    let expected = [
        vec![Expect::rendezvous_shared()],
        vec![Expect::row("core.plan_acts", act.0)],
        failed.iter().map(|p| obligation_row(act, *p)).collect(),
    ];
    let retry = walk_statements(&t, &pa::RETRY_PLAN_ACT_LOCKS, &expected, None, &[], |db| async move {
        pa::retry_plan_act(&db, act, None).await
    })
    .await
    .unwrap();
    assert!(retry.0 > act.0);
    for p in failed {
        assert_eq!(obligation(&t, act, p).await.0, "pending", "pool {p} requeued");
    }
    assert_eq!(act_state(&t, act).await, "running");
}

// ---------- 29. ReorderPlanLadders ----------

#[tokio::test]
async fn a_ladder_reorder_walked_lock_by_lock_takes_every_ladder_row_for_no_key_update_ascending_in_one_statement() {
    let t = demo_db().await;
    ladder_of(&t, "Third ladder", 1).await;
    let ids: Vec<LadderId> =
        t.all(sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders ORDER BY plan_ladder_id")).await;
    assert!(ids.len() >= 3);
    // Reversed.
    let n = ids.len() as i32;
    let positions: BTreeMap<LadderId, i32> = ids.iter().enumerate().map(|(i, id)| (*id, n - i as i32)).collect();
    let rows: Vec<Expect> =
        ids.iter().map(|id| Expect::row_in("core.plan_ladders", id.0, RowMode::NoKeyUpdate)).collect();
    let p = positions.clone();
    let changed = walk_one_statement(&t, &topo::REORDER_PLAN_LADDERS_LOCKS, &rows, |db| async move {
        topo::reorder_plan_ladders(&db, &p).await
    })
    .await
    .unwrap();
    assert!(changed >= 2);
    let order: Vec<LadderId> =
        t.all(sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders ORDER BY sort_order")).await;
    let mut reversed = ids.clone();
    reversed.reverse();
    assert_eq!(order, reversed);
}
