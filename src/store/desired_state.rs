//! The desired-state relay's tables: connections, notices (`core.desired_state_outbox`) and
//! records. Records are written only through the SQL functions of migration 0025, each of which
//! takes the address lock first; the dispatch stamp here writes only the dispatch columns.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use crate::ids::{ConnectionId, NoticeId, OrganizationId, RecordId, ResourceKey};

// Connections -------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct ConnectionRow {
    pub connection_id: ConnectionId,
    pub name: String,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub resource_keys: Vec<String>,
    pub read_back: bool,
    pub created_at: DateTime<Utc>,
    pub deleted_at: Option<DateTime<Utc>>,
    pub test_requested_at: Option<DateTime<Utc>>,
    pub last_test_at: Option<DateTime<Utc>>,
    pub last_test_ok: Option<bool>,
    pub last_test_answer: Option<String>,
    pub last_read_back_at: Option<DateTime<Utc>>,
    pub last_read_back_answer: Option<String>,
}

pub async fn connection(e: impl PgExecutor<'_>, id: ConnectionId) -> sqlx::Result<Option<ConnectionRow>> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT connection_id AS "connection_id: ConnectionId", name, url, secret, previous_secret,
                  previous_secret_until, resource_keys, read_back, created_at, deleted_at, test_requested_at,
                  last_test_at, last_test_ok, last_test_answer, last_read_back_at, last_read_back_answer
             FROM core.desired_state_connections WHERE connection_id = $1"#,
        id as ConnectionId
    )
    .fetch_optional(e)
    .await
}

/// The live connections, by name.
pub async fn live_connections(e: impl PgExecutor<'_>) -> sqlx::Result<Vec<ConnectionRow>> {
    sqlx::query_as!(
        ConnectionRow,
        r#"SELECT connection_id AS "connection_id: ConnectionId", name, url, secret, previous_secret,
                  previous_secret_until, resource_keys, read_back, created_at, deleted_at, test_requested_at,
                  last_test_at, last_test_ok, last_test_answer, last_read_back_at, last_read_back_answer
             FROM core.desired_state_connections WHERE deleted_at IS NULL
            ORDER BY lower(name), connection_id"#
    )
    .fetch_all(e)
    .await
}

pub async fn live_connection_ids(e: impl PgExecutor<'_>) -> sqlx::Result<Vec<ConnectionId>> {
    sqlx::query_scalar!(
        r#"SELECT connection_id AS "id: ConnectionId" FROM core.desired_state_connections
            WHERE deleted_at IS NULL ORDER BY connection_id"#
    )
    .fetch_all(e)
    .await
}

pub async fn insert_connection(
    conn: &mut PgConnection,
    name: &str,
    url: &str,
    secret: &str,
    keys: &[ResourceKey],
    read_back: bool,
) -> sqlx::Result<ConnectionId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.desired_state_connections (name, url, secret, resource_keys, read_back)
           VALUES ($1, $2, $3, $4, $5) RETURNING connection_id AS "id: ConnectionId""#,
        name,
        url,
        secret,
        keys as &[ResourceKey],
        read_back
    )
    .fetch_one(conn)
    .await
}

/// An operator's edit of a live connection; false when it is gone or deleted.
pub async fn update_connection(
    conn: &mut PgConnection,
    id: ConnectionId,
    name: &str,
    url: &str,
    keys: &[ResourceKey],
    read_back: bool,
) -> sqlx::Result<bool> {
    let n = sqlx::query!(
        "UPDATE core.desired_state_connections SET name = $2, url = $3, resource_keys = $4, read_back = $5
          WHERE connection_id = $1 AND deleted_at IS NULL",
        id as ConnectionId,
        name,
        url,
        keys as &[ResourceKey],
        read_back
    )
    .execute(&mut *conn)
    .await?;
    let written = n.rows_affected() == 1;
    if written {
        crate::db::trace::note(conn, crate::db::locks::Lock::ConnectionRow, id.0, None).await?;
    }
    Ok(written)
}

/// A new secret; the one it replaces signs too until `overlap_secs` from now.
pub async fn rotate_secret(
    conn: &mut PgConnection,
    id: ConnectionId,
    secret: &str,
    overlap_secs: f64,
) -> sqlx::Result<bool> {
    let n = sqlx::query!(
        "UPDATE core.desired_state_connections
            SET previous_secret = secret, secret = $2,
                previous_secret_until = now() + make_interval(secs => $3)
          WHERE connection_id = $1 AND deleted_at IS NULL",
        id as ConnectionId,
        secret,
        overlap_secs
    )
    .execute(&mut *conn)
    .await?;
    let written = n.rows_affected() == 1;
    if written {
        crate::db::trace::note(conn, crate::db::locks::Lock::ConnectionRow, id.0, None).await?;
    }
    Ok(written)
}

