//! Browser tests: a person's flows through the running console in Debian's headless Chromium,
//! asserting on what they see. Each test has its own database, server, chromedriver and profile.
//! Needs `chromium` and `chromium-driver` (scripts/test installs them); fails without them.

use crate::common;

use common::{
    TestApp, TestDb,
    browser::{Browser, SIGNED_IN, Until, WAIT},
    pages::{app_with_demo, demo_db},
};
use member_console::demo;
use serde_json::Value;

#[tokio::test]
async fn a_member_signs_in_sees_home_is_refused_operations_and_signs_out() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            // Anonymous: the start page sends the person to sign in.
            b.goto(&app.url("/")).await;
            assert_eq!(b.path().await, "/login");
            b.submit_sign_in(demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;

            b.wait_for(SIGNED_IN, WAIT).await;
            assert_eq!(b.path().await, "/");
            assert_eq!(b.text_of("main h1").await, "Home");
            assert_eq!(b.text_of("header.topbar .user-email").await, demo::MEMBER_EMAIL);
            // Visible text, not markup: the home page's layout is free to change.
            let main = b.text_of("main").await;
            assert!(main.contains(demo::MEMBER_EMAIL), "home shows: {main}");
            assert!(main.contains(demo::DEMO_ORGANIZATION), "home shows: {main}");
            // The nav is there (so its check below is not vacuous) and offers no Operations.
            let nav = b.texts_of("header.topbar nav a").await;
            assert!(nav.iter().any(|l| l == "Home"), "nav: {nav:?}");
            assert!(!nav.iter().any(|l| l == "Operations"), "a member is offered Operations: {nav:?}");
            assert!(b.find_all("a[href='/operator']").await.is_empty());

            // Typing the address anyway gets the refusal, still signed in.
            b.goto(&app.url("/operator")).await;
            b.wait_for(Until::Text("This page is for operators."), WAIT).await;
            assert_eq!(b.text_of("main h1").await, "Operators only");
            assert_eq!(b.text_of("header.topbar .user-email").await, demo::MEMBER_EMAIL);

            // Back home through the nav, then sign out with the top bar's button.
            b.click("header.topbar nav a[href='/']").await;
            b.wait_for(Until::Path("/"), WAIT).await;
            assert_eq!(b.text_of("header.topbar form.signout button").await, "Sign out");
            b.click("header.topbar form.signout button").await;
            b.wait_for(Until::Path("/login"), WAIT).await;
            assert_eq!(b.text_of("main h1").await, "Sign in");
            assert!(b.find_all(".user-email").await.is_empty(), "the top bar still shows someone");

            // The session is over: the start page sends the person to sign in again.
            b.goto(&app.url("/")).await;
            assert_eq!(b.path().await, "/login");
            assert_eq!(b.text_of("main h1").await, "Sign in");
        })
        .await;
}

#[tokio::test]
async fn an_operator_signs_in_and_sees_operations() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/login"), demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD, SIGNED_IN).await;
            assert_eq!(b.text_of("header.topbar .user-email").await, demo::OPERATOR_EMAIL);
            assert_eq!(b.text_of("header.topbar .badge").await, "Operator");

            // The nav offers Operations; following it shows the overview.
            b.click("header.topbar nav a[href='/operator']").await;
            b.wait_for(Until::Path("/operator"), WAIT).await;
            assert_eq!(b.text_of("main h1").await, "Operations");
            assert_eq!(b.text_of("header.topbar nav a[aria-current='page']").await, "Operations");
            let accounts = b.texts_of("section[aria-labelledby='accounts-heading'] td").await;
            assert!(accounts.iter().any(|c| c == demo::MEMBER_EMAIL), "accounts table: {accounts:?}");
            assert!(accounts.iter().any(|c| c == demo::OPERATOR_EMAIL), "accounts table: {accounts:?}");
        })
        .await;
}

