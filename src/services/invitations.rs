//! Invitations into an organization: an owner (or an operator) invites an email as owner or
//! member; a pending invitation can be sent again (a new link) or revoked; its link, used once
//! within 7 days, accepts it: a new person sets a password there (which proves the email, so
//! the account starts verified), an existing account accepts while signed in as that email.
//!
//! A link's token is derived from a seed only the mail job holds (`services::tokens`); the row
//! keeps its hash. Every act is recorded in the account events with who did it.

use std::time::Duration;

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace,
        tx::within_for,
    },
    ids::{AccountId, InvitationId, OrganizationId},
    services::{
        ServiceError,
        auth::Email,
        letters::{self, Action},
        mail::{self, LINK},
        mail_limits,
        members::Role,
        tokens::{SecretLink, Seed, Token, TokenHash, TokenKey},
    },
    store::{
        account_events::{self, AccountEventKind},
        accounts::SessionAccount,
        invitations::{self as store, Invitation},
        members, signup as account_store,
    },
};

/// How long an invitation's link works.
pub const VALID_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// Who invites: an owner of the organization (verified), or an operator (any organization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inviter {
    Owner(AccountId),
    Operator(AccountId),
}

impl Inviter {
    pub fn account(self) -> AccountId {
        match self {
            Inviter::Owner(a) | Inviter::Operator(a) => a,
        }
    }
}

/// Where the mail's link goes: the console's public host (for the Message-ID) and the accept
/// page's address up to the token (`https://console.example/invitations/accept?token=`).
#[derive(Debug, Clone)]
pub struct InviteMail {
    pub host: String,
    pub accept_prefix: String,
    /// The client address the send is counted against (`mail_limits`).
    pub address: String,
}

/// An invitation as its form asks for it.
#[derive(Debug, Clone)]
pub struct Invite {
    pub organization_id: OrganizationId,
    pub email: Email,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invited {
    pub invitation_id: InvitationId,
    /// A pending invitation of the same email was renewed (sent again with a new link).
    pub renewed: bool,
}

pub static INVITE_LOCKS: PathLocks = PathLocks {
    path: "Invite into an organization",
    function: "services::invitations::invite",
    kind: "Plain",
    locks: &[Lock::InvitationRow],
    why: "One upsert on the pending invitations' unique key (organization, lower(email)): a new \
          invitation is a plain insert; a pending one of the same email is renewed in place, its \
          row locked FOR UPDATE by the upsert (a new token changes a unique column). Two invites \
          of one email at once: the second waits on the first's row (or its insert) and renews \
          it. Who invites and whether the email is a member already are read before; the mail \
          job is inserted last.",
};

pub static RESEND_INVITATION_LOCKS: PathLocks = PathLocks {
    path: "Resend an invitation",
    function: "services::invitations::resend",
    kind: "Plain",
    locks: &[Lock::InvitationRow],
    why: "The invitation's row FOR UPDATE, then, while it is pending, a new token and expiry on \
          it and the mail job: a resend racing an accept or a revoke waits, then sees it ended.",
};

pub static REVOKE_INVITATION_LOCKS: PathLocks = PathLocks {
    path: "Revoke an invitation",
    function: "services::invitations::revoke",
    kind: "Plain",
    locks: &[Lock::InvitationRow],
    why: "The invitation's row FOR UPDATE, then its revoked mark while it is pending: a revoke \
          racing an accept waits on the row, and exactly one of them ends the invitation.",
};

pub static ACCEPT_INVITATION_LOCKS: PathLocks = PathLocks {
    path: "Accept an invitation",
    function: "services::invitations::accept",
    kind: "Plain",
    locks: &[Lock::InvitationRow, Lock::AccountRow],
    why: "The invitation's row FOR UPDATE by its token's hash (single use: accepted_at); a \
          signed-in account's row FOR NO KEY UPDATE next, to read its email as it stands (an \
          email change may have moved it since the session began) and mark it verified: the \
          link came to that address, which proves it. Then the inserts: the new account (a new \
          person), the membership (its foreign keys take the organization's and the account's \
          rows FOR KEY SHARE, which the members path's FOR NO KEY UPDATE does not block), the \
          session, the event. Two accepts of one link: the second waits on the row and finds it \
          used.",
};

/// What is wrong with an invitation link, said to whoever holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkProblem {
    /// No invitation has this token: mistyped, cut short, tampered with, or replaced by a resend.
    Unknown,
    Expired,
    Used,
    Revoked,
}

