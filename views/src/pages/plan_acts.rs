//! The operator's plan acts: the list, and one act's facts.
//!
//! A plan act is an operator's change to the topology that reaches existing organizations: a
//! tier added, removed (with a disposition) or deleted, a default changed, tiers reordered, or a
//! retry of one of them.
//!
//! An act that reaches organizations owes each of them a move (an obligation); the act's page
//! follows them live. While the act runs, its progress container polls itself (htmx 4 has no
//! status 286: polling stops when the polling element leaves the page), so the server's answer
//! to the poll is the container again, and the finished render carries no `hx-trigger`.

use crate::forms::button_form;
use crate::paths::{self, fill};
use maud::{Markup, html};

use crate::components::pace::{Pace, Standing, States, pace_stats};
use crate::components::{
    Column, back_link, card, card_with_aside, facts, number_link, or_none, org_link, polling, progress, stat,
    table_cols,
};

/// The element the progress partial replaces, polled while running and the retry form's target.
const PROGRESS_ID: &str = "plan-act-progress";
const STATES: States = States { running: "running", done: "done" };

/// One plan act as the list shows it.
pub struct PlanActRow {
    pub id: i64,
    /// "tier_add", "tier_removal", "tier_delete", "default_change", "tier_reorder" or "retry".
    pub kind: String,
    /// Already worded, e.g. "Pro added to Wiki hosting at rank 2".
    pub what: String,
    /// The operator's email, or "—".
    pub by: String,
    /// Already formatted.
    pub at: String,
    /// "running" or "done".
    pub state: String,
    /// A tier removal's: "migrate" or "grandfather".
    pub disposition: Option<String>,
}

/// The list: what a plan act is, then a table, newest first as the handler gives them.
pub fn plan_act_list(rows: &[PlanActRow]) -> Markup {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                act_link(r.id),
                html! { (kind_label(&r.kind)) },
                html! { (r.what) },
                disposition(r.disposition.as_deref()),
                html! { (r.by) },
                html! { (r.at) },
                STATES.badge(&r.state),
            ]
        })
        .collect();
    let columns = [
        Column::text("Plan act"),
        Column::text("Kind"),
        Column::text("What"),
        Column::text("Disposition"),
        Column::text("By"),
        Column::text("When"),
        Column::text("State"),
    ];
    html! {
        p.muted {
            "A plan act is an operator's change to the plan topology: a tier added, removed or "
            "deleted, a default changed, tiers reordered. Each one records what it changed and, "
            "when it reaches organizations that need moving, how far it has got."
        }
        (table_cols(&columns, cells, "No plan acts yet."))
    }
}

/// The kind in words; an unknown kind is shown as it is.
fn kind_label(kind: &str) -> &str {
    match kind {
        "tier_add" => "Tier added",
        "tier_removal" => "Tier removed",
        "tier_delete" => "Tier deleted",
        "default_change" => "Default changed",
        "tier_reorder" => "Tiers reordered",
        "retry" => "Retry",
        other => other,
    }
}

fn act_link(id: i64) -> Markup {
    number_link(&fill(paths::PLAN_ACT, &[&id]), id)
}

fn disposition(d: Option<&str>) -> Markup {
    or_none(d, "—")
}

pub struct PlanActView {
    /// The act as the list shows it.
    pub act: PlanActRow,
    /// "" when none was given.
    pub reason: String,
    /// Extra label/value pairs from the act's detail, in order.
    pub facts: Vec<(String, String)>,
    pub csrf: String,
    /// The act's obligations by state; `None` for an act that reaches no organization.
    pub counts: Option<ObligationCounts>,
    /// Every organization of the reached types has been listed (an obligation made for each).
    pub listed_all: bool,
    pub failures: Vec<FailedOrganization>,
    /// Whether the retry form is offered.
    pub can_retry: bool,
    /// The moves of about the last minute, read while organizations are pending.
    pub pace: Option<Pace>,
}

