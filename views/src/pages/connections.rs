//! The operators' connections (`/operator/connections`): the connected systems the console
//! pushes each organization's desired state to. The list shows each live connection with its
//! figures and the notices still pending, and the form that adds one; a connection's page shows
//! its facts, its signing secret (folded), its last test and read-back run, its recipients
//! (filtered, paged by key), and the forms that edit, rotate, retry, test, check and delete.
//!
//! Forms with fields follow the catalog's pattern: a plain `method="post"` form that htmx posts
//! to the same URL, swapping its own container with the answer, so a refusal shows in place.
//! The buttons without fields (Retry, Send a test, Check now) are plain forms: the page they
//! come back to says what happened.

use maud::{Markup, html};

use crate::components::{Column, Tone, back_link, badge, card, facts, notice, org_link, refusal, table_cols};
use crate::forms::FormState;
use crate::forms::{Input, checkbox, form_panel, input_field, submit};
use crate::pages::catalog::count;
use crate::paths::{self, fill};
use crate::text::query_component;

/// A connection's figures, as counted over its records.
pub struct ConnectionFiguresView {
    pub recipients: i64,
    pub behind: i64,
    pub failing: i64,
    pub drift: i64,
    /// How long the oldest change not yet confirmed has waited ("3 s", "2 min"); None when none
    /// is behind.
    pub lag: Option<String>,
}

/// The last "Send a test": when, whether the remote took it, what it answered.
pub struct TestResultView {
    pub at: String,
    pub ok: bool,
    pub answer: String,
}

/// One live connection as the list shows it.
pub struct ConnectionListRow {
    pub id: i64,
    pub name: String,
    pub url: String,
    pub keys: Vec<String>,
    pub read_back: bool,
    pub figures: ConnectionFiguresView,
    pub last_test: Option<TestResultView>,
}

pub struct ConnectionsView {
    pub csrf: String,
    pub connections: Vec<ConnectionListRow>,
    /// Notices the relay has not finished yet, over every connection.
    pub pending_notices: i64,
    /// The resource keys that exist, for the keys field's hint.
    pub keys: Vec<String>,
    /// The add form: name, url, keys, read_back.
    pub form: FormState,
    pub notice: Option<String>,
}

/// One recipient (organization) of a connection: its record.
pub struct RecipientRow {
    pub organization_id: i64,
    /// None when the organization is gone (its record goes with the next notice).
    pub organization: Option<String>,
    pub generation: i64,
    pub dispatched: i64,
    pub confirmed: i64,
    /// How long the record has been behind; None when it is confirmed.
    pub lag: Option<String>,
    pub failures: i32,
    pub last_answer: Option<String>,
    pub last_answer_at: Option<String>,
    pub drift: bool,
    /// What read-back last found the remote holding.
    pub observed_generation: Option<i64>,
}

/// The previous secret, while it still signs.
pub struct PreviousSecret {
    pub secret: String,
    pub until: String,
}

pub struct ConnectionView {
    pub csrf: String,
    pub id: i64,
    pub name: String,
    pub url: String,
    pub keys: Vec<String>,
    pub read_back: bool,
    pub created: String,
    pub secret: String,
    pub previous_secret: Option<PreviousSecret>,
    pub figures: ConnectionFiguresView,
    pub last_test: Option<TestResultView>,
    /// A test was asked and has not been answered yet.
    pub test_pending: bool,
    /// The last read-back run: (when, what it found).
    pub last_read_back: Option<(String, String)>,
    /// "", "behind", "failing" or "drift".
    pub filter: String,
    /// The recipient id this page starts after (0: the first page).
    pub after: i64,
    pub recipients: Vec<RecipientRow>,
    /// The recipient id the next page starts after, when there is one.
    pub next_after: Option<i64>,
    /// The resource keys that exist, for the keys field's hint.
    pub all_keys: Vec<String>,
    pub notice: Option<String>,
    /// A button's refusal (Check now without read-back), said above the page.
    pub refusal: Option<String>,
    /// Fields: name, url, keys, read_back.
    pub edit_form: FormState,
    /// Field: overlap_hours.
    pub rotate_form: FormState,
    /// Field: confirm.
    pub delete_form: FormState,
}

