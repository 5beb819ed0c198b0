//! The operator's overview: accounts, organizations, and the job queue.

use actix_web::{HttpRequest, HttpResponse, web};

use crate::{
    services,
    web::identity::Operator,
    web::{AppState, errors::AppError, render},
};

#[tracing::instrument(name = "Page: operations", skip_all)]
pub async fn overview(_op: Operator, req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let o = services::accounts::operator_overview(&state.db).await?;
    let view = views::OperatorHomeView {
        accounts: o
            .accounts
            .into_iter()
            .map(|a| views::AccountRow {
                email: a.email,
                is_operator: a.is_operator,
                organizations: a.organizations,
                created_at: a.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
            })
            .collect(),
        organizations: o.organizations,
        jobs: views::JobCounts {
            pending: o.jobs.pending,
            running: o.jobs.running,
            failed: o.jobs.failed,
            done: o.jobs.done,
        },
        failed_jobs: o
            .failed_jobs
            .into_iter()
            .map(|j| views::FailedJob {
                id: j.job_id.0,
                kind: j.kind,
                attempts: j.attempts,
                last_error: j.last_error.unwrap_or_default(),
                failed_at: j.failed_at.format("%Y-%m-%d %H:%M UTC").to_string(),
            })
            .collect(),
    };
    Ok(render::ok(&req, "Operations", views::operator_home(&view)))
}
