//! Start-up: find the database (the configured one, or the private cluster), migrate it, and
//! connect as the run-time role.

use std::sync::Arc;

use anyhow::Context;
use sqlx::postgres::PgPoolOptions;

use crate::{
    config::Config,
    db::{Db, cluster::PrivateCluster, migrate},
};

/// The database the private cluster holds the console's data in.
pub const PRIVATE_DATABASE: &str = "member_console";

pub struct Booted {
    pub config: Arc<Config>,
    pub db: Db,
    pub admin_url: String,
    /// The private cluster, when this process uses one (stopped at shutdown).
    pub cluster: Option<PrivateCluster>,
}

pub async fn boot(config: Config) -> anyhow::Result<Booted> {
    let (admin_url, cluster) = match &config.database_url {
        Some(u) => (u.clone(), None),
        None => {
            let dir = config.data_dir.clone();
            let cluster = tokio::task::spawn_blocking(move || -> anyhow::Result<PrivateCluster> {
                let c = PrivateCluster::ensure_started(&dir)?;
                c.ensure_database(PRIVATE_DATABASE)?;
                Ok(c)
            })
            .await??;
            tracing::info!(port = cluster.port(), pgdata = %cluster.pgdata().display(), "private PostgreSQL cluster is up");
            (cluster.admin_url(PRIVATE_DATABASE), Some(cluster))
        }
    };
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(&admin_url)
        .await
        .with_context(|| format!("connecting to {}", crate::config::mask_url(&admin_url)))?;
    migrate::run(&admin, &admin_url, &config.runtime_password).await?;
    admin.close().await;

    let runtime = migrate::runtime_options(&admin_url, &config.runtime_password)?;
    let pool = PgPoolOptions::new()
        .max_connections(32)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(runtime)
        .await
        .context("connecting as console_runtime")?;
    let mut db = Db::new(pool);
    db.lock_timeout = config.lock_timeout;
    // Every integration's keys exist and name their provider before anything materializes.
    crate::services::entitlements::register_providers(&db).await?;
    Ok(Booted { config: Arc::new(config), db, admin_url, cluster })
}

impl Booted {
    /// Close the pool and stop the private cluster, if this process started it.
    pub async fn shutdown(self) {
        self.db.pool.close().await;
        if let Some(c) = self.cluster.filter(|c| c.started_here())
            && let Err(e) = tokio::task::spawn_blocking(move || c.stop()).await
        {
            tracing::warn!(error = %e, "stopping the private cluster failed");
        }
    }
}
