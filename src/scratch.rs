//! A fresh database of its own on the console's server (the configured one, or the private
//! cluster), migrated, for the tools that must not touch the real data: `stress` and `bench`.

use std::time::Duration;

use anyhow::Context;
use private_cluster::PrivateCluster;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, postgres::PgPoolOptions};

use crate::{
    config::{Config, random_hex},
    db::{Db, migrate},
};

pub struct ScratchDb {
    pub name: String,
    pub admin_url: String,
    /// The administrator, for setup the console itself never does (bulk fixtures).
    pub admin: PgPool,
    /// As the console runs: `console_runtime`.
    pub db: Db,
    root_url: String,
}

impl ScratchDb {
    /// Create `<prefix>_<random>`, migrate it, and connect to it as the console does, with room
    /// for `connections` concurrent transactions.
    pub async fn create(config: &Config, prefix: &str, connections: u32) -> anyhow::Result<ScratchDb> {
        Self::create_with(config, prefix, connections, &[]).await
    }

    /// `create`, with database-level settings (`ALTER DATABASE ... SET`) in force before the
    /// console's first connection: every connection to it carries them (stress: the lock trace).
    pub async fn create_with(
        config: &Config,
        prefix: &str,
        connections: u32,
        settings: &[(&str, &str)],
    ) -> anyhow::Result<ScratchDb> {
        let root_url = server_url(config).await?;
        let name = format!("{prefix}_{}", random_hex(6));
        let mut conn = PgConnection::connect(&root_url)
            .await
            .with_context(|| format!("connecting to {}", crate::config::mask_url(&root_url)))?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut conn).await?;
        let _ = conn.close().await;
        let admin_url = with_database(&root_url, &name)?;
        let admin = PgPoolOptions::new().max_connections(4).connect_with(migrate::admin_options(&admin_url)?).await?;
        migrate::run(&admin, &admin_url, &config.runtime_password).await?;
        for (name, value) in settings {
            let sql = format!(
                "ALTER DATABASE \"{name_db}\" SET {name} = '{}'",
                value.replace('\'', "''"),
                name_db = name_db(&admin_url)
            );
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(&admin).await?;
        }
        let runtime = migrate::runtime_options(&admin_url, &config.runtime_password)?;
        let pool = PgPoolOptions::new()
            .max_connections(connections.max(2))
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(runtime)
            .await?;
        let mut db = Db::new(pool);
        db.lock_timeout = config.lock_timeout;
        Ok(ScratchDb { name, admin_url, admin, db, root_url })
    }

    /// Close the pools and drop the database (FORCE: a connection left behind does not keep it).
    pub async fn drop_database(self) -> anyhow::Result<()> {
        self.db.close().await;
        self.admin.close().await;
        let mut conn = PgConnection::connect(&self.root_url).await?;
        sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)))
            .execute(&mut conn)
            .await?;
        Ok(())
    }
}

/// The server's `postgres` database: the configured server's, or the private cluster's. The
/// command holds the private cluster for its whole run (boot::hold_private_cluster), which stops
/// it at the end if it started it; here it is normally found running, and this handle is let go.
pub async fn server_url(config: &Config) -> anyhow::Result<String> {
    match &config.database_url {
        Some(u) => with_database(u, "postgres"),
        None => {
            let dir = config.data_dir.clone();
            let cluster = tokio::task::spawn_blocking(move || PrivateCluster::ensure_started(&dir)).await??;
            Ok(cluster.admin_url("postgres"))
        }
    }
}

/// The database a URL names.
fn name_db(url: &str) -> String {
    url::Url::parse(url).map(|u| u.path().trim_start_matches('/').to_string()).unwrap_or_default()
}

pub fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).context("DATABASE_URL is not a URL")?;
    u.set_path(&format!("/{database}"));
    Ok(u.to_string())
}
