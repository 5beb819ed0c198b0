//! The default change, as the spec orders its locks: T0 (ChangeOrgTypeDefault) under the
//! exclusive rendezvous with the type's row and no pool or obligation row; then listing batches
//! (ListPlanActBatch) and one move per organization (EnactObligation) under the shared
//! rendezvous; failures recorded apart; the last probe (DrainPlanAct); and RetryPlanAct. The
//! listing and moves start inside the request (MaterializingWithin) and a durable job carries on.

use std::time::Instant;

use serde_json::json;

use crate::{
    db::{
        Db, DbError, Tx, TxKind, begin,
        locks::{Lock, PathLocks},
        tx::within,
    },
    ids::{AccountId, LadderId, OrgTypeId, PlanActId, PoolId, ProductId},
    jobs::{Job, JobContext, JobError},
    services::refusal::{ServiceError, change_path},
    states::PlanActKind,
    store::{plan_acts as store, topology},
};

pub const DRAIN_PLAN_ACT: &str = "drain_plan_act";
pub const RESUME_PLAN_ACT_DRAINS: &str = "resume_plan_act_drains";

/// A plan act's listing and moves after the request that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainPlanAct {
    pub plan_act_id: PlanActId,
}

impl Job for DrainPlanAct {
    const KIND: &'static str = DRAIN_PLAN_ACT;
    type Context = ();

    fn dedupe_key(&self) -> Option<String> {
        Some(format!("{DRAIN_PLAN_ACT}:{}", self.plan_act_id))
    }

    // The drain runs for as long as its work takes, far past a lease: the worker renews the
    // lease while it runs, and stops it (its move tasks with it, as their JoinSet is dropped) if
    // it is ever lost, so one drain never runs on two workers at once. It does not check the
    // lease itself; a move or settlement in flight when it stops is guarded by its own
    // obligation row, so it is applied once either way.
    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        drain_plan_act(&job.db, self.plan_act_id, None).await?;
        Ok(())
    }
}

/// The schedule that enqueues the drains of acts still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumePlanActDrains {}

impl Job for ResumePlanActDrains {
    const KIND: &'static str = RESUME_PLAN_ACT_DRAINS;
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        resume_drains(&job.db).await?;
        Ok(())
    }
}
/// Organizations one listing batch writes.
pub const LISTING_BATCH: i32 = 500;
/// Moves one drain runs at once, each over its own share of pool ids.
pub const MOVE_PARALLELISM: i64 = 4;
/// Moves the job's drain sends in one round trip, each its own transaction: the round trip and
/// the console's part of a move are a fifth of a move's cost when sent one by one.
pub const MOVE_BATCH: usize = 8;

pub use super::topology::Disposition;

pub static CHANGE_DEFAULT_T0_LOCKS: PathLocks = PathLocks {
    path: "ChangeOrgTypeDefault (T0)",
    function: "services::plan_acts::change_org_type_default",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive, Lock::OrgTypeRow],
    why: "The exclusive rendezvous, then the org type's row (LockOrgType, FOR NO KEY UPDATE), the reads, the type's \
          update, the act with its reached type, and, with no disposition, the gate (core.outgoing_default_exists). \
          No pool or obligation row, so its hold does not grow with the number of organizations.",
};

