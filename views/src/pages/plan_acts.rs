//! The operator's plan acts: the list, and one act's facts.
//!
//! A plan act is an operator's change to the topology that reaches existing organizations: a
//! tier added, removed (with a disposition) or deleted, a default changed, tiers reordered, or a
//! retry of one of them.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, facts, table_cols};

/// The list's path; each plan act lives under it.
const LIST_PATH: &str = "/operator/plan-acts";
const RUNNING: &str = "running";
const DONE: &str = "done";

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
                state_badge(&r.state),
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

fn act_href(id: i64) -> String {
    format!("{LIST_PATH}/{id}")
}

fn act_link(id: i64) -> Markup {
    html! { a href=(act_href(id)) { "#" (id) } }
}

fn disposition(d: Option<&str>) -> Markup {
    match d {
        Some(d) => html! { (d) },
        None => html! { span.muted { "—" } },
    }
}

/// running Warn, done Ok, anything else Muted.
fn state_badge(state: &str) -> Markup {
    let tone = match state {
        RUNNING => Tone::Warn,
        DONE => Tone::Ok,
        _ => Tone::Muted,
    };
    badge(state, tone)
}

pub struct PlanActView {
    pub id: i64,
    pub kind: String,
    pub what: String,
    pub by: String,
    pub at: String,
    pub state: String,
    pub disposition: Option<String>,
    /// "" when none was given.
    pub reason: String,
    /// Extra label/value pairs from the act's detail, in order.
    pub facts: Vec<(String, String)>,
}

/// Back link, the facts, and (for a finished tier add or delete) that it moved no one.
pub fn plan_act_page(v: &PlanActView) -> Markup {
    let mut items: Vec<(&str, Markup)> = vec![
        ("Plan act", html! { "#" (v.id) }),
        ("Kind", html! { (kind_label(&v.kind)) }),
        ("What", html! { (v.what) }),
    ];
    if let Some(d) = &v.disposition {
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
    items.push(("By", html! { (v.by) }));
    items.push(("When", html! { (v.at) }));
    items.push(("State", state_badge(&v.state)));
    items.extend(v.facts.iter().map(|(label, value)| (label.as_str(), html! { (value) })));
    let moved_no_one = v.state == DONE && matches!(v.kind.as_str(), "tier_add" | "tier_delete");
    html! {
        p { a href=(LIST_PATH) { "← All plan acts" } }
        (facts(&items))
        @if moved_no_one {
            p.plan-act-note {
                "This act reached no organization that needs moving: its own transaction did the "
                "work, so there is no progress to follow."
            }
        }
    }
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
            id: 5,
            kind: kind.into(),
            what: "<script>Pro</script> added to Wiki hosting at rank 2".into(),
            by: "op@example.org".into(),
            at: "2025-06-01 12:00".into(),
            state: state.into(),
            disposition: None,
            reason: "".into(),
            facts: vec![("Holders reached".into(), "3".into()), ("<k>".into(), "<v>".into())],
        }
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
        v.disposition = Some("migrate".into());
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
}
