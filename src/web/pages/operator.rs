//! The operator's overview: each subsystem's health, the last hour in charts, accounts,
//! organizations and the job queue.

use actix_web::HttpResponse;
use chrono::{DateTime, Utc};
use views::{Tone, paths};

use crate::{
    metrics::{self, System},
    services::{
        self,
        observability::{self, CHART_SPAN, Charts, Health},
    },
    store::metrics::Sample,
    web::call::{Call, OperatorCall},
    web::{errors::AppError, render},
};

#[tracing::instrument(name = "Page: operations", skip_all)]
pub async fn overview(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let o = services::accounts::operator_overview(&state.db).await?;
    let health = observability::health(&state.db).await?;
    let charts = observability::charts(&state.db).await?;
    let connected = Connected {
        stripe: state.stripe.is_some(),
        farm: state.farm.is_some(),
        stripe_calls: metrics::global().remote_calls(System::Stripe),
        farm_calls: metrics::global().remote_calls(System::Farm),
    };
    let now = Utc::now();
    let view = views::OperatorHomeView {
        subsystems: subsystems(&health, &connected, now),
        charts: chart_series(&charts, now),
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

/// What this server is connected to, and its calls to each (calls, failed) since it started.
struct Connected {
    stripe: bool,
    farm: bool,
    stripe_calls: (u64, u64),
    farm_calls: (u64, u64),
}

/// A due job waiting longer than this means the workers are behind (or none runs).
const JOBS_BEHIND_SECONDS: f64 = 60.0;
/// An outbox row due longer than this means its processor is behind.
const OUTBOX_BEHIND_SECONDS: f64 = 300.0;

fn subsystems(h: &Health, c: &Connected, now: DateTime<Utc>) -> Vec<views::Subsystem> {
    vec![jobs(h), drains(h), outbox(h), stripe(h, c, now), farm(h, c, now), relay(h)]
}

fn subsystem(name: &str, tone: Tone, state: &str, lines: Vec<String>, href: Option<&str>) -> views::Subsystem {
    views::Subsystem { name: name.into(), tone, state: state.into(), lines, href: href.map(str::to_string) }
}

/// A remote this server has no settings for: muted, with the setting that would connect it.
fn not_connected(name: &str, how: &str) -> views::Subsystem {
    subsystem(name, Tone::Muted, "Not connected", vec![how.into()], None)
}

fn jobs(h: &Health) -> views::Subsystem {
    let oldest = h.oldest_due_seconds();
    let mut lines = vec![format!("{} queued, {} running.", h.queued(), h.jobs.iter().map(|j| j.running).sum::<i64>())];
    if oldest > 0.0 {
        lines.push(format!("The oldest due job has waited {}.", seconds_words(oldest)));
    }
    let failed = h.failed_jobs();
    if failed > 0 {
        lines.push(format!("{failed} failed for good: see Failed jobs below."));
    }
    let (tone, state) = if failed > 0 {
        (Tone::Bad, "Failing")
    } else if oldest > JOBS_BEHIND_SECONDS {
        (Tone::Warn, "Behind")
    } else {
        (Tone::Ok, "Healthy")
    };
    subsystem("Jobs", tone, state, lines, None)
}

fn drains(h: &Health) -> views::Subsystem {
    let b = &h.backlog;
    let lines = vec![
        format!("{} rule changes draining, {} moves owed.", b.rule_changes_draining, b.rule_change_moves_owed),
        format!("{} plan acts running, {} moves owed.", b.plan_acts_running, b.plan_act_moves_pending),
    ];
    let (tone, state, href) = if b.plan_act_moves_failed > 0 {
        (Tone::Warn, "Moves failed", paths::PLAN_ACTS)
    } else if b.rule_changes_draining > 0 {
        (Tone::Ok, "Draining", paths::RULE_CHANGES)
    } else if b.plan_acts_running > 0 {
        (Tone::Ok, "Draining", paths::PLAN_ACTS)
    } else {
        (Tone::Ok, "Idle", paths::PLAN_ACTS)
    };
    let mut lines = lines;
    if b.plan_act_moves_failed > 0 {
        lines.push(format!("{} plan-act moves failed and wait for a Retry.", b.plan_act_moves_failed));
    }
    subsystem("Drains", tone, state, lines, Some(href))
}

fn outbox(h: &Health) -> views::Subsystem {
    let b = &h.backlog;
    let mut lines = vec![format!("{} reconciles and product syncs waiting.", b.outbox_pending)];
    if b.outbox_oldest_due_seconds > 0.0 {
        lines.push(format!("The oldest due has waited {}.", seconds_words(b.outbox_oldest_due_seconds)));
    }
    let (tone, state) = if b.outbox_oldest_due_seconds > OUTBOX_BEHIND_SECONDS {
        (Tone::Warn, "Behind")
    } else {
        (Tone::Ok, "Healthy")
    };
    subsystem("Outbox", tone, state, lines, Some(paths::OPERATOR_BILLING))
}

fn stripe(h: &Health, c: &Connected, now: DateTime<Utc>) -> views::Subsystem {
    if !c.stripe {
        return not_connected("Stripe", "Billing is off: set STRIPE_SECRET_KEY to connect.");
    }
    let (calls, failed) = c.stripe_calls;
    let mut lines = vec![format!("{calls} calls from this server since it started, {failed} failed.")];
    lines.push(match h.last_stripe_event {
        Some(at) => format!(
            "Last event {} ago; {} in the last hour.",
            seconds_words((now - at).num_seconds().max(0) as f64),
            h.stripe_events_last_hour
        ),
        None => "No event received yet.".into(),
    });
    let (tone, state) = if failed > 0 { (Tone::Warn, "Calls failed") } else { (Tone::Ok, "Healthy") };
    subsystem("Stripe", tone, state, lines, Some(paths::OPERATOR_BILLING))
}

fn farm(h: &Health, c: &Connected, now: DateTime<Utc>) -> views::Subsystem {
    if !c.farm {
        return not_connected("Farm", "Sites are off: set FARM_URL to connect.");
    }
    let (calls, failed) = c.farm_calls;
    let mut lines = vec![format!("{calls} calls from this server since it started, {failed} failed.")];
    let (tone, state) = match &h.last_farm_run {
        None => {
            lines.push("No maintenance run yet.".into());
            (Tone::Muted, "No run yet")
        }
        Some(r) if r.outcome.is_none() => {
            lines.push(format!(
                "A maintenance run is going, started {} ago.",
                seconds_words((now - r.started_at).num_seconds().max(0) as f64)
            ));
            (Tone::Ok, "Running")
        }
        Some(r) => {
            let ended = r.finished_at.unwrap_or(r.started_at);
            let ago = seconds_words((now - ended).num_seconds().max(0) as f64);
            if r.outcome.as_deref() == Some("ok") {
                lines.push(format!("The last maintenance run ended well {ago} ago."));
                (Tone::Ok, "Healthy")
            } else {
                lines.push(format!(
                    "The last maintenance run failed {ago} ago: {}",
                    r.error.as_deref().unwrap_or("no reason recorded.")
                ));
                (Tone::Bad, "Last run failed")
            }
        }
    };
    subsystem("Farm", tone, state, lines, Some(paths::OPERATOR_FARM))
}

fn relay(h: &Health) -> views::Subsystem {
    let b = &h.backlog;
    if b.live_connections == 0 {
        return subsystem(
            "Relay",
            Tone::Muted,
            "No connections",
            vec!["No connected system receives the entitlements.".into()],
            Some(paths::CONNECTIONS),
        );
    }
    let lines = vec![
        format!("{} connections; {} notices waiting.", b.live_connections, b.desired_state_notices),
        format!("{} records behind, {} failing.", b.desired_state_behind, b.desired_state_failing),
    ];
    let (tone, state) = if b.desired_state_failing > 0 {
        (Tone::Bad, "Failing")
    } else if b.desired_state_behind > 0 || b.desired_state_notices > 0 {
        (Tone::Ok, "Sending")
    } else {
        (Tone::Ok, "All confirmed")
    };
    subsystem("Relay", tone, state, lines, Some(paths::CONNECTIONS))
}

/// The charts' series: minutes into the last hour.
fn chart_series(c: &Charts, now: DateTime<Utc>) -> Vec<views::charts::Series> {
    let span = CHART_SPAN.num_minutes() as f64;
    let points = |samples: &[Sample]| -> Vec<(f64, f64)> {
        samples
            .iter()
            .map(|s| {
                let ago = (now - s.minute).num_seconds() as f64 / 60.0;
                (span - ago, s.value)
            })
            .filter(|(x, _)| *x >= 0.0)
            .collect()
    };
    let empty = "No samples yet: each server writes one a minute.".to_string();
    vec![
        views::charts::Series {
            title: "Requests per minute".into(),
            points: points(&c.requests),
            span,
            empty: empty.clone(),
        },
        views::charts::Series {
            title: "Jobs queued".into(),
            points: points(&c.queue_depth),
            span,
            empty: empty.clone(),
        },
        views::charts::Series { title: "Drain moves owed".into(), points: points(&c.drain_remaining), span, empty },
    ]
}

/// "40 s", "3 min", "2 h 5 min".
fn seconds_words(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s / 60)
    } else {
        let (h, m) = (s / 3600, (s % 3600) / 60);
        if m == 0 { format!("{h} h") } else { format!("{h} h {m} min") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::metrics::{Backlog, JobKindFigures, LastFarmRun};

    fn health() -> Health {
        Health {
            jobs: vec![],
            backlog: Backlog::default(),
            last_farm_run: None,
            last_stripe_event: None,
            stripe_events_last_hour: 0,
        }
    }

    fn connected() -> Connected {
        Connected { stripe: true, farm: true, stripe_calls: (0, 0), farm_calls: (0, 0) }
    }

    fn find<'a>(all: &'a [views::Subsystem], name: &str) -> &'a views::Subsystem {
        all.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn a_failed_job_makes_the_jobs_failing_and_a_long_wait_makes_them_behind() {
        let mut h = health();
        h.jobs = vec![JobKindFigures { kind: "k".into(), queued: 2, running: 1, oldest_due_seconds: 90.0, failed: 0 }];
        let all = subsystems(&h, &connected(), Utc::now());
        assert_eq!(find(&all, "Jobs").state, "Behind");
        assert_eq!(find(&all, "Jobs").lines[0], "2 queued, 1 running.");
        h.jobs[0].failed = 1;
        let all = subsystems(&h, &connected(), Utc::now());
        assert_eq!(find(&all, "Jobs").state, "Failing");
        assert_eq!(find(&all, "Jobs").tone, Tone::Bad);
    }

    #[test]
    fn systems_not_connected_say_so_in_a_muted_tone() {
        let c = Connected { stripe: false, farm: false, ..connected() };
        let all = subsystems(&health(), &c, Utc::now());
        for name in ["Stripe", "Farm"] {
            assert_eq!(find(&all, name).state, "Not connected");
            assert_eq!(find(&all, name).tone, Tone::Muted);
        }
        assert_eq!(find(&all, "Relay").state, "No connections");
    }

    #[test]
    fn a_failed_farm_run_is_bad_and_says_its_reason() {
        let now = Utc::now();
        let mut h = health();
        h.last_farm_run = Some(LastFarmRun {
            started_at: now - chrono::TimeDelta::minutes(3),
            finished_at: Some(now - chrono::TimeDelta::minutes(2)),
            outcome: Some("failed".into()),
            error: Some("The farm could not be reached.".into()),
        });
        let all = subsystems(&h, &connected(), now);
        let farm = find(&all, "Farm");
        assert_eq!(farm.tone, Tone::Bad);
        assert_eq!(farm.lines[1], "The last maintenance run failed 2 min ago: The farm could not be reached.");
    }

    #[test]
    fn failing_records_make_the_relay_failing() {
        let mut h = health();
        h.backlog.live_connections = 1;
        h.backlog.desired_state_behind = 3;
        let all = subsystems(&h, &connected(), Utc::now());
        assert_eq!(find(&all, "Relay").state, "Sending");
        h.backlog.desired_state_failing = 2;
        let all = subsystems(&h, &connected(), Utc::now());
        assert_eq!(find(&all, "Relay").state, "Failing");
    }

    #[test]
    fn samples_become_minutes_into_the_hour_and_older_ones_are_left_out() {
        let now = Utc::now();
        let c = Charts {
            requests: vec![
                Sample { minute: now - chrono::TimeDelta::minutes(90), value: 9.0 },
                Sample { minute: now - chrono::TimeDelta::minutes(15), value: 4.0 },
            ],
            ..Charts::default()
        };
        let series = chart_series(&c, now);
        assert_eq!(series[0].points, vec![(45.0, 4.0)]);
        assert!(series[1].points.is_empty());
    }

    #[test]
    fn waits_are_worded_in_the_largest_unit_that_fits() {
        assert_eq!(seconds_words(40.4), "40 s");
        assert_eq!(seconds_words(185.0), "3 min");
        assert_eq!(seconds_words(7500.0), "2 h 5 min");
    }
}
