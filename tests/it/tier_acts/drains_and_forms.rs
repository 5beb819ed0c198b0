//! Retry beside a listing batch, listings and drains of one act, the previews, and the operator's forms over HTTP.

use super::*;

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
