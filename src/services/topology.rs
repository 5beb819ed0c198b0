//! The tier topology's paths that this console has so far: the tier add (AddTier) and the tier
//! delete without holders (DeleteTier), each a plan act under the exclusive rendezvous, and the
//! ladders' display order (ReorderPlanLadders, not a plan act).

use std::collections::BTreeMap;

use serde_json::json;

use crate::{
    db::{
        Db, Tx, TxKind, begin,
        locks::{Lock, PathLocks},
    },
    ids::{AccountId, LadderId, PlanActId, PoolId, ProductId},
    services::refusal::{ServiceError, change_path},
    states::{GrantKind, GrantStatus, PlanActKind},
    store::{entitlements as ent, grants, topology as store},
};

/// Above this many holding organizations a tier add (or removal) is refused: it would hold the
/// exclusive rendezvous too long.
pub const DEFAULT_HOLDER_CAP: i64 = 10_000;

/// How a plan act treats the organizations it reaches: moves them (migrate) or leaves them on
/// what they hold (grandfather). Tier removals and default changes both take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    Migrate,
    Grandfather,
}

impl Disposition {
    pub fn parse(s: &str) -> Result<Option<Disposition>, String> {
        match s.trim() {
            "" => Ok(None),
            "migrate" => Ok(Some(Disposition::Migrate)),
            "grandfather" => Ok(Some(Disposition::Grandfather)),
            other => Err(format!("“{other}” is not a disposition: choose migrate or grandfather.")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Migrate => "migrate",
            Disposition::Grandfather => "grandfather",
        }
    }
}

/// The topology's constraints whose violation is the operator's input, by name: the field and
/// what to say.
fn violated(constraint: &str) -> Option<(&'static str, String)> {
    match constraint {
        // The trigger core.refuse_tier_product_without_set raises under this name.
        "plan_ladder_tiers_product_has_set" => {
            Some(("product_id", "That product has no entitlement set, so it cannot be a tier.".into()))
        }
        _ => None,
    }
}

/// A tier add as the operator asks for it.
#[derive(Debug, Clone)]
pub struct AddTier {
    pub ladder_id: LadderId,
    pub product_id: ProductId,
    /// 1..=top; rank 0 (the floor) changes only by a reorder or a default change.
    pub rank: Option<i32>,
    pub reason: String,
    pub actor: Option<AccountId>,
}

/// What a tier add would reach, read without locks (the preview), or did (the act).
#[derive(Debug, Clone)]
pub struct TierAddReach {
    pub rank: i32,
    pub holders: i64,
    pub collisions: i64,
    pub colliding: Vec<String>,
    pub refusal: Option<String>,
}

pub static ADD_TIER_LOCKS: PathLocks = PathLocks {
    path: "AddTier",
    function: "services::topology::add_tier",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive, Lock::PoolRow, Lock::ProductRowShare],
    why: "The exclusive rendezvous (core.confer reads a ladder's ranks and a product's shape in separate \
          statements), the reads that decide the add, the pool row of every pool holding the product (LockPools, \
          ascending), the act, then the tier insert whose trigger takes the product row FOR SHARE to the commit; \
          then each holder's conferrals align in creation order and the pool materializes.",
};

/// The reads that decide a tier add, in the caller's transaction.
async fn decide_add(tx: &mut Tx, a: &AddTier, holder_cap: i64) -> Result<(TierAddReach, Vec<PoolId>), ServiceError> {
    if !store::ladder_exists(tx.conn(), a.ladder_id).await? {
        return Err(ServiceError::NotFound("ladder"));
    }
    let tiers = store::tiers_of(tx.conn(), a.ladder_id).await?;
    let top = tiers.len() as i32;
    let rank = a.rank.unwrap_or(top);
    if rank == 0 && !tiers.is_empty() {
        return Err(ServiceError::invalid(
            "rank",
            "Rank 0 is the ladder's floor; a new tier goes at rank 1 or above (a floor changes by a reorder).",
        ));
    }
    if rank < 0 || rank > top {
        return Err(ServiceError::invalid("rank", format!("The rank must be from 1 to {top}.")));
    }
    match store::product_facts(tx.conn(), a.product_id).await? {
        None => return Err(ServiceError::invalid("product_id", "That product does not exist.")),
        Some((false, _)) => return Err(ServiceError::invalid("product_id", "That product is not published.")),
        Some((_, false)) => {
            return Err(ServiceError::invalid(
                "product_id",
                "That product has no entitlement set, so it cannot be a tier.",
            ));
        }
        Some(_) => {}
    }
    if tiers.iter().any(|t| t.product_id == a.product_id) {
        return Err(ServiceError::invalid("product_id", "That product is a tier of this ladder already."));
    }
    let pools = store::pools_holding_product(tx.conn(), a.product_id).await?;
    let (collisions, colliding) = store::tier_add_collisions(tx.conn(), a.ladder_id, a.product_id, 10).await?;
    let holders = pools.len() as i64;
    let refusal = if holders > holder_cap {
        Some(format!("{holders} organizations hold this product, more than the {holder_cap} one act may move."))
    } else if collisions > 0 {
        Some(format!(
            "{collisions} organization{} holding this product already hold a plan on this ladder (or hold the product twice).",
            if collisions == 1 { "" } else { "s" }
        ))
    } else {
        None
    };
    Ok((TierAddReach { rank, holders, collisions, colliding, refusal }, pools))
}

