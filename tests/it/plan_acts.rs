//! The default change (ChangeOrgTypeDefault and its drain): migrate and grandfather outcomes,
//! the gate and the other refusals, the lock order of T0, the listing, the moves and the failure
//! recorder, a second default change while the first drains, crash recovery, retry, and the
//! operator's form and progress page over HTTP.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    TestDb,
    acts::*,
    locks::{Expect, RowMode},
    pages::{Answer, Session, app_with_demo},
};
use member_console::{
    db::{TxKind, begin},
    demo,
    ids::{GrantId, LadderId, OrgTypeId, PlanActId, PoolId},
    services::{
        plan_acts::{self as pa, Disposition},
        refusal::ServiceError,
    },
    store::plan_acts as store,
};
use reqwest::StatusCode;

// ---------- Harness (the shared part is tests/common/acts.rs) ----------

/// What a pool holds, ladder by ladder: (ladder, product, grant kind, grant status, the grant's act).
async fn holdings(t: &TestDb, pool: PoolId) -> Vec<(String, String, String, String, Option<PlanActId>)> {
    positions_of(t, pool).await.into_iter().map(|p| (p.ladder, p.product, p.kind, p.status, p.act)).collect()
}

/// The same without the act, for comparisons.
async fn shape(t: &TestDb, pool: PoolId) -> Vec<(String, String, String, String)> {
    holdings(t, pool).await.into_iter().map(|(l, p, k, s, _)| (l, p, k, s)).collect()
}

fn h(ladder: &str, product: &str, kind: &str) -> (String, String, String, String) {
    (ladder.into(), product.into(), kind.into(), "active".into())
}

/// The pools whose floor grant holds `ladder` right now.
async fn floor_holders(t: &TestDb, ladder: LadderId) -> Vec<PoolId> {
    t.all(
        sqlx::query_scalar(
            "SELECT p.pool_id FROM core.positions p JOIN core.conferrals c USING (conferral_id)
         JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE p.plan_ladder_id = $1 AND g.kind = 'floor' ORDER BY p.pool_id",
        )
        .bind(ladder),
    )
    .await
}

/// `n` new organizations of the type, every `every`-th given Pro; then the type's pools split into
/// those whose floor holds `ladder` and those that hold Pro there instead.
async fn floors_and_pro_holders(
    t: &TestDb,
    ty: OrgTypeId,
    ladder: LadderId,
    prefix: &str,
    n: usize,
    every: usize,
) -> (Vec<PoolId>, Vec<PoolId>) {
    let pro = product_id(t, "Pro").await;
    for c in orgs_of_type(t, ty, prefix, n).await.iter().step_by(every) {
        grant(t, c.organization_id, pro).await;
    }
    let floors = floor_holders(t, ladder).await;
    members_of(t, ty).await.into_iter().map(|m| m.2).partition(|p| floors.contains(p))
}

/// Everything a refused default change must leave alone.
async fn written(t: &TestDb) -> (i64, i64, i64, i64, i64) {
    (
        scalar(t, "SELECT count(*) FROM core.plan_acts").await,
        scalar(t, "SELECT count(*) FROM core.plan_act_details").await,
        scalar(t, "SELECT count(*) FROM core.plan_act_reached_types").await,
        scalar(t, "SELECT count(*) FROM core.plan_act_obligations").await,
        scalar(t, "SELECT count(*) FROM integration.jobs WHERE kind = 'drain_plan_act'").await,
    )
}

