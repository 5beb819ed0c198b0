//! Row-level walks (issue 36) of paths outside the spec's 63: the catalog's product edits
//! (UpdateProduct, a change of a product's entitlement set, a product's seats), a resource key's
//! rename (issue 39), Keep active, the
//! farm's callback (reached as the farm reaches it, a signed POST to `/farm/callbacks`) and an
//! operator's edit of a connection. Each runs the service function under `LockWalk`, paused after
//! each lock it takes, and asserts what it holds and that a probe waits on it for that very row
//! or key (`tests/it/common/locks.rs`); then what the path did.

use crate::common;
use crate::sites::{callback_at, post_callback, setup};

use std::sync::Arc;

use common::{
    TestApp,
    acts::{community_org, grant, new_product},
    locks::{Expect, LockWalk, RowMode},
    pages::demo_db,
};
use member_console::{
    db::Db,
    ids::{ProductId, ResourceKey},
    integrations::farm::Farm,
    services::{
        ServiceError, catalog,
        desired_state::connections::{self, NewConnection},
        fedwiki::{self, Received, callbacks, handlers},
    },
    store::desired_state as ds_store,
};

/// A product's row as an UPDATE that changes no key column holds it (FOR NO KEY UPDATE).
fn product_row(p: ProductId) -> Expect {
    Expect::row_in("core.products", p.0, RowMode::NoKeyUpdate)
}

/// A site's row as an UPDATE of its flag or its observation holds it (no key column changes).
fn site_row(site_id: &member_console::ids::SiteId) -> Expect {
    Expect::row_in("fedwiki.sites", site_id, RowMode::NoKeyUpdate)
}

async fn product_facts(t: &common::TestDb, p: ProductId) -> (String, Option<i64>, bool, i32) {
    t.one(
        sqlx::query_as(
            "SELECT name, entitlement_set_id, published, max_quantity FROM core.products WHERE product_id = $1",
        )
        .bind(p.0),
    )
    .await
}

// UpdateProduct ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_update_of_a_products_publication_walked_lock_by_lock_takes_only_the_product_row_for_no_key_update() {
    let t = demo_db().await;
    let p = new_product(&t, "Walked product", 2).await;
    let set = product_facts(&t, p).await.1.map(member_console::ids::EntitlementSetId);
    let out = LockWalk::run(&t, &catalog::UPDATE_PRODUCT_LOCKS, &[product_row(p)], move |db| async move {
        catalog::update_product(&db, p, &catalog::ProductName::parse("Walked product").unwrap(), set, false).await
    })
    .await;
    out.unwrap();
    assert_eq!(product_facts(&t, p).await, ("Walked product".into(), set.map(|s| s.0), false, 1));
}

#[tokio::test]
async fn a_rename_of_a_product_walked_lock_by_lock_takes_only_the_product_row_for_no_key_update() {
    let t = demo_db().await;
    let p = new_product(&t, "Walked name", 2).await;
    let set = product_facts(&t, p).await.1.map(member_console::ids::EntitlementSetId);
    // The name's uniqueness is an expression index (migration 0015), not a key of the row: a
    // rename changes no key, so it takes the row FOR NO KEY UPDATE, as the spec's lock table says.
    let out = LockWalk::run(&t, &catalog::UPDATE_PRODUCT_LOCKS, &[product_row(p)], move |db| async move {
        catalog::update_product(&db, p, &catalog::ProductName::parse("Walked name, renamed").unwrap(), set, true).await
    })
    .await;
    out.unwrap();
    assert_eq!(product_facts(&t, p).await, ("Walked name, renamed".into(), set.map(|s| s.0), true, 1));
}

/// A rename beside a conferral: the conferral's insert holds the product's row FOR KEY SHARE
/// through its foreign key, and the rename goes through without waiting for it. Before migration
/// 0015 the name was a UNIQUE column, a key: a rename took the row FOR UPDATE and waited.
#[tokio::test]
async fn a_rename_does_not_wait_for_a_conferral_holding_the_products_row_for_key_share() {
    let t = demo_db().await;
    let p = new_product(&t, "Renamed beside", 2).await;
    let set = product_facts(&t, p).await.1.map(member_console::ids::EntitlementSetId);
    let mut held = t.admin.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM core.products WHERE product_id = $1 FOR KEY SHARE")
        .bind(p.0)
        .execute(&mut *held)
        .await
        .unwrap();
    let db = t.db.clone();
    let rename = tokio::spawn(async move {
        catalog::update_product(&db, p, &catalog::ProductName::parse("Renamed beside, renamed").unwrap(), set, true)
            .await
    });
    let done = tokio::time::timeout(std::time::Duration::from_secs(10), rename).await;
    held.rollback().await.unwrap();
    done.expect("the rename waited on the conferral's FOR KEY SHARE").unwrap().unwrap();
    assert_eq!(product_facts(&t, p).await.0, "Renamed beside, renamed");
}

