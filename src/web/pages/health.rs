//! Probes: `/healthz` (the process answers) and `/readyz` (the database answers and carries
//! exactly this build's migrations).

use actix_web::{HttpResponse, web};

use crate::{db::migrate, web::AppState};

#[tracing::instrument(name = "Probe: health", skip_all)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; charset=utf-8").body("ok\n")
}

#[tracing::instrument(name = "Probe: readiness", skip_all)]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    // Through a read transaction like every request's statement, so the request's deadline
    // bounds it.
    let current = match state.db.read().await {
        Ok(mut tx) => migrate::is_current(&mut tx).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let (database, migrations) = match current {
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
