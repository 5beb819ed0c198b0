//! The billing pages over HTTP: prices and the sync to Stripe on the operator's product page, the
//! member's `/billing` (plan, subscriptions, tiers to buy, invoices), the checkout and its return,
//! and the operator's billing overview.
//!
//! No Stripe is connected unless a test says so: then either an address nothing answers (any
//! call is a 503, so an answer that is not one proves no call was made) or the project's Stripe
//! stand-in, whose payment page the test pays on as a browser would.
//! The subscriptions, invoices, outbox rows and events a page shows are fixture rows written with
//! the administrator's pool.

use crate::common;

use std::{sync::Arc, time::Duration};

use common::{
    TEST_RUNTIME_PASSWORD, TestApp, TestDb,
    acts::scalar,
    pages::{
        Answer, Session, app_with_demo, assert_sent_to, demo_db, get, operator_session, organization_id, product_id,
    },
};
use member_console::{demo, integrations::stripe::Stripe};
use reqwest::StatusCode;

// ---------- Harness ----------

/// Every price and the billing outbox, as text: what a refused act must leave as it was.
async fn prices_snapshot(t: &TestDb) -> String {
    t.one(sqlx::query_scalar(
        "SELECT concat_ws(E'\\n',
            (SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s', price_id, product_id, billing_interval, amount_minor,
                                      currency, active, sync_state), ';' ORDER BY price_id) FROM billing.prices),
            (SELECT string_agg(format('%s|%s', product_id, sync_state), ';' ORDER BY product_id)
               FROM billing.product_mappings),
            (SELECT string_agg(format('%s|%s|%s', outbox_id, kind, product_id), ';' ORDER BY outbox_id) FROM core.outbox))",
    )).await
}

/// A price as the sync would leave it once Stripe had it (or not, with `stripe_id` None).
async fn price_row(t: &TestDb, product: i64, interval: &str, minor: i64, active: bool, stripe_id: Option<&str>) -> i64 {
    t.one(
        sqlx::query_scalar(
            "INSERT INTO billing.prices (product_id, billing_interval, amount_minor, currency, active, stripe_price_id,
                                     stripe_active, sync_state)
         VALUES ($1, $2, $3, 'eur', $4, $5, CASE WHEN $5::text IS NULL THEN NULL ELSE $4 END,
                 CASE WHEN $5::text IS NULL THEN 'unsynced' ELSE 'synced' END)
         RETURNING price_id",
        )
        .bind(product)
        .bind(interval)
        .bind(minor)
        .bind(active)
        .bind(stripe_id),
    )
    .await
}

async fn pending_syncs(t: &TestDb, product: i64) -> i64 {
    scalar(
        t,
        &format!(
            "SELECT count(*) FROM core.outbox WHERE kind = 'sync_product' AND product_id = {product} AND processed_at IS NULL"
        ),
    )
    .await
}

fn product_page(id: i64) -> String {
    format!("/operator/catalog/products/{id}")
}

/// Follow a plain post's 303 (or an HTMX post's HX-Redirect) to the page it names.
async fn follow(s: &Session, a: &Answer) -> Answer {
    let to = a.header("location").or(a.header("hx-redirect")).unwrap_or_else(|| panic!("no redirect: {}", a.body));
    s.get(to).await
}

