//! The operator pages over HTTP: the catalog (keys, sets and their rules, products) with every
//! form's success and refusals, the tier topology, the organizations list and detail, and the
//! member's home; who may see what.
//!
//! Refusals are checked on what the operator is told (status, message, the form again: alone for
//! HTMX, in the page otherwise) and on the database (nothing written).

use crate::common;

use std::time::Duration;

use common::{
    TestApp, TestDb,
    pages::{
        Session, active_grant, app_with_demo, assert_operators_only, assert_refused, assert_sent_to, demo_db,
        many_organizations, operator_session, organization_id, product_id, row, set_id,
    },
};
use member_console::{
    db::{TxKind, begin},
    demo,
    services::organizations::{OrgName, create_organization},
};
use reqwest::StatusCode;

// ---------- Harness ----------

/// Row counts of the catalog tables: keys, sets, rules, products.
async fn catalog_counts(t: &TestDb) -> [i64; 4] {
    let n = |table: &'static str| async move {
        t.one(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM core.{table}")))).await
    };
    [n("resource_keys").await, n("entitlement_sets").await, n("entitlement_set_rules").await, n("products").await]
}

/// Every catalog row's content, to prove a refusal changed nothing (not even in place).
async fn catalog_snapshot(t: &TestDb) -> String {
    t.one(sqlx::query_scalar(
        "SELECT concat_ws(E'\\n',
            (SELECT string_agg(format('%s|%s|%s|%s', resource_key, kind, provider, description), ';' ORDER BY resource_key)
               FROM core.resource_keys),
            (SELECT string_agg(format('%s|%s', entitlement_set_id, name), ';' ORDER BY entitlement_set_id)
               FROM core.entitlement_sets),
            (SELECT string_agg(format('%s|%s|%s|%s', entitlement_set_id, resource_key, numeric_value, flag_value), ';'
                               ORDER BY entitlement_set_id, resource_key)
               FROM core.entitlement_set_rules),
            (SELECT string_agg(format('%s|%s|%s|%s', product_id, name, entitlement_set_id, published), ';' ORDER BY product_id)
               FROM core.products))",
    )).await
}

/// Counts and snapshot together: what "nothing was written" compares.
async fn catalog(t: &TestDb) -> ([i64; 4], String) {
    (catalog_counts(t).await, catalog_snapshot(t).await)
}

/// A set's rules as (key, numeric, flag), by key.
async fn rules_of(t: &TestDb, set: i64) -> Vec<(String, Option<i64>, Option<bool>)> {
    t.all(
        sqlx::query_as(
            "SELECT resource_key, numeric_value, flag_value FROM core.entitlement_set_rules
         WHERE entitlement_set_id = $1 ORDER BY resource_key",
        )
        .bind(set),
    )
    .await
}

/// How many pools hold a conferral of a product of this set, counted here independently.
async fn pools_carrying(t: &TestDb, set: i64) -> i64 {
    t.one(
        sqlx::query_scalar(
            "SELECT count(DISTINCT c.pool_id) FROM core.conferrals c JOIN core.products p USING (product_id)
         WHERE p.entitlement_set_id = $1 AND c.state = 'holding'",
        )
        .bind(set),
    )
    .await
}

// ---------- 1. The catalog page ----------

