//! The operator's grants: a filtered list, the form that issues one, and one grant's facts,
//! lineage, acts (revoke, manage) and history.
//!
//! Forms follow the catalog's pattern: a plain `method="post"` form that works without
//! JavaScript, enhanced by htmx to post to the same URL and swap its own container
//! (`outerHTML`), so a 4xx answer carrying the re-rendered container shows the error in place.
//! Dates arrive already formatted; date inputs are `datetime-local` and the handler reads them
//! as UTC, which the hints say.

use crate::forms::{IdOptions, Input, Select, form_banners, hx_form, input_field, select_field, submit};
use crate::paths::{self, fill};
use maud::{Markup, html};

use crate::components::{
    Column, Keyset, Tone, back_link, badge, card, facts, info_note, keyset_pagination, number_link, or_none, org_link,
    table_cols,
};
use crate::forms::FormState;
use crate::pages::catalog::{Total, capitalized, publish_first};
use crate::text::query_component;

/// The status filter's choices: (value, label); "" is all.
const STATUS_FILTERS: [(&str, &str); 7] = [
    ("", "All"),
    ("active", "Active"),
    ("waiting", "Waiting"),
    ("replaced", "Replaced"),
    ("expired", "Expired"),
    ("revoked", "Revoked"),
    ("ended", "Ended"),
];

/// Said where a grant has no end.
const OPEN_ENDED: &str = "open-ended";
const UTC_HINT: &str = "times are UTC";

/// One grant as the list (and an organization's page) shows it.
pub struct GrantListRow {
    pub id: i64,
    /// (organization id, name); `None` while the grant waits for an organization.
    pub organization: Option<(i64, String)>,
    /// The email domain a waiting grant names instead of an organization.
    pub provision_domain: Option<String>,
    pub product: String,
    pub quantity: i32,
    /// "operator", "floor", "legacy" or "provisioning".
    pub kind: String,
    /// "waiting", "active", "replaced", "expired", "revoked" or "ended".
    pub status: String,
    /// Already formatted.
    pub starts_at: String,
    /// Already formatted; `None` is open-ended.
    pub ends_at: Option<String>,
    pub reason: String,
}

pub struct GrantListView {
    /// The status filter; "" for all.
    pub status: String,
    /// The organization filter as typed; "" for all.
    pub organization_id: String,
    /// The filtered organization's name, when the filter names one that exists.
    pub organization_name: Option<String>,
    /// How many grants match, over all pages.
    pub total: Total,
    /// Grants before and after this page, and its first and last grant ids.
    pub keyset: Keyset,
    pub rows: Vec<GrantListRow>,
}

/// The GET filter form (status, organization), "Issue a grant", the table and pagination that
/// keeps both filters.
pub fn grant_list(v: &GrantListView) -> Markup {
    let filtered = !v.status.is_empty() || !v.organization_id.is_empty();
    let mut query: Vec<(&str, &str)> = Vec::new();
    if !v.status.is_empty() {
        query.push(("status", v.status.as_str()));
    }
    if !v.organization_id.is_empty() {
        query.push(("organization_id", v.organization_id.as_str()));
    }
    let empty = if filtered { "No grants match these filters." } else { "No grants yet." };
    html! {
        div.list-toolbar {
            form.search-form.filter-form role="search" method="get" action=(paths::GRANTS) {
                div.field {
                    label for="grant-status" { "Status" }
                    select #grant-status name="status" {
                        @for (value, label) in STATUS_FILTERS {
                            option value=(value) selected[value == v.status] { (label) }
                        }
                    }
                }
                div.field {
                    label for="grant-organization" { "Organization id" }
                    input #grant-organization type="number" name="organization_id" value=(v.organization_id)
                        min="1" step="1" inputmode="numeric" autocomplete="off";
                }
                button.btn.btn-secondary type="submit" { "Filter" }
                @if filtered {
                    a.btn.btn-secondary href=(paths::GRANTS) { "Show all" }
                }
            }
            a.btn.btn-primary href=(issue_href(&v.organization_id)) { "Issue a grant" }
        }
        @if let Some(name) = &v.organization_name {
            h2.list-subject {
                "Grants of "
                @match v.organization_id.trim().parse::<i64>() {
                    Ok(id) => (org_link(id, name)),
                    Err(_) => (name),
                }
            }
        }
        @if !v.total.is_zero() {
            p.muted.result-count { (capitalized(&v.total.words("grant", "grants"))) }
        }
        (grants_table(&v.rows, empty))
        (keyset_pagination(paths::GRANTS, &v.keyset, &query))
    }
}