pub async fn mark_deleted(conn: &mut PgConnection, id: ConnectionId) -> sqlx::Result<bool> {
    let n = sqlx::query!(
        "UPDATE core.desired_state_connections SET deleted_at = now() WHERE connection_id = $1 AND deleted_at IS NULL",
        id as ConnectionId
    )
    .execute(&mut *conn)
    .await?;
    let written = n.rows_affected() == 1;
    if written {
        crate::db::trace::note(conn, crate::db::locks::Lock::ConnectionRow, id.0, None).await?;
    }
    Ok(written)
}

pub async fn request_test(e: impl PgExecutor<'_>, id: ConnectionId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.desired_state_connections SET test_requested_at = now()
          WHERE connection_id = $1 AND deleted_at IS NULL",
        id as ConnectionId
    )
    .execute(e)
    .await?;
    Ok(())
}

pub async fn write_test_answer(e: impl PgExecutor<'_>, id: ConnectionId, ok: bool, answer: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.desired_state_connections SET last_test_at = now(), last_test_ok = $2, last_test_answer = $3
          WHERE connection_id = $1",
        id as ConnectionId,
        ok,
        answer
    )
    .execute(e)
    .await?;
    Ok(())
}

pub async fn write_read_back_run(e: impl PgExecutor<'_>, id: ConnectionId, answer: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.desired_state_connections SET last_read_back_at = now(), last_read_back_answer = $2
          WHERE connection_id = $1",
        id as ConnectionId,
        answer
    )
    .execute(e)
    .await?;
    Ok(())
}

/// The resource keys that exist, of those asked.
pub async fn existing_keys(e: impl PgExecutor<'_>, keys: &[ResourceKey]) -> sqlx::Result<Vec<ResourceKey>> {
    sqlx::query_scalar!(
        r#"SELECT resource_key AS "resource_key: ResourceKey" FROM core.resource_keys WHERE resource_key = ANY ($1)"#,
        keys as &[ResourceKey]
    )
    .fetch_all(e)
    .await
}

pub async fn all_keys(e: impl PgExecutor<'_>) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(r#"SELECT resource_key FROM core.resource_keys ORDER BY resource_key COLLATE "C""#)
        .fetch_all(e)
        .await
}

// Notices -----------------------------------------------------------------------------------------

/// A notice the relay writes itself (Retry, Send a test), through the one function triggers use.
pub async fn insert_notice(
    e: impl PgExecutor<'_>,
    connection: Option<ConnectionId>,
    recipient: Option<OrganizationId>,
    reason: &str,
) -> sqlx::Result<()> {
    let kind = recipient.map(|_| "organization");
    sqlx::query!(
        "SELECT core.insert_desired_state_notice($1, $2, $3, $4)",
        connection.map(|c| c.0),
        kind,
        recipient.map(|r| r.0),
        reason
    )
    .execute(e)
    .await?;
    Ok(())
}

#[derive(Debug, Clone)]
pub struct NoticeRow {
    pub notice_id: NoticeId,
    pub connection_id: Option<ConnectionId>,
    pub recipient_id: Option<OrganizationId>,
    pub reason: String,
    pub after_recipient_id: i64,
    pub attempts: i32,
}

/// ClaimDesiredStateOutbox: up to `limit` pending notices (never claimed, or their lease ran
/// out), FOR UPDATE SKIP LOCKED, leased for `lease_secs`, in one statement.
pub async fn claim_notices(conn: &mut PgConnection, limit: i64, lease_secs: f64) -> sqlx::Result<Vec<NoticeRow>> {
    sqlx::query_as!(
        NoticeRow,
        r#"WITH due AS (
               SELECT notice_id FROM core.desired_state_outbox
                WHERE claimed_until IS NULL OR claimed_until < now()
                ORDER BY notice_id
                LIMIT $1
                FOR UPDATE SKIP LOCKED)
           UPDATE core.desired_state_outbox o
              SET claimed_until = now() + make_interval(secs => $2), attempts = o.attempts + 1
             FROM due WHERE o.notice_id = due.notice_id
           RETURNING o.notice_id AS "notice_id: NoticeId", o.connection_id AS "connection_id: ConnectionId",
                     o.recipient_id AS "recipient_id: OrganizationId", o.reason, o.after_recipient_id, o.attempts"#,
        limit,
        lease_secs
    )
    .fetch_all(conn)
    .await
}

