//! The tier reorder (ReorderTiers): keeping or changing rank 0, the refusals, T0's locks, a reorder over an earlier default change.

use super::*;

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