/// ChangeOrgTypeDefault: T0 in a transaction of its own, then the listing and moves for as long
/// as `within` allows (inside the request that made the act); a durable job carries on.
#[tracing::instrument(
    name = "ChangeOrgTypeDefault",
    skip(db, reason),
    fields(org_type_id = org_type_id.0, ladder_id = ladder_id.0, disposition = ?disposition, actor = ?actor, within = ?within)
)]
pub async fn change_org_type_default(
    db: &Db,
    org_type_id: OrgTypeId,
    ladder_id: LadderId,
    disposition: Option<Disposition>,
    actor: Option<AccountId>,
    reason: &str,
    within: Option<Instant>,
) -> Result<PlanActId, ServiceError> {
    change_path(async {
        let mut tx = crate::db::begin_for(db, TxKind::RuleChange, &CHANGE_DEFAULT_T0_LOCKS).await?;
        // T0's reads and writes; a refusal is rolled back before it is answered.
        let t0: Result<_, ServiceError> = async {
            let Some((current,)) = store::lock_org_type(tx.conn(), org_type_id).await? else {
                return Err(ServiceError::NotFound("organization type"));
            };
            decide_default_target(&mut tx, current, ladder_id).await?;
            // The gate: without a disposition, no organization may hold the outgoing default's floor.
            if let (None, Some(from)) = (disposition, current)
                && store::outgoing_default_exists(tx.conn(), org_type_id, from, None).await?
            {
                return Err(ServiceError::invalid("disposition", gate_message("the current default's")));
            }
            let type_name = store::org_type_name(tx.conn(), org_type_id).await?;
            let from_name = match current {
                Some(l) => topology::names(tx.conn(), l, None).await?.0,
                None => String::new(),
            };
            let act = topology::record_plan_act(
                tx.conn(),
                PlanActKind::DefaultChange,
                disposition.map(Disposition::as_str),
                actor,
                reason.trim(),
                Some(ladder_id),
                None,
                None,
                Some(org_type_id),
                json!({
                    "org_type_id": org_type_id,
                    "from_ladder_id": current,
                    "to_ladder_id": ladder_id,
                    "organization_type": type_name,
                    "from_ladder": from_name,
                }),
            )
            .await?;
            store::set_default(tx.conn(), org_type_id, ladder_id, act).await?;
            store::insert_reached_type(tx.conn(), act, org_type_id, current, None).await?;
            Ok(act)
        }
        .await;
        let act = match t0 {
            Ok(act) => act,
            Err(e) => return tx.end(Err(e)).await,
        };
        start_moves(db, tx, act, &[org_type_id], within).await?;
        Ok(act)
    })
    .await
}

/// After T0: when a reached type has organizations the act runs and its drain job is queued in
/// T0's transaction; after the commit the listing and moves go on for as long as `within`
/// allows (inside the request that made the act), and the job finishes what is left.
async fn start_moves(
    db: &Db,
    mut tx: Tx,
    act: PlanActId,
    types: &[OrgTypeId],
    within: Option<Instant>,
) -> Result<(), DbError> {
    let queued = async {
        let mut reaches = false;
        for t in types {
            reaches = reaches || store::type_has_organizations(tx.conn(), *t).await?;
        }
        if reaches {
            store::set_running(tx.conn(), act).await?;
            enqueue_drain(&mut tx, act).await?;
        }
        Ok::<_, DbError>(reaches)
    }
    .await;
    // T0 commits here, or a failure is rolled back before it is answered.
    let reaches = tx.end(queued).await?;
    if let (true, Some(deadline)) = (reaches, within) {
        match drain_plan_act(db, act, Some(deadline)).await {
            Ok(_) | Err(DbError::DeadlinePassed | DbError::LockNotAvailable | DbError::Deadlock(_)) => {}
            Err(e) => tracing::warn!(plan_act_id = act.0, error = %e, "the in-request drain stopped"),
        }
    }
    Ok(())
}

/// A reorder of one ladder's tiers as the operator asks for it.
#[derive(Debug, Clone)]
pub struct ReorderTiers {
    pub ladder_id: LadderId,
    /// The ladder's products in their new order, rank 0 first.
    pub order: Vec<ProductId>,
    pub disposition: Option<Disposition>,
    pub reason: String,
    pub actor: Option<AccountId>,
}

/// What an act would reach: the organizations of the types it reaches, how many of them hold the
/// floor it takes away (each migrates or is grandfathered, by the disposition), the rest vacant
/// (nothing to move), and the refusal it would meet.
#[derive(Debug, Clone, Default)]
pub struct ActReach {
    /// The ladder the act is about: a default change's new default, a reorder's ladder.
    pub ladder: String,
    pub types: Vec<String>,
    pub organizations: i64,
    pub holding_floor: i64,
    pub vacant: i64,
    /// The outgoing floor's product, and the floor that replaces it on migrate.
    pub from_floor: Option<String>,
    pub to_floor: Option<String>,
    pub refusal: Option<String>,
}

