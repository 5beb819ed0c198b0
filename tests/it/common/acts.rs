//! The harness of the plan-act tests (tests/plan_acts.rs, tests/tier_acts.rs, and the others that
//! arrange organizations, grants and tiers): names to ids, organizations, grants, products and
//! ladders made through the services or by the administrator, the holds a lock test pauses on, and
//! what an act left behind.

use chrono::{DateTime, Utc};
use member_console::{
    db::{Db, TxKind, begin},
    ids::{ConferralId, GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId},
    services::{
        grants::{self, IssueGrant, Recipient},
        organizations::{self as orgs, OrgName},
        plan_acts::{self as pa, Disposition},
        refusal::ServiceError,
    },
    store::plan_acts as store,
};

use super::{TestDb, pages::demo_db};

pub async fn scalar(t: &TestDb, sql: &str) -> i64 {
    t.one(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))).await
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

/// The demo's database and the ids the plan-act tests start from.
pub struct Demo {
    pub t: TestDb,
    pub community: OrgTypeId,
    pub business: OrgTypeId,
    pub wiki: LadderId,
    pub support: LadderId,
    pub free: ProductId,
    pub basic: ProductId,
    pub pro: ProductId,
}

pub async fn demo() -> Demo {
    let t = demo_db().await;
    let (community, business) = (type_id(&t, "Community").await, type_id(&t, "Business").await);
    let (wiki, support) = (ladder_id(&t, "Wiki hosting").await, ladder_id(&t, "Support").await);
    let (free, basic, pro) = (product_id(&t, "Free").await, product_id(&t, "Basic").await, product_id(&t, "Pro").await);
    Demo { t, community, business, wiki, support, free, basic, pro }
}

pub async fn org_of_type(t: &TestDb, name: &str, ty: OrgTypeId) -> orgs::CreatedOrganization {
    orgs::create_organization(&t.db, &OrgName::parse(name).unwrap(), Some(ty)).await.unwrap()
}

/// An organization of the demo's Community type.
pub async fn community_org(t: &TestDb, name: &str) -> orgs::CreatedOrganization {
    org_of_type(t, name, type_id(t, "Community").await).await
}

/// `n` organizations of the type, named `{prefix} {i:03}`.
pub async fn orgs_of_type(t: &TestDb, ty: OrgTypeId, prefix: &str, n: usize) -> Vec<orgs::CreatedOrganization> {
    let mut out = vec![];
    for i in 0..n {
        out.push(org_of_type(t, &format!("{prefix} {i:03}"), ty).await);
    }
    out
}

/// An operator grant of one `product` to the organization, from now and open-ended.
pub fn operator_grant(org: OrganizationId, product: ProductId) -> IssueGrant {
    IssueGrant {
        recipient: Recipient::Organization(org),
        product_id: product,
        quantity: 1,
        starts_at: None,
        ends_at: None,
        reason: "test".into(),
        actor: None,
    }
}

