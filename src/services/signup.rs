//! Sign-up, email verification and password reset (issue 38; docs/accounts.md, "Sign-up,
//! verification and password reset"). A sign-up never signs anyone in, and answers the same
//! whether or not its email has an account; the mailed links carry no session, are used once
//! under their row's lock (a GET only shows them), and expire.

use std::time::Duration;

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace,
        tx::within_for,
    },
    ids::{AccountId, OrgTypeId, OrganizationId},
    services::{
        ServiceError,
        auth::{self, Email, NewPassword},
        letters::{Action, compose},
        mail::{LINK, send_later, send_with_link},
        mail_limits::reserve_send,
        organizations::{OrgName, create_organization_tx},
        tokens::{SecretLink, Seed, Token, TokenKey},
    },
    store::{
        account_events::{self, AccountEventKind},
        account_tokens::{self, TokenPurpose},
        accounts::{self, SessionAccount},
        signup as store,
    },
};

/// How long a verification link works.
pub const VERIFY_VALID: Duration = Duration::from_secs(24 * 3600);
/// How long a password reset link works.
pub const RESET_VALID: Duration = Duration::from_secs(3600);

/// Where the mail's links point, made by the web layer from the console's public address.
#[derive(Debug, Clone)]
pub struct Links {
    /// The key the links' tokens are derived under.
    pub key: TokenKey,
    /// The console's public host, for the messages' Message-IDs.
    pub host: String,
    /// The verification page's address up to its token (`…/account/verify?token=`).
    pub verify: String,
    /// The reset page's address up to its token (`…/password/reset?token=`).
    pub reset: String,
    /// The sign-in page.
    pub sign_in: String,
    /// The forgot-password page.
    pub forgot: String,
}

// Choose the sign-up type --------------------------------------------------------------------------

pub static CHOOSE_SIGNUP_TYPE_LOCKS: PathLocks = PathLocks {
    path: "Choose the sign-up type",
    function: "services::signup::choose_signup_type",
    kind: "Plain",
    locks: &[Lock::SignupTypeRow, Lock::OrgTypeRowKeyShare],
    why: "One upsert of the singleton row: the row first (its conflict), then the chosen type's row \
          FOR KEY SHARE through the foreign key. A sign-up only reads the row, so it never waits on \
          this; two operators choosing at once take the row in turn, and the later choice stands.",
};

/// Make `org_type_id` the type a sign-up's organization gets.
#[tracing::instrument(name = "Choose the sign-up type", skip(db), fields(org_type_id = org_type_id.0))]
pub async fn choose_signup_type(db: &Db, org_type_id: OrgTypeId) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &CHOOSE_SIGNUP_TYPE_LOCKS, async |tx: &mut Tx| {
        store::choose_signup_org_type(tx.conn(), org_type_id).await.map_err(|e| {
            ServiceError::from_constraint(e, |c| {
                (c == "signup_org_type_org_type_id_fkey")
                    .then(|| ("org_type_id", "That organization type does not exist.".to_string()))
            })
        })?;
        trace::note_rows(tx.conn(), Lock::SignupTypeRow, [("true", None)]).await?;
        trace::note(tx.conn(), Lock::OrgTypeRowKeyShare, org_type_id.0, None).await?;
        Ok(())
    })
    .await
}

/// The sign-up type and its name; None: sign-up is not ready.
pub async fn signup_type(db: &Db) -> Result<Option<(OrgTypeId, String)>, DbError> {
    let mut tx = db.read().await?;
    let t = store::signup_org_type(tx.conn()).await?;
    tx.end(Ok(t)).await
}

// Sign up -------------------------------------------------------------------------------------------

/// A sign-up, parsed at the edge.
#[derive(Debug, Clone)]
pub struct SignUp {
    pub email: Email,
    pub password: NewPassword,
    pub organization: OrgName,
}

/// What a sign-up did. The person is told the same in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedUp {
    /// A new account, its organization and its verification mail.
    Created { account_id: AccountId, organization_id: OrganizationId },
    /// The email has an account: it was mailed a notice instead.
    Existing,
    /// Past the mail limits: nothing was written or sent.
    Limited,
}