pub static REORDER_TIERS_T0_LOCKS: PathLocks = PathLocks {
    path: "ReorderTiers (T0)",
    function: "services::plan_acts::reorder_tiers",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive, Lock::OrgTypeRow],
    why: "The exclusive rendezvous, then the ladder's tiers listed and the submitted order reconciled, the names, \
          the renumbering (RenumberTiers), the act, and, only when rank 0 changed, the reached types: each type \
          defaulting to the ladder is recorded and its default transition taken over (the UPDATE's row lock on the \
          type), then, with no disposition, the gate (core.outgoing_default_exists). No pool or obligation row.",
};

/// The reads that decide a reorder: the submitted order against the ladder's tiers, and, when
/// rank 0 changes, the types it reaches and the gate. Returns (old rank 0, new rank 0, types).
async fn decide_reorder(
    tx: &mut Tx,
    r: &ReorderTiers,
) -> Result<(ProductId, ProductId, Vec<(OrgTypeId, String)>), ServiceError> {
    if !topology::ladder_exists(tx.conn(), r.ladder_id).await? {
        return Err(ServiceError::NotFound("ladder"));
    }
    let tiers = topology::tiers_of(tx.conn(), r.ladder_id).await?;
    let mut current: Vec<ProductId> = tiers.iter().map(|t| t.product_id).collect();
    let mut wanted = r.order.clone();
    if current.len() < 2 {
        return Err(ServiceError::invalid_form("This ladder has fewer than two tiers: there is nothing to reorder."));
    }
    let (old0, new0) = (current[0], wanted.first().copied().unwrap_or(ProductId(0)));
    if wanted == current {
        return Err(ServiceError::invalid_form("That is the order the tiers have already."));
    }
    current.sort();
    wanted.sort();
    if wanted != current {
        return Err(ServiceError::invalid_form(format!(
            "Give every tier of the ladder a different rank from 0 to {}, once each.",
            tiers.len() - 1
        )));
    }
    let types = if old0 == new0 { vec![] } else { topology::type_ids_defaulting_to(tx.conn(), r.ladder_id).await? };
    Ok((old0, new0, types))
}

fn gate_message(kind: &str) -> String {
    format!(
        "Organizations hold {kind} floor: choose whether they migrate to the new floor or are grandfathered \
         (keep theirs as a legacy grant)."
    )
}

/// ReorderTiers: T0 renumbers the ladder's tiers under the exclusive rendezvous; when rank 0
/// changed, every organization of the types defaulting to the ladder is moved as by a default
/// change, through the same listing, moves and drain.
#[tracing::instrument(name = "ReorderTiers", skip(db, r), fields(ladder_id = r.ladder_id.0))]
pub async fn reorder_tiers(db: &Db, r: &ReorderTiers, within: Option<Instant>) -> Result<PlanActId, ServiceError> {
    change_path(async {
        let mut tx = crate::db::begin_for(db, TxKind::RuleChange, &REORDER_TIERS_T0_LOCKS).await?;
        // T0's reads and writes; a refusal is rolled back before it is answered.
        let t0: Result<_, ServiceError> = async {
            let (old0, new0, types) = decide_reorder(&mut tx, r).await?;
            let mut order_names = vec![];
            for p in &r.order {
                order_names.push(topology::names(tx.conn(), r.ladder_id, Some(*p)).await?.1);
            }
            let floor_before = topology::names(tx.conn(), r.ladder_id, Some(old0)).await?.1;
            topology::renumber_tiers(tx.conn(), r.ladder_id, &r.order).await?;
            topology::sync_position_ranks(tx.conn(), r.ladder_id).await?;
            let act = topology::record_plan_act(
                tx.conn(),
                PlanActKind::TierReorder,
                r.disposition.map(Disposition::as_str),
                r.actor,
                r.reason.trim(),
                Some(r.ladder_id),
                Some(new0),
                Some(0),
                None,
                json!({
                    "order": order_names.join(", "),
                    "floor_before": floor_before,
                    "types_reached": types.iter().map(|t| t.1.as_str()).collect::<Vec<_>>().join(", "),
                }),
            )
            .await?;
            for (ty, _) in &types {
                store::take_default_ownership(tx.conn(), *ty, act).await?;
                store::insert_reached_type(tx.conn(), act, *ty, Some(r.ladder_id), Some(old0)).await?;
            }
            if r.disposition.is_none() {
                for (ty, _) in &types {
                    if store::outgoing_default_exists(tx.conn(), *ty, r.ladder_id, Some(old0)).await? {
                        return Err(ServiceError::invalid("disposition", gate_message("the ladder's current")));
                    }
                }
            }
            let ids: Vec<OrgTypeId> = types.iter().map(|t| t.0).collect();
            Ok((act, ids))
        }
        .await;
        let (act, ids) = match t0 {
            Ok(t0) => t0,
            Err(e) => return tx.end(Err(e)).await,
        };
        start_moves(db, tx, act, &ids, within).await?;
        Ok(act)
    })
    .await
}