impl LinkProblem {
    pub fn words(self) -> &'static str {
        match self {
            LinkProblem::Unknown => {
                "This invitation link is not valid: it may be incomplete, or a newer invitation replaced it. Open \
                 the link from the latest invitation mail, or ask the organization's owner to send it again."
            }
            LinkProblem::Expired => {
                "This invitation has expired (a link works for 7 days). Ask the organization's owner to send it \
                 again."
            }
            LinkProblem::Used => {
                "This invitation was accepted already; a link works once. Sign in to reach the organization."
            }
            LinkProblem::Revoked => {
                "This invitation was withdrawn by the organization. Ask its owner if you should have been invited."
            }
        }
    }
}

/// The refusals of an accept: the link's, or the act's (`ServiceError`).
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("{}", .0.words())]
    Link(LinkProblem),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<DbError> for AcceptError {
    fn from(e: DbError) -> Self {
        AcceptError::Service(e.into())
    }
}

impl From<sqlx::Error> for AcceptError {
    fn from(e: sqlx::Error) -> Self {
        AcceptError::Service(e.into())
    }
}

/// Why a pending invitation row cannot be used (None: it can).
fn problem_of(row: &Invitation, hash: &TokenHash) -> Option<LinkProblem> {
    if !hash.matches(&row.token_hash) {
        return Some(LinkProblem::Unknown);
    }
    if row.revoked_at.is_some() {
        return Some(LinkProblem::Revoked);
    }
    if row.accepted_at.is_some() {
        return Some(LinkProblem::Used);
    }
    if row.expired {
        return Some(LinkProblem::Expired);
    }
    None
}

fn rate_limited(email: &str) -> ServiceError {
    ServiceError::Refused(format!(
        "Nothing was sent: {email} was sent as many mails as the console allows in an hour, or this address sent as \
         many as it may. Try again later."
    ))
}

/// Invite `invite.email` into the organization as `invite.role`, or send a pending invitation of
/// that email again with a new link. An owner must be verified; an email that is a member
/// already is refused by field. The send is counted first (`mail_limits::reserve_send`).
#[tracing::instrument(name = "Invite into an organization", skip(db, tokens, mail), fields(organization_id = %invite.organization_id, by = ?by))]
pub async fn invite(
    db: &Db,
    tokens: &TokenKey,
    by: Inviter,
    invite: &Invite,
    mail: &InviteMail,
) -> Result<Invited, ServiceError> {
    let email = invite.email.as_str();
    let organization_id = invite.organization_id;
    if !mail_limits::reserve_send(db, &mail.address, email).await? {
        return Err(rate_limited(email));
    }
    within_for(db, TxKind::Plain, &INVITE_LOCKS, async |tx: &mut Tx| {
        let name = members::organization_name(tx.conn(), organization_id)
            .await?
            .ok_or(ServiceError::NotFound("organization"))?;
        let inviter = inviter_email(tx, by, organization_id, &name).await?;
        if members::is_member_by_email(tx.conn(), organization_id, email).await? {
            return Err(ServiceError::invalid(
                "email",
                format!("{email} is a member of {name} already, so nobody was invited."),
            ));
        }
        let seed = Seed::new();
        let hash = tokens.token(&seed).hash();
        let (invitation_id, renewed) = store::upsert_pending(
            tx.conn(),
            organization_id,
            email,
            invite.role.as_str(),
            Some(by.account()),
            &hash,
            VALID_FOR,
        )
        .await?;
        if renewed {
            trace::note(tx.conn(), Lock::InvitationRow, invitation_id, None).await?;
        }
        send(tx, mail, seed, email, &name, &inviter, invite.role).await?;
        let what = if renewed { "sent again the invitation of" } else { "invited" };
        let detail = format!("{what} {email} as {}", invite.role.as_str());
        account_events::record(
            tx.conn(),
            by.account(),
            Some(by.account()),
            AccountEventKind::Invited,
            Some(organization_id),
            &detail,
        )
        .await?;
        Ok(Invited { invitation_id, renewed })
    })
    .await
}

