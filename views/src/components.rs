//! Building blocks the pages share: section cards, banners, tables, progress (and its
//! [`pace`]), the container that polls, badges, stats, facts, links, pagination.

use maud::{Markup, Render, html};

use crate::paths::{self, fill};
use crate::text::query_component;

pub mod pace;

/// A section card titled by its `h2`, `#{heading_id}`, which labels it.
pub fn card(heading_id: &str, title: &str, body: Markup) -> Markup {
    html! {
        section.card aria-labelledby=(heading_id) {
            h2 id=(heading_id) { (title) }
            (body)
        }
    }
}

/// A [`card`] whose heading shares its row with `aside` (a status, a button).
pub fn card_with_aside(heading_id: &str, title: &str, aside: Markup, body: Markup) -> Markup {
    html! {
        section.card aria-labelledby=(heading_id) {
            div.section-head {
                h2 id=(heading_id) { (title) }
                (aside)
            }
            (body)
        }
    }
}

/// A refusal shown in place: what was refused and why, in the person's words.
pub fn refusal(title: &str, message: &str) -> Markup {
    html! {
        div.refusal role="alert" {
            strong { (title) }
            p { (message) }
        }
    }
}

/// A neutral or good-news message (e.g. "Saved").
pub fn notice(message: &str) -> Markup {
    html! {
        div.notice role="status" {
            p { (message) }
        }
    }
}

/// A note that informs and asks nothing (e.g. "No farm is connected").
pub fn info_note(body: Markup) -> Markup {
    html! {
        div.notice.info role="note" { (body) }
    }
}

/// A table column: its header and whether its cells are numbers (right-aligned, class `num`).
pub struct Column<'a> {
    pub label: &'a str,
    pub numeric: bool,
}

impl<'a> Column<'a> {
    pub fn text(label: &'a str) -> Self {
        Column { label, numeric: false }
    }

    pub fn num(label: &'a str) -> Self {
        Column { label, numeric: true }
    }
}

/// A table of text columns; `empty_text` stands in for it when there are no rows.
pub fn table(headers: &[&str], rows: Vec<Vec<Markup>>, empty_text: &str) -> Markup {
    let columns: Vec<Column> = headers.iter().map(|h| Column::text(h)).collect();
    table_cols(&columns, rows, empty_text)
}