/// The preview: what the add would reach and meet, read in a plain transaction that writes nothing.
#[tracing::instrument(name = "Preview AddTier", skip_all, fields(holder_cap = holder_cap))]
pub async fn preview_add_tier(db: &Db, a: &AddTier, holder_cap: i64) -> Result<TierAddReach, ServiceError> {
    let mut tx = begin(db, TxKind::Plain).await?;
    let decided = decide_add(&mut tx, a, holder_cap).await;
    tx.rollback().await?;
    Ok(decided?.0)
}

/// AddTier: the product becomes a tier of the ladder at the rank; every organization holding it
/// gains the ladder's position.
#[tracing::instrument(name = "AddTier", skip(db, a), fields(ladder_id = a.ladder_id.0, product_id = a.product_id.0))]
pub async fn add_tier(db: &Db, a: &AddTier, holder_cap: i64) -> Result<(PlanActId, TierAddReach), ServiceError> {
    change_path(crate::db::tx::within_for(db, TxKind::RuleChange, &ADD_TIER_LOCKS, async |tx: &mut Tx| {
        let (reach, pools) = decide_add(tx, a, holder_cap).await?;
        if let Some(r) = &reach.refusal {
            return Err(ServiceError::Refused(r.clone()));
        }
        ent::lock_pools(tx.conn(), &pools).await?;
        let act = store::record_plan_act(
            tx.conn(),
            PlanActKind::TierAdd,
            None,
            a.actor,
            &a.reason,
            Some(a.ladder_id),
            Some(a.product_id),
            Some(reach.rank),
            None,
            json!({ "holders": reach.holders }),
        )
        .await?;
        store::shift_ranks(tx.conn(), a.ladder_id, reach.rank, 1).await?;
        store::insert_tier(tx.conn(), a.ladder_id, reach.rank, a.product_id)
            .await
            .map_err(|e| ServiceError::from_constraint(e, violated))?;
        store::sync_position_ranks(tx.conn(), a.ladder_id).await?;
        for pool in &pools {
            for c in store::holding_conferrals_of(tx.conn(), *pool, a.product_id).await? {
                ent::align_conferral_shape(tx.conn(), c).await?;
            }
            ent::materialize_pool(tx.conn(), *pool).await?;
        }
        Ok((act, reach))
    }))
    .await
}

pub static DELETE_TIER_LOCKS: PathLocks = PathLocks {
    path: "DeleteTier",
    function: "services::topology::delete_tier",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive],
    why: "The exclusive rendezvous, then the reads that decide the delete (the tier's live holders, the ladder's \
          tiers, the org types); no pool lock: a tier with no live holder has no pool to reconcile, and the \
          exclusive rendezvous keeps any conferral from placing a position on it between the count and the delete.",
};