pub async fn delete_notices(e: impl PgExecutor<'_>, ids: &[i64]) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM core.desired_state_outbox WHERE notice_id = ANY ($1)", ids).execute(e).await?;
    Ok(())
}

/// A walk's next page: its place moves on and the notice is free for the next claim.
pub async fn advance_notice(e: impl PgExecutor<'_>, id: NoticeId, after: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.desired_state_outbox SET after_recipient_id = $2, claimed_until = NULL, last_error = NULL
          WHERE notice_id = $1",
        id as NoticeId,
        after
    )
    .execute(e)
    .await?;
    Ok(())
}

/// A notice whose work failed: due again after `retry_secs`, with the reason kept.
pub async fn release_notice(e: impl PgExecutor<'_>, id: NoticeId, error: &str, retry_secs: f64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.desired_state_outbox SET claimed_until = now() + make_interval(secs => $3), last_error = $2
          WHERE notice_id = $1",
        id as NoticeId,
        error,
        retry_secs
    )
    .execute(e)
    .await?;
    Ok(())
}

/// The next page of every organization after `after`.
pub async fn organizations_after(e: impl PgExecutor<'_>, after: i64, limit: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT organization_id FROM core.organizations WHERE organization_id > $1 ORDER BY organization_id LIMIT $2",
        after,
        limit
    )
    .fetch_all(e)
    .await
}

/// The next page of a connection's recipients that have a record (`failing`: only those whose
/// last push failed).
pub async fn recipients_after(
    e: impl PgExecutor<'_>,
    connection: ConnectionId,
    failing: bool,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT recipient_id FROM core.desired_state_records
          WHERE connection_id = $1 AND recipient_kind = 'organization' AND recipient_id > $2
            AND (NOT $3 OR failures > 0)
          ORDER BY recipient_id LIMIT $4",
        connection as ConnectionId,
        after,
        failing,
        limit
    )
    .fetch_all(e)
    .await
}

pub async fn pending_notices(e: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM core.desired_state_outbox"#).fetch_one(e).await
}

// Records -----------------------------------------------------------------------------------------

/// The connections with a record due to be pushed now.
pub async fn connections_with_due_records(e: impl PgExecutor<'_>) -> sqlx::Result<Vec<ConnectionId>> {
    sqlx::query_scalar!(
        r#"SELECT c.connection_id AS "id: ConnectionId" FROM core.desired_state_connections c
            WHERE c.deleted_at IS NULL
              AND EXISTS (SELECT 1 FROM core.desired_state_records r
                           WHERE r.connection_id = c.connection_id AND r.confirmed_generation < r.generation
                             AND r.due_at <= now())
            ORDER BY c.connection_id"#
    )
    .fetch_all(e)
    .await
}

/// A record handed to a push: stamped dispatched at `stamped_at`, with the dispatch columns as
/// they were before the stamp, so a run that ends before pushing it can give it back unchanged.
#[derive(Debug, Clone)]
pub struct StampedRecord {
    pub record_id: RecordId,
    pub recipient_kind: String,
    pub recipient_id: i64,
    pub generation: i64,
    pub content: serde_json::Value,
    pub stamped_at: DateTime<Utc>,
    pub before_dispatched_generation: i64,
    pub before_dispatched_at: Option<DateTime<Utc>>,
    pub before_due_at: DateTime<Utc>,
}

/// StampDesiredStateRecordsDispatched: up to `limit` due records of a live connection, locked in
/// id order, stamped dispatched at their generation and not due again for `bound_secs` (the
/// push's bound), so no other dispatcher sends them meanwhile. One statement; no address lock.
pub async fn stamp_dispatched(
    e: impl PgExecutor<'_>,
    connection: ConnectionId,
    limit: i64,
    bound_secs: f64,
) -> sqlx::Result<Vec<StampedRecord>> {
    sqlx::query_as!(
        StampedRecord,
        r#"WITH due AS (
               SELECT record_id, dispatched_generation, dispatched_at, due_at FROM core.desired_state_records
                WHERE connection_id = $1 AND confirmed_generation < generation AND due_at <= now()
                  AND EXISTS (SELECT 1 FROM core.desired_state_connections
                               WHERE connection_id = $1 AND deleted_at IS NULL)
                ORDER BY record_id
                LIMIT $2
                FOR UPDATE)
           UPDATE core.desired_state_records r
              SET dispatched_generation = r.generation, dispatched_at = now(),
                  due_at = now() + make_interval(secs => $3)
             FROM due
            WHERE r.record_id = due.record_id AND r.confirmed_generation < r.generation AND r.due_at <= now()
           RETURNING r.record_id AS "record_id: RecordId", r.recipient_kind, r.recipient_id, r.generation, r.content,
                     r.dispatched_at AS "stamped_at!", due.dispatched_generation AS "before_dispatched_generation!",
                     due.dispatched_at AS "before_dispatched_at?", due.due_at AS "before_due_at!""#,
        connection as ConnectionId,
        limit,
        bound_secs
    )
    .fetch_all(e)
    .await
}

