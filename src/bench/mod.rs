//! `member-console bench ...`: benchmarks the project ships. Each builds its own scratch
//! database, measures one path at scale, measures the TPC-B yardstick in the same run on the
//! same database at the same concurrency, prints the figures, and ends with one line of JSON.

pub mod rule_change;
pub mod yardstick;

use sqlx::PgPool;

/// Bulk-create `n` organizations of a type, each holding `product` by an operator grant, with
/// their entitlements materialized: setup the console itself would do one by one.
pub async fn carrying_organizations(admin: &PgPool, n: i64, org_type: i64, product: i64) -> anyhow::Result<()> {
    sqlx::query(
        "WITH o AS (
             INSERT INTO core.organizations (name, org_type_id)
             SELECT 'Bench ' || lpad(g::text, 7, '0'), $2 FROM generate_series(1, $1) g RETURNING organization_id),
         p AS (INSERT INTO core.resource_pools (organization_id) SELECT organization_id FROM o RETURNING pool_id, organization_id),
         g AS (INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason)
               SELECT organization_id, $3, 1, 'operator', 'active', 'bench' FROM p RETURNING grant_id, organization_id),
         c AS (INSERT INTO core.conferrals (pool_id, product_id, grant_id, quantity)
               SELECT p.pool_id, $3, g.grant_id, 1 FROM g JOIN p USING (organization_id) RETURNING conferral_id, pool_id)
         INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
         SELECT c.pool_id, t.plan_ladder_id, c.conferral_id, t.rank FROM c JOIN core.plan_ladder_tiers t ON t.product_id = $3",
    )
    .bind(n)
    .bind(org_type)
    .bind(product)
    .execute(admin)
    .await?;
    // The entitlements every such pool has, computed once for the product and written in bulk.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO core.pool_entitlements (pool_id, resource_key, numeric_value, flag_value)
         SELECT p.pool_id, r.resource_key,
                CASE WHEN k.kind = 'numeric' THEN r.numeric_value END, CASE WHEN k.kind = 'flag' THEN r.flag_value END
         FROM core.resource_pools p JOIN core.organizations o USING (organization_id)
         CROSS JOIN core.products pr JOIN core.entitlement_set_rules r ON r.entitlement_set_id = pr.entitlement_set_id
         JOIN core.resource_keys k ON k.resource_key = r.resource_key
         WHERE pr.product_id = {product} AND o.name LIKE 'Bench %'
         ON CONFLICT DO NOTHING;
         INSERT INTO core.numeric_entitlement_usage (pool_id, resource_key)
         SELECT pool_id, resource_key FROM core.pool_entitlements WHERE numeric_value IS NOT NULL ON CONFLICT DO NOTHING;
         ANALYZE;"
    )))
    .execute(admin)
    .await?;
    Ok(())
}

pub async fn id_of(admin: &PgPool, sql: &'static str, name: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).bind(name).fetch_one(admin).await?)
}