#[tokio::test]
async fn catalog_lists_the_demo_keys_sets_with_rules_and_products_with_their_shape() {
    let (t, op) = operator_session().await;
    let a = op.get("/operator/catalog").await;
    assert_eq!(a.status, StatusCode::OK);
    let html = &a.body;

    // Resource keys by the names members read, the key beside, with kind, unit and the
    // integration that registered them.
    let none = r#"<span class="muted">none</span>"#;
    let key = row(html, r#"Active sites <code class="muted">fedwiki.active_sites</code>"#);
    assert!(
        key.contains(&format!("<td>Numeric</td><td>{none}</td><td>fedwiki</td><td>Active wiki sites</td>")),
        "{key}"
    );
    let key = row(html, r#"Custom domain <code class="muted">fedwiki.custom_domain</code>"#);
    assert!(key.contains(&format!("<td>Flag</td><td>{none}</td><td>fedwiki</td>")), "{key}");
    let key = row(html, r#"Priority support <code class="muted">support.priority</code>"#);
    assert!(key.contains(&format!("<td>Flag</td><td>{none}</td><td>support</td><td>Priority support</td>")), "{key}");

    // Sets, each with its own rules and how many pools carry it.
    let free = row(html, "Free");
    assert!(free.contains("<li><code>fedwiki.active_sites</code> = 1</li>"), "{free}");
    assert!(!free.contains("custom_domain"), "{free}");
    let carried = pools_carrying(&t, set_id(&t, "Free").await).await;
    assert!(carried >= 2, "the demo's Community organizations hold the Free floor");
    assert!(free.contains(&format!("carried by {carried} pools")), "{free}");
    let basic = row(html, "Basic");
    assert!(basic.contains("<li><code>fedwiki.active_sites</code> = 3</li>"), "{basic}");
    assert!(basic.contains("<li><code>fedwiki.custom_domain</code> = yes</li>"), "{basic}");
    let pro = row(html, "Pro");
    assert!(pro.contains("<li><code>fedwiki.active_sites</code> = 10</li>"), "{pro}");
    let community = row(html, "Community support");
    assert!(community.contains("<li><code>support.priority</code> = no</li>"), "{community}");
    let priority = row(html, "Priority support");
    assert!(priority.contains("<li><code>support.priority</code> = yes</li>"), "{priority}");
    assert!(html.contains(&format!("href=\"/operator/catalog/sets/{}\"", set_id(&t, "Basic").await)));

    // Products with their set, status and shape (the second table, after the products heading).
    let products = &html[html.find("id=\"products-heading\"").unwrap()..];
    for (name, shape) in [
        ("Free", "Wiki hosting · rank 0"),
        ("Basic", "Wiki hosting · rank 1"),
        ("Pro", "Wiki hosting · rank 2"),
        ("Community support", "Support · rank 0"),
        ("Priority support", "Support · rank 1"),
    ] {
        let p = row(products, name);
        assert!(p.contains(&format!("<td>{name}</td>")), "the product's set: {p}");
        assert!(p.contains(r#"<span class="badge badge-ok">published</span>"#), "{p}");
        assert!(p.contains(&format!("<li>{shape}</li>")), "{name} is {shape}: {p}");
        assert!(p.contains(&format!("href=\"/operator/catalog/products/{}\"", product_id(&t, name).await)), "{p}");
    }
    // The three add forms.
    for form in ["key-form", "set-form", "product-form"] {
        assert!(html.contains(&format!("id=\"{form}\"")), "{form}");
    }
}

// ---------- 2. Creating keys, sets and products ----------

#[tokio::test]
async fn creating_a_key_a_set_and_a_product_writes_them_and_returns_to_the_right_page() {
    let (t, op) = operator_session().await;
    let before = catalog_counts(&t).await;

    // Resource keys: a plain post is sent back with 303, an HTMX one with HX-Redirect.
    let a = op
        .post(
            "/operator/catalog/keys",
            &[("key", "wiki.pages"), ("kind", "numeric"), ("description", "Pages per wiki")],
            false,
        )
        .await;
    assert_sent_to(&a, false, "/operator/catalog");
    let a = op
        .post("/operator/catalog/keys", &[("key", " wiki.comments "), ("kind", "flag"), ("description", "")], true)
        .await;
    assert_sent_to(&a, true, "/operator/catalog");
    let keys: Vec<(String, String, String)> = t.all(sqlx::query_as(
        "SELECT resource_key, kind, description FROM core.resource_keys WHERE resource_key LIKE 'wiki.%' ORDER BY 1",
    )).await;
    assert_eq!(
        keys,
        vec![
            ("wiki.comments".into(), "flag".into(), "".into()),
            ("wiki.pages".into(), "numeric".into(), "Pages per wiki".into())
        ]
    );

    // Sets: to the new set's rules page.
    let a = op.post("/operator/catalog/sets", &[("name", "Enterprise")], false).await;
    let enterprise = set_id(&t, "Enterprise").await;
    assert_sent_to(&a, false, &format!("/operator/catalog/sets/{enterprise}"));
    let a = op.post("/operator/catalog/sets", &[("name", "  Team  ")], true).await;
    let team = set_id(&t, "Team").await;
    assert_sent_to(&a, true, &format!("/operator/catalog/sets/{team}"));
    let page = op.get(&format!("/operator/catalog/sets/{enterprise}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Entitlement set: Enterprise"), "{}", page.body);
    assert!(page.body.contains("name=\"rule.wiki.pages\""), "the new key has a row: {}", page.body);

    // Products: to the new product's page.
    let e = enterprise.to_string();
    let a = op
        .post(
            "/operator/catalog/products",
            &[("name", "Enterprise"), ("entitlement_set_id", &e), ("published", "on")],
            false,
        )
        .await;
    let p = product_id(&t, "Enterprise").await;
    assert_sent_to(&a, false, &format!("/operator/catalog/products/{p}"));
    let a = op.post("/operator/catalog/products", &[("name", "Extra sites"), ("entitlement_set_id", "")], true).await;
    let extra = product_id(&t, "Extra sites").await;
    assert_sent_to(&a, true, &format!("/operator/catalog/products/{extra}"));
    let rows: Vec<(String, Option<i64>, bool)> = t.all(sqlx::query_as(
        "SELECT name, entitlement_set_id, published FROM core.products WHERE product_id IN ($1, $2) ORDER BY product_id",
    )
    .bind(p)
    .bind(extra)).await;
    assert_eq!(rows, vec![("Enterprise".into(), Some(enterprise), true), ("Extra sites".into(), None, false)]);

    let after = catalog_counts(&t).await;
    assert_eq!(after, [before[0] + 2, before[1] + 2, before[2], before[3] + 2]);

    // The catalog shows them all.
    let html = op.get("/operator/catalog").await.body;
    // A new key is named from its last word until an operator names it.
    let key = row(&html, r#"Pages <code class="muted">wiki.pages</code>"#);
    assert!(key.contains("<td>Numeric</td>") && key.contains("not registered"), "{key}");
    assert!(row(&html, "Team").contains("No rules"));
    let products = &html[html.find("id=\"products-heading\"").unwrap()..];
    let ent = row(products, "Enterprise");
    assert!(ent.contains("<td>Enterprise</td>") && ent.contains("not a tier on any ladder"), "{ent}");
    let ext = row(products, "Extra sites");
    assert!(ext.contains(r#"<span class="muted">none</span>"#) && ext.contains("not published"), "{ext}");

    // Editing a product: saved, back to its page with a notice.
    let a = op
        .post(
            &format!("/operator/catalog/products/{extra}"),
            &[("name", "More sites"), ("entitlement_set_id", &e), ("published", "on")],
            false,
        )
        .await;
    assert_sent_to(&a, false, &format!("/operator/catalog/products/{extra}?saved=1"));
    let page = op.get(&format!("/operator/catalog/products/{extra}?saved=1")).await;
    assert!(page.body.contains("The product was saved."), "{}", page.body);
    assert!(page.body.contains("value=\"More sites\""), "{}", page.body);
    let row_now: (String, Option<i64>, bool) = t
        .one(
            sqlx::query_as("SELECT name, entitlement_set_id, published FROM core.products WHERE product_id = $1")
                .bind(extra),
        )
        .await;
    assert_eq!(row_now, ("More sites".into(), Some(enterprise), true));
}

// ---------- 3. Bad input on every form ----------

#[tokio::test]
async fn bad_input_on_the_add_forms_is_refused_with_a_message_and_writes_nothing() {
    let (t, op) = operator_session().await;
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let long = "x".repeat(501);
    op.refuse_all(
        "/operator/catalog/keys",
        "key-form",
        &[
            (
                "bad key name",
                vec![("key", "Fedwiki Sites"), ("kind", "numeric"), ("description", "")],
                unprocessable,
                "is not a resource key: use dotted lower-case words",
            ),
            ("no dot", vec![("key", "sites"), ("kind", "numeric")], unprocessable, "is not a resource key"),
            ("missing kind", vec![("key", "wiki.pages")], unprocessable, "is not a kind: choose numeric or flag."),
            ("unknown kind", vec![("key", "wiki.pages"), ("kind", "text")], unprocessable, "“text” is not a kind"),
            (
                "duplicate key",
                vec![("key", "fedwiki.active_sites"), ("kind", "numeric"), ("description", "again")],
                unprocessable,
                "The resource key fedwiki.active_sites exists already.",
            ),
            (
                "too-long description",
                vec![("key", "wiki.pages"), ("kind", "numeric"), ("description", &long)],
                unprocessable,
                "A description may have at most 500 characters.",
            ),
        ],
        async || catalog(&t).await,
    )
    .await;
    // The refused form keeps what was typed, with the error by its field.
    let a = op.post("/operator/catalog/keys", &[("key", "Bad"), ("kind", "flag")], true).await;
    assert!(a.body.contains("value=\"Bad\""), "{}", a.body);
    assert!(a.body.contains(r#"<option value="flag" selected>"#), "{}", a.body);
    assert!(a.body.contains(r#"<p class="field-error" id="key-error">"#), "{}", a.body);
    assert!(a.body.contains("Nothing was saved"), "{}", a.body);

    op.refuse_all(
        "/operator/catalog/sets",
        "set-form",
        &[
            ("empty name", vec![("name", "   ")], unprocessable, "An entitlement set needs a name."),
            (
                "too-long name",
                vec![("name", &long[..201])],
                unprocessable,
                "name must be at most 200 printable characters.",
            ),
            ("duplicate", vec![("name", "Free")], unprocessable, "An entitlement set named “Free” exists already."),
            (
                "duplicate with spaces",
                vec![("name", " Basic ")],
                unprocessable,
                "An entitlement set named “Basic” exists already.",
            ),
        ],
        async || catalog(&t).await,
    )
    .await;

    let basic = set_id(&t, "Basic").await.to_string();
    op.refuse_all(
        "/operator/catalog/products",
        "product-form",
        &[
            (
                "empty name",
                vec![("name", ""), ("entitlement_set_id", &basic)],
                unprocessable,
                "A product needs a name.",
            ),
            (
                "duplicate",
                vec![("name", "Pro"), ("entitlement_set_id", &basic), ("published", "on")],
                unprocessable,
                "A product named “Pro” exists already.",
            ),
            (
                "non-numeric set id",
                vec![("name", "Gold"), ("entitlement_set_id", "gold")],
                unprocessable,
                "Choose an entitlement set from the list.",
            ),
            (
                "unknown set id",
                vec![("name", "Gold"), ("entitlement_set_id", "987654")],
                unprocessable,
                "That entitlement set does not exist.",
            ),
        ],
        async || catalog(&t).await,
    )
    .await;
}

#[tokio::test]
async fn bad_rule_values_are_refused_with_a_message_and_write_nothing() {
    let (t, op) = operator_session().await;
    let basic = set_id(&t, "Basic").await;
    assert_eq!(pools_carrying(&t, basic).await, 0, "no pool carries Basic: only the input can be refused");
    let path = format!("/operator/catalog/sets/{basic}/rules");
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    op.refuse_all(
        &path,
        "set-edit",
        &[
            (
                "a negative limit",
                vec![
                    ("rule.fedwiki.active_sites", "-1"),
                    ("rule.fedwiki.custom_domain", "yes"),
                    ("rule.support.priority", ""),
                ],
                unprocessable,
                "fedwiki.active_sites: a limit cannot be negative (-1).",
            ),
            (
                "a non-number for a numeric key",
                vec![("rule.fedwiki.active_sites", "lots"), ("rule.fedwiki.custom_domain", "yes")],
                unprocessable,
                "fedwiki.active_sites: “lots” is not a whole number.",
            ),
            (
                "a number for a flag key",
                vec![("rule.fedwiki.active_sites", "4"), ("rule.fedwiki.custom_domain", "3")],
                unprocessable,
                "fedwiki.custom_domain is a flag: choose yes or no, not “3”.",
            ),
            (
                // Refused and nothing written; the message naming the key is checked in
                // a_rule_for_an_unknown_key_is_refused_naming_the_key.
                "an unknown key",
                vec![("rule.fedwiki.active_sites", "4"), ("rule.nope.nope", "1")],
                unprocessable,
                "Nothing was saved",
            ),
            (
                "a limit past the maximum",
                vec![("rule.fedwiki.active_sites", "1000000001")],
                unprocessable,
                "fedwiki.active_sites: a limit may be at most 1000000000.",
            ),
        ],
        async || catalog(&t).await,
    )
    .await;
    // The field in error is marked and keeps what was typed.
    let a = op.post(&path, &[("rule.fedwiki.active_sites", "-1")], true).await;
    assert!(a.body.contains(r#"id="rule.fedwiki.active_sites-error""#), "{}", a.body);
    assert!(a.body.contains(r#"value="-1""#), "{}", a.body);
    assert_eq!(
        rules_of(&t, basic).await,
        vec![("fedwiki.active_sites".into(), Some(3), None), ("fedwiki.custom_domain".into(), None, Some(true))]
    );
}

/// A rule for a key that does not exist is refused and writes nothing; the operator must also be
/// told which key is wrong.
#[tokio::test]
async fn a_rule_for_an_unknown_key_is_refused_naming_the_key() {
    let (t, op) = operator_session().await;
    let basic = set_id(&t, "Basic").await;
    let path = format!("/operator/catalog/sets/{basic}/rules");
    op.refuse_all(
        &path,
        "set-edit",
        &[(
            "an unknown key",
            vec![("rule.fedwiki.active_sites", "4"), ("rule.nope.nope", "1")],
            StatusCode::UNPROCESSABLE_ENTITY,
            "There is no resource key nope.nope.",
        )],
        async || catalog(&t).await,
    )
    .await;
}

#[tokio::test]
async fn bad_product_edits_are_refused_with_a_message_and_write_nothing() {
    let (t, op) = operator_session().await;
    let basic_product = product_id(&t, "Basic").await;
    let basic_set = set_id(&t, "Basic").await.to_string();
    let path = format!("/operator/catalog/products/{basic_product}");
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    op.refuse_all(
        &path,
        "product-edit",
        &[
            (
                "empty name",
                vec![("name", " "), ("entitlement_set_id", &basic_set), ("published", "on")],
                unprocessable,
                "A product needs a name.",
            ),
            (
                "another product's name",
                vec![("name", "Pro"), ("entitlement_set_id", &basic_set), ("published", "on")],
                unprocessable,
                "A product named “Pro” exists already.",
            ),
            (
                "clearing the set of a tier",
                vec![("name", "Basic"), ("entitlement_set_id", ""), ("published", "on")],
                unprocessable,
                "This product is a tier of a plan ladder, so it must keep an entitlement set.",
            ),
            (
                "an unknown set",
                vec![("name", "Basic"), ("entitlement_set_id", "987654"), ("published", "on")],
                unprocessable,
                "That entitlement set does not exist.",
            ),
            (
                "a non-numeric set",
                vec![("name", "Basic"), ("entitlement_set_id", "basic"), ("published", "on")],
                unprocessable,
                "Choose an entitlement set from the list.",
            ),
        ],
        async || catalog(&t).await,
    )
    .await;
    // Changing the set of a product pools carry is a rule change: refused, naming the pools.
    let pro = product_id(&t, "Pro").await;
    let a = op
        .post(
            &format!("/operator/catalog/products/{pro}"),
            &[("name", "Pro"), ("entitlement_set_id", &basic_set), ("published", "on")],
            true,
        )
        .await;
    assert_refused(&a, StatusCode::CONFLICT, true, "product-edit", "rule change", "set change of a carried product");
    assert!(a.body.contains("1 organization pool carries this now"), "{}", a.body);
    // An unknown product is a 404.
    let a = op.post("/operator/catalog/products/987654", &[("name", "X")], false).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(op.get("/operator/catalog/products/987654").await.status, StatusCode::NOT_FOUND);
    assert_eq!(op.get("/operator/catalog/sets/987654").await.status, StatusCode::NOT_FOUND);
}

// ---------- 4. Editing the rules of a set ----------

#[tokio::test]
async fn rules_of_an_uncarried_set_and_of_a_carried_set_are_rule_changes() {
    let (t, op) = operator_session().await;
    let basic = set_id(&t, "Basic").await;
    assert_eq!(pools_carrying(&t, basic).await, 0);

    // Uncarried: a rule change that owes nothing, settled at once; the set shows the new rules.
    let a = op
        .post(
            &format!("/operator/catalog/sets/{basic}/rules"),
            &[("rule.fedwiki.active_sites", "4"), ("rule.fedwiki.custom_domain", ""), ("rule.support.priority", "yes")],
            false,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let location = a.header("location").unwrap().to_string();
    assert!(location.starts_with("/operator/rule-changes/"), "{location}");
    assert_eq!(
        rules_of(&t, basic).await,
        vec![("fedwiki.active_sites".into(), Some(4), None), ("support.priority".into(), None, Some(true))]
    );
    let change = op.get(&location).await.body;
    assert!(change.contains("applied at once"), "{change}");
    assert!(change.contains("fedwiki.custom_domain"), "{change}");
    assert!(!change.contains("every 2s"), "a settled change does not poll: {change}");
    let catalog = op.get("/operator/catalog").await.body;
    let basic_row = row(&catalog, "Basic");
    assert!(basic_row.contains("<li><code>fedwiki.active_sites</code> = 4</li>"), "{basic_row}");
    assert!(basic_row.contains("<li><code>support.priority</code> = yes</li>"), "{basic_row}");
    assert!(!basic_row.contains("custom_domain"), "the emptied rule is gone: {basic_row}");

    // With HTMX: 200 and HX-Redirect to the change.
    let a =
        op.post(&format!("/operator/catalog/sets/{basic}/rules"), &[("rule.fedwiki.active_sites", "5")], true).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.header("hx-redirect").unwrap().starts_with("/operator/rule-changes/"));
    assert_eq!(rules_of(&t, basic).await[0], ("fedwiki.active_sites".into(), Some(5), None));

    // Carried (the demo organizations' floors carry Free): the change owes each carrying pool and
    // settles them (below the sync cap), and their entitlements follow.
    let free = set_id(&t, "Free").await;
    let pools = pools_carrying(&t, free).await;
    assert!(pools >= 2);
    let set_page = op.get(&format!("/operator/catalog/sets/{free}")).await.body;
    assert!(set_page.contains(&format!("This set is carried by {pools} pools")), "{set_page}");
    let a =
        op.post(&format!("/operator/catalog/sets/{free}/rules"), &[("rule.fedwiki.active_sites", "2")], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let change = op.get(a.header("location").unwrap()).await.body;
    assert!(change.contains(&format!("{pools} of {pools}")), "every carrying pool settled: {change}");
    assert_eq!(rules_of(&t, free).await, vec![("fedwiki.active_sites".into(), Some(2), None)]);
    assert_eq!(common::acts::org_sites(&t, "Acme Wikis").await, 2);

    // Submitting the rules as they are changes nothing: refused in place, nothing written.
    let counts = catalog_counts(&t).await;
    let a = op.post(&format!("/operator/catalog/sets/{free}/rules"), &[("rule.fedwiki.active_sites", "2")], true).await;
    assert_refused(&a, StatusCode::UNPROCESSABLE_ENTITY, true, "set-edit", "Nothing changed", "an unchanged set");
    assert_eq!(catalog_counts(&t).await, counts);
}

// ---------- 5. Another change in progress ----------

#[tokio::test]
async fn a_rule_edit_while_another_change_holds_the_rendezvous_is_refused_then_succeeds() {
    let mut t = demo_db().await;
    // The console's lock waits end after 300 ms (the run-time handle the server gets).
    t.db.lock_timeout = Duration::from_millis(300);
    let app = TestApp::spawn(&t).await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let basic = set_id(&t, "Basic").await;
    let path = format!("/operator/catalog/sets/{basic}/rules");
    let before = rules_of(&t, basic).await;

    // Another rule change holds the exclusive rendezvous.
    let holder = begin(&t.db, TxKind::RuleChange).await.unwrap();
    let started = std::time::Instant::now();
    let a = op.post(&path, &[("rule.fedwiki.active_sites", "7")], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(started.elapsed() < Duration::from_secs(5), "refused at the lock timeout, not the request deadline");
    assert!(a.body.contains("Another change is in progress"), "{}", a.body);
    assert!(a.body.contains("nothing was changed"), "{}", a.body);
    assert!(!a.body.contains("<html"), "the partial: {}", a.body);
    assert!(a.body.starts_with(r#"<div id="set-edit">"#), "{}", a.body);
    assert!(a.body.contains(r#"value="7""#), "the form keeps what was typed: {}", a.body);
    assert_eq!(rules_of(&t, basic).await, before, "nothing written");

    // Once the other change commits, the same post goes through.
    holder.commit().await.unwrap();
    let a = op.post(&path, &[("rule.fedwiki.active_sites", "7")], true).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.header("hx-redirect").unwrap().starts_with("/operator/rule-changes/"));
    assert_eq!(rules_of(&t, basic).await[0], ("fedwiki.active_sites".into(), Some(7), None));
}

/// A plan act's Retry is not one of the spec's change paths: what it waits for may be its own
/// act (the drain finishing it) or a move, so past its bound it says so in its own words.
#[tokio::test]
async fn a_retry_whose_act_row_is_held_past_the_bound_says_so_in_its_own_words_and_writes_nothing() {
    let common::acts::Demo { mut t, business, wiki, .. } = common::acts::demo().await;
    t.db.lock_timeout = Duration::from_millis(300);
    let act = common::acts::change(&t, business, wiki, Some(member_console::services::plan_acts::Disposition::Migrate))
        .await
        .unwrap();
    member_console::services::plan_acts::drain_plan_act(&t.db, act, None).await.unwrap();
    let app = TestApp::spawn(&t).await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let acts = common::acts::scalar(&t, "SELECT count(*) FROM core.plan_acts").await;
    // The act's row held, as its drain holds it while it finishes the act.
    let (held, _) =
        common::hold_open(&t, &format!("SELECT 1 FROM core.plan_acts WHERE plan_act_id = {act} FOR UPDATE")).await;
    for htmx in [false, true] {
        let a = op.post(&format!("/operator/plan-acts/{act}/retry"), &[], htmx).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "htmx {htmx}: {}", a.body);
        assert!(a.body.contains("organizations are being moved"), "htmx {htmx}: {}", a.body);
        assert!(a.body.contains("nothing was retried"), "htmx {htmx}: {}", a.body);
        assert!(a.body.contains("press Retry again"), "htmx {htmx}: {}", a.body);
        assert!(!a.body.contains("Another change is in progress"), "htmx {htmx}: {}", a.body);
    }
    assert_eq!(common::acts::scalar(&t, "SELECT count(*) FROM core.plan_acts").await, acts, "no Retry act kept");
    drop(held);
}

/// A product's entitlement-set change is not one of the spec's change paths: its exclusive
/// rendezvous waits for any materialization, so past its bound it says so in its own words.
#[tokio::test]
async fn a_product_set_change_behind_a_materialization_past_the_bound_says_so_in_its_own_words() {
    let mut t = demo_db().await;
    t.db.lock_timeout = Duration::from_millis(300);
    let app = TestApp::spawn(&t).await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let extra = common::acts::new_product(&t, "Extra sites", 1).await;
    let before: Option<i64> = t
        .one(sqlx::query_scalar("SELECT entitlement_set_id FROM core.products WHERE product_id = $1").bind(extra.0))
        .await;
    let other = set_id(&t, "Pro").await;
    assert_ne!(before, Some(other));
    // A materialization under way (a grant, a move, a reconcile) holds the shared rendezvous.
    let held = begin(&t.db, TxKind::Materializing).await.unwrap();
    let a = op
        .post(
            &format!("/operator/catalog/products/{extra}"),
            &[("name", "Extra sites"), ("entitlement_set_id", &other.to_string()), ("published", "on")],
            true,
        )
        .await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("entitlements are being recalculated"), "{}", a.body);
    assert!(a.body.contains("the product was not changed"), "{}", a.body);
    assert!(!a.body.contains("Another change is in progress"), "{}", a.body);
    let after: Option<i64> = t
        .one(sqlx::query_scalar("SELECT entitlement_set_id FROM core.products WHERE product_id = $1").bind(extra.0))
        .await;
    assert_eq!(after, before, "nothing written");
    held.rollback().await.unwrap();
}

// ---------- 6. Topology ----------

#[tokio::test]
async fn topology_shows_ladders_in_order_with_tiers_by_rank_and_org_types_with_their_defaults() {
    let (t, op) = operator_session().await;
    let a = op.get("/operator/topology").await;
    assert_eq!(a.status, StatusCode::OK);
    let html = &a.body;
    let wiki = html.find(">Wiki hosting</h3>").expect("the Wiki hosting ladder");
    let support = html.find(">Support</h3>").expect("the Support ladder");
    assert!(wiki < support, "ladders in their order");
    let wiki_card = &html[wiki..support];
    let support_card = &html[support..html.find("id=\"org-types-heading\"").unwrap()];

    let tier = |rank: &str, name: &str, id: i64, set: &str| {
        format!(
            "<td><span class=\"rank\">{rank}</span></td><td><a href=\"/operator/catalog/products/{id}\">{name}</a></td><td>{set}</td>"
        )
    };
    let floor = r#"0 <span class="badge badge-muted">floor</span>"#;
    let (free, basic, pro) = (product_id(&t, "Free").await, product_id(&t, "Basic").await, product_id(&t, "Pro").await);
    let positions: Vec<usize> =
        [tier(floor, "Free", free, "Free"), tier("1", "Basic", basic, "Basic"), tier("2", "Pro", pro, "Pro")]
            .iter()
            .map(|r| wiki_card.find(r.as_str()).unwrap_or_else(|| panic!("{r} in {wiki_card}")))
            .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "tiers by rank: {positions:?}");
    assert_eq!(wiki_card.matches("floor</span>").count(), 1, "only rank 0 is the floor");
    let community = product_id(&t, "Community support").await;
    let priority = product_id(&t, "Priority support").await;
    let c0 = support_card.find(&tier(floor, "Community support", community, "Community support")).unwrap();
    let c1 = support_card.find(&tier("1", "Priority support", priority, "Priority support")).unwrap();
    assert!(c0 < c1);

    // Org types: default ladder, floor product and how many organizations.
    let types = &html[html.find("id=\"org-types-heading\"").unwrap()..];
    assert!(
        types.contains(r#"<td>Business</td><td>Support</td><td>Community support</td><td class="num">1</td>"#),
        "{types}"
    );
    assert!(types.contains(r#"<td>Community</td><td>Wiki hosting</td><td>Free</td><td class="num">3</td>"#), "{types}");

    // The picture, above the forms: each ladder's rungs from the floor up, with the
    // organizations on each (counted here by product, not by the rank the page reads), and the
    // org types that default to it.
    let picture = html.find(r#"<figure class="ladder-picture""#).expect("the picture");
    assert!(picture < html.find(r#"id="ladder-order""#).unwrap(), "drawn above the forms");
    let on_tier = |ladder: &'static str| {
        sqlx::query_as::<_, (i32, String, i64)>(
            "SELECT t.rank, p.name, (SELECT count(*) FROM core.positions ps JOIN core.conferrals c USING (conferral_id)
                                     WHERE ps.plan_ladder_id = t.plan_ladder_id AND c.product_id = t.product_id)
             FROM core.plan_ladder_tiers t JOIN core.plan_ladders l USING (plan_ladder_id) JOIN core.products p USING (product_id)
             WHERE l.name = $1 ORDER BY t.rank",
        )
        .bind(ladder)
        .fetch_all(&t.admin)
    };
    let rungs_said = |figure: &str| -> Vec<String> {
        figure.split(r#"<li class="rung-text">"#).skip(1).map(|s| s[..s.find("</li>").unwrap()].to_string()).collect()
    };
    let words = |rank: i32, name: &str, n: i64| {
        let floor = if rank == 0 { ", the floor" } else { "" };
        let organizations = if n == 1 { "organization" } else { "organizations" };
        format!("Rank {rank}{floor}: {name}, {n} {organizations}")
    };
    let figures: Vec<usize> = html.match_indices(r#"<figure class="ladder-picture""#).map(|(i, _)| i).collect();
    assert_eq!(figures.len(), 2, "a picture per ladder");
    let end = figures[1] + html[figures[1]..].find("</figure>").unwrap();
    let (wiki_fig, support_fig) = (&html[figures[0]..figures[1]], &html[figures[1]..end]);
    assert!(wiki_fig.contains("<figcaption>Wiki hosting</figcaption>"), "{wiki_fig}");
    assert!(support_fig.contains("<figcaption>Support</figcaption>"), "{support_fig}");
    let wiki_tiers = on_tier("Wiki hosting").await.unwrap();
    assert_eq!(wiki_tiers.iter().map(|(_, name, _)| name.as_str()).collect::<Vec<_>>(), ["Free", "Basic", "Pro"]);
    assert!(wiki_tiers.iter().filter(|(_, _, n)| *n > 0).count() >= 2, "a seeded topology: {wiki_tiers:?}");
    assert_eq!(rungs_said(wiki_fig), wiki_tiers.iter().map(|(r, p, n)| words(*r, p, *n)).collect::<Vec<_>>());
    let support_tiers = on_tier("Support").await.unwrap();
    assert_eq!(rungs_said(support_fig), support_tiers.iter().map(|(r, p, n)| words(*r, p, *n)).collect::<Vec<_>>());
    // Drawn too: the floor's label with its count.
    let (_, free, on_free) = &wiki_tiers[0];
    let on_free_words = format!("{on_free} organization{}", if *on_free == 1 { "" } else { "s" });
    assert!(wiki_fig.contains(&format!(">{free}</text>")), "{wiki_fig}");
    assert!(wiki_fig.contains(&format!(">floor · {on_free_words}</text>")), "{wiki_fig}");
    // The org types point at their default ladder's floor, each on its own ladder.
    assert!(wiki_fig.contains(
        "Community (3 organizations) defaults to this ladder: its organizations hold the floor, Free, when nothing else holds it."
    ), "{wiki_fig}");
    assert!(support_fig.contains(
        "Business (1 organization) defaults to this ladder: its organizations hold the floor, Community support, when nothing else holds it."
    ), "{support_fig}");
    assert!(!wiki_fig.contains("Business") && !support_fig.contains(">Community</text>"));
}

// ---------- 7. The organizations list ----------

#[tokio::test]
async fn organizations_are_searched_by_name_prefix_in_any_case() {
    let (t, op) = operator_session().await;
    for q in ["acme", "ACME", "Acme%20W", "%20acme%20"] {
        let a = op.get(&format!("/operator/organizations?q={q}")).await;
        assert_eq!(a.status, StatusCode::OK, "{q}");
        assert!(a.body.contains("Acme Wikis</a>"), "{q}: {}", a.body);
        assert!(!a.body.contains("Globex"), "{q}: {}", a.body);
        assert!(!a.body.contains("Umbrella Wikis"), "a prefix, not a substring ({q})");
        assert!(a.body.contains("1 organization matching"), "{q}: {}", a.body);
        assert!(a.body.contains("<html"), "a plain search gets the page");
    }
    // A substring that is no prefix finds nothing, and says so.
    let a = op.get("/operator/organizations?q=wikis").await;
    assert!(a.body.contains("No organizations match “wikis”."), "{}", a.body);
    // LIKE's wildcards are plain characters.
    let a = op.get("/operator/organizations?q=%25").await;
    assert!(a.body.contains("No organizations match “%”."), "{}", a.body);
    // No search lists them all.
    let a = op.get("/operator/organizations").await;
    for name in ["Acme Wikis", "Globex", "Initech", "Umbrella Wikis"] {
        assert!(a.body.contains(&format!("{name}</a>")), "{name}");
    }
    assert!(a.body.contains("4 organizations"), "{}", a.body);
    let initech = organization_id(&t, "Initech").await;
    let initech_row = row(&a.body, &format!("<a href=\"/operator/organizations/{initech}\">Initech</a>"));
    assert!(initech_row.contains("<td>Community</td><td>Wiki hosting: Pro</td>"), "{initech_row}");
}

#[tokio::test]
async fn an_htmx_search_from_the_box_gets_only_the_results() {
    let (_t, op) = operator_session().await;
    let a = op.get_htmx("/operator/organizations?q=acme", "org-results").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.starts_with(r#"<div id="org-results">"#), "{}", a.body);
    assert!(!a.body.contains("<html") && !a.body.contains("<form"), "{}", a.body);
    assert!(a.body.contains("Acme Wikis</a>") && !a.body.contains("Globex"), "{}", a.body);
}

/// htmx 4 (static/htmx.min.js) sends `HX-Target` as `tag#id`, i.e. `div#org-results`: what the
/// search box really sends must get the results alone, not a whole page inside `#org-results`.
#[tokio::test]
async fn an_htmx_search_with_the_target_header_htmx_4_sends_gets_only_the_results() {
    let (_t, op) = operator_session().await;
    let a = op.get_htmx("/operator/organizations?q=acme", "div#org-results").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.starts_with(r#"<div id="org-results">"#), "{}", a.body);
    assert!(!a.body.contains("<form"), "the search form would be nested in the results: {}", a.body);
}

/// The href of the pager's link `rel`, if the page has one.
fn pager_link(html: &str, rel: &str) -> Option<String> {
    let marker = format!(r#"rel="{rel}" href=""#);
    let start = html.find(&marker)? + marker.len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].replace("&amp;", "&"))
}

/// The organizations a list page names, in order.
fn names_listed(html: &str) -> Vec<String> {
    html.split("<a href=\"/operator/organizations/")
        .skip(1)
        .filter_map(|s| s.split_once("\">").and_then(|(_, rest)| rest.split_once("</a>")).map(|(n, _)| n.to_string()))
        .collect()
}

#[tokio::test]
async fn organizations_are_paged_by_name_fifty_at_a_time_from_first_to_last_and_back() {
    let (t, op) = operator_session().await;
    let community = common::acts::type_id(&t, "Community").await;
    for i in 0..60 {
        create_organization(&t.db, &OrgName::parse(&format!("Org {i:03}")).unwrap(), Some(community)).await.unwrap();
    }
    // By name, byte order: Acme Wikis, Globex, Initech, Org 000 … Org 059, Umbrella Wikis.
    let mut all = vec!["Acme Wikis".to_string(), "Globex".into(), "Initech".into()];
    all.extend((0..60).map(|i| format!("Org {i:03}")));
    all.push("Umbrella Wikis".into());

    let one = op.get("/operator/organizations").await;
    assert_eq!(one.status, StatusCode::OK);
    assert!(one.body.contains("64 organizations"), "{}", one.body);
    assert_eq!(names_listed(&one.body), all[..50]);
    assert_eq!(pager_link(&one.body, "prev"), None);
    assert_eq!(pager_link(&one.body, "last").as_deref(), Some("/operator/organizations?at=last"));

    // Forward to the end by the Next links, then back to the start by the Previous links.
    let mut seen = names_listed(&one.body);
    let mut page = one;
    while let Some(next) = pager_link(&page.body, "next") {
        page = op.get(&next).await;
        assert_eq!(page.status, StatusCode::OK);
        seen.extend(names_listed(&page.body));
    }
    assert_eq!(seen, all, "every organization once, in order");
    assert_eq!(names_listed(&page.body), all[50..]);
    let mut back = names_listed(&page.body);
    while let Some(prev) = pager_link(&page.body, "prev") {
        page = op.get(&prev).await;
        back.splice(0..0, names_listed(&page.body));
    }
    assert_eq!(back, all);

    // The last page is the last fifty.
    let last = op.get("/operator/organizations?at=last").await;
    assert_eq!(names_listed(&last.body), all[14..]);
    assert_eq!(pager_link(&last.body, "next"), None);
    assert!(pager_link(&last.body, "prev").is_some());

    // Paging keeps the search.
    let searched = op.get_htmx("/operator/organizations?q=org", "org-results").await;
    assert!(searched.body.starts_with(r#"<div id="org-results">"#), "{}", searched.body);
    assert!(searched.body.contains("60 organizations matching “org”"), "{}", searched.body);
    let next = pager_link(&searched.body, "next").unwrap();
    assert!(next.starts_with("/operator/organizations?q=org&after="), "{next}");
    let two = op.get_htmx(&next, "org-results").await;
    assert_eq!(names_listed(&two.body), all[53..63]);

    // A search for an id shows that organization first.
    let globex = organization_id(&t, "Globex").await;
    let by_id = op.get(&format!("/operator/organizations?q={globex}")).await;
    assert_eq!(names_listed(&by_id.body).first().map(String::as_str), Some("Globex"));
}

#[tokio::test]
async fn a_search_matching_very_many_organizations_counts_to_a_cap() {
    let (t, op) = operator_session().await;
    many_organizations(&t, 1005, 5).await;
    let a = op.get("/operator/organizations?q=many").await;
    assert!(a.body.contains("More than 1,000 organizations matching “many”"), "{}", a.body);
    let all = op.get("/operator/organizations").await;
    assert!(all.body.contains("1,009 organizations"), "{}", all.body);
}

#[tokio::test]
async fn a_set_and_a_product_carried_by_very_many_pools_count_to_a_cap() {
    let (t, op) = operator_session().await;
    let community = common::acts::type_id(&t, "Community").await;
    // Community organizations (each holding the Free floor) up to the cap of 1,000: exact...
    let free = set_id(&t, "Free").await;
    let carriers = async |from: i64, to: i64| {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let db = t.db.clone();
                tokio::spawn(async move {
                    for i in (from + w..to).step_by(8) {
                        let name = OrgName::parse(&format!("Carrier {i:05}")).unwrap();
                        create_organization(&db, &name, Some(community)).await.unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
    };
    carriers(0, 1000 - pools_carrying(&t, free).await).await;
    assert_eq!(pools_carrying(&t, free).await, 1000);
    let catalog = op.get("/operator/catalog").await.body;
    assert!(row(&catalog, "Free").contains("carried by 1,000 pools"), "{catalog}");
    // ...and one more is "more than".
    carriers(5000, 5001).await;
    assert_eq!(pools_carrying(&t, free).await, 1001);

    let catalog = op.get("/operator/catalog").await.body;
    assert!(row(&catalog, "Free").contains("carried by more than 1,000 pools"), "{catalog}");
    let set_page = op.get(&format!("/operator/catalog/sets/{free}")).await.body;
    assert!(set_page.contains("This set is carried by more than 1,000 pools"), "{set_page}");
    let product = product_id(&t, "Free").await;
    let product_page = op.get(&format!("/operator/catalog/products/{product}")).await.body;
    assert!(product_page.contains("carried by more than 1,000 pools"), "{product_page}");
    // Refusing a set change says so too, and writes nothing.
    let basic = set_id(&t, "Basic").await.to_string();
    let a = op
        .post(
            &format!("/operator/catalog/products/{product}"),
            &[("name", "Free"), ("entitlement_set_id", &basic), ("published", "on")],
            true,
        )
        .await;
    assert_refused(&a, StatusCode::CONFLICT, true, "product-edit", "more than 1,000 organization pools carry", "cap");
    assert_eq!(pools_carrying(&t, free).await, 1001);
}

#[tokio::test]
async fn the_organization_counts_stay_exact_through_inserts_retypes_deletes_and_compaction() {
    let t = demo_db().await;
    let exact = || async {
        let kept: Vec<(Option<i64>, i64)> = t.all(sqlx::query_as(
            "SELECT org_type_id, sum(delta)::bigint FROM core.organization_counts GROUP BY 1 HAVING sum(delta) <> 0 ORDER BY 1 NULLS FIRST",
        )).await;
        let counted: Vec<(Option<i64>, i64)> = t
            .all(sqlx::query_as(
                "SELECT org_type_id, count(*) FROM core.organizations GROUP BY 1 ORDER BY 1 NULLS FIRST",
            ))
            .await;
        assert_eq!(kept, counted);
    };
    exact().await;
    let community = common::acts::type_id(&t, "Community").await;
    // Concurrent creations through the console: none waits on a counter.
    let mut made = tokio::task::JoinSet::new();
    for i in 0..20 {
        let db = t.db.clone();
        made.spawn(async move {
            create_organization(&db, &OrgName::parse(&format!("Counted {i}")).unwrap(), Some(community)).await.unwrap()
        });
    }
    while made.join_next().await.is_some() {}
    exact().await;
    sqlx::raw_sql(
        "INSERT INTO core.organizations (name) SELECT 'Typeless ' || g FROM generate_series(1, 7) g;
         UPDATE core.organizations SET org_type_id = (SELECT org_type_id FROM core.org_types WHERE name = 'Business')
          WHERE name LIKE 'Typeless %' AND name < 'Typeless 4';
         UPDATE core.organizations SET name = name || '!' WHERE name LIKE 'Counted 1%';
         DELETE FROM core.organizations WHERE name = 'Typeless 7';",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    exact().await;
    let folded = member_console::services::organizations::compact_counts(&t.db).await.unwrap();
    assert!(folded > 0);
    exact().await;
    let rows: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.organization_counts")).await;
    assert_eq!(rows, 3, "one row per type after the compaction (Community, Business, none)");
}

#[tokio::test]
async fn a_bad_page_asked_for_is_a_400_with_a_message() {
    let (_t, op) = operator_session().await;
    for (query, shown) in [
        ("after=abc", "“abc” is not an organization id."),
        ("before=1.5", "“1.5” is not an organization id."),
        ("after=1&before=2", "Ask for one page"),
        ("at=somewhere", "Ask for one page"),
    ] {
        let a = op.get(&format!("/operator/organizations?{query}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{query}: {}", a.body);
        assert!(a.body.contains(shown), "{query}: {}", a.body);
    }
    let a = op.get(&format!("/operator/organizations?q={}", "a".repeat(201))).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body.contains("A search may have at most 200 characters."), "{}", a.body);
}

// ---------- 8. One organization ----------

#[tokio::test]
async fn organization_detail_shows_plan_with_source_entitlements_usage_and_members() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let floor_grant = active_grant(&t, acme, "floor").await;
    let a = op.get(&format!("/operator/organizations/{acme}")).await;
    assert_eq!(a.status, StatusCode::OK);
    let html = &a.body;
    assert!(html.contains("<h1>Acme Wikis</h1>"), "{html}");
    assert!(html.contains("<dd>Community</dd>"), "{html}");
    let plan = row(html, "Wiki hosting");
    assert!(plan.contains(r#"<span class="rank">0 <span class="badge badge-muted">floor</span></span>"#), "{plan}");
    assert!(plan.contains("<td>Free</td>"), "{plan}");
    assert!(plan.contains(&format!("<td>floor grant #{floor_grant}</td>")), "{plan}");
    assert!(plan.contains(r#"<span class="badge badge-ok">active</span>"#), "{plan}");
    assert!(
        html.contains(r#"<tr><td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>1</td></tr>"#),
        "{html}"
    );
    assert!(
        html.contains(
            r#"<td>Active sites <code class="muted">fedwiki.active_sites</code></td><td class="num">0 of 1</td>"#
        ),
        "{html}"
    );
    assert!(html.contains("<tr><td>member@example.com</td><td>owner</td></tr>"), "{html}");
    assert!(!html.contains("displaced-heading"), "nothing displaced at Acme");

    // An unknown id is a 404 page.
    let a = op.get("/operator/organizations/987654").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("<html"), "a page");
    assert!(a.body.contains("There is nothing at this address"), "{}", a.body);
    // So is an id that is no number (its wording is actix's, see the report).
    let a = op.get("/operator/organizations/not-a-number").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("<html"), "a page");
}

#[tokio::test]
async fn initech_holds_pro_by_an_operator_grant_with_ten_sites() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let grant = active_grant(&t, initech, "operator").await;
    let html = op.get(&format!("/operator/organizations/{initech}")).await.body;
    let plan = row(&html, "Wiki hosting");
    assert!(plan.contains(r#"<span class="rank">2</span>"#), "{plan}");
    assert!(plan.contains("<td>Pro</td>"), "{plan}");
    assert!(plan.contains(&format!("<td>operator grant #{grant}</td>")), "{plan}");
    assert!(
        html.contains(r#"<tr><td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>10</td></tr>"#),
        "{html}"
    );
    assert!(
        html.contains(
            r#"<tr><td>Custom domain <code class="muted">fedwiki.custom_domain</code></td><td>included</td></tr>"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<td class="num">0 of 10</td>"#), "{html}");
    // Pro displaced the floor: the floor grant ended (it is not "replaced", so nothing waits to
    // come back and no Displaced section shows).
    let floor: String = t
        .one(
            sqlx::query_scalar("SELECT status FROM core.grants WHERE organization_id = $1 AND kind = 'floor'")
                .bind(initech),
        )
        .await;
    assert_eq!(floor, "ended");
    assert!(!html.contains("displaced-heading"), "{html}");
    let plan_section = &html[html.find("plan-heading").unwrap()..html.find("grants-heading").unwrap()];
    assert!(!plan_section.contains("<td>Free</td>"), "the floor holds nothing: {plan_section}");
}

// ---------- 9. Members and anonymous visitors ----------

#[tokio::test]
async fn a_member_sees_their_organizations_plan_entitlements_and_usage_on_home() {
    let (_t, app) = app_with_demo().await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let a = member.get("/").await;
    assert_eq!(a.status, StatusCode::OK);
    let html = &a.body;
    assert!(html.contains(">Acme Wikis</h2>"), "{html}");
    assert!(html.contains("Your role: owner"), "{html}");
    assert!(html.contains(r#"<span class="plan-ladder">Wiki hosting: </span><strong>Free</strong>"#), "{html}");
    assert!(html.contains("— included with your organization type"), "{html}");
    assert!(html.contains("<dt>Active sites</dt><dd>1</dd>"), "{html}");
    assert!(html.contains("<dt>Active sites</dt><dd>0 of 1</dd>"), "{html}");
    assert!(!html.contains("Initech") && !html.contains("Globex"), "only the member's organization");
}

#[tokio::test]
async fn members_are_refused_and_anonymous_visitors_sent_to_sign_in_on_every_operator_page() {
    let (t, app) = app_with_demo().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let basic_set = set_id(&t, "Basic").await;
    let basic = product_id(&t, "Basic").await;
    let pages = [
        "/operator/catalog".to_string(),
        "/operator/topology".to_string(),
        "/operator/organizations".to_string(),
        "/operator/organizations?q=acme".to_string(),
        format!("/operator/organizations/{acme}"),
        format!("/operator/catalog/sets/{basic_set}"),
        format!("/operator/catalog/products/{basic}"),
    ];
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/operator/catalog/keys".into(), vec![("key", "wiki.pages"), ("kind", "numeric")]),
        ("/operator/catalog/sets".into(), vec![("name", "Sneaky")]),
        ("/operator/catalog/products".into(), vec![("name", "Sneaky")]),
        (format!("/operator/catalog/sets/{basic_set}/rules"), vec![("rule.fedwiki.active_sites", "99")]),
        (format!("/operator/catalog/products/{basic}"), vec![("name", "Sneaky"), ("entitlement_set_id", "")]),
    ];
    let snapshot = catalog_snapshot(&t).await;

    assert_operators_only(&app, &pages, &forms).await;
    assert_eq!(catalog_snapshot(&t).await, snapshot, "no refused post wrote anything");
}

// ---------- 8. A form with a field it does not have, or without one ----------

/// The ladders, their tiers and the plan acts, to prove a refused topology form wrote nothing.
async fn topology_snapshot(t: &TestDb) -> String {
    t.one(sqlx::query_scalar(
        "SELECT concat_ws(E'\\n',
            (SELECT string_agg(format('%s|%s', plan_ladder_id, sort_order), ';' ORDER BY plan_ladder_id)
               FROM core.plan_ladders),
            (SELECT string_agg(format('%s|%s|%s', plan_ladder_id, rank, product_id), ';' ORDER BY plan_ladder_id, rank)
               FROM core.plan_ladder_tiers),
            (SELECT count(*)::text FROM core.plan_acts))",
    ))
    .await
}

/// A field the form does not have (a misspelling, a page older than the console) is refused
/// naming it, and a field not sent at all gets that field's own message, as an empty one does:
/// each a 4xx, and nothing written.
#[tokio::test]
async fn a_misspelt_or_missing_field_on_a_catalog_or_topology_form_is_refused_by_name() {
    let (t, op) = operator_session().await;
    let set = set_id(&t, "Basic").await;
    let product = product_id(&t, "Basic").await;
    let wiki = common::acts::ladder_id(&t, "Wiki hosting").await.0;
    let (rules, edit) =
        (format!("/operator/catalog/sets/{set}/rules"), format!("/operator/catalog/products/{product}"));
    let add_tier = format!("/operator/topology/ladders/{wiki}/tiers");
    let misspelt = [
        ("/operator/catalog/keys", &[("key", "wiki.pages"), ("knd", "numeric")][..], "knd"),
        ("/operator/catalog/sets", &[("nam", "Gold")][..], "nam"),
        ("/operator/catalog/products", &[("name", "Gold"), ("publsihed", "on")][..], "publsihed"),
        (edit.as_str(), &[("name", "Basic"), ("entitlement_set", "1")][..], "entitlement_set"),
        (rules.as_str(), &[("rules.fedwiki.active_sites", "4")][..], "rules.fedwiki.active_sites"),
        (add_tier.as_str(), &[("product", "1")][..], "product"),
        ("/operator/topology/ladder-order", &[("positon.1", "1")][..], "positon.1"),
    ];
    let missing = [
        ("/operator/catalog/keys", &[("key", "wiki.pages")][..], "is not a kind: choose numeric or flag."),
        ("/operator/catalog/sets", &[][..], "An entitlement set needs a name."),
        ("/operator/catalog/products", &[][..], "A product needs a name."),
        (edit.as_str(), &[][..], "A product needs a name."),
        (add_tier.as_str(), &[("rank", "1")][..], "Choose a product."),
    ];
    let written = async || (catalog_counts(&t).await, catalog_snapshot(&t).await, topology_snapshot(&t).await);
    op.refuse_misspelt_and_missing(&misspelt, &missing, written).await;
}
