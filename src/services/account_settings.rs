//! The account page's acts, each by the signed-in person on their own account: change the
//! password, ask to change the email, see and end sessions, delete the account. Every password
//! is checked (and a new one hashed) before any transaction opens, so no lock waits on argon2;
//! the transaction then checks, under the account row's lock, that the hash it checked against
//! is still the account's.

use std::time::Duration;

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace::{self, Key2},
        tx::{within, within_for},
    },
    ids::{AccountId, OrganizationId},
    services::{
        ServiceError,
        auth::{Email, NewPassword, Password, hash_password, verify_password},
        letters::{Action, compose},
        mail::{LINK, send_later, send_with_link},
        tokens::{SecretLink, Seed, TokenKey},
    },
    store::{
        account_admin::{self as store, LockedAccount, SessionRow},
        account_events::{self, AccountEventKind},
        account_tokens::{self, TokenPurpose},
        accounts,
    },
};

/// How long a new address's confirmation link works.
pub const CHANGE_EMAIL_VALID: Duration = Duration::from_secs(24 * 3600);

/// Where the account's mail goes out from: the host its Message-IDs name and the console's
/// public address its links start with. None: mail is off on this console.
#[derive(Debug, Clone)]
pub struct Mailing {
    pub host: String,
    pub base: String,
}

const WRONG_PASSWORD: &str = "That is not your current password.";
const CHANGED_MEANWHILE: &str =
    "Your account changed while this was being done (another tab or device?), so nothing was changed. Try again.";

pub static CHANGE_PASSWORD_LOCKS: PathLocks = PathLocks {
    path: "Change a password",
    function: "services::account_settings::change_password",
    kind: "Plain",
    locks: &[Lock::AccountRow],
    why: "The current password is verified and the new one hashed before the transaction; under the \
          account row (FOR NO KEY UPDATE) the hash verified against must still be the account's, so two \
          changes at once cannot both pass on the old password. Then the other sessions are deleted \
          and the event and the notice are inserted: plain writes after the lock.",
};

/// The account's row as it is now, for a password check outside any transaction: None when the
/// account is gone (deleted).
async fn current(db: &Db, id: AccountId) -> Result<LockedAccount, ServiceError> {
    let mut conn = db.read().await?;
    store::account(conn.conn(), id)
        .await?
        .filter(|a| !a.deleted && !a.disabled)
        .ok_or(ServiceError::NotFound("account"))
}

/// The account row under its lock, refused when it is not as the password check saw it.
async fn lock_as_checked(tx: &mut Tx, checked: &LockedAccount) -> Result<LockedAccount, ServiceError> {
    let id = checked.account_id;
    let a = store::lock_account(tx.conn(), id).await?;
    trace::note(tx.conn(), Lock::AccountRow, id.0, Some(id.0)).await?;
    match a {
        Some(a) if a.deleted || a.disabled => Err(ServiceError::NotFound("account")),
        Some(a) if a.password_hash == checked.password_hash && a.is_operator == checked.is_operator => Ok(a),
        Some(_) => Err(ServiceError::Refused(CHANGED_MEANWHILE.into())),
        None => Err(ServiceError::NotFound("account")),
    }
}

/// Change the account's password: the current one required. Every other session of the account
/// ends (this one, `session`, stays); a notice is mailed when mail is on.
#[tracing::instrument(name = "Change a password", skip_all, fields(account_id = %id))]
pub async fn change_password(
    db: &Db,
    id: AccountId,
    session: &str,
    current_password: &Password,
    new_password: &NewPassword,
    mailing: Option<&Mailing>,
) -> Result<u64, ServiceError> {
    let checked = current(db, id).await?;
    if !verify_password(Some(checked.password_hash.clone()), current_password.as_str().to_string()).await {
        return Err(ServiceError::invalid("current_password", WRONG_PASSWORD));
    }
    let hash = hash_password(new_password.as_str().to_string()).await;
    within_for(db, TxKind::Plain, &CHANGE_PASSWORD_LOCKS, async |tx: &mut Tx| {
        let a = lock_as_checked(tx, &checked).await?;
        store::set_password(tx.conn(), id, &hash).await?;
        let ended = store::delete_other_sessions(tx.conn(), id, session).await?;
        account_events::record(tx.conn(), id, Some(id), AccountEventKind::PasswordChanged, None, "").await?;
        if let Some(m) = mailing {
            let mail = compose(
                &m.host,
                &a.email,
                "Your password was changed",
                &[
                    "The password of your Member Console account was just changed, and every other session of the \
                     account was signed out.",
                    "If you did not change it, reset your password from the sign-in page at once, and tell your \
                     console's operator.",
                ],
                None,
            );
            send_later(tx.conn(), mail).await?;
        }
        Ok::<_, ServiceError>(ended)
    })
    .await
}