/// "/operator/grants/new", with the organization filled in when the list is filtered by one.
fn issue_href(organization_id: &str) -> String {
    let id = organization_id.trim();
    if id.is_empty() {
        paths::GRANTS_NEW.to_owned()
    } else {
        format!("{}?organization_id={}", paths::GRANTS_NEW, query_component(id))
    }
}

/// Just the grants table (the organization page reuses it); "No grants yet." when empty.
pub fn grant_rows_table(rows: &[GrantListRow]) -> Markup {
    grants_table(rows, "No grants yet.")
}

/// The grants table with the caller's empty text.
pub(crate) fn grants_table(rows: &[GrantListRow], empty: &str) -> Markup {
    let cells = rows
        .iter()
        .map(|g| {
            vec![
                grant_link(g.id),
                recipient(g.organization.as_ref(), g.provision_domain.as_deref()),
                html! { (g.product) },
                html! { (g.quantity) },
                html! { (g.kind) },
                status_badge(&g.status),
                html! { (g.starts_at) },
                ends(g.ends_at.as_deref()),
                html! { (g.reason) },
            ]
        })
        .collect();
    let columns = [
        Column::text("Grant"),
        Column::text("Recipient"),
        Column::text("Product"),
        Column::num("Quantity"),
        Column::text("Kind"),
        Column::text("Status"),
        Column::text("Starts"),
        Column::text("Ends"),
        Column::text("Reason"),
    ];
    table_cols(&columns, cells, empty)
}

fn grant_link(id: i64) -> Markup {
    number_link(&fill(paths::GRANT, &[&id]), id)
}

/// The organization, linked; or the email domain a waiting grant names.
fn recipient(organization: Option<&(i64, String)>, provision_domain: Option<&str>) -> Markup {
    match (organization, provision_domain) {
        (Some((id, name)), _) => org_link(*id, name),
        (None, Some(domain)) => html! { span.muted { "waits for an organization of " } code { (domain) } },
        (None, None) => html! { span.muted { "no organization" } },
    }
}

fn ends(ends_at: Option<&str>) -> Markup {
    or_none(ends_at, OPEN_ENDED)
}

/// active Ok, waiting Muted, replaced Warn, expired/revoked/ended Bad.
pub(crate) fn status_badge(status: &str) -> Markup {
    let tone = match status {
        "active" => Tone::Ok,
        "replaced" => Tone::Warn,
        "expired" | "revoked" | "ended" => Tone::Bad,
        _ => Tone::Muted,
    };
    badge(status, tone)
}

pub struct IssueGrantView {
    pub csrf: String,
    /// (id, name) of the published products.
    pub products: Vec<(i64, String)>,
    /// Values: organization_id, provision_domain, product_id, quantity, starts_at, ends_at,
    /// reason.
    pub form: FormState,
}