#[tokio::test]
async fn a_wrong_password_is_refused_on_the_sign_in_page_keeping_the_email() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            b.goto(&app.url("/login")).await;
            b.submit_sign_in(demo::MEMBER_EMAIL, "not-the-password").await;

            // The refusal appears in the sign-in card itself, not on a page of its own.
            let alert = b.wait_for(Until::Css(".signin-card .refusal[role='alert']"), WAIT).await;
            let shown = alert.text().await.unwrap();
            assert!(shown.contains("The email or the password is not right."), "refusal: {shown}");
            assert_eq!(b.path().await, "/login");
            assert_eq!(b.text_of("main h1").await, "Sign in");
            // The email is kept to correct; the password is not echoed back.
            assert_eq!(b.value_of("#email").await, demo::MEMBER_EMAIL);
            assert_eq!(b.value_of("#password").await, "");
            assert!(b.find_all(".user-email").await.is_empty(), "nobody is signed in");
        })
        .await;
}

#[tokio::test]
async fn htmx_requests_carry_the_csrf_header_from_the_body() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, SIGNED_IN).await;
            assert_eq!(b.execute("return typeof htmx.process", vec![]).await, "function", "htmx is loaded");

            // Control: the same POST without the token is refused and the session lives on, so
            // what ends it below is the header htmx adds.
            let status = b.execute("return fetch('/logout', {method: 'POST'}).then(r => r.status)", vec![]).await;
            assert_eq!(status, 403);
            b.goto(&app.url("/")).await;
            assert_eq!(b.path().await, "/", "still signed in after the refused POST");

            // As the console's own hx-post controls will: an element in <main>, no form and no
            // token of its own, relying on `hx-headers:inherited` on <body>.
            let added = b
                .execute(
                    "const b = document.createElement('button');
                     b.id = 'hx-sign-out';
                     b.setAttribute('hx-post', '/logout');
                     b.textContent = 'Sign out (htmx)';
                     document.querySelector('main').append(b);
                     htmx.process(b);
                     return b.closest('form') === null;",
                    vec![],
                )
                .await;
            assert_eq!(added, Value::Bool(true));
            b.click("#hx-sign-out").await;

            // The server answers HX-Redirect: /login, which htmx follows.
            b.wait_for(Until::Path("/login"), WAIT).await;
            assert_eq!(b.text_of("main h1").await, "Sign in");
            b.goto(&app.url("/")).await;
            assert_eq!(b.path().await, "/login", "the session ended");
        })
        .await;
}

#[tokio::test]
async fn an_organization_search_keeps_its_query_in_the_address_bar() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(
                &app.url("/login?next=/operator/organizations"),
                demo::OPERATOR_EMAIL,
                demo::OPERATOR_PASSWORD,
                Until::Path("/operator/organizations"),
            )
            .await;
            b.fill("#org-search", "glob").await;
            b.wait_for(Until::Text("matching “glob”"), WAIT).await;
            // The results came by htmx, and the address says what they are.
            let search = b.execute("return location.search", vec![]).await;
            assert_eq!(search, Value::String("?q=glob".into()));
            // So reloading, or sharing the address, shows the same results.
            let here = b.execute("return location.href", vec![]).await;
            b.goto(here.as_str().unwrap()).await;
            b.wait_for(Until::Text("matching “glob”"), WAIT).await;
            assert_eq!(b.value_of("#org-search").await, "glob");
            let names = b.texts_of("#org-results tbody td:first-child").await;
            assert_eq!(names, vec!["Globex".to_string()], "{names:?}");
        })
        .await;
}

