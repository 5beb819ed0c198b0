//! The entitlement core's paths: ConferGrantTx, ending a conferral with what follows it, suspension, quantity changes,
//! materialization, and RegisterProviders at boot.

use chrono::{DateTime, Utc};

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
    },
    ids::{ConferralId, GrantId, PlanActId, PoolId, ResourceKey, SubscriptionId},
    services::ServiceError,
    states::KeyKind,
    store::entitlements::{self as store, NewGrant},
};

/// ReapplyDefaultsIfVacant: when the pool holds nothing on its type's default ladder, confer
/// that ladder's rank 0 as a floor grant (ConferGrantTx's insert and core.confer, in SQL).
/// The caller materializes.
pub async fn reapply_defaults_if_vacant(
    tx: &mut Tx,
    pool_id: PoolId,
    plan_act_id: Option<PlanActId>,
) -> Result<Option<GrantId>, ServiceError> {
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
#[tracing::instrument(name = "Confer a grant", skip(db, grant), fields(organization_id = ?grant.organization_id, product_id = grant.product_id.0))]
pub async fn confer_grant(db: &Db, grant: &NewGrant) -> Result<GrantId, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &CONFER_GRANT_LOCKS, async |tx: &mut Tx| {
        let id = confer_grant_tx(tx, grant).await?;
        Ok(id)
    })
    .await
}

/// ConferGrantTx: insert the grant, confer it to its organization's pool, materialize. A grant
/// that names no organization yet is inserted and waits.
pub async fn confer_grant_tx(tx: &mut Tx, grant: &NewGrant) -> Result<GrantId, ServiceError> {
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
    pub floor_grant_id: Option<GrantId>,
}

/// End one conferral; then what it displaced comes back (replaced grants resume, displaced
/// subscriptions are delivered), else the floor, and the pool materializes.
#[tracing::instrument(name = "End a conferral", skip(db), fields(conferral_id))]
pub async fn end_conferral(db: &Db, conferral_id: ConferralId, reason: &str) -> Result<Restored, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &END_CONFERRAL_LOCKS, async |tx: &mut Tx| {
        let pool =
            store::pool_of_conferral(tx.conn(), conferral_id).await?.ok_or(ServiceError::NotFound("conferral"))?;
        store::lock_pools(tx.conn(), &[pool]).await?;
        let ended = store::end_conferral(tx.conn(), conferral_id, reason).await?;
        let restored = restore_pool_tx(tx, pool, ended, None).await?;
        Ok(restored)
    })
    .await
}

/// After something ended in a pool whose row the caller holds: resumption, delivery, the
/// floor (naming the plan act that made it, when one did), materialization, in that order.
pub async fn restore_pool_tx(
    tx: &mut Tx,
    pool_id: PoolId,
    ended: bool,
    plan_act: Option<PlanActId>,
) -> Result<Restored, ServiceError> {
    let (mut resumed_grants, mut delivered_subscriptions) = (0, 0);
    if ended {
        resumed_grants = store::resume_replaced_grants(tx.conn(), pool_id).await?;
        delivered_subscriptions = store::deliver_displaced_subscriptions(tx.conn(), pool_id).await?;
    }
    let floor_grant_id = store::reapply_defaults_if_vacant(tx.conn(), pool_id, plan_act).await?;
    store::materialize_pool(tx.conn(), pool_id).await?;
    Ok(Restored { ended, resumed_grants, delivered_subscriptions, floor_grant_id })
}

pub static SYNC_SOURCE_STATUS_LOCKS: PathLocks = PathLocks {
    path: "SyncSourceStatus",
    function: "services::entitlements::sync_source_status",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The pool rows of every pool holding a provision of the subscription (LockPools, ascending), then \
          core.sync_source_status and each pool's materialization under them.",
};

/// Suspend or reinstate one subscription's provisions (they keep their ladders), and
/// materialize. `status` is "suspended" or "active".
#[tracing::instrument(name = "SyncSourceStatus", skip_all, fields(subscription_id = subscription_id.0))]
pub async fn sync_source_status(db: &Db, subscription_id: SubscriptionId, status: &str) -> Result<i32, ServiceError> {
    if !matches!(status, "suspended" | "active") {
        return Err(ServiceError::invalid("status", format!("{status:?} is not a source status")));
    }
    crate::db::tx::within_for(db, TxKind::Materializing, &SYNC_SOURCE_STATUS_LOCKS, async |tx: &mut Tx| {
        let pools = store::pools_of_subscription(tx.conn(), subscription_id).await?;
        store::lock_pools(tx.conn(), &pools).await?;
        let changed = store::sync_source_status(tx.conn(), subscription_id, status).await?;
        for p in pools {
            store::materialize_pool(tx.conn(), p).await?;
        }
        Ok(changed)
    })
    .await
}