/// The issue form, in its container `#issue-grant`; it posts to `/operator/grants`.
pub fn issue_grant(v: &IssueGrantView) -> Markup {
    let f = &v.form;
    let options = IdOptions::new("— choose a product —", v.products.iter().map(|(id, name)| (*id, name.as_str())));
    html! {
        div #issue-grant {
            (back_link(paths::GRANTS, "All grants"))
            p.muted {
                "A grant confers a product on an organization, from when it starts until it ends or "
                "is revoked. On a ladder it takes the organization's place: what held it is displaced "
                "and comes back when the grant ends."
            }
            (form_banners(f))
            @if v.products.is_empty() {
                (publish_first("There are no published products to grant."))
            }
            section.card {
                (hx_form(paths::GRANTS, "issue-grant", &v.csrf, html! {
                    (input_field(&Input {
                        kind: "number",
                        hint: Some("or leave empty and name an email domain below"),
                        ..f.input("organization_id", "organization_id", "Organization id")
                    }))
                    (input_field(&Input {
                        placeholder: Some("example.org"),
                        hint: Some("the grant waits until an organization with this email domain is created"),
                        ..f.input("provision_domain", "provision_domain", "Email domain")
                    }))
                    (select_field(&Select {
                        required: true,
                        ..f.select("product_id", "product_id", "Product", &options.pairs())
                    }))
                    (input_field(&Input {
                        kind: "number",
                        required: true,
                        hint: Some("how many units of the product the grant confers"),
                        ..f.input("quantity", "quantity", "Quantity")
                    }))
                    (input_field(&Input {
                        kind: "datetime-local",
                        hint: Some("empty: now · times are UTC"),
                        ..f.input("starts_at", "starts_at", "Starts")
                    }))
                    (input_field(&Input {
                        kind: "datetime-local",
                        hint: Some("empty: open-ended · times are UTC"),
                        ..f.input("ends_at", "ends_at", "Ends")
                    }))
                    (reason_input("reason", f, "why the organization gets this; kept in the grant's history"))
                    (submit("Issue grant"))
                }))
            }
        }
    }
}

/// One grant of a lineage, oldest first as the handler gives them.
pub struct LineageRow {
    pub id: i64,
    pub status: String,
    pub starts_at: String,
    pub ends_at: Option<String>,
    pub quantity: i32,
    /// This page's grant.
    pub current: bool,
}

/// One recorded act on a grant.
pub struct GrantEventRow {
    /// Already formatted.
    pub at: String,
    /// What happened, e.g. "issued", "extended", "revoked".
    pub act: String,
    /// An email, or "the console".
    pub actor: String,
    pub reason: String,
    pub grant_id: i64,
}

pub struct GrantDetailView {
    pub csrf: String,
    /// The grant itself, as the list shows it.
    pub grant: GrantListRow,
    /// The lineage's head; acts apply to it.
    pub head_id: i64,
    pub lineage: Vec<LineageRow>,
    pub events: Vec<GrantEventRow>,
    pub can_revoke: bool,
    pub can_manage: bool,
    /// The head waits: manage changes its dates in place.
    pub waiting: bool,
    /// Field: reason.
    pub revoke_form: FormState,
    /// Fields: starts_at (only shown when waiting), ends_at, quantity, reason.
    pub manage_form: FormState,
}

/// Facts, the head notice, lineage, the revoke and manage forms (when allowed), history.
pub fn grant_detail(v: &GrantDetailView) -> Markup {
    let g = &v.grant;
    html! {
        (back_link(paths::GRANTS, "All grants"))
        @if v.head_id != g.id {
            (info_note(html! {
                p {
                    "This grant was extended: acts apply to grant "
                    (grant_link(v.head_id)) "."
                }
            }))
        }
        (facts(&[
            ("Grant", html! { "#" (g.id) }),
            ("Recipient", recipient(g.organization.as_ref(), g.provision_domain.as_deref())),
            ("Product", html! { (g.product) }),
            ("Quantity", html! { (g.quantity) }),
            ("Kind", html! { (g.kind) }),
            ("Status", status_badge(&g.status)),
            ("Starts", html! { (g.starts_at) }),
            ("Ends", ends(g.ends_at.as_deref())),
            ("Reason", html! { (g.reason) }),
        ]))
        (card("lineage-heading", "Lineage", html! {
            p.muted {
                "An extension is a new grant that takes over from the one it extends. The newest "
                "grant of a lineage is its head; revoking and managing act on the head."
            }
            (lineage_table(&v.lineage))
        }))
        @if v.can_revoke {
            (card("revoke-heading", "Revoke", revoke_form(&v.csrf, v.head_id, &v.revoke_form)))
        }
        @if v.can_manage {
            (card(
                "manage-heading",
                "Change dates or quantity",
                manage_form(&v.csrf, v.head_id, v.waiting, &v.manage_form),
            ))
        }
        (card("history-heading", "History", events_table(&v.events, "Nothing has happened to this grant yet.")))
    }
}

