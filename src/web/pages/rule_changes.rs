//! Rule changes: the list, one change's live progress, and Retry.

use actix_web::{HttpRequest, HttpResponse, web};
use views::components::pace::Pace;
use views::paths::{self, fill};

use crate::{
    db::retry::once_more_after_deadlock,
    ids::RuleChangeId,
    services::{self, reads::RuleChangeDetail},
    store::rule_changes::{ActRow, ChangeRow},
    web::call::{Call, OperatorCall},
    web::forms::after_retry,
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn value_text(n: Option<i64>, f: Option<bool>) -> String {
    match (n, f) {
        (Some(n), _) => n.to_string(),
        (_, Some(true)) => "yes".into(),
        (_, Some(false)) => "no".into(),
        _ => "no rule".into(),
    }
}

fn summary(acts: &[&ActRow]) -> String {
    acts.iter()
        .map(|a| {
            let (before, after) = (value_text(a.old_numeric, a.old_flag), value_text(a.new_numeric, a.new_flag));
            match (before.as_str(), after.as_str()) {
                ("no rule", _) => format!("{} added: {after}", a.resource_key),
                (_, "no rule") => format!("{} removed", a.resource_key),
                _ => format!("{} {before} → {after}", a.resource_key),
            }
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

fn as_u64(n: i64) -> u64 {
    n.max(0) as u64
}

#[tracing::instrument(name = "Page: the rule changes", skip_all)]
pub async fn list(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let (changes, acts) = services::reads::rule_changes(&state.db).await?;
    let rows: Vec<views::RuleChangeListRow> = changes
        .iter()
        .map(|c| views::RuleChangeListRow {
            id: c.change_id.0,
            set_id: c.entitlement_set_id.0,
            set_name: c.set_name.clone(),
            by: c.by.clone().unwrap_or_else(|| "—".into()),
            at: when(c.committed_at),
            summary: summary(&acts.iter().filter(|a| a.change_id == c.change_id).collect::<Vec<_>>()),
            state: c.state.to_string(),
            owed: as_u64(c.owed),
            settled: as_u64(c.settled),
            failed: as_u64(c.failed),
        })
        .collect();
    Ok(render::ok(&req, "Rule changes", views::rule_change_list(&rows)))
}

/// The change read and shown, or not found: what the page and its progress both start from.
async fn read_view(req: &HttpRequest, state: &AppState, id: i64) -> Result<views::RuleChangeView, AppError> {
    let d = services::reads::rule_change(&state.db, RuleChangeId(id)).await?.ok_or(AppError::NotFound)?;
    Ok(view(req, &d))
}

fn view(req: &HttpRequest, d: &RuleChangeDetail) -> views::RuleChangeView {
    let c: &ChangeRow = &d.change;
    views::RuleChangeView {
        csrf: csrf_token(req),
        id: c.change_id.0,
        set_id: c.entitlement_set_id.0,
        set_name: c.set_name.clone(),
        by: c.by.clone().unwrap_or_else(|| "—".into()),
        at: when(c.committed_at),
        state: c.state.to_string(),
        settled_inline: c.settled_inline,
        hold_ms: c.hold_ms,
        total_owed: as_u64(c.owed),
        total_settled: as_u64(c.settled),
        total_failed: as_u64(c.failed),
        acts: d
            .acts
            .iter()
            .map(|a| views::ActProgress {
                key: a.resource_key.clone(),
                before: value_text(a.old_numeric, a.old_flag),
                after: value_text(a.new_numeric, a.new_flag),
                owed: as_u64(a.owed),
                settled: as_u64(a.settled),
                failed: as_u64(a.failed),
            })
            .collect(),
        failures: d
            .failures
            .iter()
            .map(|f| views::FailedPool {
                pool_id: f.pool_id.0,
                organization_id: f.organization_id.0,
                organization: f.organization.clone(),
                attempts: f.attempts,
                error: f.last_error.clone().unwrap_or_default(),
                next_attempt: f.next_attempt_at.map(when),
            })
            .collect(),
        settled_at: c.settled_at.map(when),
        listed_all: c.listed,
        pace: d.recent.map(|r| Pace { settled: as_u64(r.settled), seconds: r.seconds }),
    }
}

#[tracing::instrument(name = "Page: a rule change", skip_all, fields(change_id = %*id))]
pub async fn detail(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<RuleChangeId>,
) -> Result<HttpResponse, AppError> {
    let v = read_view(&req, &state, id.0).await?;
    Ok(render::ok(&req, &format!("Rule change #{}", v.id), views::rule_change_page(&v)))
}

/// What the page's progress polls: the progress container alone.
#[tracing::instrument(name = "Page: a rule change's progress", skip_all, fields(change_id = %*id))]
pub async fn progress(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<RuleChangeId>,
) -> Result<HttpResponse, AppError> {
    Ok(render::polled(views::rule_change_progress(&read_view(&req, &state, id.0).await?)))
}

/// Retry: a button, no fields; a refusal is the error page or partial.
#[tracing::instrument(name = "Page: retry a rule change", skip_all, fields(change_id = %*id))]
pub async fn retry(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<RuleChangeId>,
) -> Result<HttpResponse, AppError> {
    once_more_after_deadlock(&state.db, "Retry a rule change", async || {
        services::rule_changes::retry_failed(&state.db, *id).await
    })
    .await?;
    let progress = async || Ok(views::rule_change_progress(&read_view(&req, &state, id.0).await?));
    after_retry(&req, &fill(paths::RULE_CHANGE, &[&id]), progress).await
}
