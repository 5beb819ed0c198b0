//! The tier topology, read view: ladders with their tiers by rank, org types and defaults.

use actix_web::{HttpRequest, HttpResponse, get, web};

use crate::{
    services,
    web::{AppState, errors::AppError, render},
};

#[get("/operator/topology")]
pub async fn topology(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let t = services::organizations::topology(&state.db).await?;
    let view = views::TopologyView {
        ladders: t
            .ladders
            .iter()
            .map(|l| views::LadderView {
                id: l.plan_ladder_id,
                name: l.name.clone(),
                sort_order: l.sort_order,
                tiers: t
                    .tiers
                    .iter()
                    .filter(|x| x.plan_ladder_id == l.plan_ladder_id)
                    .map(|x| views::TierRow {
                        rank: x.rank,
                        product_id: x.product_id,
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
                id: o.org_type_id,
                name: o.name,
                default_ladder: o.default_ladder,
                floor_product: o.floor_product,
                organizations: o.organizations,
            })
            .collect(),
    };
    Ok(render::ok(&req, "Tier topology", views::topology(&view)))
}
