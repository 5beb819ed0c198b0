//! The tier topology's writers (tier add and delete, the ladders' order) and plan acts.

use crate::db::locks::Lock;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{AccountId, ConferralId, GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId},
    states::{PlanActKind, PlanActState},
};

/// Pools holding a live conferral of the product, ascending (the tier add's holders).
pub async fn pools_holding_product(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT pool_id AS "pool_id: PoolId" FROM core.conferrals
           WHERE product_id = $1 AND state = 'holding' ORDER BY pool_id"#,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await
}

/// ListTierAddCollisions: holders that already hold a live position on the ladder, or hold the
/// product twice; their organizations' names (at most `limit`) and how many there are.
pub async fn tier_add_collisions(
    conn: &mut PgConnection,
    ladder_id: LadderId,
    product_id: ProductId,
    limit: i64,
) -> sqlx::Result<(i64, Vec<String>)> {
    let names: Vec<String> = sqlx::query_scalar!(
        "WITH holders AS (
             SELECT pool_id, count(*) AS n FROM core.conferrals WHERE product_id = $2 AND state = 'holding' GROUP BY pool_id),
         colliding AS (
             SELECT h.pool_id FROM holders h
             WHERE h.n > 1 OR EXISTS (SELECT 1 FROM core.positions p WHERE p.pool_id = h.pool_id AND p.plan_ladder_id = $1))
         SELECT o.name FROM colliding c JOIN core.resource_pools rp USING (pool_id)
         JOIN core.organizations o USING (organization_id) ORDER BY c.pool_id",
        ladder_id as LadderId,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await?;
    let total = names.len() as i64;
    Ok((total, names.into_iter().take(limit as usize).collect()))
}

/// The holding conferrals of a product in a pool, in creation order.
pub async fn holding_conferrals_of(
    conn: &mut PgConnection,
    pool_id: PoolId,
    product_id: ProductId,
) -> sqlx::Result<Vec<ConferralId>> {
    sqlx::query_scalar!(
        r#"SELECT conferral_id AS "conferral_id: ConferralId" FROM core.conferrals
           WHERE pool_id = $1 AND product_id = $2 AND state = 'holding'
           ORDER BY created_at, conferral_id"#,
        pool_id as PoolId,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct TierRow {
    pub rank: i32,
    pub product_id: ProductId,
}

pub async fn tiers_of(conn: &mut PgConnection, ladder_id: LadderId) -> sqlx::Result<Vec<TierRow>> {
    sqlx::query_as!(
        TierRow,
        "SELECT rank, product_id FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 ORDER BY rank",
        ladder_id as LadderId
    )
    .fetch_all(conn)
    .await
}

pub async fn ladder_exists(conn: &mut PgConnection, ladder_id: LadderId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.plan_ladders WHERE plan_ladder_id = $1) AS "exists!""#,
        ladder_id as LadderId
    )
    .fetch_one(conn)
    .await
}

/// Product facts a tier add needs: published, and whether it has a set.
pub async fn product_facts(conn: &mut PgConnection, product_id: ProductId) -> sqlx::Result<Option<(bool, bool)>> {
    Ok(sqlx::query!(
        r#"SELECT published, entitlement_set_id IS NOT NULL AS "has_set!" FROM core.products WHERE product_id = $1"#,
        product_id as ProductId
    )
    .fetch_optional(conn)
    .await?
    .map(|r| (r.published, r.has_set)))
}

/// Org types that default to the ladder.
pub async fn types_defaulting_to(conn: &mut PgConnection, ladder_id: LadderId) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT name FROM core.org_types WHERE default_plan_ladder_id = $1 ORDER BY name",
        ladder_id as LadderId
    )
    .fetch_all(conn)
    .await
}

/// Live holders of one tier: pools with a position on the ladder by a conferral of its product.
pub async fn tier_holders(conn: &mut PgConnection, ladder_id: LadderId, product_id: ProductId) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "holders!" FROM core.positions p JOIN core.conferrals c USING (conferral_id)
           WHERE p.plan_ladder_id = $1 AND c.product_id = $2"#,
        ladder_id as LadderId,
        product_id as ProductId
    )
    .fetch_one(conn)
    .await
}

/// Organizations on one tier, as the topology's picture labels its rung.
#[derive(Debug, Clone)]
pub struct TierCount {
    pub plan_ladder_id: LadderId,
    pub rank: i32,
    /// Counted no further than the cap given: a number past it means "more than the cap".
    pub organizations: i64,
}