async fn wait_until(t: &TestDb, sql: &str, what: &str, within: Duration) {
    let start = Instant::now();
    while scalar(t, sql).await == 0 {
        assert!(start.elapsed() < within, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------- 1. Migrate ----------

#[tokio::test]
async fn a_default_change_with_migrate_moves_every_floor_and_gives_the_pro_holders_the_new_floor_too() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    let (floor_pools, pro_pools) = floors_and_pro_holders(&t, community, wiki, "Migrant", 30, 5).await;
    // The demo's Acme and Umbrella hold Free, Initech holds Pro; ours: 24 floors and 6 Pro.
    assert_eq!((floor_pools.len(), pro_pools.len()), (26, 7));
    let old_floors = floor_grants_on(&t, &floor_pools, wiki).await;
    let globex = t.one(sqlx::query_scalar::<_, PoolId>(
        "SELECT rp.pool_id FROM core.resource_pools rp JOIN core.organizations o USING (organization_id) WHERE o.name = 'Globex'",
    )).await;
    let globex_before = holdings(&t, globex).await;

    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(act_state(&t, act).await, "running", "T0 leaves the moves to the drain");
    assert_eq!(type_default(&t, community).await, (Some(support), Some(act)));
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.listed, d.moved, d.failed, d.finished), (33, 33, 0, true));

    for (p, (grant_id, conferral)) in floor_pools.iter().zip(&old_floors) {
        assert_eq!(shape(&t, *p).await, vec![h("Support", "Community support", "floor")], "pool {p}");
        let (status, reason): (String, Option<String>) = t.one(sqlx::query_as(
            "SELECT g.status, c.ended_reason FROM core.grants g JOIN core.conferrals c ON c.grant_id = g.grant_id
             WHERE g.grant_id = $1 AND c.conferral_id = $2",
        )
        .bind(grant_id)
        .bind(conferral)).await;
        assert_eq!((status.as_str(), reason.as_deref()), ("ended", Some("migrated")), "pool {p}'s Free floor");
    }
    for p in &pro_pools {
        assert_eq!(
            shape(&t, *p).await,
            vec![h("Support", "Community support", "floor"), h("Wiki hosting", "Pro", "operator")],
            "pool {p}: Pro untouched, and the new floor"
        );
        // The vacant bucket's floor carries the act.
        let support_floor = holdings(&t, *p).await.into_iter().find(|x| x.0 == "Support").unwrap();
        assert_eq!(support_floor.4, Some(act), "pool {p}'s Support floor names the act");
    }
    assert_eq!(holdings(&t, globex).await, globex_before, "another type's organization is untouched");
    // Entitlements: the floor's wiki is gone, the support flag is there.
    let sites = scalar(
        &t,
        &format!(
            "SELECT count(*) FROM core.pool_entitlements WHERE pool_id = {} AND resource_key = 'fedwiki.active_sites'",
            floor_pools[0]
        ),
    )
    .await;
    assert_eq!(sites, 0);
    let pro_sites = scalar(
        &t,
        &format!(
            "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = {} AND resource_key = 'fedwiki.active_sites'",
            pro_pools[0]
        ),
    )
    .await;
    assert_eq!(pro_sites, 10);

    assert_eq!(counts(&t, act).await, (0, 26, 0, 7, 0, 0));
    assert_eq!(
        scalar(
            &t,
            &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND attempts <> 1")
        )
        .await,
        0
    );
    assert_eq!(act_state(&t, act).await, "done");
    assert!(stale_pools(&t).await.is_empty(), "every pool's entitlements equal a fresh computation");
    assert_eq!(type_default(&t, community).await, (Some(support), Some(act)));
    let (kind, disposition, detail): (String, Option<String>, serde_json::Value) = t.one(sqlx::query_as(
        "SELECT a.kind, a.disposition, d.detail FROM core.plan_acts a JOIN core.plan_act_details d USING (plan_act_id)
         WHERE a.plan_act_id = $1",
    )
    .bind(act)).await;
    assert_eq!((kind.as_str(), disposition.as_deref()), ("default_change", Some("migrate")));
    assert_eq!(detail["from_ladder_id"], serde_json::json!(wiki));
    assert_eq!(detail["to_ladder_id"], serde_json::json!(support));
    // A drain again finds nothing to do.
    let again = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((again.listed, again.moved, again.failed), (0, 0, 0));
}

/// The floors a migration creates name the act, as the vacant bucket's floors and the grandfathered
/// legacy grants do (and as the tier removal's migrate does, by the spec). Fails today: the migrate
/// branch of `enact_obligation` goes through `restore_pool_tx`, which calls ReapplyDefaultsIfVacant
/// with no act.
#[tokio::test]
async fn the_floors_a_migration_gives_name_the_act() {
    let Demo { t, community, support, .. } = demo().await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    pa::drain_plan_act(&t.db, act, None).await.unwrap();
    let acme = members_of(&t, community).await.into_iter().find(|m| m.1 == demo::DEMO_ORGANIZATION).unwrap();
    let held = holdings(&t, acme.2).await;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].4, Some(act), "the migrated organization's new floor grant names the act: {held:?}");
}

// ---------- 2. Grandfather ----------

#[tokio::test]
async fn a_default_change_with_grandfather_keeps_the_old_floor_as_a_legacy_grant() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    let (floor_pools, pro_pools) = floors_and_pro_holders(&t, community, wiki, "Elder", 12, 4).await;
    assert_eq!((floor_pools.len(), pro_pools.len()), (11, 4));
    let old_floors: Vec<GrantId> = floor_grants_on(&t, &floor_pools, wiki).await.into_iter().map(|f| f.0).collect();
    let before = {
        let mut out = vec![];
        for p in &floor_pools {
            out.push(
                t.one(sqlx::query_scalar::<_, i64>(
                    "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
                )
                .bind(p)).await,
            );
        }
        out
    };

    let act = change(&t, community, support, Some(Disposition::Grandfather)).await.unwrap();
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.moved, d.failed, d.finished), (15, 0, true));

    for (i, p) in floor_pools.iter().enumerate() {
        let held = holdings(&t, *p).await;
        assert_eq!(
            held,
            vec![
                ("Support".into(), "Community support".into(), "floor".into(), "active".into(), Some(act)),
                ("Wiki hosting".into(), "Free".into(), "legacy".into(), "active".into(), Some(act)),
            ],
            "pool {p}: Free kept as a legacy grant of the act, and the new floor"
        );
        assert_eq!(
            grant_status(&t, old_floors[i]).await,
            "ended",
            "the old floor grant itself ended; the legacy grant replaces it"
        );
        let sites: i64 = t.one(sqlx::query_scalar(
            "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
        )
        .bind(p)).await;
        assert_eq!(sites, before[i], "the grandfathered organization keeps its wiki");
    }
    for p in &pro_pools {
        assert_eq!(
            shape(&t, *p).await,
            vec![h("Support", "Community support", "floor"), h("Wiki hosting", "Pro", "operator")]
        );
    }
    assert_eq!(counts(&t, act).await, (0, 0, 11, 4, 0, 0));
    assert_eq!(
        scalar(&t, &format!("SELECT count(*) FROM core.grants WHERE kind = 'legacy' AND plan_act_id = {act}")).await,
        11
    );
    assert_eq!(act_state(&t, act).await, "done");
    assert!(stale_pools(&t).await.is_empty());
    assert_eq!(type_default(&t, community).await, (Some(support), Some(act)));
}

