//! `migrations/0001_schema.sql` replaced the first 34 migrations: a database that applied those is
//! adopted (its ledger rewritten to the one file) and one that applied only some is refused.

use std::time::Duration;

use member_console::db::migrate;
use sqlx::PgPool;

use crate::common::{TEST_RUNTIME_PASSWORD, TestDb, hold_open, wait_for_waiter};

/// The ledger as a database migrated by the first `applied` of the 34 replaced migrations holds it.
async fn write_replaced_ledger(admin: &PgPool, applied: usize) {
    sqlx::query("DELETE FROM public._sqlx_migrations").execute(admin).await.unwrap();
    for (i, checksum) in migrate::REPLACED.iter().take(applied).enumerate() {
        sqlx::query(
            "INSERT INTO public._sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES ($1, $2, true, decode($3, 'hex'), 1)",
        )
        .bind(i as i64 + 1)
        .bind(format!("replaced {}", i + 1))
        .bind(checksum)
        .execute(admin)
        .await
        .unwrap();
    }
}

/// A database holding the schema of `0001_schema.sql` alone, as one that applied the 34 replaced
/// migrations does (the template holds every later migration too): its schemas dropped and the
/// first migration applied again.
async fn squashed_schema_only() -> TestDb {
    let t = TestDb::new().await;
    sqlx::raw_sql(
        "DROP SCHEMA core, fedwiki, domains, integration, billing CASCADE; DELETE FROM public._sqlx_migrations",
    )
    .execute(&t.admin)
    .await
    .unwrap();
    migrate::MIGRATOR.run_to(1, &t.admin).await.expect("the squashed schema applies on its own");
    t
}

async fn ledger(admin: &PgPool) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT version, description FROM public._sqlx_migrations ORDER BY version")
        .fetch_all(admin)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_database_that_applied_the_34_replaced_migrations_is_adopted_not_migrated_again() {
    let t = squashed_schema_only().await;
    write_replaced_ledger(&t.admin, 34).await;
    migrate::run(&t.admin, &t.admin_url, TEST_RUNTIME_PASSWORD).await.expect("the old database is adopted");
    let applied = migrate::MIGRATOR.iter().map(|m| (m.version, m.description.to_string())).collect::<Vec<_>>();
    assert_eq!(ledger(&t.admin).await, applied, "adopted as the one file, then the later migrations applied");
    let mut conn = t.admin.acquire().await.unwrap();
    assert!(migrate::is_current(&mut conn).await.unwrap(), "the adopted database is current for /readyz");
    // And a second start finds nothing to adopt.
    migrate::run(&t.admin, &t.admin_url, TEST_RUNTIME_PASSWORD).await.unwrap();
    assert_eq!(ledger(&t.admin).await, applied);
}

#[tokio::test]
async fn a_database_that_applied_only_some_of_the_replaced_migrations_is_refused_and_left_as_it_was() {
    let t = TestDb::new().await;
    write_replaced_ledger(&t.admin, 20).await;
    let refused = migrate::run(&t.admin, &t.admin_url, TEST_RUNTIME_PASSWORD).await.unwrap_err().to_string();
    assert!(refused.contains("applied 20 of the 34"), "{refused}");
    assert!(refused.contains("build from before"), "says what to do: {refused}");
    assert_eq!(ledger(&t.admin).await.len(), 20, "nothing written");
}

/// Consoles starting together on an old database: the adoption holds the ledger exclusively, so
/// a second waits on the first and then finds the ledger already rewritten.
#[tokio::test]
async fn a_second_console_adopting_waits_on_the_ledger_and_then_finds_it_adopted() {
    let t = squashed_schema_only().await;
    write_replaced_ledger(&t.admin, 34).await;
    let (mut a, a_pid) = hold_open(&t, "LOCK TABLE public._sqlx_migrations IN EXCLUSIVE MODE").await;
    let (admin, url) = (t.admin.clone(), t.admin_url.clone());
    let b = tokio::spawn(async move { migrate::run(&admin, &url, TEST_RUNTIME_PASSWORD).await });
    wait_for_waiter(&t.admin, &t.name, a_pid).await;
    assert_eq!(ledger(&t.admin).await.len(), 34, "nothing rewritten while the ledger is held");
    sqlx::query("COMMIT").execute(&mut *a).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), b).await.unwrap().unwrap().expect("adopted after the wait");
    assert_eq!(ledger(&t.admin).await.first(), Some(&(1, "schema".to_string())));
    assert_eq!(ledger(&t.admin).await.len(), migrate::MIGRATOR.iter().count());
    let (first, second) = tokio::join!(
        migrate::run(&t.admin, &t.admin_url, TEST_RUNTIME_PASSWORD),
        migrate::run(&t.admin, &t.admin_url, TEST_RUNTIME_PASSWORD)
    );
    first.and(second).expect("two starts on the adopted database");
}