/// How many of an act's organizations are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObligationCounts {
    pub pending: u64,
    pub migrated: u64,
    pub grandfathered: u64,
    pub vacant: u64,
    pub failed: u64,
    pub superseded: u64,
}

impl ObligationCounts {
    /// Obligations that need nothing more: migrated, grandfathered, vacant or superseded.
    pub fn settled(&self) -> u64 {
        self.migrated.saturating_add(self.grandfathered).saturating_add(self.vacant).saturating_add(self.superseded)
    }

    /// Every obligation, whatever its state.
    pub fn total(&self) -> u64 {
        self.settled().saturating_add(self.pending).saturating_add(self.failed)
    }
}

/// An organization the act failed to move.
pub struct FailedOrganization {
    pub organization_id: i64,
    pub organization: String,
    pub attempts: i32,
    pub error: String,
}

/// Back link, the facts, then [`plan_act_progress`] for an act that reaches organizations, or
/// (for a finished tier add or delete) that it moved no one.
pub fn plan_act_page(v: &PlanActView) -> Markup {
    let mut items: Vec<(&str, Markup)> = vec![
        ("Plan act", html! { "#" (v.act.id) }),
        ("Kind", html! { (kind_label(&v.act.kind)) }),
        ("What", html! { (v.act.what) }),
    ];
    if let Some(d) = &v.act.disposition {
        items.push(("Disposition", html! { (d) }));
    }
    items.push((
        "Reason",
        if v.reason.trim().is_empty() {
            html! { span.muted { "none given" } }
        } else {
            html! { (v.reason) }
        },
    ));
    items.push(("By", html! { (v.act.by) }));
    items.push(("When", html! { (v.act.at) }));
    items.push(("State", STATES.badge(&v.act.state)));
    items.extend(v.facts.iter().map(|(label, value)| (label.as_str(), html! { (value) })));
    let moved_no_one = v.act.state == STATES.done && matches!(v.act.kind.as_str(), "tier_add" | "tier_delete");
    html! {
        (back_link(paths::PLAN_ACTS, "All plan acts"))
        (facts(&items))
        @if v.counts.is_some() {
            (plan_act_progress(v))
        } @else if moved_no_one {
            p.plan-act-note {
                "This act reached no organization that needs moving: its own transaction did the "
                "work, so there is no progress to follow."
            }
        }
    }
}

/// The container `#plan-act-progress`: bar, where it stands (done, left, failed, rate, time
/// left), the counts by state, failed organizations and the retry form; nothing for an act that
/// reaches no organization.
///
/// While running it GETs `/operator/plan-acts/{id}/progress` every 2 seconds and replaces itself
/// with the answer (this partial); done, it carries no trigger, so polling stops.
pub fn plan_act_progress(v: &PlanActView) -> Markup {
    let Some(counts) = &v.counts else {
        return html! {};
    };
    let poll = (v.act.state == STATES.running).then(|| fill(paths::PLAN_ACT_PROGRESS, &[&v.act.id]));
    let body = html! {
        (card_with_aside(
            "pa-progress-heading",
            "Progress",
            STATES.live_status(&v.act.state, html! { "Done: this act has finished" }),
            html! {
                @if v.listed_all {
                    (progress(counts.settled(), counts.total(), "Organizations settled"))
                } @else {
                    (listing_progress(counts.settled(), counts.total()))
                    p.listing-status { "Still listing organizations…" }
                }
                (pace_stats(&Standing {
                    done: counts.settled(),
                    left: counts.pending,
                    failed: counts.failed,
                    pace: v.pace,
                    listed_all: v.listed_all,
                }))
                div.stats.plan-act-counts aria-live="polite" {
                    (stat("Pending", counts.pending, false))
                    (stat("Migrated", counts.migrated, false))
                    (stat("Grandfathered", counts.grandfathered, false))
                    (stat("Vacant", counts.vacant, false))
                    (stat("Failed", counts.failed, counts.failed > 0))
                    (stat("Superseded", counts.superseded, false))
                }
            },
        ))
        (card("pa-failures-heading", "Failed organizations", html! {
            (failures_table(&v.failures))
            @if v.can_retry {
                (retry_form(&v.csrf, v.act.id))
            }
        }))
    };
    polling(PROGRESS_ID, Some("plan-act-progress"), poll.as_deref(), body)
}