pub static SIGN_UP_LOCKS: PathLocks = PathLocks {
    path: "Sign up",
    function: "services::signup::sign_up",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::OrgTypeRowKeyShare, Lock::PoolRow],
    why: "Create an organization's path with the account's insert first: the account (a unique \
          email, so a second sign-up of one email waits on the first's uncommitted row and then \
          finds it, and mails a notice), then the organization of the sign-up type (its type's \
          row FOR KEY SHARE through the foreign key), its pool and floor under the shared \
          rendezvous, then the owner membership, the verification token, the mail job and the \
          event, all rows of its own. The send was reserved before, in its own transaction.",
};

/// Sign up: reserve the send, then create the account (unverified), its organization of the
/// sign-up type, the owner membership, a verification link and its mail; or, for an email
/// with an account, mail that account a notice. The password is hashed either way, so the
/// answer takes as long.
#[tracing::instrument(name = "Sign up", skip_all, fields(address = %address))]
pub async fn sign_up(db: &Db, links: &Links, address: &str, s: &SignUp) -> Result<SignedUp, ServiceError> {
    let Some((org_type_id, _)) = signup_type(db).await? else {
        return Err(ServiceError::Refused(
            "Sign-up is not ready yet: the console's operator has not chosen the type of the organizations it makes."
                .into(),
        ));
    };
    let hash = auth::hash_password(s.password.as_str().to_string()).await;
    if !reserve_send(db, address, s.email.as_str()).await? {
        return Ok(SignedUp::Limited);
    }
    let email = s.email.as_str();
    within_for(db, TxKind::Materializing, &SIGN_UP_LOCKS, async |tx: &mut Tx| {
        let Some(account_id) = store::insert_unverified_account(tx.conn(), email, &hash).await? else {
            send_later(tx.conn(), existing_notice(links, email)).await?;
            return Ok(SignedUp::Existing);
        };
        let created = create_organization_tx(tx, &s.organization, Some(org_type_id)).await?;
        accounts::ensure_membership(tx.conn(), created.organization_id, account_id, "owner").await?;
        mail_verification(tx, links, account_id, email, Some(s.organization.as_str())).await?;
        account_events::record(
            tx.conn(),
            account_id,
            Some(account_id),
            AccountEventKind::SignedUp,
            Some(created.organization_id),
            "",
        )
        .await?;
        Ok(SignedUp::Created { account_id, organization_id: created.organization_id })
    })
    .await
}

/// A new verification link for `email` and its mail, on the caller's transaction.
async fn mail_verification(
    tx: &mut Tx,
    links: &Links,
    account_id: AccountId,
    email: &str,
    organization: Option<&str>,
) -> Result<(), ServiceError> {
    let seed = Seed::new();
    let hash = links.key.token(&seed).hash();
    account_tokens::insert(tx.conn(), account_id, TokenPurpose::VerifyEmail, email, &hash, VERIFY_VALID).await?;
    let welcome = organization.map(|o| format!("Welcome to Member Console: your organization {o} is ready."));
    let ask = format!(
        "Open this link within 24 hours to verify that {email} is your address. Until then you can sign in and look around, but not buy a plan, create sites or invite people."
    );
    let mut paragraphs: Vec<&str> = welcome.iter().map(String::as_str).collect();
    paragraphs.push(&ask);
    let mail = compose(
        &links.host,
        email,
        "Verify your email address",
        &paragraphs,
        Some(Action { label: "Verify your email address", url: LINK }),
    );
    send_with_link(tx.conn(), mail, SecretLink { prefix: links.verify.clone(), seed }).await?;
    Ok(())
}

fn existing_notice(links: &Links, email: &str) -> crate::integrations::mail::Outgoing {
    let p1 = format!(
        "Someone tried to sign up for Member Console with this address ({email}), which already has an account. No new account was made."
    );
    let p2 = format!(
        "If it was you, sign in at {}, or set a new password at {} if you forgot it. If it was not you, you need not do anything.",
        links.sign_in, links.forgot
    );
    compose(
        &links.host,
        email,
        "Someone tried to sign up with your address",
        &[&p1, &p2],
        Some(Action { label: "Sign in", url: &links.sign_in }),
    )
}

// Use an email token ----------------------------------------------------------------------------------

/// What a used verification or email-change link did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsedLink {
    /// The account's address is verified.
    Verified { account_id: AccountId },
    /// The account's address is now `email`, verified.
    EmailChanged { account_id: AccountId, email: String },
}