pub async fn grant_with(
    t: &TestDb,
    org: OrganizationId,
    product: ProductId,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> GrantId {
    let g = IssueGrant { quantity, ends_at, ..operator_grant(org, product) };
    grants::issue_grant(&t.db, &g).await.unwrap()
}

/// The operator grant issued on a task of its own, as a second transaction that may wait on a
/// lock the test holds.
pub fn spawn_grant(
    t: &TestDb,
    org: OrganizationId,
    product: ProductId,
) -> tokio::task::JoinHandle<Result<GrantId, ServiceError>> {
    let db = t.db.clone();
    tokio::spawn(async move { grants::issue_grant(&db, &operator_grant(org, product)).await })
}

pub async fn grant_status(t: &TestDb, grant: GrantId) -> String {
    t.one(sqlx::query_scalar("SELECT status FROM core.grants WHERE grant_id = $1").bind(grant)).await
}

/// An operator grant of `product` to the organization.
pub async fn grant(t: &TestDb, org: OrganizationId, product: ProductId) -> GrantId {
    grant_with(t, org, product, 1, None).await
}

/// A published product with a set of its own (`sites` wikis), no tier yet.
pub async fn new_product(t: &TestDb, name: &str, sites: i64) -> ProductId {
    let set: i64 = t
        .one(
            sqlx::query_scalar("INSERT INTO core.entitlement_sets (name) VALUES ($1) RETURNING entitlement_set_id")
                .bind(name),
        )
        .await;
    t.run(
        sqlx::query(
            "INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value)
         VALUES ($1, 'fedwiki.active_sites', $2)",
        )
        .bind(set)
        .bind(sites),
    )
    .await;
    t.one(sqlx::query_scalar(
        "INSERT INTO core.products (name, entitlement_set_id, published) VALUES ($1, $2, true) RETURNING product_id",
    )
    .bind(name)
    .bind(set)).await
}

/// A new organization type defaulting to `ladder`, with `n` organizations on its floor (made as
/// the bench makes them); its id.
pub async fn floored_type(t: &TestDb, name: &str, ladder: LadderId, n: i64) -> i64 {
    let ty: i64 = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ($1, $2) RETURNING org_type_id",
            )
            .bind(name)
            .bind(ladder),
        )
        .await;
    member_console::bench::floored_organizations(&t.admin, n, ty, ladder.0).await.unwrap();
    ty
}

/// A ladder with the products as its tiers, rank 0 first (set up by the administrator).
pub async fn new_ladder(t: &TestDb, name: &str, products: &[ProductId]) -> LadderId {
    let ladder: LadderId = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.plan_ladders (name, sort_order)
         SELECT $1, coalesce(max(sort_order), 0) + 1 FROM core.plan_ladders RETURNING plan_ladder_id",
            )
            .bind(name),
        )
        .await;
    for (rank, p) in products.iter().enumerate() {
        t.run(
            sqlx::query("INSERT INTO core.plan_ladder_tiers (plan_ladder_id, rank, product_id) VALUES ($1, $2, $3)")
                .bind(ladder)
                .bind(rank as i32)
                .bind(p),
        )
        .await;
    }
    ladder
}

pub async fn new_type(t: &TestDb, name: &str, ladder: LadderId) -> OrgTypeId {
    t.one(
        sqlx::query_scalar(
            "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ($1, $2) RETURNING org_type_id",
        )
        .bind(name)
        .bind(ladder),
    )
    .await
}

/// A ladder's tiers as (rank, product), by rank.
pub async fn tiers(t: &TestDb, ladder: LadderId) -> Vec<(i32, String)> {
    t.all(
        sqlx::query_as(
            "SELECT t.rank, p.name FROM core.plan_ladder_tiers t JOIN core.products p USING (product_id)
         WHERE plan_ladder_id = $1 ORDER BY rank",
        )
        .bind(ladder),
    )
    .await
}

pub fn tier_list(names: &[&str]) -> Vec<(i32, String)> {
    names.iter().enumerate().map(|(i, n)| (i as i32, n.to_string())).collect()
}

/// The tier the pool holds on "Wiki hosting", by product name.
pub async fn hosting(t: &TestDb, pool: PoolId) -> String {
    t.one(
        sqlx::query_scalar(
            "SELECT pr.name FROM core.positions p JOIN core.plan_ladders l USING (plan_ladder_id)
         JOIN core.conferrals c USING (conferral_id) JOIN core.products pr ON pr.product_id = c.product_id
         WHERE p.pool_id = $1 AND l.name = 'Wiki hosting'",
        )
        .bind(pool),
    )
    .await
}

/// A pool's position on one ladder and the grant behind it.
#[derive(sqlx::FromRow)]
pub struct Position {
    pub ladder: String,
    pub rank: i32,
    pub product: String,
    pub kind: String,
    pub status: String,
    pub act: Option<PlanActId>,
}