#[tokio::test]
async fn a_member_buys_pro_on_the_stripe_stand_ins_page_and_sees_it_on_billing_and_home() {
    let (t, s) = common::stripe::demo_with_stripe().await;
    s.demo_prices(&t).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/billing"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, Until::Path("/billing"))
                .await;
            let before = b.text_of("main").await;
            assert!(before.contains("Free"), "the floor before buying: {before}");
            assert!(before.contains("€30.00 / month"), "Pro on sale: {before}");

            // Buy: the browser leaves for the stand-in's payment page (the page's policy lets it).
            b.click("button[aria-label^='Buy Pro at']").await;
            b.wait_for(Until::Css("#card-number"), WAIT).await;
            assert!(b.path().await.starts_with("/c/pay/cs_"), "on Stripe's page: {}", b.path().await);
            b.fill("#card-number", "4242 4242 4242 4242").await;
            b.click_button("Pay").await;

            // Back on the console with the plan in force.
            b.wait_for(Until::Text("Payment received"), WAIT).await;
            b.keep_step(1, "payment-received").await;
            assert_eq!(b.path().await, "/billing");
            let after = b.text_of("main").await;
            assert!(after.contains("Pro"), "billing shows Pro: {after}");
            assert!(after.contains("current plan"), "Pro is the current plan: {after}");
            b.goto(&app.url("/")).await;
            let home = b.text_of("main").await;
            assert!(
                home.contains("Pro") && home.contains("your subscription"),
                "home shows Pro by subscription: {home}"
            );
            assert!(home.contains("10"), "ten active sites: {home}");
        })
        .await;
}

#[tokio::test]
async fn a_member_upgrades_seeing_the_amount_first_then_schedules_a_downgrade_and_undoes_it() {
    let (t, s) = common::stripe::demo_with_stripe().await;
    let (basic, _) = s.demo_prices(&t).await;
    // The demo organization pays for Basic.
    let org = member_console::ids::OrganizationId(
        common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await,
    );
    let customer = s.customer(&t.db, org, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, org).await;
    member_console::services::billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/billing"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, Until::Path("/billing"))
                .await;

            // Upgrade: the amount first, then the plan in force at once.
            b.click("button[aria-label^='Switch to Pro at']").await;
            b.wait_for(Until::Text("You will be charged"), WAIT).await;
            let quote = b.text_of("main").await;
            assert!(quote.contains("from Basic to Pro"), "{quote}");
            b.click_button("Switch now and pay").await;
            b.wait_for(Until::Text("Switched: the new plan is in force now"), WAIT).await;
            b.keep_step(1, "switched-now").await;
            b.goto(&app.url("/")).await;
            let home = b.text_of("main").await;
            assert!(home.contains("Pro") && home.contains("10"), "home shows Pro, ten active sites: {home}");

            // Downgrade at the period's end, shown, then undone.
            b.goto(&app.url("/billing")).await;
            b.click("button[aria-label^='Switch to Basic at']").await;
            b.wait_for(Until::Text("You keep Pro until"), WAIT).await;
            b.click_button("Schedule the switch").await;
            b.wait_for(Until::Text("Scheduled: you keep the current plan"), WAIT).await;
            b.keep_step(2, "switch-scheduled").await;
            let page = b.text_of("main").await;
            assert!(page.contains("Pro until") && page.contains(", then Basic"), "{page}");
            b.click("button[aria-label^='Undo: Pro until']").await;
            b.wait_for(Until::Text("The scheduled change is undone"), WAIT).await;
            let page = b.text_of("main").await;
            assert!(!page.contains(", then Basic"), "nothing is scheduled any more: {page}");
        })
        .await;
}

