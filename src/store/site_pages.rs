//! The member's sites page (`/sites`): its typed document, read in one statement
//! (`fedwiki.member_sites`), alone or with the session that asks for it.

use std::time::Duration;

use sqlx::PgConnection;

use super::{
    accounts::{Resumed, token_hash},
    fedwiki::{RequestRow, SiteRow},
    json_document, millis,
};
use crate::ids::{AccountId, OrganizationId, SiteDomain, SiteId};

/// One organization of the member, as the page shows it: its sites, its count against the plan,
/// and its requests in flight (all of them) and recent outcomes.
#[derive(Debug, serde::Deserialize)]
pub struct OrganizationSites {
    pub organization_id: OrganizationId,
    pub name: String,
    pub sites: Vec<SiteRow>,
    pub requests: Vec<RequestRow>,
    /// Active sites plus held slots, as last counted; and the plan's limit.
    pub used: i64,
    pub limit: i64,
    pub custom_domain: bool,
    /// The workspace's domains, verified and pending, and its placements as (host name, site id).
    pub domains: Vec<DomainRow>,
    pub placements: Vec<(SiteDomain, SiteId)>,
    /// What the member was told about its domains, the latest first.
    pub domain_notices: Vec<DomainNoticeRow>,
    /// The workspace's last swap (its cooldown runs from it).
    pub last_swap_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// One of the workspace's domains: pending (waiting on its record) or verified, with its checks.
#[derive(Debug, serde::Deserialize)]
pub struct DomainRow {
    pub name: SiteDomain,
    pub token: Option<String>,
    pub pending: bool,
    /// When it was claimed (pending) or verified.
    pub since: chrono::DateTime<chrono::Utc>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub checked_at: Option<chrono::DateTime<chrono::Utc>>,
    pub check_outcome: Option<String>,
    pub check_detail: Option<String>,
    pub missing_since: Option<chrono::DateTime<chrono::Utc>>,
    pub lapsed_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, serde::Deserialize)]
pub struct DomainNoticeRow {
    pub notice_id: i64,
    pub name: String,
    pub sentence: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl OrganizationSites {
    /// Whether a request on this site is still in flight.
    pub fn in_flight(&self, site_id: &SiteId) -> Option<&RequestRow> {
        self.requests.iter().find(|r| r.instance_id == *site_id && r.state == crate::states::RequestState::Accepted)
    }
}

/// The page's document: the member's organizations, in the order the page lists them.
pub type SitesDoc = Vec<OrganizationSites>;

fn sites_doc(json: &str) -> sqlx::Result<SitesDoc> {
    json_document(json)
}

/// `/sites` alone (after a write, or a refused form), in one statement.
pub async fn member_sites(conn: &mut PgConnection, account: AccountId, requests: i32) -> sqlx::Result<SitesDoc> {
    let doc = sqlx::query_scalar!(r#"SELECT fedwiki.member_sites($1, $2) AS "doc!""#, account as AccountId, requests)
        .fetch_one(conn)
        .await?;
    sites_doc(&doc)
}

/// `resume_session`, and the member's sites page (`fedwiki.member_sites`, its JSON document) in
/// the same statement, as the home's. Nothing is read for a session that has ended.
pub async fn resume_session_with_sites(
    conn: &mut PgConnection,
    token: &str,
    touch_every: Duration,
    requests: i32,
) -> sqlx::Result<Option<Resumed<SitesDoc>>> {
    let row = sqlx::query!(
        r#"SELECT s.account_id AS "account_id!", s.email AS "email!", s.is_operator AS "is_operator!",
                  s.touch_due AS "touch_due!", s.verified AS "verified!", fedwiki.member_sites(s.account_id, $3) AS "sites!"
           FROM core.live_session($1::bytea, $2::bigint * interval '1 millisecond') s"#,
        &token_hash(token)[..],
        millis(touch_every),
        requests
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| Ok(Resumed::new(r.account_id, r.email, r.is_operator, r.verified, r.touch_due, sites_doc(&r.sites)?)))
        .transpose()
}
