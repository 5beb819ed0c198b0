//! Tier removal (RemoveTier): migrate, grandfather, the floor of a default ladder, the refusals, the lock order.

use super::*;

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