#[tokio::test]
async fn an_operator_grant_pauses_the_members_subscription_and_resume_plan_brings_it_back() {
    let (t, s) = common::stripe::demo_with_stripe().await;
    let basic = s.price(&t.db, common::acts::product_id(&t, "Basic").await, "12").await;
    let org = member_console::ids::OrganizationId(
        common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await,
    );
    let customer = s.customer(&t.db, org, "pm_card_visa", None).await;
    let sub = s.subscribe(&customer, &s.stripe_price(&t.admin, basic).await, org).await;
    member_console::services::billing::reconcile_subscription(&t.db, &s.stripe, &sub).await.unwrap();
    // An operator grants Pro; the outbox's reconcile pauses the subscription's collection.
    common::acts::grant(&t, org, common::acts::product_id(&t, "Pro").await).await;
    member_console::services::billing::process_outbox(&t.db, &s.stripe, 20, member_console::jobs::DEFAULT_LEASE)
        .await
        .unwrap();
    assert!(!s.get(&format!("/subscriptions/{sub}")).await["pause_collection"].is_null(), "paused in Stripe");
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(
                &app.url("/"),
                demo::MEMBER_EMAIL,
                demo::MEMBER_PASSWORD,
                Until::Text("An operator grant gives you Pro"),
            )
            .await;
            b.keep_step(1, "paused-by-a-grant").await;
            let home = b.text_of("main").await;
            assert!(home.contains("in place of your Basic subscription, which is paused"), "{home}");
            b.click_button("Resume plan").await;
            b.wait_for(Until::Text("Resumed: your subscription's plan is in force again"), WAIT).await;
            b.keep_step(2, "resumed").await;
            assert_eq!(b.path().await, "/billing");
            let page = b.text_of("main").await;
            assert!(!page.contains("An operator grant gives you Pro"), "{page}");
            assert!(page.contains("Basic") && page.contains("your subscription"), "{page}");
        })
        .await;
    // The outbox's reconcile resumes collection in Stripe.
    member_console::services::billing::process_outbox(&t.db, &s.stripe, 20, member_console::jobs::DEFAULT_LEASE)
        .await
        .unwrap();
    assert!(s.get(&format!("/subscriptions/{sub}")).await["pause_collection"].is_null(), "collection resumed");
}

/// A site's row on `/sites`, by the name its domain starts with.
pub(crate) fn site_row(name: &str) -> String {
    format!("tr:has(a[href*='//{name}.wiki.localhost'])")
}

/// Each site created through `/sites`'s form, the page followed until it says the site is active.
pub(crate) async fn create_active_sites(b: &Browser, names: &[&str], within: std::time::Duration) {
    for name in names {
        b.fill("input[name='name']", name).await;
        b.click_button("Create site").await;
        b.wait_for(Until::Text(&format!("{name}.wiki.localhost was created and is active.")), within).await;
    }
}

/// Create one site more than the plan allows active: it is made parked.
pub(crate) async fn create_parked_site(b: &Browser, name: &str, within: std::time::Duration) {
    b.fill("input[name='name']", name).await;
    b.click_button("Create site").await;
    b.wait_for(Until::Text(&format!("{name}.wiki.localhost was created parked")), within).await;
}

/// Follow the site's Edit link from the sites page: the farm serves the real wiki there, and the
/// FedWiki client renders the page's story (a paragraph of Welcome Visitors), its journal and the
/// owner's edit tools, with no resource missing and no error in the console.
pub(crate) async fn open_on_the_farm(b: &Browser, name: &str, within: std::time::Duration) {
    let edit = b.find(&format!("{} a[aria-label='Edit {name}.wiki.localhost']", site_row(name))).await;
    // The link opens a new tab for a person; the test follows it in this one.
    let url = edit.prop("href").await.unwrap().expect("the Edit link's address");
    // What the console's own pages logged is not the wiki's.
    b.page_problems().await;
    b.goto(&url).await;
    wiki_rendered(b, "Welcome to this", within).await;
}

/// The FedWiki client rendered the page: a paragraph holding `text` in the story, the journal
/// (which only the client draws), the owner's edit toggle; no 404 and no console error.
pub(crate) async fn wiki_rendered(b: &Browser, text: &str, within: std::time::Duration) {
    b.wait_for(Until::Css(".page .journal .action"), within).await;
    let paragraphs = b.texts_of(".page .story .item.paragraph").await;
    assert!(paragraphs.iter().any(|p| p.contains(text)), "no paragraph with {text:?}: {paragraphs:?}");
    assert!(b.find_all("footer .editEnable").await.len() == 1, "the client's edit toggle is in the footer");
    let problems = b.page_problems().await;
    assert!(problems.is_empty(), "the wiki page had problems: {problems:?}");
}

