//! Organizations, pools, grants as sources, and the conferral functions (`core.confer`, ...).
//! Every call that changes positions or entitlements runs inside the caller's transaction, which
//! holds the rendezvous; the SQL functions assert it.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

pub async fn insert_organization(conn: &mut PgConnection, name: &str, org_type_id: Option<i64>) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO core.organizations (name, org_type_id) VALUES ($1, $2) RETURNING organization_id",
        name,
        org_type_id
    )
    .fetch_one(conn)
    .await
}

pub async fn set_email_domain(conn: &mut PgConnection, organization_id: i64, domain: &str) -> sqlx::Result<()> {
    sqlx::query!("UPDATE core.organizations SET email_domain = $2 WHERE organization_id = $1", organization_id, domain)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn insert_default_pool(conn: &mut PgConnection, organization_id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO core.resource_pools (organization_id) VALUES ($1) RETURNING pool_id",
        organization_id
    )
    .fetch_one(conn)
    .await
}

pub async fn default_pool_of(conn: &mut PgConnection, organization_id: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "SELECT pool_id FROM core.resource_pools WHERE organization_id = $1 AND is_default",
        organization_id
    )
    .fetch_optional(conn)
    .await
}

/// LockPools: the pool rows, FOR UPDATE, in ascending pool_id order, deduplicated.
pub async fn lock_pools(conn: &mut PgConnection, pools: &[i64]) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.lock_pools($1)", pools).execute(conn).await?;
    Ok(())
}

/// The pool a conferral belongs to.
pub async fn pool_of_conferral(conn: &mut PgConnection, conferral_id: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT pool_id FROM core.conferrals WHERE conferral_id = $1", conferral_id)
        .fetch_optional(conn)
        .await
}

pub async fn confer(
    conn: &mut PgConnection,
    pool_id: i64,
    product_id: i64,
    grant_id: Option<i64>,
    subscription_item_id: Option<i64>,
    quantity: i32,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT core.confer($1, $2, $3, $4, $5) AS "conferral_id!""#,
        pool_id,
        product_id,
        grant_id,
        subscription_item_id,
        quantity
    )
    .fetch_one(conn)
    .await
}

pub async fn end_conferral(conn: &mut PgConnection, conferral_id: i64, reason: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.end_conferral($1, $2) AS "ended!""#, conferral_id, reason).fetch_one(conn).await
}

pub async fn align_conferral_shape(conn: &mut PgConnection, conferral_id: i64) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.align_conferral_shape($1)", conferral_id).execute(conn).await?;
    Ok(())
}

pub async fn update_conferral_bounds(
    conn: &mut PgConnection,
    conferral_id: i64,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.update_conferral_bounds($1, $2, $3)", conferral_id, quantity, ends_at)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn sync_source_status(conn: &mut PgConnection, subscription_id: i64, status: &str) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.sync_source_status($1, $2) AS "changed!""#, subscription_id, status)
        .fetch_one(conn)
        .await
}

pub async fn materialize_pool(conn: &mut PgConnection, pool_id: i64) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.materialize_pool($1)", pool_id).execute(conn).await?;
    Ok(())
}

pub async fn resume_replaced_grants(conn: &mut PgConnection, pool_id: i64) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.resume_replaced_grants($1) AS "resumed!""#, pool_id).fetch_one(conn).await
}

pub async fn deliver_displaced_subscriptions(conn: &mut PgConnection, pool_id: i64) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.deliver_displaced_subscriptions($1) AS "delivered!""#, pool_id)
        .fetch_one(conn)
        .await
}

pub async fn reapply_defaults_if_vacant(
    conn: &mut PgConnection,
    pool_id: i64,
    plan_act_id: Option<i64>,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT core.reapply_defaults_if_vacant($1, $2)", pool_id, plan_act_id).fetch_one(conn).await
}

/// A grant to insert; `organization_id` None for a grant that names no organization yet.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub organization_id: Option<i64>,
    pub product_id: i64,
    pub quantity: i32,
    pub kind: &'static str,
    pub status: &'static str,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub created_by: Option<i64>,
    pub plan_act_id: Option<i64>,
    /// For a grant that names no organization: the email domain it waits for.
    pub provision_domain: Option<String>,
}

