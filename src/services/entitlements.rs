//! The entitlement core's paths: creating an organization (with its pool and floor),
//! ConferGrantTx, ending a conferral with what follows it, suspension, quantity changes,
//! materialization, and RegisterProviders at boot.

use chrono::{DateTime, Utc};

use crate::{
    db::{
        Db, DbError, Tx, TxKind, begin,
        locks::{Lock, PathLocks},
    },
    store::entitlements::{self as store, NewGrant},
};

#[derive(Debug, thiserror::Error)]
pub enum EntitlementError {
    #[error("{0}")]
    Invalid(String),
    #[error("no such {0}")]
    NotFound(&'static str),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for EntitlementError {
    fn from(e: sqlx::Error) -> Self {
        EntitlementError::Db(e.into())
    }
}

/// An organization's name, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgName(String);

impl OrgName {
    pub fn parse(s: &str) -> Result<OrgName, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("An organization needs a name.".into());
        }
        if s.chars().count() > 200 {
            return Err("An organization's name may have at most 200 characters.".into());
        }
        if s.chars().any(char::is_control) {
            return Err("An organization's name may not contain control characters.".into());
        }
        Ok(OrgName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub static CREATE_ORGANIZATION_LOCKS: PathLocks = PathLocks {
    path: "Create an organization",
    function: "services::entitlements::create_organization",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::ProvisionDomain, Lock::OrgTypeRowKeyShare, Lock::PoolRow, Lock::GrantRow],
    why: "The insert takes its type's row FOR KEY SHARE through the foreign key (no conflict with the \
          default change's FOR NO KEY UPDATE), after the email domain's lock when it has one; the new pool's row is taken by the floor's core.confer and by \
          materialization, under the shared rendezvous; with an email domain, the grants waiting for it are \
          taken (their UPDATE) after the pool row, as spec rule 4 orders grant rows.",
};

#[derive(Debug, Clone, Copy)]
pub struct CreatedOrganization {
    pub organization_id: i64,
    pub pool_id: i64,
    /// The floor grant, when the type has a default ladder with a rank 0.
    pub floor_grant_id: Option<i64>,
}

/// Create an organization with its default pool, its floor and its entitlements.
pub async fn create_organization(
    db: &Db,
    name: &OrgName,
    org_type_id: Option<i64>,
) -> Result<CreatedOrganization, EntitlementError> {
    create_organization_with_domain(db, name, org_type_id, None).await.map(|(c, _)| c)
}

/// The same, for an organization with an email domain: it receives the grants waiting for that
/// domain (provisioning), after its floor, under its pool row. Returns how many it received.
#[tracing::instrument(name = "Create an organization", skip(db), fields(name = %name.as_str(), org_type_id, domain = ?email_domain.map(|d| d.as_str())))]
pub async fn create_organization_with_domain(
    db: &Db,
    name: &OrgName,
    org_type_id: Option<i64>,
    email_domain: Option<&crate::services::grants::EmailDomain>,
) -> Result<(CreatedOrganization, usize), EntitlementError> {
    let mut tx = begin(db, TxKind::Materializing).await?;
    if let Some(d) = email_domain {
        // Before anything else: a grant issued to this domain meanwhile is seen, or sees us.
        tx.lock(&crate::db::keys::AdvisoryKey::ProvisionDomain(d.as_str().to_string())).await?;
    }
    let created = create_organization_tx(&mut tx, name, org_type_id).await?;
    let mut provisioned = 0;
    if let Some(d) = email_domain {
        match store::set_email_domain(tx.conn(), created.organization_id, d.as_str()).await {
            Ok(()) => {}
            Err(e) if crate::db::sqlstate(&e).as_deref() == Some("23505") => {
                return Err(EntitlementError::Invalid(format!(
                    "Another organization has the email domain {} already.",
                    d.as_str()
                )));
            }
            Err(e) => return Err(e.into()),
        }
        provisioned =
            crate::services::grants::provision_domain_grants_tx(&mut tx, created.organization_id, created.pool_id, d)
                .await
                .map_err(|e| match e {
                    crate::services::grants::GrantError::Db(d) => EntitlementError::Db(d),
                    other => EntitlementError::Invalid(other.to_string()),
                })?;
    }
    tx.commit().await?;
    Ok((created, provisioned))
}

/// The same, inside a caller's Materializing transaction.
pub async fn create_organization_tx(
    tx: &mut Tx,
    name: &OrgName,
    org_type_id: Option<i64>,
) -> Result<CreatedOrganization, EntitlementError> {
    let organization_id = match store::insert_organization(tx.conn(), name.as_str(), org_type_id).await {
        Ok(id) => id,
        Err(e) if crate::db::sqlstate(&e).as_deref() == Some("23503") => {
            return Err(EntitlementError::NotFound("organization type"));
        }
        Err(e) => return Err(e.into()),
    };
    let pool_id = store::insert_default_pool(tx.conn(), organization_id).await?;
    let floor_grant_id = reapply_defaults_if_vacant(tx, pool_id, None).await?;
    store::materialize_pool(tx.conn(), pool_id).await?;
    Ok(CreatedOrganization { organization_id, pool_id, floor_grant_id })
}

/// ReapplyDefaultsIfVacant: when the pool holds nothing on its type's default ladder, confer
/// that ladder's rank 0 as a floor grant (ConferGrantTx's insert and core.confer, in SQL).
/// The caller materializes.
pub async fn reapply_defaults_if_vacant(
    tx: &mut Tx,
    pool_id: i64,
    plan_act_id: Option<i64>,
) -> Result<Option<i64>, EntitlementError> {
    Ok(store::reapply_defaults_if_vacant(tx.conn(), pool_id, plan_act_id).await?)
}

pub static CONFER_GRANT_LOCKS: PathLocks = PathLocks {
    path: "Confer a grant (ConferGrantTx)",
    function: "services::entitlements::confer_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The rendezvous, the grant insert, then the pool row inside core.confer, then materialization under \
          the same row.",
};

/// ConferGrant: one grant conferred in a transaction of its own.
#[tracing::instrument(name = "Confer a grant", skip(db, grant), fields(organization_id = ?grant.organization_id, product_id = grant.product_id))]
pub async fn confer_grant(db: &Db, grant: &NewGrant) -> Result<i64, EntitlementError> {
    let mut tx = begin(db, TxKind::Materializing).await?;
    let id = confer_grant_tx(&mut tx, grant).await?;
    tx.commit().await?;
    Ok(id)
}

/// ConferGrantTx: insert the grant, confer it to its organization's pool, materialize. A grant
/// that names no organization yet is inserted and waits.
pub async fn confer_grant_tx(tx: &mut Tx, grant: &NewGrant) -> Result<i64, EntitlementError> {
    let grant_id = store::insert_grant(tx.conn(), grant).await?;
    if store::confer_grant(tx.conn(), grant_id).await?.is_some()
        && let Some(pool) = store::pool_of_grant(tx.conn(), grant_id).await?
    {
        store::materialize_pool(tx.conn(), pool).await?;
    }
    Ok(grant_id)
}

pub static END_CONFERRAL_LOCKS: PathLocks = PathLocks {
    path: "End a conferral and restore the pool",
    function: "services::entitlements::end_conferral",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The pool row first (LockPools), then core.end_conferral, resumption of replaced grants, delivery of \
          displaced subscriptions, the floor and materialization, all under that row: the shared tail of every \
          plan-ending path.",
};

/// What ending a conferral brought back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    pub ended: bool,
    pub resumed_grants: i32,
    pub delivered_subscriptions: i32,
    pub floor_grant_id: Option<i64>,
}

