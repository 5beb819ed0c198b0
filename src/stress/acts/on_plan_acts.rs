//! The plan acts' paths, as acts.

use super::*;

/// The refusals the spec names count as refused: "another change is in progress" (a lock wait
/// past its bound under the exclusive rendezvous, which `change_path` makes that refusal; a
/// Retry, not a change path, keeps it as the lock wait its page words itself; the server's count
/// of deadlocks still catches any deadlock), and the act's own reads (`Refused`: the
/// cap, collisions, holders, the last tier; `Invalid`: the form's checks against what the act
/// found). A tier gone from the rank the task read (a reorder or a removal came between) is
/// refused too. Any other missing row and any database error are failures.
pub(in crate::stress) fn topology_outcome<T>(r: Result<T, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            e @ (ServiceError::Invalid(_)
            | ServiceError::Refused(_)
            | ServiceError::ChangeInProgress
            | ServiceError::Db(DbError::LockNotAvailable)),
        )
        | Err(e @ ServiceError::NotFound("tier")) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(e @ ServiceError::NotFound(_)) => Err(Failure::Error(e.to_string())),
        // None of these paths calls Stripe: a remote failure here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(e.to_string())),
        Err(ServiceError::Db(e)) => Err(e.into()),
    }
}

/// The stress ladder's tiers now: (rank, product), by rank.
pub(in crate::stress) async fn stress_tiers(ctx: &Ctx) -> Result<Vec<(i32, ProductId)>, Failure> {
    Ok(sqlx::query_as("SELECT rank, product_id FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 ORDER BY rank")
        .bind(ctx.fx.stress_ladder)
        .fetch_all(&ctx.db.pool)
        .await?)
}

pub(in crate::stress) fn tier_name(ctx: &Ctx, product: ProductId) -> &'static str {
    ctx.fx.tier_products.iter().find(|(p, _)| *p == product).map(|(_, n)| *n).unwrap_or("no tier")
}

pub(in crate::stress) fn show_tiers(ctx: &Ctx, tiers: &[(i32, ProductId)]) -> String {
    let names: Vec<&str> = tiers.iter().map(|(_, p)| tier_name(ctx, *p)).collect();
    format!("[{}]", names.join(", "))
}

/// A disposition at random; with `gate`, one time in five none (the gate decides).
pub(in crate::stress) fn pick_disposition(rng: &mut Rng, gate: bool) -> Option<Disposition> {
    if gate && rng.below(5) == 0 {
        return None;
    }
    Some(if rng.below(2) == 0 { Disposition::Migrate } else { Disposition::Grandfather })
}

/// The end of a request's 1-2 s.
pub(in crate::stress) fn in_request(rng: &mut Rng) -> Instant {
    let (low, high) = IN_REQUEST_MS;
    Instant::now() + Duration::from_millis(low + rng.next_u64() % (high - low + 1))
}

pub(in crate::stress) fn show_disposition(d: Option<Disposition>) -> &'static str {
    d.map(Disposition::as_str).unwrap_or("no disposition")
}

/// AddTier on the stress ladder: a stress product that is not a tier of it (when every one is,
/// any: refused), at a rank from 1 to the top (0 on an empty ladder). Refused when a holder of
/// the product already holds a plan on the ladder (an organization of the stress type holds its
/// floor there) or holds the product twice.
pub(in crate::stress) async fn add_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    let missing: Vec<ProductId> =
        ctx.fx.tier_products.iter().map(|(p, _)| *p).filter(|p| !tiers.iter().any(|(_, t)| t == p)).collect();
    let product = if missing.is_empty() { rng.pick(&ctx.fx.tier_products).0 } else { *rng.pick(&missing) };
    let rank = if tiers.is_empty() { 0 } else { 1 + rng.below(tiers.len()) as i32 };
    note.detail = format!("{} at rank {rank} of {}", tier_name(ctx, product), show_tiers(ctx, &tiers));
    let a = AddTier {
        ladder_id: ctx.fx.stress_ladder,
        product_id: product,
        rank: Some(rank),
        reason: "stress".into(),
        actor: None,
    };
    let r = topology::add_tier(&ctx.db, &a, ctx.holder_cap).with_subscriber(ctx.quiet.clone()).await;
    if let Ok((act, reach)) = &r {
        note.detail.push_str(&format!(": plan act {act}, {} holders", reach.holders));
    }
    topology_outcome(r, note)
}

