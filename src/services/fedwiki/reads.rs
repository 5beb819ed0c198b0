//! What `/sites` shows: per organization of the member, its sites, its count against the plan,
//! and its requests in flight (all of them) and recent outcomes.

use crate::{db::Db, ids::AccountId, services::ServiceError};

pub use crate::store::site_pages::{OrganizationSites, SitesDoc};

/// How many of an organization's latest requests the page shows; every request still in flight
/// is read besides them (`fedwiki.member_sites`), so an old one still marks its site and keeps the
/// page polling.
pub const REQUESTS_SHOWN: i32 = 20;

/// The member's organizations and their sites, in one statement (`fedwiki.member_sites`).
#[tracing::instrument(name = "Read a member's sites", skip(db))]
pub async fn member_sites(db: &Db, who: AccountId) -> Result<SitesDoc, ServiceError> {
    let mut read = db.read().await?;
    Ok(crate::store::site_pages::member_sites(read.conn(), who, REQUESTS_SHOWN).await?)
}

/// The site a request is about (where the page shows a refusal of an act on it), if the request
/// still exists.
pub async fn request_site(db: &Db, id: crate::ids::RequestId) -> Result<Option<crate::ids::SiteId>, ServiceError> {
    let mut read = db.read().await?;
    Ok(crate::store::fedwiki::request(read.conn(), id).await?.map(|r| r.instance_id))
}
