//! `member-console bench ...`: benchmarks the project ships. Each builds its own scratch
//! database, measures one path at scale, measures the TPC-B yardstick in the same run on the
//! same database at the same concurrency, prints the figures, and ends with one line of JSON.

pub mod all;
pub mod farm_sync;
pub mod http;
pub mod plan_act;
pub mod relay;
pub mod rule_change;
pub mod slots;
pub mod webhooks;
pub mod yardstick;

use sqlx::PgPool;

use crate::{config::Config, scratch::ScratchDb};

/// One benchmark run in a scratch database of its own (at least 8 connections), dropped after
/// the measurement unless `keep` asks to look at it.
pub async fn in_scratch<T>(
    config: &Config,
    connections: u32,
    keep: bool,
    measure: impl AsyncFnOnce(&ScratchDb) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let scratch = ScratchDb::create(config, "mc_bench", connections.max(8)).await?;
    eprintln!("bench: scratch database {}", scratch.name);
    let result = measure(&scratch).await;
    if keep {
        eprintln!("bench: kept {}", crate::config::mask_url(&scratch.admin_url));
    } else {
        scratch.drop_database().await?;
    }
    result
}

/// Bulk-create `n` organizations of a type, each holding `product` by an operator grant, with
/// their entitlements materialized: setup the console itself would do one by one.
pub async fn carrying_organizations(admin: &PgPool, n: i64, org_type: i64, product: i64) -> anyhow::Result<()> {
    organizations_holding(admin, n, org_type, product, "operator", "bench").await
}

/// Bulk-create `n` organizations of a type as the console creates them one by one: each holding
/// the rank 0 of `ladder` (the type's default) by a floor grant.
pub async fn floored_organizations(admin: &PgPool, n: i64, org_type: i64, ladder: i64) -> anyhow::Result<()> {
    let floor: i64 =
        sqlx::query_scalar("SELECT product_id FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 AND rank = 0")
            .bind(ladder)
            .fetch_one(admin)
            .await?;
    organizations_holding(admin, n, org_type, floor, "floor", "the organization type's default").await
}

/// `n` organizations named `Bench ...`, each with its default pool and one active grant of
/// `kind` conferring `product` on every ladder of its shape, and their entitlements computed as
/// core.compute_entitlements would, for all of them in one statement.
async fn organizations_holding(
    admin: &PgPool,
    n: i64,
    org_type: i64,
    product: i64,
    kind: &str,
    reason: &str,
) -> anyhow::Result<()> {
    sqlx::query(
        "WITH o AS (
             INSERT INTO core.organizations (name, org_type_id)
             SELECT 'Bench ' || lpad(g::text, 7, '0'), $2 FROM generate_series(1, $1) g RETURNING organization_id),
         p AS (INSERT INTO core.resource_pools (organization_id) SELECT organization_id FROM o RETURNING pool_id, organization_id),
         g AS (INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason)
               SELECT organization_id, $3, 1, $4, 'active', $5 FROM p RETURNING grant_id, organization_id),
         c AS (INSERT INTO core.conferrals (pool_id, product_id, grant_id, quantity)
               SELECT p.pool_id, $3, g.grant_id, 1 FROM g JOIN p USING (organization_id) RETURNING conferral_id, pool_id)
         INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
         SELECT c.pool_id, t.plan_ladder_id, c.conferral_id, t.rank FROM c JOIN core.plan_ladder_tiers t ON t.product_id = $3",
    )
    .bind(n)
    .bind(org_type)
    .bind(product)
    .bind(kind)
    .bind(reason)
    .execute(admin)
    .await?;
    sqlx::raw_sql(
        "INSERT INTO core.pool_entitlements (pool_id, resource_key, numeric_value, flag_value)
         SELECT c.pool_id, r.resource_key,
                CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END,
                CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END
         FROM core.organizations o JOIN core.resource_pools p USING (organization_id)
         JOIN core.conferrals c ON c.pool_id = p.pool_id AND c.state = 'holding' AND NOT c.suspended
         JOIN core.products pr ON pr.product_id = c.product_id
         JOIN core.entitlement_set_rules r ON r.entitlement_set_id = pr.entitlement_set_id
         JOIN core.resource_keys k ON k.resource_key = r.resource_key
         WHERE o.name LIKE 'Bench %'
         GROUP BY c.pool_id, r.resource_key, k.kind
         ON CONFLICT DO NOTHING;
         INSERT INTO core.numeric_entitlement_usage (pool_id, resource_key)
         SELECT pool_id, resource_key FROM core.pool_entitlements WHERE numeric_value IS NOT NULL ON CONFLICT DO NOTHING;
         ANALYZE;",
    )
    .execute(admin)
    .await?;
    Ok(())
}