/// DeleteTier on the stress ladder: a tier nobody holds when there is one (else any: refused).
pub(in crate::stress) async fn delete_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers: Vec<(i32, ProductId, i64)> = sqlx::query_as(
        "SELECT t.rank, t.product_id,
                (SELECT count(*) FROM core.positions p JOIN core.conferrals c USING (conferral_id)
                 WHERE p.plan_ladder_id = t.plan_ladder_id AND c.product_id = t.product_id)
         FROM core.plan_ladder_tiers t WHERE t.plan_ladder_id = $1 ORDER BY t.rank",
    )
    .bind(ctx.fx.stress_ladder)
    .fetch_all(&ctx.db.pool)
    .await?;
    let unheld: Vec<&(i32, ProductId, i64)> = tiers.iter().filter(|t| t.2 == 0).collect();
    // An empty ladder: rank 0, which is gone (refused, as an operator's stale form would be).
    let (rank, product, holders) = match (tiers.is_empty(), unheld.is_empty()) {
        (true, _) => (0, ProductId(0), 0),
        (false, true) => *rng.pick(&tiers),
        (false, false) => **rng.pick(&unheld),
    };
    note.detail = format!("{} at rank {rank} ({holders} holders) of {} tiers", tier_name(ctx, product), tiers.len());
    let r = topology::delete_tier(&ctx.db, ctx.fx.stress_ladder, rank, None, "stress")
        .with_subscriber(ctx.quiet.clone())
        .await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}"));
    }
    topology_outcome(r, note)
}

/// RemoveTier on the stress ladder: any tier, migrate or grandfather. Its holders: the stress
/// type's organizations when it is the floor, those granted the stress tier (IssueGrant and
/// ConferGrant grant it) when it is a tier.
pub(in crate::stress) async fn remove_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    // An empty ladder: rank 0, which is gone (refused).
    let (rank, product) = if tiers.is_empty() { (0, ProductId(0)) } else { *rng.pick(&tiers) };
    let disposition = pick_disposition(rng, false);
    note.detail = format!(
        "{} at rank {rank} of {}, {}",
        tier_name(ctx, product),
        show_tiers(ctx, &tiers),
        show_disposition(disposition)
    );
    let r = RemoveTier { ladder_id: ctx.fx.stress_ladder, rank, disposition, reason: "stress".into(), actor: None };
    let r = topology::remove_tier(&ctx.db, &r, ctx.holder_cap).with_subscriber(ctx.quiet.clone()).await;
    if let Ok((act, reach)) = &r {
        note.detail.push_str(&format!(": plan act {act}, {} holders", reach.holders));
    }
    topology_outcome(r, note)
}

/// After a default change's or a reorder's request: what its in-request drain settled.
pub(in crate::stress) async fn act_progress(ctx: &Ctx, act: PlanActId) -> Result<String, Failure> {
    let mut c = ctx.db.pool.acquire().await?;
    let n = pa_store::counts(&mut c, act).await?;
    Ok(format!(
        "{} pending, {} migrated, {} grandfathered, {} vacant, {} failed, {} superseded",
        n.pending, n.migrated, n.grandfathered, n.vacant, n.failed, n.superseded
    ))
}

/// ChangeOrgTypeDefault: the stress type's default flips between the stress ladder and Wiki
/// hosting, with a disposition (sometimes none: the gate decides), and the request's 1-2 s for
/// its listing and moves; the drain job does the rest.
pub(in crate::stress) async fn change_org_type_default(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let fx = &ctx.fx;
    let current: Option<LadderId> =
        sqlx::query_scalar("SELECT default_plan_ladder_id FROM core.org_types WHERE org_type_id = $1")
            .bind(fx.stress_type)
            .fetch_one(&ctx.db.pool)
            .await?;
    let to = if current == Some(fx.stress_ladder) { fx.wiki_ladder } else { fx.stress_ladder };
    let disposition = pick_disposition(rng, true);
    let within = in_request(rng);
    note.detail =
        format!("type {} from ladder {current:?} to ladder {to}, {}", fx.stress_type, show_disposition(disposition));
    let r = pa::change_org_type_default(&ctx.db, fx.stress_type, to, disposition, None, "stress", Some(within))
        .with_subscriber(ctx.quiet.clone())
        .await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}, in the request: {}", act_progress(ctx, *act).await?));
    }
    topology_outcome(r, note)
}

/// ReorderTiers on the stress ladder: its tiers rotated one way or the other (rank 0 changes:
/// the types defaulting to it are reached), or, with three or more, ranks 1 and 2 swapped (rank
/// 0 kept: no organization reached); a disposition, sometimes none; the request's 1-2 s. With
/// fewer than two tiers, refused (nothing to reorder).
pub(in crate::stress) async fn reorder_tiers(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    let mut order: Vec<ProductId> = tiers.iter().map(|(_, p)| *p).collect();
    let how = match rng.below(3) {
        _ if order.len() < 2 => "too few tiers to reorder",
        2 if order.len() >= 3 => {
            order.swap(1, 2);
            "ranks 1 and 2 swapped"
        }
        1 => {
            order.rotate_right(1);
            "the top to rank 0"
        }
        _ => {
            order.rotate_left(1);
            "rank 0 to the top"
        }
    };
    let disposition = pick_disposition(rng, true);
    let within = in_request(rng);
    note.detail = format!("{} with {how}, {}", show_tiers(ctx, &tiers), show_disposition(disposition));
    let r = ReorderTiers { ladder_id: ctx.fx.stress_ladder, order, disposition, reason: "stress".into(), actor: None };
    let r = pa::reorder_tiers(&ctx.db, &r, Some(within)).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}, in the request: {}", act_progress(ctx, *act).await?));
    }
    topology_outcome(r, note)
}

