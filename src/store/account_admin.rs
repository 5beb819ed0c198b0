//! The account page's and the operators' account acts: the account row under its lock, the
//! organizations an account owns, its sessions, its anonymisation, and the operators' list.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::paging::{Page, Seek, page_of};
use crate::ids::{AccountId, OrganizationId};

/// An account's row as an act reads it under its lock.
#[derive(Debug, Clone)]
pub struct LockedAccount {
    pub account_id: AccountId,
    pub email: String,
    pub password_hash: String,
    pub is_operator: bool,
    pub disabled: bool,
    pub deleted: bool,
}

/// The account's row, unlocked: what a password check outside any transaction reads.
pub async fn account(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<Option<LockedAccount>> {
    sqlx::query_as!(
        LockedAccount,
        r#"SELECT account_id AS "account_id: AccountId", email, password_hash, is_operator,
                  disabled_at IS NOT NULL AS "disabled!", deleted_at IS NOT NULL AS "deleted!"
           FROM core.accounts WHERE account_id = $1"#,
        id as AccountId
    )
    .fetch_optional(conn)
    .await
}

/// The account's row FOR NO KEY UPDATE (an act on its email, password, marks).
pub async fn lock_account(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<Option<LockedAccount>> {
    sqlx::query_as!(
        LockedAccount,
        r#"SELECT account_id AS "account_id: AccountId", email, password_hash, is_operator,
                  disabled_at IS NOT NULL AS "disabled!", deleted_at IS NOT NULL AS "deleted!"
           FROM core.accounts WHERE account_id = $1 FOR NO KEY UPDATE"#,
        id as AccountId
    )
    .fetch_optional(conn)
    .await
}

/// Every operator's row and `also`'s, FOR NO KEY UPDATE in ascending account_id order: who is an
/// operator cannot change under the caller's count. A row that stopped being an operator's while
/// the statement waited for it is not returned (its condition is checked again once locked).
pub async fn lock_operators_and(conn: &mut PgConnection, also: AccountId) -> sqlx::Result<Vec<LockedAccount>> {
    sqlx::query_as!(
        LockedAccount,
        r#"SELECT account_id AS "account_id: AccountId", email, password_hash, is_operator,
                  disabled_at IS NOT NULL AS "disabled!", deleted_at IS NOT NULL AS "deleted!"
           FROM core.accounts WHERE (is_operator AND deleted_at IS NULL) OR account_id = $1
           ORDER BY account_id FOR NO KEY UPDATE"#,
        also as AccountId
    )
    .fetch_all(conn)
    .await
}

/// The organizations `account` owns, their rows FOR NO KEY UPDATE in ascending id order (the
/// members part's lock: who owns them cannot change under the caller's count).
pub async fn lock_owned_organizations(
    conn: &mut PgConnection,
    account: AccountId,
) -> sqlx::Result<Vec<OrganizationId>> {
    sqlx::query_scalar!(
        r#"SELECT o.organization_id AS "organization_id: OrganizationId" FROM core.organizations o
           WHERE o.organization_id IN (SELECT m.organization_id FROM core.organization_members m
                                       WHERE m.account_id = $1 AND m.role = 'owner')
           ORDER BY o.organization_id FOR NO KEY UPDATE OF o"#,
        account as AccountId
    )
    .fetch_all(conn)
    .await
}

/// Of `organizations`, those where `account` is an owner and no other owner is neither disabled
/// nor deleted: (id, name), by name.
pub async fn sole_owned(
    conn: &mut PgConnection,
    account: AccountId,
    organizations: &[OrganizationId],
) -> sqlx::Result<Vec<(OrganizationId, String)>> {
    let ids: Vec<i64> = organizations.iter().map(|o| o.0).collect();
    Ok(sqlx::query!(
        r#"SELECT o.organization_id, o.name FROM core.organizations o
           WHERE o.organization_id = ANY($2)
             AND EXISTS (SELECT 1 FROM core.organization_members m
                         WHERE m.organization_id = o.organization_id AND m.account_id = $1 AND m.role = 'owner')
             AND NOT EXISTS (SELECT 1 FROM core.organization_members m JOIN core.accounts a USING (account_id)
                             WHERE m.organization_id = o.organization_id AND m.account_id <> $1 AND m.role = 'owner'
                               AND a.disabled_at IS NULL AND a.deleted_at IS NULL)
           ORDER BY o.name, o.organization_id"#,
        account as AccountId,
        &ids
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| (OrganizationId(r.organization_id), r.name))
    .collect())
}

pub async fn set_password(conn: &mut PgConnection, id: AccountId, hash: &str) -> sqlx::Result<()> {
    sqlx::query!("UPDATE core.accounts SET password_hash = $2 WHERE account_id = $1", id as AccountId, hash)
        .execute(conn)
        .await?;
    Ok(())
}

/// End every session of the account but the one whose token is `keep`: how many ended.
pub async fn delete_other_sessions(conn: &mut PgConnection, id: AccountId, keep: &str) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM core.web_sessions WHERE account_id = $1 AND token_hash <> $2",
        id as AccountId,
        &super::accounts::token_hash(keep)[..]
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// A live session of an account as its page lists it.
#[derive(Debug, Clone)]
pub struct SessionRow {
    /// The session's handle on the page: its row's hash as hex (not a usable token).
    pub handle: String,
    pub created_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub address: String,
    /// Whether it is the session `current` names.
    pub current: bool,
}

/// The account's live sessions, newest first; `current` is the asking browser's token, if any.
pub async fn sessions_of(
    conn: &mut PgConnection,
    id: AccountId,
    current: Option<&str>,
) -> sqlx::Result<Vec<SessionRow>> {
    let current = current.map(|t| super::accounts::token_hash(t).to_vec()).unwrap_or_default();
    Ok(sqlx::query!(
        r#"SELECT token_hash, created_at, last_seen_at, address FROM core.web_sessions
           WHERE account_id = $1 AND expires_at > now() AND ends_at > now()
           ORDER BY created_at DESC, token_hash"#,
        id as AccountId
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| SessionRow {
        handle: crate::config::encode_hex(&r.token_hash),
        current: r.token_hash == current,
        created_at: r.created_at,
        last_seen_at: r.last_seen_at,
        address: r.address,
    })
    .collect())
}

/// End the account's session with this row hash: whether there was one.
pub async fn end_session(conn: &mut PgConnection, id: AccountId, hash: &[u8]) -> sqlx::Result<bool> {
    Ok(sqlx::query!("DELETE FROM core.web_sessions WHERE account_id = $1 AND token_hash = $2", id as AccountId, hash)
        .execute(conn)
        .await?
        .rows_affected()
        > 0)
}

/// The account's email change waiting for its new address's confirmation: the address and until
/// when the link works.
pub async fn pending_email_change(
    conn: &mut PgConnection,
    id: AccountId,
) -> sqlx::Result<Option<(String, DateTime<Utc>)>> {
    Ok(sqlx::query!(
        "SELECT email, expires_at FROM core.account_tokens
         WHERE account_id = $1 AND purpose = 'change_email' AND used_at IS NULL AND expires_at > now()
         ORDER BY created_at DESC, token_id DESC LIMIT 1",
        id as AccountId
    )
    .fetch_optional(conn)
    .await?
    .map(|r| (r.email, r.expires_at)))
}

/// Delete the account's memberships: the organizations they were of, ascending.
pub async fn delete_memberships(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<Vec<OrganizationId>> {
    let mut orgs = sqlx::query_scalar!(
        r#"DELETE FROM core.organization_members WHERE account_id = $1
           RETURNING organization_id AS "organization_id: OrganizationId""#,
        id as AccountId
    )
    .fetch_all(conn)
    .await?;
    orgs.sort_by_key(|o| o.0);
    Ok(orgs)
}

/// Use up every unused token of the account: no link it was mailed works any more.
pub async fn retire_all_tokens(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "UPDATE core.account_tokens SET used_at = now() WHERE account_id = $1 AND used_at IS NULL",
        id as AccountId
    )
    .execute(conn)
    .await?
    .rows_affected())
}

/// The address a deleted account is left with: unique, and never a mailbox.
pub fn deleted_email(id: AccountId) -> String {
    format!("deleted-{}@deleted.invalid", id.0)
}

/// A password hash no password verifies (not a PHC string at all).
pub const UNUSABLE_PASSWORD: &str = "!deleted";

/// Anonymise the account in place: the row stays, so every history row naming it keeps its
/// meaning; nothing of the person does.
pub async fn anonymise(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.accounts SET email = $2, password_hash = $3, is_operator = false, deleted_at = now()
         WHERE account_id = $1",
        id as AccountId,
        deleted_email(id),
        UNUSABLE_PASSWORD
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_disabled(conn: &mut PgConnection, id: AccountId, disabled: bool) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.accounts SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END WHERE account_id = $1",
        id as AccountId,
        disabled
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_operator(conn: &mut PgConnection, id: AccountId, is_operator: bool) -> sqlx::Result<()> {
    sqlx::query!("UPDATE core.accounts SET is_operator = $2 WHERE account_id = $1", id as AccountId, is_operator)
        .execute(conn)
        .await?;
    Ok(())
}

/// An account as the operators' list shows it.
#[derive(Debug, Clone)]
pub struct AccountListRow {
    pub account_id: AccountId,
    pub email: String,
    pub is_operator: bool,
    pub verified: bool,
    pub disabled: bool,
    pub deleted: bool,
    pub created_at: DateTime<Utc>,
    pub last_signed_in_at: Option<DateTime<Utc>>,
}

/// The LIKE pattern of emails whose lowered form starts with `prefix`: the prefix lowered, its
/// wildcards and escape character taken literally.
fn lowered_prefix_pattern(prefix: &str) -> String {
    format!("{}%", prefix.to_lowercase().replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

/// One page of accounts by email (byte order of the lowered email, then id) whose email starts
/// with `prefix` (any case): a range scan of `accounts_email_order` whichever page it is.
pub async fn accounts_page(
    conn: &mut PgConnection,
    prefix: &str,
    limit: i64,
    seek: Seek,
) -> sqlx::Result<Page<AccountListRow>> {
    let pattern = lowered_prefix_pattern(prefix);
    let (cursor, direction) = match seek {
        Seek::First => (None, "forward"),
        Seek::After(id) => (Some(id), "forward"),
        Seek::Before(id) => (Some(id), "backward"),
        Seek::Last => (None, "backward"),
    };
    let rows = sqlx::query_as!(
        AccountListRow,
        r#"WITH c AS (SELECT lower(email) COLLATE "C" AS k, account_id AS id FROM core.accounts WHERE account_id = $2),
           page AS (
               (SELECT a.* FROM core.accounts a
                WHERE $4 = 'forward' AND lower(a.email) COLLATE "C" LIKE $1
                  AND ($2::bigint IS NULL OR (lower(a.email) COLLATE "C", a.account_id) > (SELECT k, id FROM c))
                ORDER BY lower(a.email) COLLATE "C", a.account_id LIMIT $3)
               UNION ALL
               (SELECT a.* FROM core.accounts a
                WHERE $4 = 'backward' AND lower(a.email) COLLATE "C" LIKE $1
                  AND ($2::bigint IS NULL OR (lower(a.email) COLLATE "C", a.account_id) < (SELECT k, id FROM c))
                ORDER BY lower(a.email) COLLATE "C" DESC, a.account_id DESC LIMIT $3))
           SELECT p.account_id AS "account_id!: AccountId", p.email AS "email!", p.is_operator AS "is_operator!",
                  p.email_verified_at IS NOT NULL AS "verified!", p.disabled_at IS NOT NULL AS "disabled!",
                  p.deleted_at IS NOT NULL AS "deleted!", p.created_at AS "created_at!",
                  p.last_signed_in_at AS "last_signed_in_at?"
           FROM page p ORDER BY lower(p.email) COLLATE "C", p.account_id"#,
        pattern,
        cursor,
        limit + 1,
        direction
    )
    .fetch_all(conn)
    .await?;
    Ok(page_of(rows, limit, seek))
}

/// How many accounts' emails start with `prefix`, counting no further than `cap`.
pub async fn accounts_matching(conn: &mut PgConnection, prefix: &str, cap: i64) -> sqlx::Result<i64> {
    let pattern = lowered_prefix_pattern(prefix);
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM (SELECT 1 FROM core.accounts WHERE lower(email) COLLATE "C" LIKE $1 LIMIT $2) m"#,
        pattern,
        cap
    )
    .fetch_one(conn)
    .await
}

/// One account as the operator's account page shows it.
pub async fn account_facts(conn: &mut PgConnection, id: AccountId) -> sqlx::Result<Option<AccountListRow>> {
    sqlx::query_as!(
        AccountListRow,
        r#"SELECT account_id AS "account_id: AccountId", email, is_operator,
                  email_verified_at IS NOT NULL AS "verified!", disabled_at IS NOT NULL AS "disabled!",
                  deleted_at IS NOT NULL AS "deleted!", created_at, last_signed_in_at
           FROM core.accounts WHERE account_id = $1"#,
        id as AccountId
    )
    .fetch_optional(conn)
    .await
}