// ---------- 3. The gate and the refusals ----------

#[tokio::test]
async fn without_a_disposition_the_change_is_refused_while_organizations_hold_the_old_floor() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    let before = written(&t).await;
    assert_eq!(before, (0, 0, 0, 0, 0));

    // Acme and Umbrella hold the Free floor: the gate refuses on the disposition field.
    let e = change(&t, community, support, None).await.unwrap_err();
    let p = field_errors(e);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, "disposition");
    assert!(p[0].1.contains("hold the current default's floor"), "{p:?}");
    assert_eq!(written(&t).await, before, "nothing written");
    assert_eq!(type_default(&t, community).await, (Some(wiki), None), "the type unchanged");

    // Other refusals: the ladder it has already, an unknown ladder, a ladder with no tiers, an
    // unknown type. Each writes nothing, with or without a disposition.
    let bare: LadderId = t
        .one(sqlx::query_scalar(
            "INSERT INTO core.plan_ladders (name, sort_order) VALUES ('Bare', 9) RETURNING plan_ladder_id",
        ))
        .await;
    let cases: &[(LadderId, &str)] =
        &[(wiki, "default already"), (LadderId(999_999), "Choose a ladder from the list"), (bare, "no tiers")];
    for d in [None, Some(Disposition::Migrate), Some(Disposition::Grandfather)] {
        for (ladder, message) in cases {
            let p = field_errors(change(&t, community, *ladder, d).await.unwrap_err());
            assert!(
                p.iter().any(|(f, m)| f == "plan_ladder_id" && m.contains(message)),
                "ladder {ladder} ({d:?}): {p:?}"
            );
        }
        assert!(
            matches!(change(&t, OrgTypeId(999_999), support, d).await, Err(ServiceError::NotFound(_))),
            "an unknown type ({d:?})"
        );
    }
    assert_eq!(written(&t).await, before, "nothing written");
    assert_eq!(type_default(&t, community).await, (Some(wiki), None));

    // A fresh type with no organization: allowed without a disposition, and done at once.
    let empty: OrgTypeId = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ('Empty', $1) RETURNING org_type_id",
            )
            .bind(wiki),
        )
        .await;
    let act = change(&t, empty, support, None).await.unwrap();
    assert_eq!(act_state(&t, act).await, "done", "an act that reaches no organization is done at once");
    assert_eq!(type_default(&t, empty).await, (Some(support), Some(act)));
    let disposition: Option<String> =
        t.one(sqlx::query_scalar("SELECT disposition FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await;
    assert_eq!(disposition, None);

    // A type whose organizations all left the floor (all hold Pro): allowed, and they are
    // given the new floor (the vacant bucket).
    let partners: OrgTypeId = t.one(sqlx::query_scalar(
        "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ('Partners', $1) RETURNING org_type_id",
    )
    .bind(wiki)).await;
    let pro = product_id(&t, "Pro").await;
    let created = orgs_of_type(&t, partners, "Partner", 3).await;
    // While one still holds the floor, refused.
    for c in &created[..2] {
        grant(&t, c.organization_id, pro).await;
    }
    let acts = scalar(&t, "SELECT count(*) FROM core.plan_acts").await;
    let p = field_errors(change(&t, partners, support, None).await.unwrap_err());
    assert_eq!(p[0].0, "disposition");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts").await, acts);
    grant(&t, created[2].organization_id, pro).await;
    let act = change(&t, partners, support, None).await.unwrap();
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.moved, d.finished), (3, true));
    assert_eq!(counts(&t, act).await, (0, 0, 0, 3, 0, 0));
    for c in &created {
        assert_eq!(
            shape(&t, c.pool_id).await,
            vec![h("Support", "Community support", "floor"), h("Wiki hosting", "Pro", "operator")]
        );
    }
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 4. Lock order ----------