/// DeleteTier: a tier nobody holds leaves its ladder; the ranks above it close the gap.
#[tracing::instrument(
    name = "DeleteTier",
    skip(db),
    fields(ladder_id = ladder_id.0, rank = rank, actor = ?actor, reason = reason)
)]
pub async fn delete_tier(
    db: &Db,
    ladder_id: LadderId,
    rank: i32,
    actor: Option<AccountId>,
    reason: &str,
) -> Result<PlanActId, ServiceError> {
    change_path(crate::db::tx::within_for(db, TxKind::RuleChange, &DELETE_TIER_LOCKS, async |tx: &mut Tx| {
        if !store::ladder_exists(tx.conn(), ladder_id).await? {
            return Err(ServiceError::NotFound("ladder"));
        }
        let tiers = store::tiers_of(tx.conn(), ladder_id).await?;
        let Some(tier) = tiers.iter().find(|t| t.rank == rank) else { return Err(ServiceError::NotFound("tier")) };
        let holders = store::tier_holders(tx.conn(), ladder_id, tier.product_id).await?;
        if holders > 0 {
            return Err(ServiceError::Refused(format!(
                "{holders} organization{} hold this tier; remove it with a disposition instead.",
                if holders == 1 { "" } else { "s" }
            )));
        }
        // LastTierRefusal: a ladder an org type defaults to keeps a tier (its floor).
        let defaulting = store::types_defaulting_to(tx.conn(), ladder_id).await?;
        if tiers.len() == 1 && !defaulting.is_empty() {
            return Err(ServiceError::Refused(last_tier_refusal(&defaulting)));
        }
        let act = store::record_plan_act(
            tx.conn(),
            PlanActKind::TierDelete,
            None,
            actor,
            reason,
            Some(ladder_id),
            Some(tier.product_id),
            Some(rank),
            None,
            json!({}),
        )
        .await?;
        store::delete_tier(tx.conn(), ladder_id, rank).await?;
        store::shift_ranks(tx.conn(), ladder_id, rank + 1, -1).await?;
        store::sync_position_ranks(tx.conn(), ladder_id).await?;
        Ok(act)
    }))
    .await
}

/// A tier removal as the operator asks for it.
#[derive(Debug, Clone)]
pub struct RemoveTier {
    pub ladder_id: LadderId,
    pub rank: i32,
    /// What happens to the tier's incumbents: required when the tier has any.
    pub disposition: Option<Disposition>,
    pub reason: String,
    pub actor: Option<AccountId>,
}

/// What a tier removal would reach (the preview) or did (the act).
#[derive(Debug, Clone)]
pub struct TierRemovalReach {
    pub ladder: String,
    pub product: String,
    pub product_id: ProductId,
    /// Organizations holding the tier now: each migrates or is grandfathered.
    pub holders: i64,
    /// The product that becomes (or stays) the ladder's floor, when the removal leaves one.
    pub floor_after: Option<String>,
    pub refusal: Option<String>,
    /// The refusal is the gate: the tier has holders and no disposition was chosen.
    pub needs_disposition: bool,
}

pub static REMOVE_TIER_LOCKS: PathLocks = PathLocks {
    path: "RemoveTier",
    function: "services::topology::remove_tier",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive, Lock::PoolRow, Lock::GrantRow],
    why: "The exclusive rendezvous, the reads that decide the removal (CountLiveTierHolders, the ladder's tiers, \
          the org types, the names, the holders) before any pool row, then every holder's pool row (LockPools, \
          ascending) and the holders again under the locks; the act, the tier delete and the renumbering; then per \
          pool in the same order the incumbents end (their grants end), a grandfathered incumbent's legacy \
          grant, or on migrate resumption and the floor, then materialization.",
};