/// The `Bench` organizations' workspaces and `per_pool` sites each, parked in the console and
/// made on the farm as `farm_status`: the FedWiki benchmarks' shared starting point.
pub async fn bench_sites(
    admin: &PgPool,
    farm: &crate::integrations::farm::Farm,
    per_pool: i64,
    farm_status: crate::states::SiteStatus,
) -> anyhow::Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO fedwiki.workspaces (workspace_id, organization_id)
         SELECT 'org-' || organization_id, organization_id FROM core.organizations WHERE name LIKE 'Bench %';
         INSERT INTO fedwiki.sites (site_id, workspace_id, domain, status)
         SELECT 's-' || o.organization_id || '-' || n, 'org-' || o.organization_id,
                'b' || o.organization_id || '-' || n || '.wiki.localhost', 'parked'
         FROM core.organizations o, generate_series(1, {per_pool}) n WHERE o.name LIKE 'Bench %';
         ANALYZE;"
    )))
    .execute(admin)
    .await?;
    let sites: Vec<(crate::ids::SiteDomain, crate::ids::WorkspaceId)> =
        sqlx::query_as("SELECT domain, workspace_id FROM fedwiki.sites ORDER BY site_id").fetch_all(admin).await?;
    for (domain, owner) in sites {
        farm.create_site(&domain, &owner, farm_status).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// The id of the demo's row that `sql` selects by `name` (its `$1`).
pub async fn id_of(admin: &PgPool, sql: &'static str, name: &str) -> anyhow::Result<i64> {
    use anyhow::Context;
    sqlx::query_scalar(sql).bind(name).fetch_optional(admin).await?.with_context(|| format!("the demo has no {name}"))
}

/// The bound on a bench's farm call: generous, as a bench's pass may queue many.
pub const FARM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The local farm's API alone (no `wiki`, sites in memory, so it answers at once and a figure is
/// the console's), and the console's client of it. `stop` it, then remove its folder. The
/// benches and the stress run each start their own.
pub struct ApiFarm {
    pub local: local_farm::LocalFarm,
    pub farm: std::sync::Arc<crate::integrations::farm::Farm>,
    dir: std::path::PathBuf,
}

impl ApiFarm {
    /// `who` names its folder and token (`bench`, `stress`); `timeout` bounds each farm call.
    pub async fn start(who: &str, timeout: std::time::Duration) -> anyhow::Result<ApiFarm> {
        use anyhow::Context;
        let token = format!("{who}-farm-token");
        let dir = std::env::temp_dir().join(format!("mc-{who}-farm-{}", crate::config::random_hex(6)));
        let local = local_farm::LocalFarm::start(local_farm::Config {
            data_dir: dir.clone(),
            token: token.clone(),
            wiki: local_farm::WikiMode::Off,
            persist: false,
            ..local_farm::Config::default()
        })
        .await
        .context("starting the local farm")?;
        let zone = crate::hostname::FarmZone::parse("wiki.localhost").map_err(|e| anyhow::anyhow!(e))?;
        let farm = crate::integrations::farm::Farm::new(&local.base_url(), &token, &zone, timeout)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(ApiFarm { local, farm: std::sync::Arc::new(farm), dir })
    }

    pub async fn stop(self) {
        self.local.stop().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
