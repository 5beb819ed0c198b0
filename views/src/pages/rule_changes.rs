//! The operator's rule changes: the list, and one rule change's facts and live progress.
//!
//! A rule change is an edit of an entitlement set's rules; every pool that carries the set is
//! owed it. A small one settles inline when it commits; a larger one is drained in the
//! background, one pool per short transaction, and failed pools are retried.
//!
//! While a rule change drains, its progress container polls itself (htmx 4 has no status 286:
//! polling stops when the polling element leaves the page), so the server's answer to the poll
//! is the container again, and the settled render carries no `hx-trigger`.

use crate::forms::button_form;
use crate::paths::{self, fill};
use maud::{Markup, html};

use crate::components::pace::{Pace, Standing, States, pace_stats};
use crate::components::{
    Column, Tone, back_link, badge, card, card_with_aside, facts, number_link, or_none, org_link, polling, progress,
    table_cols,
};

/// The element the progress partial replaces, polled while draining and the retry form's target.
const PROGRESS_ID: &str = "rule-change-progress";
const STATES: States = States { running: "draining", done: "settled" };

/// One rule change as the list shows it.
pub struct RuleChangeListRow {
    pub id: i64,
    pub set_id: i64,
    pub set_name: String,
    /// The operator's email, or "—".
    pub by: String,
    /// Already formatted.
    pub at: String,
    /// Already worded, e.g. "fedwiki.active_sites 3 → 5 · support.priority removed".
    pub summary: String,
    /// "draining" or "settled".
    pub state: String,
    /// Pools owed the change, settled, failed.
    pub owed: u64,
    pub settled: u64,
    pub failed: u64,
}

/// The list: what a rule change is, then a table, newest first as the handler gives them.
pub fn rule_change_list(rows: &[RuleChangeListRow]) -> Markup {
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                change_link(r.id),
                set_link(r.set_id, &r.set_name),
                html! { (r.by) },
                html! { (r.at) },
                html! { (r.summary) },
                state_badges(&r.state, r.failed),
                html! { (r.settled) " of " (r.owed) },
            ]
        })
        .collect();
    let columns = [
        Column::text("Rule change"),
        Column::text("Set"),
        Column::text("By"),
        Column::text("When"),
        Column::text("What changed"),
        Column::text("State"),
        Column::num("Pools settled"),
    ];
    html! {
        p.muted {
            "A rule change is an edit of an entitlement set's rules. It is applied to every pool "
            "that carries the set: each of them is owed the change until it settles. A small change "
            "is applied at once; a larger one is drained in the background, one pool at a time, and "
            "pools that fail are retried."
        }
        (table_cols(&columns, cells, "No rule changes yet."))
    }
}

fn change_link(id: i64) -> Markup {
    number_link(&fill(paths::RULE_CHANGE, &[&id]), id)
}

fn set_link(set_id: i64, name: &str) -> Markup {
    html! { a href=(fill(paths::CATALOG_SET, &[&set_id])) { (name) } }
}

/// The state's badge; plus "N failed" Bad when any pool failed.
fn state_badges(state: &str, failed: u64) -> Markup {
    html! {
        span.badges {
            (STATES.badge(state))
            @if failed > 0 {
                " " (badge(&format!("{failed} failed"), Tone::Bad))
            }
        }
    }
}

/// One act of a rule change: a key's rule before and after, and its pools.
pub struct ActProgress {
    pub key: String,
    /// "3", "yes", "no rule".
    pub before: String,
    pub after: String,
    pub owed: u64,
    pub settled: u64,
    pub failed: u64,
}

/// A pool the drain failed to settle.
pub struct FailedPool {
    pub pool_id: i64,
    pub organization_id: i64,
    pub organization: String,
    pub attempts: i32,
    pub error: String,
    /// Already formatted; `None` when no retry is scheduled.
    pub next_attempt: Option<String>,
}