/// Who invites, as the mail names them: an owner of the organization who is verified, or an
/// operator. Not a member is "no such organization"; a member who is not an owner is refused.
async fn inviter_email(
    tx: &mut Tx,
    by: Inviter,
    organization_id: OrganizationId,
    name: &str,
) -> Result<String, ServiceError> {
    let (email, verified) =
        members::account_standing(tx.conn(), by.account()).await?.ok_or(ServiceError::NotFound("account"))?;
    if let Inviter::Owner(a) = by {
        match members::role_of(tx.conn(), organization_id, a).await?.as_deref() {
            None => return Err(ServiceError::NotFound("organization")),
            Some("owner") => {}
            Some(_) => {
                return Err(ServiceError::Refused(format!(
                    "Only an owner of {name} can invite people to it. Ask an owner to do it."
                )));
            }
        }
        let who = SessionAccount { account_id: a, email: email.clone(), is_operator: false, verified };
        crate::services::accounts::must_be_verified(&who, "invite people")?;
    }
    Ok(email)
}

/// The invitation's mail, with its secret link, on the act's transaction.
async fn send(
    tx: &mut Tx,
    mail: &InviteMail,
    seed: Seed,
    to: &str,
    organization: &str,
    inviter: &str,
    role: Role,
) -> Result<(), ServiceError> {
    let role_words = match role {
        Role::Owner => "an owner (who can manage its plan, sites and members)",
        Role::Member => "a member",
    };
    let invited = format!("{inviter} invited you to join {organization} on the Member Console as {role_words}.");
    let message = letters::compose(
        &mail.host,
        to,
        &format!("You are invited to join {organization}"),
        &[
            &invited,
            "Open the link to accept. If you have no account yet, you choose a password there. The link works once, \
             for 7 days.",
            "If you did not expect this invitation, you can ignore this mail.",
        ],
        Some(Action { label: "Accept the invitation", url: LINK }),
    );
    mail::send_with_link(tx.conn(), message, SecretLink { prefix: mail.accept_prefix.clone(), seed }).await?;
    Ok(())
}

/// Send a pending invitation again: a new link (the old one stops working), 7 more days.
#[tracing::instrument(name = "Resend an invitation", skip(db, tokens, mail), fields(organization_id = %organization_id, invitation_id = %invitation_id))]
pub async fn resend(
    db: &Db,
    tokens: &TokenKey,
    by: Inviter,
    organization_id: OrganizationId,
    invitation_id: InvitationId,
    mail: &InviteMail,
) -> Result<(), ServiceError> {
    // The email the send is counted against, read before the act as the limits ask.
    let email = {
        let mut read = db.read().await?;
        store::email_of(read.conn(), organization_id, invitation_id)
            .await?
            .ok_or(ServiceError::NotFound("invitation"))?
    };
    if !mail_limits::reserve_send(db, &mail.address, &email).await? {
        return Err(rate_limited(&email));
    }
    within_for(db, TxKind::Plain, &RESEND_INVITATION_LOCKS, async |tx: &mut Tx| {
        let row = pending_locked(tx, organization_id, invitation_id).await?;
        let inviter = inviter_email(tx, by, organization_id, &row.organization).await?;
        let role = Role::parse(&row.role).map_err(|_| ServiceError::NotFound("invitation"))?;
        let seed = Seed::new();
        store::renew(tx.conn(), invitation_id, &tokens.token(&seed).hash(), VALID_FOR).await?;
        send(tx, mail, seed, &row.email, &row.organization, &inviter, role).await?;
        let detail = format!("sent again the invitation of {} as {}", row.email, row.role);
        account_events::record(
            tx.conn(),
            by.account(),
            Some(by.account()),
            AccountEventKind::Invited,
            Some(organization_id),
            &detail,
        )
        .await?;
        Ok(())
    })
    .await
}

