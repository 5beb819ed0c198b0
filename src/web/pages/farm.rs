//! The operators' farm page: the maintenance runs, the schedule, "Run now", and the drift between
//! the farm and the console on request.

use actix_web::{HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, de::IgnoredAny};
use views::paths;

use crate::{
    services::{ServiceError, fedwiki::maintenance},
    store::fedwiki_maintenance::RunRow,
    web::{
        AppState,
        call::{Call, OperatorCall},
        errors::AppError,
        forms::{after_post, query_or_default},
        identity::csrf_token,
        render,
    },
};

/// The page's flags: whether to compare with the farm now (`?drift=`), and whether a run was
/// just queued (`?ran=`). Present or not is all they say: any value counts.
#[derive(Deserialize, Default)]
#[serde(default)]
struct FarmQuery {
    drift: Option<IgnoredAny>,
    ran: Option<IgnoredAny>,
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// What a run did, the counts that are not zero.
fn did(r: &RunRow) -> String {
    let parts: Vec<String> = [
        (r.adopted, "adopted"),
        (r.observed, "observed"),
        (r.statuses_written, "status written from the farm"),
        (r.statuses_left, "status left to its request"),
        (r.removed, "removed (gone from the farm)"),
        (r.missing_on_farm, "missing on the farm"),
        (r.purged, "purged (retention)"),
        (r.parked, "parked (over the plan)"),
        (r.reactivated, "reactivated"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if parts.is_empty() { "nothing to do".into() } else { parts.join(", ") }
}

fn run_row(r: &RunRow) -> views::FarmRunRow {
    views::FarmRunRow {
        started: when(r.started_at),
        took: match r.finished_at {
            Some(f) => format!("{:.1} s", (f - r.started_at).num_milliseconds() as f64 / 1000.0),
            None => "—".into(),
        },
        outcome: r.outcome.clone().unwrap_or_else(|| "running".into()),
        error: r.error.clone(),
        farm_sites: r.farm_sites,
        did: did(r),
    }
}

fn claim_row(c: &crate::store::domains::WatchedClaim) -> views::WatchedClaimRow {
    let state = super::sites::domain_state(c.pending, c.missing_since.is_some(), c.lapsed_at.is_some());
    views::WatchedClaimRow {
        name: c.name.clone(),
        organization: c.organization.as_ref().map(|(id, name)| (name.clone(), paths::fill(paths::ORGANIZATION, &[id]))),
        state: state.to_string(),
        since: if c.pending { format!("added {}", when(c.since)) } else { format!("verified {}", when(c.since)) },
        deadline: super::sites::domain_deadline(state, c.expires_at, c.missing_since, c.lapsed_at)
            .map(|(what, t)| format!("{what} {}", when(t))),
        last_check: super::sites::last_check(c.checked_at, c.check_outcome.as_deref(), c.check_detail.as_deref()),
    }
}

async fn page(req: &HttpRequest, state: &AppState, refusal: Option<String>) -> Result<HttpResponse, AppError> {
    let q = query_or_default::<FarmQuery>(req);
    let o = maintenance::farm_overview(&state.db, state.farm.as_deref(), q.drift.is_some()).await?;
    let v = views::FarmView {
        csrf: csrf_token(req),
        connected: state.farm.is_some(),
        runs: o.runs.iter().map(run_row).collect(),
        next_run: o.next_run_at.map(when),
        run_state: o.run_state.map(|s| if s == "pending" { "queued".to_string() } else { s }),
        claims: o.claims.iter().map(claim_row).collect(),
        drift: o.drift.map(|d| views::FarmDriftView {
            farm_sites: d.farm_sites,
            console_sites: d.console_sites,
            total: d.total,
            farm_error: d.farm_error,
            rows: d
                .rows
                .into_iter()
                .map(|r| views::DriftRow {
                    domain: r.domain.into_string(),
                    farm: r.farm_status.map(|s| s.to_string()).unwrap_or_else(|| "not listed".into()),
                    console: r.console_status.map(|s| s.to_string()).unwrap_or_else(|| "no row".into()),
                    workspace: r.workspace_id.map(|w| w.into_string()).unwrap_or_else(|| "—".into()),
                })
                .collect(),
        }),
        notice: q.ran.map(|_| "A maintenance run is queued: it shows below when it ends.".to_string()),
        refusal,
    };
    Ok(render::ok(req, "Farm", views::operator_farm(&v)))
}

#[tracing::instrument(name = "Page: the farm", skip_all)]
pub async fn operator_farm(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    page(&req, &state, None).await
}

#[tracing::instrument(name = "Page: run the maintenance now", skip_all)]
pub async fn run_now(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    if state.farm.is_none() {
        return Err(AppError::Refused("No farm is connected: there is nothing to maintain.".into()));
    }
    match maintenance::run_now(&state.db).await {
        Ok(()) => Ok(after_post(&req, &format!("{}?ran=1", paths::OPERATOR_FARM))),
        Err(ServiceError::Refused(why)) => {
            let mut answer = page(&req, &state, Some(why)).await?;
            *answer.status_mut() = actix_web::http::StatusCode::CONFLICT;
            Ok(answer)
        }
        Err(e) => Err(e.into()),
    }
}