/// The preview of a reorder: read in a plain transaction that writes nothing.
#[tracing::instrument(name = "Preview ReorderTiers", skip_all)]
pub async fn preview_reorder_tiers(db: &Db, r: &ReorderTiers) -> Result<ActReach, ServiceError> {
    let mut tx = begin(db, TxKind::Plain).await?;
    let read: Result<_, ServiceError> = async {
        let (old0, new0, types) = decide_reorder(&mut tx, r).await?;
        let mut reach = ActReach { types: types.iter().map(|t| t.1.clone()).collect(), ..ActReach::default() };
        for (ty, _) in &types {
            let (orgs, holding) = store::floor_reach(tx.conn(), *ty, Some(r.ladder_id), Some(old0)).await?;
            reach.organizations += orgs;
            reach.holding_floor += holding;
        }
        reach.vacant = reach.organizations - reach.holding_floor;
        let (ladder, from_floor) = topology::names(tx.conn(), r.ladder_id, Some(old0)).await?;
        reach.ladder = ladder;
        reach.from_floor = Some(from_floor);
        reach.to_floor = Some(topology::names(tx.conn(), r.ladder_id, Some(new0)).await?.1);
        if r.disposition.is_none() && reach.holding_floor > 0 {
            reach.refusal = Some(gate_message("the ladder's current"));
        }
        Ok(reach)
    }
    .await;
    // Reads only: rolled back however they ended, before the answer.
    tx.rollback().await?;
    read
}

/// The preview of a default change: its reach and refusals, read in a plain transaction.
#[tracing::instrument(name = "Preview ChangeOrgTypeDefault", skip_all, fields(org_type_id = org_type_id.0, ladder_id = ladder_id.0))]
pub async fn preview_default_change(
    db: &Db,
    org_type_id: OrgTypeId,
    ladder_id: LadderId,
    disposition: Option<Disposition>,
) -> Result<ActReach, ServiceError> {
    let mut tx = begin(db, TxKind::Plain).await?;
    let read: Result<_, ServiceError> = async {
        let Some((current,)) = store::org_type_default(tx.conn(), org_type_id).await? else {
            return Err(ServiceError::NotFound("organization type"));
        };
        let to = decide_default_target(&mut tx, current, ladder_id).await?;
        let name = store::org_type_name(tx.conn(), org_type_id).await?;
        let (organizations, holding_floor) = store::floor_reach(tx.conn(), org_type_id, current, None).await?;
        let from_floor = match current {
            Some(l) => match store::rank0_of(tx.conn(), l).await? {
                Some(p) => Some(topology::names(tx.conn(), l, Some(p)).await?.1),
                None => None,
            },
            None => None,
        };
        let (ladder, to_floor) = topology::names(tx.conn(), ladder_id, Some(to)).await?;
        let mut reach = ActReach {
            ladder,
            types: vec![name],
            organizations,
            holding_floor,
            vacant: organizations - holding_floor,
            from_floor,
            to_floor: Some(to_floor),
            refusal: None,
        };
        if disposition.is_none() && holding_floor > 0 {
            reach.refusal = Some(gate_message("the current default's"));
        }
        Ok(reach)
    }
    .await;
    // Reads only: rolled back however they ended, before the answer.
    tx.rollback().await?;
    read
}

