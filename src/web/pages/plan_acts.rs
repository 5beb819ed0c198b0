//! Plan acts: every change to the tier topology that reaches organizations, newest first.

use actix_web::{HttpRequest, HttpResponse, web};
use views::components::pace::Pace;
use views::paths::{self, fill};

use crate::{
    db::retry::once_more_after_deadlock,
    ids::PlanActId,
    services,
    states::PlanActKind,
    store::topology::PlanActRow,
    web::call::{Call, OperatorCall},
    web::forms::after_retry,
    web::refusals,
    web::{AppState, errors::AppError, render},
};

/// A Retry waits up to the lock bound for the rendezvous (a change to plans or rules holding it),
/// for the act's row (its drain finishing it) and for its failed organizations' rows (a move of
/// one); past it, it says so in its own words, not as another change.
pub const RETRY_BUSY: &str = "This plan act's organizations are being moved, or another change to plans or rules is \
    being applied, right now, so nothing was retried. Wait a moment, then press Retry again: the progress below \
    shows what has moved.";

fn what(a: &PlanActRow) -> String {
    let rank = a.rank.map(|r| r.to_string()).unwrap_or_default();
    match a.kind {
        PlanActKind::TierAdd => format!("{} added to {} at rank {rank}", a.product_name, a.ladder_name),
        PlanActKind::TierDelete => format!("{} (rank {rank}) deleted from {}", a.product_name, a.ladder_name),
        PlanActKind::TierRemoval => format!("{} (rank {rank}) removed from {}", a.product_name, a.ladder_name),
        PlanActKind::TierReorder => format!("{} reordered; {} is its floor", a.ladder_name, a.product_name),
        PlanActKind::DefaultChange => format!("default changed to {}", a.ladder_name),
        PlanActKind::Retry => format!("{} {}", a.ladder_name, a.product_name).trim().to_string(),
    }
}

fn row(a: &PlanActRow) -> views::PlanActRow {
    views::PlanActRow {
        id: a.plan_act_id.0,
        kind: a.kind.to_string(),
        what: what(a),
        by: a.by.clone().unwrap_or_else(|| "—".into()),
        at: a.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        state: a.state.to_string(),
        disposition: a.disposition.clone(),
    }
}

#[tracing::instrument(name = "Page: the plan acts", skip_all)]
pub async fn list(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let acts = services::reads::plan_acts(&state.db).await?;
    Ok(render::ok(&req, "Plan acts", views::plan_act_list(&acts.iter().map(row).collect::<Vec<_>>())))
}

/// A detail's key as a fact's label, in the page's other labels' style: "from_ladder" is
/// "From ladder".
fn fact_label(key: &str) -> String {
    let words = key.replace('_', " ");
    let mut chars = words.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

async fn view(req: &HttpRequest, state: &AppState, id: i64) -> Result<views::PlanActView, AppError> {
    let a = services::reads::plan_act(&state.db, PlanActId(id)).await?.ok_or(AppError::NotFound)?;
    let p = services::reads::plan_act_progress(&state.db, PlanActId(id)).await?;
    let facts = a
        .detail
        .as_object()
        .map(|o| {
            // Ids are for machines; the page shows the names recorded next to them.
            o.iter()
                .filter(|(k, _)| !k.ends_with("_id"))
                .map(|(k, v)| (fact_label(k), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect()
        })
        .unwrap_or_default();
    let v = views::PlanActView {
        act: row(&a),
        reason: a.reason.clone(),
        facts,
        csrf: crate::web::identity::csrf_token(req),
        counts: p.reaches.then(|| views::ObligationCounts {
            pending: p.counts.pending.max(0) as u64,
            migrated: p.counts.migrated.max(0) as u64,
            grandfathered: p.counts.grandfathered.max(0) as u64,
            vacant: p.counts.vacant.max(0) as u64,
            failed: p.counts.failed.max(0) as u64,
            superseded: p.counts.superseded.max(0) as u64,
        }),
        listed_all: p.listed_all,
        can_retry: p.counts.failed > 0,
        pace: p.recent.map(|r| Pace { settled: r.settled.max(0) as u64, seconds: r.seconds }),
        failures: p
            .failures
            .into_iter()
            .map(|f| views::FailedOrganization {
                organization_id: f.organization_id.0,
                organization: f.organization,
                attempts: f.attempts,
                error: f.last_error.unwrap_or_default(),
            })
            .collect(),
    };
    Ok(v)
}

#[tracing::instrument(name = "Page: a plan act", skip_all, fields(plan_act_id = %*id))]
pub async fn detail(Call { req, state, .. }: OperatorCall, id: web::Path<PlanActId>) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, id.0).await?;
    Ok(render::ok(&req, &format!("Plan act #{}", v.act.id), views::plan_act_page(&v)))
}

/// What the page's progress polls: the progress container alone.
#[tracing::instrument(name = "Page: a plan act's progress", skip_all, fields(plan_act_id = %*id))]
pub async fn progress(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<PlanActId>,
) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, id.0).await?;
    Ok(render::polled(views::plan_act_progress(&v)))
}

/// RetryPlanAct: a button, no fields; a refusal (nothing to retry, another change) is the error
/// page or partial.
#[tracing::instrument(name = "Page: retry a plan act", skip_all, fields(plan_act_id = %*id))]
pub async fn retry(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<PlanActId>,
) -> Result<HttpResponse, AppError> {
    let actor = Some(op.account_id());
    once_more_after_deadlock(&state.db, "RetryPlanAct", async || {
        services::plan_acts::retry_plan_act(&state.db, *id, actor).await
    })
    .await
    .map_err(|e| refusals::in_words(e, RETRY_BUSY))?;
    let progress = async || Ok(views::plan_act_progress(&view(&req, &state, id.0).await?));
    after_retry(&req, &fill(paths::PLAN_ACT, &[&id]), progress).await
}
