//! Sign-up, email verification and password reset (issue 38): the sign-up type, a new unverified
//! account, the account row under its lock, and the mailed links' retirement.

use sqlx::PgConnection;

use crate::{
    ids::{AccountId, OrgTypeId},
    services::tokens::TokenHash,
    store::account_tokens::TokenPurpose,
};

/// The organization type a sign-up gives, with its name; None until an operator chooses one.
pub async fn signup_org_type(conn: &mut PgConnection) -> sqlx::Result<Option<(OrgTypeId, String)>> {
    let row = sqlx::query!(
        "SELECT s.org_type_id, t.name FROM core.signup_org_type s JOIN core.org_types t USING (org_type_id)"
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (OrgTypeId(r.org_type_id), r.name)))
}

/// Make `org_type_id` the sign-up type: the singleton row's upsert (its row, then the type's row
/// FOR KEY SHARE through the foreign key).
pub async fn choose_signup_org_type(conn: &mut PgConnection, org_type_id: OrgTypeId) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.signup_org_type (org_type_id) VALUES ($1)
         ON CONFLICT (singleton) DO UPDATE SET org_type_id = excluded.org_type_id, chosen_at = now()",
        org_type_id as OrgTypeId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A new, unverified account; None when the email has an account already (any case), in
/// which case nothing is written. A concurrent sign-up of the same email waits on this one's
/// uncommitted row and then finds it.
pub async fn insert_unverified_account(
    conn: &mut PgConnection,
    email: &str,
    password_hash: &str,
) -> sqlx::Result<Option<AccountId>> {
    let id = sqlx::query_scalar!(
        "INSERT INTO core.accounts (email, password_hash, is_operator) VALUES ($1, $2, false)
         ON CONFLICT ((lower(email))) DO NOTHING RETURNING account_id",
        email,
        password_hash
    )
    .fetch_optional(conn)
    .await?;
    Ok(id.map(AccountId))
}

/// An account as a token's use reads it, under its row's lock.
#[derive(Debug, Clone)]
pub struct LockedAccount {
    pub email: String,
    pub verified: bool,
    /// Disabled or deleted: its links no longer act.
    pub closed: bool,
}

/// The account's row, FOR NO KEY UPDATE (a membership's insert, FOR KEY SHARE through its
/// foreign key, does not wait on it).
pub async fn lock_account(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<Option<LockedAccount>> {
    let row = sqlx::query!(
        r#"SELECT email, email_verified_at IS NOT NULL AS "verified!",
                  (disabled_at IS NOT NULL OR deleted_at IS NOT NULL) AS "closed!"
           FROM core.accounts WHERE account_id = $1 FOR NO KEY UPDATE"#,
        account_id as AccountId
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| LockedAccount { email: r.email, verified: r.verified, closed: r.closed }))
}

/// Whether another account has this email (any case).
pub async fn email_taken_by_another(conn: &mut PgConnection, email: &str, account_id: AccountId) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM core.accounts WHERE lower(email) = lower($1) AND account_id <> $2) AS "taken!""#,
        email,
        account_id as AccountId
    )
    .fetch_one(conn)
    .await
}

/// The account proved it reads its address (kept when it already had).
pub async fn mark_verified(conn: &mut PgConnection, account_id: AccountId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.accounts SET email_verified_at = coalesce(email_verified_at, now()) WHERE account_id = $1",
        account_id as AccountId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The account's address is now `email`, verified by the token that proved it.
pub async fn set_verified_email(conn: &mut PgConnection, account_id: AccountId, email: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.accounts SET email = $2, email_verified_at = now() WHERE account_id = $1",
        account_id as AccountId,
        email
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn set_password(conn: &mut PgConnection, account_id: AccountId, password_hash: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.accounts SET password_hash = $2 WHERE account_id = $1",
        account_id as AccountId,
        password_hash
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// End the account's unused links of `purpose` that no other transaction holds. A link another
/// holds is being used right now (its use marks it, or refuses it as expired); waiting for it
/// here could close a circle with that use, which holds its link and waits for the account's row.
pub async fn retire_unlocked(
    conn: &mut PgConnection,
    account_id: AccountId,
    purpose: TokenPurpose,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        "UPDATE core.account_tokens SET used_at = now()
         WHERE token_id IN (SELECT token_id FROM core.account_tokens
                            WHERE account_id = $1 AND purpose = $2 AND used_at IS NULL
                            ORDER BY token_id FOR UPDATE SKIP LOCKED)
         RETURNING token_id",
        account_id as AccountId,
        purpose.as_str()
    )
    .fetch_all(conn)
    .await
}

/// A link's state as its page shows it, read without a lock (the page never uses it).
#[derive(Debug, Clone)]
pub struct TokenGlance {
    pub purpose: TokenPurpose,
    pub email: String,
    pub used: bool,
    pub expired: bool,
}

pub async fn glance_token(conn: &mut PgConnection, hash: &TokenHash) -> sqlx::Result<Option<TokenGlance>> {
    let row = sqlx::query!(
        r#"SELECT purpose, email, used_at IS NOT NULL AS "used!", expires_at <= now() AS "expired!", token_hash
           FROM core.account_tokens WHERE token_hash = $1"#,
        hash.as_bytes()
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.filter(|r| hash.matches(&r.token_hash)).and_then(|r| {
        let purpose = [TokenPurpose::VerifyEmail, TokenPurpose::ChangeEmail, TokenPurpose::ResetPassword]
            .into_iter()
            .find(|p| p.as_str() == r.purpose)?;
        Some(TokenGlance { purpose, email: r.email, used: r.used, expired: r.expired })
    }))
}
