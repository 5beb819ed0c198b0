//! Rule changes: the change, its acts (one per delta), and the obligations they owe pools.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{AccountId, EntitlementSetId, OrganizationId, PoolId, ResourceKey, RuleChangeActId, RuleChangeId},
    states::RuleChangeState,
    store::plan_acts::{RECENT_CAP, Recent},
};

pub async fn insert_change(
    conn: &mut PgConnection,
    set_id: EntitlementSetId,
    actor: Option<AccountId>,
    reason: &str,
) -> sqlx::Result<RuleChangeId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.entitlement_set_changes (entitlement_set_id, created_by, reason) VALUES ($1, $2, $3)
           RETURNING change_id AS "change_id: RuleChangeId""#,
        set_id as EntitlementSetId,
        actor as Option<AccountId>,
        reason
    )
    .fetch_one(conn)
    .await
}

/// `core.commit_rule_change`: the act, the rule, the obligations. Returns (act, pools owed).
#[allow(clippy::too_many_arguments)]
pub async fn commit_rule_change(
    conn: &mut PgConnection,
    change_id: RuleChangeId,
    position: i32,
    set_id: EntitlementSetId,
    key: &ResourceKey,
    numeric: Option<i64>,
    flag: Option<bool>,
    list: bool,
) -> sqlx::Result<(RuleChangeActId, i64)> {
    let r = sqlx::query!(
        r#"SELECT act_id AS "act_id!: RuleChangeActId", pools AS "pools!" FROM core.commit_rule_change($1, $2, $3, $4, $5, $6, $7)"#,
        change_id as RuleChangeId,
        position,
        set_id as EntitlementSetId,
        key as &ResourceKey,
        numeric,
        flag,
        list
    )
    .fetch_one(conn)
    .await?;
    Ok((r.act_id, r.pools))
}

/// How many pools carry the set now (a conferral of one of its products holds).
pub async fn count_carrying_pools(conn: &mut PgConnection, set_id: EntitlementSetId) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(DISTINCT c.pool_id) AS "pools!" FROM core.products p
           JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding' WHERE p.entitlement_set_id = $1"#,
        set_id as EntitlementSetId
    )
    .fetch_one(conn)
    .await
}

/// The drain lists after the commit: mark the change unlisted.
pub async fn set_unlisted(conn: &mut PgConnection, change_id: RuleChangeId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.entitlement_set_changes SET listed = false WHERE change_id = $1",
        change_id as RuleChangeId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One listing batch (`core.list_rule_change_obligations`); how many pools it listed.
pub async fn list_obligations(conn: &mut PgConnection, change_id: RuleChangeId, limit: i32) -> sqlx::Result<i32> {
    sqlx::query_scalar!(
        r#"SELECT core.list_rule_change_obligations($1, $2) AS "listed!""#,
        change_id as RuleChangeId,
        limit
    )
    .fetch_one(conn)
    .await
}

pub async fn set_outcome(
    conn: &mut PgConnection,
    change_id: RuleChangeId,
    pools_owed: i64,
    settled_inline: bool,
    hold_ms: f64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.entitlement_set_changes SET pools_owed = pools_owed + $2, settled_inline = $3, hold_ms = $4 WHERE change_id = $1",
        change_id as RuleChangeId,
        pools_owed as i32,
        settled_inline,
        hold_ms
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// ListPoolsCarryingSet, as the change recorded it: the pools its acts owe, ascending.
pub async fn owed_pools(conn: &mut PgConnection, change_id: RuleChangeId) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT o.pool_id AS "pool_id: PoolId" FROM core.entitlement_set_change_obligations o
           JOIN core.entitlement_set_change_acts a USING (act_id) WHERE a.change_id = $1 ORDER BY o.pool_id"#,
        change_id as RuleChangeId
    )
    .fetch_all(conn)
    .await
}