/// The recipients' filters: (value, label).
const FILTERS: [(&str, &str); 4] = [("", "All"), ("behind", "Behind"), ("failing", "Failing"), ("drift", "Drift")];

/// Where a connection's page is, with a query of its recipients' filter and place.
pub fn connection_href(id: i64, filter: &str, after: Option<i64>) -> String {
    let mut href = fill(paths::CONNECTION, &[&id]);
    let mut sep = '?';
    if !filter.is_empty() {
        href.push(sep);
        href.push_str("filter=");
        href.push_str(&query_component(filter));
        sep = '&';
    }
    if let Some(after) = after {
        href.push(sep);
        href.push_str(&format!("after={after}"));
    }
    href
}

/// The list of connections, the notices pending, and the add form.
pub fn connection_list(v: &ConnectionsView) -> Markup {
    html! {
        @if let Some(n) = &v.notice { (notice(n)) }
        (card("connections-heading", "Connected systems", html! {
            p.muted {
                "Each connection receives, for every organization, the values of its resource keys, "
                "signed, in order, until the system confirms them."
            }
            p #pending-notices {
                @if v.pending_notices == 0 {
                    "No notice is pending: every change has reached the records."
                } @else {
                    (count(v.pending_notices, "notice", "notices")) " pending: changes the relay has yet to turn into records."
                }
            }
            (connections_table(&v.connections))
        }))
        (card("add-connection-heading", "Add a connection", add_form(&v.csrf, &v.keys, &v.form)))
    }
}

fn connections_table(rows: &[ConnectionListRow]) -> Markup {
    let rows = rows
        .iter()
        .map(|c| {
            vec![
                html! { a href=(fill(paths::CONNECTION, &[&c.id])) { (c.name) } },
                html! { code { (c.url) } },
                keys_list(&c.keys),
                read_back_badge(c.read_back),
                html! { (c.figures.recipients) },
                html! { (c.figures.behind) },
                html! { (c.figures.failing) },
                html! { (c.figures.drift) },
                html! { (lag_text(c.figures.lag.as_deref())) },
                last_test_cell(c.last_test.as_ref(), false),
            ]
        })
        .collect();
    let columns = [
        Column::text("Name"),
        Column::text("URL"),
        Column::text("Keys"),
        Column::text("Read-back"),
        Column::num("Recipients"),
        Column::num("Behind"),
        Column::num("Failing"),
        Column::num("Drift"),
        Column::num("Lag"),
        Column::text("Last test"),
    ];
    table_cols(&columns, rows, "No connection yet: nothing is pushed to any system.")
}

fn keys_list(keys: &[String]) -> Markup {
    html! {
        @for (i, k) in keys.iter().enumerate() {
            @if i > 0 { ", " }
            code { (k) }
        }
    }
}

fn read_back_badge(on: bool) -> Markup {
    if on { badge("on", Tone::Ok) } else { badge("off", Tone::Muted) }
}

fn lag_text(lag: Option<&str>) -> &str {
    lag.unwrap_or("—")
}

fn last_test_cell(t: Option<&TestResultView>, pending: bool) -> Markup {
    html! {
        @match t {
            None => { span.muted { "never" } }
            Some(t) => {
                @if t.ok { (badge("ok", Tone::Ok)) } @else { (badge("failed", Tone::Bad)) }
                " " (t.at)
                @if !t.answer.is_empty() { br; span.muted { (t.answer) } }
            }
        }
        @if pending { br; span.muted { "A test is on its way." } }
    }
}

/// The "Add a connection" form, in its container `#add-connection`.
pub fn add_form(csrf: &str, keys: &[String], f: &FormState) -> Markup {
    let fields = connection_fields("add", keys, f, "Add connection");
    form_panel("add-connection", paths::CONNECTIONS, csrf, f, html! {}, fields)
}

/// The edit form of connection `id`, in its container `#edit-connection`.
pub fn edit_form(csrf: &str, id: i64, keys: &[String], f: &FormState) -> Markup {
    let action = fill(paths::CONNECTION, &[&id]);
    let lead = html! { p.muted { "A change of its keys pushes every organization's record again." } };
    form_panel("edit-connection", &action, csrf, f, lead, connection_fields("edit", keys, f, "Save connection"))
}

