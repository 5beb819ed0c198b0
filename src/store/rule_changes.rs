//! Rule changes: the change, its acts (one per delta), and the obligations they owe pools.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

pub async fn insert_change(
    conn: &mut PgConnection,
    set_id: i64,
    actor: Option<i64>,
    reason: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO core.entitlement_set_changes (entitlement_set_id, created_by, reason) VALUES ($1, $2, $3) RETURNING change_id",
        set_id,
        actor,
        reason
    )
    .fetch_one(conn)
    .await
}

/// `core.commit_rule_change`: the act, the rule, the obligations. Returns (act, pools owed).
pub async fn commit_rule_change(
    conn: &mut PgConnection,
    change_id: i64,
    position: i32,
    set_id: i64,
    key: &str,
    numeric: Option<i64>,
    flag: Option<bool>,
    list: bool,
) -> sqlx::Result<(i64, i64)> {
    let r = sqlx::query!(
        r#"SELECT act_id AS "act_id!", pools AS "pools!" FROM core.commit_rule_change($1, $2, $3, $4, $5, $6, $7)"#,
        change_id,
        position,
        set_id,
        key,
        numeric,
        flag,
        list
    )
    .fetch_one(conn)
    .await?;
    Ok((r.act_id, r.pools))
}

/// How many pools carry the set now (a conferral of one of its products holds).
pub async fn count_carrying_pools(conn: &mut PgConnection, set_id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(DISTINCT c.pool_id) AS "pools!" FROM core.products p
           JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding' WHERE p.entitlement_set_id = $1"#,
        set_id
    )
    .fetch_one(conn)
    .await
}

/// The drain lists after the commit: mark the change unlisted.
pub async fn set_unlisted(conn: &mut PgConnection, change_id: i64) -> sqlx::Result<()> {
    sqlx::query!("UPDATE core.entitlement_set_changes SET listed = false WHERE change_id = $1", change_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// One listing batch (`core.list_rule_change_obligations`); how many pools it listed.
pub async fn list_obligations(conn: &mut PgConnection, change_id: i64, limit: i32) -> sqlx::Result<i32> {
    sqlx::query_scalar!(r#"SELECT core.list_rule_change_obligations($1, $2) AS "listed!""#, change_id, limit)
        .fetch_one(conn)
        .await
}

pub async fn set_outcome(
    conn: &mut PgConnection,
    change_id: i64,
    pools_owed: i64,
    settled_inline: bool,
    hold_ms: f64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.entitlement_set_changes SET pools_owed = pools_owed + $2, settled_inline = $3, hold_ms = $4 WHERE change_id = $1",
        change_id,
        pools_owed as i32,
        settled_inline,
        hold_ms
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// ListPoolsCarryingSet, as the change recorded it: the pools its acts owe, ascending.
pub async fn owed_pools(conn: &mut PgConnection, change_id: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT DISTINCT o.pool_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id) WHERE a.change_id = $1 ORDER BY o.pool_id",
        change_id
    )
    .fetch_all(conn)
    .await
}

/// The next unsettled pools of a change whose attempt is due, in pool_id order, of one
/// partition of the drain (pool_id modulo `parts`), after `after`. Every act of a batch owes the
/// same pools and a pool's acts settle together, so the first act's rows stand for the pool.
pub async fn next_due_pools(
    conn: &mut PgConnection,
    change_id: i64,
    part: i64,
    parts: i64,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT o.pool_id FROM core.entitlement_set_change_obligations o
         WHERE o.act_id = (SELECT act_id FROM core.entitlement_set_change_acts WHERE change_id = $1 ORDER BY position LIMIT 1)
           AND o.pool_id > $4 AND o.state <> 'settled' AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
           AND o.pool_id % $3 = $2
         ORDER BY o.pool_id LIMIT $5",
        change_id,
        part,
        parts,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The acts of a change still owed by a pool, in the batch's order (read under the pool row).
pub async fn owed_acts_of_pool(conn: &mut PgConnection, change_id: i64, pool_id: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT o.act_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE a.change_id = $1 AND o.pool_id = $2 AND o.state <> 'settled' ORDER BY a.position",
        change_id,
        pool_id
    )
    .fetch_all(conn)
    .await
}

pub async fn settle_obligation(
    conn: &mut PgConnection,
    act_id: i64,
    pool_id: i64,
    error: Option<&str>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.settle_obligation($1, $2, $3) AS "settled!""#, act_id, pool_id, error)
        .fetch_one(conn)
        .await
}

pub async fn settle_change_pool(conn: &mut PgConnection, change_id: i64, pool_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.settle_change_pool($1, $2) AS "settled!""#, change_id, pool_id)
        .fetch_one(conn)
        .await
}

pub async fn finish_if_settled(conn: &mut PgConnection, change_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT core.finish_rule_change_if_settled($1) AS "finished!""#, change_id)
        .fetch_one(conn)
        .await
}

/// Failed obligations of a change become due now; their rows are taken in (pool, act) order.
pub async fn bring_failed_forward(conn: &mut PgConnection, change_id: i64) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "UPDATE core.entitlement_set_change_obligations o SET next_attempt_at = now()
         WHERE (o.act_id, o.pool_id) IN (
             SELECT f.act_id, f.pool_id FROM core.entitlement_set_change_obligations f
             JOIN core.entitlement_set_change_acts a USING (act_id)
             WHERE a.change_id = $1 AND f.state = 'failed' ORDER BY f.pool_id, f.act_id FOR UPDATE OF f)",
        change_id
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// Changes still draining that have an obligation due (the poller's list).
pub async fn draining_changes_due(conn: &mut PgConnection) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT ch.change_id FROM core.entitlement_set_changes ch WHERE ch.state = 'draining'
           AND (NOT ch.listed OR EXISTS (SELECT 1 FROM core.entitlement_set_change_acts a
                       JOIN core.entitlement_set_change_obligations o USING (act_id)
                       WHERE a.change_id = ch.change_id AND o.state <> 'settled'
                         AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())))
         ORDER BY ch.change_id"
    )
    .fetch_all(conn)
    .await
}

