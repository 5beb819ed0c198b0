//! What `/sites` shows: per organization of the member, its sites, its count against the plan,
//! and its requests in flight and recent outcomes.

use crate::{
    db::Db,
    ids::{AccountId, OrganizationId},
    services::ServiceError,
    store::{accounts, fedwiki as store},
};

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

    pub fn any_in_flight(&self) -> bool {
        self.requests.iter().any(|r| r.state == crate::states::RequestState::Accepted)
    }
}

/// The member's organizations and their sites.
#[tracing::instrument(name = "Read a member's sites", skip(db))]
pub async fn member_sites(db: &Db, who: AccountId) -> Result<Vec<OrganizationSites>, ServiceError> {
    let mut read = db.read().await?;
    let memberships = accounts::memberships(read.conn(), who).await?;
    let mut out = Vec::with_capacity(memberships.len());
    for m in memberships {
        let ws = store::workspace_of(m.organization_id);
        let sites = store::sites_of_workspace(read.conn(), &ws).await?;
        let requests = store::requests_of_workspace(read.conn(), &ws, 20).await?;
        let pool = store::pool_of_default(read.conn(), m.organization_id).await?;
        let ((used, limit), custom_domain) = match pool {
            Some(p) => {
                (store::usage_and_limit(read.conn(), p).await?, store::custom_domain_allowed(read.conn(), p).await?)
            }
            None => ((0, 0), false),
        };
        let last_swap_at = store::last_swap_at(read.conn(), &ws).await?;
        let domains = crate::store::domains::claims_of(read.conn(), &super::registry::workspace_owner(&ws)).await?;
        let placements = store::placements_of_workspace(read.conn(), &ws).await?;
        out.push(OrganizationSites {
            organization_id: m.organization_id,
            name: m.name,
            sites,
            requests,
            used,
            limit,
            custom_domain,
            domains,
            placements,
            last_swap_at,
        });
    }
    Ok(out)
}
