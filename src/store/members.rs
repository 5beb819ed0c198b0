//! An organization's members (`core.organization_members`) as its owners manage them: the
//! organization's row taken before a role changes or a member goes, its owners counted under it.

use sqlx::PgConnection;

use crate::ids::{AccountId, OrganizationId};

/// A member as the members page lists them.
#[derive(Debug, Clone)]
pub struct Member {
    pub account_id: AccountId,
    pub email: String,
    pub role: String,
    pub verified: bool,
    pub disabled: bool,
}

/// The organization's row, FOR NO KEY UPDATE: who its owners are is decided under it. NO KEY, so
/// the inserts that reference the organization (memberships, invitations, sites) go on. Its
/// name, or None when there is no such organization.
pub async fn lock_organization(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "SELECT name FROM core.organizations WHERE organization_id = $1 FOR NO KEY UPDATE",
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// The organization's name, read without a lock.
pub async fn organization_name(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "SELECT name FROM core.organizations WHERE organization_id = $1",
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// The account's role in the organization, if it is a member.
pub async fn role_of(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    account_id: AccountId,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "SELECT role FROM core.organization_members WHERE organization_id = $1 AND account_id = $2",
        organization_id as OrganizationId,
        account_id as AccountId
    )
    .fetch_optional(conn)
    .await
}

/// How many owners the organization has besides `except` whose accounts are neither disabled
/// nor deleted: the ones who can still act as owners.
pub async fn active_owners_besides(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    except: AccountId,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM core.organization_members m
           JOIN core.accounts a ON a.account_id = m.account_id
           WHERE m.organization_id = $1 AND m.role = 'owner' AND m.account_id <> $2
             AND a.disabled_at IS NULL AND a.deleted_at IS NULL"#,
        organization_id as OrganizationId,
        except as AccountId
    )
    .fetch_one(conn)
    .await
}

/// Set a member's role; whether there was such a member.
pub async fn set_role(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    account_id: AccountId,
    role: &str,
) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "UPDATE core.organization_members SET role = $3 WHERE organization_id = $1 AND account_id = $2",
        organization_id as OrganizationId,
        account_id as AccountId,
        role
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Remove a member; whether there was such a member.
pub async fn delete_membership(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    account_id: AccountId,
) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "DELETE FROM core.organization_members WHERE organization_id = $1 AND account_id = $2",
        organization_id as OrganizationId,
        account_id as AccountId
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// Add a member; false when the account is a member already (nothing changed).
pub async fn insert_membership(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    account_id: AccountId,
    role: &str,
) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (organization_id, account_id) DO NOTHING",
        organization_id as OrganizationId,
        account_id as AccountId,
        role
    )
    .execute(conn)
    .await?
    .rows_affected()
        == 1)
}

/// The organization's members, owners first, then by email.
pub async fn members_of(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<Vec<Member>> {
    sqlx::query_as!(
        Member,
        r#"SELECT a.account_id AS "account_id: AccountId", a.email, m.role,
                  a.email_verified_at IS NOT NULL AS "verified!", a.disabled_at IS NOT NULL AS "disabled!"
           FROM core.organization_members m JOIN core.accounts a ON a.account_id = m.account_id
           WHERE m.organization_id = $1 AND a.deleted_at IS NULL
           ORDER BY m.role = 'owner' DESC, lower(a.email), a.account_id"#,
        organization_id as OrganizationId
    )
    .fetch_all(conn)
    .await
}

/// Whether an account with this email (any case) is a member of the organization.
pub async fn is_member_by_email(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    email: &str,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.organization_members m JOIN core.accounts a USING (account_id)
                          WHERE m.organization_id = $1 AND lower(a.email) = lower($2)) AS "member!""#,
        organization_id as OrganizationId,
        email
    )
    .fetch_one(conn)
    .await
}

/// An account's email and whether it is verified (who acts, as the act reads them).
pub async fn account_standing(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<Option<(String, bool)>> {
    Ok(sqlx::query!(
        r#"SELECT email, email_verified_at IS NOT NULL AS "verified!" FROM core.accounts WHERE account_id = $1"#,
        account_id as AccountId
    )
    .fetch_optional(conn)
    .await?
    .map(|r| (r.email, r.verified)))
}

/// A new account that proved it reads `email` (an invitation accepted with a new password):
/// verified from the start. None when an account has that email already (nothing written).
pub async fn insert_verified_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
) -> sqlx::Result<Option<AccountId>> {
    sqlx::query_scalar!(
        r#"INSERT INTO core.accounts (email, password_hash, email_verified_at) VALUES ($1, $2, now())
           ON CONFLICT (lower(email)) DO NOTHING RETURNING account_id AS "account_id: AccountId""#,
        email,
        password_hash
    )
    .fetch_optional(conn)
    .await
}

/// Whether an account (not deleted) has this email, in any case.
pub async fn account_exists(conn: &mut PgConnection, email: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.accounts WHERE lower(email) = lower($1)) AS "exists!""#,
        email
    )
    .fetch_one(conn)
    .await
}
