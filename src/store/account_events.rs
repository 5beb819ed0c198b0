//! What happened to an account, and who did it (`core.account_events`): written in the
//! transaction of the act, read on the operator's account page.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::ids::{AccountId, OrganizationId};

/// An account act, as recorded. `kind` is one of `AccountEventKind`'s names.
#[derive(Debug, Clone)]
pub struct AccountEvent {
    pub kind: String,
    /// Who did it: the account itself, an owner, an operator; None once that account is gone.
    pub actor_email: Option<String>,
    pub organization: Option<String>,
    pub detail: String,
    pub at: DateTime<Utc>,
}

/// The acts the console records of an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountEventKind {
    SignedUp,
    EmailVerified,
    EmailChangeRequested,
    EmailChanged,
    PasswordChanged,
    PasswordReset,
    SessionsEnded,
    Invited,
    InvitationAccepted,
    RoleChanged,
    RemovedFromOrganization,
    LeftOrganization,
    Disabled,
    Enabled,
    OperatorGranted,
    OperatorRevoked,
    Deleted,
}

impl AccountEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountEventKind::SignedUp => "signed_up",
            AccountEventKind::EmailVerified => "email_verified",
            AccountEventKind::EmailChangeRequested => "email_change_requested",
            AccountEventKind::EmailChanged => "email_changed",
            AccountEventKind::PasswordChanged => "password_changed",
            AccountEventKind::PasswordReset => "password_reset",
            AccountEventKind::SessionsEnded => "sessions_ended",
            AccountEventKind::Invited => "invited",
            AccountEventKind::InvitationAccepted => "invitation_accepted",
            AccountEventKind::RoleChanged => "role_changed",
            AccountEventKind::RemovedFromOrganization => "removed_from_organization",
            AccountEventKind::LeftOrganization => "left_organization",
            AccountEventKind::Disabled => "disabled",
            AccountEventKind::Enabled => "enabled",
            AccountEventKind::OperatorGranted => "operator_granted",
            AccountEventKind::OperatorRevoked => "operator_revoked",
            AccountEventKind::Deleted => "deleted",
        }
    }

    /// How the account page says it.
    pub fn label(kind: &str) -> &'static str {
        match kind {
            "signed_up" => "Signed up",
            "email_verified" => "Email verified",
            "email_change_requested" => "Email change asked for",
            "email_changed" => "Email changed",
            "password_changed" => "Password changed",
            "password_reset" => "Password reset",
            "sessions_ended" => "Sessions ended",
            "invited" => "Invited",
            "invitation_accepted" => "Invitation accepted",
            "role_changed" => "Role changed",
            "removed_from_organization" => "Removed from an organization",
            "left_organization" => "Left an organization",
            "disabled" => "Disabled",
            "enabled" => "Enabled",
            "operator_granted" => "Made an operator",
            "operator_revoked" => "No longer an operator",
            "deleted" => "Deleted",
            _ => "Other",
        }
    }
}

/// Record an act on `account_id`, on the act's own transaction.
pub async fn record(
    conn: &mut PgConnection,
    account_id: AccountId,
    actor: Option<AccountId>,
    kind: AccountEventKind,
    organization_id: Option<OrganizationId>,
    detail: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO core.account_events (account_id, actor_account_id, kind, organization_id, detail)
         VALUES ($1, $2, $3, $4, $5)",
        account_id as AccountId,
        actor.map(|a| a.0),
        kind.as_str(),
        organization_id.map(|o| o.0),
        detail
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// An account's acts, newest first.
pub async fn events_of(conn: &mut PgConnection, account_id: AccountId, limit: i64) -> sqlx::Result<Vec<AccountEvent>> {
    sqlx::query_as!(
        AccountEvent,
        r#"SELECT e.kind, a.email AS "actor_email?", o.name AS "organization?", e.detail, e.at
           FROM core.account_events e
           LEFT JOIN core.accounts a ON a.account_id = e.actor_account_id
           LEFT JOIN core.organizations o ON o.organization_id = e.organization_id
           WHERE e.account_id = $1 ORDER BY e.at DESC, e.event_id DESC LIMIT $2"#,
        account_id as AccountId,
        limit
    )
    .fetch_all(conn)
    .await
}
