//! Accounts, organization membership, web sessions and sign-in failures.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, postgres::types::PgInterval};

use super::{json_document, millis};
use crate::ids::{AccountId, OrganizationId};

#[derive(Debug, Clone)]
pub struct Account {
    pub account_id: AccountId,
    pub email: String,
    pub password_hash: String,
    pub is_operator: bool,
    pub verified: bool,
    pub disabled: bool,
}

#[derive(Debug, Clone)]
pub struct SessionAccount {
    pub account_id: AccountId,
    pub email: String,
    pub is_operator: bool,
    /// Whether the account proved it reads its email: until then it may look around, but not
    /// buy, create sites or invite.
    pub verified: bool,
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
        r#"SELECT account_id, email, password_hash, is_operator,
                  email_verified_at IS NOT NULL AS "verified!", disabled_at IS NOT NULL AS "disabled!"
           FROM core.accounts WHERE lower(email) = lower($1) AND deleted_at IS NULL"#,
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
/// Either way it counts as verified: whoever runs this (the demo, `create-operator`) vouches
/// for the address.
pub async fn upsert_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
    is_operator: bool,
) -> sqlx::Result<AccountId> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.accounts (email, password_hash, is_operator, email_verified_at) VALUES ($1, $2, $3, now())
           ON CONFLICT (lower(email)) DO UPDATE SET password_hash = EXCLUDED.password_hash, is_operator = EXCLUDED.is_operator,
               email_verified_at = coalesce(core.accounts.email_verified_at, now())
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
             VALUES ($1, $2, now() + least($3::interval, $4::interval), now() + $4::interval, $5)
         )
         UPDATE core.accounts SET last_signed_in_at = now() WHERE account_id = $2",
        &token_hash(token)[..],
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

/// What the sessions table keeps of a token: its SHA-256 (of the token's UTF-8 bytes), so a read
/// of the table does not yield a usable token. Computed here rather than in SQL, where the
/// expression is evaluated for each row a scan compares (migration 0033).
pub(super) fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether a session token is one the console makes (64 hex digits): anything else is no
/// session, answered before a connection is taken.
pub fn is_session_token(token: &str) -> bool {
    token.len() == 64 && token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A live session as a page's statement reads it: the account, whether its last-seen time is
/// due to move (older than `touch_every`; `touch_session` moves it), and the page's document.
pub struct Resumed<T> {
    pub account: SessionAccount,
    pub touch_due: bool,
    pub page: T,
}

impl<T> Resumed<T> {
    pub(super) fn new(
        account_id: i64,
        email: String,
        is_operator: bool,
        verified: bool,
        touch_due: bool,
        page: T,
    ) -> Resumed<T> {
        Resumed {
            account: SessionAccount { account_id: account_id.into(), email, is_operator, verified },
            touch_due,
            page,
        }
    }
}

/// The account of a live session (`core.live_session`: idle and absolute bounds). A read: the
/// caller moves its last-seen time with `touch_session` when `touch_due` says so, so most page
/// views write nothing. None for a session that has ended.
pub async fn resume_session(
    conn: &mut PgConnection,
    token: &str,
    touch_every: Duration,
) -> sqlx::Result<Option<Resumed<()>>> {
    let row = sqlx::query!(
        r#"SELECT account_id AS "account_id!", email AS "email!", is_operator AS "is_operator!", touch_due AS "touch_due!", verified AS "verified!"
           FROM core.live_session($1::bytea, $2::bigint * interval '1 millisecond')"#,
        &token_hash(token)[..],
        millis(touch_every)
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Resumed::new(r.account_id, r.email, r.is_operator, r.verified, r.touch_due, ())))
}

/// `resume_session`, and the member's home (`core.member_home`) in the same statement: the
/// home page in one round trip. Nothing is read for a session that has ended.
pub async fn resume_session_with_home(
    conn: &mut PgConnection,
    token: &str,
    touch_every: Duration,
) -> sqlx::Result<Option<Resumed<Vec<MemberHome>>>> {
    let row = sqlx::query!(
        r#"SELECT s.account_id AS "account_id!", s.email AS "email!", s.is_operator AS "is_operator!",
                  s.touch_due AS "touch_due!", s.verified AS "verified!", core.member_home(s.account_id) AS "home!"
           FROM core.live_session($1::bytea, $2::bigint * interval '1 millisecond') s"#,
        &token_hash(token)[..],
        millis(touch_every)
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        Ok(Resumed::new(r.account_id, r.email, r.is_operator, r.verified, r.touch_due, json_document(&r.home)?))
    })
    .transpose()
}

/// Moves a live session's last-seen time and idle end, unless another view moved it within
/// `touch_every` meanwhile: the same write done twice changes nothing.
pub async fn touch_session(
    conn: &mut PgConnection,
    token: &str,
    idle: Duration,
    touch_every: Duration,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.web_sessions
         SET last_seen_at = now(), expires_at = least(now() + $2::bigint * interval '1 millisecond', ends_at)
         WHERE token_hash = $1 AND expires_at > now() AND ends_at > now()
           AND last_seen_at < now() - $3::bigint * interval '1 millisecond'",
        &token_hash(token)[..],
        millis(idle),
        millis(touch_every)
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn delete_session(conn: &mut PgConnection, token: &str) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM core.web_sessions WHERE token_hash = $1", &token_hash(token)[..]).execute(conn).await?;
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
    /// The name and unit of each key its entitlements and usage show (migration 0021).
    #[serde(default)]
    pub labels: Vec<super::catalog::KeyLabel>,
    /// Live subscriptions another plan displaced, one line per item.
    #[serde(default)]
    pub displaced: Vec<DisplacedSubscription>,
}

/// A subscription's item another plan displaced: what it pays for, what holds the ladder now,
/// and until when (a grant's end, when it has one).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct DisplacedSubscription {
    pub subscription_id: crate::ids::SubscriptionId,
    pub product: String,
    pub by: String,
    /// Whether an operator's grant displaced it (else another subscription).
    pub granted: bool,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

/// The member's home: each organization of the account with its default pool's held
/// conferrals, entitlements and usage, as one JSON document (`core.member_home`).
pub async fn member_home(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<Vec<MemberHome>> {
    let json = sqlx::query_scalar!(r#"SELECT core.member_home($1) AS "home!""#, account_id as AccountId)
        .fetch_one(conn)
        .await?;
    json_document(&json)
}