/// DrainPlanAct on a running act, beside its drain job (and the other tasks): the listing
/// batches, the moves, the failures' records and the last probe. With no act running, the
/// newest act that reached organizations, as a job repeated after its act is done would (only
/// the last probe runs again). A pass that found nothing to do is refused; no act, skipped.
pub(in crate::stress) async fn drain_plan_act(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let acts: Vec<PlanActId> =
        sqlx::query_scalar("SELECT plan_act_id FROM core.plan_acts WHERE state = 'running' ORDER BY plan_act_id")
            .fetch_all(&ctx.db.pool)
            .await?;
    let act = if acts.is_empty() {
        let Some(act) = newest_reaching_act(ctx).await? else { return Ok(Outcome::Skipped) };
        note.detail = format!("plan act {act} (none running)");
        act
    } else {
        let act = *rng.pick(&acts);
        note.detail = format!("plan act {act}");
        act
    };
    let r = pa::drain_plan_act(&ctx.db, act, None).with_subscriber(ctx.quiet.clone()).await.map(|d| {
        let did = format!(": {} listed, {} moved, {} failed, finished {}", d.listed, d.moved, d.failed, d.finished);
        (did, d.listed + d.moved + d.failed > 0 || d.finished)
    });
    super::drain_outcome(r, "; nothing to do", note)
}

/// RetryPlanAct on an act with failed moves (the fragile pools' first attempts) that still owns
/// its types; when there is none, on the newest act that reached organizations, which has
/// nothing to retry (refused, and rolled back). The failures that were not simulated are
/// counted as errors before the Retry clears them.
pub(in crate::stress) async fn retry_plan_act(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let failed: Vec<(PlanActId, i64)> = sqlx::query_as(
        "SELECT o.plan_act_id, o.pool_id FROM core.plan_act_obligations o
         JOIN core.org_types t ON t.org_type_id = o.org_type_id AND t.default_owner_act_id = o.plan_act_id
         WHERE o.state = 'failed' ORDER BY o.plan_act_id, o.pool_id LIMIT 40",
    )
    .fetch_all(&ctx.db.pool)
    .await?;
    let act = if let Some((act, pool)) = (!failed.is_empty()).then(|| *rng.pick(&failed)) {
        note.pool = Some(pool);
        note.detail = format!("plan act {act} (pool {pool} failed)");
        note_move_failures(ctx, Some(act)).await?;
        act
    } else {
        let Some(act) = newest_reaching_act(ctx).await? else { return Ok(Outcome::Skipped) };
        note.detail = format!("plan act {act} (no move failed)");
        act
    };
    let r = pa::retry_plan_act(&ctx.db, act, None).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(retry) = &r {
        note.detail.push_str(&format!(": requeued by plan act {retry}"));
    }
    topology_outcome(r, note)
}

/// The newest act that reached organizations (a default change, or a reorder that changed rank 0).
pub(in crate::stress) async fn newest_reaching_act(ctx: &Ctx) -> Result<Option<PlanActId>, Failure> {
    Ok(sqlx::query_scalar(
        "SELECT max(plan_act_id) FROM core.plan_acts a
         WHERE EXISTS (SELECT 1 FROM core.plan_act_reached_types r WHERE r.plan_act_id = a.plan_act_id)",
    )
    .fetch_one(&ctx.db.pool)
    .await?)
}

/// ReorderPlanLadders: the ladders' display order rotated, or two of them swapped.
pub(in crate::stress) async fn reorder_plan_ladders(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let mut ids: Vec<LadderId> =
        sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders ORDER BY sort_order, plan_ladder_id")
            .fetch_all(&ctx.db.pool)
            .await?;
    if ids.len() < 2 {
        return Ok(Outcome::Skipped);
    }
    if rng.below(2) == 0 {
        ids.rotate_left(1);
    } else {
        let (a, b) = (rng.below(ids.len()), rng.below(ids.len()));
        ids.swap(a, b);
    }
    let positions: BTreeMap<LadderId, i32> = ids.iter().enumerate().map(|(i, id)| (*id, i as i32 + 1)).collect();
    note.detail = format!("ladders in the order {ids:?}");
    let r = topology::reorder_plan_ladders(&ctx.db, &positions).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(n) = &r {
        note.detail.push_str(&format!(": {n} moved"));
    }
    topology_outcome(r, note)
}