fn lineage_table(lineage: &[LineageRow]) -> Markup {
    let rows = lineage
        .iter()
        .map(|l| {
            vec![
                html! {
                    @if l.current {
                        strong aria-current="true" { "#" (l.id) } " " (badge("this grant", Tone::Muted))
                    } @else {
                        (grant_link(l.id))
                    }
                },
                status_badge(&l.status),
                html! { (l.starts_at) },
                ends(l.ends_at.as_deref()),
                html! { (l.quantity) },
            ]
        })
        .collect();
    let columns = [
        Column::text("Grant"),
        Column::text("Status"),
        Column::text("Starts"),
        Column::text("Ends"),
        Column::num("Quantity"),
    ];
    table_cols(&columns, rows, "This grant has no lineage.")
}

/// Grant events, in the order given (handlers pass them newest first).
pub(crate) fn events_table(events: &[GrantEventRow], empty: &str) -> Markup {
    let rows = events
        .iter()
        .map(|e| {
            vec![html! { (e.at) }, html! { (e.act) }, html! { (e.actor) }, grant_link(e.grant_id), html! { (e.reason) }]
        })
        .collect();
    let columns =
        [Column::text("When"), Column::text("What"), Column::text("By"), Column::text("Grant"), Column::text("Reason")];
    table_cols(&columns, rows, empty)
}

/// The revoke form in its container `#revoke-grant`; posts to `/operator/grants/{id}/revoke`.
pub fn revoke_form(csrf: &str, grant_id: i64, f: &FormState) -> Markup {
    let action = fill(paths::GRANT_REVOKE, &[&grant_id]);
    html! {
        div #revoke-grant {
            p {
                "Revoking ends the grant now. The organization loses what the grant confers; what "
                "it displaced comes back, else its floor."
            }
            (form_banners(f))
            (hx_form(&action, "revoke-grant", csrf, html! {
                (reason_input("revoke-reason", f, "kept in the grant's history"))
                div.form-actions {
                    button.btn.btn-danger type="submit" { "Revoke grant" }
                }
            }))
        }
    }
}

/// The manage form in its container `#manage-grant`; posts to `/operator/grants/{id}/manage`.
/// `starts_at` is shown only while the grant waits.
pub fn manage_form(csrf: &str, grant_id: i64, waiting: bool, f: &FormState) -> Markup {
    let action = fill(paths::GRANT_MANAGE, &[&grant_id]);
    html! {
        div #manage-grant {
            @if waiting {
                p {
                    "This grant has not started: saving reschedules it in place. "
                    "(An active grant is extended as a new grant in its lineage instead.)"
                }
            } @else {
                p {
                    "An active grant is extended as a new grant in its lineage, which takes over from "
                    "this one. (A waiting grant is rescheduled in place instead.)"
                }
            }
            (form_banners(f))
            (hx_form(&action, "manage-grant", csrf, html! {
                @if waiting {
                    (input_field(&Input {
                        kind: "datetime-local",
                        hint: Some(UTC_HINT),
                        ..f.input("manage-starts_at", "starts_at", "Starts")
                    }))
                }
                (input_field(&Input {
                    kind: "datetime-local",
                    hint: Some("empty: open-ended · times are UTC"),
                    ..f.input("manage-ends_at", "ends_at", "Ends")
                }))
                (input_field(&Input {
                    kind: "number",
                    required: true,
                    ..f.input("manage-quantity", "quantity", "Quantity")
                }))
                (reason_input("manage-reason", f, "kept in the grant's history"))
                (submit("Save"))
            }))
        }
    }
}

