//! Probes: `/healthz` (the process answers) and `/readyz` (the database answers and carries
//! exactly this build's migrations).

use actix_web::{HttpResponse, get, web};

use crate::{db::migrate, web::AppState};

#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; charset=utf-8").body("ok\n")
}

#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let (database, migrations) = match migrate::is_current(&state.db.pool).await {
        Ok(true) => ("ok", "current"),
        Ok(false) => ("ok", "behind or ahead of this build"),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check could not reach the database");
            ("unreachable", "unknown")
        }
    };
    let ready = database == "ok" && migrations == "current";
    let body = serde_json::json!({ "ready": ready, "database": database, "migrations": migrations });
    if ready { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}