/// The dispatch stamp undone for records a run stamped and never pushed: each gets back the
/// dispatch columns it had, so it is due as it was and no attempt is counted against it. One
/// statement that locks the records in id order, as the stamp does; no address lock. A record
/// stamped again since, or made due by Retry or a new URL, is left as it is.
pub async fn unstamp_unsent(e: impl PgExecutor<'_>, unsent: &[StampedRecord]) -> sqlx::Result<u64> {
    let ids: Vec<i64> = unsent.iter().map(|r| r.record_id.0).collect();
    let stamped_at: Vec<DateTime<Utc>> = unsent.iter().map(|r| r.stamped_at).collect();
    let generations: Vec<i64> = unsent.iter().map(|r| r.before_dispatched_generation).collect();
    let dispatched_at: Vec<Option<DateTime<Utc>>> = unsent.iter().map(|r| r.before_dispatched_at).collect();
    let due_at: Vec<DateTime<Utc>> = unsent.iter().map(|r| r.before_due_at).collect();
    let done = sqlx::query!(
        r#"WITH unsent AS (
               SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::timestamptz[],
                                    $5::timestamptz[])
                      AS u(record_id, stamped_at, dispatched_generation, dispatched_at, due_at)),
           locked AS (
               SELECT record_id FROM core.desired_state_records
                WHERE record_id IN (SELECT record_id FROM unsent)
                ORDER BY record_id
                FOR UPDATE)
           UPDATE core.desired_state_records r
              SET dispatched_generation = u.dispatched_generation, dispatched_at = u.dispatched_at,
                  due_at = u.due_at
             FROM locked JOIN unsent u USING (record_id)
            WHERE r.record_id = locked.record_id AND r.dispatched_at = u.stamped_at AND r.due_at > now()"#,
        &ids,
        &stamped_at,
        &generations,
        &dispatched_at as &[Option<DateTime<Utc>>],
        &due_at
    )
    .execute(e)
    .await?;
    Ok(done.rows_affected())
}

/// writePushAnswer (the SQL function takes the address lock, then the record). `url` is where the
/// push went: an answer from a URL the connection no longer has confirms nothing. False when the
/// record is gone.
#[allow(clippy::too_many_arguments)]
pub async fn write_push_answer(
    e: impl PgExecutor<'_>,
    record: RecordId,
    generation: i64,
    ok: bool,
    answer: &str,
    backoff_base_secs: f64,
    backoff_cap_secs: f64,
    url: &str,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT core.write_desired_state_push_answer($1, $2, $3, $4, $5, $6, $7) AS "written!""#,
        record as RecordId,
        generation,
        ok,
        answer,
        backoff_base_secs,
        backoff_cap_secs,
        url
    )
    .fetch_one(e)
    .await
}

/// readBackItem (the SQL function takes the address lock, then the record). True when it drifted.
pub async fn write_read_back(
    e: impl PgExecutor<'_>,
    record: RecordId,
    found: bool,
    generation: Option<i64>,
    content: Option<&serde_json::Value>,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT core.write_desired_state_read_back($1, $2, $3, $4) AS "drifted!""#,
        record as RecordId,
        found,
        generation,
        content
    )
    .fetch_one(e)
    .await
}

/// A record the remote confirmed, for read-back.
#[derive(Debug, Clone)]
pub struct ConfirmedRecord {
    pub record_id: RecordId,
    pub recipient_kind: String,
    pub recipient_id: i64,
    pub generation: i64,
    pub content: serde_json::Value,
}

/// The next page (by id) of a connection's records the remote confirmed at their generation.
pub async fn confirmed_records_after(
    e: impl PgExecutor<'_>,
    connection: ConnectionId,
    after: RecordId,
    limit: i64,
) -> sqlx::Result<Vec<ConfirmedRecord>> {
    sqlx::query_as!(
        ConfirmedRecord,
        r#"SELECT record_id AS "record_id: RecordId", recipient_kind, recipient_id, generation, content
             FROM core.desired_state_records
            WHERE connection_id = $1 AND record_id > $2 AND confirmed_generation = generation
            ORDER BY record_id LIMIT $3"#,
        connection as ConnectionId,
        after as RecordId,
        limit
    )
    .fetch_all(e)
    .await
}