/// The pool's positions, by ladder name.
pub async fn positions_of(t: &TestDb, pool: PoolId) -> Vec<Position> {
    t.all(
        sqlx::query_as(
            "SELECT l.name AS ladder, p.rank, pr.name AS product, g.kind, g.status, g.plan_act_id AS act
         FROM core.positions p
         JOIN core.plan_ladders l USING (plan_ladder_id)
         JOIN core.conferrals c USING (conferral_id)
         JOIN core.products pr ON pr.product_id = c.product_id
         JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE p.pool_id = $1 ORDER BY l.name",
        )
        .bind(pool),
    )
    .await
}

/// The floor grant holding `ladder` in the pool (its grant id and conferral id).
pub async fn floor_grant_on(t: &TestDb, pool: PoolId, ladder: LadderId) -> (GrantId, ConferralId) {
    t.one(
        sqlx::query_as(
            "SELECT g.grant_id, c.conferral_id FROM core.positions p JOIN core.conferrals c USING (conferral_id)
         JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE p.pool_id = $1 AND p.plan_ladder_id = $2 AND g.kind = 'floor'",
        )
        .bind(pool)
        .bind(ladder),
    )
    .await
}

/// The floor grant holding `ladder` in each pool, in order.
pub async fn floor_grants_on(t: &TestDb, pools: &[PoolId], ladder: LadderId) -> Vec<(GrantId, ConferralId)> {
    let mut out = vec![];
    for p in pools {
        out.push(floor_grant_on(t, *p, ladder).await);
    }
    out
}

/// The `fedwiki.active_sites` entitlement of the organization named `name` (its default pool).
pub async fn org_sites(t: &TestDb, name: &str) -> i64 {
    t.one(sqlx::query_scalar(
        "SELECT e.numeric_value FROM core.pool_entitlements e JOIN core.resource_pools p USING (pool_id)
         JOIN core.organizations o USING (organization_id) WHERE o.name = $1 AND e.resource_key = 'fedwiki.active_sites'",
    )
    .bind(name)).await
}

/// Every organization of a type, as (organization, name, pool), by organization id.
pub async fn members_of(t: &TestDb, ty: OrgTypeId) -> Vec<(OrganizationId, String, PoolId)> {
    t.all(
        sqlx::query_as(
            "SELECT o.organization_id, o.name, rp.pool_id FROM core.organizations o
         JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE o.org_type_id = $1 ORDER BY o.organization_id",
        )
        .bind(ty),
    )
    .await
}

/// An act's obligations by state, as (pending, migrated, grandfathered, vacant, failed, superseded).
pub async fn counts(t: &TestDb, act: PlanActId) -> (i64, i64, i64, i64, i64, i64) {
    let c = {
        let mut conn = t.admin.acquire().await.unwrap();
        store::counts(&mut conn, act).await.unwrap()
    };
    (c.pending, c.migrated, c.grandfathered, c.vacant, c.failed, c.superseded)
}

/// An admin transaction holding one pool row FOR UPDATE, as a move does; and its backend.
pub async fn hold_pool(t: &TestDb, pool: PoolId) -> (sqlx::pool::PoolConnection<sqlx::Postgres>, i32) {
    super::hold_open(t, &format!("SELECT 1 FROM core.resource_pools WHERE pool_id = {pool} FOR UPDATE")).await
}

/// An admin transaction holding the next act's drain-job dedupe key open, so that a T0 pauses
/// at its last statement (the job's insert); the hold, its backend, and the next act's id.
pub async fn hold_next_drain_key(t: &TestDb) -> (sqlx::pool::PoolConnection<sqlx::Postgres>, i32, PlanActId) {
    let next = PlanActId(
        scalar(
            t,
            "SELECT coalesce(last_value, 0) + 1 FROM pg_sequences WHERE schemaname = 'core' AND sequencename = 'plan_acts_plan_act_id_seq'",
        )
        .await,
    );
    let insert = format!(
        "INSERT INTO integration.jobs (kind, payload, dedupe_key) VALUES ('drain_plan_act', '{{}}', '{}:{next}')",
        pa::DRAIN_PLAN_ACT
    );
    let (hold, pid) = super::hold_open(t, &insert).await;
    (hold, pid, next)
}