pub struct RuleChangeView {
    pub csrf: String,
    pub id: i64,
    pub set_id: i64,
    pub set_name: String,
    /// The operator's email, or "—".
    pub by: String,
    /// Already formatted.
    pub at: String,
    /// "draining" or "settled".
    pub state: String,
    /// Settled in the commit that made it (at or below the sync cap).
    pub settled_inline: bool,
    /// How long the change held the exclusive rendezvous, when known.
    pub hold_ms: Option<f64>,
    pub total_owed: u64,
    pub total_settled: u64,
    pub total_failed: u64,
    pub acts: Vec<ActProgress>,
    pub failures: Vec<FailedPool>,
    /// Already formatted; set once settled.
    pub settled_at: Option<String>,
    /// Every carrying pool has been listed (owes the change); while listing, more can come.
    pub listed_all: bool,
    /// The pools settled in about the last minute, read while the change drains.
    pub pace: Option<Pace>,
}

/// Back link, the facts, then [`rule_change_progress`].
pub fn rule_change_page(v: &RuleChangeView) -> Markup {
    let how = if v.settled_inline { "applied at once" } else { "drained in the background" };
    let mut items: Vec<(&str, Markup)> = vec![
        ("Rule change", html! { "#" (v.id) }),
        ("Entitlement set", set_link(v.set_id, &v.set_name)),
        ("By", html! { (v.by) }),
        ("When", html! { (v.at) }),
        ("How", html! { (how) }),
    ];
    if let Some(ms) = v.hold_ms.filter(|ms| ms.is_finite() && *ms >= 0.0) {
        items.push(("Exclusive hold", html! { (format_ms(ms)) }));
    }
    html! {
        (back_link(paths::RULE_CHANGES, "All rule changes"))
        (facts(&items))
        (rule_change_progress(v))
    }
}