/// One connection's figures for the operators' list.
#[derive(Debug, Clone)]
pub struct ConnectionFigures {
    pub connection_id: ConnectionId,
    pub recipients: i64,
    pub behind: i64,
    pub failing: i64,
    pub drift: i64,
    /// Since when the oldest change not yet confirmed has waited.
    pub oldest_behind: Option<DateTime<Utc>>,
    pub last_answer_at: Option<DateTime<Utc>>,
}

pub async fn connection_figures(e: impl PgExecutor<'_>, ids: &[i64]) -> sqlx::Result<Vec<ConnectionFigures>> {
    sqlx::query_as!(
        ConnectionFigures,
        r#"SELECT c.id AS "connection_id!: ConnectionId",
                  (SELECT count(*) FROM core.desired_state_records r WHERE r.connection_id = c.id) AS "recipients!",
                  (SELECT count(*) FROM core.desired_state_records r
                    WHERE r.connection_id = c.id AND r.confirmed_generation < r.generation) AS "behind!",
                  (SELECT count(*) FROM core.desired_state_records r
                    WHERE r.connection_id = c.id AND r.failures > 0) AS "failing!",
                  (SELECT count(*) FROM core.desired_state_records r
                    WHERE r.connection_id = c.id AND r.drift) AS "drift!",
                  (SELECT min(r.changed_at) FROM core.desired_state_records r
                    WHERE r.connection_id = c.id AND r.confirmed_generation < r.generation) AS oldest_behind,
                  (SELECT max(r.last_answer_at) FROM core.desired_state_records r
                    WHERE r.connection_id = c.id) AS last_answer_at
             FROM unnest($1::bigint[]) AS c(id)"#,
        ids
    )
    .fetch_all(e)
    .await
}

/// A record as the connection page lists it.
#[derive(Debug, Clone)]
pub struct RecordLine {
    pub record_id: RecordId,
    pub recipient_id: i64,
    pub organization: Option<String>,
    pub generation: i64,
    pub dispatched_generation: i64,
    pub confirmed_generation: i64,
    pub changed_at: DateTime<Utc>,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub due_at: DateTime<Utc>,
    pub failures: i32,
    pub last_answer: Option<String>,
    pub last_answer_at: Option<DateTime<Utc>>,
    pub drift: bool,
    pub observed_generation: Option<i64>,
    pub content: serde_json::Value,
}

/// A page of a connection's records after `after` (by recipient id), all or only those behind,
/// failing or drifted (`filter`: "", "behind", "failing", "drift").
pub async fn record_lines(
    e: impl PgExecutor<'_>,
    connection: ConnectionId,
    filter: &str,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<RecordLine>> {
    sqlx::query_as!(
        RecordLine,
        r#"SELECT r.record_id AS "record_id: RecordId", r.recipient_id, o.name AS "organization?", r.generation,
                  r.dispatched_generation, r.confirmed_generation, r.changed_at, r.confirmed_at, r.due_at, r.failures,
                  r.last_answer, r.last_answer_at, r.drift, r.observed_generation, r.content
             FROM core.desired_state_records r
             LEFT JOIN core.organizations o ON o.organization_id = r.recipient_id
            WHERE r.connection_id = $1 AND r.recipient_id > $2
              AND CASE $3::text WHEN 'behind' THEN r.confirmed_generation < r.generation
                                WHEN 'failing' THEN r.failures > 0
                                WHEN 'drift' THEN r.drift
                                ELSE true END
            ORDER BY r.recipient_id LIMIT $4"#,
        connection as ConnectionId,
        after,
        filter,
        limit
    )
    .fetch_all(e)
    .await
}

/// A record's state, for tests and the stress tool's invariants.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordState {
    pub record_id: RecordId,
    pub connection_id: ConnectionId,
    pub recipient_id: i64,
    pub generation: i64,
    pub confirmed_generation: i64,
    pub content: serde_json::Value,
}

pub async fn record_at(
    e: impl PgExecutor<'_>,
    connection: ConnectionId,
    recipient: OrganizationId,
) -> sqlx::Result<Option<RecordState>> {
    sqlx::query_as!(
        RecordState,
        r#"SELECT record_id AS "record_id: RecordId", connection_id AS "connection_id: ConnectionId", recipient_id,
                  generation, confirmed_generation, content
             FROM core.desired_state_records
            WHERE connection_id = $1 AND recipient_kind = 'organization' AND recipient_id = $2"#,
        connection as ConnectionId,
        recipient as OrganizationId
    )
    .fetch_optional(e)
    .await
}
