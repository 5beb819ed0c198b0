//! The operator's organizations: a searchable, paginated list and one organization's pool.

use actix_web::{HttpRequest, HttpResponse, get, web};
use serde::Deserialize;

use crate::{
    services::{self, organizations::ORGANIZATIONS_PER_PAGE},
    store::catalog::HeldConferral,
    web::{
        AppState,
        errors::AppError,
        pages::home::{entitlement_rows, usage_rows},
        render,
    },
};

#[derive(Deserialize)]
pub struct ListQuery {
    q: Option<String>,
    page: Option<String>,
}

#[get("/operator/organizations")]
pub async fn list(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, AppError> {
    let query = q.q.clone().unwrap_or_default();
    if query.chars().count() > 200 {
        return Err(AppError::BadRequest("A search may have at most 200 characters.".into()));
    }
    let page = match q.page.as_deref().map(str::trim) {
        None | Some("") => 1,
        Some(p) => p
            .parse::<u64>()
            .ok()
            .filter(|p| *p >= 1 && *p <= 1_000_000)
            .ok_or_else(|| AppError::BadRequest(format!("“{p}” is not a page number.")))?,
    };
    let (total, rows) = services::organizations::organizations(&state.db, &query, page).await?;
    let view = views::OrgListView {
        query,
        page,
        per_page: ORGANIZATIONS_PER_PAGE,
        total,
        rows: rows
            .into_iter()
            .map(|r| views::OrgListRow {
                id: r.organization_id,
                name: r.name,
                org_type: r.org_type,
                plan: r.plan.unwrap_or_default(),
            })
            .collect(),
    };
    // A search from the box swaps only the results.
    // htmx 4 names the target as `tag#id` (`div#org-results`); older ones as the bare id.
    let target = req.headers().get("hx-target").and_then(|v| v.to_str().ok()).unwrap_or("");
    if render::is_htmx(&req) && (target == "org-results" || target.ends_with("#org-results")) {
        return Ok(HttpResponse::Ok()
            .content_type("text/html; charset=utf-8")
            .body(views::organization_results(&view).into_string()));
    }
    Ok(render::ok(&req, "Organizations", views::organization_list(&view)))
}

fn source(c: &HeldConferral) -> String {
    match (c.grant_kind.as_deref(), c.grant_id, &c.stripe_subscription_id, &c.stripe_item_id) {
        (Some("floor"), Some(g), _, _) => format!("floor grant #{g}"),
        (Some(kind), Some(g), _, _) => format!("{kind} grant #{g}"),
        (_, _, Some(s), Some(i)) => format!("subscription {s} item {i}"),
        _ => format!("conferral #{}", c.conferral_id),
    }
}

fn position_row(c: &HeldConferral) -> views::PositionRow {
    views::PositionRow {
        ladder: c.ladder.clone().unwrap_or_default(),
        rank: c.rank.unwrap_or_default(),
        product: if c.quantity > 1 { format!("{} × {}", c.product, c.quantity) } else { c.product.clone() },
        source: source(c),
        status: if c.suspended { "suspended".into() } else { "active".into() },
    }
}

#[get("/operator/organizations/{id}")]
pub async fn detail(
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let d = services::organizations::organization(&state.db, *id).await?.ok_or(AppError::NotFound)?;
    let view = views::OrgDetailView {
        id: d.facts.organization_id,
        name: d.facts.name.clone(),
        org_type: d.facts.org_type.clone(),
        pool_id: d.facts.pool_id.unwrap_or_default(),
        created_at: d.facts.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        positions: d.held.iter().filter(|c| c.ladder.is_some()).map(position_row).collect(),
        other_conferrals: d.held.iter().filter(|c| c.ladder.is_none()).map(position_row).collect(),
        displaced: d
            .displaced
            .iter()
            .map(|x| views::DisplacedRow {
                source: x.source.clone(),
                product: x.product.clone(),
                since: x.since.format("%Y-%m-%d %H:%M UTC").to_string(),
                kind: x.kind.clone(),
            })
            .collect(),
        entitlements: entitlement_rows(&d.entitlements),
        usage: usage_rows(&d.usage),
        members: d.members.iter().map(|m| views::MemberRow { email: m.email.clone(), role: m.role.clone() }).collect(),
    };
    Ok(render::ok(&req, &d.facts.name, views::organization_detail(&view)))
}