/// Swap on `/sites`: the site to activate and the one to park, by id, then the Swap button.
pub(crate) async fn swap_sites(b: &Browser, activate: member_console::ids::SiteId, park: member_console::ids::SiteId) {
    b.execute(
        "document.querySelector('select[name=activate]').value = arguments[0];
         document.querySelector('select[name=park]').value = arguments[1];",
        vec![Value::String(activate.into_string()), Value::String(park.into_string())],
    )
    .await;
    b.click_button("Swap").await;
}

/// A worker of the test's own running the sites' jobs against `farm`.
pub(crate) fn site_worker(
    t: &TestDb,
    farm: std::sync::Arc<member_console::integrations::farm::Farm>,
) -> tokio::sync::watch::Sender<bool> {
    use member_console::jobs::{Worker, WorkerOptions};
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let farm = member_console::job_registry::FarmJobs::new(farm, &member_console::config::FarmSettings::default());
    let handlers = member_console::job_registry::handlers_connected(None, Some(farm));
    let options = WorkerOptions { poll_interval: std::time::Duration::from_millis(200), ..WorkerOptions::default() };
    tokio::spawn(Worker::new(t.db.clone(), handlers, 4).with_options(options).run(stopped));
    stop
}

#[tokio::test]
async fn a_member_creates_a_site_opens_the_real_wiki_parks_swaps_and_is_refused_a_fourth_active_site() {
    let t = demo_db().await;
    let org = common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await;
    common::acts::grant(&t, member_console::ids::OrganizationId(org), common::acts::product_id(&t, "Basic").await)
        .await;
    let f = common::farm::FarmFixture::start_with(local_farm::WikiMode::Auto, std::time::Duration::from_secs(30)).await;
    assert!(f.local.wiki_running(), "the real FedWiki server must run for this test: {}", local_farm::install_hint());
    let app = TestApp::spawn_connected(&t, None, Some(f.farm.clone())).await;
    let _worker = site_worker(&t, f.farm.clone());
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/sites"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, Until::Path("/sites")).await;
            assert!(b.text_of("main").await.contains("0 of 3 active"));

            // Create three sites; the page follows each request until it is done.
            create_active_sites(b, &["alpha", "beta", "gamma"], WAIT).await;
            b.wait_for(Until::Text("3 of 3 active"), WAIT).await;
            b.keep_step(1, "three-sites").await;

            // The site's address answers with the real wiki.
            open_on_the_farm(b, "alpha", WAIT).await;
            b.keep_step(2, "the-wiki-on-the-farm").await;
            b.goto(&app.url("/sites")).await;

            // A fourth is created parked, and activating it is refused with the reason.
            create_parked_site(b, "delta", WAIT).await;
            b.click(&format!("{} button[aria-label='Activate delta.wiki.localhost']", site_row("delta"))).await;
            b.wait_for(Until::Text("3 of 3 active sites are in use: park one or upgrade your plan"), WAIT).await;

            // Park alpha, then swap: gamma out, alpha back in.
            b.click(&format!("{} button[aria-label='Park alpha.wiki.localhost']", site_row("alpha"))).await;
            b.wait_for(Until::Text("alpha.wiki.localhost is parked."), WAIT).await;
            swap_sites(b, common::farm::site_id(&t, "alpha").await, common::farm::site_id(&t, "gamma").await).await;
            b.wait_for(Until::Text("alpha.wiki.localhost is active and gamma.wiki.localhost is parked."), WAIT).await;
            b.keep_step(3, "swapped").await;
            assert!(b.text_of("main").await.contains("You can swap again in 10 minutes"));
            // The parked site's address says so.
            b.goto(&f.farm.site_url(&member_console::ids::SiteDomain::from("gamma.wiki.localhost"))).await;
            b.wait_for(Until::Text("parked"), WAIT).await;
        })
        .await;
}
