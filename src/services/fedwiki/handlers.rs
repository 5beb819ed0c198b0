//! FedWiki at the handler (spec "FedWiki at the handler"): what a member's click records. A
//! create places its name (and, for the organization's first site, makes its workspace) and
//! records its first request in one registry transaction. A status change without a cooldown
//! records its request in a transaction of its own under the instance lock only; a swap (and an
//! activation when activations have a cooldown) runs in withWorkspaceTx: the workspace lock, the
//! cooldown check, the requests, the swap policy row last. No handler takes a usage row or a site
//! row lock.

use std::time::Duration;

use chrono::Utc;
use sqlx::PgConnection;

use crate::{
    config::FarmSettings,
    db::{
        Db, Tx, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
        tx::within_for,
    },
    ids::{AccountId, OrganizationId, RequestId, SiteDomain, SiteId},
    services::ServiceError,
    states::{RequestKind, SiteStatus},
    store::{accounts, fedwiki as store},
};

use super::{
    intake::{self, Intake},
    names::SiteName,
    registry,
};

pub static CHANGE_STATUS_LOCKS: PathLocks = PathLocks {
    path: "changeStatus (without a cooldown)",
    function: "services::fedwiki::handlers::change_status",
    kind: "Plain",
    locks: &[Lock::LifecycleInstance],
    why: "No workspace lock: the request is recorded in a transaction of its own under the instance lock, after \
          which the original site is read by id, so a purge committed before the lock is seen.",
};

pub static CHANGE_STATUS_WITH_COOLDOWN_LOCKS: PathLocks = PathLocks {
    path: "changeStatus (with a cooldown)",
    function: "services::fedwiki::handlers::change_status",
    kind: "Plain",
    locks: &[Lock::WorkspaceAdvisory, Lock::LifecycleInstance, Lock::SwapPolicyRow],
    why: "withWorkspaceTx: the workspace lock, so two tabs cannot interleave the cooldown check and its stamp; \
          then the request under the instance lock; the policy row last.",
};

pub static SWAP_ACTIVE_SITE_LOCKS: PathLocks = PathLocks {
    path: "swapActiveSite",
    function: "services::fedwiki::handlers::swap_active_site",
    kind: "Plain",
    locks: &[Lock::WorkspaceAdvisory, Lock::LifecycleInstance, Lock::LifecycleInstance, Lock::SwapPolicyRow],
    why: "withWorkspaceTx: the workspace lock; both instance locks (the activated site's, then the parked one's) \
          before either site is validated; the park generation computed under its lock; the swap policy row \
          upserted last. No site row, no usage row.",
};

pub static KEEP_ACTIVE_LOCKS: PathLocks = PathLocks {
    path: "Keep active",
    function: "services::fedwiki::handlers::set_keep_active",
    kind: "Plain",
    locks: &[Lock::SiteRow],
    why: "The site row's flag only: no status, no count.",
};

/// The site a member may act on: it belongs to a workspace of one of their organizations.
async fn members_site(db: &Db, who: AccountId, site_id: &SiteId) -> Result<store::SiteRow, ServiceError> {
    let mut read = db.read().await?;
    let site = store::site(read.conn(), site_id).await?.ok_or(ServiceError::NotFound("site"))?;
    // Another organization's site is not found, not forbidden: its existence is not told.
    store::member_workspace_org(read.conn(), who, &site.workspace_id).await?.ok_or(ServiceError::NotFound("site"))?;
    // Ended here, not by its drop: a dropped transaction's rollback is sent later, and the act's
    // answer (a refusal, say) must find nothing of it still open (tests/it/tx_kinds.rs).
    read.commit().await?;
    Ok(site)
}