pub static REQUEST_EMAIL_CHANGE_LOCKS: PathLocks = PathLocks {
    path: "Ask to change an email",
    function: "services::account_settings::request_email_change",
    kind: "Plain",
    locks: &[Lock::AccountRow],
    why: "Under the account row (FOR NO KEY UPDATE), after the password was verified outside the \
          transaction: the earlier unused change links are retired (a plain update of the account's own \
          token rows, which no other path locks before the account row), the new token, the event and the \
          mail job are inserted.",
};

/// Ask to change the account's email to `new_email`: a link (24 h) is mailed to the new address,
/// and the change is made when it is opened (`/account/verify`). When another account has that
/// address, the new address gets a notice instead and the page answers exactly the same, so the
/// page never tells who has an account. Needs mail; refused in words when it is off.
#[tracing::instrument(name = "Ask to change an email", skip_all, fields(account_id = %id))]
pub async fn request_email_change(
    db: &Db,
    keys: &TokenKey,
    id: AccountId,
    new_email: &Email,
    password: &Password,
    mailing: Option<&Mailing>,
    address: &str,
) -> Result<(), ServiceError> {
    let Some(m) = mailing else {
        return Err(ServiceError::Refused(
            "Mail is off on this console, so a new address cannot be confirmed; nothing was changed. Ask the \
             console's operator to change your email."
                .into(),
        ));
    };
    let checked = current(db, id).await?;
    if checked.email.eq_ignore_ascii_case(new_email.as_str()) {
        return Err(ServiceError::invalid("email", "That is your address already."));
    }
    if !verify_password(Some(checked.password_hash.clone()), password.as_str().to_string()).await {
        return Err(ServiceError::invalid("password", WRONG_PASSWORD));
    }
    // Counted before the act; over the limit, the act is answered as it would be, unmailed.
    let send = crate::services::mail_limits::reserve_send(db, address, new_email.as_str()).await?;
    within_for(db, TxKind::Plain, &REQUEST_EMAIL_CHANGE_LOCKS, async |tx: &mut Tx| {
        lock_as_checked(tx, &checked).await?;
        let taken = accounts::account_by_email(tx.conn(), new_email.as_str()).await?.is_some();
        account_tokens::retire_unused(tx.conn(), id, TokenPurpose::ChangeEmail).await?;
        // A token either way, so the page shows the same pending change; when the address is
        // taken its seed is dropped here and no link to it exists anywhere.
        let seed = Seed::new();
        let hash = keys.token(&seed).hash();
        account_tokens::insert(tx.conn(), id, TokenPurpose::ChangeEmail, new_email.as_str(), &hash, CHANGE_EMAIL_VALID)
            .await?;
        account_events::record(
            tx.conn(),
            id,
            Some(id),
            AccountEventKind::EmailChangeRequested,
            None,
            &format!("to {}", new_email.as_str()),
        )
        .await?;
        if !send {
            return Ok(());
        }
        if taken {
            let mail = compose(
                &m.host,
                new_email.as_str(),
                "Someone asked to use this address",
                &[
                    "Someone asked to move a Member Console account to this address, but an account with this \
                     address exists already, so nothing was changed.",
                    "If it was you, sign in with this address instead. If not, you can ignore this message.",
                ],
                None,
            );
            send_later(tx.conn(), mail).await?;
        } else {
            let mail = compose(
                &m.host,
                new_email.as_str(),
                "Confirm your new address",
                &[
                    "You asked to use this address for your Member Console account. Confirm it within 24 hours \
                     with the link below; until then your account keeps its old address.",
                    "If you did not ask for this, ignore this message: nothing changes.",
                ],
                Some(Action { label: "Confirm your new address", url: LINK }),
            );
            let prefix = format!("{}/account/verify?token=", m.base);
            send_with_link(tx.conn(), mail, SecretLink { prefix, seed }).await?;
        }
        Ok(())
    })
    .await
}

/// What the account page shows of the account: its sessions and its pending email change.
pub struct AccountOverview {
    pub email: String,
    pub sessions: Vec<SessionRow>,
    pub pending_email: Option<(String, chrono::DateTime<chrono::Utc>)>,
}

#[tracing::instrument(name = "Read the account page", skip_all, fields(account_id = %id))]
pub async fn overview(db: &Db, id: AccountId, session: Option<&str>) -> Result<AccountOverview, ServiceError> {
    let mut c = db.read().await?;
    let a = store::account(c.conn(), id).await?.ok_or(ServiceError::NotFound("account"))?;
    Ok(AccountOverview {
        email: a.email,
        sessions: store::sessions_of(c.conn(), id, session).await?,
        pending_email: store::pending_email_change(c.conn(), id).await?,
    })
}

/// End one of the account's sessions, by its handle on the page (its row's hash as hex): whether
/// it was still there. A delete of the account's own row; no lock is taken first.
#[tracing::instrument(name = "End a session", skip_all, fields(account_id = %id))]
pub async fn end_session(db: &Db, id: AccountId, handle: &SessionHandle) -> Result<bool, DbError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let ended = store::end_session(tx.conn(), id, &handle.0).await?;
        if ended {
            account_events::record(tx.conn(), id, Some(id), AccountEventKind::SessionsEnded, None, "one session")
                .await?;
        }
        Ok(ended)
    })
    .await
}