/// Revoke a pending invitation: its link stops working.
#[tracing::instrument(name = "Revoke an invitation", skip(db), fields(organization_id = %organization_id, invitation_id = %invitation_id))]
pub async fn revoke(
    db: &Db,
    by: Inviter,
    organization_id: OrganizationId,
    invitation_id: InvitationId,
) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &REVOKE_INVITATION_LOCKS, async |tx: &mut Tx| {
        let row = pending_locked(tx, organization_id, invitation_id).await?;
        inviter_email(tx, by, organization_id, &row.organization).await?;
        store::revoke(tx.conn(), invitation_id).await?;
        let detail = format!("revoked the invitation of {} as {}", row.email, row.role);
        account_events::record(
            tx.conn(),
            by.account(),
            Some(by.account()),
            AccountEventKind::Invited,
            Some(organization_id),
            &detail,
        )
        .await?;
        Ok(())
    })
    .await
}

/// The organization's invitation, locked, while it is pending (an expired one may be resent or
/// revoked); an ended one is refused in words.
async fn pending_locked(
    tx: &mut Tx,
    organization_id: OrganizationId,
    invitation_id: InvitationId,
) -> Result<Invitation, ServiceError> {
    let row =
        store::lock(tx.conn(), organization_id, invitation_id).await?.ok_or(ServiceError::NotFound("invitation"))?;
    trace::note(tx.conn(), Lock::InvitationRow, invitation_id, None).await?;
    if row.accepted_at.is_some() {
        return Err(ServiceError::Refused(format!("{} accepted this invitation already.", row.email)));
    }
    if row.revoked_at.is_some() {
        return Err(ServiceError::Refused(format!("The invitation of {} was revoked already.", row.email)));
    }
    Ok(row)
}

/// What the accept page shows of an invitation: its organization, role and email, and whether
/// an account has that email (told only to whoever holds the link, which proves the mailbox).
#[derive(Debug, Clone)]
pub struct InvitationLook {
    pub organization_id: OrganizationId,
    pub organization: String,
    pub email: String,
    pub role: String,
    pub account_exists: bool,
}

/// The invitation `token` stands for, read (not used): a GET shows it, only the POST acts.
#[tracing::instrument(name = "Read an invitation", skip_all)]
pub async fn look(db: &Db, token: &Token) -> Result<InvitationLook, AcceptError> {
    let hash = token.hash();
    let mut read = db.read().await?;
    let row = store::by_hash(read.conn(), &hash, false).await?.ok_or(AcceptError::Link(LinkProblem::Unknown))?;
    if let Some(p) = problem_of(&row, &hash) {
        return Err(AcceptError::Link(p));
    }
    let account_exists = members::account_exists(read.conn(), &row.email).await?;
    Ok(InvitationLook {
        organization_id: row.organization_id,
        organization: row.organization,
        email: row.email,
        role: row.role,
        account_exists,
    })
}

/// Who accepts.
#[derive(Debug, Clone)]
pub enum Acceptor<'a> {
    /// Nobody is signed in: a new account with this password's hash (computed before), signed
    /// in from `address`, ending the browser's `previous` session.
    NewAccount { password_hash: String, address: &'a str, previous: Option<&'a str> },
    /// Signed in as this account (its row's email, read under its lock, must be the invited one:
    /// a session's may be older).
    SignedIn { account_id: AccountId },
}

