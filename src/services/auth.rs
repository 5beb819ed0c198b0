//! Sign-in, sessions and accounts.

use std::time::Duration;

use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};
use chrono::Utc;

use crate::{
    db::{
        Db, DbError, TxKind, begin,
        locks::{Lock, PathLocks},
    },
    store::accounts::{self, SessionAccount},
};

/// How long failures count against an account or an address.
pub const THROTTLE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failures on one account within the window before sign-in is refused for it.
pub const MAX_ACCOUNT_FAILURES: i64 = 5;
/// Failures from one address within the window before sign-in is refused from it.
pub const MAX_ADDRESS_FAILURES: i64 = 30;
/// A session ends after this long without a request.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);

pub static SIGN_IN_LOCKS: PathLocks = PathLocks {
    path: "Sign in",
    function: "services::auth::sign_in",
    kind: "Plain",
    locks: &[Lock::AccountRow],
    why: "Attempts on one account run one at a time, so each reads the failures the one before it \
          recorded and the throttle cannot be outrun by parallel guesses.",
};

/// An email address, parsed once at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    pub fn parse(s: &str) -> Result<Email, String> {
        let s = s.trim();
        let ok = s.len() <= 254
            && s.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty() && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
            })
            && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        if ok { Ok(Email(s.to_string())) } else { Err(format!("“{s}” is not an email address")) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A new password, parsed once: long enough to be worth hashing.
#[derive(Debug, Clone)]
pub struct NewPassword(String);

impl NewPassword {
    pub const MIN_LEN: usize = 8;

    pub fn parse(s: &str) -> Result<NewPassword, String> {
        if s.chars().count() < Self::MIN_LEN {
            return Err(format!("A password needs at least {} characters", Self::MIN_LEN));
        }
        if s.len() > 1024 {
            return Err("A password may have at most 1024 bytes".into());
        }
        Ok(NewPassword(s.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the email or the password is not right")]
    InvalidCredentials,
    #[error("too many failed sign-ins")]
    Throttled { retry_after: Duration },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for AuthError {
    fn from(e: sqlx::Error) -> Self {
        AuthError::Db(e.into())
    }
}

/// A new session: the token the cookie carries, and who it is.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub token: String,
    pub account: SessionAccount,
}

/// Sign in: check the throttle, verify the password, record a failure or start a session.
#[tracing::instrument(name = "Sign in", skip(db, password), fields(email = %email.as_str(), address = %address))]
pub async fn sign_in(db: &Db, email: &Email, password: &str, address: &str) -> Result<NewSession, AuthError> {
    let mut tx = begin(db, TxKind::Plain).await?;
    let account = accounts::lock_account_by_email(tx.conn(), email.as_str()).await?;
    let since = Utc::now() - chrono::Duration::from_std(THROTTLE_WINDOW).unwrap_or_default();
    let (by_account, by_address) = accounts::count_recent_failures(tx.conn(), email.as_str(), address, since).await?;
    if by_account >= MAX_ACCOUNT_FAILURES || by_address >= MAX_ADDRESS_FAILURES {
        tx.rollback().await?;
        return Err(AuthError::Throttled { retry_after: THROTTLE_WINDOW });
    }
    // An unknown email still costs one verification, so timing does not reveal which exist.
    let hash = account.as_ref().map(|a| a.password_hash.clone());
    let ok = verify_password(hash, password.to_string()).await;
    match account {
        Some(a) if ok => {
            accounts::clear_failures(tx.conn(), email.as_str()).await?;
            let token = crate::config::random_hex(32);
            let expires = Utc::now() + chrono::Duration::from_std(SESSION_IDLE).unwrap_or_default();
            accounts::insert_session(tx.conn(), &token, a.account_id, expires, address).await?;
            tx.commit().await?;
            Ok(NewSession {
                token,
                account: SessionAccount { account_id: a.account_id, email: a.email, is_operator: a.is_operator },
            })
        }
        _ => {
            accounts::record_failure(tx.conn(), email.as_str(), address).await?;
            tx.commit().await?;
            Err(AuthError::InvalidCredentials)
        }
    }
}

/// The account behind a session token, if the session is live; slides its expiry.
pub async fn resume_session(db: &Db, token: &str) -> Result<Option<SessionAccount>, DbError> {
    let mut conn = db.pool.acquire().await?;
    let idle = chrono::Duration::from_std(SESSION_IDLE).unwrap_or_default();
    Ok(accounts::touch_session(&mut conn, token, idle).await?)
}

#[tracing::instrument(name = "Sign out", skip_all)]
pub async fn sign_out(db: &Db, token: &str) -> Result<(), DbError> {
    let mut conn = db.pool.acquire().await?;
    Ok(accounts::delete_session(&mut conn, token).await?)
}

/// Create the account, or set its password and role when it exists.
#[tracing::instrument(name = "Ensure an account", skip(db, password), fields(email = %email.as_str()))]
pub async fn ensure_account(db: &Db, email: &Email, password: &NewPassword, is_operator: bool) -> Result<i64, DbError> {
    let hash = hash_password(password.0.clone()).await;
    let mut tx = begin(db, TxKind::Plain).await?;
    let id = accounts::upsert_account(tx.conn(), email.as_str(), &hash, is_operator).await?;
    tx.commit().await?;
    Ok(id)
}

/// An argon2id hash with the crate's recommended parameters, computed off the async threads.
pub async fn hash_password(password: String) -> String {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .expect("argon2 hashes any password with default parameters")
    })
    .await
    .expect("the hashing task does not panic")
}

/// Verify against a stored hash; with none, verify against a fixed one and answer false.
async fn verify_password(hash: Option<String>, password: String) -> bool {
    tokio::task::spawn_blocking(move || {
        let (stored, real) = match hash {
            Some(h) => (h, true),
            None => (dummy_hash().to_string(), false),
        };
        let ok = PasswordHash::new(&stored)
            .map(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
            .unwrap_or(false);
        ok && real
    })
    .await
    .unwrap_or(false)
}

/// The argon2id hash of a random password nobody knows, made once, with default parameters.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(crate::config::random_hex(16).as_bytes(), &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_parse_or_refuse() {
        assert!(Email::parse(" member@example.com ").is_ok());
        for bad in ["", "nobody", "a@b", "a @b.com", "@b.com", "a@.com", "a@b.com."] {
            assert!(Email::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn short_passwords_are_refused() {
        assert!(NewPassword::parse("short").is_err());
        assert!(NewPassword::parse("demo-member").is_ok());
    }

    #[tokio::test]
    async fn a_hash_verifies_only_its_password() {
        let h = hash_password("correct horse".into()).await;
        assert!(verify_password(Some(h.clone()), "correct horse".into()).await);
        assert!(!verify_password(Some(h), "wrong".into()).await);
        assert!(!verify_password(None, "anything".into()).await);
    }
}