// Change a product's entitlement set --------------------------------------------------------------------

#[tokio::test]
async fn a_change_of_a_products_set_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_the_product_row() {
    let t = demo_db().await;
    let p = new_product(&t, "Walked set", 2).await;
    let other = catalog::create_entitlement_set(&t.db, &catalog::SetName::parse("Walked set, the other").unwrap())
        .await
        .unwrap();
    let expected = [Expect::rendezvous_exclusive(), product_row(p)];
    let out = LockWalk::run(&t, &catalog::CHANGE_PRODUCT_SET_LOCKS, &expected, move |db| async move {
        catalog::update_product(&db, p, &catalog::ProductName::parse("Walked set").unwrap(), Some(other), true).await
    })
    .await;
    out.unwrap();
    assert_eq!(product_facts(&t, p).await, ("Walked set".into(), Some(other.0), true, 1));
}

#[tokio::test]
async fn a_change_of_a_carried_products_set_walked_lock_by_lock_takes_the_exclusive_rendezvous_then_is_refused() {
    let t = demo_db().await;
    let p = new_product(&t, "Walked carried", 2).await;
    let org = community_org(&t, "Walked carrier").await;
    grant(&t, org.organization_id, p).await;
    let before = product_facts(&t, p).await;
    let other = catalog::create_entitlement_set(&t.db, &catalog::SetName::parse("Walked carried, the other").unwrap())
        .await
        .unwrap();
    let out = LockWalk::run(
        &t,
        &catalog::CHANGE_PRODUCT_SET_LOCKS,
        &[Expect::rendezvous_exclusive()],
        move |db| async move {
            catalog::update_product(&db, p, &catalog::ProductName::parse("Walked carried").unwrap(), Some(other), true)
                .await
        },
    )
    .await;
    assert!(matches!(&out, Err(ServiceError::Refused(s)) if s.contains("1 organization pool carries")), "{out:?}");
    assert_eq!(product_facts(&t, p).await, before, "a refused change writes nothing");
}

// Set a product's seats ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_products_seats_walked_lock_by_lock_take_only_the_product_row_for_no_key_update() {
    let t = demo_db().await;
    let p = new_product(&t, "Walked seats", 2).await;
    let out = LockWalk::run(&t, &catalog::SET_PRODUCT_SEATS_LOCKS, &[product_row(p)], move |db| async move {
        catalog::set_product_seats(&db, p, catalog::Seats::parse("25").unwrap()).await
    })
    .await;
    assert_eq!(out.unwrap(), 25);
    assert_eq!(product_facts(&t, p).await.3, 25);
}

// Rename a resource key (issue 39) -----------------------------------------------------------------------

/// A key's row as the UPDATE of its name and unit holds it (no key column changes).
fn key_row(key: &str) -> Expect {
    Expect::row_in("core.resource_keys", key, RowMode::NoKeyUpdate)
}

async fn key_facts(t: &common::TestDb, key: &str) -> (String, Option<String>, Option<String>) {
    t.one(
        sqlx::query_as("SELECT display_name, unit, provider FROM core.resource_keys WHERE resource_key = $1").bind(key),
    )
    .await
}

fn label(name: &str, unit: &str) -> (catalog::KeyDisplayName, catalog::KeyUnit) {
    (catalog::KeyDisplayName::parse(name).unwrap(), catalog::KeyUnit::parse(unit).unwrap())
}

#[tokio::test]
async fn a_rename_of_a_resource_key_walked_lock_by_lock_takes_only_its_row_for_no_key_update() {
    let t = demo_db().await;
    let key = "fedwiki.active_sites";
    let out = LockWalk::run(&t, &catalog::RENAME_RESOURCE_KEY_LOCKS, &[key_row(key)], move |db| async move {
        let (name, unit) = label("Wiki sites", "sites");
        catalog::rename_resource_key(&db, &ResourceKey::from(key), &name, &unit).await
    })
    .await;
    out.unwrap();
    let (name, unit, _) = key_facts(&t, key).await;
    assert_eq!((name.as_str(), unit.as_deref()), ("Wiki sites", Some("sites")));
}

