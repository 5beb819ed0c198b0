//! The harness of the plan-act tests (tests/plan_acts.rs, tests/tier_acts.rs): names to ids,
//! organizations and grants made through the services, and what an act left behind.

use chrono::{DateTime, Utc};
use member_console::{
    db::{TxKind, begin},
    ids::{GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId},
    services::{
        grants::{self, IssueGrant, Recipient},
        organizations::{self as orgs, OrgName},
        plan_acts::{self as pa, Disposition},
        refusal::ServiceError,
    },
    store::plan_acts as store,
};

use super::TestDb;

pub async fn scalar(t: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string())).fetch_one(&t.admin).await.unwrap()
}

pub async fn id_by_name(t: &TestDb, table: &str, id: &str, name: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {id} FROM core.{table} WHERE name = $1")))
        .bind(name)
        .fetch_one(&t.admin)
        .await
        .unwrap_or_else(|e| panic!("no {table} named {name}: {e}"))
}

pub async fn type_id(t: &TestDb, name: &str) -> OrgTypeId {
    OrgTypeId(id_by_name(t, "org_types", "org_type_id", name).await)
}

pub async fn ladder_id(t: &TestDb, name: &str) -> LadderId {
    LadderId(id_by_name(t, "plan_ladders", "plan_ladder_id", name).await)
}

pub async fn product_id(t: &TestDb, name: &str) -> ProductId {
    ProductId(id_by_name(t, "products", "product_id", name).await)
}

pub async fn org_of_type(t: &TestDb, name: &str, ty: OrgTypeId) -> orgs::CreatedOrganization {
    orgs::create_organization(&t.db, &OrgName::parse(name).unwrap(), Some(ty)).await.unwrap()
}

/// `n` organizations of the type, named `{prefix} {i:03}`.
pub async fn orgs_of_type(t: &TestDb, ty: OrgTypeId, prefix: &str, n: usize) -> Vec<orgs::CreatedOrganization> {
    let mut out = vec![];
    for i in 0..n {
        out.push(org_of_type(t, &format!("{prefix} {i:03}"), ty).await);
    }
    out
}

pub async fn grant_with(
    t: &TestDb,
    org: OrganizationId,
    product: ProductId,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> GrantId {
    let g = IssueGrant {
        recipient: Recipient::Organization(org),
        product_id: product,
        quantity,
        starts_at: None,
        ends_at,
        reason: "test".into(),
        actor: None,
    };
    grants::issue_grant(&t.db, &g).await.unwrap()
}

/// An operator grant of `product` to the organization.
pub async fn grant(t: &TestDb, org: OrganizationId, product: ProductId) -> GrantId {
    grant_with(t, org, product, 1, None).await
}

/// Every organization of a type, as (organization, name, pool), by organization id.
pub async fn members_of(t: &TestDb, ty: OrgTypeId) -> Vec<(OrganizationId, String, PoolId)> {
    sqlx::query_as(
        "SELECT o.organization_id, o.name, rp.pool_id FROM core.organizations o
         JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE o.org_type_id = $1 ORDER BY o.organization_id",
    )
    .bind(ty)
    .fetch_all(&t.admin)
    .await
    .unwrap()
}

/// An act's obligations by state, as (pending, migrated, grandfathered, vacant, failed, superseded).
pub async fn counts(t: &TestDb, act: PlanActId) -> (i64, i64, i64, i64, i64, i64) {
    let c = {
        let mut conn = t.admin.acquire().await.unwrap();
        store::counts(&mut conn, act).await.unwrap()
    };
    (c.pending, c.migrated, c.grandfathered, c.vacant, c.failed, c.superseded)
}

pub async fn act_state(t: &TestDb, act: PlanActId) -> String {
    sqlx::query_scalar("SELECT state FROM core.plan_acts WHERE plan_act_id = $1")
        .bind(act)
        .fetch_one(&t.admin)
        .await
        .unwrap()
}

pub async fn type_default(t: &TestDb, ty: OrgTypeId) -> (Option<LadderId>, Option<PlanActId>) {
    sqlx::query_as("SELECT default_plan_ladder_id, default_owner_act_id FROM core.org_types WHERE org_type_id = $1")
        .bind(ty)
        .fetch_one(&t.admin)
        .await
        .unwrap()
}

pub async fn stale_pools(t: &TestDb) -> Vec<PoolId> {
    let mut c = t.admin.acquire().await.unwrap();
    member_console::store::entitlements::pools_out_of_date(&mut c).await.unwrap()
}

pub async fn change(
    t: &TestDb,
    ty: OrgTypeId,
    ladder: LadderId,
    d: Option<Disposition>,
) -> Result<PlanActId, ServiceError> {
    pa::change_org_type_default(&t.db, ty, ladder, d, None, "test", None).await
}

/// One listing batch, as ListPlanActBatch runs it, committed.
pub async fn list_batch(t: &TestDb, act: PlanActId, ty: OrgTypeId, limit: i32) -> i32 {
    let mut tx = begin(&t.db, TxKind::Materializing).await.unwrap();
    let n = store::write_obligations(tx.conn(), act, ty, limit).await.unwrap();
    tx.commit().await.unwrap();
    n
}

pub fn field_errors(e: ServiceError) -> Vec<(String, String)> {
    match e {
        ServiceError::Invalid(p) => p,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// The pool's `fedwiki.active_sites` entitlement, as materialized (None when it has none).
pub async fn sites(t: &TestDb, pool: PoolId) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
    )
    .bind(pool)
    .fetch_optional(&t.admin)
    .await
    .unwrap()
    .flatten()
}