/// The reads that decide a default change's target, for T0 and the preview: a ladder that exists,
/// is not the default already and has a floor to give. Returns its rank 0.
async fn decide_default_target(
    tx: &mut Tx,
    current: Option<LadderId>,
    ladder_id: LadderId,
) -> Result<ProductId, ServiceError> {
    if !topology::ladder_exists(tx.conn(), ladder_id).await? {
        return Err(ServiceError::invalid("plan_ladder_id", "Choose a ladder from the list."));
    }
    if current == Some(ladder_id) {
        return Err(ServiceError::invalid("plan_ladder_id", "That ladder is this type's default already."));
    }
    store::rank0_of(tx.conn(), ladder_id)
        .await?
        .ok_or_else(|| ServiceError::invalid("plan_ladder_id", "That ladder has no tiers, so it has no floor to give."))
}

async fn enqueue_drain(tx: &mut Tx, act: PlanActId) -> Result<(), DbError> {
    DrainPlanAct { plan_act_id: act }.enqueue(tx.conn()).await?;
    Ok(())
}

fn kind(within: Option<Instant>) -> TxKind {
    within.map_or(TxKind::Materializing, TxKind::MaterializingWithin)
}

pub static LIST_BATCH_LOCKS: PathLocks = PathLocks {
    path: "ListPlanActBatch",
    function: "services::plan_acts::drain_plan_act",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRowKeyShare, Lock::PlanActObligationRow],
    why: "The shared rendezvous, then core.write_plan_act_obligations: the batch's pool rows FOR KEY SHARE in \
          ascending pool_id (conflicting with a move's FOR UPDATE), the open obligations of earlier acts on those \
          pools FOR UPDATE in the same order (superseded), then the inserts.",
};

pub static ENACT_OBLIGATION_LOCKS: PathLocks = PathLocks {
    path: "EnactObligation",
    function: "services::plan_acts::enact_obligation",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::PlanActObligationRow, Lock::GrantRow],
    why: "The shared rendezvous, then one call to core.enact_plan_act_obligation: the pool row (core.lock_pool), \
          the obligation row (core.lock_plan_act_obligation, which reads the type's owner in the same statement), \
          then the bucket's work under the pool row it holds: the floor's end or a legacy grant, \
          ReapplyDefaultsIfVacant, materialization; then the settlement.",
};

pub static RECORD_MOVE_FAILURE_LOCKS: PathLocks = PathLocks {
    path: "Record a failed move",
    function: "services::plan_acts::drain_plan_act",
    kind: "Plain",
    locks: &[Lock::PlanActObligationRow],
    why: "core.record_plan_act_obligation_failure updates the one obligation row while it is still pending; no \
          rendezvous and no pool row, so it cannot wait in a cycle with a move.",
};

pub static LAST_PROBE_LOCKS: PathLocks = PathLocks {
    path: "DrainPlanAct (last probe)",
    function: "services::plan_acts::drain_plan_act",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PlanActRow],
    why: "The shared rendezvous, the act's row FOR UPDATE (re-checking that nothing is pending, against a Retry), \
          then core.outgoing_default_exists: the walk over the index entries the moves \
          ended happens outside the next T0's exclusive hold.",
};

/// What a drain pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActDrained {
    pub listed: u64,
    pub moved: u64,
    pub failed: u64,
    pub finished: bool,
}