/// Name, URL, keys and read-back, shared by the add and edit forms; `prefix` keeps the ids of
/// the two apart.
fn connection_fields(prefix: &str, keys: &[String], f: &FormState, submit_label: &str) -> Markup {
    let hint = if keys.is_empty() {
        "No resource key exists yet: add them in the catalog first.".to_string()
    } else {
        format!("Separate keys with commas or spaces. Available: {}.", keys.join(", "))
    };
    let (name_id, url_id, keys_id, read_back_id) =
        (format!("{prefix}-name"), format!("{prefix}-url"), format!("{prefix}-keys"), format!("{prefix}-read_back"));
    html! {
        (input_field(&Input { required: true, ..f.input(&name_id, "name", "Name") }))
        (input_field(&Input {
            kind: "url",
            required: true,
            placeholder: Some("https://chat.example.org/hooks"),
            hint: Some("Pushes are POSTed here, signed with the connection's secret."),
            ..f.input(&url_id, "url", "URL")
        }))
        (input_field(&Input { required: true, hint: Some(hint.as_str()), ..f.input(&keys_id, "keys", "Resource keys") }))
        (checkbox(
            &read_back_id,
            "read_back",
            "Read-back",
            matches!(f.value("read_back"), "on" | "true"),
            f.field_error("read_back"),
            "Every 10 minutes, ask the system what it holds and push again where it differs.",
        ))
        (submit(submit_label))
    }
}

/// One connection's page.
pub fn connection_page(v: &ConnectionView) -> Markup {
    html! {
        (back_link(paths::CONNECTIONS, "All connections"))
        @if let Some(n) = &v.notice { (notice(n)) }
        @if let Some(r) = &v.refusal { (refusal("Nothing was done", r)) }
        (facts(&[
            ("URL", html! { code { (v.url) } }),
            ("Keys", keys_list(&v.keys)),
            ("Read-back", read_back_badge(v.read_back)),
            ("Created", html! { (v.created) }),
            ("Signing secret", secret(v)),
        ]))
        (card("figures-heading", "Figures", html! {
            (facts(&[
                ("Recipients", html! { (v.figures.recipients) }),
                ("Behind", html! { (v.figures.behind) }),
                ("Failing", html! { (v.figures.failing) }),
                ("Drift", html! { (v.figures.drift) }),
                ("Lag", html! { (lag_text(v.figures.lag.as_deref())) }),
            ]))
        }))
        (card("test-heading", "Last test", html! {
            p #last-test { (last_test_cell(v.last_test.as_ref(), v.test_pending)) }
            (button(&fill(paths::CONNECTION_TEST, &[&v.id]), &v.csrf, "Send a test", "btn-secondary"))
        }))
        (card("read-back-heading", "Read-back", html! {
            @if v.read_back {
                p #last-read-back {
                    @match &v.last_read_back {
                        Some((at, answer)) => { "Last run " (at) ": " (answer) }
                        None => { span.muted { "No run yet." } }
                    }
                }
                (button(&fill(paths::CONNECTION_CHECK, &[&v.id]), &v.csrf, "Check now", "btn-secondary"))
            } @else {
                p.muted { "Read-back is off: the console does not ask this system what it holds. Turn it on below." }
            }
        }))
        (card("recipients-heading", "Recipients", html! {
            (filter_links(v))
            (recipients_table(&v.recipients))
            @if v.after > 0 || v.next_after.is_some() {
                nav.pagination aria-label="Pagination" {
                    @if v.after > 0 {
                        a rel="first" href=(connection_href(v.id, &v.filter, None)) { "« First page" }
                    }
                    @if let Some(next) = v.next_after {
                        a rel="next" href=(connection_href(v.id, &v.filter, Some(next))) { "Next page →" }
                    }
                }
            }
            p.muted { "Retry makes every failing recipient due now." }
            (button(&fill(paths::CONNECTION_RETRY, &[&v.id]), &v.csrf, "Retry", "btn-secondary"))
        }))
        (card("edit-heading", "Edit", edit_form(&v.csrf, v.id, &v.all_keys, &v.edit_form)))
        (card("rotate-heading", "Rotate the secret", rotate_form(&v.csrf, v.id, &v.rotate_form)))
        (card("delete-heading", "Delete", delete_form(&v.csrf, v.id, &v.delete_form)))
    }
}