/// TierRemovalRefusal and the reads behind it, in the caller's transaction.
async fn decide_removal(
    tx: &mut Tx,
    r: &RemoveTier,
    holder_cap: i64,
) -> Result<(TierRemovalReach, Vec<PoolId>), ServiceError> {
    if !store::ladder_exists(tx.conn(), r.ladder_id).await? {
        return Err(ServiceError::NotFound("ladder"));
    }
    let tiers = store::tiers_of(tx.conn(), r.ladder_id).await?;
    let Some(tier) = tiers.iter().find(|t| t.rank == r.rank) else { return Err(ServiceError::NotFound("tier")) };
    let holders = store::tier_holders(tx.conn(), r.ladder_id, tier.product_id).await?;
    let defaulting = store::types_defaulting_to(tx.conn(), r.ladder_id).await?;
    let (ladder, product) = store::names(tx.conn(), r.ladder_id, Some(tier.product_id)).await?;
    let floor_after = match tiers.iter().find(|t| t.product_id != tier.product_id) {
        Some(next) => Some(store::names(tx.conn(), r.ladder_id, Some(next.product_id)).await?.1),
        None => None,
    };
    // TierRemovalRefusal, in this order: the last tier a type defaults to, the cap, the gate.
    let (refusal, needs_disposition) = if tiers.len() == 1 && !defaulting.is_empty() {
        (Some(last_tier_refusal(&defaulting)), false)
    } else if holders > holder_cap {
        (Some(format!("{holders} organizations hold this tier, more than the {holder_cap} one act may move.")), false)
    } else if holders > 0 && r.disposition.is_none() {
        let m = format!(
            "{} this tier: choose whether {} (to the ladder's floor) or {} grandfathered (keep it as a legacy grant).",
            count(holders, "organization holds", "organizations hold"),
            if holders == 1 { "it migrates" } else { "they migrate" },
            if holders == 1 { "is" } else { "are" },
        );
        (Some(m), true)
    } else {
        (None, false)
    };
    let pools = match refusal {
        None => store::tier_incumbent_pools(tx.conn(), r.ladder_id, tier.product_id).await?,
        Some(_) => vec![],
    };
    let reach = TierRemovalReach {
        ladder,
        product,
        product_id: tier.product_id,
        holders,
        floor_after,
        refusal,
        needs_disposition,
    };
    Ok((reach, pools))
}