pub static USE_EMAIL_TOKEN_LOCKS: PathLocks = PathLocks {
    path: "Use an email token",
    function: "services::signup::use_email_token",
    kind: "Plain",
    locks: &[Lock::AccountTokenRow, Lock::AccountRow],
    why: "The link's row FOR UPDATE (its single use: a second use waits, then finds it used), then \
          its account's row FOR NO KEY UPDATE, so the address it proves is compared with the \
          account's own while no email change can move it. An email change retires the account's \
          other change links it finds unlocked (SKIP LOCKED: one held is being used, and waiting \
          for it could close a circle), then writes its event and the old address's notice.",
};

/// A link `token` is not (any more): refused in words, nothing written.
fn link_refused(purpose: &str, why: &str) -> ServiceError {
    ServiceError::Refused(format!("This {purpose} link {why}"))
}

/// Use a verification link (purpose verify_email) or an email change's link (change_email).
#[tracing::instrument(name = "Use an email token", skip_all)]
pub async fn use_email_token(db: &Db, links: &Links, token: &Token) -> Result<UsedLink, ServiceError> {
    let hash = token.hash();
    within_for(db, TxKind::Plain, &USE_EMAIL_TOKEN_LOCKS, async |tx: &mut Tx| {
        let row = account_tokens::lock_by_hash(tx.conn(), &hash)
            .await?
            .filter(|r| hash.matches(&r.token_hash) && r.purpose != TokenPurpose::ResetPassword)
            .ok_or(ServiceError::NotFound("verification link"))?;
        trace::note(tx.conn(), Lock::AccountTokenRow, row.token_id, None).await?;
        if row.used_at.is_some() {
            return Err(link_refused("verification", "was used already. Sign in, or ask for a new one."));
        }
        if row.expired {
            return Err(link_refused("verification", "has expired. Sign in and send the link again."));
        }
        let account =
            store::lock_account(tx.conn(), row.account_id).await?.ok_or(ServiceError::NotFound("account"))?;
        trace::note(tx.conn(), Lock::AccountRow, row.account_id.0, None).await?;
        if account.closed {
            return Err(link_refused("verification", "belongs to an account that is disabled or deleted."));
        }
        match row.purpose {
            TokenPurpose::VerifyEmail => {
                if !row.email.eq_ignore_ascii_case(&account.email) {
                    return Err(link_refused(
                        "verification",
                        &format!(
                            "verifies {}, which is no longer the account's address: the address changed since it was sent.",
                            row.email
                        ),
                    ));
                }
                store::mark_verified(tx.conn(), row.account_id).await?;
                account_tokens::mark_used(tx.conn(), row.token_id).await?;
                account_events::record(
                    tx.conn(),
                    row.account_id,
                    Some(row.account_id),
                    AccountEventKind::EmailVerified,
                    None,
                    &row.email,
                )
                .await?;
                Ok(UsedLink::Verified { account_id: row.account_id })
            }
            _ => {
                if store::email_taken_by_another(tx.conn(), &row.email, row.account_id).await? {
                    return Err(link_refused(
                        "email change",
                        &format!("cannot be used: another account has taken {} meanwhile.", row.email),
                    ));
                }
                store::set_verified_email(tx.conn(), row.account_id, &row.email).await?;
                account_tokens::mark_used(tx.conn(), row.token_id).await?;
                store::retire_unlocked(tx.conn(), row.account_id, TokenPurpose::ChangeEmail).await?;
                let p1 = format!(
                    "The email address of your Member Console account changed from {} to {}.",
                    account.email, row.email
                );
                let p2 = format!(
                    "If it was not you, set a new password at {} from the new address, or ask the console's operator for help.",
                    links.forgot
                );
                send_later(tx.conn(), compose(&links.host, &account.email, "Your email address changed", &[&p1, &p2], None))
                    .await?;
                account_events::record(
                    tx.conn(),
                    row.account_id,
                    Some(row.account_id),
                    AccountEventKind::EmailChanged,
                    None,
                    &format!("{} → {}", account.email, row.email),
                )
                .await?;
                Ok(UsedLink::EmailChanged { account_id: row.account_id, email: row.email })
            }
        }
    })
    .await
}

/// A link as its page shows it before it is used: what it is for and whether it still works.
/// Read without a lock; the page's POST decides.
#[derive(Debug, Clone)]
pub struct LinkState {
    pub purpose: TokenPurpose,
    pub email: String,
}