/// The required `reason` text input, with its own element id.
fn reason_input(id: &str, f: &FormState, hint: &str) -> Markup {
    input_field(&Input { required: true, hint: Some(hint), ..f.input(id, "reason", "Reason") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, status: &str) -> GrantListRow {
        GrantListRow {
            id,
            organization: Some((7, "Acme".into())),
            provision_domain: None,
            product: "Wiki Pro".into(),
            quantity: 2,
            kind: "operator".into(),
            status: status.into(),
            starts_at: "2025-01-02 03:04".into(),
            ends_at: Some("2025-06-01 00:00".into()),
            reason: "pilot".into(),
        }
    }

    fn list(status: &str, organization_id: &str, total: u64, rows: Vec<GrantListRow>) -> GrantListView {
        GrantListView {
            status: status.into(),
            organization_id: organization_id.into(),
            organization_name: None,
            total: Total::Exactly(total),
            keyset: Keyset {
                has_before: false,
                has_after: total > rows.len() as u64,
                first_id: rows.first().map(|r| r.id),
                last_id: rows.last().map(|r| r.id),
            },
            rows,
        }
    }

    #[test]
    fn list_has_a_get_filter_form_with_status_and_organization() {
        let out = grant_list(&list("replaced", "7", 1, vec![row(1, "replaced")])).into_string();
        assert!(out.contains(
            r#"<form class="search-form filter-form" role="search" method="get" action="/operator/grants">"#
        ));
        assert!(out.contains(r#"<select id="grant-status" name="status">"#));
        for value in ["", "active", "waiting", "replaced", "expired", "revoked", "ended"] {
            assert!(out.contains(&format!(r#"<option value="{value}""#)), "{value}");
        }
        assert!(out.contains(r#"<option value="replaced" selected>Replaced</option>"#));
        assert!(out.contains(r#"name="organization_id" value="7""#));
        assert!(!out.contains("csrf_token"));
        assert!(out.contains(r#"href="/operator/grants">Show all</a>"#));
    }

    #[test]
    fn list_links_issue_a_grant_with_the_organization_filter() {
        let out = grant_list(&list("", "", 0, vec![])).into_string();
        assert!(out.contains(r#"<a class="btn btn-primary" href="/operator/grants/new">Issue a grant</a>"#));
        assert!(out.contains(r#"<option value="" selected>All</option>"#));
        assert!(!out.contains("Show all"));
        let out = grant_list(&list("", "7", 0, vec![])).into_string();
        assert!(out.contains(r#"href="/operator/grants/new?organization_id=7">Issue a grant</a>"#));
        let out = grant_list(&list("", "7&x=1", 0, vec![])).into_string();
        assert!(out.contains(r#"href="/operator/grants/new?organization_id=7%26x%3D1">"#));
    }

    #[test]
    fn list_names_the_filtered_organization() {
        let mut v = list("", "7", 1, vec![row(1, "active")]);
        assert!(!grant_list(&v).into_string().contains("Grants of"));
        v.organization_name = Some("<script>Acme</script>".into());
        let out = grant_list(&v).into_string();
        assert!(out.contains(r#"Grants of <a href="/operator/organizations/7">&lt;script&gt;Acme&lt;/script&gt;</a>"#));
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn list_rows_link_grant_and_organization_and_badge_the_status() {
        let mut waiting = row(3, "waiting");
        waiting.organization = None;
        waiting.provision_domain = Some("example.org".into());
        waiting.ends_at = None;
        let out = grant_list(&list("", "", 2, vec![row(1, "active"), waiting])).into_string();
        assert!(out.contains(r##"<td><a href="/operator/grants/1">#1</a></td>"##));
        assert!(out.contains(r#"<td><a href="/operator/organizations/7">Acme</a></td>"#));
        assert!(out.contains(r#"<td class="num">2</td>"#));
        assert!(out.contains(r#"<span class="badge badge-ok">active</span>"#));
        assert!(out.contains(r#"<span class="badge badge-muted">waiting</span>"#));
        assert!(out.contains("waits for an organization of </span><code>example.org</code>"));
        assert!(out.contains(r#"<span class="muted">open-ended</span>"#));
        assert!(out.contains("<td>2025-06-01 00:00</td>"));
        assert!(out.contains("2 grants"));
    }

    #[test]
    fn status_badges_by_tone() {
        assert!(status_badge("active").into_string().contains("badge-ok"));
        assert!(status_badge("waiting").into_string().contains("badge-muted"));
        assert!(status_badge("replaced").into_string().contains("badge-warn"));
        for s in ["expired", "revoked", "ended"] {
            assert_eq!(status_badge(s).into_string(), format!(r#"<span class="badge badge-bad">{s}</span>"#));
        }
    }

    #[test]
    fn list_pagination_keeps_both_filters() {
        let out = grant_list(&list("active", "7", 5, vec![row(9, "active"), row(8, "active")])).into_string();
        assert!(out.contains(r#"href="/operator/grants?status=active&amp;organization_id=7&amp;after=8""#), "{out}");
        assert!(out.contains(r#"href="/operator/grants?status=active&amp;organization_id=7&amp;at=last""#), "{out}");
        let out = grant_list(&list("", "", 5, vec![row(1, "active")])).into_string();
        assert!(out.contains(r#"href="/operator/grants?after=1""#), "{out}");
        let mut many = list("", "", 5, vec![row(1, "active")]);
        many.total = Total::AtLeast(1000);
        assert!(grant_list(&many).into_string().contains("More than 1,000 grants"));
    }

    #[test]
    fn list_empty_states() {
        let out = grant_list(&list("", "", 0, vec![])).into_string();
        assert!(out.contains(r#"<p class="empty">No grants yet.</p>"#));
        let out = grant_list(&list("revoked", "", 0, vec![])).into_string();
        assert!(out.contains(r#"<p class="empty">No grants match these filters.</p>"#));
        assert_eq!(grant_rows_table(&[]).into_string(), r#"<p class="empty">No grants yet.</p>"#);
    }

    #[test]
    fn list_escapes_reasons() {
        let mut r = row(1, "active");
        r.reason = "<script>alert(1)</script>".into();
        let out = grant_rows_table(&[r]).into_string();
        assert!(out.contains("<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>"));
        assert!(!out.contains("<script>"));
    }

    fn issue(form: FormState) -> IssueGrantView {
        IssueGrantView { csrf: "tok".into(), products: vec![(3, "Wiki Pro".into()), (4, "<B>".into())], form }
    }

    #[test]
    fn issue_form_posts_with_htmx_and_has_its_fields() {
        let out = issue_grant(&issue(FormState::sent(&[("quantity", "1"), ("product_id", "4")], &[]))).into_string();
        assert!(out.starts_with(r#"<div id="issue-grant">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/grants" hx-post="/operator/grants" hx-target="#issue-grant" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"name="organization_id" type="number""#));
        assert!(out.contains("or leave empty and name an email domain below"));
        assert!(out.contains(r#"name="provision_domain" type="text""#));
        assert!(out.contains("the grant waits until an organization with this email domain is created"));
        assert!(out.contains(r#"<select id="product_id" name="product_id" required>"#));
        assert!(out.contains(r#"<option value="3">Wiki Pro</option>"#));
        assert!(out.contains(r#"<option value="4" selected>&lt;B&gt;</option>"#));
        assert!(out.contains(r#"name="quantity" type="number" value="1" min="1" step="1""#));
        assert!(out.contains(r#"name="starts_at" type="datetime-local""#));
        assert!(out.contains("empty: now · times are UTC"));
        assert!(out.contains(r#"name="ends_at" type="datetime-local""#));
        assert!(out.contains("empty: open-ended · times are UTC"));
        assert!(out.contains(r#"name="reason" type="text" value="" required"#));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Issue grant</button>"#));
        assert!(!out.contains("no published products"));
    }

    #[test]
    fn issue_form_shows_errors_keeps_values_and_says_when_nothing_is_published() {
        let mut f = FormState::sent(
            &[("reason", "<script>x</script>"), ("provision_domain", "example.org")],
            &[("organization_id", "No organization #99.")],
        );
        f.errors = vec!["Name an organization or an email domain.".into()];
        let mut v = issue(f);
        v.products = vec![];
        let out = issue_grant(&v).into_string();
        assert!(out.contains(r#"value="&lt;script&gt;x&lt;/script&gt;""#));
        assert!(!out.contains("<script>"));
        assert!(out.contains(r#"value="example.org""#));
        assert!(out.contains(r#"aria-describedby="organization_id-hint organization_id-error""#));
        assert!(out.contains("No organization #99."));
        assert!(out.contains("<li>Name an organization or an email domain.</li>"));
        assert!(out.contains("There are no published products to grant."));
        assert!(out.contains(r#"<option value="" selected>— choose a product —</option>"#));
    }

    fn detail() -> GrantDetailView {
        GrantDetailView {
            csrf: "tok".into(),
            grant: GrantListRow {
                id: 5,
                organization: Some((7, "Acme".into())),
                provision_domain: None,
                product: "Wiki Pro".into(),
                quantity: 2,
                kind: "operator".into(),
                status: "active".into(),
                starts_at: "2025-01-02 03:04".into(),
                ends_at: None,
                reason: "<script>alert(1)</script>".into(),
            },
            head_id: 5,
            lineage: vec![
                LineageRow {
                    id: 4,
                    status: "ended".into(),
                    starts_at: "2024-01-01".into(),
                    ends_at: Some("2025-01-02".into()),
                    quantity: 1,
                    current: false,
                },
                LineageRow {
                    id: 5,
                    status: "active".into(),
                    starts_at: "2025-01-02".into(),
                    ends_at: None,
                    quantity: 2,
                    current: true,
                },
            ],
            events: vec![GrantEventRow {
                at: "2025-01-02 03:04".into(),
                act: "extended".into(),
                actor: "op@example.org".into(),
                reason: "renewal".into(),
                grant_id: 5,
            }],
            can_revoke: true,
            can_manage: true,
            waiting: false,
            revoke_form: FormState::default(),
            manage_form: FormState::sent(&[("quantity", "2")], &[]),
        }
    }

    #[test]
    fn detail_shows_facts_lineage_forms_and_history() {
        let out = grant_detail(&detail()).into_string();
        assert!(out.contains("<dt>Grant</dt><dd>#5</dd>"));
        assert!(out.contains(r#"<dd><a href="/operator/organizations/7">Acme</a></dd>"#));
        assert!(out.contains(r#"<dt>Status</dt><dd><span class="badge badge-ok">active</span></dd>"#));
        assert!(out.contains(r#"<dt>Ends</dt><dd><span class="muted">open-ended</span></dd>"#));
        assert!(out.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
        assert!(!out.contains("was extended"));
        // Lineage: the older grant linked, this one marked.
        assert!(out.contains(
            r##"<td><a href="/operator/grants/4">#4</a></td><td><span class="badge badge-bad">ended</span>"##
        ));
        assert!(out.contains(
            r##"<strong aria-current="true">#5</strong> <span class="badge badge-muted">this grant</span>"##
        ));
        assert!(out.contains(r#"id="revoke-grant""#));
        assert!(out.contains(r#"id="manage-grant""#));
        assert_eq!(out.matches(r#"<input type="hidden" name="csrf_token" value="tok">"#).count(), 2);
        assert!(out.contains("History</h2>"));
        assert!(out.contains(
            r##"<td>2025-01-02 03:04</td><td>extended</td><td>op@example.org</td><td><a href="/operator/grants/5">#5</a></td><td>renewal</td>"##
        ));
    }

    #[test]
    fn detail_of_an_extended_grant_points_at_the_head_and_acts_on_it() {
        let mut v = detail();
        v.grant.id = 4;
        v.head_id = 9;
        let out = grant_detail(&v).into_string();
        assert!(out.contains(
            r##"<div class="notice info" role="note"><p>This grant was extended: acts apply to grant <a href="/operator/grants/9">#9</a>.</p></div>"##
        ));
        assert!(out.contains(r#"action="/operator/grants/9/revoke""#));
        assert!(out.contains(r#"action="/operator/grants/9/manage""#));
        assert!(!out.contains("/operator/grants/4/revoke"));
    }

    #[test]
    fn detail_hides_acts_that_are_not_allowed_and_says_when_nothing_happened() {
        let v = GrantDetailView { can_revoke: false, can_manage: false, events: vec![], lineage: vec![], ..detail() };
        let out = grant_detail(&v).into_string();
        assert!(!out.contains("revoke-grant"));
        assert!(!out.contains("manage-grant"));
        assert!(!out.contains("<form"));
        assert!(out.contains(r#"<p class="empty">Nothing has happened to this grant yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">This grant has no lineage.</p>"#));
    }

    #[test]
    fn detail_shows_a_waiting_recipient_domain() {
        let mut v = detail();
        (v.grant.organization, v.grant.provision_domain) = (None, Some("<x>.org".into()));
        let out = grant_detail(&v).into_string();
        assert!(out.contains("waits for an organization of </span><code>&lt;x&gt;.org</code>"));
    }

    #[test]
    fn revoke_form_is_its_container_with_a_danger_button() {
        let mut f = FormState::sent(&[("reason", "<script>x</script>")], &[("reason", "Say why.")]);
        f.errors = vec!["The grant already ended.".into()];
        let out = revoke_form("tok", 9, &f).into_string();
        assert!(out.starts_with(r#"<div id="revoke-grant">"#));
        assert!(out.ends_with("</div>"));
        assert!(out.contains(
            r##"<form method="post" action="/operator/grants/9/revoke" hx-post="/operator/grants/9/revoke" hx-target="#revoke-grant" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(
            r#"<input id="revoke-reason" name="reason" type="text" value="&lt;script&gt;x&lt;/script&gt;" required"#
        ));
        assert!(!out.contains("<script>"));
        assert!(out.contains(r#"<p class="field-error" id="revoke-reason-error">Say why.</p>"#));
        assert!(out.contains("<li>The grant already ended.</li>"));
        assert!(out.contains(r#"<button class="btn btn-danger" type="submit">Revoke grant</button>"#));
        assert!(out.contains("loses what the grant confers"));
        assert!(out.contains("what it displaced comes back, else its floor"));
    }

    #[test]
    fn manage_form_extends_an_active_grant() {
        let f = FormState::sent(&[("quantity", "3"), ("ends_at", "2026-01-01T00:00")], &[]);
        let out = manage_form("tok", 9, false, &f).into_string();
        assert!(out.starts_with(r#"<div id="manage-grant">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/grants/9/manage" hx-post="/operator/grants/9/manage" hx-target="#manage-grant" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(!out.contains(r#"name="starts_at""#));
        assert!(out.contains(r#"name="ends_at" type="datetime-local" value="2026-01-01T00:00""#));
        assert!(out.contains(r#"name="quantity" type="number" value="3""#));
        assert!(out.contains(r#"name="reason" type="text""#));
        assert!(out.contains("extended as a new grant in its lineage"));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Save</button>"#));
    }

    #[test]
    fn manage_form_reschedules_a_waiting_grant() {
        let f = FormState::sent(&[("starts_at", "2026-01-01T00:00")], &[("starts_at", "Must be before the end.")]);
        let out = manage_form("tok", 9, true, &f).into_string();
        assert!(out.contains(
            r#"<input id="manage-starts_at" name="starts_at" type="datetime-local" value="2026-01-01T00:00""#
        ));
        assert!(out.contains(r#"aria-describedby="manage-starts_at-hint manage-starts_at-error""#));
        assert!(out.contains("times are UTC"));
        assert!(out.contains("Must be before the end."));
        assert!(out.contains("reschedules it in place"));
    }
}
