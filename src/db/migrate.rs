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
    #[error("{0}")]
    PartlyReplaced(String),
}

/// Apply every pending migration, then make sure `console_runtime` can log in with
/// `runtime_password` and read the migration ledger (for `/readyz`).
pub async fn run(admin: &PgPool, admin_url: &str, runtime_password: &str) -> Result<(), MigrateError> {
    // Before the first migration looks for them: see `ensure_role`.
    ensure_role(admin, "core_owner").await?;
    ensure_role(admin, "console_runtime").await?;
    role_backstops(admin).await?;
    // Some migrations change cluster-wide rows (a role's settings); two databases of one server
    // migrating at once can collide on such a row. On a connection of its own, closed after each
    // run: the migrator holds its (session) advisory lock across the run and does not release it
    // when a migration fails.
    adopt_replaced_history(admin).await?;
    again_on_collision("a migration", || async {
        let own =
            sqlx::postgres::PgPoolOptions::new().max_connections(1).connect_with(admin_options(admin_url)?).await?;
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
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(admin).await
            && runtime.connect().await.is_err()
        {
            tracing::warn!(error = %e, "setting console_runtime's password collided; setting it again");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(admin).await?;
        }
    }
    Ok(())
}

/// The migrations `0001_schema.sql` replaced, by the SHA-384 checksums sqlx recorded for them,
/// versions 1 to 34 in order. A database that applied exactly these holds what that one file makes
/// (the two compared equal under `pg_dump` when it was cut).
pub const REPLACED: [&str; 34] = [
    "a581661bcd35678718df9df89f701e93f1c5fedf62b5783a7014e20e1e0de755fe76206ddd62ff3a7a742c42c6ea6d23", // 0001_foundation
    "4fcf49861f2406f43086a6bf30e2c55234260dba7db9aed9878f9343c4e34bbf6cd70657f4d00fd169474fc29aaca053", // 0002_accounts
    "013f9d7704cf9844f19381ede3e304422d81b1bc88c5f27883ded08ea23fa871a108ec4391f01238f1d91a1b58556fb7", // 0003_jobs
    "d76fa23ea37a1e94fee8ada67ae523d2757a41c65145fb34fb49cba3933cd94d537ba768c812dd4e7b0887bf1f207aa3", // 0004_entitlement_core
    "95ac36a02545ec2db73bcade1753f7aca9a061c760e9e9dded7763133ac0dabe97f9b5b413512cd6a11af62f42ea4df2", // 0005_conferral_functions
    "d7236660e211fb8a67e92ac737760a1fdd4540edfe9ffcf86c4057ac4e1144acc03b784857c45f0e1f3e73a29dccfd5c", // 0006_grants
    "7d1016c011175f708bcf856d189068b9553710f2658e488c2ccd49afbb212fb4e18081fb61c819341c4461fc98980ff3", // 0007_rule_changes
    "4a895df32523d0c531e9cea601380e1f3824928d9b7f5e15a026a5d3f4f26e94eeb5306d6cd4de19a76b4e58c43c6a71", // 0008_materialize_without_temp_tables
    "95a9396356882137c42e6ee41bf0ea7fa36d5c66543a423213e31ddf6ac412f63632d7c63e758adb0fb1a4d5e369c191", // 0009_plan_acts
    "d9baf2e98b6763b3cc0c03c8c662232e7e39d1ce720735661bbbdf4dafb3ec67bd8b4a03d9ae64442f01b02d8ca7c9a0", // 0010_default_change
    "1040313a11fcec15d9f186284f9b0189d9e3f665a66db7e5131950da3e7a01502cc82dafc54eefece1c402aece0c57ef", // 0011_tier_removal_and_reorder
    "28fac83a99db82f6bcb047b69549e2383bdcaf21ff99103db794d8d2882e050dbcda09106c8aaf8812569618d5630d22", // 0012_one_call_per_move
    "2e03015d326023ef6b5e42b6d68374729ca7fd8fdee8b624be770fa6aae1f964312075c5896d9d6c8b6b53a81992176a", // 0013_hardening
    "9d39b9000533ba9440f351a7371d7bd8ce91ae7c06dc2397ea607485fa6cd67c8e9fb83400e86a3f46840520f8c56fd8", // 0014_counts_and_pages
    "584a2cfac27f5210374e25daa897269b59f1ecd66864a5ac1af9c4be1eae1807c7efc1e71bcd50c453cce2e5b804d1e3", // 0015_member_reads
    "bd42a8ac1f5a2a4213c09f595f55f4efac79468ad2ba1a0bb38d7b31615298ad61e1ddbc6b2da6b919708ea1621fff43", // 0016_refusals_by_constraint_name
    "28a2e206c351d2c6da97dd76a2cf94b197fd1db704e1e7862459011190e0f4b2c9ed595fbb347055650a63827b7d68e9", // 0017_billing
    "8d63b19e8e978aa05e8bdf6c60e8008d291910dab89b61a69edd947f1706b33ef5e29dc50d5da425f74ae1d8bf033136", // 0018_scheduled_changes
    "c85453ea9e0961225234b7302e55683bc1ad3efda454c5e8ad5111d4877860cf4f40a5f2ef1d6f8cc1b04c25c34e4c4e", // 0019_quiet_object_jobs
    "e5e32a5307d9d337bc132950582eaf0d105e8a7b3b5ec4a40cac524816e870627ae8d08dff7f1eb2414bfd884dcb47f1", // 0020_member_billing
    "d25ee36a09bda2a430d408bc85ff4ef5e7a118373f14a0afb99fd18b3e2b34db5fb4cf1f894516290f61ae49b021269d", // 0021_fedwiki_sites
    "af7c526d49be814fc67b1f0b3f25fb0affadfde0b1d5673e3ac1de438473edfdb59ec1c176094f22d74ec54a40408829", // 0022_plan_changes
    "b712a7328ab73cd44398345c2c501e7ab213b77ae9f88508f6476fdef1e68761b0ef9e1ae86dc727a8e2041ac8f81cd8", // 0023_fedwiki_maintenance
    "29eef9b350d735e71c161aa4066c4af5a177620df62efb40a8c3d14db472aeb6a1d7d45cd5d83fbb651a164dbcc6611e", // 0024_seats
    "136d2455f11255c117340e83c5411ded0fa0a5c0abf31eb4627bb513526f267fde52e7988dfcdff5b39499c052f866aa", // 0025_desired_state
    "9a23d1bac20dc7e5fa6948c07fa480769afe353655a8f09c9e3640e57dab2397c6243b049c6310ebdca1fe09eaa935d5", // 0026_one_call_farm_sync
    "9965714ff8397172674f1c2b1e5c597655fb7d0ab3078ce0134847322ab5cbbdccd91b050bb7324abf54bcfd648dbcfe", // 0027_metric_samples
    "2855ab2eb8ee7b21103913deec8ecfb5904a30ae1f0f0c765fcccd7ae63ccb7667f6e1441eaf829ac056998ddea5e606", // 0028_progress_rate
    "55b50c411d43d01f8e196906d1b11c20db4de3701ae1af9caeff29c215e5b87ab3b000be6e9cf85faf1b9b6ad33a0f5b", // 0029_planned_once_per_session
    "8b006173abeda9c4b3212734828ea76aa08797dc27f976d30e839b69062f69d7ebf04f31f73a90412097693736a2b1a8", // 0030_plpgsql_counts_and_checks
    "1e37fa372f5e4f5d62c043b021372be0f9dd7e7145bf136a4c7bea9a23ef5ffc4e0142325defb46f9dbcca2381ea784d", // 0031_member_page_statements
    "4a1d02015eed5a86b6080af0fc2a3b447df11467401c0f7e15d4e62fad39ccd8d95082c090cc1e7dd6fc5fc0e3772359", // 0032_member_page_statements_started_with_less
    "ce6b653e2d3996e0f7b452599486e2b09f9984fe4b633643fe888ed7746b16d75fd2d7651efa7c562f346153e7e5a3f9", // 0033_session_read_by_its_hash
    "f651d8bd27840e2187bc7ed648a45bdb80fbff9b9f941309416fe5bb2709091ef85a2372dbfa7dc0e225fa91f418138e", // 0034_on_sale_read_once_per_catalog_change
];

/// A database migrated before `0001_schema.sql` replaced the first 34 migrations keeps its schema:
/// its ledger is rewritten to say it applied that one file, so the migrator finds it current (and
/// checks the file's checksum from then on) instead of refusing 33 versions it no longer carries.
/// A database that applied only some of the 34 is refused with what to do: the file would fail on
/// the tables it already has. In one transaction that holds the ledger exclusively, so consoles
/// starting together on one database rewrite it once; the others then find nothing to adopt.
async fn adopt_replaced_history(admin: &PgPool) -> Result<(), MigrateError> {
    let mut tx = admin.begin().await?;
    let ledger: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations')::text").fetch_one(&mut *tx).await?;
    if ledger.is_none() {
        return Ok(());
    }
    sqlx::raw_sql("LOCK TABLE public._sqlx_migrations IN EXCLUSIVE MODE").execute(&mut *tx).await?;
    let applied: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM public._sqlx_migrations ORDER BY version")
            .fetch_all(&mut *tx)
            .await?;
    let replaced = |(version, checksum, _): &(i64, Vec<u8>, bool)| {
        usize::try_from(*version - 1)
            .ok()
            .and_then(|i| REPLACED.get(i))
            .is_some_and(|c| crate::config::encode_hex(checksum) == *c)
    };
    let count = applied.iter().filter(|row| replaced(row)).count();
    if count == 0 {
        return Ok(());
    }
    if count < REPLACED.len() || applied.len() != REPLACED.len() || !applied.iter().all(|(_, _, ok)| *ok) {
        return Err(MigrateError::PartlyReplaced(format!(
            "this database applied {count} of the 34 migrations that migrations/0001_schema.sql replaced \
             (its ledger holds {} versions); migrate it first with a build from before that file (the \
             repository's history has one), then with this one",
            applied.len()
        )));
    }
    let schema = MIGRATOR.iter().find(|m| m.version == 1 && m.migration_type.is_up_migration());
    let Some(schema) = schema else { return Ok(()) };
    sqlx::query("DELETE FROM public._sqlx_migrations WHERE version > 1").execute(&mut *tx).await?;
    sqlx::query("UPDATE public._sqlx_migrations SET description = $1, checksum = $2 WHERE version = 1")
        .bind(schema.description.as_ref())
        .bind(schema.checksum.as_ref())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!("the database's 34 migrations are adopted as migrations/0001_schema.sql, which replaced them");
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

/// Backstops for every session of the run-time role, above every legitimate hold (the retention
/// purge holds its locks through a 30 s farm call): a statement or an idle transaction past a
/// minute is ended; the transaction kinds set their own, shorter bounds on top. A role's settings
/// are the server's, so they are set here, at every start and only when not already so, and not
/// in a database's migration: databases of one server migrating at once would each write the
/// same row inside a long transaction and collide on it.
pub async fn role_backstops(admin: &PgPool) -> Result<(), sqlx::Error> {
    again_on_collision("the run-time role's backstops", || {
        sqlx::raw_sql(
            "DO $$ BEGIN
                 IF NOT EXISTS (
                     SELECT 1 FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
                     WHERE r.rolname = 'console_runtime' AND s.setdatabase = 0
                       AND s.setconfig @> ARRAY['statement_timeout=60s', 'idle_in_transaction_session_timeout=60s']
                 ) THEN
                     ALTER ROLE console_runtime SET statement_timeout = '60s';
                     ALTER ROLE console_runtime SET idle_in_transaction_session_timeout = '60s';
                 END IF;
             END $$",
        )
        .execute(admin)
    })
    .await?;
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
/// `console_runtime`, at READ COMMITTED (`read_committed`).
pub fn runtime_options(admin_url: &str, runtime_password: &str) -> Result<PgConnectOptions, MigrateError> {
    let opts = admin_options(admin_url)?;
    Ok(opts.username(RUNTIME_ROLE).password(runtime_password).application_name("member-console"))
}

/// The administrative connection of `admin_url`, at READ COMMITTED (`read_committed`).
pub fn admin_options(admin_url: &str) -> Result<PgConnectOptions, MigrateError> {
    let opts: PgConnectOptions = admin_url.parse().map_err(|e: sqlx::Error| MigrateError::Url(e.to_string()))?;
    Ok(read_committed(opts))
}

/// Every session the program opens starts at READ COMMITTED, whatever the server's, the
/// database's or the role's default (a startup option outranks them all): the paths count after
/// a lock in a statement of their own (spec rules 5 and 7), which only READ COMMITTED lets read
/// the commits that preceded the lock's grant; the site trigger refuses snapshot isolation; and
/// a lock wait under REPEATABLE READ ends in "could not serialize". This covers every pool built
/// from these options (the run-time pool, the prepared pool and the worker's listener derived
/// from it, the job queue, sessions, benches and stress); `tx` sets it per transaction as well.
pub fn read_committed(opts: PgConnectOptions) -> PgConnectOptions {
    opts.options([("default_transaction_isolation", "read committed")])
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
