//! Whole journeys in Chromium, each step's page kept as a screenshot in
//! `target/browser-screenshots/<test>/`: what an operator sees from the overview to a plan act
//! that reaches its organizations.

use crate::common;

use std::time::Duration;

use common::{
    acts::scalar,
    browser::{Browser, SIGNED_IN, Until},
    pages::app_with_demo,
};
use member_console::demo;

/// How long one step may take: a page load, an htmx swap, a plan act finishing.
const STEP: Duration = Duration::from_secs(15);

#[tokio::test]
async fn an_operator_reads_the_overview_and_the_ladders_then_changes_a_default_and_follows_its_act_to_done() {
    let (t, app) = app_with_demo().await;
    let community = scalar(&t, "SELECT org_type_id FROM core.org_types WHERE name = 'Community'").await;
    let support = scalar(&t, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = 'Support'").await;
    let wiki = scalar(&t, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = 'Wiki hosting'").await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/login"), demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD, SIGNED_IN).await;

            // The overview: every subsystem's health, and the last hour's charts.
            b.goto(&app.url("/operator")).await;
            b.wait_for(Until::Css("#health-heading"), STEP).await;
            let names = b.texts_of("ul.health .subsystem-name").await;
            assert_eq!(names, ["Jobs", "Drains", "Outbox", "Stripe", "Farm", "Relay"]);
            let states = b.texts_of("ul.health .subsystem-head .badge").await;
            assert_eq!(states.len(), 6, "{states:?}");
            assert_eq!(states[3], "Not connected", "the test's console has no Stripe: {states:?}");
            let charts = b.texts_of("figure.chart .chart-title").await;
            assert_eq!(charts, ["Requests per minute", "Jobs queued", "Drain moves owed"]);
            b.keep_step(1, "overview").await;

            // The topology as a picture: Wiki hosting's rungs from the floor up, and Community
            // pointing at its floor.
            b.goto(&app.url("/operator/topology")).await;
            b.wait_for(Until::Css(".topology-picture svg"), STEP).await;
            let rungs = b.text_contents_of(&format!("#ladder-{wiki}-picture .rung-text")).await;
            assert_eq!(rungs.len(), 3, "{rungs:?}");
            assert!(rungs[0].starts_with("Rank 0, the floor: Free"), "{rungs:?}");
            let defaults = b.text_contents_of(&format!("#ladder-{wiki}-picture .default-text")).await;
            assert!(defaults.iter().any(|d| d.starts_with("Community")), "{defaults:?}");
            b.keep_step(2, "topology").await;

            // Community's default moves to Support, its holders migrating; the browser lands on
            // the act, which runs to done and then says so.
            let form = format!("#default-change-{community}");
            b.find(&format!("{form} select[name='plan_ladder_id']"))
                .await
                .select_by_value(&support.to_string())
                .await
                .unwrap();
            b.find(&format!("{form} select[name='disposition']")).await.select_by_value("migrate").await.unwrap();
            for button in b.find_all(&format!("{form} button")).await {
                if button.text().await.unwrap_or_default().trim() == "Change default" {
                    button.click().await.unwrap();
                    break;
                }
            }
            b.wait_for(Until::Css("#plan-act-progress"), STEP).await;
            assert!(b.path().await.starts_with("/operator/plan-acts/"), "{}", b.path().await);
            b.wait_for(Until::Text("Done: this act has finished"), STEP).await;
            let labels = b.texts_of("#plan-act-progress .pace-stats .stat-label").await;
            assert_eq!(labels, ["Done", "Left", "Failed"], "a finished act shows no rate or time left");
            b.keep_step(3, "plan-act-done").await;

            // Back on the topology, Community's floor is now Support's.
            b.goto(&app.url("/operator/topology")).await;
            b.wait_for(Until::Css(".topology-picture svg"), STEP).await;
            let defaults = b.text_contents_of(&format!("#ladder-{support}-picture .default-text")).await;
            assert!(defaults.iter().any(|d| d.starts_with("Community")), "{defaults:?}");
            b.keep_step(4, "topology-after").await;
        })
        .await;
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.plan_acts WHERE state = 'done'").await, 1);
}