#[tokio::test]
async fn a_listing_batch_and_a_move_on_one_pool_wait_for_each_other() {
    let Demo { t, community, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Locked", 3).await;
    let pool = created[1].pool_id;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();

    // A move holds the pool row (FOR UPDATE): a listing batch that reaches it waits.
    let (mut hold, hold_pid) = hold_pool(&t, pool).await;
    let listing = spawn_list_batch(&t, act, community, 500);
    let lister = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, lister, &[Expect::rendezvous_shared()]).await;
    // It waits on the move for that pool's row.
    let locked = Expect::row_in("core.resource_pools", pool.0, RowMode::KeyShare);
    common::locks::assert_waits(&t.admin, lister, hold_pid, &locked).await;
    assert_eq!(written(&t).await.3, 0, "no obligation written while the batch waits");
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    drop(hold);
    assert_eq!(listing.await.unwrap(), 6, "the batch completes once the move's pool row is released");
    assert_eq!(counts(&t, act).await.0, 6);

    // The other way: a batch's FOR KEY SHARE, held in an open transaction, makes a move wait.
    let act2 = change(&t, community, ladder_id(&t, "Wiki hosting").await, Some(Disposition::Migrate)).await.unwrap();
    let mut batch = begin(&t.db, TxKind::Materializing).await.unwrap();
    let batch_pid = common::backend_pid(batch.conn()).await;
    assert_eq!(store::write_obligations(batch.conn(), act2, community, 500).await.unwrap(), 6);
    common::locks::assert_holds(
        &t.admin,
        batch_pid,
        &[Expect::rendezvous_shared(), Expect::row_in("core.resource_pools", pool.0, RowMode::KeyShare)],
    )
    .await;
    let db = t.db.clone();
    let mover = tokio::spawn(async move { pa::enact_obligation(&db, act2, pool, None).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, batch_pid).await;
    assert!(waiter > 0);
    batch.commit().await.unwrap();
    assert!(mover.await.unwrap().unwrap(), "the move ran once the batch committed, and saw its obligation");
    // The first act listed but moved no one: the organization still held Free, so nothing to end.
    assert_eq!(obligation(&t, act2, pool).await.0, "vacant");
    // The second act's listing superseded the first act's open obligations.
    assert_eq!(counts(&t, act).await, (0, 0, 0, 0, 0, 6));
}

#[tokio::test]
async fn t0_waits_on_an_open_materializing_transaction_and_takes_no_pool_or_obligation_row() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    orgs_of_type(&t, community, "Rendezvous", 3).await;

    // A: an open materializing transaction; T0 waits for its shared rendezvous.
    let mut a = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a_pid = common::backend_pid(a.conn()).await;
    let db = t.db.clone();
    let t0 = tokio::spawn(async move {
        pa::change_org_type_default(&db, community, support, Some(Disposition::Migrate), None, "", None).await
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, a_pid).await;
    let held = common::granted_locks(&t.admin, waiter).await;
    assert!(!held.iter().any(|(_, r, _)| r == "core.org_types"), "T0 takes the rendezvous first: {held:?}");
    assert_eq!(type_default(&t, community).await, (Some(wiki), None));
    a.commit().await.unwrap();
    let act1 = t0.await.unwrap().unwrap();
    assert_eq!(type_default(&t, community).await, (Some(support), Some(act1)));

    // The admin holds the type's row: T0 waits on it, holding the exclusive rendezvous and no pool.
    let (mut hold, hold_pid) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.org_types WHERE org_type_id = {community} FOR UPDATE"))
            .await;
    let db = t.db.clone();
    let t0 = tokio::spawn(async move {
        pa::change_org_type_default(&db, community, wiki, Some(Disposition::Migrate), None, "", None).await
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    common::locks::assert_holds(&t.admin, waiter, &[Expect::rendezvous_exclusive()]).await;
    common::locks::assert_waits(&t.admin, waiter, hold_pid, &Expect::row("core.org_types", community.0)).await;
    assert_no_pool_nor_obligation(&common::granted_locks(&t.admin, waiter).await);
    // A move cannot run meanwhile: T0's exclusive rendezvous keeps it out.
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    drop(hold);
    let act2 = t0.await.unwrap().unwrap();
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(act2)));

    // Paused at its last statement (the drain job's insert, on a dedupe key the admin holds
    // open): T0 holds everything it declares, and still no pool or obligation row.
    let (mut hold, hold_pid, next) = hold_next_drain_key(&t).await;
    assert_eq!(next.0, act2.0 + 1);
    let db = t.db.clone();
    let t0 = tokio::spawn(async move {
        pa::change_org_type_default(&db, community, support, Some(Disposition::Grandfather), None, "", None).await
    });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, hold_pid).await;
    let t0_locks =
        [Expect::rendezvous_exclusive(), Expect::row_in("core.org_types", community.0, RowMode::NoKeyUpdate)];
    common::locks::assert_holds(&t.admin, waiter, &t0_locks).await;
    assert_no_pool_nor_obligation(&common::granted_locks(&t.admin, waiter).await);
    sqlx::query("ROLLBACK").execute(&mut *hold).await.unwrap();
    let act3 = t0.await.unwrap().unwrap();
    assert_eq!(act3, next);
    assert_eq!(type_default(&t, community).await, (Some(support), Some(act3)));
}

#[tokio::test]
async fn the_failure_recorder_never_waits_on_a_pool_row() {
    let Demo { t, community, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Recorder", 2).await;
    let pool = created[0].pool_id;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, act, community, 500).await, 5);

    let (mut hold, hold_pid) = hold_pool(&t, pool).await;
    let db = t.db.clone();
    let recorder = tokio::spawn(async move {
        let mut tx = begin(&db, TxKind::Plain).await.unwrap();
        store::record_failure(tx.conn(), act, pool, "the move failed").await.unwrap();
        tx.commit().await.unwrap();
    });
    tokio::time::timeout(Duration::from_secs(3), recorder)
        .await
        .expect("the failure recorder completed while the pool row was held")
        .unwrap();
    assert!(!common::anyone_waits_on(&t.admin, &t.name, hold_pid).await);
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    drop(hold);
    let (state, attempts, error) = obligation(&t, act, pool).await;
    assert_eq!((state.as_str(), attempts, error.as_deref()), ("failed", 1, Some("the move failed")));
    // Only while pending: a second recording changes nothing.
    let mut tx = begin(&t.db, TxKind::Plain).await.unwrap();
    store::record_failure(tx.conn(), act, pool, "again").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(obligation(&t, act, pool).await.1, 1);
}