/// "Sign out everywhere": every session of the account ends, the asking one included.
#[tracing::instrument(name = "Sign out everywhere", skip_all, fields(account_id = %id))]
pub async fn sign_out_everywhere(db: &Db, id: AccountId) -> Result<u64, DbError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let ended = accounts::delete_sessions_of(tx.conn(), id).await?;
        account_events::record(tx.conn(), id, Some(id), AccountEventKind::SessionsEnded, None, "every session").await?;
        Ok(ended)
    })
    .await
}

/// A session's handle as the page writes it: 64 hex digits (a row's hash).
#[derive(Debug, Clone)]
pub struct SessionHandle(Vec<u8>);

impl SessionHandle {
    pub fn parse(s: &str) -> Result<SessionHandle, String> {
        let s = s.trim();
        let ok = s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        let bytes = ok.then(|| (0..32).filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()).collect());
        match bytes {
            Some(b) => Ok(SessionHandle(b)),
            None => Err("Choose a session from the page.".into()),
        }
    }
}

pub static DELETE_ACCOUNT_LOCKS: PathLocks = PathLocks {
    path: "Delete an account",
    function: "services::account_settings::delete_account",
    kind: "Plain",
    locks: &[Lock::AccountRow, Lock::OrganizationRow, Lock::MembershipRows],
    why: "The account row FOR NO KEY UPDATE (an operator's: with every operator's row, ascending, as \
          \"Change who is an operator\" takes them, so the last operator cannot delete themselves while \
          another demotes them); then the rows of the organizations it owns, ascending, FOR NO KEY UPDATE \
          (the members part's lock), under which the other owners not disabled are counted; then its \
          membership rows are deleted. Its sessions, its tokens' retirement, its anonymisation and the \
          event are plain writes after.",
};

/// What deleting an account refused, in words: the organizations it is the last owner of.
fn last_owner_words(orgs: &[(OrganizationId, String)]) -> String {
    let names: Vec<String> = orgs.iter().map(|(_, n)| format!("“{n}”")).collect();
    let (them, it) = if orgs.len() == 1 { ("organization", "it") } else { ("organizations", "each") };
    format!(
        "Your account was not deleted: you are the last owner of the {them} {}. First make another member an owner \
         of {it} (from its members page), or ask the console's operator to; then delete your account.",
        names.join(", ")
    )
}

/// Delete the account (its password confirms): refused while it is the last owner of any
/// organization, naming them. Deletion anonymises the row (it stays, so the history that names
/// it keeps its meaning), deletes its memberships and sessions and retires its tokens. The last
/// operator cannot delete themselves.
#[tracing::instrument(name = "Delete an account", skip_all, fields(account_id = %id))]
pub async fn delete_account(db: &Db, id: AccountId, password: &Password) -> Result<(), ServiceError> {
    let checked = current(db, id).await?;
    if !verify_password(Some(checked.password_hash.clone()), password.as_str().to_string()).await {
        return Err(ServiceError::invalid("password", WRONG_PASSWORD));
    }
    within_for(db, TxKind::Plain, &DELETE_ACCOUNT_LOCKS, async |tx: &mut Tx| {
        if checked.is_operator {
            let locked = store::lock_operators_and(tx.conn(), id).await?;
            trace::note_rows(
                tx.conn(),
                Lock::AccountRow,
                locked.iter().map(|a| (a.account_id.0, Some(a.account_id.0))),
            )
            .await?;
            let me = locked.iter().find(|a| a.account_id == id);
            match me {
                Some(a) if a.password_hash == checked.password_hash && a.is_operator && !a.deleted => {}
                _ => return Err(ServiceError::Refused(CHANGED_MEANWHILE.into())),
            }
            if !locked.iter().any(|a| a.account_id != id && a.is_operator && !a.disabled && !a.deleted) {
                return Err(ServiceError::Refused(
                    "Your account was not deleted: you are the console's last operator. Make another account an \
                     operator first (Operator › Accounts), then delete yours."
                        .into(),
                ));
            }
        } else {
            lock_as_checked(tx, &checked).await?;
        }
        let owned = store::lock_owned_organizations(tx.conn(), id).await?;
        trace::note_rows(tx.conn(), Lock::OrganizationRow, owned.iter().map(|o| (o.0, Some(o.0)))).await?;
        let sole = store::sole_owned(tx.conn(), id, &owned).await?;
        if !sole.is_empty() {
            return Err(ServiceError::Refused(last_owner_words(&sole)));
        }
        let left = store::delete_memberships(tx.conn(), id).await?;
        trace::note_rows(tx.conn(), Lock::MembershipRows, left.iter().map(|o| (Key2(o.0, id.0), None))).await?;
        accounts::delete_sessions_of(tx.conn(), id).await?;
        store::retire_all_tokens(tx.conn(), id).await?;
        store::anonymise(tx.conn(), id).await?;
        account_events::record(tx.conn(), id, Some(id), AccountEventKind::Deleted, None, "").await?;
        Ok(())
    })
    .await
}