/// End one conferral; then what it displaced comes back (replaced grants resume, displaced
/// subscriptions are delivered), else the floor, and the pool materializes.
#[tracing::instrument(name = "End a conferral", skip(db), fields(conferral_id))]
pub async fn end_conferral(db: &Db, conferral_id: i64, reason: &str) -> Result<Restored, EntitlementError> {
    let mut tx = begin(db, TxKind::Materializing).await?;
    let pool =
        store::pool_of_conferral(tx.conn(), conferral_id).await?.ok_or(EntitlementError::NotFound("conferral"))?;
    store::lock_pools(tx.conn(), &[pool]).await?;
    let ended = store::end_conferral(tx.conn(), conferral_id, reason).await?;
    let restored = restore_pool_tx(&mut tx, pool, ended, None).await?;
    tx.commit().await?;
    Ok(restored)
}

/// After something ended in a pool whose row the caller holds: resumption, delivery, the
/// floor (naming the plan act that made it, when one did), materialization, in that order.
pub async fn restore_pool_tx(
    tx: &mut Tx,
    pool_id: i64,
    ended: bool,
    plan_act: Option<i64>,
) -> Result<Restored, EntitlementError> {
    let (mut resumed_grants, mut delivered_subscriptions) = (0, 0);
    if ended {
        resumed_grants = store::resume_replaced_grants(tx.conn(), pool_id).await?;
        delivered_subscriptions = store::deliver_displaced_subscriptions(tx.conn(), pool_id).await?;
    }
    let floor_grant_id = store::reapply_defaults_if_vacant(tx.conn(), pool_id, plan_act).await?;
    store::materialize_pool(tx.conn(), pool_id).await?;
    Ok(Restored { ended, resumed_grants, delivered_subscriptions, floor_grant_id })
}