fn count(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn last_tier_refusal(defaulting: &[String]) -> String {
    format!(
        "This is the only tier of a ladder that {} default{} to; change their default first.",
        defaulting.join(", "),
        if defaulting.len() == 1 { "s" } else { "" }
    )
}

/// The preview of a tier removal: read in a plain transaction that writes nothing.
#[tracing::instrument(name = "Preview RemoveTier", skip_all, fields(holder_cap = holder_cap))]
pub async fn preview_remove_tier(db: &Db, r: &RemoveTier, holder_cap: i64) -> Result<TierRemovalReach, ServiceError> {
    let mut tx = begin(db, TxKind::Plain).await?;
    let decided = decide_removal(&mut tx, r, holder_cap).await;
    tx.rollback().await?;
    Ok(decided?.0)
}

/// RemoveTier: the tier leaves its ladder and the ranks above close the gap; each incumbent ends
/// and either migrates (the ladder's floor, when its type defaults to the ladder) or is
/// grandfathered (a legacy grant of the product, off the ladder).
#[tracing::instrument(name = "RemoveTier", skip(db, r), fields(ladder_id = r.ladder_id.0, rank = r.rank))]
pub async fn remove_tier(
    db: &Db,
    r: &RemoveTier,
    holder_cap: i64,
) -> Result<(PlanActId, TierRemovalReach), ServiceError> {
    change_path(crate::db::tx::within_for(db, TxKind::RuleChange, &REMOVE_TIER_LOCKS, async |tx: &mut Tx| {
        let (reach, pools) = decide_removal(tx, r, holder_cap).await?;
        if let Some(m) = &reach.refusal {
            return Err(if reach.needs_disposition {
                ServiceError::invalid("disposition", m.clone())
            } else {
                ServiceError::Refused(m.clone())
            });
        }
        ent::lock_pools(tx.conn(), &pools).await?;
        // Under the locks: the holders are what they were (the exclusive rendezvous kept conferrals out).
        let pools = store::tier_incumbent_pools(tx.conn(), r.ladder_id, reach.product_id).await?;
        let disposition = r.disposition.unwrap_or(Disposition::Migrate);
        let act = store::record_plan_act(
            tx.conn(),
            PlanActKind::TierRemoval,
            r.disposition.map(Disposition::as_str),
            r.actor,
            r.reason.trim(),
            Some(r.ladder_id),
            Some(reach.product_id),
            Some(r.rank),
            None,
            json!({ "holders": pools.len() }),
        )
        .await?;
        store::delete_tier(tx.conn(), r.ladder_id, r.rank).await?;
        store::shift_ranks(tx.conn(), r.ladder_id, r.rank + 1, -1).await?;
        store::sync_position_ranks(tx.conn(), r.ladder_id).await?;
        let why = format!("tier {} removed from {} by plan act #{act}", reach.product, reach.ladder);
        for pool in &pools {
            let incumbents = store::incumbents_of(tx.conn(), *pool, r.ladder_id, reach.product_id).await?;
            let org = incumbents.first().map(|i| i.organization_id);
            let mut legacy = vec![];
            for i in &incumbents {
                let reason = if disposition == Disposition::Migrate { "tier_removed" } else { "grandfathered" };
                ent::end_conferral(tx.conn(), i.conferral_id, reason).await?;
                // core.end_conferral ended its grant too; the grant's history says why.
                if let Some(g) = i.grant_id {
                    grants::record_event(
                        tx.conn(),
                        g,
                        Some(i.organization_id),
                        "ended",
                        r.actor,
                        &why,
                        json!({ "plan_act_id": act }),
                    )
                    .await?;
                }
                if disposition == Disposition::Grandfather {
                    let g = ent::insert_grant(
                        tx.conn(),
                        &ent::NewGrant {
                            organization_id: Some(i.organization_id),
                            product_id: reach.product_id,
                            quantity: i.quantity,
                            kind: GrantKind::Legacy,
                            status: GrantStatus::Active,
                            // The incumbent's own window: an end that has come meanwhile is for the expiry
                            // sweep to act on, as it would have on the incumbent.
                            starts_at: Some(i.starts_at),
                            ends_at: i.ends_at,
                            reason: format!("grandfathered: {why}"),
                            created_by: r.actor,
                            plan_act_id: Some(act),
                            provision_domain: None,
                        },
                    )
                    .await?;
                    grants::record_event(
                        tx.conn(),
                        g,
                        Some(i.organization_id),
                        "grandfathered",
                        r.actor,
                        &why,
                        json!({ "plan_act_id": act }),
                    )
                    .await?;
                    legacy.push(g);
                }
            }
            // The positions that remain carry the new ranks already (core.sync_position_ranks); a
            // legacy grant takes the product's shape as it is now, off this ladder.
            for g in legacy {
                ent::confer_grant(tx.conn(), g).await?;
            }
            if disposition == Disposition::Migrate {
                // What the incumbents displaced comes back, then the floor where the ladder is the
                // type's default; a grandfathered holder keeps what it had, so neither applies.
                ent::resume_replaced_grants(tx.conn(), *pool).await?;
                ent::deliver_displaced_subscriptions(tx.conn(), *pool).await?;
                ent::reapply_defaults_if_vacant(tx.conn(), *pool, Some(act)).await?;
            }
            ent::materialize_pool(tx.conn(), *pool).await?;
            if let Some(org) = org {
                grants::request_pool_subscription_reconciles(tx.conn(), org, "tier_removed").await?;
            }
        }
        Ok((act, reach))
    }))
    .await
}

pub static REORDER_PLAN_LADDERS_LOCKS: PathLocks = PathLocks {
    path: "ReorderPlanLadders",
    function: "services::topology::reorder_plan_ladders",
    kind: "Plain",
    locks: &[Lock::PlanLadderRows],
    why: "Every ladder row FOR NO KEY UPDATE in ascending id first (LockPlanLadderOrder), so a second reorder waits \
          and writes against the order the first committed; it does not conflict with the FOR KEY SHARE a tier, a \
          position or an org type's default takes through its foreign key.",
};

/// ReorderPlanLadders: `positions` (ladder id → 1-based position) must name every ladder once.
#[tracing::instrument(name = "ReorderPlanLadders", skip(db, positions))]
pub async fn reorder_plan_ladders(db: &Db, positions: &BTreeMap<LadderId, i32>) -> Result<usize, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Plain, &REORDER_PLAN_LADDERS_LOCKS, async |tx: &mut Tx| {
        let current = store::lock_plan_ladder_order(tx.conn()).await?;
        let ids: Vec<LadderId> = current.iter().map(|(id, _)| *id).collect();
        let mut wanted: Vec<i32> = positions.values().copied().collect();
        wanted.sort();
        let one_each = (1..=ids.len() as i32).collect::<Vec<_>>() == wanted;
        if positions.keys().copied().collect::<Vec<_>>() != ids || !one_each {
            return Err(ServiceError::invalid_form(format!(
                "Give every ladder a different position from 1 to {}, once each.",
                ids.len()
            )));
        }
        let mut changed = 0;
        for (id, old) in current {
            let new = positions[&id] - 1;
            if new != old {
                store::set_sort_order(tx.conn(), id, new).await?;
                changed += 1;
            }
        }
        Ok(changed)
    })
    .await
}
