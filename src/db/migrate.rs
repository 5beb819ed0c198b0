//! Migrations (sqlx, `migrations/`), run by `migrate` and at `serve` start with the
//! administrative connection; and the run-time role's login.

use sqlx::{ConnectOptions, PgPool, postgres::PgConnectOptions};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The role the program connects as at run time.
pub const RUNTIME_ROLE: &str = "console_runtime";

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error while preparing the run-time role: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("DATABASE_URL is not a valid URL: {0}")]
    Url(String),
}

/// Apply every pending migration, then make sure `console_runtime` can log in with
/// `runtime_password` and read the migration ledger (for `/readyz`).
pub async fn run(admin: &PgPool, admin_url: &str, runtime_password: &str) -> Result<(), MigrateError> {
    // Before the first migration looks for them: see `ensure_role`.
    ensure_role(admin, "core_owner").await?;
    ensure_role(admin, "console_runtime").await?;
    // Some migrations change cluster-wide rows (a role's settings); two databases of one server
    // migrating at once can collide on such a row. On a connection of its own, closed after each
    // run: the migrator holds its (session) advisory lock across the run and does not release it
    // when a migration fails.
    again_on_collision("a migration", || async {
        let own = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(admin_url).await?;
        let outcome = MIGRATOR.run(&own).await;
        own.close().await;
        Ok::<_, MigrateError>(outcome?)
    })
    .await?;
    // Replicas starting together on one database grant and revoke on the same catalog rows (the
    // ledger's, the database's).
    again_on_collision("the ledger's grant", || {
        sqlx::raw_sql("GRANT SELECT ON public._sqlx_migrations TO console_runtime").execute(admin)
    })
    .await?;
    harden_database(admin).await?;
    // The role is cluster-wide: set its password only when it does not already let us in, so
    // replicas starting together do not race on the role row.
    let runtime = runtime_options(admin_url, runtime_password)?;
    if runtime.connect().await.is_err() {
        let literal = runtime_password.replace('\'', "''");
        let sql = format!("ALTER ROLE console_runtime WITH LOGIN PASSWORD '{literal}'");
        // Two consoles setting it at once may collide on the role's row ("tuple concurrently
        // updated"): the one that lost finds the password set, or sets it again.
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(admin).await {
            if runtime.connect().await.is_err() {
                tracing::warn!(error = %e, "setting console_runtime's password collided; setting it again");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(admin).await?;
            }
        }
    }
    Ok(())
}

/// `op` run again (up to five times, a little later each time) while it fails on a catalog row
/// another session updated at the same time ("tuple concurrently updated", XX000) or inserted at
/// the same time (a duplicate in a catalog's own unique index, `pg_...`: two first
/// `ALTER ROLE ... SET`s of one role on a new server both insert its settings row): what failed
/// rolled back whole, and `op` is idempotent.
async fn again_on_collision<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    mut op: impl FnMut() -> F,
) -> Result<T, E> {
    let mut collisions = 0;
    loop {
        match op().await {
            Err(e) if collisions < 5 && collided(&e.to_string()) => {
                collisions += 1;
                tracing::warn!(error = %e, "{what} collided with another session's on a catalog row; again");
                tokio::time::sleep(std::time::Duration::from_millis(50 * collisions)).await;
            }
            other => return other,
        }
    }
}

fn collided(error: &str) -> bool {
    error.contains("tuple concurrently updated")
        || error.contains("duplicate key value violates unique constraint \"pg_")
}

/// Create a cluster-wide role (NOLOGIN) unless it exists. Roles belong to the server, not to a
/// database, so two consoles migrating two databases of one server at once (replicas, a bench
/// beside the tests) can both find it missing; the create that loses that race fails with a
/// duplicate, which is no error here.
pub async fn ensure_role(admin: &PgPool, name: &str) -> Result<(), sqlx::Error> {
    let role: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let sql = format!(
        "DO $$ BEGIN
             IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                 CREATE ROLE \"{role}\" NOLOGIN;
             END IF;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(admin).await?;
    Ok(())
}

/// What the database itself must refuse, applied on every run (a database's own privileges are
/// not copied when it is created from a template, so a migration alone would not keep them):
/// no temporary objects for PUBLIC, so no role can create a table or function in `pg_temp`
/// that could shadow a name a function resolves.
pub async fn harden_database(admin: &PgPool) -> Result<(), sqlx::Error> {
    again_on_collision("the TEMP revoke", || {
        sqlx::raw_sql(
            "DO $$ BEGIN EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database()); END $$",
        )
        .execute(admin)
    })
    .await?;
    Ok(())
}

/// The run-time connection: the administrative URL's host, port and database, as
/// `console_runtime`.
pub fn runtime_options(admin_url: &str, runtime_password: &str) -> Result<PgConnectOptions, MigrateError> {
    let opts: PgConnectOptions = admin_url.parse().map_err(|e: sqlx::Error| MigrateError::Url(e.to_string()))?;
    Ok(opts.username(RUNTIME_ROLE).password(runtime_password).application_name("member-console"))
}

/// Are the database's applied migrations exactly the ones this build carries?
pub async fn is_current(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM public._sqlx_migrations ORDER BY version").fetch_all(conn).await?;
    let expected: Vec<i64> =
        MIGRATOR.iter().filter(|m| m.migration_type.is_up_migration()).map(|m| m.version).collect();
    Ok(applied.iter().all(|(_, ok)| *ok) && applied.iter().map(|(v, _)| *v).collect::<Vec<_>>() == expected)
}

#[cfg(test)]
mod tests {
    /// The two ways two databases of one server migrating at once collide on a catalog row, as
    /// PostgreSQL words them (the second seen in CI: two benches' scratch databases on a new
    /// cluster), and a duplicate in one of the console's own tables, which is no collision.
    #[test]
    fn catalog_collisions_are_told_from_other_errors() {
        assert!(super::collided("error returned from database: tuple concurrently updated"));
        assert!(super::collided(
            "while executing migration 13: error returned from database: duplicate key value violates unique \
             constraint \"pg_db_role_setting_databaseid_rol_index\" at line 664"
        ));
        assert!(!super::collided("duplicate key value violates unique constraint \"organizations_name_key\""));
    }
}