/// Suspend or reinstate one subscription's provisions (they keep their ladders), and
/// materialize. `status` is "suspended" or "active".
pub async fn sync_source_status(db: &Db, subscription_id: i64, status: &str) -> Result<i32, EntitlementError> {
    if !matches!(status, "suspended" | "active") {
        return Err(EntitlementError::Invalid(format!("{status:?} is not a source status")));
    }
    let mut tx = begin(db, TxKind::Materializing).await?;
    let pools = store::pools_of_subscription(tx.conn(), subscription_id).await?;
    store::lock_pools(tx.conn(), &pools).await?;
    let changed = store::sync_source_status(tx.conn(), subscription_id, status).await?;
    for p in pools {
        store::materialize_pool(tx.conn(), p).await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Change a conferral's quantity (and end bound), and materialize.
pub async fn update_conferral_bounds(
    db: &Db,
    conferral_id: i64,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> Result<(), EntitlementError> {
    if quantity < 1 {
        return Err(EntitlementError::Invalid("A quantity is at least 1.".into()));
    }
    let mut tx = begin(db, TxKind::Materializing).await?;
    let pool =
        store::pool_of_conferral(tx.conn(), conferral_id).await?.ok_or(EntitlementError::NotFound("conferral"))?;
    store::lock_pools(tx.conn(), &[pool]).await?;
    store::update_conferral_bounds(tx.conn(), conferral_id, quantity, ends_at).await?;
    store::materialize_pool(tx.conn(), pool).await?;
    tx.commit().await?;
    Ok(())
}

pub static MATERIALIZE_POOL_LOCKS: PathLocks = PathLocks {
    path: "Materialize a pool",
    function: "services::entitlements::materialize_pool",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The pool row, then its entitlement rows per resource key in byte order (each insert takes its key's \
          row FOR KEY SHARE through the foreign key, in the order RegisterProviders stamps them).",
};

#[tracing::instrument(name = "Materialize a pool", skip(db))]
pub async fn materialize_pool(db: &Db, pool_id: i64) -> Result<(), EntitlementError> {
    let mut tx = begin(db, TxKind::Materializing).await?;
    store::lock_pools(tx.conn(), &[pool_id]).await?;
    store::materialize_pool(tx.conn(), pool_id).await?;
    tx.commit().await?;
    Ok(())
}

/// A resource key an integration enforces.
#[derive(Debug, Clone, Copy)]
pub struct ProvidedKey {
    pub key: &'static str,
    pub kind: &'static str,
    pub description: &'static str,
}

/// The keys each integration enforces, stamped at boot.
pub const PROVIDERS: &[(&str, &[ProvidedKey])] = &[
    (
        "fedwiki",
        &[
            ProvidedKey { key: "fedwiki.active_sites", kind: "numeric", description: "Active wiki sites" },
            ProvidedKey {
                key: "fedwiki.custom_domain",
                kind: "flag",
                description: "Sites on the organization's own domain",
            },
        ],
    ),
    ("support", &[ProvidedKey { key: "support.priority", kind: "flag", description: "Priority support" }]),
];

pub static REGISTER_PROVIDERS_LOCKS: PathLocks = PathLocks {
    path: "RegisterProviders",
    function: "services::entitlements::register_providers",
    kind: "Plain",
    locks: &[Lock::ResourceKeyRows],
    why: "Keys are stamped in byte order, the order a materialization writes a pool's keys in, so a stamp and \
          an entitlement insert of the same keys wait in one direction.",
};

/// RegisterProviders: every provided key exists and names its provider; keys in byte order.
#[tracing::instrument(name = "RegisterProviders", skip(db))]
pub async fn register_providers(db: &Db) -> Result<usize, EntitlementError> {
    let mut keys: Vec<(&str, ProvidedKey)> =
        PROVIDERS.iter().flat_map(|(provider, keys)| keys.iter().map(move |k| (*provider, *k))).collect();
    keys.sort_by(|a, b| a.1.key.as_bytes().cmp(b.1.key.as_bytes()));
    let mut tx = begin(db, TxKind::Plain).await?;
    for (provider, k) in &keys {
        store::stamp_resource_key_provider(tx.conn(), k.key, k.kind, provider, k.description).await?;
    }
    tx.commit().await?;
    Ok(keys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn organization_names_are_parsed() {
        assert_eq!(OrgName::parse("  Acme ").unwrap().as_str(), "Acme");
        assert!(OrgName::parse("   ").is_err());
        assert!(OrgName::parse(&"x".repeat(201)).is_err());
        assert!(OrgName::parse("a\u{0}b").is_err());
    }
}

crate::deadlock_through_db!(EntitlementError);
