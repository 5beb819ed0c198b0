//! What `/sites` shows: per organization of the member, its sites, its count against the plan,
//! and its requests in flight (all of them) and recent outcomes.

use crate::{
    db::Db,
    ids::{AccountId, OrganizationId},
    services::ServiceError,
    store::fedwiki as store,
};

#[derive(Debug, serde::Deserialize)]
pub struct OrganizationSites {
    pub organization_id: OrganizationId,
    pub name: String,
    pub sites: Vec<store::SiteRow>,
    pub requests: Vec<store::RequestRow>,
    /// Active sites plus held slots, as last counted; and the plan's limit.
    pub used: i64,
    pub limit: i64,
    pub custom_domain: bool,
    /// The workspace's domains, and its placements as (host name, site id).
    pub domains: Vec<String>,
    pub placements: Vec<(String, String)>,
    /// The workspace's last swap (its cooldown runs from it).
    pub last_swap_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl OrganizationSites {
    /// Whether a request on this site is still in flight.
    pub fn in_flight(&self, site_id: &str) -> Option<&store::RequestRow> {
        self.requests.iter().find(|r| r.instance_id == site_id && r.state == crate::states::RequestState::Accepted)
    }
}

/// How many of an organization's latest requests the page shows; every request still in flight
/// is read besides them (`fedwiki.member_sites`), so an old one still marks its site and keeps the
/// page polling.
pub const REQUESTS_SHOWN: i32 = 20;

/// The member's organizations and their sites, in one statement (`fedwiki.member_sites`).
#[tracing::instrument(name = "Read a member's sites", skip(db))]
pub async fn member_sites(db: &Db, who: AccountId) -> Result<Vec<OrganizationSites>, ServiceError> {
    let doc = {
        let mut read = db.read().await?;
        store::member_sites(read.conn(), who, REQUESTS_SHOWN).await?
    };
    sites_from_doc(&doc)
}

/// The page's document as `fedwiki.member_sites` writes it (read on its own, or in the session's
/// statement by the member guard).
pub fn sites_from_doc(doc: &str) -> Result<Vec<OrganizationSites>, ServiceError> {
    serde_json::from_str(doc).map_err(|e| {
        ServiceError::Db(crate::db::DbError::from(sqlx::Error::Decode(format!("fedwiki.member_sites: {e}").into())))
    })
}