/// "0.42 ms", "12.5 ms", "340 ms".
fn format_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The container `#rule-change-progress`: bar, where it stands (done, left, failed, rate, time
/// left), acts and failed pools.
///
/// While draining it GETs `/operator/rule-changes/{id}/progress` every 2 seconds and replaces
/// itself with the answer (this partial); settled, it carries no trigger, so polling stops.
pub fn rule_change_progress(v: &RuleChangeView) -> Markup {
    let poll = (v.state == STATES.running).then(|| fill(paths::RULE_CHANGE_PROGRESS, &[&v.id]));
    let settled = html! {
        @match &v.settled_at {
            Some(at) => { "Settled at " (at) },
            None => "Settled",
        }
    };
    let body = html! {
        (card_with_aside("rc-progress-heading", "Progress", STATES.live_status(&v.state, settled), html! {
            (progress(v.total_settled, v.total_owed, "Pools settled"))
            (pace_stats(&Standing {
                done: v.total_settled,
                left: v.total_owed.saturating_sub(v.total_settled).saturating_sub(v.total_failed),
                failed: v.total_failed,
                pace: v.pace,
                listed_all: v.listed_all,
            }))
        }))
        (card("rc-acts-heading", "What changed", acts_table(&v.acts)))
        (card("rc-failures-heading", "Failed pools", html! {
            (failures_table(&v.failures))
            @if !v.failures.is_empty() {
                (retry_form(&v.csrf, v.id))
            }
        }))
    };
    polling(PROGRESS_ID, Some("rule-change-progress"), poll.as_deref(), body)
}

fn acts_table(acts: &[ActProgress]) -> Markup {
    let rows = acts
        .iter()
        .map(|a| {
            vec![
                html! { code { (a.key) } },
                html! { span.rule-delta { (rule_value(&a.before)) " → " (rule_value(&a.after)) } },
                html! { (a.settled) " of " (a.owed) },
                failed_count(a.failed),
            ]
        })
        .collect();
    let columns =
        [Column::text("Resource key"), Column::text("Before → after"), Column::num("Settled"), Column::num("Failed")];
    table_cols(&columns, rows, "This rule change has no acts.")
}

/// A rule's value; "no rule" is muted so it reads as an absence, not a value.
fn rule_value(value: &str) -> Markup {
    html! {
        @if value == "no rule" {
            span.muted { (value) }
        } @else {
            (value)
        }
    }
}

fn failed_count(n: u64) -> Markup {
    html! {
        @if n > 0 {
            strong.text-bad { (n) }
        } @else {
            (n)
        }
    }
}

fn failures_table(failures: &[FailedPool]) -> Markup {
    let rows = failures
        .iter()
        .map(|f| {
            vec![
                org_link(f.organization_id, &f.organization),
                html! { "#" (f.pool_id) },
                html! { (f.attempts) },
                html! { pre.error-text { (f.error) } },
                or_none(f.next_attempt.as_deref(), "none scheduled"),
            ]
        })
        .collect();
    let columns = [
        Column::text("Organization"),
        Column::text("Pool"),
        Column::num("Attempts"),
        Column::text("Error"),
        Column::text("Next attempt"),
    ];
    table_cols(&columns, rows, "No pool has failed.")
}

/// POST `/operator/rule-changes/{id}/retry`; htmx swaps `#rule-change-progress` with the answer.
fn retry_form(csrf: &str, id: i64) -> Markup {
    button_form(&fill(paths::RULE_CHANGE_RETRY, &[&id]), PROGRESS_ID, csrf, "Retry failed pools now")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_row(id: i64, state: &str, failed: u64) -> RuleChangeListRow {
        RuleChangeListRow {
            id,
            set_id: 4,
            set_name: "Basic".into(),
            by: "op@example.org".into(),
            at: "2025-06-01 12:00".into(),
            summary: "fedwiki.active_sites 3 → 5 · support.priority removed".into(),
            state: state.into(),
            owed: 12,
            settled: 9,
            failed,
        }
    }

    fn view(state: &str) -> RuleChangeView {
        RuleChangeView {
            csrf: "tok".into(),
            id: 17,
            set_id: 4,
            set_name: "<script>Basic</script>".into(),
            by: "op@example.org".into(),
            at: "2025-06-01 12:00".into(),
            state: state.into(),
            settled_inline: false,
            hold_ms: Some(12.34),
            total_owed: 12,
            total_settled: 9,
            total_failed: 1,
            acts: vec![
                ActProgress {
                    key: "fedwiki.active_sites".into(),
                    before: "3".into(),
                    after: "5".into(),
                    owed: 12,
                    settled: 9,
                    failed: 1,
                },
                ActProgress {
                    key: "support.priority".into(),
                    before: "yes".into(),
                    after: "no rule".into(),
                    owed: 12,
                    settled: 12,
                    failed: 0,
                },
            ],
            failures: vec![FailedPool {
                pool_id: 88,
                organization_id: 7,
                organization: "Acme".into(),
                attempts: 3,
                error: "<script>alert(1)</script>".into(),
                next_attempt: Some("2025-06-01 12:05".into()),
            }],
            settled_at: None,
            listed_all: true,
            pace: None,
        }
    }

    #[test]
    fn list_rows_link_the_change_and_set_and_show_state_and_counts() {
        let out = rule_change_list(&[list_row(17, "draining", 0), list_row(16, "settled", 0)]).into_string();
        assert!(out.contains("applied to every pool"));
        assert!(out.contains(r##"<td><a href="/operator/rule-changes/17">#17</a></td>"##));
        assert!(out.contains(r#"<td><a href="/operator/catalog/sets/4">Basic</a></td>"#));
        assert!(out.contains("<td>op@example.org</td><td>2025-06-01 12:00</td>"));
        assert!(out.contains("<td>fedwiki.active_sites 3 → 5 · support.priority removed</td>"));
        assert!(out.contains(r#"<span class="badge badge-warn">draining</span>"#));
        assert!(out.contains(r#"<span class="badge badge-ok">settled</span>"#));
        assert!(out.contains(r#"<td class="num">9 of 12</td>"#));
        assert!(!out.contains("failed"));
        // Newest first, as given.
        assert!(out.find("/rule-changes/17").unwrap() < out.find("/rule-changes/16").unwrap());
    }

    #[test]
    fn list_badges_failed_pools() {
        let out = rule_change_list(&[list_row(3, "draining", 2)]).into_string();
        assert!(out.contains(
            r#"<span class="badge badge-warn">draining</span> <span class="badge badge-bad">2 failed</span>"#
        ));
    }

    #[test]
    fn list_empty_state() {
        let out = rule_change_list(&[]).into_string();
        assert!(out.contains(r#"<p class="empty">No rule changes yet.</p>"#));
        assert!(!out.contains("<table"));
    }

    #[test]
    fn list_escapes_data() {
        let mut r = list_row(1, "settled", 0);
        r.set_name = "<script>s</script>".into();
        r.summary = "<b>x</b>".into();
        let out = rule_change_list(&[r]).into_string();
        assert!(out.contains("&lt;script&gt;s&lt;/script&gt;"));
        assert!(out.contains("&lt;b&gt;x&lt;/b&gt;"));
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn progress_polls_itself_while_draining() {
        let out = rule_change_progress(&view("draining")).into_string();
        assert!(out.starts_with(
            r#"<div class="rule-change-progress" id="rule-change-progress" hx-get="/operator/rule-changes/17/progress" hx-trigger="every 2s" hx-swap="outerHTML">"#
        ));
        assert!(out.contains("Updating live"));
        assert!(!out.contains("Settled at"));
        assert!(out.ends_with("</div>"));
    }

    #[test]
    fn progress_stops_polling_once_settled_and_says_when() {
        let mut v = view("settled");
        v.total_settled = 12;
        v.total_failed = 0;
        v.failures = vec![];
        v.settled_at = Some("2025-06-01 12:03".into());
        let out = rule_change_progress(&v).into_string();
        assert!(out.starts_with(r#"<div class="rule-change-progress" id="rule-change-progress">"#));
        assert!(!out.contains("hx-trigger"));
        assert!(!out.contains("hx-get"));
        assert!(!out.contains("Updating live"));
        assert!(out.contains("Settled at 2025-06-01 12:03"));
        assert!(out.contains("12 of 12 · complete"));
        assert!(out.contains(r#"<p class="empty">No pool has failed.</p>"#));
        assert!(!out.contains("<form"));
    }

    #[test]
    fn progress_shows_bar_live_counts_and_acts() {
        let out = rule_change_progress(&view("draining")).into_string();
        assert!(out.contains(r#"<progress value="9" max="12" aria-label="Pools settled">75%</progress>"#));
        assert!(out.contains(r#"<div class="stats pace-stats" aria-live="polite">"#));
        // 12 owed: 9 settled, 1 failed (retried by the drain, not counted as left), 2 left.
        assert!(out.contains(r#"<span class="stat-value">9</span><span class="stat-label">Done</span>"#));
        assert!(out.contains(r#"<span class="stat-value">2</span><span class="stat-label">Left</span>"#));
        assert!(out.contains(
            r#"<div class="stat stat-bad"><span class="stat-value">1</span><span class="stat-label">Failed</span></div>"#
        ));
        assert!(out.contains(
            r#"<td><code>fedwiki.active_sites</code></td><td><span class="rule-delta">3 → 5</span></td><td class="num">9 of 12</td><td class="num"><strong class="text-bad">1</strong></td>"#
        ));
        assert!(out.contains(r#"yes → <span class="muted">no rule</span>"#));
    }

    #[test]
    fn progress_says_how_fast_pools_settle_and_how_long_is_left_in_the_plan_acts_words() {
        let mut v = view("draining");
        // 2 left, at 0.5 a second: under a minute.
        v.pace = Some(Pace { settled: 30, seconds: 60.0 });
        let out = rule_change_progress(&v).into_string();
        let labels: Vec<&str> =
            out.split(r#"<span class="stat-label">"#).skip(1).map(|s| &s[..s.find('<').unwrap()]).collect();
        assert_eq!(labels, ["Done", "Left", "Failed", "Rate", "Time left"]);
        assert!(out.contains(r#"<span class="stat-words">30 a minute</span>"#));
        assert!(out.contains(r#"<span class="stat-words">under a minute left</span>"#));
        // Still listing: the pools owed can still grow, so no time is promised.
        v.listed_all = false;
        let out = rule_change_progress(&v).into_string();
        assert!(out.contains(r#"<span class="stat-words">not known yet</span>"#));
        // Settled: nothing left, so neither rate nor time left.
        let mut v = view("settled");
        v.total_settled = 12;
        v.total_failed = 0;
        let out = rule_change_progress(&v).into_string();
        assert!(!out.contains("Rate") && !out.contains("Time left"));
    }

    #[test]
    fn retry_form_posts_with_csrf_and_swaps_the_progress() {
        let out = rule_change_progress(&view("draining")).into_string();
        assert!(out.contains(
            r##"<form method="post" action="/operator/rule-changes/17/retry" hx-post="/operator/rule-changes/17/retry" hx-target="#rule-change-progress" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Retry failed pools now</button>"#));
    }

    #[test]
    fn failures_link_the_organization_and_escape_the_error() {
        let out = rule_change_progress(&view("draining")).into_string();
        assert!(
            out.contains(r#"<td><a href="/operator/organizations/7">Acme</a></td><td>#88</td><td class="num">3</td>"#)
        );
        assert!(out.contains(r#"<pre class="error-text">&lt;script&gt;alert(1)&lt;/script&gt;</pre>"#));
        assert!(out.contains("<td>2025-06-01 12:05</td>"));
        assert!(!out.contains("<script>"));
        let mut v = view("draining");
        v.failures[0].next_attempt = None;
        assert!(rule_change_progress(&v).into_string().contains(r#"<span class="muted">none scheduled</span>"#));
    }

    #[test]
    fn page_has_back_link_facts_and_the_progress() {
        let out = rule_change_page(&view("draining")).into_string();
        assert!(out.starts_with(r#"<p><a href="/operator/rule-changes">← All rule changes</a></p>"#));
        assert!(out.contains("<dt>Rule change</dt><dd>#17</dd>"));
        assert!(out.contains(
            r#"<dt>Entitlement set</dt><dd><a href="/operator/catalog/sets/4">&lt;script&gt;Basic&lt;/script&gt;</a></dd>"#
        ));
        assert!(!out.contains("<script>"));
        assert!(out.contains("<dt>By</dt><dd>op@example.org</dd>"));
        assert!(out.contains("<dt>How</dt><dd>drained in the background</dd>"));
        assert!(out.contains("<dt>Exclusive hold</dt><dd>12.3 ms</dd>"));
        assert!(out.contains(r#"id="rule-change-progress""#));
    }

    #[test]
    fn page_of_an_inline_change_without_a_known_hold() {
        let v = RuleChangeView { settled_inline: true, hold_ms: None, ..view("settled") };
        let out = rule_change_page(&v).into_string();
        assert!(out.contains("<dt>How</dt><dd>applied at once</dd>"));
        assert!(!out.contains("Exclusive hold"));
        assert!(out.contains(" Settled</p>"));
    }

    #[test]
    fn hold_is_formatted_by_size() {
        assert_eq!(format_ms(0.417), "0.42 ms");
        assert_eq!(format_ms(12.34), "12.3 ms");
        assert_eq!(format_ms(340.4), "340 ms");
    }
}