/// Like [`table`], with numeric columns marked so they right-align.
pub fn table_cols(columns: &[Column], rows: Vec<Vec<Markup>>, empty_text: &str) -> Markup {
    if rows.is_empty() {
        return html! { p.empty { (empty_text) } };
    }
    html! {
        // The wrapper scrolls sideways on phones instead of breaking the page width.
        div.table-wrap {
            table {
                thead {
                    tr {
                        @for c in columns {
                            th scope="col" class=[c.numeric.then_some("num")] { (c.label) }
                        }
                    }
                }
                tbody {
                    @for row in rows {
                        tr {
                            @for (i, cell) in row.into_iter().enumerate() {
                                td class=[is_numeric(columns, i).then_some("num")] { (cell) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn is_numeric(columns: &[Column], index: usize) -> bool {
    columns.get(index).is_some_and(|c| c.numeric)
}

/// A progress bar with "done of total"; a total of 0 means nothing to do, so it shows complete.
pub fn progress(done: u64, total: u64, label: &str) -> Markup {
    let (value, max) = if total == 0 { (1, 1) } else { (done.min(total), total) };
    let percent = value * 100 / max;
    html! {
        div.progress {
            div.progress-head {
                span.progress-label { (label) }
                span.progress-count {
                    (done) " of " (total)
                    @if total == 0 || done >= total { " · complete" }
                }
            }
            progress value=(value) max=(max) aria-label=(label) { (percent) "%" }
        }
    }
}

/// A container that, while `poll` names a URL, GETs it every 2 seconds and replaces itself with
/// the answer (the container again); without one it carries no trigger, so polling stops.
pub fn polling(id: &str, class: Option<&str>, poll: Option<&str>, body: Markup) -> Markup {
    html! {
        div class=[class] id=(id)
            hx-get=[poll]
            hx-trigger=[poll.map(|_| "every 2s")]
            hx-swap=[poll.map(|_| "outerHTML")] {
            (body)
        }
    }
}

/// The colour a badge speaks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Ok,
    Warn,
    Bad,
    Muted,
}

impl Tone {
    fn class(self) -> &'static str {
        match self {
            Tone::Ok => "badge badge-ok",
            Tone::Warn => "badge badge-warn",
            Tone::Bad => "badge badge-bad",
            Tone::Muted => "badge badge-muted",
        }
    }
}

/// A short status word in a coloured pill.
pub fn badge(text: &str, tone: Tone) -> Markup {
    html! {
        span class=(tone.class()) { (text) }
    }
}

/// One figure of a stats row: the value above its label; `bad` marks one that needs attention.
pub fn stat(label: &str, value: impl Render, bad: bool) -> Markup {
    html! {
        div.stat.stat-bad[bad] {
            span.stat-value { (value) }
            span.stat-label { (label) }
        }
    }
}

/// A value, or in its absence a muted word that says so ("none", "open-ended").
pub fn or_none(value: Option<&str>, none: &str) -> Markup {
    match value {
        Some(v) => html! { (v) },
        None => html! { span.muted { (none) } },
    }
}

/// A record's number, "#12", linked to its page.
pub fn number_link(href: &str, id: i64) -> Markup {
    html! { a href=(href) { "#" (id) } }
}

/// An organization's name, linked to its page.
pub fn org_link(id: i64, name: &str) -> Markup {
    html! { a href=(fill(paths::ORGANIZATION, &[&id])) { (name) } }
}

/// The link above a detail page back to where it is listed, e.g. "← All grants".
pub fn back_link(href: &str, text: &str) -> Markup {
    html! {
        p { a href=(href) { "← " (text) } }
    }
}

/// Key/value facts as a definition list.
pub fn facts(items: &[(&str, Markup)]) -> Markup {
    html! {
        dl.facts {
            @for (key, value) in items {
                // A div per pair is valid in a <dl> and lets the CSS lay pairs out as rows.
                div {
                    dt { (key) }
                    dd { (value) }
                }
            }
        }
    }
}

/// Where a keyset-paged list is, for its pager: whether rows come before and after this page,
/// and the ids of its first and last rows (the cursors the links carry).
pub struct Keyset {
    pub has_before: bool,
    pub has_after: bool,
    pub first_id: Option<i64>,
    pub last_id: Option<i64>,
}

/// First · Previous · Next · Last for a list paged by key: `?before=<id>`, `?after=<id>`,
/// `?at=last`, keeping the other `query` parameters. Nothing when everything fits on one page.
pub fn keyset_pagination(base_href: &str, k: &Keyset, query: &[(&str, &str)]) -> Markup {
    if !k.has_before && !k.has_after {
        return html! {};
    }
    let link = |key: &str, value: &str| {
        let mut q: Vec<(&str, &str)> =
            query.iter().filter(|(n, _)| !matches!(*n, "page" | "after" | "before" | "at")).copied().collect();
        if !key.is_empty() {
            q.push((key, value));
        }
        let mut href = base_href.to_owned();
        let mut sep = if base_href.contains('?') { '&' } else { '?' };
        for (n, v) in q {
            href.push(sep);
            href.push_str(&query_component(n));
            href.push('=');
            href.push_str(&query_component(v));
            sep = '&';
        }
        href
    };
    let first = k.first_id.map(|i| i.to_string()).unwrap_or_default();
    let last = k.last_id.map(|i| i.to_string()).unwrap_or_default();
    html! {
        nav.pagination aria-label="Pagination" {
            @if k.has_before {
                a rel="first" href=(link("", "")) { "« First" }
                a rel="prev" href=(link("before", &first)) { "← Previous" }
            } @else {
                span.disabled aria-hidden="true" { "« First" }
                span.disabled aria-hidden="true" { "← Previous" }
            }
            @if k.has_after {
                a rel="next" href=(link("after", &last)) { "Next →" }
                a rel="last" href=(link("at", "last")) { "Last »" }
            } @else {
                span.disabled aria-hidden="true" { "Next →" }
                span.disabled aria-hidden="true" { "Last »" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_and_notice_render_escaped_roles() {
        let out = refusal("Change in progress", "Try <again>").into_string();
        assert_eq!(
            out,
            r#"<div class="refusal" role="alert"><strong>Change in progress</strong><p>Try &lt;again&gt;</p></div>"#
        );
        let out = notice("<script>x</script>").into_string();
        assert_eq!(out, r#"<div class="notice" role="status"><p>&lt;script&gt;x&lt;/script&gt;</p></div>"#);
    }

    #[test]
    fn cards_are_labelled_by_their_heading() {
        let out = card("keys-heading", "Keys <all>", html! { p { "x" } }).into_string();
        assert_eq!(
            out,
            r#"<section class="card" aria-labelledby="keys-heading"><h2 id="keys-heading">Keys &lt;all&gt;</h2><p>x</p></section>"#
        );
        let out = card_with_aside("p-heading", "Progress", html! { "live" }, html! { "bar" }).into_string();
        assert_eq!(
            out,
            r#"<section class="card" aria-labelledby="p-heading"><div class="section-head"><h2 id="p-heading">Progress</h2>live</div>bar</section>"#
        );
    }

    #[test]
    fn polling_carries_its_trigger_only_while_it_has_a_url() {
        let out = polling("work", Some("work"), Some("/work/live"), html! { "x" }).into_string();
        assert_eq!(
            out,
            r#"<div class="work" id="work" hx-get="/work/live" hx-trigger="every 2s" hx-swap="outerHTML">x</div>"#
        );
        assert_eq!(polling("work", None, None, html! { "x" }).into_string(), r#"<div id="work">x</div>"#);
    }

    #[test]
    fn table_renders_headers_rows_and_empty_text() {
        let rows = vec![vec![html! { "a" }, html! { "<b>" }]];
        let out = table(&["Name", "Role"], rows, "None").into_string();
        assert!(out.contains(r#"<th scope="col">Name</th><th scope="col">Role</th>"#));
        assert!(out.contains("<tr><td>a</td><td>&lt;b&gt;</td></tr>"));
        assert_eq!(table(&["Name"], vec![], "No <rows>").into_string(), r#"<p class="empty">No &lt;rows&gt;</p>"#);
    }

    #[test]
    fn table_cols_marks_numeric_cells() {
        let rows = vec![vec![html! { "x" }, html! { "42" }]];
        let out = table_cols(&[Column::text("Key"), Column::num("Count")], rows, "").into_string();
        assert!(out.contains(r#"<th scope="col">Key</th><th scope="col" class="num">Count</th>"#));
        assert!(out.contains(r#"<td>x</td><td class="num">42</td>"#));
    }

    #[test]
    fn progress_shows_done_of_total_and_zero_total_as_complete() {
        let out = progress(3, 12, "Organizations moved").into_string();
        assert!(out.contains(r#"<progress value="3" max="12" aria-label="Organizations moved">25%</progress>"#));
        assert!(out.contains("3 of 12</span>"));
        assert!(!out.contains("complete"));
        let out = progress(0, 0, "Nothing").into_string();
        assert!(out.contains(r#"<progress value="1" max="1""#));
        assert!(out.contains("0 of 0 · complete"));
        let out = progress(12, 12, "All").into_string();
        assert!(out.contains("12 of 12 · complete"));
    }

    #[test]
    fn badge_tones_map_to_classes() {
        assert_eq!(badge("ok", Tone::Ok).into_string(), r#"<span class="badge badge-ok">ok</span>"#);
        assert!(badge("w", Tone::Warn).into_string().contains("badge-warn"));
        assert!(badge("b", Tone::Bad).into_string().contains("badge-bad"));
        assert!(badge("<m>", Tone::Muted).into_string().contains(r#"badge-muted">&lt;m&gt;"#));
    }

    #[test]
    fn back_link_is_a_paragraph_with_the_arrow_and_escaped_text() {
        assert_eq!(
            back_link("/operator/grants", "All <grants>").into_string(),
            r#"<p><a href="/operator/grants">← All &lt;grants&gt;</a></p>"#
        );
    }

    #[test]
    fn or_none_says_the_value_or_mutes_its_absence() {
        assert_eq!(or_none(Some("<b>"), "none").into_string(), "&lt;b&gt;");
        assert_eq!(or_none(None, "no <type>").into_string(), r#"<span class="muted">no &lt;type&gt;</span>"#);
    }

    #[test]
    fn number_link_links_the_hash_number() {
        assert_eq!(number_link("/operator/grants/12", 12).into_string(), r#"<a href="/operator/grants/12">#12</a>"#);
    }

    #[test]
    fn facts_render_a_definition_list() {
        let out = facts(&[("Plan", html! { "Pro" }), ("<k>", html! { "v" })]).into_string();
        assert_eq!(
            out,
            r#"<dl class="facts"><div><dt>Plan</dt><dd>Pro</dd></div><div><dt>&lt;k&gt;</dt><dd>v</dd></div></dl>"#
        );
    }

    #[test]
    fn pagination_is_empty_for_one_page() {
        let none = Keyset { has_before: false, has_after: false, first_id: Some(1), last_id: Some(2) };
        assert_eq!(keyset_pagination("/x", &none, &[]).into_string(), "");
        let middle = Keyset { has_before: true, has_after: true, first_id: Some(7), last_id: Some(9) };
        let out = keyset_pagination("/o", &middle, &[("q", "a b"), ("after", "3")]).into_string();
        assert!(out.contains(r#"<a rel="first" href="/o?q=a%20b">"#), "{out}");
        assert!(out.contains(r#"<a rel="prev" href="/o?q=a%20b&amp;before=7">"#), "{out}");
        assert!(out.contains(r#"<a rel="next" href="/o?q=a%20b&amp;after=9">"#), "{out}");
        assert!(out.contains(r#"<a rel="last" href="/o?q=a%20b&amp;at=last">"#), "{out}");
        let start = Keyset { has_before: false, has_after: true, first_id: Some(1), last_id: Some(2) };
        let out = keyset_pagination("/o", &start, &[]).into_string();
        assert!(out.contains(r#"<span class="disabled" aria-hidden="true">← Previous</span>"#), "{out}");
    }

    #[test]
    fn pagination_keeps_query_pairs_encoded_and_drops_other_cursors() {
        let q = [("q", "a b&c"), ("page", "9"), ("before", "4"), ("at", "last"), ("status", "active")];
        let k = Keyset { has_before: true, has_after: false, first_id: Some(12), last_id: Some(10) };
        let out = keyset_pagination("/operator/grants", &k, &q).into_string();
        assert!(
            out.contains(r#"<a rel="prev" href="/operator/grants?q=a%20b%26c&amp;status=active&amp;before=12">"#),
            "{out}"
        );
        assert!(out.contains(r#"<span class="disabled" aria-hidden="true">Next →</span>"#), "{out}");
        let out = keyset_pagination("/sites?x=1", &k, &[]).into_string();
        assert!(out.contains(r#"href="/sites?x=1&amp;before=12""#), "{out}");
    }
}
