//! Plan acts: every change to the tier topology that reaches organizations, newest first.

use actix_web::{HttpRequest, HttpResponse, get, web};

use crate::{
    services,
    store::topology::PlanActRow,
    web::{AppState, errors::AppError, render},
};

fn what(a: &PlanActRow) -> String {
    let rank = a.rank.map(|r| r.to_string()).unwrap_or_default();
    match a.kind.as_str() {
        "tier_add" => format!("{} added to {} at rank {rank}", a.product_name, a.ladder_name),
        "tier_delete" => format!("{} (rank {rank}) deleted from {}", a.product_name, a.ladder_name),
        "tier_removal" => format!("{} (rank {rank}) removed from {}", a.product_name, a.ladder_name),
        _ => format!("{} {}", a.ladder_name, a.product_name).trim().to_string(),
    }
}

fn row(a: &PlanActRow) -> views::PlanActRow {
    views::PlanActRow {
        id: a.plan_act_id,
        kind: a.kind.clone(),
        what: what(a),
        by: a.by.clone().unwrap_or_else(|| "—".into()),
        at: a.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        state: a.state.clone(),
        disposition: a.disposition.clone(),
    }
}

#[get("/operator/plan-acts")]
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let acts = services::organizations::plan_acts(&state.db).await?;
    Ok(render::ok(&req, "Plan acts", views::plan_act_list(&acts.iter().map(row).collect::<Vec<_>>())))
}

#[get("/operator/plan-acts/{id}")]
pub async fn detail(
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let a = services::organizations::plan_act(&state.db, *id).await?.ok_or(AppError::NotFound)?;
    let r = row(&a);
    let facts = a
        .detail
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.replace('_', " "), v.to_string())).collect())
        .unwrap_or_default();
    let v = views::PlanActView {
        id: r.id,
        kind: r.kind,
        what: r.what,
        by: r.by,
        at: r.at,
        state: r.state,
        disposition: r.disposition,
        reason: a.reason.clone(),
        facts,
    };
    Ok(render::ok(&req, &format!("Plan act #{}", v.id), views::plan_act_page(&v)))
}
