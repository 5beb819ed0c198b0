//! Sign-in, sessions and accounts.

use std::time::Duration;

use crate::{
    db::{
        Db, DbError, Tx, TxKind, begin,
        locks::{Lock, PathLocks},
        tx::within,
    },
    ids::AccountId,
    store::accounts::{self, SessionAccount},
};
use argon2::{
    Argon2, PasswordHash, PasswordHasher, PasswordVerifier,
    password_hash::{SaltString, rand_core::OsRng},
};

/// The sign-in limits (docs/operations.md, "Sign-in limits"). Per (email, address): this many
/// failures in a row are free; after that each attempt waits, from `THROTTLE_FIRST_DELAY`
/// doubling per failure up to `THROTTLE_CAP`; a success clears it, and a day without failures
/// forgets it. Keyed by the address too, so failures from one place never hold an account
/// against the person signing in from another.
pub const THROTTLE_FREE_FAILURES: i32 = 5;
pub const THROTTLE_FIRST_DELAY: Duration = Duration::from_secs(60);
pub const THROTTLE_CAP: Duration = Duration::from_secs(15 * 60);
pub const THROTTLE_FORGET: Duration = Duration::from_secs(24 * 3600);
/// Per address, against any account: at most this many failures in a window (spraying).
pub const ADDRESS_WINDOW: Duration = Duration::from_secs(15 * 60);
pub const MAX_ADDRESS_FAILURES: i32 = 30;
/// A session ends after this long without a request...
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// ...and this long after sign-in, however active.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// A session's last-seen time is written at most this often, so page views do not write.
pub const SESSION_TOUCH_EVERY: Duration = Duration::from_secs(60);

pub static SIGN_IN_LOCKS: PathLocks = PathLocks {
    path: "Sign in",
    function: "services::auth::sign_in",
    kind: "Plain",
    locks: &[Lock::SignInAddressRow, Lock::SignInThrottleRow],
    why: "The attempt is counted before its password is verified (core.reserve_sign_in), under the \
          address's row and then the (email, address) row, so parallel guesses each see the ones \
          before them and cannot outrun the limits. The verification itself runs outside any \
          transaction.",
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

/// A password as a sign-in sends it: any text, but not none, and not more than a password can
/// be (a new one's rules are `NewPassword`'s).
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn parse(s: &str) -> Result<Password, String> {
        if s.is_empty() || s.chars().count() > 1024 {
            return Err("Enter your password.".into());
        }
        Ok(Password(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Never printed: a password is not for the logs.
impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// A new password, parsed once: long enough to be worth hashing.
#[derive(Clone)]
pub struct NewPassword(String);

/// Never printed, as `Password`.
impl std::fmt::Debug for NewPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NewPassword(..)")
    }
}

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

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the email or the password is not right")]
    InvalidCredentials,
    #[error("too many failed sign-ins")]
    Throttled { retry_after: Duration },
    /// The password is right, but an operator disabled the account.
    #[error("this account is disabled")]
    Disabled,
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

/// Sign in: reserve the attempt under the limits (one short transaction, committed), verify
/// the password holding no connection, then on success clear the reservation and start a
/// session, ending the session the browser had before (`previous`).
#[tracing::instrument(name = "Sign in", skip_all, fields(email = %email.as_str(), address = %address))]
pub async fn sign_in(
    db: &Db,
    email: &Email,
    password: &str,
    address: &str,
    previous: Option<&str>,
) -> Result<NewSession, AuthError> {
    let limits = accounts::ThrottleLimits {
        address_window: ADDRESS_WINDOW,
        address_max: MAX_ADDRESS_FAILURES,
        free: THROTTLE_FREE_FAILURES,
        first_delay: THROTTLE_FIRST_DELAY,
        cap: THROTTLE_CAP,
        forget: THROTTLE_FORGET,
    };
    let account = crate::db::tx::within_for(db, TxKind::Plain, &SIGN_IN_LOCKS, async |tx: &mut Tx| {
        let reserved = accounts::reserve_sign_in(tx.conn(), email.as_str(), address, &limits).await?;
        if let Err(retry_after) = reserved {
            return Err(AuthError::Throttled { retry_after });
        }
        Ok(accounts::account_by_email(tx.conn(), email.as_str()).await?)
    })
    .await?;

    // An unknown email still costs one verification, so timing does not reveal which exist.
    let ok = verify_password(account.as_ref().map(|a| a.password_hash.clone()), password.to_string()).await;
    let Some(a) = account.filter(|_| ok) else { return Err(AuthError::InvalidCredentials) };
    // Said only to whoever knows the password: a stranger learns nothing of the account.
    if a.disabled {
        return Err(AuthError::Disabled);
    }

    let token = within(db, TxKind::Plain, async |tx: &mut Tx| {
        accounts::clear_sign_in(tx.conn(), email.as_str(), address).await?;
        Ok::<_, AuthError>(start_session(tx.conn(), a.account_id, address, previous).await?)
    })
    .await?;
    Ok(NewSession {
        token,
        account: SessionAccount {
            account_id: a.account_id,
            email: a.email,
            is_operator: a.is_operator,
            verified: a.verified,
        },
    })
}

/// A new session for `account_id` on the caller's transaction, ending the one the browser had
/// (`previous`): sign-in, and the acts that sign a person in (a password reset, an invitation
/// accepted with a new password). The token the cookie carries.
pub async fn start_session(
    conn: &mut sqlx::PgConnection,
    account_id: AccountId,
    address: &str,
    previous: Option<&str>,
) -> sqlx::Result<String> {
    let token = crate::config::random_hex(32);
    if let Some(previous) = previous {
        accounts::delete_session(conn, previous).await?;
    }
    accounts::insert_session(conn, &token, account_id, address, SESSION_IDLE, SESSION_LIFETIME).await?;
    Ok(token)
}

/// The account behind a session token if the session is live (idle and absolute bounds); its
/// last-seen time moves at most once a `SESSION_TOUCH_EVERY`. One prepared statement (two when
/// the touch is due), bounded by the request's deadline.
#[tracing::instrument(name = "Resume a session", skip_all)]
pub async fn resume_session(db: &Db, token: &str) -> Result<Option<SessionAccount>, DbError> {
    let resumed =
        resume_with(db, token, async |c| accounts::resume_session(c, token, SESSION_TOUCH_EVERY).await).await?;
    Ok(resumed.map(|(account, ())| account))
}

/// `resume_session`, and the member's home read in the same statement: the home page's one
/// round trip. None, and nothing read, for a session that has ended.
#[tracing::instrument(name = "Resume a session with the member's home", skip_all)]
pub async fn resume_session_with_home(
    db: &Db,
    token: &str,
) -> Result<Option<(SessionAccount, Vec<accounts::MemberHome>)>, DbError> {
    resume_with(db, token, async |c| accounts::resume_session_with_home(c, token, SESSION_TOUCH_EVERY).await).await
}

/// `resume_session`, and the member's billing page read in the same statement (as the home's).
#[tracing::instrument(name = "Resume a session with the member's billing", skip_all)]
pub async fn resume_session_with_billing(
    db: &Db,
    token: &str,
    on_sale: &crate::store::billing_reads::OnSaleMemo,
) -> Result<Option<(SessionAccount, crate::store::billing_reads::MemberBillingDoc)>, DbError> {
    resume_with(db, token, async |c| {
        crate::store::billing_reads::resume_session_with_billing(c, token, SESSION_TOUCH_EVERY, on_sale).await
    })
    .await
}

/// `resume_session`, and the member's sites page read in the same statement (as the home's).
#[tracing::instrument(name = "Resume a session with the member's sites", skip_all)]
pub async fn resume_session_with_sites(
    db: &Db,
    token: &str,
) -> Result<Option<(SessionAccount, crate::store::site_pages::SitesDoc)>, DbError> {
    resume_with(db, token, async |c| {
        crate::store::site_pages::resume_session_with_sites(
            c,
            token,
            SESSION_TOUCH_EVERY,
            crate::services::fedwiki::reads::REQUESTS_SHOWN,
        )
        .await
    })
    .await
}

/// What the resumes share: a token that cannot be one resumes nothing (no round trip); else
/// `read` resumes it on a connection of the prepared pool, bounded by the request's deadline,
/// and when its last-seen time is due the touch follows on the same connection. The page's
/// statement only reads (a plpgsql function that may write cannot be inlined, and cost a
/// fifth of the page); both are safe to run again (`on_prepared`): a read, and a touch that
/// changes nothing the second time.
async fn resume_with<T>(
    db: &Db,
    token: &str,
    read: impl AsyncFn(&mut sqlx::PgConnection) -> sqlx::Result<Option<accounts::Resumed<T>>>,
) -> Result<Option<(SessionAccount, T)>, DbError> {
    if !accounts::is_session_token(token) {
        return Ok(None);
    }
    crate::db::tx::on_prepared(db, async |c| {
        let Some(r) = read(c).await? else { return Ok(None) };
        if r.touch_due {
            accounts::touch_session(c, token, SESSION_IDLE, SESSION_TOUCH_EVERY).await?;
        }
        Ok(Some((r.account, r.page)))
    })
    .await
}

#[tracing::instrument(name = "Sign out", skip_all)]
pub async fn sign_out(db: &Db, token: &str) -> Result<(), DbError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| Ok(accounts::delete_session(tx.conn(), token).await?)).await
}