// ---------- 5. A second default change while the first drains ----------

#[tokio::test]
async fn a_second_default_change_while_the_first_drains_supersedes_it_and_moves_no_one_twice() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    orgs_of_type(&t, community, "Twice", 20).await;
    let members = members_of(&t, community).await;
    assert_eq!(members.len(), 23);

    // The first act: listed, and a few organizations moved (Initech among them).
    let first = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, first, community, 500).await, 23);
    let moved_first: Vec<PoolId> = members.iter().take(5).map(|m| m.2).collect();
    for p in &moved_first {
        assert!(pa::enact_obligation(&t.db, first, *p, None).await.unwrap());
    }
    for p in &moved_first {
        assert!(shape(&t, *p).await.contains(&h("Support", "Community support", "floor")));
    }

    // The second act takes the default back; both drains run at once.
    let second = change(&t, community, wiki, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(type_default(&t, community).await, (Some(wiki), Some(second)));
    let (a, b) = tokio::join!(pa::drain_plan_act(&t.db, first, None), pa::drain_plan_act(&t.db, second, None));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.failed, b.failed), (0, 0));
    assert!(b.finished);
    // The first act's drain again, as its job would: nothing left, and done.
    pa::drain_plan_act(&t.db, first, None).await.unwrap();

    let initech = members.iter().find(|m| m.1 == "Initech").unwrap().2;
    for (_, name, pool) in &members {
        let expected = if *pool == initech {
            vec![h("Wiki hosting", "Pro", "operator")]
        } else {
            vec![h("Wiki hosting", "Free", "floor")]
        };
        assert_eq!(shape(&t, *pool).await, expected, "{name}");
    }
    assert_eq!(
        active_floors(
            &t,
            community,
            "AND g.product_id = (SELECT product_id FROM core.products WHERE name = 'Community support')"
        )
        .await,
        0,
        "no Support floor of the first act remains"
    );
    assert!(stale_pools(&t).await.is_empty());

    let (c1, c2) = (counts(&t, first).await, counts(&t, second).await);
    assert_eq!(c1.0 + c2.0, 0, "no obligation pending in either act: {c1:?} {c2:?}");
    assert_eq!((c1.4, c2.4), (0, 0));
    // The first act settled what it moved and had the rest superseded.
    assert_eq!(c1.1 + c1.3, 5, "{c1:?}");
    assert_eq!(c1.5, 18, "{c1:?}");
    // The second: the ones the first moved migrated back (Initech is vacant again: it holds Pro).
    let total2 = c2.1 + c2.2 + c2.3 + c2.5;
    assert_eq!(total2, 23, "{c2:?}");
    assert_eq!(c2.5, 0);
    let moved_back = scalar(
        &t,
        &format!(
            "SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {second} AND state = 'migrated'
               AND pool_id = ANY (ARRAY[{}]::bigint[])",
            moved_first.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
        ),
    )
    .await;
    assert!(moved_first.contains(&initech), "Initech is among the first five");
    assert_eq!(moved_back, 5, "the Support floor the first act gave is ended by the second (Initech's too)");
    assert_eq!((c2.1, c2.3), (5, 18), "{c2:?}");
    // Settled exactly once each.
    assert_eq!(
        scalar(
            &t,
            &format!(
                "SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id IN ({first}, {second})
                   AND state NOT IN ('superseded') AND attempts <> 1"
            )
        )
        .await,
        0
    );
    assert_eq!(act_state(&t, first).await, "done");
    assert_eq!(act_state(&t, second).await, "done");
}