/// The bar while organizations are still being listed: the total is not known yet, so it
/// never says complete.
fn listing_progress(settled: u64, listed: u64) -> Markup {
    let label = "Organizations settled";
    let value = settled.min(listed);
    html! {
        div.progress {
            div.progress-head {
                span.progress-label { (label) }
                span.progress-count { (settled) " of " (listed) " listed so far" }
            }
            progress value=(value) max=(listed.max(1)) aria-label=(label) {
                (settled) " of " (listed) " listed so far"
            }
        }
    }
}

fn failures_table(failures: &[FailedOrganization]) -> Markup {
    let rows = failures
        .iter()
        .map(|f| {
            vec![
                org_link(f.organization_id, &f.organization),
                html! { (f.attempts) },
                html! { pre.error-text { (f.error) } },
            ]
        })
        .collect();
    let columns = [Column::text("Organization"), Column::num("Attempts"), Column::text("Error")];
    table_cols(&columns, rows, "No organization has failed.")
}

/// POST `/operator/plan-acts/{id}/retry`; htmx swaps `#plan-act-progress` with the answer.
fn retry_form(csrf: &str, id: i64) -> Markup {
    button_form(&fill(paths::PLAN_ACT_RETRY, &[&id]), PROGRESS_ID, csrf, "Retry failed organizations")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, kind: &str, state: &str, disposition: Option<&str>) -> PlanActRow {
        PlanActRow {
            id,
            kind: kind.into(),
            what: "Pro added to Wiki hosting at rank 2".into(),
            by: "op@example.org".into(),
            at: "2025-06-01 12:00".into(),
            state: state.into(),
            disposition: disposition.map(Into::into),
        }
    }

    fn view(kind: &str, state: &str) -> PlanActView {
        PlanActView {
            act: PlanActRow {
                what: "<script>Pro</script> added to Wiki hosting at rank 2".into(),
                ..row(5, kind, state, None)
            },
            reason: "".into(),
            facts: vec![("Holders reached".into(), "3".into()), ("<k>".into(), "<v>".into())],
            csrf: "tok".into(),
            counts: None,
            listed_all: true,
            failures: vec![],
            can_retry: false,
            pace: None,
        }
    }

    fn counts() -> ObligationCounts {
        ObligationCounts { pending: 4, migrated: 3, grandfathered: 2, vacant: 1, failed: 1, superseded: 1 }
    }

    /// A tier removal that reaches 12 organizations, one of them failed.
    fn reaching(state: &str) -> PlanActView {
        let mut v = view("tier_removal", state);
        v.act.disposition = Some("migrate".into());
        v.counts = Some(counts());
        v.failures = vec![FailedOrganization {
            organization_id: 7,
            organization: "<b>Acme</b>".into(),
            attempts: 3,
            error: "<script>alert(1)</script>".into(),
        }];
        v.can_retry = true;
        v
    }

    #[test]
    fn list_links_each_act_words_its_kind_and_badges_its_state() {
        let out =
            plan_act_list(&[row(9, "tier_removal", "running", Some("grandfather")), row(8, "tier_add", "done", None)])
                .into_string();
        assert!(out.contains("plan act is an operator's change"));
        assert!(out.contains(r##"<td><a href="/operator/plan-acts/9">#9</a></td><td>Tier removed</td>"##));
        assert!(out.contains(r##"<td><a href="/operator/plan-acts/8">#8</a></td><td>Tier added</td>"##));
        assert!(out.contains("<td>Pro added to Wiki hosting at rank 2</td><td>grandfather</td>"));
        assert!(out.contains(r#"<td><span class="muted">—</span></td>"#));
        assert!(out.contains("<td>op@example.org</td><td>2025-06-01 12:00</td>"));
        assert!(out.contains(r#"<span class="badge badge-warn">running</span>"#));
        assert!(out.contains(r#"<span class="badge badge-ok">done</span>"#));
        // Newest first, as given.
        assert!(out.find("/plan-acts/9").unwrap() < out.find("/plan-acts/8").unwrap());
    }

    #[test]
    fn every_kind_has_words() {
        assert_eq!(kind_label("tier_add"), "Tier added");
        assert_eq!(kind_label("tier_removal"), "Tier removed");
        assert_eq!(kind_label("tier_delete"), "Tier deleted");
        assert_eq!(kind_label("default_change"), "Default changed");
        assert_eq!(kind_label("tier_reorder"), "Tiers reordered");
        assert_eq!(kind_label("retry"), "Retry");
        assert_eq!(kind_label("other"), "other");
    }

    #[test]
    fn list_empty_state() {
        let out = plan_act_list(&[]).into_string();
        assert!(out.contains(r#"<p class="empty">No plan acts yet.</p>"#));
        assert!(!out.contains("<table"));
    }

    #[test]
    fn list_escapes_data() {
        let mut r = row(1, "<b>k</b>", "done", Some("<i>d</i>"));
        r.what = "<script>x</script>".into();
        let out = plan_act_list(&[r]).into_string();
        assert!(out.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(out.contains("&lt;b&gt;k&lt;/b&gt;"));
        assert!(out.contains("&lt;i&gt;d&lt;/i&gt;"));
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn page_has_back_link_facts_in_order_and_extra_facts() {
        let mut v = view("tier_removal", "running");
        v.act.disposition = Some("migrate".into());
        v.reason = "retire Basic".into();
        let out = plan_act_page(&v).into_string();
        assert!(out.starts_with(r#"<p><a href="/operator/plan-acts">← All plan acts</a></p>"#));
        let order = [
            "<dt>Plan act</dt><dd>#5</dd>",
            "<dt>Kind</dt><dd>Tier removed</dd>",
            "<dt>What</dt><dd>&lt;script&gt;Pro&lt;/script&gt; added",
            "<dt>Disposition</dt><dd>migrate</dd>",
            "<dt>Reason</dt><dd>retire Basic</dd>",
            "<dt>By</dt><dd>op@example.org</dd>",
            "<dt>When</dt><dd>2025-06-01 12:00</dd>",
            r#"<dt>State</dt><dd><span class="badge badge-warn">running</span></dd>"#,
            "<dt>Holders reached</dt><dd>3</dd>",
            "<dt>&lt;k&gt;</dt><dd>&lt;v&gt;</dd>",
        ];
        let mut at = 0;
        for part in order {
            let found = out[at..].find(part).unwrap_or_else(|| panic!("{part} after {at}"));
            at += found + part.len();
        }
        assert!(!out.contains("<script>"));
        assert!(!out.contains("reached no organization"));
    }

    #[test]
    fn page_without_disposition_or_reason() {
        let out = plan_act_page(&view("tier_reorder", "done")).into_string();
        assert!(!out.contains("Disposition"));
        assert!(out.contains(r#"<dt>Reason</dt><dd><span class="muted">none given</span></dd>"#));
        assert!(out.contains("<dt>Kind</dt><dd>Tiers reordered</dd>"));
        assert!(!out.contains("reached no organization"));
    }

    #[test]
    fn a_finished_tier_add_or_delete_says_it_moved_no_one() {
        for kind in ["tier_add", "tier_delete"] {
            let out = plan_act_page(&view(kind, "done")).into_string();
            assert!(out.contains("reached no organization that needs moving"), "{kind}");
            let out = plan_act_page(&view(kind, "running")).into_string();
            assert!(!out.contains("reached no organization"), "{kind}");
        }
    }

    #[test]
    fn progress_polls_itself_while_running() {
        let out = plan_act_progress(&reaching("running")).into_string();
        assert!(out.starts_with(
            r#"<div class="plan-act-progress" id="plan-act-progress" hx-get="/operator/plan-acts/5/progress" hx-trigger="every 2s" hx-swap="outerHTML">"#
        ));
        assert!(out.contains(r#"<span class="badge badge-warn">running</span>"#));
        assert!(out.contains("Updating live"));
        assert!(!out.contains("Done: this act has finished"));
        assert!(out.ends_with("</div>"));
    }

    #[test]
    fn progress_stops_polling_once_done_and_says_so() {
        let mut v = reaching("done");
        v.counts = Some(ObligationCounts { pending: 0, failed: 0, ..counts() });
        v.failures = vec![];
        v.can_retry = false;
        let out = plan_act_progress(&v).into_string();
        assert!(out.starts_with(r#"<div class="plan-act-progress" id="plan-act-progress">"#));
        assert!(!out.contains("hx-trigger"));
        assert!(!out.contains("hx-get"));
        assert!(!out.contains("Updating live"));
        assert!(out.contains(r#"<span class="badge badge-ok">done</span> Done: this act has finished"#));
        assert!(out.contains("7 of 7 · complete"));
        assert!(out.contains(r#"<p class="empty">No organization has failed.</p>"#));
        assert!(!out.contains("<form"));
    }

    #[test]
    fn progress_shows_the_bar_and_the_six_counts() {
        let out = plan_act_progress(&reaching("running")).into_string();
        // Settled: 3 migrated + 2 grandfathered + 1 vacant + 1 superseded, of all 12.
        assert!(out.contains(r#"<progress value="7" max="12" aria-label="Organizations settled">58%</progress>"#));
        assert!(out.contains("7 of 12</span>"));
        assert!(out.contains(r#"<div class="stats plan-act-counts" aria-live="polite">"#));
        let stats = [
            ("stat", "4", "Pending"),
            ("stat", "3", "Migrated"),
            ("stat", "2", "Grandfathered"),
            ("stat", "1", "Vacant"),
            ("stat stat-bad", "1", "Failed"),
            ("stat", "1", "Superseded"),
        ];
        let mut at = 0;
        for (class, value, label) in stats {
            let part = format!(
                r#"<div class="{class}"><span class="stat-value">{value}</span><span class="stat-label">{label}</span></div>"#
            );
            let found = out[at..].find(&part).unwrap_or_else(|| panic!("{part} after {at}"));
            at += found + part.len();
        }
        assert!(!out.contains("Still listing"));
        let c = counts();
        assert_eq!((c.settled(), c.total()), (7, 12));
    }

    #[test]
    fn progress_says_how_fast_the_moves_go_and_how_long_is_left() {
        let mut v = reaching("running");
        // 4 pending, at 120 moves over the last minute.
        v.pace = Some(Pace { settled: 120, seconds: 60.0 });
        let out = plan_act_progress(&v).into_string();
        let parts = [
            r#"<div class="stats pace-stats" aria-live="polite">"#,
            r#"<span class="stat-value">7</span><span class="stat-label">Done</span>"#,
            r#"<span class="stat-value">4</span><span class="stat-label">Left</span>"#,
            r#"<span class="stat-value">1</span><span class="stat-label">Failed</span>"#,
            r#"<span class="stat-words">2 a second</span></span><span class="stat-label">Rate</span>"#,
            r#"<span class="stat-words">under a minute left</span></span><span class="stat-label">Time left</span>"#,
            r#"<div class="stats plan-act-counts" aria-live="polite">"#,
        ];
        let mut at = 0;
        for part in parts {
            let found = out[at..].find(part).unwrap_or_else(|| panic!("{part} after {at}"));
            at += found + part.len();
        }
        // Nothing moved in the last minute: waiting, and no time is promised.
        v.pace = Some(Pace { settled: 0, seconds: 60.0 });
        let out = plan_act_progress(&v).into_string();
        assert!(out.contains(r#"<span class="stat-words">waiting</span>"#));
        assert!(out.contains(r#"<span class="stat-words">not known yet</span>"#));
    }

    #[test]
    fn a_finished_act_shows_no_rate_or_time_left() {
        let mut v = reaching("done");
        v.counts = Some(ObligationCounts { pending: 0, ..counts() });
        let out = plan_act_progress(&v).into_string();
        assert!(out.contains(r#"<span class="stat-value">7</span><span class="stat-label">Done</span>"#));
        assert!(out.contains(r#"<span class="stat-value">0</span><span class="stat-label">Left</span>"#));
        assert!(!out.contains("Rate") && !out.contains("Time left"));
    }

    #[test]
    fn progress_while_listing_says_so_and_never_says_complete() {
        let mut v = reaching("running");
        v.listed_all = false;
        v.counts = Some(ObligationCounts { pending: 0, failed: 0, ..counts() });
        let out = plan_act_progress(&v).into_string();
        assert!(out.contains("Still listing organizations…"));
        assert!(out.contains("7 of 7 listed so far"));
        assert!(!out.contains("complete"));
        v.counts = Some(ObligationCounts::default());
        let out = plan_act_progress(&v).into_string();
        assert!(out.contains(r#"<progress value="0" max="1""#));
        assert!(out.contains("0 of 0 listed so far"));
        assert!(!out.contains("complete"));
    }

    #[test]
    fn failures_link_the_organization_and_escape() {
        let out = plan_act_progress(&reaching("running")).into_string();
        assert!(out.contains(
            r#"<td><a href="/operator/organizations/7">&lt;b&gt;Acme&lt;/b&gt;</a></td><td class="num">3</td><td><pre class="error-text">&lt;script&gt;alert(1)&lt;/script&gt;</pre></td>"#
        ));
        assert!(!out.contains("<script>"));
        assert!(!out.contains("<b>"));
    }

    #[test]
    fn retry_form_posts_with_csrf_and_swaps_the_progress_only_when_offered() {
        let out = plan_act_progress(&reaching("done")).into_string();
        assert!(out.contains(
            r##"<form method="post" action="/operator/plan-acts/5/retry" hx-post="/operator/plan-acts/5/retry" hx-target="#plan-act-progress" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok"><div class="form-actions"><button class="btn btn-primary" type="submit">Retry failed organizations</button></div></form>"##
        ));
        let mut v = reaching("done");
        v.can_retry = false;
        let out = plan_act_progress(&v).into_string();
        assert!(!out.contains("<form"));
        assert!(!out.contains("Retry failed organizations"));
    }

    #[test]
    fn progress_of_an_act_that_reaches_no_one_is_empty() {
        assert_eq!(plan_act_progress(&view("tier_add", "running")).into_string(), "");
        let out = plan_act_page(&view("tier_reorder", "running")).into_string();
        assert!(!out.contains("plan-act-progress"));
    }

    #[test]
    fn page_shows_the_progress_after_the_facts_instead_of_the_note() {
        let out = plan_act_page(&reaching("running")).into_string();
        let facts_end = out.find("</dl>").unwrap();
        let container = out.find(r#"id="plan-act-progress""#).unwrap();
        assert!(facts_end < container);
        assert!(out.contains(r#"hx-get="/operator/plan-acts/5/progress""#));
        // A finished tier delete that reached organizations shows its progress, not the note.
        let mut v = reaching("done");
        v.act.kind = "tier_delete".into();
        let out = plan_act_page(&v).into_string();
        assert!(out.contains(r#"id="plan-act-progress""#));
        assert!(!out.contains("reached no organization"));
        assert!(!out.contains("<script>"));
    }
}