/// While a rename holds a key's row: a conferral's entitlement insert of that key (FOR KEY SHARE
/// through its foreign key) goes through, and a provider stamp of it (FOR UPDATE) waits on that
/// very row, then stamps it and keeps the new name.
#[tokio::test]
async fn a_paused_rename_lets_entitlement_inserts_through_and_holds_up_a_provider_stamp_of_that_key() {
    let t = demo_db().await;
    let key = "fedwiki.active_sites";
    sqlx::query("UPDATE core.resource_keys SET provider = 'elsewhere' WHERE resource_key = $1")
        .bind(key)
        .execute(&t.admin)
        .await
        .unwrap();
    let mut walk = LockWalk::start(&t, &catalog::RENAME_RESOURCE_KEY_LOCKS, 1, move |db| async move {
        let (name, unit) = label("Sites you run", "");
        catalog::rename_resource_key(&db, &ResourceKey::from(key), &name, &unit).await
    })
    .await;
    walk.assert_holds_exactly(&[key_row(key)]).await;

    // A new organization's floor materializes fedwiki.active_sites: no wait.
    let org = tokio::time::timeout(std::time::Duration::from_secs(10), community_org(&t, "Named beside"))
        .await
        .expect("an entitlement insert does not wait on a rename of its key");
    let materialized: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT count(*) FROM core.pool_entitlements e JOIN core.resource_pools p USING (pool_id)
                  WHERE p.organization_id = $1 AND e.resource_key = $2",
            )
            .bind(org.organization_id.0)
            .bind(key),
        )
        .await;
    assert_eq!(materialized, 1);

    // RegisterProviders finds the key moved away and takes its row FOR UPDATE: it waits.
    let db = t.db.clone();
    let stamp = tokio::spawn(async move { member_console::services::entitlements::register_providers(&db).await });
    let waiter = common::wait_for_waiter(&t.admin, &t.name, walk.paused_pid()).await;
    common::locks::assert_waits(&t.admin, waiter, walk.paused_pid(), &key_row(key)).await;
    walk.finish().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), stamp).await.unwrap().unwrap().unwrap();
    let (name, unit, provider) = key_facts(&t, key).await;
    assert_eq!((name.as_str(), unit, provider.as_deref()), ("Sites you run", None, Some("fedwiki")));
}

// Keep active ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_keep_active_walked_lock_by_lock_takes_only_the_site_row() {
    let s = setup("Basic").await;
    let site = s.created("kept").await;
    let (who, id) = (s.who, site.clone());
    let out = LockWalk::run(&s.t, &handlers::KEEP_ACTIVE_LOCKS, &[site_row(&site)], move |db| async move {
        fedwiki::set_keep_active(&db, who, &id, true).await
    })
    .await;
    out.unwrap();
    let kept: bool =
        s.t.one(sqlx::query_scalar("SELECT keep_active FROM fedwiki.sites WHERE site_id = $1").bind(&site)).await;
    assert!(kept);
    assert_eq!(s.status("kept").await, "active", "the flag only");
}

// Farm callback: record an observation --------------------------------------------------------------------

/// The console's web server on the walk's traced handle, with the farm connected (its callback
/// secret), as `serve` runs it: the callback reaches the path as the farm reaches it.
async fn serve_on(db: Db, farm: Arc<Farm>) -> TestApp {
    let dir = std::env::temp_dir().join(format!("mc-walk-{}", member_console::config::random_hex(6)));
    let config = member_console::config::Config::from_lookup(|k| match k {
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(common::TEST_RUNTIME_PASSWORD.into()),
        _ => None,
    })
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let connected = member_console::web::Connected { stripe: None, farm: Some(farm), mail: false, local_dns: None };
    let server = member_console::web::serve_connected(listener, db, Arc::new(config), connected).unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    TestApp { base, handle }
}

/// Post `body` as the farm signs it, on a server over the walk's handle: the answer.
async fn signed_callback(db: Db, farm: Arc<Farm>, body: String) -> (u16, String) {
    let app = serve_on(db, farm).await;
    let now = chrono::Utc::now().timestamp();
    let answer = post_callback(&app, &body, common::farm::CALLBACK_SECRET, now).await;
    app.handle.stop(true).await;
    answer
}

#[tokio::test]
async fn a_farm_callback_walked_lock_by_lock_takes_only_the_observed_sites_row() {
    let s = setup("Basic").await;
    let site = s.created("watched").await;
    let body = callback_at("cb-walked", "watched.wiki.localhost", 4096, "2026-12-03T10:00:00Z", "2026-12-03T09:59:00Z");
    let farm = s.f.farm.clone();
    let (status, said) = LockWalk::run(&s.t, &callbacks::RECEIVE_FARM_CALLBACK_LOCKS, &[site_row(&site)], move |db| {
        signed_callback(db, farm, body)
    })
    .await;
    assert_eq!((status, said.trim()), (200, "recorded; site observed; 0 request(s) nudged"));
    assert_eq!(s.count("SELECT storage_bytes FROM fedwiki.sites").await, 4096);
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.farm_callbacks").await, 1);
}