/// The demo member signs in through the form.
async fn member_signs_in(b: &Browser, app: &common::TestApp) {
    b.sign_in_at(&app.url("/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, SIGNED_IN).await;
}

#[tokio::test]
async fn a_member_sees_a_downgrade_park_the_least_recently_modified_sites_and_an_upgrade_bring_them_back() {
    use crate::{
        browser::site_row,
        sites::{app, setup},
    };
    use member_console::services::{fedwiki::maintenance, grants};
    let s = setup("Free").await;
    let basic = common::acts::product_id(&s.t, "Basic").await;
    let grant = common::acts::grant(&s.t, s.org, basic).await;
    for name in ["alpha", "beta", "gamma"] {
        s.created(name).await;
    }
    // alpha was modified longest ago but is kept active; gamma most recently.
    for (name, days, keep) in [("alpha", 3, true), ("beta", 2, false), ("gamma", 1, false)] {
        s.t.run(sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE fedwiki.sites SET modified_at = now() - interval '{days} days', keep_active = {keep}
              WHERE domain = '{name}.wiki.localhost'"
        ))))
        .await;
    }
    let app = app(&s).await;
    Browser::start()
        .await
        .run(async |b| {
            member_signs_in(b, &app).await;
            b.goto(&app.url("/sites")).await;
            b.wait_for(Until::Text("3 of 3 active"), STEP).await;
            b.keep_step(1, "three-active").await;

            // The grant that gave Basic ends: Free allows one active site. The next maintenance
            // run parks the two least recently modified that are not kept active.
            grants::revoke_grant(
                &s.t.db,
                grant,
                None,
                &member_console::services::grants::Reason::parse("downgrade").unwrap(),
            )
            .await
            .unwrap();
            let c = maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
            assert_eq!(c.parked, 2, "{c:?}");
            b.goto(&app.url("/sites")).await;
            b.wait_for(Until::Text("Parked because the plan allows 1 active site"), STEP).await;
            assert!(b.text_of(&site_row("alpha")).await.contains("active"), "{}", b.text_of(&site_row("alpha")).await);
            for name in ["beta", "gamma"] {
                let text = b.text_of(&site_row(name)).await;
                assert!(text.contains("parked"), "{name}: {text}");
            }
            b.keep_step(2, "parked-after-the-downgrade").await;

            // Basic again: the next run brings both back.
            common::acts::grant(&s.t, s.org, basic).await;
            let c = maintenance::reconcile_quota_now(&s.t.db, &s.f.farm).await.unwrap();
            assert_eq!(c.reactivated, 2, "{c:?}");
            b.goto(&app.url("/sites")).await;
            b.wait_for(Until::Text("3 of 3 active"), STEP).await;
            assert!(!b.text_of("main").await.contains("Parked because"), "{}", b.text_of("main").await);
            b.keep_step(3, "back-after-the-upgrade").await;
        })
        .await;
}

#[tokio::test]
async fn a_new_member_buys_basic_creates_sites_opens_one_on_the_farm_and_swaps() {
    use crate::browser::{
        create_active_sites, create_parked_site, open_on_the_farm, site_row, site_worker, swap_sites,
    };
    use common::farm::site_id;
    let (t, s) = common::stripe::demo_with_stripe().await;
    s.price(&t.db, common::acts::product_id(&t, "Basic").await, "12").await;
    let f = common::farm::FarmFixture::start_with(local_farm::WikiMode::Auto, Duration::from_secs(30)).await;
    assert!(f.local.wiki_running(), "the real FedWiki server must run for this test: {}", local_farm::install_hint());
    let app = common::TestApp::spawn_connected(&t, Some(s.stripe.clone()), Some(f.farm.clone())).await;
    let _worker = site_worker(&t, f.farm.clone());
    Browser::start()
        .await
        .run(async |b| {
            member_signs_in(b, &app).await;

            // On Free, one active site; Basic is on sale.
            b.goto(&app.url("/billing")).await;
            let billing = b.text_of("main").await;
            assert!(billing.contains("€12.00 / month"), "Basic on sale: {billing}");
            b.keep_step(1, "billing-on-free").await;

            // Buy Basic on Stripe's page, and come back with it in force.
            b.click("button[aria-label^='Buy Basic at']").await;
            b.wait_for(Until::Css("#card-number"), STEP).await;
            b.fill("#card-number", "4242 4242 4242 4242").await;
            b.keep_step(2, "paying-on-stripe").await;
            b.click_button("Pay").await;
            b.wait_for(Until::Text("Payment received"), STEP).await;
            assert!(b.text_of("main").await.contains("current plan"), "{}", b.text_of("main").await);
            b.keep_step(3, "basic-bought").await;

            // Basic's three active sites: create them, each followed until it is done.
            b.goto(&app.url("/sites")).await;
            b.wait_for(Until::Text("0 of 3 active"), STEP).await;
            create_active_sites(b, &["alpha", "beta", "gamma"], STEP).await;
            b.wait_for(Until::Text("3 of 3 active"), STEP).await;
            b.keep_step(4, "three-sites").await;

            // One opens on the farm as the real wiki.
            open_on_the_farm(b, "beta", STEP).await;
            b.keep_step(5, "beta-on-the-farm").await;

            // A fourth is made parked; the swap brings it in and parks gamma.
            b.goto(&app.url("/sites")).await;
            create_parked_site(b, "delta", STEP).await;
            swap_sites(b, site_id(&t, "delta").await, site_id(&t, "gamma").await).await;
            b.wait_for(Until::Text("delta.wiki.localhost is active and gamma.wiki.localhost is parked."), STEP).await;
            b.keep_step(6, "swapped").await;
            assert!(b.text_of(&site_row("gamma")).await.contains("parked"), "{}", b.text_of(&site_row("gamma")).await);
            open_on_the_farm(b, "delta", STEP).await;
            b.keep_step(7, "delta-on-the-farm").await;
        })
        .await;
    // Paid once: one subscription, in force; four sites, three active.
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.subscriptions WHERE status = 'active'").await, 1);
    assert_eq!(scalar(&t, "SELECT count(*) FROM fedwiki.sites WHERE status = 'active'").await, 3);
    assert_eq!(scalar(&t, "SELECT count(*) FROM fedwiki.sites WHERE status = 'parked'").await, 1);
}
