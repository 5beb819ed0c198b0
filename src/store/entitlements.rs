//! Organizations, pools, grants as sources, and the conferral functions (`core.confer`, ...).
//! Every call that changes positions or entitlements runs inside the caller's transaction, which
//! holds the rendezvous; the SQL functions assert it.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{
        AccountId, ConferralId, EmailDomain, GrantId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId,
        ResourceKey, SubscriptionId, SubscriptionItemId,
    },
    states::{GrantKind, GrantStatus, KeyKind},
};

pub async fn insert_organization(
    conn: &mut PgConnection,
    name: &str,
    org_type_id: Option<OrgTypeId>,
) -> sqlx::Result<OrganizationId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.organizations (name, org_type_id) VALUES ($1, $2)
           RETURNING organization_id AS "organization_id: OrganizationId""#,
        name,
        org_type_id as Option<OrgTypeId>
    )
    .fetch_one(conn)
    .await
}

pub async fn set_email_domain(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    domain: &EmailDomain,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.organizations SET email_domain = $2 WHERE organization_id = $1",
        organization_id as OrganizationId,
        domain.as_str()
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn insert_default_pool(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<PoolId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.resource_pools (organization_id) VALUES ($1) RETURNING pool_id AS "pool_id: PoolId""#,
        organization_id as OrganizationId
    )
    .fetch_one(conn)
    .await
}

pub async fn default_pool_of(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<Option<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT pool_id AS "pool_id: PoolId" FROM core.resource_pools WHERE organization_id = $1 AND is_default"#,
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// LockPools: the pool rows, FOR UPDATE, in ascending pool_id order, deduplicated.
pub async fn lock_pools(conn: &mut PgConnection, pools: &[PoolId]) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.lock_pools($1)", pools as &[PoolId]).execute(conn).await?;
    Ok(())
}

/// The pool a conferral belongs to.
pub async fn pool_of_conferral(conn: &mut PgConnection, conferral_id: ConferralId) -> sqlx::Result<Option<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT pool_id AS "pool_id: PoolId" FROM core.conferrals WHERE conferral_id = $1"#,
        conferral_id as ConferralId
    )
    .fetch_optional(conn)
    .await
}

pub async fn confer(
    conn: &mut PgConnection,
    pool_id: PoolId,
    product_id: ProductId,
    grant_id: Option<GrantId>,
    subscription_item_id: Option<SubscriptionItemId>,
    quantity: i32,
) -> sqlx::Result<ConferralId> {
    sqlx::query_scalar!(
        r#"SELECT core.confer($1, $2, $3, $4, $5) AS "conferral_id!: ConferralId""#,
        pool_id as PoolId,
        product_id as ProductId,
        grant_id as Option<GrantId>,
        subscription_item_id as Option<SubscriptionItemId>,
        quantity
    )
    .fetch_one(conn)
    .await
}

pub async fn end_conferral(conn: &mut PgConnection, conferral_id: ConferralId, reason: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.end_conferral($1, $2) AS "ended!""#, conferral_id as ConferralId, reason)
        .fetch_one(conn)
        .await
}

pub async fn align_conferral_shape(conn: &mut PgConnection, conferral_id: ConferralId) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.align_conferral_shape($1)", conferral_id as ConferralId).execute(conn).await?;
    Ok(())
}

pub async fn update_conferral_bounds(
    conn: &mut PgConnection,
    conferral_id: ConferralId,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.update_conferral_bounds($1, $2, $3)", conferral_id as ConferralId, quantity, ends_at)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn sync_source_status(
    conn: &mut PgConnection,
    subscription_id: SubscriptionId,
    status: &str,
) -> sqlx::Result<i32> {
    sqlx::query_scalar!(
        r#"SELECT core.sync_source_status($1, $2) AS "changed!""#,
        subscription_id as SubscriptionId,
        status
    )
    .fetch_one(conn)
    .await
}

pub async fn materialize_pool(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.materialize_pool($1)", pool_id as PoolId).execute(conn).await?;
    Ok(())
}