pub async fn insert_grant(conn: &mut PgConnection, g: &NewGrant) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, starts_at, ends_at, reason, created_by,
                                  plan_act_id, provision_domain)
         VALUES ($1, $2, $3, $4, $5, coalesce($6, now()), $7, $8, $9, $10, $11) RETURNING grant_id",
        g.organization_id,
        g.product_id,
        g.quantity,
        g.kind,
        g.status,
        g.starts_at,
        g.ends_at,
        g.reason,
        g.created_by,
        g.plan_act_id,
        g.provision_domain
    )
    .fetch_one(conn)
    .await
}

/// `core.confer_grant`: the grant's product conferred to its organization's default pool.
pub async fn confer_grant(conn: &mut PgConnection, grant_id: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT core.confer_grant($1)", grant_id).fetch_one(conn).await
}

pub async fn pool_of_grant(conn: &mut PgConnection, grant_id: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "SELECT rp.pool_id FROM core.grants g JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.grant_id = $1",
        grant_id
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct EntitlementValue {
    pub resource_key: String,
    pub numeric_value: Option<i64>,
    pub flag_value: Option<bool>,
}

/// What the pool has materialized, by key (byte order).
pub async fn pool_entitlements(conn: &mut PgConnection, pool_id: i64) -> sqlx::Result<Vec<EntitlementValue>> {
    sqlx::query_as!(
        EntitlementValue,
        r#"SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements WHERE pool_id = $1
           ORDER BY resource_key COLLATE "C""#,
        pool_id
    )
    .fetch_all(conn)
    .await
}

/// What a materialization would write now, from scratch (byte order).
pub async fn computed_entitlements(conn: &mut PgConnection, pool_id: i64) -> sqlx::Result<Vec<EntitlementValue>> {
    sqlx::query_as!(
        EntitlementValue,
        r#"SELECT resource_key AS "resource_key!", numeric_value, flag_value FROM core.compute_entitlements($1)
           ORDER BY resource_key COLLATE "C""#,
        pool_id
    )
    .fetch_all(conn)
    .await
}

/// Pools whose materialized entitlements differ from a fresh computation (the invariant).
pub async fn pools_out_of_date(conn: &mut PgConnection) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT p.pool_id FROM core.resource_pools p
         WHERE EXISTS (
             (SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id)
             UNION ALL
             (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)))
         ORDER BY p.pool_id"
    )
    .fetch_all(conn)
    .await
}

/// Register one provider's key: created when missing; when it names another provider, the row
/// is taken FOR UPDATE (the lock that conflicts with the FOR KEY SHARE an open entitlement insert
/// of the key holds) and stamped. An unchanged key takes no lock.
pub async fn stamp_resource_key_provider(
    conn: &mut PgConnection,
    key: &str,
    kind: &str,
    provider: &str,
    description: &str,
) -> sqlx::Result<()> {
    let current: Option<Option<String>> =
        sqlx::query_scalar!("SELECT provider FROM core.resource_keys WHERE resource_key = $1", key)
            .fetch_optional(&mut *conn)
            .await?;
    match current {
        Some(Some(p)) if p == provider => Ok(()),
        Some(_) => {
            sqlx::query_scalar!("SELECT 1 AS locked FROM core.resource_keys WHERE resource_key = $1 FOR UPDATE", key)
                .fetch_all(&mut *conn)
                .await?;
            sqlx::query!(
                "UPDATE core.resource_keys SET provider = $2 WHERE resource_key = $1 AND provider IS DISTINCT FROM $2",
                key,
                provider
            )
            .execute(conn)
            .await?;
            Ok(())
        }
        None => {
            sqlx::query!(
                "INSERT INTO core.resource_keys (resource_key, kind, provider, description) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
                key,
                kind,
                provider,
                description
            )
            .execute(conn)
            .await?;
            Ok(())
        }
    }
}

/// The pools holding a provision of this subscription, ascending.
pub async fn pools_of_subscription(conn: &mut PgConnection, subscription_id: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT DISTINCT c.pool_id FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
         WHERE i.subscription_id = $1 AND c.state = 'holding' ORDER BY 1",
        subscription_id
    )
    .fetch_all(conn)
    .await
}