/// The link's state for its page, or the refusal its use would meet now (unknown, used or
/// expired). `purposes`: the purposes the page takes.
pub async fn glance(db: &Db, token: &Token, purposes: &[TokenPurpose]) -> Result<LinkState, ServiceError> {
    let mut tx = db.read().await?;
    let g = store::glance_token(tx.conn(), &token.hash()).await;
    let g = tx.end(g.map_err(ServiceError::from)).await?;
    let what = if purposes.contains(&TokenPurpose::ResetPassword) { "password reset" } else { "verification" };
    let g = g.filter(|g| purposes.contains(&g.purpose)).ok_or(ServiceError::NotFound("link"))?;
    if g.used {
        return Err(link_refused(what, "was used already. Ask for a new one if you need it."));
    }
    if g.expired {
        return Err(link_refused(what, "has expired. Ask for a new one."));
    }
    Ok(LinkState { purpose: g.purpose, email: g.email })
}

// Mail an account link ----------------------------------------------------------------------------------

pub static MAIL_ACCOUNT_LINK_LOCKS: PathLocks = PathLocks {
    path: "Mail an account link",
    function: "services::signup::resend_verification, services::signup::forgot_password",
    kind: "Plain",
    locks: &[Lock::AccountTokenRow],
    why: "A new verification or reset link replaces the account's unused ones of its purpose: \
          they are retired in one statement, in token order, SKIP LOCKED (one a use holds is \
          being used; waiting for it could close a circle with that use, which holds its link \
          and waits for the account's row). Then the new link's row and its mail job. The send \
          was reserved before, in its own transaction.",
};

/// A new link: what it is for, the address it proves, how long it works, and where it points.
struct NewLink<'a> {
    purpose: TokenPurpose,
    email: &'a str,
    valid: Duration,
    prefix: &'a str,
}

/// Replace the account's unused links of the new one's purpose with it, and enqueue `mail`
/// (whose text says `{link}` where it goes), on one transaction.
async fn mail_new_link(
    db: &Db,
    links: &Links,
    account_id: AccountId,
    link: NewLink<'_>,
    mail: crate::integrations::mail::Outgoing,
) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &MAIL_ACCOUNT_LINK_LOCKS, async |tx: &mut Tx| {
        let retired = store::retire_unlocked(tx.conn(), account_id, link.purpose).await?;
        trace::note_rows(tx.conn(), Lock::AccountTokenRow, retired.iter().map(|id| (id, None))).await?;
        let seed = Seed::new();
        let hash = links.key.token(&seed).hash();
        account_tokens::insert(tx.conn(), account_id, link.purpose, link.email, &hash, link.valid).await?;
        send_with_link(tx.conn(), mail.clone(), SecretLink { prefix: link.prefix.to_string(), seed }).await?;
        Ok(())
    })
    .await
}

/// What "send the link again" did. Past the limits it answers as when it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resent {
    Sent,
    AlreadyVerified,
}

/// "Send the link again": a new verification link for the signed-in account's address.
#[tracing::instrument(name = "Send the verification link again", skip_all, fields(account_id = who.account_id.0))]
pub async fn resend_verification(
    db: &Db,
    links: &Links,
    who: &SessionAccount,
    address: &str,
) -> Result<Resent, ServiceError> {
    if who.verified {
        return Ok(Resent::AlreadyVerified);
    }
    if !reserve_send(db, address, &who.email).await? {
        return Ok(Resent::Sent);
    }
    let ask = format!("Open this link within 24 hours to verify that {} is your address.", who.email);
    let mail = compose(
        &links.host,
        &who.email,
        "Verify your email address",
        &[&ask],
        Some(Action { label: "Verify your email address", url: LINK }),
    );
    let link =
        NewLink { purpose: TokenPurpose::VerifyEmail, email: &who.email, valid: VERIFY_VALID, prefix: &links.verify };
    mail_new_link(db, links, who.account_id, link, mail).await?;
    Ok(Resent::Sent)
}

/// Forgot password: for an account with this email that is not disabled, a reset link (1 h)
/// and its mail. The answer is the same whatever the email, and past the limits.
#[tracing::instrument(name = "Forgot a password", skip_all, fields(address = %address))]
pub async fn forgot_password(db: &Db, links: &Links, email: &Email, address: &str) -> Result<(), ServiceError> {
    if !reserve_send(db, address, email.as_str()).await? {
        return Ok(());
    }
    let account = {
        let mut tx = db.read().await?;
        let a = accounts::account_by_email(tx.conn(), email.as_str()).await;
        tx.end(a.map_err(ServiceError::from)).await?
    };
    let Some(a) = account.filter(|a| !a.disabled) else { return Ok(()) };
    let ask = format!(
        "Someone asked to set a new password for the Member Console account {}. Open this link within an hour to choose one. If it was not you, ignore this mail: the password stays as it is.",
        a.email
    );
    let mail = compose(
        &links.host,
        &a.email,
        "Set a new password",
        &[&ask],
        Some(Action { label: "Set a new password", url: LINK }),
    );
    let link =
        NewLink { purpose: TokenPurpose::ResetPassword, email: &a.email, valid: RESET_VALID, prefix: &links.reset };
    mail_new_link(db, links, a.account_id, link, mail).await
}