#[tokio::test]
async fn moves_of_an_act_that_no_longer_owns_the_type_supersede_its_obligations() {
    let Demo { t, community, wiki, support, .. } = demo().await;
    orgs_of_type(&t, community, "Owner", 4).await;
    let members = members_of(&t, community).await;
    let first = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    assert_eq!(list_batch(&t, first, community, 500).await, 7);
    let second = change(&t, community, wiki, Some(Disposition::Migrate)).await.unwrap();
    // The first act drains before the second lists: its moves find it no longer owns the type.
    let a = pa::drain_plan_act(&t.db, first, None).await.unwrap();
    assert_eq!((a.listed, a.failed, a.finished), (0, 0, true));
    assert_eq!(counts(&t, first).await, (0, 0, 0, 0, 0, 7));
    assert_eq!(act_state(&t, first).await, "done");
    let initech = members.iter().find(|m| m.1 == "Initech").unwrap().2;
    for (_, name, pool) in &members {
        let expected = if *pool == initech {
            vec![h("Wiki hosting", "Pro", "operator")]
        } else {
            vec![h("Wiki hosting", "Free", "floor")]
        };
        assert_eq!(shape(&t, *pool).await, expected, "{name}: the superseded act moved no one");
    }
    // The second lists and moves: nobody held the Support floor, so all are vacant and unchanged.
    let b = pa::drain_plan_act(&t.db, second, None).await.unwrap();
    assert_eq!((b.listed, b.moved, b.failed, b.finished), (7, 7, 0, true));
    assert_eq!(counts(&t, second).await, (0, 0, 0, 7, 0, 0));
    for (_, name, pool) in &members {
        assert_eq!(shape(&t, *pool).await.len(), 1, "{name}");
    }
    // A retry of the superseded act has nothing to requeue.
    assert!(matches!(pa::retry_plan_act(&t.db, first, None).await, Err(ServiceError::Refused(_))));
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 6. Crash mid-drain ----------

#[tokio::test]
async fn a_drain_killed_midway_is_resumed_and_settles_every_obligation_once() {
    let Demo { t, community, support, .. } = demo().await;
    orgs_of_type(&t, community, "Crash", 120).await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    // Slow every entitlement write a little, so the drain is surely stopped midway.
    sqlx::raw_sql(
        "CREATE FUNCTION public.slow_entitlements() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(0.01); RETURN NEW; END $$;
         CREATE TRIGGER slow_entitlements BEFORE INSERT OR UPDATE ON core.pool_entitlements
         FOR EACH ROW EXECUTE FUNCTION public.slow_entitlements();",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    let db = t.db.clone();
    let drain = tokio::spawn(async move { pa::drain_plan_act(&db, act, None).await });
    let settled =
        format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND state <> 'pending'");
    let start = Instant::now();
    while scalar(&t, &settled).await < 20 {
        assert!(start.elapsed() < Duration::from_secs(30), "the drain did not start moving");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drain.abort();
    let _ = drain.await;
    let pending = scalar(
        &t,
        &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND state = 'pending'"),
    )
    .await;
    assert!(pending > 0, "the drain was stopped before the end");
    assert_eq!(act_state(&t, act).await, "running");

    // On restart the poller enqueues the drain job, and a worker finishes it.
    assert_eq!(pa::resume_drains(&t.db).await.unwrap(), 1);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(
        member_console::jobs::Worker::new(t.db.clone(), member_console::job_registry::standard_handlers(), 2)
            .run(stop_rx),
    );
    wait_until(
        &t,
        &format!("SELECT count(*) FROM core.plan_acts WHERE plan_act_id = {act} AND state = 'done'"),
        "the resumed drain finished",
        Duration::from_secs(60),
    )
    .await;
    let _ = stop_tx.send(true);
    worker.await.unwrap();

    assert_eq!(counts(&t, act).await, (0, 122, 0, 1, 0, 0));
    assert_eq!(
        scalar(
            &t,
            &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND attempts <> 1")
        )
        .await,
        0,
        "every obligation settled exactly once"
    );
    // No organization was given two floors.
    assert_eq!(active_floors(&t, community, "").await, 123);
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 7. Failure and retry ----------

#[tokio::test]
async fn a_failed_move_is_recorded_and_a_retry_settles_it_once() {
    let Demo { t, community, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Retry", 6).await;
    let bad = created[2].pool_id;
    break_pool(&t, bad).await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.moved, d.failed, d.finished), (8, 1, true));
    let (state, attempts, error) = obligation(&t, act, bad).await;
    assert_eq!((state.as_str(), attempts), ("failed", 1));
    assert!(error.as_deref().unwrap_or_default().contains("is broken"), "{error:?}");
    assert_eq!(counts(&t, act).await, (0, 7, 0, 1, 1, 0));
    assert_eq!(act_state(&t, act).await, "done", "done, with a failure");
    // The failed organization's move rolled back: it still holds its Free floor.
    assert_eq!(shape(&t, bad).await, vec![h("Wiki hosting", "Free", "floor")]);
    // A drain pass does not retry it by itself.
    assert_eq!(pa::drain_plan_act(&t.db, act, None).await.unwrap().moved, 0);

    mend_pools(&t).await;
    let retry = pa::retry_plan_act(&t.db, act, None).await.unwrap();
    let (kind, retry_of): (String, Option<PlanActId>) = t.one(sqlx::query_as(
        "SELECT a.kind, (d.detail->>'retry_of')::bigint FROM core.plan_acts a JOIN core.plan_act_details d USING (plan_act_id)
         WHERE a.plan_act_id = $1",
    )
    .bind(retry)).await;
    assert_eq!((kind.as_str(), retry_of), ("retry", Some(act)));
    let (state, _, error) = obligation(&t, act, bad).await;
    assert_eq!((state.as_str(), error), ("pending", None), "requeued");
    assert_eq!(act_state(&t, act).await, "running");
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.moved, d.failed, d.finished), (1, 0, true));
    let (state, attempts, _) = obligation(&t, act, bad).await;
    assert_eq!((state.as_str(), attempts), ("migrated", 2), "the failed attempt, then the settlement");
    assert_eq!(shape(&t, bad).await, vec![h("Support", "Community support", "floor")]);
    assert_eq!(counts(&t, act).await, (0, 8, 0, 1, 0, 0));
    assert_eq!(act_state(&t, act).await, "done");
    assert!(stale_pools(&t).await.is_empty());

    // Nothing left to retry: refused, and no retry act written.
    let e = pa::retry_plan_act(&t.db, act, None).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("Nothing to retry")), "{e:?}");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts WHERE kind = 'retry'").await, 1);
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_act_details").await, 2);
    assert_eq!(act_state(&t, act).await, "done");
    assert!(matches!(pa::retry_plan_act(&t.db, PlanActId(999_999), None).await, Err(ServiceError::NotFound(_))));
}

