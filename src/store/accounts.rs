//! Accounts, organization membership, web sessions and sign-in failures.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{
    PgConnection, Row,
    postgres::{PgRow, types::PgInterval},
};

use crate::ids::{AccountId, OrganizationId};

#[derive(Debug, Clone)]
pub struct Account {
    pub account_id: AccountId,
    pub email: String,
    pub password_hash: String,
    pub is_operator: bool,
}

#[derive(Debug, Clone)]
pub struct SessionAccount {
    pub account_id: AccountId,
    pub email: String,
    pub is_operator: bool,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Membership {
    pub organization_id: OrganizationId,
    pub name: String,
    pub role: String,
}

#[derive(Debug, Clone)]
pub struct AccountSummary {
    pub email: String,
    pub is_operator: bool,
    pub organizations: i64,
    pub created_at: DateTime<Utc>,
}

/// The account with this email (any case).
pub async fn account_by_email(conn: &mut PgConnection, email: &str) -> sqlx::Result<Option<Account>> {
    sqlx::query_as!(
        Account,
        "SELECT account_id, email, password_hash, is_operator FROM core.accounts WHERE lower(email) = lower($1)",
        email
    )
    .fetch_optional(conn)
    .await
}

/// The sign-in limits core.reserve_sign_in applies.
pub struct ThrottleLimits {
    pub address_window: Duration,
    pub address_max: i32,
    pub free: i32,
    pub first_delay: Duration,
    pub cap: Duration,
    pub forget: Duration,
}

/// Count one attempt (email, address) before it is verified: Ok when it may go on, or how long
/// until it may.
pub async fn reserve_sign_in(
    conn: &mut PgConnection,
    email: &str,
    address: &str,
    l: &ThrottleLimits,
) -> sqlx::Result<Result<(), Duration>> {
    let r = sqlx::query!(
        r#"SELECT allowed AS "allowed!", retry_after_s AS "retry_after_s!"
           FROM core.reserve_sign_in($1, $2, $3, $4, $5, $6, $7, $8)"#,
        email,
        address,
        interval(l.address_window)?,
        l.address_max,
        l.free,
        interval(l.first_delay)?,
        interval(l.cap)?,
        interval(l.forget)?,
    )
    .fetch_one(conn)
    .await?;
    let (allowed, retry_after_s) = (r.allowed, r.retry_after_s);
    Ok(if allowed { Ok(()) } else { Err(Duration::from_secs(retry_after_s.max(1) as u64)) })
}

/// A verified password: the attempt was not a failure.
pub async fn clear_sign_in(conn: &mut PgConnection, email: &str, address: &str) -> sqlx::Result<()> {
    sqlx::query!("SELECT core.clear_sign_in($1, $2)", email, address).execute(conn).await?;
    Ok(())
}

/// Insert an account, or update the password and operator flag of the one with this email.
pub async fn upsert_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
    is_operator: bool,
) -> sqlx::Result<AccountId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.accounts (email, password_hash, is_operator) VALUES ($1, $2, $3)
           ON CONFLICT (lower(email)) DO UPDATE SET password_hash = EXCLUDED.password_hash, is_operator = EXCLUDED.is_operator
           RETURNING account_id AS "account_id: AccountId""#,
        email,
        password_hash,
        is_operator
    )
    .fetch_one(conn)
    .await
}

