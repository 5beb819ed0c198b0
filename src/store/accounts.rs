//! Accounts, organization membership, web sessions and sign-in failures.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection};

#[derive(Debug, Clone, FromRow)]
pub struct Account {
    pub account_id: i64,
    pub email: String,
    pub password_hash: String,
    pub is_operator: bool,
}

#[derive(Debug, Clone, FromRow)]
pub struct SessionAccount {
    pub account_id: i64,
    pub email: String,
    pub is_operator: bool,
}

#[derive(Debug, Clone, FromRow)]
pub struct Membership {
    pub organization_id: i64,
    pub name: String,
    pub role: String,
}

#[derive(Debug, Clone, FromRow)]
pub struct AccountSummary {
    pub email: String,
    pub is_operator: bool,
    pub organizations: i64,
    pub created_at: DateTime<Utc>,
}

/// The account with this email (any case), its row locked FOR UPDATE: sign-in attempts on one
/// account run one at a time, so the failure count each reads is exact.
pub async fn lock_account_by_email(conn: &mut PgConnection, email: &str) -> sqlx::Result<Option<Account>> {
    sqlx::query_as(
        "SELECT account_id, email, password_hash, is_operator FROM core.accounts
         WHERE lower(email) = lower($1) FOR UPDATE",
    )
    .bind(email)
    .fetch_optional(conn)
    .await
}

/// Insert an account, or update the password and operator flag of the one with this email.
pub async fn upsert_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
    is_operator: bool,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO core.accounts (email, password_hash, is_operator) VALUES ($1, $2, $3)
         ON CONFLICT (lower(email)) DO UPDATE SET password_hash = EXCLUDED.password_hash, is_operator = EXCLUDED.is_operator
         RETURNING account_id",
    )
    .bind(email)
    .bind(password_hash)
    .bind(is_operator)
    .fetch_one(conn)
    .await
}

/// Failures recorded since `since` for this email and for this address.
pub async fn count_recent_failures(
    conn: &mut PgConnection,
    email: &str,
    address: &str,
    since: DateTime<Utc>,
) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM core.sign_in_failures WHERE lower(email) = lower($1) AND failed_at >= $3),
                (SELECT count(*) FROM core.sign_in_failures WHERE address = $2 AND failed_at >= $3)",
    )
    .bind(email)
    .bind(address)
    .bind(since)
    .fetch_one(conn)
    .await
}

pub async fn record_failure(conn: &mut PgConnection, email: &str, address: &str) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO core.sign_in_failures (email, address) VALUES ($1, $2)")
        .bind(email)
        .bind(address)
        .execute(conn)
        .await?;
    Ok(())
}

/// A successful sign-in clears the account's failures, so they no longer count against it.
pub async fn clear_failures(conn: &mut PgConnection, email: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM core.sign_in_failures WHERE lower(email) = lower($1)").bind(email).execute(conn).await?;
    Ok(())
}

pub async fn insert_session(
    conn: &mut PgConnection,
    token: &str,
    account_id: i64,
    expires_at: DateTime<Utc>,
    address: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO core.web_sessions (token_hash, account_id, expires_at, address)
         VALUES (sha256(convert_to($1, 'UTF8')), $2, $3, $4)",
    )
    .bind(token)
    .bind(account_id)
    .bind(expires_at)
    .bind(address)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE core.accounts SET last_signed_in_at = now() WHERE account_id = $1")
        .bind(account_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The account a live session token belongs to, sliding its expiry forward.
pub async fn touch_session(
    conn: &mut PgConnection,
    token: &str,
    idle: chrono::Duration,
) -> sqlx::Result<Option<SessionAccount>> {
    sqlx::query_as(
        "UPDATE core.web_sessions s SET last_seen_at = now(), expires_at = now() + $2
         FROM core.accounts a
         WHERE s.token_hash = sha256(convert_to($1, 'UTF8')) AND s.expires_at > now() AND a.account_id = s.account_id
         RETURNING a.account_id, a.email, a.is_operator",
    )
    .bind(token)
    .bind(idle)
    .fetch_optional(conn)
    .await
}

pub async fn delete_session(conn: &mut PgConnection, token: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM core.web_sessions WHERE token_hash = sha256(convert_to($1, 'UTF8'))")
        .bind(token)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn memberships(conn: &mut PgConnection, account_id: i64) -> sqlx::Result<Vec<Membership>> {
    sqlx::query_as(
        "SELECT o.organization_id, o.name, m.role FROM core.organization_members m
         JOIN core.organizations o USING (organization_id) WHERE m.account_id = $1 ORDER BY o.name, o.organization_id",
    )
    .bind(account_id)
    .fetch_all(conn)
    .await
}

pub async fn account_summaries(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<AccountSummary>> {
    sqlx::query_as(
        "SELECT a.email, a.is_operator, (SELECT count(*) FROM core.organization_members m WHERE m.account_id = a.account_id) AS organizations, a.created_at
         FROM core.accounts a ORDER BY a.is_operator DESC, lower(a.email) LIMIT $1",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}

pub async fn organization_count(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM core.organizations").fetch_one(conn).await
}

/// How many organizations have a name like this pattern.
pub async fn organizations_named_like(conn: &mut PgConnection, pattern: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM core.organizations WHERE name LIKE $1").bind(pattern).fetch_one(conn).await
}

/// The first organization with this name, if any.
pub async fn organization_by_name(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "SELECT organization_id FROM core.organizations WHERE name = $1 ORDER BY organization_id LIMIT 1",
    )
    .bind(name)
    .fetch_optional(conn)
    .await
}

pub async fn ensure_membership(
    conn: &mut PgConnection,
    organization_id: i64,
    account_id: i64,
    role: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (organization_id, account_id) DO NOTHING",
    )
    .bind(organization_id)
    .bind(account_id)
    .bind(role)
    .execute(conn)
    .await?;
    Ok(())
}
