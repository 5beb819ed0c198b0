//! The operator's overview: each subsystem's health at a glance, the last hour in small charts,
//! then the job queue, accounts and failed jobs.

use maud::{Markup, html};

use crate::charts::{Series, sparkline};
use crate::components::{Column, Tone, badge, card, stat, table_cols};

/// One subsystem's health: jobs, drains, outbox, Stripe, the farm, the relay.
pub struct Subsystem {
    pub name: String,
    pub tone: Tone,
    /// The state in a word or two: "Healthy", "Draining", "Failing", "Not connected".
    pub state: String,
    /// What stands behind the state, a sentence each.
    pub lines: Vec<String>,
    /// The page that says more, if any.
    pub href: Option<String>,
}

/// How many jobs are in each state.
pub struct JobCounts {
    pub pending: i64,
    pub running: i64,
    pub failed: i64,
    pub done: i64,
}

pub struct FailedJob {
    pub id: i64,
    pub kind: String,
    pub attempts: i32,
    pub last_error: String,
    /// Already formatted by the web layer.
    pub failed_at: String,
}

pub struct AccountRow {
    pub email: String,
    pub is_operator: bool,
    pub organizations: i64,
    /// Already formatted by the web layer.
    pub created_at: String,
}

pub struct OperatorHomeView {
    pub subsystems: Vec<Subsystem>,
    /// The last hour: requests per minute, the job queue's depth, the drains' owed moves.
    pub charts: Vec<Series>,
    pub accounts: Vec<AccountRow>,
    pub organizations: i64,
    pub jobs: JobCounts,
    pub failed_jobs: Vec<FailedJob>,
}

/// Counts at a glance, the job queue, accounts, and failed jobs with their errors.
pub fn operator_home(v: &OperatorHomeView) -> Markup {
    html! {
        (summary(v))
        (health(&v.subsystems))
        (last_hour(&v.charts))
        (job_queue(&v.jobs))
        (accounts(&v.accounts))
        (failed_jobs(&v.failed_jobs))
    }
}

fn summary(v: &OperatorHomeView) -> Markup {
    html! {
        section.stats aria-label="Summary" {
            (stat("Accounts", v.accounts.len(), false))
            (stat("Organizations", v.organizations, false))
            (stat("Jobs waiting", v.jobs.pending, false))
            (stat("Jobs failed", v.jobs.failed, false))
        }
    }
}

fn health(subsystems: &[Subsystem]) -> Markup {
    card(
        "health-heading",
        "Health",
        html! {
            ul.health {
                @for s in subsystems {
                    li.subsystem {
                        div.subsystem-head {
                            @match &s.href {
                                Some(href) => a.subsystem-name href=(href) { (s.name) },
                                None => span.subsystem-name { (s.name) },
                            }
                            " "
                            (badge(&s.state, s.tone))
                        }
                        @for line in &s.lines {
                            p.subsystem-line { (line) }
                        }
                    }
                }
            }
        },
    )
}

fn last_hour(charts: &[Series]) -> Markup {
    card(
        "hour-heading",
        "The last hour",
        html! {
            div.charts {
                @for c in charts { (sparkline(c)) }
            }
        },
    )
}

fn job_queue(jobs: &JobCounts) -> Markup {
    // Tones say whether a number needs attention: waiting work is a warning, failures are bad.
    let rows = vec![
        job_row("Pending", jobs.pending, Tone::Warn),
        job_row("Running", jobs.running, Tone::Ok),
        job_row("Failed", jobs.failed, Tone::Bad),
        job_row("Done", jobs.done, Tone::Ok),
    ];
    card("jobs-heading", "Job queue", table_cols(&[Column::text("State"), Column::num("Jobs")], rows, ""))
}

fn job_row(state: &str, count: i64, tone_when_nonzero: Tone) -> Vec<Markup> {
    let tone = if count > 0 { tone_when_nonzero } else { Tone::Muted };
    vec![badge(state, tone), html! { (count) }]
}

fn accounts(accounts: &[AccountRow]) -> Markup {
    let rows = accounts.iter().map(account_row).collect();
    let columns = [Column::text("Email"), Column::text("Role"), Column::num("Organizations"), Column::text("Created")];
    card("accounts-heading", "Accounts", table_cols(&columns, rows, "No accounts yet."))
}

fn account_row(a: &AccountRow) -> Vec<Markup> {
    let role = if a.is_operator { badge("Operator", Tone::Ok) } else { badge("Member", Tone::Muted) };
    vec![html! { (a.email) }, role, html! { (a.organizations) }, html! { (a.created_at) }]
}

fn failed_jobs(jobs: &[FailedJob]) -> Markup {
    let rows = jobs.iter().map(failed_job_row).collect();
    let columns = [
        Column::num("Id"),
        Column::text("Kind"),
        Column::num("Attempts"),
        Column::text("Failed at"),
        Column::text("Last error"),
    ];
    card("failed-heading", "Failed jobs", table_cols(&columns, rows, "No failed jobs."))
}

