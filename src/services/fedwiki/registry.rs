//! The domains registry (spec "Registry"): every mutation runs in `with_lock`, a Registry
//! transaction whose first statement is the registry's advisory lock; composite operations take
//! the transaction it passes, so the lock is taken once. The rule for a transaction that would
//! touch both the registry and a usage row is registry lock first; none does: the slot gate and
//! the recounts run apart from the transactions that place or release a name. A create takes the
//! new site's lifecycle instance lock after the registry lock, to record its first request with
//! the placement; no path holds an instance lock and then waits for the registry lock.

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
    },
    hostname::FarmZone,
    ids::{SiteDomain, SiteId, WorkspaceId},
    services::ServiceError,
    store::{domains as store, fedwiki as sites_store},
};

pub static PLACE_SITE_NAME_LOCKS: PathLocks = PathLocks {
    path: "Registry: place a member's site name",
    function: "services::fedwiki::handlers::create_site (registry::place_site_name)",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::LifecycleInstance],
    why: "The registry lock first: the checks that the name lies under the farm's zone or the workspace's own \
          claim and that no placement holds it span rows no constraint compares. The new site has no row yet, so \
          no site row is locked; a row that still holds the name (a deletion under way releases the name before \
          it deletes the row) is read without a lock and refuses the name. A create makes the organization's \
          workspace row after the placement, then records its first request (RecordFirstLifecycleRequest: the new \
          site's instance lock) in this transaction, so a refused name writes neither, and the domains \
          reconciliation never sees the placement without its accepted request.",
};

pub static RELEASE_SITE_NAME_LOCKS: PathLocks = PathLocks {
    path: "Registry: release a site's names",
    function: "services::fedwiki::registry::release_site_names",
    kind: "Registry",
    locks: &[Lock::Registry, Lock::PlacementRows],
    why: "The registry lock, then the site's placement rows by their delete. A member's deletion runs it before \
          the site's deletion, a failed create after its request finished; no site row is taken.",
};

pub static ENSURE_FARM_ZONE_LOCKS: PathLocks = PathLocks {
    path: "Registry: claim the farm's zone",
    function: "services::fedwiki::registry::ensure_farm_zone",
    kind: "Registry",
    locks: &[Lock::Registry],
    why: "At start: the configured farm zone is the farm's claim, unless another owner's claim covers it.",
};

/// The registry's owner string of a workspace.
pub fn workspace_owner(workspace_id: &WorkspaceId) -> String {
    format!("workspace:{workspace_id}")
}

/// Registry.WithLock: run `work` on a Registry transaction; commit when it succeeds, roll back
/// before a refusal is answered (`db::tx::within`).
pub async fn with_lock<T>(
    db: &Db,
    work: impl AsyncFnOnce(&mut Tx) -> Result<T, ServiceError>,
) -> Result<T, ServiceError> {
    crate::db::tx::within(db, TxKind::Registry, work).await
}

/// Registry.WithLock for the path `decl` declares: the path is named in the opening batch, before
/// the registry lock (the lock trace), and nothing else changes.
pub async fn with_lock_for<T>(
    db: &Db,
    decl: &'static PathLocks,
    work: impl AsyncFnOnce(&mut Tx) -> Result<T, ServiceError>,
) -> Result<T, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Registry, decl, work).await
}

fn registry_tx(tx: &Tx) {
    debug_assert_eq!(tx.kind(), TxKind::Registry, "a registry mutation runs on the transaction with_lock passes");
}

/// Place a new site's host name for `workspace_id`: it must lie under the farm's zone or a claim
/// of the workspace's own, and be placed by nothing else.
#[tracing::instrument(name = "Place a site's name", skip(tx))]
pub async fn place_site_name(
    tx: &mut Tx,
    hostname: &SiteDomain,
    workspace_id: &WorkspaceId,
    site_id: &SiteId,
) -> Result<(), ServiceError> {
    registry_tx(tx);
    let owner = workspace_owner(workspace_id);
    match store::covering_claim(tx.conn(), hostname).await? {
        Some((_, o)) if o == "farm" || o == owner => {}
        Some((name, _)) => {
            return Err(ServiceError::invalid(
                "name",
                format!("{hostname} lies under {name}, which another owner holds."),
            ));
        }
        None => {
            return Err(ServiceError::invalid(
                "name",
                format!("{hostname} lies under no name the farm or your organization holds."),
            ));
        }
    }
    let taken = || ServiceError::invalid("name", format!("{hostname} is taken: choose another name."));
    if store::placement(tx.conn(), hostname).await?.is_some() {
        return Err(taken());
    }
    // A member's deletion releases the name before the farm and the row let the site go: until
    // the row is gone, a new site under the name would meet the old one on the farm and in the
    // table (its record step would fail on the domain's uniqueness and never finish).
    match sites_store::site_on_domain(tx.conn(), hostname).await? {
        Some(true) => {
            return Err(ServiceError::invalid(
                "name",
                format!("{hostname} is still being deleted: try again once its deletion is done."),
            ));
        }
        Some(false) => return Err(taken()),
        None => {}
    }
    if !store::insert_site_placement(tx.conn(), hostname, &owner, site_id, false).await? {
        return Err(taken());
    }
    Ok(())
}

/// Release every name placed for a site.
#[tracing::instrument(name = "Release a site's names", skip(db))]
pub async fn release_site_names(db: &Db, site_id: &SiteId) -> Result<u64, ServiceError> {
    with_lock_for(db, &RELEASE_SITE_NAME_LOCKS, async |tx: &mut Tx| {
        registry_tx(tx);
        Ok(store::delete_site_placements(tx.conn(), site_id).await?)
    })
    .await
}

/// Claim the farm's zone for the farm (at start), unless it is already claimed.
#[tracing::instrument(name = "Claim the farm's zone", skip(db))]
pub async fn ensure_farm_zone(db: &Db, zone: &FarmZone) -> Result<(), ServiceError> {
    // The registry's claims are keyed by domain names; the zone is claimed as one.
    let zone = SiteDomain::from(zone.as_str());
    with_lock_for(db, &ENSURE_FARM_ZONE_LOCKS, async |tx: &mut Tx| {
        match store::covering_claim(tx.conn(), &zone).await? {
            Some((name, owner)) if name == zone && owner == "farm" => Ok(()),
            Some((name, owner)) if owner != "farm" => {
                Err(ServiceError::Refused(format!("The farm's zone {zone} lies under {name}, which {owner} holds.")))
            }
            _ => {
                store::insert_claim(tx.conn(), &zone, "farm").await?;
                Ok(())
            }
        }
    })
    .await
}