/// Create the account, or set its password and role when it exists. A changed password (or
/// role) ends every session of the account; setting the password it already has changes
/// nothing, so loading the demo again signs nobody out.
#[tracing::instrument(name = "Ensure an account", skip(db, password), fields(email = %email.as_str()))]
pub async fn ensure_account(
    db: &Db,
    email: &Email,
    password: &NewPassword,
    is_operator: bool,
) -> Result<AccountId, DbError> {
    let existing = {
        let mut tx = begin(db, TxKind::Plain).await?;
        accounts::account_by_email(tx.conn(), email.as_str()).await?
    };
    if let Some(a) = &existing
        && a.is_operator == is_operator
        && verify_password(Some(a.password_hash.clone()), password.0.clone()).await
    {
        return Ok(a.account_id);
    }
    let hash = hash_password(password.0.clone()).await;
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let id = accounts::upsert_account(tx.conn(), email.as_str(), &hash, is_operator).await?;
        accounts::delete_sessions_of(tx.conn(), id).await?;
        Ok(id)
    })
    .await
}

/// At most as many password hashes are computed at once as there are cores: a burst of
/// sign-ins queues here (holding no connection) instead of starving the pages.
fn hashing_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    PERMITS.get_or_init(|| tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

async fn hashing<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let _permit = hashing_permits().acquire().await.expect("the semaphore is never closed");
    tokio::task::spawn_blocking(work).await.expect("the hashing task does not panic")
}

/// An argon2id hash with the crate's recommended parameters, computed off the async threads.
pub async fn hash_password(password: String) -> String {
    hashing(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .expect("argon2 hashes any password with default parameters")
    })
    .await
}

/// Verify against a stored hash; with none, verify against a fixed one and answer false.
pub async fn verify_password(hash: Option<String>, password: String) -> bool {
    hashing(move || {
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