fn failed_job_row(j: &FailedJob) -> Vec<Markup> {
    vec![
        html! { (j.id) },
        html! { code { (j.kind) } },
        html! { (j.attempts) },
        html! { (j.failed_at) },
        html! { pre.error-text { (j.last_error) } },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> OperatorHomeView {
        OperatorHomeView {
            subsystems: vec![
                Subsystem {
                    name: "Jobs".into(),
                    tone: Tone::Bad,
                    state: "Failing".into(),
                    lines: vec!["1 job failed for good <b>".into()],
                    href: None,
                },
                Subsystem {
                    name: "Farm".into(),
                    tone: Tone::Ok,
                    state: "Healthy".into(),
                    lines: vec![],
                    href: Some("/operator/farm".into()),
                },
            ],
            charts: vec![Series {
                title: "Requests per minute".into(),
                points: vec![(0.0, 1.0), (60.0, 3.0)],
                span: 60.0,
                empty: "No samples yet.".into(),
            }],
            accounts: vec![
                AccountRow {
                    email: "op@example.org".into(),
                    is_operator: true,
                    organizations: 0,
                    created_at: "2025-01-02 03:04".into(),
                },
                AccountRow {
                    email: "ann@example.org".into(),
                    is_operator: false,
                    organizations: 2,
                    created_at: "2025-02-03 04:05".into(),
                },
            ],
            organizations: 7,
            jobs: JobCounts { pending: 3, running: 0, failed: 1, done: 40 },
            failed_jobs: vec![FailedJob {
                id: 11,
                kind: "stripe.reconcile".into(),
                attempts: 5,
                last_error: "timeout <script>alert(1)</script>".into(),
                failed_at: "2025-03-04 05:06".into(),
            }],
        }
    }

    #[test]
    fn operator_home_shows_counts() {
        let out = operator_home(&sample()).into_string();
        assert!(out.contains(r#"<span class="stat-value">2</span><span class="stat-label">Accounts</span>"#));
        assert!(out.contains(r#"<span class="stat-value">7</span><span class="stat-label">Organizations</span>"#));
        assert!(out.contains(r#"<span class="stat-value">1</span><span class="stat-label">Jobs failed</span>"#));
    }

    #[test]
    fn job_queue_badges_reflect_counts() {
        let out = operator_home(&sample()).into_string();
        assert!(out.contains(r#"<td><span class="badge badge-warn">Pending</span></td><td class="num">3</td>"#));
        assert!(out.contains(r#"<td><span class="badge badge-muted">Running</span></td><td class="num">0</td>"#));
        assert!(out.contains(r#"<td><span class="badge badge-bad">Failed</span></td><td class="num">1</td>"#));
        assert!(out.contains(r#"<td><span class="badge badge-ok">Done</span></td><td class="num">40</td>"#));
    }

    #[test]
    fn accounts_table_has_roles_and_numeric_org_counts() {
        let out = operator_home(&sample()).into_string();
        assert!(out.contains(r#"<td>op@example.org</td><td><span class="badge badge-ok">Operator</span></td><td class="num">0</td><td>2025-01-02 03:04</td>"#));
        assert!(out.contains(
            r#"<td>ann@example.org</td><td><span class="badge badge-muted">Member</span></td><td class="num">2</td>"#
        ));
    }

    #[test]
    fn failed_jobs_show_escaped_errors() {
        let out = operator_home(&sample()).into_string();
        assert!(out.contains(r#"<td class="num">11</td><td><code>stripe.reconcile</code></td><td class="num">5</td>"#));
        assert!(out.contains(r#"<pre class="error-text">timeout &lt;script&gt;alert(1)&lt;/script&gt;</pre>"#));
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn each_subsystem_shows_its_state_as_a_badge_and_links_to_its_page() {
        let out = operator_home(&sample()).into_string();
        assert!(
            out.contains(r#"<span class="subsystem-name">Jobs</span> <span class="badge badge-bad">Failing</span>"#),
            "{out}"
        );
        assert!(out.contains("1 job failed for good &lt;b&gt;"), "{out}");
        assert!(out.contains(r#"<a class="subsystem-name" href="/operator/farm">Farm</a> <span class="badge badge-ok">Healthy</span>"#), "{out}");
    }

    #[test]
    fn the_last_hour_is_drawn_as_charts() {
        let out = operator_home(&sample()).into_string();
        assert!(out.contains("The last hour"), "{out}");
        assert!(out.contains("Requests per minute"), "{out}");
        assert!(out.contains("<svg"), "{out}");
    }

    #[test]
    fn empty_lists_say_so() {
        let v = OperatorHomeView { accounts: vec![], failed_jobs: vec![], ..sample() };
        let out = operator_home(&v).into_string();
        assert!(out.contains(r#"<p class="empty">No accounts yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">No failed jobs.</p>"#));
    }
}