#[tokio::test]
async fn a_farm_callback_older_than_the_sites_observation_walked_takes_no_lock_and_writes_nothing() {
    let s = setup("Basic").await;
    s.created("watched").await;
    let domain = "watched.wiki.localhost";
    let later = callback_at("cb-later", domain, 999_999, "2026-12-03T21:40:00Z", "2026-12-03T21:39:00Z");
    let app = crate::sites::app(&s).await;
    let now = chrono::Utc::now().timestamp();
    assert_eq!(post_callback(&app, &later, common::farm::CALLBACK_SECRET, now).await.0, 200);
    // Delivered after the later one: the UPDATE's condition leaves the row unlocked.
    let earlier = callback_at("cb-earlier", domain, 10, "2026-12-03T21:30:00Z", "2026-12-03T21:29:00Z");
    let farm = s.f.farm.clone();
    let (status, said) =
        LockWalk::run(&s.t, &callbacks::RECEIVE_FARM_CALLBACK_LOCKS, &[], move |db| signed_callback(db, farm, earlier))
            .await;
    assert_eq!((status, said.trim()), (200, "recorded; nothing observed; 0 request(s) nudged"));
    assert_eq!(s.count("SELECT storage_bytes FROM fedwiki.sites").await, 999_999, "the later observation stands");
    assert_eq!(s.count("SELECT count(*) FROM fedwiki.farm_callbacks").await, 2, "both recorded by their ids");
}

/// Received is what the service answers; the walk above reaches it through the web layer, which
/// says it in words. A direct call agrees (a duplicate takes no lock either).
#[tokio::test]
async fn a_duplicate_farm_callback_walked_takes_no_lock() {
    let s = setup("Basic").await;
    s.created("watched").await;
    let body = callback_at("cb-twice", "watched.wiki.localhost", 7, "2026-12-03T10:00:00Z", "2026-12-03T09:59:00Z");
    let cb: fedwiki::FarmCallback = serde_json::from_str(&body).unwrap();
    assert!(matches!(fedwiki::receive_farm_callback(&s.t.db, &cb).await.unwrap(), Received::Recorded { .. }));
    let farm = s.f.farm.clone();
    let (status, said) =
        LockWalk::run(&s.t, &callbacks::RECEIVE_FARM_CALLBACK_LOCKS, &[], move |db| signed_callback(db, farm, body))
            .await;
    assert_eq!((status, said.trim()), (200, "already recorded"));
}

// Edit a connection -----------------------------------------------------------------------------------------

fn connection_form(name: &str) -> NewConnection {
    NewConnection::parse(name, "https://chat.example.org/hooks", "fedwiki.active_sites", false).unwrap()
}

fn connection_row(id: member_console::ids::ConnectionId) -> Expect {
    // Its name's unique index is on lower(name), an expression: no UPDATE here changes a key.
    Expect::row_in("core.desired_state_connections", id.0, RowMode::NoKeyUpdate)
}

#[tokio::test]
async fn an_edit_of_a_connection_walked_lock_by_lock_takes_only_its_row() {
    let t = demo_db().await;
    let c = connections::create_connection(&t.db, &connection_form("Walked")).await.unwrap();
    let out = LockWalk::run(&t, &connections::EDIT_CONNECTION_LOCKS, &[connection_row(c)], move |db| async move {
        connections::update_connection(&db, c, &NewConnection { read_back: true, ..connection_form("Walked, renamed") })
            .await
    })
    .await;
    out.unwrap();
    let row = ds_store::connection(&t.db.pool, c).await.unwrap().unwrap();
    assert_eq!((row.name.as_str(), row.read_back), ("Walked, renamed", true));
}

#[tokio::test]
async fn a_rotation_of_a_connections_secret_walked_lock_by_lock_takes_only_its_row() {
    let t = demo_db().await;
    let c = connections::create_connection(&t.db, &connection_form("Rotated")).await.unwrap();
    let before = ds_store::connection(&t.db.pool, c).await.unwrap().unwrap();
    let out = LockWalk::run(&t, &connections::EDIT_CONNECTION_LOCKS, &[connection_row(c)], move |db| async move {
        connections::rotate_secret(&db, c, std::time::Duration::from_secs(3600)).await
    })
    .await;
    out.unwrap();
    let row = ds_store::connection(&t.db.pool, c).await.unwrap().unwrap();
    assert_ne!(row.secret, before.secret);
    assert_eq!(row.previous_secret.as_deref(), Some(before.secret.as_str()));
}

#[tokio::test]
async fn a_deletion_of_a_connection_walked_lock_by_lock_takes_only_its_row() {
    let t = demo_db().await;
    let c = connections::create_connection(&t.db, &connection_form("Deleted")).await.unwrap();
    let out = LockWalk::run(&t, &connections::EDIT_CONNECTION_LOCKS, &[connection_row(c)], move |db| async move {
        connections::delete_connection(&db, c).await
    })
    .await;
    out.unwrap();
    let row = ds_store::connection(&t.db.pool, c).await.unwrap().unwrap();
    assert!(row.deleted_at.is_some());
}
