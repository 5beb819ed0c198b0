//! Entering a site to edit it (docs/fedwiki.md, "Editing a site"): the farm lets only members of
//! the organization whose workspace holds a site change it. A member opens an active site from
//! `/sites` (OpenSiteForEditing): the console hands the browser to the site's `/_farm/enter` with
//! a short-lived credential it signs. While the member edits, the farm asks the console every so
//! often whether the account may still change the site (ConfirmEditSession). Both are reads with
//! no lock: a membership removed or a site parked meanwhile shows at the farm's next question.

use crate::{
    db::Db,
    ids::{AccountId, SiteDomain, SiteId, WorkspaceId},
    integrations::farm::{
        Farm,
        entry::{EntryClaims, LIFETIME_SECS},
    },
    services::ServiceError,
    states::SiteStatus,
    store::site_entry as store,
};

/// Where to send the member to edit the site `site_id`: the site's entry address with a fresh
/// credential. A site of no organization the member belongs to is not found, as any other; a site
/// that is not active is refused with what to do.
#[tracing::instrument(name = "Open a site for editing", skip(db, farm), fields(account_id = %who))]
pub async fn open_site_for_editing(
    db: &Db,
    farm: &Farm,
    who: AccountId,
    site_id: &SiteId,
) -> Result<String, ServiceError> {
    let site = {
        let mut read = db.read().await?;
        store::openable_site(read.conn(), who, site_id).await?
    };
    let Some(site) = site else { return Err(ServiceError::NotFound("site")) };
    if site.status != SiteStatus::Active {
        return Err(ServiceError::Refused(format!(
            "{} is {}: only an active site can be opened. Activate it first.",
            site.domain, site.status
        )));
    }
    let claims = EntryClaims {
        domain: site.domain,
        account_id: who.0,
        name: site.email,
        owner: site.workspace_id,
        exp: chrono::Utc::now().timestamp() + LIFETIME_SECS,
        nonce: crate::config::random_hex(16),
    };
    Ok(farm.entry_url(&claims))
}

/// The farm's question about an edit session.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditSessionQuestion {
    pub domain: SiteDomain,
    pub account_id: i64,
    pub owner: WorkspaceId,
}

/// Whether the account may still change the site: a member of the organization whose workspace
/// (the owner string) holds the site at that domain, and the site active.
#[tracing::instrument(name = "Confirm an edit session", skip(db, q), fields(domain = %q.domain, account_id = q.account_id))]
pub async fn confirm_edit_session(db: &Db, q: &EditSessionQuestion) -> Result<bool, ServiceError> {
    if q.domain.as_str().len() > 253 || q.owner.as_str().len() > 200 {
        return Err(ServiceError::invalid_form("The question's domain or owner is not in the farm's form."));
    }
    let mut read = db.read().await?;
    Ok(store::may_edit(read.conn(), &q.domain, AccountId(q.account_id), &q.owner).await?)
}

/// How the wikis of a workspace name their owner on the farm: the organization's name.
pub async fn owner_name(db: &Db, workspace_id: &WorkspaceId) -> Result<Option<String>, ServiceError> {
    let mut read = db.read().await?;
    Ok(store::workspace_owner_name(read.conn(), workspace_id).await?)
}