// Read models.

#[derive(Debug, Clone)]
pub struct ChangeRow {
    pub change_id: i64,
    pub entitlement_set_id: i64,
    pub set_name: String,
    pub by: Option<String>,
    pub committed_at: DateTime<Utc>,
    pub state: String,
    pub settled_inline: bool,
    pub hold_ms: Option<f64>,
    pub settled_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub owed: i64,
    pub settled: i64,
    pub failed: i64,
}

// The macros take a literal, so both queries below spell out `ChangeRow`'s select.

pub async fn changes(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"SELECT ch.change_id, ch.entitlement_set_id, s.name AS set_name, a.email AS "by?", ch.committed_at,
                  ch.state, ch.settled_inline, ch.hold_ms, ch.settled_at, ch.reason,
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

pub async fn change(conn: &mut PgConnection, id: i64) -> sqlx::Result<Option<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"SELECT ch.change_id, ch.entitlement_set_id, s.name AS set_name, a.email AS "by?", ch.committed_at,
                  ch.state, ch.settled_inline, ch.hold_ms, ch.settled_at, ch.reason,
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id) AS "owed!",
                  (SELECT count(*) FROM (SELECT o.pool_id FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                                         WHERE x.change_id = ch.change_id GROUP BY o.pool_id HAVING bool_and(o.state = 'settled')) s) AS "settled!",
                  (SELECT count(DISTINCT o.pool_id) FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts x USING (act_id)
                   WHERE x.change_id = ch.change_id AND o.state = 'failed') AS "failed!"
           FROM core.entitlement_set_changes ch JOIN core.entitlement_sets s USING (entitlement_set_id)
           LEFT JOIN core.accounts a ON a.account_id = ch.created_by
           WHERE ch.change_id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct ActRow {
    pub act_id: i64,
    pub change_id: i64,
    pub resource_key: String,
    pub old_numeric: Option<i64>,
    pub old_flag: Option<bool>,
    pub new_numeric: Option<i64>,
    pub new_flag: Option<bool>,
    pub owed: i64,
    pub settled: i64,
    pub failed: i64,
}

pub async fn acts(conn: &mut PgConnection, change_ids: &[i64]) -> sqlx::Result<Vec<ActRow>> {
    sqlx::query_as!(
        ActRow,
        r#"SELECT a.act_id, a.change_id, a.resource_key, a.old_numeric, a.old_flag, a.new_numeric, a.new_flag,
                  count(o.pool_id) AS "owed!", count(o.pool_id) FILTER (WHERE o.state = 'settled') AS "settled!",
                  count(o.pool_id) FILTER (WHERE o.state = 'failed') AS "failed!"
           FROM core.entitlement_set_change_acts a LEFT JOIN core.entitlement_set_change_obligations o USING (act_id)
           WHERE a.change_id = ANY ($1) GROUP BY a.act_id ORDER BY a.change_id, a.position"#,
        change_ids
    )
    .fetch_all(conn)
    .await
}

#[derive(Debug, Clone)]
pub struct FailureRow {
    pub pool_id: i64,
    pub organization_id: i64,
    pub organization: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

pub async fn failures(conn: &mut PgConnection, change_id: i64, limit: i64) -> sqlx::Result<Vec<FailureRow>> {
    sqlx::query_as!(
        FailureRow,
        "SELECT DISTINCT ON (o.pool_id) o.pool_id, org.organization_id, org.name AS organization, o.attempts, o.last_error, o.next_attempt_at
         FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
         JOIN core.resource_pools p ON p.pool_id = o.pool_id JOIN core.organizations org ON org.organization_id = p.organization_id
         WHERE a.change_id = $1 AND o.state = 'failed' ORDER BY o.pool_id LIMIT $2",
        change_id,
        limit
    )
    .fetch_all(conn)
    .await
}