pub async fn insert_session(
    conn: &mut PgConnection,
    token: &str,
    account_id: AccountId,
    address: &str,
    idle: Duration,
    lifetime: Duration,
) -> sqlx::Result<()> {
    sqlx::query!(
        "WITH s AS (
             INSERT INTO core.web_sessions (token_hash, account_id, expires_at, ends_at, address)
             VALUES (sha256(convert_to($1, 'UTF8')), $2, now() + least($3::interval, $4::interval), now() + $4::interval, $5)
         )
         UPDATE core.accounts SET last_signed_in_at = now() WHERE account_id = $2",
        token,
        account_id as AccountId,
        interval(idle)?,
        interval(lifetime)?,
        address
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A duration as an `interval` parameter (one out of range is refused as it was when bound as a
/// `chrono::Duration`).
fn interval(d: Duration) -> sqlx::Result<PgInterval> {
    PgInterval::try_from(chrono::Duration::from_std(d).unwrap_or_default()).map_err(sqlx::Error::Encode)
}

/// The call that resolves a session token (`core.resume_session`), for `db::tx::once`: the
/// simple protocol carries no parameters, so the token is accepted only as the 64 hex digits the
/// console makes, and the bounds are numbers. It finds the account of a live session (idle and
/// absolute bounds) and moves its last-seen time only when that is older than `touch_every`, so
/// most page views write nothing. None for a token the console did not make.
fn resume_session_call(token: &str, idle: Duration, touch_every: Duration) -> Option<String> {
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let (idle_ms, touch_ms) = (idle.as_millis(), touch_every.as_millis());
    Some(format!(
        "core.resume_session('{token}', interval '{idle_ms} milliseconds', interval '{touch_ms} milliseconds')"
    ))
}

/// The session's account (see `resume_session_call`).
pub fn resume_session_sql(token: &str, idle: Duration, touch_every: Duration) -> Option<String> {
    // Runtime SQL: a `tx::once` statement (simple protocol, one round trip) takes no parameters.
    let call = resume_session_call(token, idle, touch_every)?;
    Some(format!("SELECT account_id, email, is_operator FROM {call}"))
}

/// The session's account and, in the same statement, the member's home (a fourth column, the
/// JSON of `core.member_home`): the home page in one round trip.
pub fn resume_session_with_home_sql(token: &str, idle: Duration, touch_every: Duration) -> Option<String> {
    // Runtime SQL: a `tx::once` statement (simple protocol, one round trip) takes no parameters.
    let call = resume_session_call(token, idle, touch_every)?;
    Some(format!("SELECT s.account_id, s.email, s.is_operator, core.member_home(s.account_id) FROM {call} s"))
}

/// A row of `resume_session_with_home_sql`.
pub fn session_home_from_row(row: &PgRow) -> sqlx::Result<(SessionAccount, Vec<MemberHome>)> {
    Ok((session_account_from_row(row)?, home_from_json(&row.try_get::<String, _>(3)?)?))
}

/// A row of `resume_session_sql` (text format: the simple protocol).
pub fn session_account_from_row(row: &PgRow) -> sqlx::Result<SessionAccount> {
    Ok(SessionAccount { account_id: row.try_get(0)?, email: row.try_get(1)?, is_operator: row.try_get(2)? })
}

pub async fn delete_session(conn: &mut PgConnection, token: &str) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM core.web_sessions WHERE token_hash = sha256(convert_to($1, 'UTF8'))", token)
        .execute(conn)
        .await?;
    Ok(())
}

/// Every session of an account (its password changed).
pub async fn delete_sessions_of(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<u64> {
    Ok(sqlx::query!("DELETE FROM core.web_sessions WHERE account_id = $1", account_id as AccountId)
        .execute(conn)
        .await?
        .rows_affected())
}

pub async fn memberships(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<Vec<Membership>> {
    sqlx::query_as!(
        Membership,
        "SELECT o.organization_id, o.name, m.role FROM core.organization_members m
         JOIN core.organizations o USING (organization_id) WHERE m.account_id = $1 ORDER BY o.name, o.organization_id",
        account_id as AccountId
    )
    .fetch_all(conn)
    .await
}

pub async fn account_summaries(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<AccountSummary>> {
    sqlx::query_as!(
        AccountSummary,
        r#"SELECT a.email, a.is_operator,
                  (SELECT count(*) FROM core.organization_members m WHERE m.account_id = a.account_id) AS "organizations!",
                  a.created_at
           FROM core.accounts a ORDER BY a.is_operator DESC, lower(a.email) LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

/// How many organizations there are, from the kept counts (migration 0014).
pub async fn organization_count(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT coalesce(sum(delta), 0)::bigint AS "count!" FROM core.organization_counts"#)
        .fetch_one(conn)
        .await
}

/// How many organizations have a name like this pattern.
pub async fn organizations_named_like(conn: &mut PgConnection, pattern: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM core.organizations WHERE name LIKE $1"#, pattern)
        .fetch_one(conn)
        .await
}

/// The first organization with this name, if any.
pub async fn organization_by_name(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "organization_id: OrganizationId" FROM core.organizations WHERE name = $1
           ORDER BY organization_id LIMIT 1"#,
        name
    )
    .fetch_optional(conn)
    .await
}

pub async fn ensure_membership(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    account_id: AccountId,
    role: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (organization_id, account_id) DO NOTHING",
        organization_id as OrganizationId,
        account_id as AccountId,
        role
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One of a member's organizations as their home shows it: the membership, and its default
/// pool's held conferrals, entitlements and usage.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct MemberHome {
    pub membership: Membership,
    pub held: Vec<super::catalog::HeldConferral>,
    pub entitlements: Vec<super::entitlements::EntitlementValue>,
    pub usage: Vec<super::catalog::Usage>,
}

/// The member's home in one statement (one JSON document, `core.member_home`), for
/// `db::tx::once`: the home is the page every member loads, so it costs one round trip. The
/// simple protocol carries no parameters; the only value is the account id, a number.
pub fn member_home_sql(account_id: AccountId) -> String {
    // Runtime SQL: a `tx::once` statement (simple protocol, one round trip) takes no parameters.
    format!("SELECT core.member_home({account_id})")
}

/// The rows of `member_home_sql`.
pub fn member_home_from_rows(rows: &[PgRow]) -> Result<Vec<MemberHome>, sqlx::Error> {
    let Some(row) = rows.first() else { return Ok(vec![]) };
    home_from_json(&row.try_get::<String, _>(0)?)
}

/// `core.member_home`'s JSON, read.
fn home_from_json(json: &str) -> sqlx::Result<Vec<MemberHome>> {
    serde_json::from_str(json).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}