/// T0 never takes a pool or obligation row: those are the moves'.
pub fn assert_no_pool_nor_obligation(held: &[(String, String, String)]) {
    assert!(
        !held.iter().any(|(_, r, _)| r == "core.resource_pools" || r == "core.plan_act_obligations"),
        "T0 holds a pool or obligation lock: {held:?}"
    );
}

/// Make one pool's entitlements unwritable: an admin trigger refuses every write of them
/// (`pool {pool} is broken`), so a move or a sync of that pool fails, until `mend_pools`.
pub async fn break_pool(t: &TestDb, pool: PoolId) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION public.refuse_pool() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.pool_id = {pool} THEN RAISE EXCEPTION 'pool {pool} is broken'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER refuse_pool BEFORE INSERT OR UPDATE ON core.pool_entitlements FOR EACH ROW EXECUTE FUNCTION public.refuse_pool();"
    )))
    .execute(&t.admin)
    .await
    .unwrap();
}

/// Drop the trigger `break_pool` made.
pub async fn mend_pools(t: &TestDb) {
    sqlx::raw_sql("DROP TRIGGER refuse_pool ON core.pool_entitlements").execute(&t.admin).await.unwrap();
}

/// How many active floor grants the organizations of a type hold, with `and` narrowing the grants
/// further (an SQL condition on `g`, e.g. "AND g.plan_act_id = 7"; "" for none).
pub async fn active_floors(t: &TestDb, ty: OrgTypeId, and: &str) -> i64 {
    scalar(
        t,
        &format!(
            "SELECT count(*) FROM core.grants g JOIN core.organizations o USING (organization_id)
             WHERE o.org_type_id = {ty} AND g.kind = 'floor' AND g.status = 'active' {and}"
        ),
    )
    .await
}

/// An act's obligation for one pool: (state, attempts, last error).
pub async fn obligation(t: &TestDb, act: PlanActId, pool: PoolId) -> (String, i32, Option<String>) {
    t.one(
        sqlx::query_as(
            "SELECT state, attempts, last_error FROM core.plan_act_obligations WHERE plan_act_id = $1 AND pool_id = $2",
        )
        .bind(act)
        .bind(pool),
    )
    .await
}

pub async fn act_state(t: &TestDb, act: PlanActId) -> String {
    t.one(sqlx::query_scalar("SELECT state FROM core.plan_acts WHERE plan_act_id = $1").bind(act)).await
}

pub async fn type_default(t: &TestDb, ty: OrgTypeId) -> (Option<LadderId>, Option<PlanActId>) {
    t.one(
        sqlx::query_as(
            "SELECT default_plan_ladder_id, default_owner_act_id FROM core.org_types WHERE org_type_id = $1",
        )
        .bind(ty),
    )
    .await
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
    list_batch_on(&t.db, act, ty, limit).await
}

/// The same on a task of its own, as a second transaction that may wait on a lock the test holds.
pub fn spawn_list_batch(t: &TestDb, act: PlanActId, ty: OrgTypeId, limit: i32) -> tokio::task::JoinHandle<i32> {
    let db = t.db.clone();
    tokio::spawn(async move { list_batch_on(&db, act, ty, limit).await })
}

async fn list_batch_on(db: &Db, act: PlanActId, ty: OrgTypeId, limit: i32) -> i32 {
    let mut tx = begin(db, TxKind::Materializing).await.unwrap();
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
    t.optional(sqlx::query_scalar(
        "SELECT numeric_value FROM core.pool_entitlements WHERE pool_id = $1 AND resource_key = 'fedwiki.active_sites'",
    )
    .bind(pool)).await
    .flatten()
}