/// The next unsettled pools of a change whose attempt is due, in pool_id order, of one
/// partition of the drain (pool_id modulo `parts`), after `after`. Every act of a batch owes the
/// same pools and a pool's acts settle together, so the first act's rows stand for the pool.
pub async fn next_due_pools(
    conn: &mut PgConnection,
    change_id: RuleChangeId,
    part: i64,
    parts: i64,
    after: PoolId,
    limit: i64,
) -> sqlx::Result<Vec<PoolId>> {
    sqlx::query_scalar!(
        r#"SELECT o.pool_id AS "pool_id: PoolId" FROM core.entitlement_set_change_obligations o
         WHERE o.act_id = (SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1 ORDER BY position LIMIT 1)
           AND o.pool_id > $4 AND o.state <> 'settled' AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
           AND o.pool_id % $3 = $2
         ORDER BY o.pool_id LIMIT $5"#,
        change_id as RuleChangeId,
        part,
        parts,
        after as PoolId,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The acts of a change still owed by a pool, in the batch's order (read under the pool row).
pub async fn owed_acts_of_pool(
    conn: &mut PgConnection,
    change_id: RuleChangeId,
    pool_id: PoolId,
) -> sqlx::Result<Vec<RuleChangeActId>> {
    sqlx::query_scalar!(
        r#"SELECT o.act_id AS "act_id: RuleChangeActId" FROM core.entitlement_set_change_obligations o
           JOIN core.entitlement_set_change_acts a USING (act_id)
           WHERE a.change_id = $1 AND o.pool_id = $2 AND o.state <> 'settled' ORDER BY a.position"#,
        change_id as RuleChangeId,
        pool_id as PoolId
    )
    .fetch_all(conn)
    .await
}

pub async fn settle_obligation(
    conn: &mut PgConnection,
    act_id: RuleChangeActId,
    pool_id: PoolId,
    error: Option<&str>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT core.settle_obligation($1, $2, $3) AS "settled!""#,
        act_id as RuleChangeActId,
        pool_id as PoolId,
        error
    )
    .fetch_one(conn)
    .await
}

/// core.settle_change_pool as one statement of two numbers, for a run of settles sent in one
/// round trip (`tx::each_once_for`), which carries no parameters.
pub fn settle_change_pool_statement(change_id: RuleChangeId, pool_id: PoolId) -> String {
    format!("SELECT core.settle_change_pool({change_id}, {pool_id})")
}

/// Whether that statement settled anything.
pub fn settled(rows: &[sqlx::postgres::PgRow]) -> sqlx::Result<bool> {
    use sqlx::Row;
    rows.first().map_or(Ok(false), |r| r.try_get::<bool, _>(0))
}

pub async fn settle_change_pool(
    conn: &mut PgConnection,
    change_id: RuleChangeId,
    pool_id: PoolId,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT core.settle_change_pool($1, $2) AS "settled!""#,
        change_id as RuleChangeId,
        pool_id as PoolId
    )
    .fetch_one(conn)
    .await
}

pub async fn finish_if_settled(conn: &mut PgConnection, change_id: RuleChangeId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.finish_rule_change_if_settled($1) AS "finished!""#, change_id as RuleChangeId)
        .fetch_one(conn)
        .await
}

/// Failed obligations of a change become due now; their rows are taken in (pool, act) order.
pub async fn bring_failed_forward(conn: &mut PgConnection, change_id: RuleChangeId) -> sqlx::Result<u64> {
    let mut rows = sqlx::query!(
        "UPDATE core.entitlement_set_change_obligations o SET next_attempt_at = now()
         WHERE (o.act_id, o.pool_id) IN (
             SELECT f.act_id, f.pool_id FROM core.entitlement_set_change_obligations f
             JOIN core.entitlement_set_change_acts a USING (act_id)
             WHERE a.change_id = $1 AND f.state = 'failed' ORDER BY f.pool_id, f.act_id FOR UPDATE OF f)
         RETURNING o.act_id, o.pool_id",
        change_id as RuleChangeId
    )
    .fetch_all(&mut *conn)
    .await?;
    // The rows were locked in (pool_id, act_id) order; the trace notes them so.
    rows.sort_by_key(|r| (r.pool_id, r.act_id));
    let n = rows.len() as u64;
    crate::db::trace::note_rows(
        conn,
        crate::db::locks::Lock::ChangeObligationRow,
        rows.iter().map(|r| (format!("{},{}", r.act_id, r.pool_id), Some(r.pool_id * 1_000_000_000 + r.act_id))),
    )
    .await?;
    Ok(n)
}

/// Changes still draining that have an obligation due (the poller's list).
pub async fn draining_changes_due(conn: &mut PgConnection) -> sqlx::Result<Vec<RuleChangeId>> {
    sqlx::query_scalar!(
        r#"SELECT ch.change_id AS "change_id: RuleChangeId" FROM core.entitlement_set_changes ch WHERE ch.state = 'draining'
           AND (NOT ch.listed OR EXISTS (SELECT 1 FROM core.entitlement_set_change_acts a
                       JOIN core.entitlement_set_change_obligations o USING (act_id)
                       WHERE a.change_id = ch.change_id AND o.state <> 'settled'
                         AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())))
         ORDER BY ch.change_id"#
    )
    .fetch_all(conn)
    .await
}

// Read models.

#[derive(Debug, Clone)]
pub struct ChangeRow {
    pub change_id: RuleChangeId,
    pub entitlement_set_id: EntitlementSetId,
    pub set_name: String,
    pub by: Option<String>,
    pub committed_at: DateTime<Utc>,
    pub state: RuleChangeState,
    pub settled_inline: bool,
    pub hold_ms: Option<f64>,
    pub settled_at: Option<DateTime<Utc>>,
    pub reason: String,
    /// Every carrying pool owes the change (listing done).
    pub listed: bool,
    pub owed: i64,
    pub settled: i64,
    pub failed: i64,
}

// The macros take a literal, so both queries below spell out `ChangeRow`'s select.