/// The job's drain sends its moves in runs (`MOVE_BATCH` per round trip, each its own
/// transaction): a move that fails inside a run is recorded as failed and rolled back, the moves
/// before it stay, and the moves after it are sent again and made.
#[tokio::test]
async fn a_move_that_fails_inside_a_run_is_recorded_and_the_moves_around_it_are_made() {
    let Demo { t, community, support, .. } = demo().await;
    let created = orgs_of_type(&t, community, "Run", 16).await;
    // One drain part's pools (the drain splits pools by id modulo MOVE_PARALLELISM): the second
    // of them fails, with one before it and at least two after it in the same run.
    let part = created[0].pool_id.0 % pa::MOVE_PARALLELISM;
    let same: Vec<PoolId> = created.iter().map(|c| c.pool_id).filter(|p| p.0 % pa::MOVE_PARALLELISM == part).collect();
    assert!(same.len() >= 4 && same.len() <= pa::MOVE_BATCH, "{same:?}");
    let bad = same[1];
    break_pool(&t, bad).await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    let d = pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!((d.failed, d.finished), (1, true), "{d:?}");
    let (state, attempts, error) = obligation(&t, act, bad).await;
    assert_eq!((state.as_str(), attempts), ("failed", 1));
    assert!(error.as_deref().unwrap_or_default().contains("is broken"), "{error:?}");
    assert_eq!(shape(&t, bad).await, vec![h("Wiki hosting", "Free", "floor")], "rolled back");
    for p in same.iter().filter(|p| **p != bad) {
        assert_eq!(obligation(&t, act, *p).await.0, "migrated", "pool {p:?}");
        assert_eq!(shape(&t, *p).await, vec![h("Support", "Community support", "floor")], "pool {p:?}");
    }
    assert_eq!(
        scalar(
            &t,
            &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act} AND state = 'pending'")
        )
        .await,
        0
    );
    mend_pools(&t).await;
    assert!(stale_pools(&t).await.is_empty());
}

// ---------- 8. HTTP ----------