// Reset a password ----------------------------------------------------------------------------------------

pub static RESET_PASSWORD_LOCKS: PathLocks = PathLocks {
    path: "Reset a password",
    function: "services::signup::reset_password",
    kind: "Plain",
    locks: &[Lock::AccountTokenRow, Lock::AccountRow],
    why: "The link's row FOR UPDATE (its single use), then its account's row FOR NO KEY UPDATE \
          (the password and the verification it sets). Then plain writes: the account's other \
          reset links retired (SKIP LOCKED, as above), every session of the account deleted and \
          this browser's new one inserted, the notice's mail job and the event.",
};

/// A password set from a reset link: the account, and the new session's token (the browser is
/// signed in; every other session of the account has ended).
#[derive(Debug, Clone)]
pub struct PasswordReset {
    pub account: SessionAccount,
    pub session_token: String,
}

/// Set a new password from a reset link. The link proved the address, so the account is
/// verified too.
#[tracing::instrument(name = "Reset a password", skip_all, fields(address = %address))]
pub async fn reset_password(
    db: &Db,
    links: &Links,
    token: &Token,
    password: &NewPassword,
    address: &str,
    previous: Option<&str>,
) -> Result<PasswordReset, ServiceError> {
    let new_hash = auth::hash_password(password.as_str().to_string()).await;
    let hash = token.hash();
    within_for(db, TxKind::Plain, &RESET_PASSWORD_LOCKS, async |tx: &mut Tx| {
        let row = account_tokens::lock_by_hash(tx.conn(), &hash)
            .await?
            .filter(|r| hash.matches(&r.token_hash) && r.purpose == TokenPurpose::ResetPassword)
            .ok_or(ServiceError::NotFound("password reset link"))?;
        trace::note(tx.conn(), Lock::AccountTokenRow, row.token_id, None).await?;
        if row.used_at.is_some() {
            return Err(link_refused("password reset", "was used already. Ask for a new one if you need it."));
        }
        if row.expired {
            return Err(link_refused("password reset", "has expired. Ask for a new one."));
        }
        let account =
            store::lock_account(tx.conn(), row.account_id).await?.ok_or(ServiceError::NotFound("account"))?;
        trace::note(tx.conn(), Lock::AccountRow, row.account_id.0, None).await?;
        if account.closed {
            return Err(link_refused("password reset", "belongs to an account that is disabled or deleted."));
        }
        if !row.email.eq_ignore_ascii_case(&account.email) {
            return Err(link_refused(
                "password reset",
                "was sent to an address that is no longer the account's. Ask for a new one.",
            ));
        }
        store::set_password(tx.conn(), row.account_id, &new_hash).await?;
        store::mark_verified(tx.conn(), row.account_id).await?;
        account_tokens::mark_used(tx.conn(), row.token_id).await?;
        store::retire_unlocked(tx.conn(), row.account_id, TokenPurpose::ResetPassword).await?;
        let ended = accounts::delete_sessions_of(tx.conn(), row.account_id).await?;
        let session_token = auth::start_session(tx.conn(), row.account_id, address, previous).await?;
        let p1 = format!(
            "The password of your Member Console account {} was set anew from a reset link, and every session of the account was ended.",
            account.email
        );
        let p2 = format!("If it was not you, set a new one at {} and tell the console's operator.", links.forgot);
        send_later(tx.conn(), compose(&links.host, &account.email, "Your password was reset", &[&p1, &p2], None)).await?;
        account_events::record(
            tx.conn(),
            row.account_id,
            Some(row.account_id),
            AccountEventKind::PasswordReset,
            None,
            &format!("{ended} sessions ended"),
        )
        .await?;
        let is_operator = accounts::account_by_email(tx.conn(), &account.email).await?.is_some_and(|a| a.is_operator);
        Ok(PasswordReset {
            account: SessionAccount { account_id: row.account_id, email: account.email, is_operator, verified: true },
            session_token,
        })
    })
    .await
}
