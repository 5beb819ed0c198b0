//! Invitations into an organization (`core.invitations`): one pending per (organization, email),
//! renewed by a resend, locked FOR UPDATE by whatever ends or renews it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::{
    ids::{AccountId, InvitationId, OrganizationId},
    services::tokens::TokenHash,
};

/// An invitation's row, with its organization's name and whether it expired (by the database's
/// clock).
#[derive(Debug, Clone)]
pub struct Invitation {
    pub invitation_id: InvitationId,
    pub organization_id: OrganizationId,
    pub organization: String,
    pub email: String,
    pub role: String,
    pub token_hash: Vec<u8>,
    pub sent_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub expired: bool,
}

/// A pending invitation as the members page lists it.
#[derive(Debug, Clone)]
pub struct Pending {
    pub invitation_id: InvitationId,
    pub email: String,
    pub role: String,
    pub sent_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub expired: bool,
}

/// Invite `email` as `role`, or renew the pending invitation of that email (any case) in one
/// statement: a new token, role, sent time and expiry. The conflicting row is locked FOR UPDATE
/// by the upsert. The invitation's id, and whether it was a renewal.
pub async fn upsert_pending(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    email: &str,
    role: &str,
    invited_by: Option<AccountId>,
    hash: &TokenHash,
    valid_for: Duration,
) -> sqlx::Result<(InvitationId, bool)> {
    let r = sqlx::query!(
        r#"INSERT INTO core.invitations (organization_id, email, role, invited_by, token_hash, expires_at)
           VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 millisecond')
           ON CONFLICT (organization_id, lower(email)) WHERE accepted_at IS NULL AND revoked_at IS NULL
           DO UPDATE SET token_hash = EXCLUDED.token_hash, role = EXCLUDED.role, sent_at = now(),
                         expires_at = EXCLUDED.expires_at
           RETURNING invitation_id AS "invitation_id: InvitationId", xmax::text <> '0' AS "renewed!""#,
        organization_id as OrganizationId,
        email,
        role,
        invited_by.map(|a| a.0),
        hash.as_bytes(),
        super::millis(valid_for)
    )
    .fetch_one(conn)
    .await?;
    Ok((r.invitation_id, r.renewed))
}

/// The organization's invitation, locked FOR UPDATE (its resend or revoke), whatever its state.
pub async fn lock(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    invitation_id: InvitationId,
) -> sqlx::Result<Option<Invitation>> {
    sqlx::query_as!(
        Invitation,
        r#"SELECT i.invitation_id AS "invitation_id: InvitationId", i.organization_id AS "organization_id: OrganizationId",
                  o.name AS organization, i.email, i.role, i.token_hash, i.sent_at, i.expires_at, i.accepted_at,
                  i.revoked_at, i.expires_at <= now() AS "expired!"
           FROM core.invitations i JOIN core.organizations o USING (organization_id)
           WHERE i.invitation_id = $1 AND i.organization_id = $2 FOR UPDATE OF i"#,
        invitation_id as InvitationId,
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}

/// The invitation a link's token stands for, locked FOR UPDATE (its single use) when `lock`.
pub async fn by_hash(conn: &mut PgConnection, hash: &TokenHash, lock: bool) -> sqlx::Result<Option<Invitation>> {
    if lock {
        sqlx::query_as!(
            Invitation,
            r#"SELECT i.invitation_id AS "invitation_id: InvitationId", i.organization_id AS "organization_id: OrganizationId",
                      o.name AS organization, i.email, i.role, i.token_hash, i.sent_at, i.expires_at, i.accepted_at,
                      i.revoked_at, i.expires_at <= now() AS "expired!"
               FROM core.invitations i JOIN core.organizations o USING (organization_id)
               WHERE i.token_hash = $1 FOR UPDATE OF i"#,
            hash.as_bytes()
        )
        .fetch_optional(conn)
        .await
    } else {
        sqlx::query_as!(
            Invitation,
            r#"SELECT i.invitation_id AS "invitation_id: InvitationId", i.organization_id AS "organization_id: OrganizationId",
                      o.name AS organization, i.email, i.role, i.token_hash, i.sent_at, i.expires_at, i.accepted_at,
                      i.revoked_at, i.expires_at <= now() AS "expired!"
               FROM core.invitations i JOIN core.organizations o USING (organization_id)
               WHERE i.token_hash = $1"#,
            hash.as_bytes()
        )
        .fetch_optional(conn)
        .await
    }
}

/// A resend: a new token, sent now, valid for `valid_for` from now.
pub async fn renew(
    conn: &mut PgConnection,
    invitation_id: InvitationId,
    hash: &TokenHash,
    valid_for: Duration,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.invitations SET token_hash = $2, sent_at = now(),
                expires_at = now() + $3::bigint * interval '1 millisecond'
         WHERE invitation_id = $1",
        invitation_id as InvitationId,
        hash.as_bytes(),
        super::millis(valid_for)
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn revoke(conn: &mut PgConnection, invitation_id: InvitationId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.invitations SET revoked_at = now() WHERE invitation_id = $1",
        invitation_id as InvitationId
    )
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn mark_accepted(conn: &mut PgConnection, invitation_id: InvitationId, by: AccountId) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE core.invitations SET accepted_at = now(), accepted_by = $2 WHERE invitation_id = $1",
        invitation_id as InvitationId,
        by as AccountId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The organization's pending invitations, newest first (expired ones too, marked: a resend
/// renews them).
pub async fn pending_of(conn: &mut PgConnection, organization_id: OrganizationId) -> sqlx::Result<Vec<Pending>> {
    sqlx::query_as!(
        Pending,
        r#"SELECT invitation_id AS "invitation_id: InvitationId", email, role, sent_at, expires_at,
                  expires_at <= now() AS "expired!"
           FROM core.invitations
           WHERE organization_id = $1 AND accepted_at IS NULL AND revoked_at IS NULL
           ORDER BY sent_at DESC, invitation_id DESC"#,
        organization_id as OrganizationId
    )
    .fetch_all(conn)
    .await
}

/// The organization's invitation's email, read without a lock (what a resend is counted
/// against before it acts).
pub async fn email_of(
    conn: &mut PgConnection,
    organization_id: OrganizationId,
    invitation_id: InvitationId,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        "SELECT email FROM core.invitations WHERE invitation_id = $1 AND organization_id = $2",
        invitation_id as InvitationId,
        organization_id as OrganizationId
    )
    .fetch_optional(conn)
    .await
}