fn secret(v: &ConnectionView) -> Markup {
    html! {
        details #signing-secret {
            summary { "Show the signing secret" }
            p { "Current: " code { (v.secret) } }
            @if let Some(p) = &v.previous_secret {
                p { "Previous, signing too until " (p.until) ": " code { (p.secret) } }
            }
        }
    }
}

/// A form that is one button and the CSRF token: a plain POST, no htmx.
fn button(action: &str, csrf: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf_token" value=(csrf);
            button class=(format!("btn {class}")) type="submit" { (label) }
        }
    }
}

fn filter_links(v: &ConnectionView) -> Markup {
    let counted = |value: &str| match value {
        "behind" => Some(v.figures.behind),
        "failing" => Some(v.figures.failing),
        "drift" => Some(v.figures.drift),
        _ => None,
    };
    html! {
        nav.filters aria-label="Filter the recipients" {
            @for (value, label) in FILTERS {
                @let text = match counted(value) { Some(n) => format!("{label} ({n})"), None => label.to_string() };
                @if v.filter == value {
                    strong aria-current="page" { (text) }
                } @else {
                    a href=(connection_href(v.id, value, None)) { (text) }
                }
                " "
            }
        }
    }
}

fn recipients_table(rows: &[RecipientRow]) -> Markup {
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                html! {
                    @match &r.organization {
                        Some(name) => { (org_link(r.organization_id, name)) }
                        None => { span.muted { "#" (r.organization_id) " (gone)" } }
                    }
                },
                html! { (r.generation) },
                html! { (r.dispatched) },
                html! { (r.confirmed) },
                html! { (lag_text(r.lag.as_deref())) },
                html! { (r.failures) },
                html! {
                    @match &r.last_answer {
                        Some(a) => {
                            (a)
                            @if let Some(at) = &r.last_answer_at { br; span.muted { (at) } }
                        }
                        None => { span.muted { "—" } }
                    }
                },
                html! {
                    @if r.drift {
                        (badge("drift", Tone::Warn))
                        " the remote holds "
                        @match r.observed_generation {
                            Some(g) => { "generation " (g) }
                            None => { "nothing" }
                        }
                    } @else {
                        span.muted { "—" }
                    }
                },
            ]
        })
        .collect();
    let columns = [
        Column::text("Organization"),
        Column::num("Generation"),
        Column::num("Dispatched"),
        Column::num("Confirmed"),
        Column::num("Lag"),
        Column::num("Failures"),
        Column::text("Last answer"),
        Column::text("Drift"),
    ];
    table_cols(&columns, rows, "No recipient here.")
}

/// The rotate form of connection `id`, in its container `#rotate-secret`.
pub fn rotate_form(csrf: &str, id: i64, f: &FormState) -> Markup {
    let action = fill(paths::CONNECTION_ROTATE, &[&id]);
    let value = if f.values.is_empty() { "24" } else { f.value("overlap_hours") };
    let lead = html! {
        p.muted {
            "A new secret signs every push from now on; the previous one signs too for the overlap, "
            "so the system can switch at its own pace."
        }
    };
    let fields = html! {
        (input_field(&Input {
            kind: "text",
            value,
            hint: Some("From 0 to 168 hours."),
            ..f.input("rotate-overlap_hours", "overlap_hours", "Overlap (hours)")
        }))
        (submit("Rotate the secret"))
    };
    form_panel("rotate-secret", &action, csrf, f, lead, fields)
}