fn stat(value: i64, label: &str) -> String {
    format!(r#"<span class="stat-value">{value}</span><span class="stat-label">{label}</span>"#)
}

#[tokio::test]
async fn an_operator_changes_a_default_on_the_topology_page_and_follows_the_act() {
    let (t, app) = app_with_demo().await;
    let community = type_id(&t, "Community").await;
    let support = ladder_id(&t, "Support").await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let path = format!("/operator/topology/org-types/{community}/default");
    let support_s = support.to_string();

    // The form is on the page.
    let page = op.get("/operator/topology").await.body;
    assert!(page.contains(&format!(r#"id="default-change-{community}""#)), "the default-change form");
    assert!(page.contains(&format!(r#"action="{path}""#)));

    // No disposition while floors exist: refused, the message, nothing written.
    let refused = [("plan_ladder_id", support_s.as_str()), ("disposition", ""), ("reason", "try")];
    let Answer { status, body, .. } = op.post(&path, &refused, false).await;
    assert!(status.is_client_error(), "{status}");
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("hold the current default"), "{body}");
    assert!(body.contains("<html") || body.contains("<!DOCTYPE") || body.contains("<!doctype"), "the whole page");
    let Answer { status, body, .. } = op.post(&path, &refused, true).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.starts_with(&format!(r#"<div class="default-change" id="default-change-{community}">"#)), "{body}");
    assert!(body.contains("hold the current default"), "{body}");
    assert!(!body.contains("<html"), "the partial alone");
    // An unknown disposition and no ladder are refused by field as well.
    let Answer { status, body, .. } =
        op.post(&path, &[("plan_ladder_id", ""), ("disposition", "sideways")], true).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("Choose a ladder.") && body.contains("is not a disposition"), "{body}");
    assert_eq!(written(&t).await, (0, 0, 0, 0, 0));

    // A member is refused, and writes nothing.
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let fields = [("plan_ladder_id", support_s.as_str()), ("disposition", "migrate"), ("reason", "move them")];
    for htmx in [false, true] {
        let Answer { status, .. } = member.post(&path, &fields, htmx).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(written(&t).await, (0, 0, 0, 0, 0));

    // Migrate: 303 to the act's page.
    let Answer { status, headers, .. } = op.post(&path, &fields, false).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let act = PlanActId(scalar(&t, "SELECT max(plan_act_id) FROM core.plan_acts").await);
    let to = format!("/operator/plan-acts/{act}");
    assert_eq!(headers.get("location").and_then(|v| v.to_str().ok()), Some(to.as_str()));
    let actor: Option<i64> =
        t.one(sqlx::query_scalar("SELECT created_by FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await;
    assert!(actor.is_some(), "the act names the operator");
    // The request drained the three demo organizations itself (or the job will); wait for done.
    if act_state(&t, act).await != "done" {
        pa::drain_plan_act(&t.db, act, None).await.unwrap();
    }
    assert_eq!(act_state(&t, act).await, "done");
    assert_eq!(counts(&t, act).await, (0, 2, 0, 1, 0, 0));

    let Answer { status, body, .. } = op.get(&to).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains(r#"id="plan-act-progress""#), "{body}");
    assert!(body.contains(&stat(2, "Migrated")), "{body}");
    assert!(body.contains(&stat(1, "Vacant")), "{body}");
    assert!(body.contains(&stat(0, "Pending")), "{body}");
    assert!(body.contains("Default changed"));
    assert!(!body.contains("every 2s"), "a finished act's page does not poll");
    assert!(body.contains("Done: this act has finished"));

    let r = op.client.get(app.url(&format!("{to}/progress"))).header("HX-Request", "true").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let partial = r.text().await.unwrap();
    assert!(partial.starts_with(r#"<div class="plan-act-progress" id="plan-act-progress">"#), "{partial}");
    assert!(partial.contains(&stat(2, "Migrated")));
    assert!(!partial.contains("every 2s") && !partial.contains("<html"));
    // The list names it.
    let list = op.get("/operator/plan-acts").await.body;
    assert!(list.contains(&format!(r#"href="/operator/plan-acts/{act}""#)));

    // Members may see neither.
    for p in [to.clone(), format!("{to}/progress"), "/operator/plan-acts".to_string()] {
        assert_eq!(member.get(&p).await.status, StatusCode::FORBIDDEN, "{p}");
    }
    let Answer { status, .. } = member.post(&format!("{to}/retry"), &[], false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // An unknown act is a 404.
    assert_eq!(op.get("/operator/plan-acts/999999/progress").await.status, StatusCode::NOT_FOUND);
    app.handle.stop(false).await;
}

#[tokio::test]
async fn a_running_act_page_polls_its_progress() {
    let (t, app) = app_with_demo().await;
    let community = type_id(&t, "Community").await;
    let support = ladder_id(&t, "Support").await;
    // T0 only: the act is running with nothing listed yet.
    let act = change(&t, community, support, Some(Disposition::Grandfather)).await.unwrap();
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let body = op.get(&format!("/operator/plan-acts/{act}")).await.body;
    assert!(body.contains("every 2s"), "{body}");
    assert!(body.contains("Still listing organizations"), "{body}");
    let partial = op.get(&format!("/operator/plan-acts/{act}/progress")).await.body;
    assert!(partial.contains(r#"hx-trigger="every 2s""#), "{partial}");
    pa::drain_plan_act(&t.db, act, None).await.unwrap();
    let partial = op.get(&format!("/operator/plan-acts/{act}/progress")).await.body;
    assert!(!partial.contains("every 2s"), "{partial}");
    assert!(partial.contains(&stat(2, "Grandfathered")), "{partial}");
    app.handle.stop(false).await;
}

#[tokio::test]
async fn a_running_acts_progress_says_its_rate_over_the_last_minute_and_the_time_left() {
    let (t, app) = app_with_demo().await;
    let community = type_id(&t, "Community").await;
    let support = ladder_id(&t, "Support").await;
    orgs_of_type(&t, community, "Pace", 17).await;
    let act = change(&t, community, support, Some(Disposition::Migrate)).await.unwrap();
    pa::drain_plan_act(&t.db, act, None).await.unwrap();
    assert_eq!(
        scalar(&t, &format!("SELECT count(*) FROM core.plan_act_obligations WHERE plan_act_id = {act}")).await,
        20
    );
    // Stand the act where a poll would find it mid-way, older than the window: of its 20
    // organizations 5 are pending again, 5 settled five minutes ago, 10 in the last minute.
    t.run(sqlx::query(
        "UPDATE core.plan_acts SET state = 'running', finished_at = NULL, created_at = now() - interval '10 minutes'
         WHERE plan_act_id = $1",
    )
    .bind(act)).await;
    let stand = |recent: &'static str| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH o AS (SELECT pool_id, row_number() OVER (ORDER BY pool_id) AS n
                          FROM core.plan_act_obligations WHERE plan_act_id = $1)
             UPDATE core.plan_act_obligations p
                SET state = CASE WHEN o.n <= 5 THEN 'pending' ELSE 'migrated' END,
                    settled_at = CASE WHEN o.n <= 5 THEN NULL WHEN o.n <= 10 THEN now() - interval '5 minutes'
                                      ELSE now() - interval '{recent}' END
               FROM o WHERE p.plan_act_id = $1 AND p.pool_id = o.pool_id"
        )))
        .bind(act)
        .execute(&t.admin)
    };
    stand("20 seconds").await.unwrap();
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let progress = format!("/operator/plan-acts/{act}/progress");
    let partial = op.get(&progress).await.body;
    assert!(partial.contains(r#"hx-trigger="every 2s""#), "{partial}");
    assert!(partial.contains(&stat(15, "Done")), "{partial}");
    assert!(partial.contains(&stat(5, "Left")), "{partial}");
    assert!(partial.contains(&stat(0, "Failed")), "{partial}");
    // 10 in the last minute, not the 15 settled in all; 5 left at that pace take 30 seconds.
    let said = |value: &str, label: &str| {
        format!(
            r#"<span class="stat-value"><span class="stat-words">{value}</span></span><span class="stat-label">{label}</span>"#
        )
    };
    assert!(partial.contains(&said("10 a minute", "Rate")), "{partial}");
    assert!(partial.contains(&said("under a minute left", "Time left")), "{partial}");

    // Nothing settled in the last minute: waiting, and no time promised.
    stand("5 minutes").await.unwrap();
    let partial = op.get(&progress).await.body;
    assert!(partial.contains(&said("waiting", "Rate")), "{partial}");
    assert!(partial.contains(&said("not known yet", "Time left")), "{partial}");
    app.handle.stop(false).await;
}
