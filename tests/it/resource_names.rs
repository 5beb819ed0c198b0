//! Issue 39, words a member understands: every member page of the demo shows a resource key's
//! name, never the key; an operator's rename in the catalog shows on the member's home; a bad
//! name or unit is refused in words and writes nothing. The rename's lock is walked in
//! walk_catalog.rs.

use member_console::{
    demo,
    ids::ResourceKey,
    services::{
        ServiceError,
        catalog::{self, KeyDisplayName, KeyUnit},
    },
    web::routes::{Access, ROUTES},
};
use reqwest::StatusCode;

use crate::common::{
    TestDb,
    pages::{RefusalCase, Session, app_with_demo, assert_sent_to, demo_db, organization_id},
};

/// Every key the catalog has: none of them may appear on a member's page.
async fn catalog_keys(t: &TestDb) -> Vec<String> {
    t.all(sqlx::query_scalar("SELECT resource_key FROM core.resource_keys ORDER BY resource_key")).await
}

/// What the rename writes: every key's name and unit.
async fn labels(t: &TestDb) -> Vec<(String, String, Option<String>)> {
    t.all(sqlx::query_as("SELECT resource_key, display_name, unit FROM core.resource_keys ORDER BY resource_key")).await
}

/// A member route's path with the demo's ids in it; None for a segment the demo has nothing for.
async fn member_path(t: &TestDb, pattern: &str) -> Option<String> {
    let mut out = vec![];
    let mut previous = "";
    for seg in pattern.split('/') {
        let value = match (previous, seg) {
            ("organizations", "{id}") => organization_id(t, demo::DEMO_ORGANIZATION).await.to_string(),
            ("sites", "{id}") => {
                let site: Option<String> = t.one(sqlx::query_scalar("SELECT min(site_id) FROM fedwiki.sites")).await;
                site?
            }
            (_, s) if s.starts_with('{') => return None,
            (_, s) => s.to_string(),
        };
        out.push(value);
        previous = seg;
    }
    Some(out.join("/"))
}

#[tokio::test]
async fn no_member_page_of_the_demo_shows_a_resource_key_and_the_home_names_active_sites() {
    let (t, app) = app_with_demo().await;
    let keys = catalog_keys(&t).await;
    assert!(keys.iter().any(|k| k == "fedwiki.active_sites"), "the demo's keys: {keys:?}");
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let mut read = vec![];
    for route in ROUTES.iter().filter(|r| r.method == "GET") {
        if !(route.access.is_member() || route.access == Access::Public) {
            continue;
        }
        let Some(path) = member_path(&t, route.path).await else { continue };
        for (p, htmx) in [(path.clone(), false), (path.clone(), true)] {
            let a = if htmx { member.get_htmx(&p, "main").await } else { member.get(&p).await };
            assert!(a.status.as_u16() < 500, "GET {p} (htmx {htmx}): {} {}", a.status, a.body);
            for k in &keys {
                assert!(!a.body.contains(k.as_str()), "GET {p} (htmx {htmx}) shows the key {k}: {}", a.body);
            }
        }
        read.push(path);
    }
    for must in ["/", "/billing", "/sites", "/account"] {
        assert!(read.iter().any(|p| p == must), "{must} was read: {read:?}");
    }
    assert!(read.iter().any(|p| p.ends_with("/members")), "an organization's members page was read: {read:?}");
    let home = member.get("/").await;
    assert_eq!(home.status, StatusCode::OK);
    assert!(home.body.contains("<dt>Active sites</dt><dd>1</dd>"), "{}", home.body);
    assert!(home.body.contains("<dt>Active sites</dt><dd>0 of 1</dd>"), "{}", home.body);
}