/// DrainPlanAct: list every reached type, move every pending organization, then the last probe
/// and the act is done. With `within`, every transaction is bounded by that deadline.
#[tracing::instrument(name = "DrainPlanAct", skip(db), fields(act = act.0, within = ?within))]
pub async fn drain_plan_act(db: &Db, act: PlanActId, within: Option<Instant>) -> Result<ActDrained, DbError> {
    let mut out = ActDrained::default();
    // Listing: batch after batch; a deadlock between two batches of one act is benign (the next
    // pass lists the batch again).
    loop {
        let types = {
            let mut c = db.read().await?;
            store::types_to_list(&mut c, act).await?
        };
        if types.is_empty() {
            break;
        }
        for t in types {
            let listed = crate::db::tx::within_for(db, kind(within), &LIST_BATCH_LOCKS, async |tx: &mut Tx| {
                Ok::<_, DbError>(store::write_obligations(tx.conn(), act, t, LISTING_BATCH).await?)
            })
            .await;
            match listed {
                Ok(n) => out.listed += n as u64,
                Err(DbError::Deadlock(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }
    // Moves, in partitions that never meet on a pool.
    let mut tasks = tokio::task::JoinSet::new();
    for part in 0..MOVE_PARALLELISM {
        let db = db.clone();
        tasks.spawn(async move { move_part(&db, act, part, within).await });
    }
    while let Some(r) = tasks.join_next().await {
        let (moved, failed) =
            r.map_err(|e| DbError::Sql(sqlx::Error::Protocol(format!("a move task failed: {e}"))))??;
        out.moved += moved;
        out.failed += failed;
    }
    let unfinished = {
        let mut c = db.read().await?;
        store::unfinished(&mut c, act).await?
    };
    if !unfinished {
        // The last probe, then the act is done: under the act's row, re-checked, so a Retry that
        // requeued meanwhile keeps it running.
        out.finished = crate::db::tx::within_for(db, kind(within), &LAST_PROBE_LOCKS, async |tx: &mut Tx| {
            store::lock_act(tx.conn(), act).await?;
            if store::unfinished(tx.conn(), act).await? {
                return Ok(false);
            }
            for (ty, from, product) in store::reached_types(tx.conn(), act).await? {
                if let Some(from) = from {
                    let left = store::outgoing_default_exists(tx.conn(), ty, from, product).await?;
                    tracing::info!(plan_act_id = act.0, org_type_id = ty.0, outgoing_floors_left = left, "last probe");
                }
            }
            Ok::<_, DbError>(store::finish(tx.conn(), act).await?)
        })
        .await?;
    }
    Ok(out)
}

async fn move_part(db: &Db, act: PlanActId, part: i64, within: Option<Instant>) -> Result<(u64, u64), DbError> {
    let (mut moved, mut failed, mut after) = (0, 0, PoolId(0));
    loop {
        let pools = {
            let mut c = db.read().await?;
            store::pending_pools(&mut c, act, part, MOVE_PARALLELISM, after, 500).await?
        };
        let Some(last) = pools.last().copied() else { return Ok((moved, failed)) };
        // A request's drain moves one organization per round trip, each move bounded by what is
        // left of the request's time; the job's sends MOVE_BATCH moves per round trip.
        let batch = if within.is_some() { 1 } else { MOVE_BATCH };
        let mut rest = &pools[..];
        while !rest.is_empty() {
            let run = &rest[..batch.min(rest.len())];
            let (committed, failure) = match within {
                Some(_) => match enact_obligation(db, act, run[0], within).await {
                    Ok(m) => (vec![m], None),
                    Err(e) => (vec![], Some(e)),
                },
                None => enact_obligations(db, act, run).await?,
            };
            moved += committed.iter().filter(|m| **m).count() as u64;
            rest = &rest[committed.len()..];
            match failure {
                None => {}
                // A wait past its bound leaves the obligation pending: the job tries again later
                // (with backoff), and the in-request drain hands over to the job.
                Some(e @ (DbError::DeadlinePassed | DbError::LockNotAvailable | DbError::Deadlock(_))) => {
                    return Err(e);
                }
                Some(e) => {
                    let pool = rest[0];
                    tracing::warn!(plan_act_id = act.0, pool_id = pool.0, error = %e, "a move failed");
                    crate::db::tx::within_for(db, TxKind::Plain, &RECORD_MOVE_FAILURE_LOCKS, async |tx: &mut Tx| {
                        Ok::<_, DbError>(store::record_failure(tx.conn(), act, pool, &e.to_string()).await?)
                    })
                    .await?;
                    failed += 1;
                    rest = &rest[1..];
                }
            }
        }
        after = last;
    }
}

/// EnactObligation for a run of organizations, each move its own transaction as
/// `enact_obligation` runs it, all sent in one round trip (`tx::each_once_for`): whether each
/// committed move moved anyone, in order, and the error of the move that failed, after which
/// none of the run was tried.
#[tracing::instrument(name = "EnactObligation", skip_all, fields(act = act.0, first = pools[0].0, pools = pools.len()))]
async fn enact_obligations(db: &Db, act: PlanActId, pools: &[PoolId]) -> Result<(Vec<bool>, Option<DbError>), DbError> {
    let statements: Vec<String> = pools.iter().map(|p| store::enact_obligation_statement(act, *p)).collect();
    let r = crate::db::tx::each_once_for(db, TxKind::Materializing, &ENACT_OBLIGATION_LOCKS, &statements).await;
    let moved = r.committed.iter().map(|rows| Ok(store::enacted(rows)?.is_some())).collect::<Result<_, DbError>>()?;
    Ok((moved, r.failed))
}

/// EnactObligation: one organization's move, in one call to core.enact_plan_act_obligation (the
/// pool row, the obligation row, the bucket's work, the settlement). False when there was nothing
/// to do (settled already, or no longer pending).
#[tracing::instrument(name = "EnactObligation", skip_all, fields(act = act.0, pool = pool.0))]
pub async fn enact_obligation(db: &Db, act: PlanActId, pool: PoolId, within: Option<Instant>) -> Result<bool, DbError> {
    // The transaction, the call and the commit in one round trip: a drain makes one per
    // organization.
    let rows = crate::db::tx::once_for(
        db,
        kind(within),
        &ENACT_OBLIGATION_LOCKS,
        store::enact_obligation_statement(act, pool),
    )
    .await?;
    Ok(store::enacted(&rows)?.is_some())
}

pub static RETRY_PLAN_ACT_LOCKS: PathLocks = PathLocks {
    path: "RetryPlanAct",
    function: "services::plan_acts::retry_plan_act",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PlanActRow, Lock::PlanActObligationRow],
    why: "The shared rendezvous, the Retry act and its detail row, then core.requeue_plan_act_obligations: the \
          retried act's row FOR UPDATE (against the act's finish), then its failed obligations of the types it still owns FOR UPDATE in ascending pool_id. A Retry that \
          requeues nothing rolls back.",
};

/// RetryPlanAct: the act's failed organizations are pending again, and the drain runs. Not a
/// change path: a lock wait past its bound is said in the Retry's own words (its page's), since
/// what it waited for may be this act's own moves or finish, not another change.
#[tracing::instrument(name = "RetryPlanAct", skip(db), fields(act = act.0, actor = ?actor))]
pub async fn retry_plan_act(db: &Db, act: PlanActId, actor: Option<AccountId>) -> Result<PlanActId, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &RETRY_PLAN_ACT_LOCKS, async |tx: &mut Tx| {
        if topology::plan_act(tx.conn(), act).await?.is_none() {
            return Err(ServiceError::NotFound("plan act"));
        }
        let retry = topology::record_plan_act(
            tx.conn(),
            PlanActKind::Retry,
            None,
            actor,
            "",
            None,
            None,
            None,
            None,
            json!({ "retry_of": act }),
        )
        .await?;
        // Requeuing nothing refuses, and the Retry act recorded above is rolled back with it.
        if store::requeue(tx.conn(), act).await? == 0 {
            return Err(ServiceError::Refused(
                "Nothing to retry: no organization of this act failed, or a later act owns its types.".into(),
            ));
        }
        enqueue_drain(tx, act).await?;
        Ok(retry)
    })
    .await
}

/// The poller: a drain job for every act still running (after a crash or a restart).
#[tracing::instrument(name = "Resume the plan acts' drains", skip_all)]
pub async fn resume_drains(db: &Db) -> Result<usize, DbError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let acts = store::running_acts(tx.conn()).await?;
        for a in &acts {
            enqueue_drain(tx, *a).await?;
        }
        Ok(acts.len())
    })
    .await
}