/// The delete form of connection `id`, in its container `#delete-connection`.
pub fn delete_form(csrf: &str, id: i64, f: &FormState) -> Markup {
    let action = fill(paths::CONNECTION_DELETE, &[&id]);
    let lead = html! {
        p {
            "Deleting stops every push to this system at once; the console forgets what it sent. "
            "Nothing is sent to the system about the deletion."
        }
    };
    let fields = html! {
        div.field.field-check.has-error[f.field_error("confirm").is_some()] {
            div.check-row {
                input #delete-confirm name="confirm" type="checkbox" value="yes"
                    aria-invalid=[f.field_error("confirm").map(|_| "true")]
                    aria-describedby=[f.field_error("confirm").map(|_| "delete-confirm-error")];
                label for="delete-confirm" { "Yes, delete this connection" }
            }
            @if let Some(e) = f.field_error("confirm") {
                p.field-error #delete-confirm-error { (e) }
            }
        }
        div.form-actions {
            button.btn.btn-danger type="submit" { "Delete connection" }
        }
    };
    form_panel("delete-connection", &action, csrf, f, lead, fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures() -> ConnectionFiguresView {
        ConnectionFiguresView { recipients: 3, behind: 1, failing: 1, drift: 0, lag: Some("4 s".into()) }
    }

    fn page() -> ConnectionView {
        ConnectionView {
            csrf: "tok".into(),
            id: 7,
            name: "Chat".into(),
            url: "https://chat.example.org/<hooks>".into(),
            keys: vec!["chat.seats".into(), "chat.video".into()],
            read_back: false,
            created: "2025-01-01 00:00:00 UTC".into(),
            secret: "whsec_new".into(),
            previous_secret: Some(PreviousSecret { secret: "whsec_old".into(), until: "tomorrow".into() }),
            figures: figures(),
            last_test: Some(TestResultView { at: "now".into(), ok: false, answer: "HTTP 500".into() }),
            test_pending: false,
            last_read_back: None,
            filter: "failing".into(),
            after: 0,
            recipients: vec![RecipientRow {
                organization_id: 42,
                organization: Some("Acme".into()),
                generation: 3,
                dispatched: 3,
                confirmed: 2,
                lag: Some("2 min".into()),
                failures: 1,
                last_answer: Some("HTTP 500".into()),
                last_answer_at: Some("now".into()),
                drift: false,
                observed_generation: None,
            }],
            next_after: Some(42),
            all_keys: vec!["chat.seats".into()],
            notice: None,
            refusal: None,
            edit_form: FormState::default(),
            rotate_form: FormState::default(),
            delete_form: FormState::default(),
        }
    }

    #[test]
    fn the_page_keeps_the_filter_in_its_next_page_link_and_links_the_organization() {
        let out = connection_page(&page()).into_string();
        assert!(out.contains(r#"href="/operator/connections/7?filter=failing&amp;after=42""#), "{out}");
        assert!(out.contains(r#"href="/operator/organizations/42">Acme</a>"#), "{out}");
        assert!(out.contains(r#"<strong aria-current="page">Failing (1)</strong>"#), "{out}");
        assert!(out.contains("https://chat.example.org/&lt;hooks&gt;"), "{out}");
    }

    #[test]
    fn the_secret_is_folded_and_check_now_needs_read_back() {
        let out = connection_page(&page()).into_string();
        assert!(out.contains("<summary>Show the signing secret</summary>"), "{out}");
        assert!(out.contains("Previous, signing too until tomorrow"), "{out}");
        assert!(!out.contains("/operator/connections/7/check"), "{out}");
        let mut v = page();
        v.read_back = true;
        assert!(connection_page(&v).into_string().contains(r#"action="/operator/connections/7/check""#));
    }

    #[test]
    fn the_rotate_form_offers_a_day_until_something_was_sent() {
        let out = rotate_form("t", 7, &FormState::default()).into_string();
        assert!(out.contains(r#"name="overlap_hours" type="text" value="24""#), "{out}");
        let sent = FormState::sent(&[("overlap_hours", "x")], &[("overlap_hours", "Bad.")]);
        let out = rotate_form("t", 7, &sent).into_string();
        assert!(out.contains(r#"value="x""#) && out.contains("Bad."), "{out}");
    }

    #[test]
    fn the_list_says_a_dash_for_no_lag_and_counts_the_pending_notices() {
        let v = ConnectionsView {
            csrf: "t".into(),
            connections: vec![ConnectionListRow {
                id: 1,
                name: "Chat".into(),
                url: "https://x.test/".into(),
                keys: vec!["a.b".into()],
                read_back: true,
                figures: ConnectionFiguresView { lag: None, ..figures() },
                last_test: None,
            }],
            pending_notices: 2,
            keys: vec!["a.b".into(), "c.d".into()],
            form: FormState::default(),
            notice: None,
        };
        let out = connection_list(&v).into_string();
        assert!(out.contains(r#"<td class="num">—</td>"#), "{out}");
        assert!(out.contains("2 notices pending"), "{out}");
        assert!(out.contains("Available: a.b, c.d."), "{out}");
        assert!(out.contains(r#"href="/operator/connections/1">Chat</a>"#), "{out}");
    }
}