#[tokio::test]
async fn an_operators_rename_in_the_catalog_shows_on_the_members_home_with_its_unit() {
    let (_t, app) = app_with_demo().await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let member = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let catalog_page = op.get("/operator/catalog").await;
    assert!(
        catalog_page.body.contains(r#"Active sites <code class="muted">fedwiki.active_sites</code>"#),
        "the operator reads the name and the key: {}",
        catalog_page.body
    );
    for (htmx, name, unit, shown) in [
        (false, "Wiki sites", "", "<dt>Wiki sites</dt><dd>1</dd>"),
        (true, "Wiki room", "wikis", "<dt>Wiki room</dt><dd>1 wikis</dd>"),
    ] {
        let a = op.post("/operator/catalog/keys/fedwiki.active_sites", &[("name", name), ("unit", unit)], htmx).await;
        assert_sent_to(&a, htmx, "/operator/catalog");
        let home = member.get("/").await;
        assert!(home.body.contains(shown), "{shown}: {}", home.body);
        assert!(!home.body.contains("Active sites"), "the old name is gone: {}", home.body);
    }
    let home = member.get("/").await;
    assert!(home.body.contains("<dt>Wiki room</dt><dd>0 of 1 wikis</dd>"), "{}", home.body);
}

#[tokio::test]
async fn a_bad_name_or_unit_is_refused_in_words_and_nothing_is_written() {
    let (t, app) = app_with_demo().await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let long_name = "n".repeat(101);
    let long_unit = "u".repeat(21);
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let numeric: Vec<RefusalCase> = vec![
        ("a blank name", vec![("name", "   "), ("unit", "")], unprocessable, "needs a name members read"),
        ("no name", vec![("unit", "GB")], unprocessable, "needs a name members read"),
        ("a long name", vec![("name", long_name.as_str()), ("unit", "")], unprocessable, "at most 100 printable"),
        ("a long unit", vec![("name", "Sites"), ("unit", long_unit.as_str())], unprocessable, "at most 20 printable"),
        (
            "another key's name",
            vec![("name", "priority SUPPORT"), ("unit", "")],
            unprocessable,
            "Another resource key is named",
        ),
    ];
    let path = "/operator/catalog/keys/fedwiki.active_sites";
    op.refuse_all(path, "key-label-fedwiki-active_sites", &numeric, async || labels(&t).await).await;
    let flag: Vec<RefusalCase> = vec![(
        "a unit on a flag",
        vec![("name", "Own domain"), ("unit", "GB")],
        unprocessable,
        "This key is a flag (included or not): it has no unit.",
    )];
    let path = "/operator/catalog/keys/fedwiki.custom_domain";
    op.refuse_all(path, "key-label-fedwiki-custom_domain", &flag, async || labels(&t).await).await;
    // A field the form does not have, and a key that is not (or no longer) in the catalog: a
    // 422 naming the field, and not found (never a failure).
    let before = labels(&t).await;
    for htmx in [false, true] {
        let a = op.post(path, &[("name", "Own domain"), ("units", "GB")], htmx).await;
        assert_eq!(a.status, unprocessable, "{}", a.body);
        assert!(a.body.contains("This form has no field “units”"), "{}", a.body);
        let a = op.post("/operator/catalog/keys/fedwiki.gone", &[("name", "Gone"), ("unit", "")], htmx).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    }
    assert_eq!(labels(&t).await, before);
}

#[tokio::test]
async fn a_rename_of_a_key_removed_meanwhile_is_not_found_and_writes_nothing() {
    let t = demo_db().await;
    let key = ResourceKey::from("fedwiki.retired_key");
    sqlx::query("INSERT INTO core.resource_keys (resource_key, kind) VALUES ($1, 'numeric')")
        .bind(key.as_str())
        .execute(&t.admin)
        .await
        .unwrap();
    let named: String = t
        .one(
            sqlx::query_scalar("SELECT display_name FROM core.resource_keys WHERE resource_key = $1")
                .bind(key.as_str()),
        )
        .await;
    assert_eq!(named, "Retired key", "a new key is named from its last word");
    sqlx::query("DELETE FROM core.resource_keys WHERE resource_key = $1")
        .bind(key.as_str())
        .execute(&t.admin)
        .await
        .unwrap();
    let before = labels(&t).await;
    let out = catalog::rename_resource_key(
        &t.db,
        &key,
        &KeyDisplayName::parse("Retired").unwrap(),
        &KeyUnit::parse("GB").unwrap(),
    )
    .await;
    assert!(matches!(out, Err(ServiceError::NotFound(_))), "{out:?}");
    assert_eq!(labels(&t).await, before);
}
