//! Mailed links' tokens (`core.account_tokens`): made with the act that mails them, used once
//! under their row's lock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{ids::AccountId, services::tokens::TokenHash};

/// What a token is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenPurpose {
    /// Prove the account's address (at sign-up, or "send the link again").
    VerifyEmail,
    /// Prove a new address; using it makes it the account's.
    ChangeEmail,
    /// Set a new password.
    ResetPassword,
}

impl TokenPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenPurpose::VerifyEmail => "verify_email",
            TokenPurpose::ChangeEmail => "change_email",
            TokenPurpose::ResetPassword => "reset_password",
        }
    }

    fn parse(s: &str) -> Option<TokenPurpose> {
        [TokenPurpose::VerifyEmail, TokenPurpose::ChangeEmail, TokenPurpose::ResetPassword]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// A token's row, read under its lock.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub token_id: i64,
    pub account_id: AccountId,
    pub purpose: TokenPurpose,
    pub email: String,
    pub token_hash: Vec<u8>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    /// Whether it expired, by the database's clock.
    pub expired: bool,
}

/// Keep a new token's hash for `account_id`, proving `email`, valid for `valid_for`.
pub async fn insert(
    conn: &mut PgConnection,
    account_id: AccountId,
    purpose: TokenPurpose,
    email: &str,
    hash: &TokenHash,
    valid_for: Duration,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO core.account_tokens (account_id, purpose, email, token_hash, expires_at)
         VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond') RETURNING token_id",
        account_id as AccountId,
        purpose.as_str(),
        email,
        hash.as_bytes(),
        super::millis(valid_for)
    )
    .fetch_one(conn)
    .await
}

/// The token with this hash, locked FOR UPDATE (its single use), whatever its state: the
/// caller says why one that is used or expired is refused.
pub async fn lock_by_hash(conn: &mut PgConnection, hash: &TokenHash) -> sqlx::Result<Option<TokenRow>> {
    let row = sqlx::query!(
        r#"SELECT token_id, account_id, purpose, email, token_hash, expires_at, used_at,
                  expires_at <= now() AS "expired!"
           FROM core.account_tokens WHERE token_hash = $1 FOR UPDATE"#,
        hash.as_bytes()
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(|r| {
        Some(TokenRow {
            token_id: r.token_id,
            account_id: AccountId(r.account_id),
            purpose: TokenPurpose::parse(&r.purpose)?,
            email: r.email,
            token_hash: r.token_hash,
            expires_at: r.expires_at,
            used_at: r.used_at,
            expired: r.expired,
        })
    }))
}

pub async fn mark_used(conn: &mut PgConnection, token_id: i64) -> sqlx::Result<()> {
    sqlx::query!("UPDATE core.account_tokens SET used_at = now() WHERE token_id = $1", token_id).execute(conn).await?;
    Ok(())
}

/// End the account's unused tokens of `purpose` (a newer one replaces them, or the act they
/// were for is done): they can no longer be used.
pub async fn retire_unused(conn: &mut PgConnection, account_id: AccountId, purpose: TokenPurpose) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "UPDATE core.account_tokens SET used_at = now()
         WHERE account_id = $1 AND purpose = $2 AND used_at IS NULL",
        account_id as AccountId,
        purpose.as_str()
    )
    .execute(conn)
    .await?
    .rows_affected())
}