/// The member's session, with the demo member as an owner of Acme Wikis.
async fn signed_in_member(app: &TestApp) -> Session {
    Session::sign_in(app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await
}

/// A console whose Stripe client points at an address nothing answers: any Stripe call fails
/// (a 503 with its sentence), so an answer that is not a 503 proves no call was made.
async fn app_with_unreachable_stripe(t: &TestDb) -> TestApp {
    app_with_stripe_at(t, "http://127.0.0.1:9/").await
}

async fn app_with_stripe_at(t: &TestDb, api_base: &str) -> TestApp {
    let dir = std::env::temp_dir().join(format!("mc-test-{}", t.name));
    let config = member_console::config::Config::from_lookup(|k| match k {
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(TEST_RUNTIME_PASSWORD.into()),
        _ => None,
    })
    .unwrap();
    let stripe = Stripe::connect("sk_test_fake", Some(api_base), vec![], Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("a Stripe client: {e:?}"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server =
        member_console::web::serve_with(listener, t.db.clone(), Arc::new(config), Some(Arc::new(stripe))).unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    TestApp { base, handle }
}

// ---------- 1. Prices on the product page ----------

#[tokio::test]
async fn an_operator_sets_a_price_and_sees_it_on_the_product_page() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    let page = product_page(basic);

    let empty = op.get(&page).await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(empty.body.contains("No prices yet."), "{}", empty.body);
    assert!(empty.body.contains(r#"name="currency" type="text" value="eur""#), "eur by default: {}", empty.body);

    let fields = [("interval", "month"), ("amount", "12"), ("currency", "EUR")];
    let a = op.post(&format!("{page}/prices"), &fields, false).await;
    assert_sent_to(&a, false, &format!("{page}?price=set"));
    let shown = follow(&op, &a).await;
    assert!(shown.body.contains("The price was set."), "{}", shown.body);
    assert!(shown.body.contains("€12.00 / month"), "{}", shown.body);
    assert!(shown.body.contains("not synced"), "{}", shown.body);
    let (minor, currency, active): (i64, String, bool) = t
        .one(
            sqlx::query_as("SELECT amount_minor, currency, active FROM billing.prices WHERE product_id = $1")
                .bind(basic),
        )
        .await;
    assert_eq!((minor, currency.as_str(), active), (1200, "eur", true));

    // From HTMX: the same, with HX-Redirect; another currency is worded in its own.
    let fields = [("interval", "year"), ("amount", "99.5"), ("currency", "usd")];
    let a = op.post(&format!("{page}/prices"), &fields, true).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let shown = follow(&op, &a).await;
    assert!(shown.body.contains("$99.50 / year"), "{}", shown.body);
}

#[tokio::test]
async fn a_bad_amount_currency_or_interval_is_422_with_its_message_and_writes_nothing() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    let action = format!("{}/prices", product_page(basic));
    let before = prices_snapshot(&t).await;
    let cases: [(&[(&str, &str)], &str); 6] = [
        (&[("interval", "month"), ("amount", "twelve"), ("currency", "eur")], "is not an amount such as 12 or 12.50"),
        (&[("interval", "month"), ("amount", "0"), ("currency", "eur")], "A price must be more than zero."),
        (&[("interval", "month"), ("amount", "1.234"), ("currency", "eur")], "is not an amount"),
        (&[("interval", "month"), ("amount", "12"), ("currency", "euro")], "is not a currency code"),
        (&[("interval", "week"), ("amount", "12"), ("currency", "eur")], "per month or per year"),
        (&[("interval", "month"), ("amount", "12"), ("currency", "eur"), ("colour", "red")], "no field “colour”"),
    ];
    for (fields, message) in cases {
        for htmx in [false, true] {
            let a = op.post(&action, fields, htmx).await;
            let case = format!("{fields:?} (htmx: {htmx})");
            assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {}", a.body);
            assert!(a.body.contains(message), "{case} says {message:?}: {}", a.body);
            assert!(a.header("location").is_none() && a.header("hx-redirect").is_none(), "{case}");
            if message != "no field “colour”" {
                if htmx {
                    assert!(!a.body.contains("<html"), "{case}: the section alone");
                } else {
                    assert!(a.body.contains("<html") && a.body.contains("id=\"product-edit\""), "{case}: the page");
                }
                assert!(a.body.contains("id=\"product-prices\""), "{case}: the prices section comes back");
                assert!(a.body.contains("Nothing was saved: correct the fields marked below."), "{case}");
            }
        }
    }
    assert_eq!(prices_snapshot(&t).await, before, "nothing was written");
}

#[tokio::test]
async fn the_same_price_twice_is_409_and_a_new_amount_archives_the_old_one() {
    let (t, op) = operator_session().await;
    let pro = product_id(&t, "Pro").await;
    let action = format!("{}/prices", product_page(pro));
    let fields = [("interval", "month"), ("amount", "20.00"), ("currency", "eur")];
    assert_eq!(op.post(&action, &fields, false).await.status, StatusCode::SEE_OTHER);
    let before = prices_snapshot(&t).await;

    let same = [("interval", "month"), ("amount", "20"), ("currency", "EUR")];
    for htmx in [false, true] {
        let a = op.post(&action, &same, htmx).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
        assert!(a.body.contains("The product already has this price."), "{}", a.body);
        assert!(a.body.contains("id=\"product-prices\""));
    }
    assert_eq!(prices_snapshot(&t).await, before, "nothing was written");

    let new = [("interval", "month"), ("amount", "25"), ("currency", "eur")];
    assert_eq!(op.post(&action, &new, false).await.status, StatusCode::SEE_OTHER);
    let rows: Vec<(i64, bool)> = t
        .all(
            sqlx::query_as("SELECT amount_minor, active FROM billing.prices WHERE product_id = $1 ORDER BY price_id")
                .bind(pro),
        )
        .await;
    assert_eq!(rows, vec![(2000, false), (2500, true)]);
    let page = op.get(&product_page(pro)).await;
    assert!(page.body.contains("€25.00 / month"), "{}", page.body);
    assert!(page.body.contains("€20.00 / month"), "{}", page.body);
    assert!(page.body.contains(">archived</span>"), "{}", page.body);
}

#[tokio::test]
async fn archiving_a_price_stops_it_and_archiving_it_again_is_refused() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    let price = price_row(&t, basic, "month", 500, true, None).await;
    let page = op.get(&product_page(basic)).await;
    let archive = format!("/operator/catalog/prices/{price}/archive");
    assert!(page.body.contains(&format!("action=\"{archive}\"")), "an Archive button: {}", page.body);

    let a = op.post(&archive, &[], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let shown = follow(&op, &a).await;
    assert!(shown.body.contains("The price was archived."), "{}", shown.body);
    assert!(!shown.body.contains(&format!("action=\"{archive}\"")), "no Archive button on an archived price");
    let active: bool =
        t.one(sqlx::query_scalar("SELECT active FROM billing.prices WHERE price_id = $1").bind(price)).await;
    assert!(!active);

    let again = op.post(&archive, &[], true).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(again.body.contains("This price is archived already."), "{}", again.body);
    let unknown = op.post("/operator/catalog/prices/999999/archive", &[], false).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn two_sync_clicks_leave_one_pending_sync_and_the_second_says_a_sync_is_already_waiting() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    let page = product_page(basic);
    for (amount, interval) in [("5", "month"), ("50", "year")] {
        let fields = [("interval", interval), ("amount", amount), ("currency", "eur")];
        assert_eq!(op.post(&format!("{page}/prices"), &fields, false).await.status, StatusCode::SEE_OTHER);
    }

    let first = op.post(&format!("{page}/sync"), &[], false).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
    let shown = follow(&op, &first).await;
    assert!(shown.body.contains("Sync queued: the product and 2 prices."), "{}", shown.body);
    assert!(shown.body.contains(">pending</span>"), "the prices show pending: {}", shown.body);
    assert_eq!(pending_syncs(&t, basic).await, 1);

    let second = op.post(&format!("{page}/sync"), &[], true).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let shown = follow(&op, &second).await;
    assert!(shown.body.contains("A sync is already waiting"), "{}", shown.body);
    assert_eq!(pending_syncs(&t, basic).await, 1, "still exactly one pending sync");
    assert_eq!(scalar(&t, "SELECT count(*) FROM core.outbox").await, 1);
}

#[tokio::test]
async fn a_product_stripe_has_whole_says_so_and_the_sync_writes_nothing() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    t.run(
        sqlx::query(
            "INSERT INTO billing.product_mappings (product_id, stripe_product_id, synced_name, sync_state, synced_at)
         VALUES ($1, 'prod_basic', 'Basic', 'synced', now())",
        )
        .bind(basic),
    )
    .await;
    price_row(&t, basic, "month", 500, true, Some("price_basic_m")).await;
    let before = prices_snapshot(&t).await;

    let a = op.post(&format!("{}/sync", product_page(basic)), &[], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let shown = follow(&op, &a).await;
    assert!(shown.body.contains("Stripe already has everything"), "{}", shown.body);
    assert!(shown.body.contains("<code>prod_basic</code>"), "the product's Stripe id: {}", shown.body);
    assert!(shown.body.contains("<code>price_basic_m</code>"), "the price's Stripe id: {}", shown.body);
    assert_eq!(prices_snapshot(&t).await, before, "nothing was written");
    assert_eq!(pending_syncs(&t, basic).await, 0);

    let missing = op.post("/operator/catalog/products/999999/sync", &[], false).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_failed_sync_shows_its_reason_on_the_product_page() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await;
    t.run(
        sqlx::query(
            "INSERT INTO billing.product_mappings (product_id, sync_state, last_error)
         VALUES ($1, 'failed', 'Stripe said: No such tax code')",
        )
        .bind(basic),
    )
    .await;
    let page = op.get(&product_page(basic)).await;
    assert!(page.body.contains(">failed</span>"), "{}", page.body);
    assert!(page.body.contains("Stripe said: No such tax code"), "{}", page.body);
}

// ---------- 2. The member's billing page ----------

/// Acme Wikis (the demo member owns it): an operator grant of Priority support, a past-due
/// subscription to Priority support (so the Support ladder is paid for), invoices; Globex (not the member's) a subscription and an invoice of its own.
/// Prices: Basic and Priority support synced, Pro active but not in Stripe, Free synced but the
/// floor, an archived Basic price. Returns (Acme, Basic's price, Priority support's price).
async fn billing_fixture(t: &TestDb) -> (i64, i64, i64) {
    let acme = organization_id(t, demo::DEMO_ORGANIZATION).await;
    let globex = organization_id(t, "Globex").await;
    let (free, basic, pro, priority) = (
        product_id(t, "Free").await,
        product_id(t, "Basic").await,
        product_id(t, "Pro").await,
        product_id(t, "Priority support").await,
    );
    common::acts::grant(t, member_console::ids::OrganizationId(acme), member_console::ids::ProductId(priority)).await;
    let basic_price = price_row(t, basic, "month", 500, true, Some("price_basic_m")).await;
    price_row(t, basic, "year", 4000, false, Some("price_basic_y_old")).await;
    price_row(t, pro, "month", 1500, true, None).await;
    price_row(t, free, "month", 100, true, Some("price_free_m")).await;
    let priority_price = price_row(t, priority, "month", 300, true, Some("price_priority_m")).await;

    for (org, stripe_id, status) in [(acme, "sub_acme", "past_due"), (globex, "sub_globex_secret", "active")] {
        let sub: i64 = t.one(sqlx::query_scalar(
            "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status, current_period_end,
                                             cancel_at_period_end)
             VALUES ($1, $2, $3, '2027-01-31T00:00:00Z', $4) RETURNING subscription_id",
        )
        .bind(org)
        .bind(stripe_id)
        .bind(status)
        .bind(org == acme)).await;
        t.run(sqlx::query(
            "INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, quantity, stripe_price_id)
             VALUES ($1, $2, $3, 1, 'price_priority_m')",
        )
        .bind(sub)
        .bind(format!("si_{stripe_id}"))
        .bind(priority)).await;
    }
    // Thirty paid invoices a month apart (only the newest 24 show), an open one, and Globex's.
    t.run(sqlx::query(
        "INSERT INTO billing.invoices (stripe_invoice_id, organization_id, stripe_customer_id, number, status, currency,
             amount_due, amount_paid, amount_remaining, hosted_invoice_url, stripe_created, observed_at)
         SELECT 'in_acme_' || n, $1, 'cus_acme', 'ACME-' || lpad(n::text, 3, '0'), 'paid', 'eur', 500, 500, 0,
                'https://invoices.example/acme/' || n, timestamptz '2024-01-15' + make_interval(months => n), now()
           FROM generate_series(1, 30) n",
    )
    .bind(acme)).await;
    t.run(sqlx::query(
        "INSERT INTO billing.invoices (stripe_invoice_id, organization_id, stripe_customer_id, number, status, currency,
             amount_due, amount_paid, amount_remaining, hosted_invoice_url, stripe_created, observed_at)
         VALUES ('in_acme_open', $1, 'cus_acme', 'ACME-OPEN', 'open', 'eur', 500, 0, 500,
                 'https://invoices.example/acme/open', '2026-11-01', now()),
                ('in_globex', $2, 'cus_globex', 'GLOBEX-SECRET', 'paid', 'usd', 9900, 9900, 0,
                 'https://invoices.example/globex', '2026-11-01', now())",
    )
    .bind(acme)
    .bind(globex)).await;
    (acme, basic_price, priority_price)
}

