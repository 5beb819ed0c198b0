//! The default change's rows: reached types, obligations, and the moves' SQL functions.

use crate::db::locks::Lock;
use sqlx::PgConnection;

use crate::ids::{LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId};

/// LockOrgType: the type's row FOR NO KEY UPDATE; its current default.
pub async fn lock_org_type(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
) -> sqlx::Result<Option<(Option<LadderId>,)>> {
    let r = sqlx::query_scalar!(
        r#"SELECT default_plan_ladder_id AS "ladder: LadderId" FROM core.org_types WHERE org_type_id = $1 FOR NO KEY UPDATE"#,
        org_type_id as OrgTypeId
    )
    .fetch_optional(&mut *conn)
    .await?;
    if r.is_some() {
        crate::db::trace::note(conn, Lock::OrgTypeRow, org_type_id, None).await?;
    }
    Ok(r.map(|d| (d,)))
}

pub async fn rank0_of(conn: &mut PgConnection, ladder_id: LadderId) -> sqlx::Result<Option<ProductId>> {
    sqlx::query_scalar!(
        r#"SELECT product_id AS "product_id: ProductId" FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 AND rank = 0"#,
        ladder_id as LadderId
    )
    .fetch_optional(conn)
    .await
}

pub async fn set_default(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
    ladder_id: LadderId,
    act: PlanActId,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.org_types SET default_plan_ladder_id = $2, default_owner_act_id = $3 WHERE org_type_id = $1",
        org_type_id as OrgTypeId,
        ladder_id as LadderId,
        act as PlanActId
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn insert_reached_type(
    conn: &mut PgConnection,
    act: PlanActId,
    org_type_id: OrgTypeId,
    from_ladder: Option<LadderId>,
    from_product: Option<ProductId>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.plan_act_reached_types (plan_act_id, org_type_id, from_ladder_id, from_product_id)
         VALUES ($1, $2, $3, $4)",
        act as PlanActId,
        org_type_id as OrgTypeId,
        from_ladder as Option<LadderId>,
        from_product as Option<ProductId>
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A reorder's act takes over the default transition of a type it reaches (the type's default
/// ladder stays); its row lock is the UPDATE's own, under the exclusive rendezvous.
pub async fn take_default_ownership(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
    act: PlanActId,
) -> sqlx::Result<()> {
    let r = sqlx::query!(
        "UPDATE core.org_types SET default_owner_act_id = $2 WHERE org_type_id = $1",
        org_type_id as OrgTypeId,
        act as PlanActId
    )
    .execute(&mut *conn)
    .await?;
    // The UPDATE's row lock on the type (FOR NO KEY UPDATE's strength), which the reorder's T0 takes.
    if r.rows_affected() > 0 {
        crate::db::trace::note(conn, Lock::OrgTypeRow, org_type_id, None).await?;
    }
    Ok(())
}

pub async fn set_running(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.plan_acts SET state = 'running', finished_at = NULL WHERE plan_act_id = $1",
        act as PlanActId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// core.outgoing_default_exists: does an organization of the type still hold a floor on the
/// ladder (of `product`, when given)? Index probes.
pub async fn outgoing_default_exists(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
    ladder_id: LadderId,
    product_id: Option<ProductId>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT core.outgoing_default_exists($1, $2, $3) AS "exists!""#,
        org_type_id as OrgTypeId,
        ladder_id as LadderId,
        product_id as Option<ProductId>
    )
    .fetch_one(conn)
    .await
}

/// For a preview: the type's organizations, and how many of them hold a floor on the ladder (of
/// `product`, when given).
pub async fn floor_reach(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
    ladder_id: Option<LadderId>,
    product_id: Option<ProductId>,
) -> sqlx::Result<(i64, i64)> {
    let r = sqlx::query!(
        r#"SELECT (SELECT count(*) FROM core.organizations WHERE org_type_id = $1) AS "organizations!",
                (SELECT count(DISTINCT o.organization_id) FROM core.organizations o
                   JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
                   JOIN core.positions ps ON ps.pool_id = rp.pool_id AND ps.plan_ladder_id = $2
                   JOIN core.conferrals c ON c.conferral_id = ps.conferral_id
                   JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
                  WHERE o.org_type_id = $1 AND ($3::bigint IS NULL OR c.product_id = $3)) AS "holding_floor!""#,
        org_type_id as OrgTypeId,
        ladder_id as Option<LadderId>,
        product_id as Option<ProductId>
    )
    .fetch_one(conn)
    .await?;
    Ok((r.organizations, r.holding_floor))
}

/// Does the type have an organization? One index probe (its newest), so T0's hold does not grow
/// with the number of organizations.
pub async fn type_has_organizations(conn: &mut PgConnection, org_type_id: OrgTypeId) -> sqlx::Result<bool> {
    Ok(sqlx::query_scalar!(
        "SELECT organization_id FROM core.organizations WHERE org_type_id = $1 ORDER BY organization_id DESC LIMIT 1",
        org_type_id as OrgTypeId
    )
    .fetch_optional(conn)
    .await?
    .is_some())
}

/// The types an act reaches whose listing is not done.
pub async fn types_to_list(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<Vec<OrgTypeId>> {
    sqlx::query_scalar!(
        r#"SELECT org_type_id AS "org_type_id: OrgTypeId" FROM core.plan_act_reached_types
           WHERE plan_act_id = $1 AND NOT listing_done ORDER BY org_type_id"#,
        act as PlanActId
    )
    .fetch_all(conn)
    .await
}

pub async fn write_obligations(
    conn: &mut PgConnection,
    act: PlanActId,
    org_type_id: OrgTypeId,
    limit: i32,
) -> sqlx::Result<i32> {
    sqlx::query_scalar!(
        r#"SELECT core.write_plan_act_obligations($1, $2, $3) AS "written!""#,
        act as PlanActId,
        org_type_id as OrgTypeId,
        limit
    )
    .fetch_one(conn)
    .await
}

pub async fn pending_pools(
    conn: &mut PgConnection,
    act: PlanActId,
    part: i64,
    parts: i64,
    after: PoolId,
    limit: i64,
) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT pool_id AS "pool_id: PoolId" FROM core.plan_act_obligations
           WHERE plan_act_id = $1 AND state = 'pending' AND pool_id % $3 = $2 AND pool_id > $4 ORDER BY pool_id LIMIT $5"#,
        act as PlanActId,
        part,
        parts,
        after as PoolId,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn record_failure(conn: &mut PgConnection, act: PlanActId, pool: PoolId, error: &str) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.record_plan_act_obligation_failure($1, $2, $3)", act as PlanActId, pool as PoolId, error)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn requeue(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.requeue_plan_act_obligations($1) AS "requeued!""#, act as PlanActId)
        .fetch_one(conn)
        .await
}

/// core.enact_plan_act_obligation: one organization's move, as one statement of two numbers (run
/// as a transaction of its own in one round trip, `tx::once`).
pub fn enact_obligation_statement(act: PlanActId, pool: PoolId) -> String {
    // Runtime SQL: a `tx::once` statement (simple protocol, one round trip) takes no parameters.
    format!("SELECT core.enact_plan_act_obligation({act}, {pool})")
}

/// The state the move settled, or None when there was nothing to do.
pub fn enacted(rows: &[sqlx::postgres::PgRow]) -> sqlx::Result<Option<String>> {
    use sqlx::Row;
    match rows.first() {
        Some(r) => r.try_get::<Option<String>, _>(0),
        None => Ok(None),
    }
}

/// The act's row, FOR UPDATE (the last probe against a Retry's requeue).
pub async fn lock_act(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<()> {
    let r = sqlx::query_scalar!(
        "SELECT 1 AS locked FROM core.plan_acts WHERE plan_act_id = $1 FOR UPDATE",
        act as PlanActId
    )
    .fetch_all(&mut *conn)
    .await?;
    if !r.is_empty() {
        crate::db::trace::note(conn, Lock::PlanActRow, act, Some(act.0)).await?;
    }
    Ok(())
}

/// Is any obligation still pending, or any type still being listed?
pub async fn unfinished(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.plan_act_obligations WHERE plan_act_id = $1 AND state = 'pending')
               OR EXISTS (SELECT 1 FROM core.plan_act_reached_types WHERE plan_act_id = $1 AND NOT listing_done) AS "unfinished!""#,
        act as PlanActId
    )
    .fetch_one(conn)
    .await
}

/// The types an act reaches: (type, the ladder and product whose floor it takes away).
pub async fn reached_types(
    conn: &mut PgConnection,
    act: PlanActId,
) -> sqlx::Result<Vec<(OrgTypeId, Option<LadderId>, Option<ProductId>)>> {
    Ok(sqlx::query!(
        r#"SELECT org_type_id AS "org_type_id: OrgTypeId", from_ladder_id AS "from_ladder_id: LadderId",
                  from_product_id AS "from_product_id: ProductId"
           FROM core.plan_act_reached_types WHERE plan_act_id = $1"#,
        act as PlanActId
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (r.org_type_id, r.from_ladder_id, r.from_product_id))
    .collect())
}

pub async fn finish(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "UPDATE core.plan_acts SET state = 'done', finished_at = now() WHERE plan_act_id = $1 AND state = 'running'",
        act as PlanActId
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

pub async fn running_acts(conn: &mut PgConnection) -> sqlx::Result<Vec<PlanActId>> {
    sqlx::query_scalar!(
        r#"SELECT a.plan_act_id AS "plan_act_id: PlanActId" FROM core.plan_acts a WHERE a.state = 'running'
              OR EXISTS (SELECT 1 FROM core.plan_act_obligations o WHERE o.plan_act_id = a.plan_act_id AND o.state = 'pending')
           ORDER BY a.plan_act_id"#
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub pending: i64,
    pub migrated: i64,
    pub grandfathered: i64,
    pub vacant: i64,
    pub failed: i64,
    pub superseded: i64,
}

pub async fn counts(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<Counts> {
    sqlx::query_as!(
        Counts,
        r#"SELECT count(*) FILTER (WHERE state = 'pending') AS "pending!", count(*) FILTER (WHERE state = 'migrated') AS "migrated!",
                  count(*) FILTER (WHERE state = 'grandfathered') AS "grandfathered!", count(*) FILTER (WHERE state = 'vacant') AS "vacant!",
                  count(*) FILTER (WHERE state = 'failed') AS "failed!", count(*) FILTER (WHERE state = 'superseded') AS "superseded!"
           FROM core.plan_act_obligations WHERE plan_act_id = $1"#,
        act as PlanActId
    )
    .fetch_one(conn)
    .await
}

/// What settled in about the last minute of long work: how many, over how many seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recent {
    pub settled: i64,
    /// A minute, or less while the work is younger; or, when `settled` reached the cap, the span
    /// of those settlements.
    pub seconds: f64,
}

/// A recent window counts at most this many settlements, so a fast act's poll reads no more than
/// this many index entries; past it the rate is the cap over the span the cap took.
pub const RECENT_CAP: i64 = 5000;

/// The act's moves in about the last minute (see [`Recent`]); `None` for no such act. Bounded by
/// [`RECENT_CAP`]: an index range on (plan_act_id, settled_at), newest first, when that index
/// exists; without it, a walk of the act's obligations like [`counts`].
pub async fn recent_moves(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<Option<Recent>> {
    sqlx::query_as!(
        Recent,
        r#"WITH recent AS (
               SELECT o.settled_at FROM core.plan_act_obligations o
                WHERE o.plan_act_id = $1 AND o.settled_at > now() - interval '60 seconds'
                ORDER BY o.settled_at DESC LIMIT $2)
           SELECT (SELECT count(*) FROM recent) AS "settled!",
                  extract(epoch FROM CASE WHEN (SELECT count(*) FROM recent) >= $2
                                          THEN now() - (SELECT min(settled_at) FROM recent)
                                          ELSE least(interval '60 seconds', now() - a.created_at) END)::float8 AS "seconds!"
             FROM core.plan_acts a WHERE a.plan_act_id = $1"#,
        act as PlanActId,
        RECENT_CAP
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub organization_id: OrganizationId,
    pub organization: String,
    pub attempts: i32,
    pub last_error: Option<String>,
}

pub async fn failures(conn: &mut PgConnection, act: PlanActId, limit: i64) -> sqlx::Result<Vec<Failure>> {
    sqlx::query_as!(
        Failure,
        "SELECT o.organization_id, org.name AS organization, o.attempts, o.last_error FROM core.plan_act_obligations o
         JOIN core.organizations org USING (organization_id) WHERE o.plan_act_id = $1 AND o.state = 'failed' ORDER BY o.pool_id LIMIT $2",
        act as PlanActId,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Whether an act reaches organizations (has reached types) and whether its listing is done.
pub async fn listing_state(conn: &mut PgConnection, act: PlanActId) -> sqlx::Result<(bool, bool)> {
    let r = sqlx::query!(
        r#"SELECT count(*) > 0 AS "reaches!", coalesce(bool_and(listing_done), true) AS "listed!"
           FROM core.plan_act_reached_types WHERE plan_act_id = $1"#,
        act as PlanActId
    )
    .fetch_one(conn)
    .await?;
    Ok((r.reaches, r.listed))
}

/// The type's default ladder, read without a lock (a preview).
pub async fn org_type_default(
    conn: &mut PgConnection,
    org_type_id: OrgTypeId,
) -> sqlx::Result<Option<(Option<LadderId>,)>> {
    Ok(sqlx::query_scalar!(
        r#"SELECT default_plan_ladder_id AS "ladder: LadderId" FROM core.org_types WHERE org_type_id = $1"#,
        org_type_id as OrgTypeId
    )
    .fetch_optional(conn)
    .await?
    .map(|d| (d,)))
}

pub async fn org_type_name(conn: &mut PgConnection, org_type_id: OrgTypeId) -> sqlx::Result<String> {
    sqlx::query_scalar!("SELECT name FROM core.org_types WHERE org_type_id = $1", org_type_id as OrgTypeId)
        .fetch_one(conn)
        .await
}
