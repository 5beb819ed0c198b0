//! The member's home.

use actix_web::{HttpRequest, HttpResponse, get, web};

use crate::{
    services,
    web::{AppState, errors::AppError, identity::identity, render},
};

#[get("/")]
pub async fn home(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let who = identity(&req).ok_or(AppError::Forbidden)?;
    let organizations = services::accounts::memberships(&state.db, who.account_id)
        .await?
        .into_iter()
        .map(|m| views::OrgMembership { organization_id: m.organization_id, name: m.name, role: m.role })
        .collect();
    let view = views::HomeView { email: who.email.clone(), organizations };
    Ok(render::ok(&req, "Home", views::member_home(&view)))
}
