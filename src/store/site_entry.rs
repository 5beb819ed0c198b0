//! Reads for entering a site to edit it (services::fedwiki::entry): which site a member may open,
//! whether the farm's edit session still stands, and how a wiki names its owner. Plain reads; no
//! lock.

use sqlx::PgConnection;

use crate::{
    ids::{AccountId, SiteDomain, SiteId, WorkspaceId},
    states::SiteStatus,
};

/// A site the account may open, as the member's organization holds it.
#[derive(Debug, Clone)]
pub struct OpenableSite {
    pub domain: SiteDomain,
    pub status: SiteStatus,
    /// The owner string the site was created with on the farm (its workspace).
    pub workspace_id: WorkspaceId,
    pub email: String,
}

/// The site `site_id` when it is in the workspace of an organization the account is a member of.
pub async fn openable_site(
    conn: &mut PgConnection,
    account: AccountId,
    site_id: &SiteId,
) -> sqlx::Result<Option<OpenableSite>> {
    sqlx::query_as!(
        OpenableSite,
        r#"SELECT s.domain AS "domain!", s.status AS "status!: SiteStatus", s.workspace_id AS "workspace_id!", a.email AS "email!"
             FROM fedwiki.sites s
             JOIN fedwiki.workspaces w ON w.workspace_id = s.workspace_id
             JOIN core.organization_members m ON m.organization_id = w.organization_id AND m.account_id = $1
             JOIN core.accounts a ON a.account_id = m.account_id
            WHERE s.site_id = $2"#,
        account as AccountId,
        site_id.as_str(),
    )
    .fetch_optional(conn)
    .await
}

/// Whether the account is a member of the organization whose workspace `owner` holds the active
/// site at `domain`.
pub async fn may_edit(
    conn: &mut PgConnection,
    domain: &SiteDomain,
    account: AccountId,
    owner: &WorkspaceId,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (
             SELECT 1
               FROM fedwiki.sites s
               JOIN fedwiki.workspaces w ON w.workspace_id = s.workspace_id
               JOIN core.organization_members m ON m.organization_id = w.organization_id AND m.account_id = $2
              WHERE s.domain = $1 AND s.workspace_id = $3 AND s.status = 'active'
           ) AS "allowed!""#,
        domain.as_str(),
        account as AccountId,
        owner.as_str(),
    )
    .fetch_one(conn)
    .await
}

/// The name a workspace's wikis show as their owner: its organization's (None for the System
/// workspace or an unknown one).
pub async fn workspace_owner_name(conn: &mut PgConnection, workspace_id: &WorkspaceId) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT o.name AS "name!" FROM fedwiki.workspaces w
             JOIN core.organizations o ON o.organization_id = w.organization_id
            WHERE w.workspace_id = $1"#,
        workspace_id.as_str(),
    )
    .fetch_optional(conn)
    .await
}