#[tokio::test]
async fn a_members_billing_page_shows_the_plan_subscriptions_tiers_on_sale_and_invoices_of_their_own_organizations() {
    let t = demo_db().await;
    let (_, basic_price, priority_price) = billing_fixture(&t).await;
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    let a = member.get("/billing").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let html = &a.body;
    assert!(html.contains(r#"href="/billing" aria-current="page">Billing</a>"#), "the nav links to Billing");

    // Only the member's organization.
    assert!(html.contains("Acme Wikis"), "{html}");
    assert!(!html.contains("Globex"), "{html}");
    assert!(!html.contains("sub_globex_secret") && !html.contains("GLOBEX-SECRET"), "{html}");

    // The plan per ladder, with where each position comes from.
    assert!(
        html.contains(r#"<span class="plan-ladder">Wiki hosting: </span><strong>Free</strong> <span class="muted">— included with your organization type</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="plan-ladder">Support: </span><strong>Priority support</strong> <span class="muted">— granted by an operator</span>"#),
        "{html}"
    );

    // The subscription, past due, ending at its period's end; the failed payment's banner.
    assert!(html.contains("past due — payment failed: update the card in Stripe"), "{html}");
    assert!(html.contains("ends at period end, 2027-01-31"), "{html}");
    assert!(html.contains("A payment failed"), "{html}");

    // Tiers on sale: only synced, active prices of tiers above the floor; what is held is marked.
    assert!(html.contains("€5.00 / month"), "Basic: {html}");
    assert!(html.contains(&format!(r#"name="price_id" value="{basic_price}""#)), "Basic has a Buy button: {html}");
    assert!(!html.contains("€15.00"), "Pro's price is not in Stripe: {html}");
    assert!(!html.contains("€1.00"), "the floor is not sold: {html}");
    assert!(!html.contains("€40.00"), "an archived price is not sold: {html}");
    assert!(html.contains("€3.00 / month"), "Priority support: {html}");
    assert!(html.contains("current plan"), "{html}");
    assert!(
        html.contains("Acme Wikis pays for a plan on this ladder with a subscription that is past due"),
        "the Support ladder: {html}"
    );
    assert_eq!(html.matches("pays for a plan on this ladder").count(), 1, "only the Support ladder: {html}");
    assert!(!html.contains(&format!(r#"name="price_id" value="{priority_price}""#)), "no Buy for the held tier");
    assert_eq!(html.matches(r#"action="/billing/checkout""#).count(), 1, "{html}");
    assert!(html.contains(r#"name="csrf_token""#));

    // Invoices, newest first, at most 24, with links that open apart; the open one's banner.
    assert!(html.contains("An invoice is waiting to be paid"), "{html}");
    assert!(html.contains(r#"href="https://invoices.example/acme/open" target="_blank" rel="noopener""#), "{html}");
    assert!(html.contains(r#"href="https://invoices.example/acme/30" target="_blank" rel="noopener""#), "{html}");
    assert_eq!(html.matches("https://invoices.example/acme/").count(), 24 + 1, "24 rows and the banner's link");
    assert!(!html.contains("ACME-001") && !html.contains("ACME-007"), "the oldest are left out");
    assert!(html.contains("ACME-008"), "{html}");
    let table = &html[html.rfind("<h3>Invoices</h3>").unwrap()..];
    assert!(table.find("ACME-OPEN").unwrap() < table.find("ACME-030").unwrap(), "newest first");
    assert!(table.find("ACME-030").unwrap() < table.find("ACME-029").unwrap(), "newest first");
}

/// What is on sale is read again only when the catalog changed since the console last read it
/// (migration 0034), and every change shows on the next view: also one whose transaction had
/// begun, and written, before that read and committed after it. Two transactions: the writer
/// holds its change uncommitted while a view reads the list.
#[tokio::test]
async fn a_change_to_the_catalog_shows_on_the_next_billing_view_even_one_that_committed_after_the_list_was_read() {
    let t = demo_db().await;
    let (_, basic_price, _) = billing_fixture(&t).await;
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    let billing = async || {
        let a = member.get("/billing").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        a.body
    };
    assert!(billing().await.contains("€5.00 / month"));

    // The writer changes Basic's price and holds it; a committed change meanwhile makes the next
    // view read the list again, in a snapshot where the writer is still running.
    let mut writer = t.admin.begin().await.unwrap();
    sqlx::query("UPDATE billing.prices SET amount_minor = 700 WHERE price_id = $1")
        .bind(basic_price)
        .execute(&mut *writer)
        .await
        .unwrap();
    t.run(sqlx::query("UPDATE core.products SET max_quantity = max_quantity WHERE name = 'Pro'")).await;
    let during = billing().await;
    assert!(during.contains("€5.00 / month") && !during.contains("€7.00"), "{during}");
    writer.commit().await.unwrap();
    let after = billing().await;
    assert!(after.contains("€7.00 / month") && !after.contains("€5.00 / month"), "{after}");

    // Unchanged since a snapshot, the statement leaves the list out; changed, it reads it.
    let account: i64 =
        scalar(&t, &format!("SELECT account_id FROM core.accounts WHERE email = '{}'", demo::MEMBER_EMAIL)).await;
    let on_sale = async |snapshot: &str| -> serde_json::Value {
        let doc: String = t
            .one(
                sqlx::query_scalar("SELECT core.member_billing($1, 1, $2::text::pg_snapshot)")
                    .bind(account)
                    .bind(snapshot),
            )
            .await;
        serde_json::from_str::<serde_json::Value>(&doc).unwrap()["on_sale"].clone()
    };
    let now: String = t.one(sqlx::query_scalar("SELECT pg_current_snapshot()::text")).await;
    assert_eq!(on_sale(&now).await, serde_json::Value::Null, "nothing changed since");
    t.run(sqlx::query("UPDATE core.plan_ladders SET name = name")).await;
    assert!(on_sale(&now).await.as_array().is_some_and(|l| !l.is_empty()), "a ladder changed since");
}

#[tokio::test]
async fn the_billing_page_says_how_a_checkout_ended_and_that_billing_is_not_connected() {
    let t = demo_db().await;
    billing_fixture(&t).await;
    let app = TestApp::spawn(&t).await;
    let member = signed_in_member(&app).await;
    for (query, words) in [
        ("paid", "Payment received: your plan is active."),
        ("pending", "Your payment is being confirmed; this page updates when Stripe tells us."),
        ("canceled", "Checkout canceled; nothing was charged."),
    ] {
        let a = member.get(&format!("/billing?checkout={query}")).await;
        assert_eq!(a.status, StatusCode::OK);
        assert!(a.body.contains(words), "{query}: {}", a.body);
    }
    let a = member.get("/billing?checkout=<script>").await;
    assert_eq!(a.status, StatusCode::OK);
    // No Stripe: the page says billing is not available and offers no Buy button.
    assert!(a.body.contains("Billing is not available right now"), "{}", a.body);
    assert!(a.body.contains("€5.00 / month"), "the prices still show: {}", a.body);
    assert!(!a.body.contains("/billing/checkout"), "{}", a.body);
}

#[tokio::test]
async fn a_member_who_is_not_an_owner_sees_no_buy_button_and_checkout_is_refused_without_calling_stripe() {
    let t = demo_db().await;
    let (acme, basic_price, _) = billing_fixture(&t).await;
    t.run(sqlx::query("UPDATE core.organization_members SET role = 'member' WHERE organization_id = $1").bind(acme))
        .await;
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    let page = member.get("/billing").await;
    assert!(!page.body.contains("/billing/checkout"), "{}", page.body);
    assert!(page.body.contains("Ask an owner of Acme Wikis to change the plan."), "{}", page.body);

    let fields = [("organization_id", acme.to_string()), ("price_id", basic_price.to_string())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for htmx in [false, true] {
        let a = member.post("/billing/checkout", &fields, htmx).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
        assert!(a.body.contains("Only an owner of Acme Wikis can buy a plan for it."), "{}", a.body);
        assert!(a.header("location").is_none() && a.header("hx-redirect").is_none());
    }
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 0);
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.customers").await, 0);
}

#[tokio::test]
async fn checkout_without_stripe_connected_is_a_clear_refusal_and_a_stripe_not_answering_is_a_503_not_a_500() {
    let t = demo_db().await;
    let (acme, basic_price, _) = billing_fixture(&t).await;
    let fields = [("organization_id", acme.to_string()), ("price_id", basic_price.to_string())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let app = TestApp::spawn(&t).await;
    let member = signed_in_member(&app).await;
    let a = member.post("/billing/checkout", &fields, false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("Billing is not connected to a payment provider right now"), "{}", a.body);
    assert!(a.body.contains("Nothing was charged."), "{}", a.body);

    // With Stripe connected but not answering, the owner's checkout fails in Stripe's words.
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    let a = member.post("/billing/checkout", &fields, false).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert!(a.header("location").is_none());
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 0);
}

#[tokio::test]
async fn an_owner_buys_basic_on_stripes_page_and_comes_back_to_it_in_force() {
    let t = demo_db().await;
    let s = common::stripe::StripeFixture::start().await;
    let basic = common::acts::product_id(&t, "Basic").await;
    let basic_price = s.price(&t.db, basic, "12").await;
    let stripe_price = s.stripe_price(&t.admin, basic_price).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = signed_in_member(&app).await;
    let page = member.get("/billing").await;
    // The page lets its Buy form leave for the stand-in's checkout page, and nowhere else.
    let csp = page.header("content-security-policy").unwrap_or_default().to_string();
    assert!(csp.contains(&format!("form-action 'self' {}", s.base)), "{csp}");
    let fields = [("organization_id", acme.to_string()), ("price_id", basic_price.0.to_string())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let a = member.post("/billing/checkout", &fields, false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let pay = a.header("location").unwrap().to_string();
    assert!(pay.starts_with(&format!("{}/c/pay/cs_", s.base)), "{pay}");
    let session = pay.rsplit('/').next().unwrap().to_string();
    // The session Stripe was asked for: the tier's price, back to this console's address.
    let cs = s.get(&format!("/checkout/sessions/{session}")).await;
    assert_eq!(cs["success_url"], format!("{}/billing/return?session_id={{CHECKOUT_SESSION_ID}}", app.base));
    assert_eq!(cs["cancel_url"], format!("{}/billing?checkout=canceled", app.base));
    assert_eq!(cs["client_reference_id"], acme.to_string());
    let items = s.get(&format!("/checkout/sessions/{session}/line_items")).await;
    assert_eq!(items["data"][0]["price"]["id"], stripe_price.as_str(), "{items}");
    let (org, price, started_by): (i64, i64, Option<i64>) = t.one(sqlx::query_as(
        "SELECT organization_id, price_id, started_by FROM billing.checkout_sessions WHERE stripe_session_id = $1",
    )
    .bind(&session)).await;
    let member_id =
        scalar(&t, &format!("SELECT account_id FROM core.accounts WHERE email = '{}'", demo::MEMBER_EMAIL)).await;
    assert_eq!((org, price, started_by), (acme, basic_price.0, Some(member_id)));

    // From HTMX, the browser is sent there by HX-Redirect (the same open session, same customer).
    let a = member.post("/billing/checkout", &fields, true).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.header("hx-redirect"), Some(pay.as_str()));
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.customers").await, 1, "one customer for the organization");

    // Back before paying: the payment is being confirmed.
    let back = member.get(&format!("/billing/return?session_id={session}")).await;
    assert_sent_to(&back, false, "/billing?checkout=pending");
    let shown = follow(&member, &back).await;
    assert!(shown.body.contains("Your payment is being confirmed"), "{}", shown.body);

    // Pay on the stand-in's page as a browser would; it sends the browser back to the console.
    let paid = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = paid.post(&pay).form(&[("card_number", "4242 4242 4242 4242")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let to = to.strip_prefix(&app.base).unwrap_or_else(|| panic!("back to the console: {to}")).to_string();
    let back = member.get(&to).await;
    assert_eq!(back.header("location"), Some("/billing?checkout=paid"), "{}", back.body);
    let shown = follow(&member, &back).await;
    assert!(shown.body.contains("Payment received"), "{}", shown.body);
    let tier: String = t
        .one(
            sqlx::query_scalar(
                "SELECT pr.name FROM core.positions p JOIN core.plan_ladders l USING (plan_ladder_id)
         JOIN core.conferrals c USING (conferral_id) JOIN core.products pr ON pr.product_id = c.product_id
         JOIN core.resource_pools rp ON rp.pool_id = p.pool_id
         WHERE rp.organization_id = $1 AND l.name = 'Wiki hosting'",
            )
            .bind(acme),
        )
        .await;
    assert_eq!(tier, "Basic", "in force when the member lands back");
    // Buying on that ladder again is refused before Stripe is asked.
    let a = member.post("/billing/checkout", &fields, false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
}

/// The owner's Buy of `price` for `org`, as the form posts it.
async fn buy(member: &Session, org: i64, price: i64) -> Answer {
    let fields = [("organization_id", org.to_string()), ("price_id", price.to_string())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    member.post("/billing/checkout", &fields, false).await
}

/// Pay a stand-in checkout page with Stripe's test card that pays; the page's answer.
async fn pay_on_page(pay: &str) -> reqwest::Response {
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    browser.post(pay).form(&[("card_number", "4242 4242 4242 4242")]).send().await.unwrap()
}

#[tokio::test]
async fn a_second_checkout_on_a_ladder_expires_the_first_so_the_member_pays_for_one_plan_only() {
    let t = demo_db().await;
    let s = common::stripe::StripeFixture::start().await;
    let (basic, pro) = s.demo_prices(&t).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = signed_in_member(&app).await;

    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let pay_basic = a.header("location").unwrap().to_string();
    // The same click again is sent to the same page: no second session.
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.header("location"), Some(pay_basic.as_str()), "{}", a.body);
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 1);

    // Pro on the same ladder: Basic's session is expired at Stripe before Pro's is made.
    let a = buy(&member, acme, pro.0).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let pay_pro = a.header("location").unwrap().to_string();
    assert_ne!(pay_pro, pay_basic);
    let basic_session = pay_basic.rsplit('/').next().unwrap();
    assert_eq!(s.get(&format!("/checkout/sessions/{basic_session}")).await["status"], "expired");
    let r = pay_on_page(&pay_basic).await;
    assert_eq!(r.status(), StatusCode::CONFLICT, "Stripe's page no longer takes a payment for Basic");

    // Pro is paid; before its return, another Buy on the ladder is refused: that one was paid.
    let r = pay_on_page(&pay_pro).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("has just been paid"), "{}", a.body);
    let subscriptions = s.get("/subscriptions?status=all").await;
    assert_eq!(subscriptions["data"].as_array().map(Vec::len), Some(1), "one plan paid for: {subscriptions}");
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 2);

    // Back on the console: Pro is in force, and Buy on its ladder points to the switch.
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let back = member.get(to.strip_prefix(&app.base).unwrap()).await;
    assert_eq!(back.header("location"), Some("/billing?checkout=paid"), "{}", back.body);
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("already pays for Pro") && a.body.contains("Switch"), "{}", a.body);
    assert!(!a.body.contains("not available yet"), "{}", a.body);
}

#[tokio::test]
async fn an_unpublished_product_cannot_be_bought_with_a_hand_made_form() {
    let t = demo_db().await;
    let s = common::stripe::StripeFixture::start().await;
    let (basic, _) = s.demo_prices(&t).await;
    t.run(sqlx::query(
        "UPDATE core.products SET published = false WHERE product_id = (SELECT product_id FROM billing.prices WHERE price_id = $1)",
    )
    .bind(basic.0))
    .await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = signed_in_member(&app).await;
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("not on sale"), "{}", a.body);
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 0);
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.customers").await, 0, "refused before Stripe was asked");
}

#[tokio::test]
async fn a_checkout_carries_the_members_request_id_to_stripe_in_its_headers_and_metadata() {
    let t = demo_db().await;
    let s = common::stripe::StripeFixture::start().await;
    let (basic, _) = s.demo_prices(&t).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = signed_in_member(&app).await;
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let request_id = a.header("x-request-id").expect("the console names its request").to_string();
    let session = a.header("location").unwrap().rsplit('/').next().unwrap().to_string();

    // Stripe's objects name the request that made them.
    let cs = s.get(&format!("/checkout/sessions/{session}")).await;
    assert_eq!(cs["metadata"]["request_id"], request_id.as_str(), "{cs}");
    let customer = s.get(&format!("/customers/{}", cs["customer"].as_str().unwrap())).await;
    assert_eq!(customer["metadata"]["request_id"], request_id.as_str(), "{customer}");

    // And every call of that request carried it, with a traceparent of its trace.
    let calls: serde_json::Value = s
        .http
        .get(format!("{}/_standin/calls", s.base))
        .bearer_auth(common::stripe::SECRET_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let of_request: Vec<&serde_json::Value> =
        calls["data"].as_array().unwrap().iter().filter(|c| c["request_id"] == request_id.as_str()).collect();
    let made: Vec<(&str, &str)> =
        of_request.iter().map(|c| (c["method"].as_str().unwrap(), c["path"].as_str().unwrap())).collect();
    assert!(made.contains(&("POST", "/v1/customers")), "{calls}");
    assert!(made.contains(&("POST", "/v1/checkout/sessions")), "{calls}");
    let trace = member_console::trace_context::traceparent(&request_id)[..35].to_string();
    for call in &of_request {
        assert!(call["traceparent"].as_str().is_some_and(|p| p.starts_with(&trace)), "{call}");
    }
    // The catalog's sync, made before and for no request, carried none.
    assert!(
        calls["data"].as_array().unwrap().iter().any(|c| c["path"] == "/v1/products" && c["request_id"].is_null()),
        "{calls}"
    );
}

#[tokio::test]
async fn a_price_stripe_lost_is_synced_again_and_bought_and_one_it_cannot_get_back_is_refused_in_words() {
    let t = demo_db().await;
    let before = common::stripe::StripeFixture::start().await;
    let (basic, pro) = before.demo_prices(&t).await;
    let lost_basic = before.stripe_price(&t.admin, basic).await;
    let lost_pro = before.stripe_price(&t.admin, pro).await;
    // A stand-in that knows none of them, as a test-mode account that was reset.
    let s = common::stripe::StripeFixture::start().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn_with_stripe(&t, s.stripe.clone()).await;
    let member = signed_in_member(&app).await;

    // Basic: Stripe says "no such price"; the product is made again, and the member pays there.
    let a = buy(&member, acme, basic.0).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let pay = a.header("location").unwrap().to_string();
    assert!(pay.starts_with(&format!("{}/c/pay/cs_", s.base)), "{pay}");
    let now_basic = s.stripe_price(&t.admin, basic).await;
    assert_ne!(now_basic, lost_basic);
    let price = s.get(&format!("/prices/{now_basic}")).await;
    assert_eq!(price["active"], true, "{price}");
    let (product, state): (String, String) = t
        .one(
            sqlx::query_as(
                "SELECT m.stripe_product_id, m.sync_state FROM billing.product_mappings m
               JOIN billing.prices p USING (product_id) WHERE p.price_id = $1",
            )
            .bind(basic.0),
        )
        .await;
    assert_eq!(state, "synced");
    assert_eq!(price["product"], product.as_str());
    let session = pay.rsplit('/').next().unwrap();
    let items = s.get(&format!("/checkout/sessions/{session}/line_items")).await;
    assert_eq!(items["data"][0]["price"]["id"], now_basic.as_str(), "{items}");
    assert_eq!(s.get(&format!("/checkout/sessions/{session}")).await["status"], "open");

    // Pro, while Stripe refuses to make products: refused in words, nothing half-made.
    let sessions = scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await;
    s.control("/faults", &[("path_prefix", "/v1/products"), ("method", "POST"), ("status", "400"), ("times", "50")])
        .await;
    let a = buy(&member, acme, pro.0).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("cannot be bought right now") && a.body.contains("Nothing was charged"), "{}", a.body);
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, sessions, "no session recorded");
    let made = s.get("/checkout/sessions?limit=100").await;
    assert_eq!(made["data"].as_array().map(Vec::len), Some(1), "Stripe made no session for Pro: {made}");
    let kept: Option<String> =
        t.one(sqlx::query_scalar("SELECT stripe_price_id FROM billing.prices WHERE price_id = $1").bind(pro.0)).await;
    assert_eq!(kept, None, "the lost id is forgotten, not kept as if Stripe had it");
    let pro_product = scalar(&t, &format!("SELECT product_id FROM billing.prices WHERE price_id = {}", pro.0)).await;
    assert_eq!(pending_syncs(&t, pro_product).await, 1, "the outbox is to make it again");

    // Once Stripe takes products again, the outbox makes Pro anew and the member buys it.
    let cleared = s.http.delete(format!("{}/_standin/faults", s.base)).bearer_auth(common::stripe::SECRET_KEY).send();
    assert!(cleared.await.unwrap().status().is_success());
    let done =
        member_console::services::billing::process_outbox(&t.db, &s.stripe, 10, member_console::jobs::DEFAULT_LEASE)
            .await
            .unwrap();
    assert_eq!(done.failed, 0, "{done:?}");
    let now_pro = s.stripe_price(&t.admin, pro).await;
    assert_ne!(now_pro, lost_pro);
    let a = buy(&member, acme, pro.0).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert!(a.header("location").unwrap().starts_with(&format!("{}/c/pay/cs_", s.base)));
}

#[tokio::test]
async fn checkout_for_an_organization_the_member_is_not_in_is_404_and_a_bad_form_is_422() {
    let t = demo_db().await;
    let (_, basic_price, _) = billing_fixture(&t).await;
    let globex = organization_id(&t, "Globex").await;
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    let fields = [("organization_id", globex.to_string()), ("price_id", basic_price.to_string())];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = member.post("/billing/checkout", &fields, false).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert!(!a.body.contains("Globex"), "{}", a.body);

    for bad in [
        vec![("organization_id", "acme"), ("price_id", "1")],
        vec![("organization_id", "1")],
        vec![("organization_id", "1"), ("price_id", "1"), ("quantity", "9")],
    ] {
        let a = member.post("/billing/checkout", &bad, false).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}: {}", a.body);
    }
    assert_eq!(scalar(&t, "SELECT count(*) FROM billing.checkout_sessions").await, 0);
}

#[tokio::test]
async fn the_return_from_an_unknown_or_another_organizations_checkout_is_404() {
    let t = demo_db().await;
    let (acme, basic_price, _) = billing_fixture(&t).await;
    let globex = organization_id(&t, "Globex").await;
    for (session, org) in [("cs_globex_1", globex), ("cs_acme_1", acme)] {
        t.run(sqlx::query(
            "INSERT INTO billing.checkout_sessions (stripe_session_id, organization_id, price_id) VALUES ($1, $2, $3)",
        )
        .bind(session)
        .bind(org)
        .bind(basic_price)).await;
    }
    let app = app_with_unreachable_stripe(&t).await;
    let member = signed_in_member(&app).await;
    for path in [
        "/billing/return?session_id=cs_unknown",
        "/billing/return?session_id=cs_globex_1",
        "/billing/return",
        "/billing/return?session_id=cs_%27%3B--",
    ] {
        let a = member.get(path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}: {}", a.body);
    }
    // The member's own session reaches Stripe (which does not answer here: 503, in words).
    let own = member.get("/billing/return?session_id=cs_acme_1").await;
    assert_eq!(own.status, StatusCode::SERVICE_UNAVAILABLE, "{}", own.body);

    // Without Stripe, the member's own session is a clear refusal, not a 500.
    let app = TestApp::spawn(&t).await;
    let member = signed_in_member(&app).await;
    let a = member.get("/billing/return?session_id=cs_acme_1").await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("Billing is not connected"), "{}", a.body);
    let a = member.get("/billing/return?session_id=cs_globex_1").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

// ---------- 3. The operator's billing overview ----------

#[tokio::test]
async fn the_operator_billing_page_shows_subscriptions_stuck_outbox_rows_first_and_events() {
    let (t, op) = operator_session().await;
    billing_fixture(&t).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let basic = product_id(&t, "Basic").await;
    let acme_sub =
        scalar(&t, "SELECT subscription_id FROM core.subscriptions WHERE stripe_subscription_id = 'sub_acme'").await;
    t.run(
        sqlx::query(
            "INSERT INTO core.outbox (kind, subscription_id, attempts, last_error, due_at)
         VALUES ('reconcile_subscription', $1, 0, NULL, now() - interval '1 minute'),
                ('reconcile_subscription', $1, 4, 'Stripe answered 500: try later', now() + interval '5 minutes'),
                ('reconcile_subscription', $1, 1, NULL, now())",
        )
        .bind(acme_sub),
    )
    .await;
    t.run(sqlx::query("UPDATE core.outbox SET processed_at = now() WHERE attempts = 1")).await;
    t.run(sqlx::query("INSERT INTO core.outbox (kind, product_id, attempts, last_error) VALUES ('sync_product', $1, 1, 'No such price')")
        .bind(basic)).await;
    t.run(sqlx::query(
        "INSERT INTO billing.stripe_events (event_id, event_type, object_id, stripe_created, received_at)
         VALUES ('evt_new', 'invoice.payment_failed', 'in_acme_open', now(), now()),
                ('evt_old', 'customer.subscription.updated', 'sub_acme', now() - interval '3 days',
                 now() - interval '3 days')",
    ))
    .await;

    let a = op.get("/operator/billing").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let html = &a.body;
    assert!(html.contains(r#"href="/operator/billing" aria-current="page">Billing</a>"#), "the nav links to Billing");
    // Counts: two live subscriptions; three rows waiting, two of them stuck; one event today.
    assert!(
        html.contains(r#"<span class="stat-value">2</span><span class="stat-label">Live subscriptions</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="stat-value">3</span><span class="stat-label">Outbox rows waiting</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="stat-value">2</span><span class="stat-label">Outbox rows stuck</span>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="stat-value">1</span><span class="stat-label">Stripe events, last 24 h</span>"#),
        "{html}"
    );
    // Subscriptions, each organization linking to its page.
    assert!(html.contains(&format!(r#"<a href="/operator/organizations/{acme}">Acme Wikis</a>"#)), "{html}");
    assert!(html.contains("<code>sub_acme</code>") && html.contains("<code>sub_globex_secret</code>"), "{html}");
    assert!(html.contains(">past_due</span>"), "{html}");
    // The outbox: the stuck rows first, with their errors; the processed one not at all.
    let outbox = &html[html.find("outbox-heading").unwrap()..html.find("events-heading").unwrap()];
    assert_eq!(outbox.matches("<tr>").count(), 1 + 3, "a header and three rows: {outbox}");
    assert_eq!(outbox.matches(">stuck</span>").count(), 2, "{outbox}");
    let stuck = outbox.find("Stripe answered 500: try later").unwrap();
    let sync = outbox.find("No such price").unwrap();
    let fresh = outbox.rfind("<tr>").unwrap();
    assert!(stuck < fresh && sync < fresh, "stuck rows first: {outbox}");
    assert!(outbox.contains("product Basic") && outbox.contains("subscription sub_acme"), "{outbox}");
    // Events, newest first.
    let events = &html[html.find("events-heading").unwrap()..];
    assert!(events.find("invoice.payment_failed").unwrap() < events.find("customer.subscription.updated").unwrap());
}

#[tokio::test]
async fn a_member_cannot_reach_the_operator_billing_page_or_the_price_forms() {
    let (t, app) = app_with_demo().await;
    let basic = product_id(&t, "Basic").await;
    let price = price_row(&t, basic, "month", 500, true, None).await;
    let before = prices_snapshot(&t).await;
    let member = signed_in_member(&app).await;
    let a = member.get("/operator/billing").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    assert!(a.body.contains("This page is for operators."), "{}", a.body);
    let fields = [("interval", "month"), ("amount", "1"), ("currency", "eur")];
    for (path, fields) in [
        (format!("{}/prices", product_page(basic)), &fields[..]),
        (format!("{}/sync", product_page(basic)), &[][..]),
        (format!("/operator/catalog/prices/{price}/archive"), &[][..]),
    ] {
        let a = member.post(&path, fields, false).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(prices_snapshot(&t).await, before);
    // The member's own page is there for them, and for nobody signed out.
    assert_eq!(member.get("/billing").await.status, StatusCode::OK);
    let anonymous = app.client();
    let a = get(&app, &anonymous, "/billing").await;
    assert!(a.status == StatusCode::SEE_OTHER || a.status == StatusCode::UNAUTHORIZED, "{}", a.status);
}