/// What an accept did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// A new, verified account joined; the session token the cookie carries.
    NewAccount { organization_id: OrganizationId, account_id: AccountId, session: String },
    /// The signed-in account joined.
    Joined { organization_id: OrganizationId },
}

/// Accept the invitation `token` stands for, once: under its row's lock, a link that is not
/// pending is refused (`AcceptError::Link`), as is an account that does not have the invited
/// email (signed in as another) or a new person whose email has an account meanwhile.
#[tracing::instrument(name = "Accept an invitation", skip_all)]
pub async fn accept(db: &Db, token: &Token, who: Acceptor<'_>) -> Result<Accepted, AcceptError> {
    let hash = token.hash();
    within_for(db, TxKind::Plain, &ACCEPT_INVITATION_LOCKS, async |tx: &mut Tx| {
        let row = store::by_hash(tx.conn(), &hash, true).await?.ok_or(AcceptError::Link(LinkProblem::Unknown))?;
        trace::note(tx.conn(), Lock::InvitationRow, row.invitation_id, None).await?;
        if let Some(p) = problem_of(&row, &hash) {
            return Err(AcceptError::Link(p));
        }
        let organization_id = row.organization_id;
        let (account_id, session) = match &who {
            Acceptor::NewAccount { password_hash, address, previous } => {
                let Some(account_id) = members::insert_verified_account(tx.conn(), &row.email, password_hash).await?
                else {
                    return Err(ServiceError::Refused(format!(
                        "An account with the email {} exists: sign in to accept the invitation.",
                        row.email
                    ))
                    .into());
                };
                let session = crate::services::auth::start_session(tx.conn(), account_id, address, *previous).await?;
                (account_id, Some(session))
            }
            Acceptor::SignedIn { account_id } => {
                let account = account_store::lock_account(tx.conn(), *account_id).await?;
                trace::note(tx.conn(), Lock::AccountRow, account_id.0, None).await?;
                let Some(account) = account.filter(|a| !a.closed) else {
                    return Err(ServiceError::Refused("This account is closed.".into()).into());
                };
                if !account.email.eq_ignore_ascii_case(&row.email) {
                    return Err(ServiceError::Refused(wrong_account_words(&account.email, &row.email)).into());
                }
                // The invitation's link was mailed to this address, so opening it proves it.
                if !account.verified {
                    account_store::mark_verified(tx.conn(), *account_id).await?;
                    let note = format!("{} (by an invitation's link)", account.email);
                    let verified = AccountEventKind::EmailVerified;
                    account_events::record(tx.conn(), *account_id, Some(*account_id), verified, None, &note).await?;
                }
                (*account_id, None)
            }
        };
        if !members::insert_membership(tx.conn(), organization_id, account_id, &row.role).await? {
            return Err(ServiceError::Refused(format!(
                "You are a member of {} already, so this invitation was not used.",
                row.organization
            ))
            .into());
        }
        store::mark_accepted(tx.conn(), row.invitation_id, account_id).await?;
        account_events::record(
            tx.conn(),
            account_id,
            Some(account_id),
            AccountEventKind::InvitationAccepted,
            Some(organization_id),
            &format!("joined as {}", row.role),
        )
        .await?;
        Ok(match session {
            Some(session) => Accepted::NewAccount { organization_id, account_id, session },
            None => Accepted::Joined { organization_id },
        })
    })
    .await
}

/// The refusal of an invitation opened while signed in as another email.
pub fn wrong_account_words(signed_in: &str, invited: &str) -> String {
    format!(
        "This invitation is for {invited}, but you are signed in as {signed_in}. Sign out, then open the link again \
         to accept it as {invited}."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_problem_says_what_to_do() {
        for p in [LinkProblem::Unknown, LinkProblem::Expired, LinkProblem::Used, LinkProblem::Revoked] {
            assert!(p.words().ends_with('.'), "{p:?}");
        }
        assert!(LinkProblem::Expired.words().contains("send it again"));
    }
}