pub async fn changes(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"SELECT ch.change_id, ch.entitlement_set_id, s.name AS set_name, a.email AS "by?", ch.committed_at,
                  ch.state AS "state: RuleChangeState", ch.settled_inline, ch.hold_ms, ch.settled_at, ch.reason, ch.listed,
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id) AS "owed!",
                  (SELECT count(*) FROM (SELECT o.pool_id FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                                         WHERE x.change_id = ch.change_id GROUP BY o.pool_id HAVING bool_and(o.state = 'settled')) s) AS "settled!",
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id AND o.state = 'failed') AS "failed!"
           FROM core.entitlement_set_changes ch JOIN core.entitlement_sets s USING (entitlement_set_id)
           LEFT JOIN core.accounts a ON a.account_id = ch.created_by
           ORDER BY ch.change_id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

pub async fn change(conn: &mut PgConnection, id: RuleChangeId) -> sqlx::Result<Option<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"SELECT ch.change_id, ch.entitlement_set_id, s.name AS set_name, a.email AS "by?", ch.committed_at,
                  ch.state AS "state: RuleChangeState", ch.settled_inline, ch.hold_ms, ch.settled_at, ch.reason, ch.listed,
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id) AS "owed!",
                  (SELECT count(*) FROM (SELECT o.pool_id FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                                         WHERE x.change_id = ch.change_id GROUP BY o.pool_id HAVING bool_and(o.state = 'settled')) s) AS "settled!",
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id AND o.state = 'failed') AS "failed!"
           FROM core.entitlement_set_changes ch JOIN core.entitlement_sets s USING (entitlement_set_id)
           LEFT JOIN core.accounts a ON a.account_id = ch.created_by
           WHERE ch.change_id = $1"#,
        id as RuleChangeId
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct ActRow {
    pub act_id: RuleChangeActId,
    pub change_id: RuleChangeId,
    pub resource_key: String,
    pub old_numeric: Option<i64>,
    pub old_flag: Option<bool>,
    pub new_numeric: Option<i64>,
    pub new_flag: Option<bool>,
    pub owed: i64,
    pub settled: i64,
    pub failed: i64,
}

pub async fn acts(conn: &mut PgConnection, change_ids: &[RuleChangeId]) -> sqlx::Result<Vec<ActRow>> {
    sqlx::query_as!(
        ActRow,
        r#"SELECT a.act_id, a.change_id, a.resource_key, a.old_numeric, a.old_flag, a.new_numeric, a.new_flag,
                  count(o.pool_id) AS "owed!", count(o.pool_id) FILTER (WHERE o.state = 'settled') AS "settled!",
                  count(o.pool_id) FILTER (WHERE o.state = 'failed') AS "failed!"
           FROM core.entitlement_set_change_acts a LEFT JOIN core.entitlement_set_change_obligations o USING (act_id)
           WHERE a.change_id = ANY ($1) GROUP BY a.act_id ORDER BY a.change_id, a.position"#,
        change_ids as &[RuleChangeId]
    )
    .fetch_all(conn)
    .await
}

/// The change's pools settled in about the last minute (see [`Recent`]); `None` for no such
/// change. A pool's acts settle together, so the first act's obligations stand for the pools, as
/// in [`next_due_pools`]. Bounded by [`RECENT_CAP`]: an index range on (act_id, settled_at),
/// newest first, when that index exists; without it, a walk of the first act's obligations.
pub async fn recent_pools(conn: &mut PgConnection, change_id: RuleChangeId) -> sqlx::Result<Option<Recent>> {
    sqlx::query_as!(
        Recent,
        r#"WITH recent AS (
               SELECT o.settled_at FROM core.entitlement_set_change_obligations o
                WHERE o.act_id = (SELECT act_id FROM core.entitlement_set_change_acts
                                   WHERE change_id = $1 ORDER BY position LIMIT 1)
                  AND o.settled_at > now() - interval '60 seconds'
                ORDER BY o.settled_at DESC LIMIT $2)
           SELECT (SELECT count(*) FROM recent) AS "settled!",
                  extract(epoch FROM CASE WHEN (SELECT count(*) FROM recent) >= $2
                                          THEN now() - (SELECT min(settled_at) FROM recent)
                                          ELSE least(interval '60 seconds', now() - ch.committed_at) END)::float8 AS "seconds!"
             FROM core.entitlement_set_changes ch WHERE ch.change_id = $1"#,
        change_id as RuleChangeId,
        RECENT_CAP
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct FailureRow {
    pub pool_id: PoolId,
    pub organization_id: OrganizationId,
    pub organization: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

pub async fn failures(conn: &mut PgConnection, change_id: RuleChangeId, limit: i64) -> sqlx::Result<Vec<FailureRow>> {
    sqlx::query_as!(
        FailureRow,
        "SELECT DISTINCT ON (o.pool_id) o.pool_id, org.organization_id, org.name AS organization, o.attempts, o.last_error, o.next_attempt_at
         FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
         JOIN core.resource_pools p ON p.pool_id = o.pool_id JOIN core.organizations org ON org.organization_id = p.organization_id
         WHERE a.change_id = $1 AND o.state = 'failed' ORDER BY o.pool_id LIMIT $2",
        change_id as RuleChangeId,
        limit
    )
    .fetch_all(conn)
    .await
}