/// Refused as not found unless `who` is a member of the organization.
pub(super) async fn ensure_member(
    conn: &mut PgConnection,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<(), ServiceError> {
    let memberships = accounts::memberships(conn, who).await?;
    if !memberships.iter().any(|m| m.organization_id == organization_id) {
        return Err(ServiceError::NotFound("organization"));
    }
    Ok(())
}

/// Create a site named `name` for `organization_id`: place its name and record its first
/// request in one registry transaction.
#[tracing::instrument(name = "Create a site", skip(db, farm), fields(organization_id = %organization_id, name = name.as_str()))]
pub async fn create_site(
    db: &Db,
    farm: &FarmSettings,
    who: AccountId,
    organization_id: OrganizationId,
    name: &SiteName,
) -> Result<RequestId, ServiceError> {
    // Ended before the answer, whatever it is: a read dropped unfinished is rolled back only when
    // the pool next touches its connection, so under load it would still be open when the
    // member's refusal is answered.
    let mut read = db.read().await?;
    let member = ensure_member(read.conn(), who, organization_id).await;
    read.rollback().await?;
    member?;
    let workspace_id = store::workspace_of(organization_id);
    let site_id = SiteId::from(format!("s-{}", crate::config::random_hex(10)));
    let domain = name.domain(&farm.domain);
    // The placement and the accepted request commit together: a placement with no site row is an
    // orphan to the domains reconciliation unless a request on it is accepted, so committed apart
    // the name could be freed in between. The organization's first site makes its workspace here
    // too, after the name is placed: a refused name writes no workspace either.
    // Registry.WithLock, named for its path (the lock trace): the registry lock is the opening
    // batch's, so the name comes first in that batch.
    within_for(db, TxKind::Registry, &registry::PLACE_SITE_NAME_LOCKS, async |tx: &mut Tx| {
        registry::place_site_name(tx, &domain, &workspace_id, &site_id).await?;
        store::ensure_workspace(tx.conn(), organization_id).await?;
        let intake = Intake {
            instance_id: &site_id,
            workspace_id: &workspace_id,
            domain: &domain,
            kind: RequestKind::Create,
            swap_of: None,
            requested_by: Some(who),
        };
        intake::record_first_lifecycle_request(tx, &intake).await
    })
    .await
}

/// What a member may ask of a site's status.
fn allowed(kind: RequestKind, from: SiteStatus, domain: &SiteDomain) -> Result<(), ServiceError> {
    let ok = matches!(
        (kind, from),
        (RequestKind::Activate, SiteStatus::Parked | SiteStatus::Archived)
            | (RequestKind::Park, SiteStatus::Active)
            | (RequestKind::Archive, SiteStatus::Active | SiteStatus::Parked)
            | (RequestKind::Delete, _)
    );
    if ok { Ok(()) } else { Err(ServiceError::Refused(format!("{domain} is {from}: it cannot be asked to {kind}."))) }
}

/// changeStatus: park, activate, archive or delete one site.
#[tracing::instrument(name = "Change a site's status", skip(db, farm), fields(site_id = %site_id, kind = %kind))]
pub async fn change_status(
    db: &Db,
    farm: &FarmSettings,
    who: AccountId,
    site_id: &SiteId,
    kind: RequestKind,
) -> Result<RequestId, ServiceError> {
    let site = members_site(db, who, site_id).await?;
    let cooldown =
        (kind == RequestKind::Activate && !farm.activation_cooldown.is_zero()).then_some(farm.activation_cooldown);
    let decl = if cooldown.is_some() { &CHANGE_STATUS_WITH_COOLDOWN_LOCKS } else { &CHANGE_STATUS_LOCKS };
    within_for(db, TxKind::Plain, decl, async |tx: &mut Tx| {
        if let Some(cooldown) = cooldown {
            // withWorkspaceTx
            tx.lock(&AdvisoryKey::Workspace(site.workspace_id.clone())).await?;
            let last = store::last_activation_at(tx.conn(), &site.workspace_id).await?;
            refuse_inside_cooldown(last, cooldown, "activate a site")?;
        }
        tx.lock(&AdvisoryKey::LifecycleInstance(site.site_id.clone())).await?;
        // Read again by id under the instance lock: a purge or deletion that committed first is seen.
        let now = store::site(tx.conn(), &site.site_id).await?.ok_or(ServiceError::NotFound("site"))?;
        allowed(kind, now.status, &now.domain)?;
        let intake = Intake {
            instance_id: &now.site_id,
            workspace_id: &now.workspace_id,
            domain: &now.domain,
            kind,
            swap_of: None,
            requested_by: Some(who),
        };
        let id = intake::record_lifecycle_request(tx, &intake).await?;
        if cooldown.is_some() {
            store::upsert_swap_policy(tx.conn(), &now.workspace_id, true).await?;
        }
        Ok(id)
    })
    .await
}

fn refuse_inside_cooldown(
    last: Option<chrono::DateTime<Utc>>,
    cooldown: Duration,
    what: &str,
) -> Result<(), ServiceError> {
    let Some(last) = last else { return Ok(()) };
    let since = (Utc::now() - last).to_std().unwrap_or(Duration::ZERO);
    if since < cooldown {
        let left = (cooldown - since).as_secs().div_ceil(60).max(1);
        return Err(ServiceError::Refused(format!(
            "You can {what} again in {left} minute{}.",
            if left == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// A swap: the parked site to activate and the active one to park, of one organization.
#[derive(Debug, Clone)]
pub struct SwapSites {
    pub activate: SiteId,
    pub park: SiteId,
}

/// swapActiveSite: activate the parked `activate` and park the active `park`, in one step.
#[tracing::instrument(name = "Swap the active site", skip(db, farm, swap), fields(activate = %swap.activate, park = %swap.park))]
pub async fn swap_active_site(
    db: &Db,
    farm: &FarmSettings,
    who: AccountId,
    swap: &SwapSites,
) -> Result<RequestId, ServiceError> {
    let a = members_site(db, who, &swap.activate).await?;
    let p = members_site(db, who, &swap.park).await?;
    if a.workspace_id != p.workspace_id {
        return Err(ServiceError::Refused("Both sites of a swap belong to one organization.".into()));
    }
    if a.site_id == p.site_id {
        return Err(ServiceError::invalid("park", "Choose an active site to park other than the one to activate."));
    }
    within_for(db, TxKind::Plain, &SWAP_ACTIVE_SITE_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::Workspace(a.workspace_id.clone())).await?;
        let last = store::last_swap_at(tx.conn(), &a.workspace_id).await?;
        refuse_inside_cooldown(last, farm.swap_cooldown, "swap")?;
        // Both instance locks before either site is validated.
        tx.lock(&AdvisoryKey::LifecycleInstance(a.site_id.clone())).await?;
        tx.lock(&AdvisoryKey::LifecycleInstance(p.site_id.clone())).await?;
        let a_now = store::site(tx.conn(), &a.site_id).await?.ok_or(ServiceError::NotFound("site"))?;
        let p_now = store::site(tx.conn(), &p.site_id).await?.ok_or(ServiceError::NotFound("site"))?;
        if a_now.status != SiteStatus::Parked {
            return Err(ServiceError::Refused(format!(
                "{} is {}: only a parked site can be swapped in.",
                a_now.domain, a_now.status
            )));
        }
        if p_now.status != SiteStatus::Active {
            return Err(ServiceError::Refused(format!(
                "{} is {}: only an active site can be swapped out.",
                p_now.domain, p_now.status
            )));
        }
        let activation = intake::record_lifecycle_request(
            tx,
            &Intake {
                instance_id: &a_now.site_id,
                workspace_id: &a_now.workspace_id,
                domain: &a_now.domain,
                kind: RequestKind::Activate,
                swap_of: None,
                requested_by: Some(who),
            },
        )
        .await?;
        // The park's generation is computed here, under its instance lock.
        intake::record_lifecycle_request(
            tx,
            &Intake {
                instance_id: &p_now.site_id,
                workspace_id: &p_now.workspace_id,
                domain: &p_now.domain,
                kind: RequestKind::Park,
                swap_of: Some(activation),
                requested_by: Some(who),
            },
        )
        .await?;
        store::upsert_swap_policy(tx.conn(), &a_now.workspace_id, false).await?;
        Ok(activation)
    })
    .await
}

/// Withdraw a request whose job has not started (a member's "Withdraw" on the sites page):
/// DeleteUnstartedLifecycleRequest, which deletes the request with its job in one statement and
/// takes no instance lock; a job a worker claimed meanwhile keeps both, and the withdrawal is
/// refused. A withdrawn create gives its name back (placed with the request, in the create's
/// registry transaction), as a create that failed does. A swap is carried out as one step by its
/// activation's job, both halves at once, and is not withdrawn. The cooldown an activation or a
/// swap stamped at its intake stays stamped. Answers the withdrawn request.
#[tracing::instrument(name = "Withdraw a site request", skip(db))]
pub async fn withdraw_request(
    db: &Db,
    who: AccountId,
    request_id: RequestId,
) -> Result<store::RequestRow, ServiceError> {
    let (req, partner) = {
        let mut read = db.read().await?;
        let req = store::request(read.conn(), request_id).await?.ok_or(ServiceError::NotFound("request"))?;
        // Another organization's request is not found, not forbidden.
        store::member_workspace_org(read.conn(), who, &req.workspace_id)
            .await?
            .ok_or(ServiceError::NotFound("request"))?;
        let partner = store::swap_partner(read.conn(), request_id).await?;
        (req, partner)
    };
    if req.swap_of.is_some() || partner.is_some() {
        return Err(ServiceError::Refused(format!(
            "The swap of {} is carried out as one step and cannot be withdrawn.",
            req.domain
        )));
    }
    if req.state != crate::states::RequestState::Accepted {
        return Err(ServiceError::Refused(format!(
            "The request to {} {} has already finished: there is nothing to withdraw.",
            req.kind, req.domain
        )));
    }
    if !intake::delete_unstarted_lifecycle_request(db, request_id).await? {
        return Err(ServiceError::Refused(format!(
            "The request to {} {} has started: it can no longer be withdrawn.",
            req.kind, req.domain
        )));
    }
    if req.kind == RequestKind::Create {
        registry::release_site_names(db, &req.instance_id).await?;
    }
    Ok(req)
}

/// Keep active: the downgrade sweep parks other sites first.
#[tracing::instrument(name = "Keep a site active", skip(db))]
pub async fn set_keep_active(db: &Db, who: AccountId, site_id: &SiteId, keep: bool) -> Result<(), ServiceError> {
    let site = members_site(db, who, site_id).await?;
    within_for(db, TxKind::Plain, &KEEP_ACTIVE_LOCKS, async |tx: &mut Tx| {
        store::set_keep_active(tx.conn(), &site.site_id, keep).await?;
        Ok(())
    })
    .await
}