pub static UPDATE_CONFERRAL_BOUNDS_LOCKS: PathLocks = PathLocks {
    path: "UpdateConferralBounds",
    function: "services::entitlements::update_conferral_bounds",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The conferral's pool row (LockPools), then core.update_conferral_bounds and materialization under it.",
};

/// Change a conferral's quantity (and end bound), and materialize.
#[tracing::instrument(name = "UpdateConferralBounds", skip_all, fields(conferral_id = conferral_id.0))]
pub async fn update_conferral_bounds(
    db: &Db,
    conferral_id: ConferralId,
    quantity: i32,
    ends_at: Option<DateTime<Utc>>,
) -> Result<(), ServiceError> {
    if quantity < 1 {
        return Err(ServiceError::invalid("quantity", "A quantity is at least 1."));
    }
    crate::db::tx::within_for(db, TxKind::Materializing, &UPDATE_CONFERRAL_BOUNDS_LOCKS, async |tx: &mut Tx| {
        let pool =
            store::pool_of_conferral(tx.conn(), conferral_id).await?.ok_or(ServiceError::NotFound("conferral"))?;
        store::lock_pools(tx.conn(), &[pool]).await?;
        store::update_conferral_bounds(tx.conn(), conferral_id, quantity, ends_at).await?;
        store::materialize_pool(tx.conn(), pool).await?;
        Ok(())
    })
    .await
}

pub static MATERIALIZE_POOL_LOCKS: PathLocks = PathLocks {
    path: "Materialize a pool",
    function: "services::entitlements::materialize_pool",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow],
    why: "The pool row, then its entitlement rows per resource key in byte order (each insert takes its key's \
          row FOR KEY SHARE through the foreign key, in the order RegisterProviders stamps them).",
};

#[tracing::instrument(name = "Materialize a pool", skip(db), fields(pool_id = pool_id.0))]
pub async fn materialize_pool(db: &Db, pool_id: PoolId) -> Result<(), ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &MATERIALIZE_POOL_LOCKS, async |tx: &mut Tx| {
        store::lock_pools(tx.conn(), &[pool_id]).await?;
        store::materialize_pool(tx.conn(), pool_id).await?;
        Ok(())
    })
    .await
}

/// A resource key an integration enforces.
#[derive(Debug, Clone, Copy)]
pub struct ProvidedKey {
    pub key: &'static str,
    pub kind: KeyKind,
    pub description: &'static str,
}

/// The keys each integration enforces, stamped at boot.
pub const PROVIDERS: &[(&str, &[ProvidedKey])] = &[
    (
        "fedwiki",
        &[
            ProvidedKey { key: "fedwiki.active_sites", kind: KeyKind::Numeric, description: "Active wiki sites" },
            ProvidedKey {
                key: "fedwiki.custom_domain",
                kind: KeyKind::Flag,
                description: "Sites on the organization's own domain",
            },
        ],
    ),
    ("support", &[ProvidedKey { key: "support.priority", kind: KeyKind::Flag, description: "Priority support" }]),
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
pub async fn register_providers(db: &Db) -> Result<usize, ServiceError> {
    let mut keys: Vec<(&str, ProvidedKey)> =
        PROVIDERS.iter().flat_map(|(provider, keys)| keys.iter().map(move |k| (*provider, *k))).collect();
    keys.sort_by(|a, b| a.1.key.as_bytes().cmp(b.1.key.as_bytes()));
    crate::db::tx::within_for(db, TxKind::Plain, &REGISTER_PROVIDERS_LOCKS, async |tx: &mut Tx| {
        for (provider, k) in &keys {
            store::stamp_resource_key_provider(tx.conn(), &ResourceKey::from(k.key), k.kind, provider, k.description)
                .await?;
        }
        Ok(keys.len())
    })
    .await
}