/// How many organizations hold each tier's place, every tier's count stopping at `cap + 1`: a
/// range of `positions_ladder_rank` per tier, read no further than that, so the page costs the
/// same at any number of organizations. A pool is an organization's (each has one), and a
/// position carries its tier's rank (`core.sync_position_ranks` keeps them in step).
pub async fn tier_organization_counts(conn: &mut PgConnection, cap: i64) -> sqlx::Result<Vec<TierCount>> {
    sqlx::query_as!(
        TierCount,
        r#"SELECT t.plan_ladder_id AS "plan_ladder_id: LadderId", t.rank, n.organizations AS "organizations!"
           FROM core.plan_ladder_tiers t
           CROSS JOIN LATERAL (SELECT count(*) AS organizations FROM (
               SELECT 1 FROM core.positions p WHERE p.plan_ladder_id = t.plan_ladder_id AND p.rank = t.rank
               LIMIT $1::bigint + 1) x) n
           ORDER BY t.plan_ladder_id, t.rank"#,
        cap
    )
    .fetch_all(conn)
    .await
}

/// Open room at `rank` (ranks from it move up one) or close the gap a delete left (ranks above
/// it move down one); the rank key is deferred to the commit so the shift needs no order.
pub async fn shift_ranks(conn: &mut PgConnection, ladder_id: LadderId, from_rank: i32, by: i32) -> sqlx::Result<()> {
    sqlx::query!("SET CONSTRAINTS core.plan_ladder_tiers_pkey DEFERRED").execute(&mut *conn).await?;
    sqlx::query!(
        "UPDATE core.plan_ladder_tiers SET rank = rank + $3 WHERE plan_ladder_id = $1 AND rank >= $2",
        ladder_id as LadderId,
        from_rank,
        by
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn insert_tier(
    conn: &mut PgConnection,
    ladder_id: LadderId,
    rank: i32,
    product_id: ProductId,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.plan_ladder_tiers (plan_ladder_id, rank, product_id) VALUES ($1, $2, $3)",
        ladder_id as LadderId,
        rank,
        product_id as ProductId
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn delete_tier(conn: &mut PgConnection, ladder_id: LadderId, rank: i32) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 AND rank = $2",
        ladder_id as LadderId,
        rank
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn sync_position_ranks(conn: &mut PgConnection, ladder_id: LadderId) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.sync_position_ranks($1) AS "synced!""#, ladder_id as LadderId)
        .fetch_one(conn)
        .await
}

#[allow(clippy::too_many_arguments)]
pub async fn record_plan_act(
    conn: &mut PgConnection,
    kind: PlanActKind,
    disposition: Option<&str>,
    actor: Option<AccountId>,
    reason: &str,
    ladder: Option<LadderId>,
    product: Option<ProductId>,
    rank: Option<i32>,
    org_type: Option<OrgTypeId>,
    detail: serde_json::Value,
) -> sqlx::Result<PlanActId> {
    sqlx::query_scalar!(
        r#"SELECT core.record_plan_act($1, $2, $3, $4, $5, $6, $7, $8, $9) AS "plan_act_id!: PlanActId""#,
        kind as PlanActKind,
        disposition,
        actor as Option<AccountId>,
        reason,
        ladder as Option<LadderId>,
        product as Option<ProductId>,
        rank,
        org_type as Option<OrgTypeId>,
        detail
    )
    .fetch_one(conn)
    .await
}

/// LockPlanLadderOrder: every ladder row, FOR NO KEY UPDATE, ascending; their current order.
pub async fn lock_plan_ladder_order(conn: &mut PgConnection) -> sqlx::Result<Vec<(LadderId, i32)>> {
    let rows: Vec<(LadderId, i32)> = sqlx::query!(
        "SELECT plan_ladder_id, sort_order FROM core.plan_ladders ORDER BY plan_ladder_id FOR NO KEY UPDATE"
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| (LadderId(r.plan_ladder_id), r.sort_order))
    .collect();
    crate::db::trace::note_rows(conn, Lock::PlanLadderRows, rows.iter().map(|(l, _)| (l.0, Some(l.0)))).await?;
    Ok(rows)
}

pub async fn set_sort_order(conn: &mut PgConnection, ladder_id: LadderId, sort_order: i32) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.plan_ladders SET sort_order = $2 WHERE plan_ladder_id = $1",
        ladder_id as LadderId,
        sort_order
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct PlanActRow {
    pub plan_act_id: PlanActId,
    pub kind: PlanActKind,
    pub disposition: Option<String>,
    pub by: Option<String>,
    pub reason: String,
    pub state: PlanActState,
    pub created_at: DateTime<Utc>,
    pub ladder_name: String,
    pub product_name: String,
    pub rank: Option<i32>,
    pub detail: serde_json::Value,
}

// The macros take a literal, so both queries below spell out `PlanActRow`'s select.

pub async fn plan_acts(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<PlanActRow>> {
    sqlx::query_as!(
        PlanActRow,
        r#"SELECT a.plan_act_id, a.kind AS "kind: PlanActKind", a.disposition, ac.email AS "by?", a.reason,
                  a.state AS "state: PlanActState", a.created_at,
                  d.ladder_name, d.product_name, d.rank, d.detail
           FROM core.plan_acts a JOIN core.plan_act_details d USING (plan_act_id)
           LEFT JOIN core.accounts ac ON ac.account_id = a.created_by
           ORDER BY a.plan_act_id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn plan_act(conn: &mut PgConnection, id: PlanActId) -> sqlx::Result<Option<PlanActRow>> {
    sqlx::query_as!(
        PlanActRow,
        r#"SELECT a.plan_act_id, a.kind AS "kind: PlanActKind", a.disposition, ac.email AS "by?", a.reason,
                  a.state AS "state: PlanActState", a.created_at,
                  d.ladder_name, d.product_name, d.rank, d.detail
           FROM core.plan_acts a JOIN core.plan_act_details d USING (plan_act_id)
           LEFT JOIN core.accounts ac ON ac.account_id = a.created_by
           WHERE a.plan_act_id = $1"#,
        id as PlanActId
    )
    .fetch_optional(conn)
    .await
}

/// The tier's incumbents: pools holding a live position on the ladder by a conferral of the
/// product, ascending (the tier removal's holders, read before and again under their locks).
pub async fn tier_incumbent_pools(
    conn: &mut PgConnection,
    ladder_id: LadderId,
    product_id: ProductId,
) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT p.pool_id AS "pool_id: PoolId" FROM core.positions p JOIN core.conferrals c USING (conferral_id)
           WHERE p.plan_ladder_id = $1 AND c.product_id = $2 ORDER BY p.pool_id"#,
        ladder_id as LadderId,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await
}

/// A conferral a tier removal ends, with what a legacy grant of it keeps.
#[derive(Debug, Clone)]
pub struct Incumbent {
    pub conferral_id: ConferralId,
    pub grant_id: Option<GrantId>,
    pub organization_id: OrganizationId,
    pub quantity: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// The pool's holding conferrals of the product that hold the ladder, in creation order.
pub async fn incumbents_of(
    conn: &mut PgConnection,
    pool_id: PoolId,
    ladder_id: LadderId,
    product_id: ProductId,
) -> sqlx::Result<Vec<Incumbent>> {
    sqlx::query_as!(
        Incumbent,
        r#"SELECT c.conferral_id, c.grant_id AS "grant_id: GrantId", rp.organization_id, c.quantity, c.starts_at, c.ends_at
         FROM core.positions p JOIN core.conferrals c USING (conferral_id)
         JOIN core.resource_pools rp ON rp.pool_id = c.pool_id
         WHERE p.pool_id = $1 AND p.plan_ladder_id = $2 AND c.product_id = $3 AND c.state = 'holding'
         ORDER BY c.created_at, c.conferral_id"#,
        pool_id as PoolId,
        ladder_id as LadderId,
        product_id as ProductId
    )
    .fetch_all(conn)
    .await
}

/// RenumberTiers: the ladder's tiers take ranks in the given product order, from 0.
pub async fn renumber_tiers(conn: &mut PgConnection, ladder_id: LadderId, products: &[ProductId]) -> sqlx::Result<i32> {
    sqlx::query_scalar!(
        r#"SELECT core.renumber_tiers($1, $2) AS "renumbered!""#,
        ladder_id as LadderId,
        products as &[ProductId]
    )
    .fetch_one(conn)
    .await
}

/// Org types that default to the ladder: (id, name), by id.
pub async fn type_ids_defaulting_to(
    conn: &mut PgConnection,
    ladder_id: LadderId,
) -> sqlx::Result<Vec<(OrgTypeId, String)>> {
    Ok(sqlx::query!(
        "SELECT org_type_id, name FROM core.org_types WHERE default_plan_ladder_id = $1 ORDER BY org_type_id",
        ladder_id as LadderId
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (OrgTypeId(r.org_type_id), r.name))
    .collect())
}

/// Names for an act's words: the ladder's and, when given, the product's.
pub async fn names(
    conn: &mut PgConnection,
    ladder_id: LadderId,
    product_id: Option<ProductId>,
) -> sqlx::Result<(String, String)> {
    let r = sqlx::query!(
        r#"SELECT (SELECT name FROM core.plan_ladders WHERE plan_ladder_id = $1) AS "ladder!",
                  coalesce((SELECT name FROM core.products WHERE product_id = $2), '') AS "product!""#,
        ladder_id as LadderId,
        product_id as Option<ProductId>
    )
    .fetch_one(conn)
    .await?;
    Ok((r.ladder, r.product))
}