pub async fn resume_replaced_grants(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<i32> {
    crate::db::trace::step(&mut *conn, crate::db::trace::steps::RESUME_REPLACED_GRANTS).await?;
    sqlx::query_scalar!(r#"SELECT core.resume_replaced_grants($1) AS "resumed!""#, pool_id as PoolId)
        .fetch_one(conn)
        .await
}

pub async fn deliver_displaced_subscriptions(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<i32> {
    crate::db::trace::step(&mut *conn, crate::db::trace::steps::DELIVER_DISPLACED_SUBSCRIPTIONS).await?;
    sqlx::query_scalar!(r#"SELECT core.deliver_displaced_subscriptions($1) AS "delivered!""#, pool_id as PoolId)
        .fetch_one(conn)
        .await
}

pub async fn reapply_defaults_if_vacant(
    conn: &mut PgConnection,
    pool_id: PoolId,
    plan_act_id: Option<PlanActId>,
) -> sqlx::Result<Option<GrantId>> {
    sqlx::query_scalar!(
        r#"SELECT core.reapply_defaults_if_vacant($1, $2) AS "floor_grant_id: GrantId""#,
        pool_id as PoolId,
        plan_act_id as Option<PlanActId>
    )
    .fetch_one(conn)
    .await
}

/// A grant to insert; `organization_id` None for a grant that names no organization yet.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub organization_id: Option<OrganizationId>,
    pub product_id: ProductId,
    pub quantity: i32,
    pub kind: GrantKind,
    pub status: GrantStatus,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub created_by: Option<AccountId>,
    pub plan_act_id: Option<PlanActId>,
    /// For a grant that names no organization: the email domain it waits for.
    pub provision_domain: Option<String>,
}

pub async fn insert_grant(conn: &mut PgConnection, g: &NewGrant) -> sqlx::Result<GrantId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, starts_at, ends_at, reason, created_by,
                                    plan_act_id, provision_domain)
           VALUES ($1, $2, $3, $4, $5, coalesce($6, now()), $7, $8, $9, $10, $11) RETURNING grant_id AS "grant_id: GrantId""#,
        g.organization_id as Option<OrganizationId>,
        g.product_id as ProductId,
        g.quantity,
        g.kind as GrantKind,
        g.status as GrantStatus,
        g.starts_at,
        g.ends_at,
        g.reason,
        g.created_by as Option<AccountId>,
        g.plan_act_id as Option<PlanActId>,
        g.provision_domain
    )
    .fetch_one(conn)
    .await
}

/// `core.confer_grant`: the grant's product conferred to its organization's default pool.
pub async fn confer_grant(conn: &mut PgConnection, grant_id: GrantId) -> sqlx::Result<Option<ConferralId>> {
    sqlx::query_scalar!(r#"SELECT core.confer_grant($1) AS "conferral_id: ConferralId""#, grant_id as GrantId)
        .fetch_one(conn)
        .await
}

pub async fn pool_of_grant(conn: &mut PgConnection, grant_id: GrantId) -> sqlx::Result<Option<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT rp.pool_id AS "pool_id: PoolId"
           FROM core.grants g JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
           WHERE g.grant_id = $1"#,
        grant_id as GrantId
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
pub async fn pool_entitlements(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<Vec<EntitlementValue>> {
    sqlx::query_as!(
        EntitlementValue,
        r#"SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements WHERE pool_id = $1
           ORDER BY resource_key COLLATE "C""#,
        pool_id as PoolId
    )
    .fetch_all(conn)
    .await
}

/// What a materialization would write now, from scratch (byte order).
pub async fn computed_entitlements(conn: &mut PgConnection, pool_id: PoolId) -> sqlx::Result<Vec<EntitlementValue>> {
    sqlx::query_as!(
        EntitlementValue,
        r#"SELECT resource_key AS "resource_key!", numeric_value, flag_value FROM core.compute_entitlements($1)
           ORDER BY resource_key COLLATE "C""#,
        pool_id as PoolId
    )
    .fetch_all(conn)
    .await
}

/// Pools whose materialized entitlements differ from a fresh computation (the invariant).
pub async fn pools_out_of_date(conn: &mut PgConnection) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT p.pool_id AS "pool_id: PoolId" FROM core.resource_pools p
         WHERE EXISTS (
             (SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id)
             UNION ALL
             (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)))
         ORDER BY p.pool_id"#
    )
    .fetch_all(conn)
    .await
}

/// Register one provider's key: created when missing; when it names another provider, the row
/// is taken FOR UPDATE (the lock that conflicts with the FOR KEY SHARE an open entitlement insert
/// of the key holds) and stamped. An unchanged key takes no lock.
pub async fn stamp_resource_key_provider(
    conn: &mut PgConnection,
    key: &ResourceKey,
    kind: KeyKind,
    provider: &str,
    description: &str,
) -> sqlx::Result<()> {
    let current: Option<Option<String>> =
        sqlx::query_scalar!("SELECT provider FROM core.resource_keys WHERE resource_key = $1", key as &ResourceKey)
            .fetch_optional(&mut *conn)
            .await?;
    match current {
        Some(Some(p)) if p == provider => Ok(()),
        Some(_) => {
            sqlx::query_scalar!(
                "SELECT 1 AS locked FROM core.resource_keys WHERE resource_key = $1 FOR UPDATE",
                key as &ResourceKey
            )
            .fetch_all(&mut *conn)
            .await?;
            crate::db::trace::note(&mut *conn, crate::db::locks::Lock::ResourceKeyRows, key.as_str(), None).await?;
            sqlx::query!(
                "UPDATE core.resource_keys SET provider = $2 WHERE resource_key = $1 AND provider IS DISTINCT FROM $2",
                key as &ResourceKey,
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
                key as &ResourceKey,
                kind as KeyKind,
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
pub async fn pools_of_subscription(
    conn: &mut PgConnection,
    subscription_id: SubscriptionId,
) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT c.pool_id AS "pool_id: PoolId"
           FROM core.conferrals c JOIN core.subscription_items i USING (subscription_item_id)
           WHERE i.subscription_id = $1 AND c.state = 'holding' ORDER BY 1"#,
        subscription_id as SubscriptionId
    )
    .fetch_all(conn)
    .await
}
