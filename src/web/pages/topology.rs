//! The tier topology: ladders with their tiers by rank, org types and their defaults, and the
//! acts operators shape them with (add a tier, delete a tier nobody holds, the ladders' order).

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use views::FormState;

use crate::{
    db::retry::once_more_after_deadlock,
    ids::{AccountId, LadderId, OrgTypeId, ProductId},
    services::{
        self,
        plan_acts::{ActReach, Disposition, ReorderTiers},
        topology::{AddTier, RemoveTier, TopologyError},
    },
    web::forms::{Fields, after_post, partial, value},
    web::identity::Operator,
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

/// The states of the page's forms that were just refused (the others render empty).
#[derive(Default)]
struct Forms {
    add: Vec<(i64, FormState)>,
    order: FormState,
    default: Vec<(i64, FormState)>,
    remove: Vec<((i64, i32), FormState)>,
    tier_order: Vec<(i64, FormState)>,
}

/// The page, with any refused form's state and a notice.
async fn view(
    req: &HttpRequest,
    state: &AppState,
    forms: Forms,
    notice: Option<String>,
) -> Result<views::TopologyView, AppError> {
    let t = services::reads::topology(&state.db).await?;
    let products =
        services::reads::tier_product_options(&state.db).await?.into_iter().map(|(id, n)| (id.0, n)).collect();
    Ok(views::TopologyView {
        csrf: csrf_token(req),
        products,
        add_forms: forms.add,
        order_form: forms.order,
        default_forms: forms.default,
        remove_forms: forms.remove,
        tier_order_forms: forms.tier_order,
        notice,
        ladders: t
            .ladders
            .iter()
            .map(|l| views::LadderView {
                id: l.plan_ladder_id.0,
                name: l.name.clone(),
                sort_order: l.sort_order,
                tiers: t
                    .tiers
                    .iter()
                    .filter(|x| x.plan_ladder_id == l.plan_ladder_id)
                    .map(|x| views::TierRow {
                        rank: x.rank,
                        product_id: x.product_id.0,
                        product_name: x.product_name.clone(),
                        set_name: x.set_name.clone().unwrap_or_default(),
                    })
                    .collect(),
            })
            .collect(),
        org_types: t
            .org_types
            .into_iter()
            .map(|o| views::OrgTypeRow {
                id: o.org_type_id.0,
                name: o.name,
                default_ladder: o.default_ladder,
                floor_product: o.floor_product,
                organizations: o.organizations,
            })
            .collect(),
    })
}

#[derive(Deserialize)]
pub struct Notice {
    done: Option<String>,
}

pub async fn topology(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<Notice>,
) -> Result<HttpResponse, AppError> {
    let notice = match q.done.as_deref() {
        Some("tier-added") => Some("The tier was added.".to_string()),
        Some("tier-deleted") => Some("The tier was deleted.".to_string()),
        Some("tier-removed") => Some("The tier was removed and its holders moved.".to_string()),
        Some("order") => Some("The ladders' order was saved.".to_string()),
        _ => None,
    };
    let v = view(&req, &state, Forms::default(), notice).await?;
    Ok(render::ok(&req, "Tier topology", views::topology(&v)))
}

/// A refusal as a form's state and its status.
fn refused(fields: &[(String, String)], e: TopologyError) -> Result<(StatusCode, FormState), AppError> {
    let mut f = FormState {
        values: fields.iter().filter(|(k, _)| k != "csrf_token").cloned().collect(),
        ..FormState::default()
    };
    let status = match e {
        TopologyError::Invalid(p) => {
            for (field, m) in p {
                if field.is_empty() { f.errors.push(m) } else { f.field_errors.push((field, m)) }
            }
            StatusCode::UNPROCESSABLE_ENTITY
        }
        TopologyError::Refused(m) => {
            f.errors.push(m);
            StatusCode::CONFLICT
        }
        TopologyError::ChangeInProgress => {
            let (t, m) = AppError::ChangeInProgress.title_and_message();
            f.errors.push(format!("{t}. {m}"));
            StatusCode::CONFLICT
        }
        TopologyError::NotFound(_) => return Err(AppError::NotFound),
        TopologyError::Db(d) => return Err(d.into()),
    };
    Ok((status, f))
}

fn parse_add(ladder_id: i64, f: &[(String, String)], actor: Option<AccountId>) -> Result<AddTier, TopologyError> {
    let mut problems = vec![];
    let product = value(f, "product_id").trim().parse::<i64>().ok().map(ProductId);
    if product.is_none() {
        problems.push(("product_id".to_string(), "Choose a product.".to_string()));
    }
    let rank = match value(f, "rank").trim() {
        "" => None,
        r => match r.parse::<i32>() {
            Ok(r) => Some(r),
            Err(_) => {
                problems.push(("rank".into(), format!("“{r}” is not a rank.")));
                None
            }
        },
    };
    let reason = value(f, "reason").trim().to_string();
    if reason.chars().count() > 500 {
        problems.push(("reason".into(), "A reason may have at most 500 characters.".into()));
    }
    match product {
        Some(product_id) if problems.is_empty() => {
            Ok(AddTier { ladder_id: LadderId(ladder_id), product_id, rank, reason, actor })
        }
        _ => Err(TopologyError::Invalid(problems)),
    }
}

pub async fn preview(
    _op: Operator,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    let f = q.into_inner();
    let answer = async {
        let a = parse_add(*id, &f, None)?;
        let r = services::topology::preview_add_tier(&state.db, &a, state.config.plan_act_holder_cap).await?;
        let names = services::reads::tier_names(&state.db, a.ladder_id, a.product_id).await?;
        Ok(views::tier_add_preview(&views::TierAddPreview {
            ladder: names.0,
            product: names.1,
            rank: r.rank,
            holders: r.holders,
            collisions: r.colliding,
            refusal: r.refusal,
        }))
    };
    preview_answer("This tier cannot be added", answer.await)
}

/// A preview's answer, in place (200): what the act would reach, or the refusal it would meet
/// (bad input, a cap, the gate, no such ladder or tier); a database failure is an error page.
fn preview_answer(refused: &str, answer: Result<views::Markup, TopologyError>) -> Result<HttpResponse, AppError> {
    match answer {
        Ok(m) => Ok(partial(StatusCode::OK, m)),
        Err(TopologyError::Db(e)) => Err(e.into()),
        Err(e) => Ok(partial(StatusCode::OK, views::refusal(refused, &e.to_string()))),
    }
}

pub async fn add_tier(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let actor = Some(op.account_id());
    let result = match parse_add(*id, &f, actor) {
        Ok(a) => once_more_after_deadlock(&state.db, "AddTier", async || {
            services::topology::add_tier(&state.db, &a, state.config.plan_act_holder_cap).await
        })
        .await
        .map(|_| ()),
        Err(e) => Err(e),
    };
    let e = match result {
        Ok(()) => return Ok(after_post(&req, "/operator/topology?done=tier-added")),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    let v = view(&req, &state, Forms { add: vec![(*id, fs.clone())], ..Forms::default() }, None).await?;
    if render::is_htmx(&req) {
        let next_rank = v.ladders.iter().find(|l| l.id == *id).map_or(0, |l| l.tiers.len() as i32);
        return Ok(partial(status, views::add_tier_form(&v.csrf, *id, &v.products, next_rank, &fs)));
    }
    Ok(render::page(&req, status, "Tier topology", views::topology(&v)))
}

pub async fn delete_tier(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(i64, i32)>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    let f = form.into_inner();
    let actor = Some(op.account_id());
    let delete =
        async || services::topology::delete_tier(&state.db, LadderId(ladder), rank, actor, value(&f, "reason")).await;
    let e = match once_more_after_deadlock(&state.db, "DeleteTier", delete).await {
        Ok(_) => return Ok(after_post(&req, "/operator/topology?done=tier-deleted")),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    if render::is_htmx(&req) {
        return Ok(partial(status, views::delete_tier_form(&csrf_token(&req), ladder, rank, &fs)));
    }
    let mut v = view(&req, &state, Forms::default(), None).await?;
    v.notice = None;
    let banner = views::refusal("The tier was not deleted", &fs.errors.join(" "));
    let body = views::PreEscaped(banner.into_string() + &views::topology(&v).into_string());
    Ok(render::page(&req, status, "Tier topology", body))
}

pub async fn ladder_order(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let mut positions = BTreeMap::new();
    let mut problems = vec![];
    for (k, v) in &f {
        if let Some(id) = k.strip_prefix("position.") {
            match (id.parse::<i64>(), v.trim().parse::<i32>()) {
                (Ok(id), Ok(p)) => {
                    positions.insert(LadderId(id), p);
                }
                _ => problems.push((k.clone(), format!("“{}” is not a position.", v.trim()))),
            }
        }
    }
    let result = if problems.is_empty() {
        once_more_after_deadlock(&state.db, "ReorderPlanLadders", async || {
            services::topology::reorder_plan_ladders(&state.db, &positions).await
        })
        .await
        .map(|_| ())
    } else {
        Err(TopologyError::Invalid(problems))
    };
    let e = match result {
        Ok(()) => return Ok(after_post(&req, "/operator/topology?done=order")),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    let v = view(&req, &state, Forms { order: fs.clone(), ..Forms::default() }, None).await?;
    if render::is_htmx(&req) {
        let ladders: Vec<(i64, String, i32)> =
            v.ladders.iter().enumerate().map(|(i, l)| (l.id, l.name.clone(), i as i32 + 1)).collect();
        return Ok(partial(status, views::ladder_order_form(&v.csrf, &ladders, &fs)));
    }
    Ok(render::page(&req, status, "Tier topology", views::topology(&v)))
}

/// ChangeOrgTypeDefault: T0, then the listing and moves for up to a few seconds of this request;
/// the operator lands on the act's live progress.
pub async fn change_default(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    use crate::services::plan_acts::change_org_type_default;
    let f = form.into_inner();
    let actor = Some(op.account_id());
    let mut problems = vec![];
    let ladder = value(&f, "plan_ladder_id").trim().parse::<i64>().ok().map(LadderId);
    if ladder.is_none() {
        problems.push(("plan_ladder_id".to_string(), "Choose a ladder.".to_string()));
    }
    let d = disposition(&f, &mut problems);
    let reason = reason(&f, &mut problems);
    let result = match (ladder, problems.is_empty()) {
        (Some(ladder), true) => {
            let change = async || {
                change_org_type_default(&state.db, OrgTypeId(*id), ladder, d, actor, &reason, Some(within(&state)))
                    .await
            };
            once_more_after_deadlock(&state.db, "ChangeOrgTypeDefault", change).await
        }
        _ => Err(TopologyError::Invalid(problems)),
    };
    let e = match result {
        Ok(act) => return Ok(after_post(&req, &format!("/operator/plan-acts/{act}"))),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    let v = view(&req, &state, Forms { default: vec![(*id, fs.clone())], ..Forms::default() }, None).await?;
    if render::is_htmx(&req) {
        let ladders: Vec<(i64, String)> = v.ladders.iter().map(|l| (l.id, l.name.clone())).collect();
        return Ok(partial(status, views::default_change_form(&v.csrf, *id, &ladders, &fs)));
    }
    Ok(render::page(&req, status, "Tier topology", views::topology(&v)))
}

/// The reason field, bounded.
fn reason(f: &[(String, String)], problems: &mut Vec<(String, String)>) -> String {
    let r = value(f, "reason").trim().to_string();
    if r.chars().count() > 500 {
        problems.push(("reason".into(), "A reason may have at most 500 characters.".into()));
    }
    r
}

fn disposition(f: &[(String, String)], problems: &mut Vec<(String, String)>) -> Option<Disposition> {
    Disposition::parse(value(f, "disposition")).unwrap_or_else(|m| {
        problems.push(("disposition".into(), m));
        None
    })
}

/// What the request has left to move organizations in, less a margin to answer in.
fn within(state: &AppState) -> std::time::Instant {
    std::time::Instant::now() + state.config.request_timeout.mul_f64(0.25)
}

fn reach_preview(action: String, r: ActReach, d: Option<Disposition>) -> views::ActReachPreview {
    views::ActReachPreview {
        action,
        types: r.types,
        organizations: r.organizations,
        holding_floor: r.holding_floor,
        vacant: r.vacant,
        from_floor: r.from_floor,
        to_floor: r.to_floor,
        disposition: d.map(|d| d.as_str().to_string()),
        refusal: r.refusal,
    }
}

/// The preview of a default change: how many organizations it reaches, per disposition.
pub async fn default_preview(
    _op: Operator,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    let f = q.into_inner();
    let answer = async {
        let mut problems = vec![];
        let d = disposition(&f, &mut problems);
        let Some(ladder) = value(&f, "plan_ladder_id").trim().parse::<i64>().ok().map(LadderId) else {
            return Err(TopologyError::Invalid(vec![("plan_ladder_id".into(), "Choose a ladder to preview.".into())]));
        };
        if !problems.is_empty() {
            return Err(TopologyError::Invalid(problems));
        }
        let r = services::plan_acts::preview_default_change(&state.db, OrgTypeId(*id), ladder, d).await?;
        let action = format!("Changing {}'s default to {}", r.types.first().cloned().unwrap_or_default(), r.ladder);
        Ok(views::act_reach_preview(&reach_preview(action, r, d)))
    };
    preview_answer("This default cannot be changed", answer.await)
}

fn parse_remove(
    ladder_id: i64,
    rank: i32,
    f: &[(String, String)],
    actor: Option<AccountId>,
) -> Result<RemoveTier, TopologyError> {
    let mut problems = vec![];
    let d = disposition(f, &mut problems);
    let reason = reason(f, &mut problems);
    if !problems.is_empty() {
        return Err(TopologyError::Invalid(problems));
    }
    Ok(RemoveTier { ladder_id: LadderId(ladder_id), rank, disposition: d, reason, actor })
}

pub async fn remove_preview(
    _op: Operator,
    state: web::Data<AppState>,
    path: web::Path<(i64, i32)>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    let f = q.into_inner();
    let answer = async {
        let r = parse_remove(ladder, rank, &f, None)?;
        let p = services::topology::preview_remove_tier(&state.db, &r, state.config.plan_act_holder_cap).await?;
        Ok(views::tier_removal_preview(&views::TierRemovalPreview {
            ladder: p.ladder,
            product: p.product,
            rank,
            holders: p.holders,
            disposition: r.disposition.map(|d| d.as_str().to_string()),
            floor_after: p.floor_after,
            refusal: p.refusal,
        }))
    };
    preview_answer("This tier cannot be removed", answer.await)
}

/// RemoveTier: one transaction moves every holder; the operator lands on the act's record.
pub async fn remove_tier(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(i64, i32)>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    let f = form.into_inner();
    let actor = Some(op.account_id());
    let result = match parse_remove(ladder, rank, &f, actor) {
        Ok(r) => {
            once_more_after_deadlock(&state.db, "RemoveTier", async || {
                services::topology::remove_tier(&state.db, &r, state.config.plan_act_holder_cap).await
            })
            .await
        }
        Err(e) => Err(e),
    };
    let e = match result {
        Ok((act, _)) => return Ok(after_post(&req, &format!("/operator/plan-acts/{act}"))),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    let v = view(&req, &state, Forms { remove: vec![((ladder, rank), fs.clone())], ..Forms::default() }, None).await?;
    if render::is_htmx(&req) {
        let product = v
            .ladders
            .iter()
            .find(|l| l.id == ladder)
            .and_then(|l| l.tiers.iter().find(|t| t.rank == rank))
            .map(|t| t.product_name.clone())
            .unwrap_or_default();
        return Ok(partial(status, views::remove_tier_form(&v.csrf, ladder, rank, &product, &fs)));
    }
    Ok(render::page(&req, status, "Tier topology", views::topology(&v)))
}

/// The submitted order: `rank.{product_id}` fields, each a distinct rank from 0.
fn parse_tier_order(
    ladder_id: i64,
    f: &[(String, String)],
    actor: Option<AccountId>,
) -> Result<ReorderTiers, TopologyError> {
    let mut problems = vec![];
    let mut ranked: Vec<(i32, i64)> = vec![];
    for (k, v) in f {
        if let Some(id) = k.strip_prefix("rank.") {
            match (id.parse::<i64>(), v.trim().parse::<i32>()) {
                (Ok(id), Ok(r)) if r >= 0 => ranked.push((r, id)),
                _ => problems.push((k.clone(), format!("“{}” is not a rank.", v.trim()))),
            }
        }
    }
    ranked.sort();
    let distinct = ranked.iter().enumerate().all(|(i, (r, _))| *r == i as i32);
    if problems.is_empty() && !distinct {
        problems.push((
            String::new(),
            format!("Give every tier a different rank from 0 to {}, once each.", ranked.len().max(1) - 1),
        ));
    }
    let d = disposition(f, &mut problems);
    let reason = reason(f, &mut problems);
    if !problems.is_empty() {
        return Err(TopologyError::Invalid(problems));
    }
    Ok(ReorderTiers {
        ladder_id: LadderId(ladder_id),
        order: ranked.into_iter().map(|(_, p)| ProductId(p)).collect(),
        disposition: d,
        reason,
        actor,
    })
}

pub async fn tier_order_preview(
    _op: Operator,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    let f = q.into_inner();
    let answer = async {
        let r = parse_tier_order(*id, &f, None)?;
        let p = services::plan_acts::preview_reorder_tiers(&state.db, &r).await?;
        let action = match (&p.from_floor, &p.to_floor) {
            (Some(from), Some(to)) if from != to => {
                format!("Reordering {} (its floor becomes {to} instead of {from})", p.ladder)
            }
            _ => format!("Reordering {} (its floor stays)", p.ladder),
        };
        Ok(views::act_reach_preview(&reach_preview(action, p, r.disposition)))
    };
    preview_answer("These tiers cannot be reordered", answer.await)
}

/// ReorderTiers: T0, then the moves for part of this request; the operator lands on the act.
pub async fn tier_order(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let actor = Some(op.account_id());
    let result = match parse_tier_order(*id, &f, actor) {
        Ok(r) => {
            once_more_after_deadlock(&state.db, "ReorderTiers", async || {
                services::plan_acts::reorder_tiers(&state.db, &r, Some(within(&state))).await
            })
            .await
        }
        Err(e) => Err(e),
    };
    let e = match result {
        Ok(act) => return Ok(after_post(&req, &format!("/operator/plan-acts/{act}"))),
        Err(e) => e,
    };
    let (status, fs) = refused(&f, e)?;
    let v = view(&req, &state, Forms { tier_order: vec![(*id, fs.clone())], ..Forms::default() }, None).await?;
    if render::is_htmx(&req) {
        let tiers: Vec<(i64, String, i32)> = v
            .ladders
            .iter()
            .find(|l| l.id == *id)
            .map(|l| l.tiers.iter().map(|t| (t.product_id, t.product_name.clone(), t.rank)).collect())
            .unwrap_or_default();
        return Ok(partial(status, views::tier_order_form(&v.csrf, *id, &tiers, &fs)));
    }
    Ok(render::page(&req, status, "Tier topology", views::topology(&v)))
}
