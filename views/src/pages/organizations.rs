//! The operator's organizations: a searchable list with the form that creates one, and one
//! organization's plan, entitlements, usage, members, grants and their audit trail.

use crate::forms::{IdOptions, Input, Select, form_banners, hx_form, input_field, select_field, submit};
use crate::paths;
use maud::{Markup, html};

use crate::components::{
    Column, Keyset, Tone, back_link, badge, card, card_with_aside, facts, keyset_pagination, or_none, org_link, table,
    table_cols,
};
use crate::forms::FormState;
use crate::pages::catalog::{Total, capitalized, count};
use crate::pages::grants::{GrantEventRow, GrantListRow, events_table, grants_table};
use crate::pages::topology::rank_cell;
use crate::text::{Amount, entitlement_value, usage_value};

pub struct OrgListRow {
    pub id: i64,
    pub name: String,
    pub org_type: Option<String>,
    /// Already worded, e.g. "Wiki hosting: Basic · Support: Community".
    pub plan: String,
}

pub struct OrgListView {
    /// The search text ("" for none).
    pub query: String,
    /// How many organizations match, over all pages.
    pub total: Total,
    pub rows: Vec<OrgListRow>,
    /// Rows before and after this page.
    pub has_before: bool,
    pub has_after: bool,
    pub csrf: String,
    /// (id, name) for the create form's type select.
    pub org_types: Vec<(i64, String)>,
    /// Values: name, org_type_id, email_domain.
    pub create_form: FormState,
}

/// "Create an organization" (collapsed unless its form has something to say), the search form
/// and the results.
///
/// The search form is a plain GET (it works without JavaScript); as the operator types, htmx
/// GETs the same URL with `q` and swaps `#org-results` with the answer, which should be
/// [`organization_results`] alone.
pub fn organization_list(v: &OrgListView) -> Markup {
    let f = &v.create_form;
    let open = f.notice.is_some() || !f.errors.is_empty() || !f.field_errors.is_empty();
    html! {
        details.disclosure open[open] {
            summary { "Create an organization" }
            (create_organization_form(&v.csrf, &v.org_types, f))
        }
        form.search-form role="search" method="get" action=(paths::ORGANIZATIONS) {
            div.field {
                label for="org-search" { "Search organizations by name" }
                input #org-search type="search" name="q" value=(v.query) autocomplete="off"
                    hx-get=(paths::ORGANIZATIONS)
                    hx-trigger="input changed delay:300ms, search"
                    hx-target="#org-results"
                    hx-swap="outerHTML"
                    hx-replace-url="true";
            }
            button.btn.btn-secondary type="submit" { "Search" }
        }
        (organization_results(v))
    }
}

/// The create form in its container `#create-organization`; posts to `/operator/organizations`.
pub fn create_organization_form(csrf: &str, org_types: &[(i64, String)], f: &FormState) -> Markup {
    let options = IdOptions::new("— none —", org_types.iter().map(|(id, name)| (*id, name.as_str())));
    html! {
        div #create-organization {
            (form_banners(f))
            (hx_form(paths::ORGANIZATIONS, "create-organization", csrf, html! {
                (input_field(&Input { required: true, ..f.input("org-name", "name", "Name") }))
                (select_field(&Select {
                    hint: Some("it holds the floor of its type's default ladder until it gets more"),
                    ..f.select("org-type", "org_type_id", "Organization type", &options.pairs())
                }))
                (input_field(&Input {
                    placeholder: Some("example.org"),
                    hint: Some("optional; grants waiting for this domain are conferred when it is created"),
                    ..f.input("org-email-domain", "email_domain", "Email domain")
                }))
                (submit("Create organization"))
            }))
        }
    }
}

/// Just the `#org-results` container: the count, the table and the pagination.
pub fn organization_results(v: &OrgListView) -> Markup {
    let rows = v
        .rows
        .iter()
        .map(|o| vec![org_link(o.id, &o.name), or_none(o.org_type.as_deref(), "no type"), html! { (o.plan) }])
        .collect();
    let empty = if v.query.is_empty() {
        "No organizations yet.".to_owned()
    } else {
        format!("No organizations match “{}”.", v.query)
    };
    let query: Vec<(&str, &str)> = if v.query.is_empty() { vec![] } else { vec![("q", v.query.as_str())] };
    let keyset = Keyset {
        has_before: v.has_before,
        has_after: v.has_after,
        first_id: v.rows.first().map(|r| r.id),
        last_id: v.rows.last().map(|r| r.id),
    };
    let counted = match v.total {
        Total::Exactly(0) => None,
        Total::Exactly(n) => Some(count(n as i64, "organization", "organizations")),
        Total::AtLeast(_) => Some(capitalized(&v.total.words("organization", "organizations"))),
    };
    html! {
        div #org-results {
            @if let Some(counted) = counted {
                p.muted.result-count {
                    (counted)
                    @if !v.query.is_empty() {
                        " matching “" (v.query) "”"
                    }
                }
            }
            (table(&["Organization", "Type", "Plan"], rows, &empty))
            (keyset_pagination(paths::ORGANIZATIONS, &keyset, &query))
        }
    }
}

/// One place an organization's pool holds (or an add-on it carries).
pub struct PositionRow {
    pub ladder: String,
    pub rank: i32,
    pub product: String,
    /// Already worded: "floor grant #12", "grant #3", "subscription sub_123 item si_9".
    pub source: String,
    /// "active" or "suspended".
    pub status: String,
}

pub struct DisplacedRow {
    pub source: String,
    pub product: String,
    /// Already formatted.
    pub since: String,
    /// "replaced grant" or "displaced subscription".
    pub kind: String,
}

/// One materialized entitlement of a pool: the key (operators see it beside the name), the name
/// and unit members read, and the value (worded by `entitlement_value`).
pub struct EntitlementRow {
    pub key: String,
    pub name: String,
    pub unit: Option<String>,
    pub value: Amount,
}

/// The counted use of a numeric key against its limit.
pub struct UsageRow {
    pub key: String,
    pub name: String,
    pub unit: Option<String>,
    pub used: i64,
    pub limit: i64,
}

/// A key's name, with the key beside it, muted, for an operator.
pub fn named_key(name: &str, key: &str) -> Markup {
    html! { (name) " " code.muted { (key) } }
}

pub struct MemberRow {
    pub email: String,
    pub role: String,
}

pub struct OrgDetailView {
    pub id: i64,
    pub name: String,
    pub org_type: Option<String>,
    pub pool_id: i64,
    /// Already formatted.
    pub created_at: String,
    /// The positions the pool holds, per ladder.
    pub positions: Vec<PositionRow>,
    /// Holding conferrals of products on no ladder (add-ons).
    pub other_conferrals: Vec<PositionRow>,
    pub displaced: Vec<DisplacedRow>,
    pub entitlements: Vec<EntitlementRow>,
    pub usage: Vec<UsageRow>,
    pub members: Vec<MemberRow>,
    /// Every grant to the organization.
    pub grants: Vec<GrantListRow>,
    /// What happened to its grants, newest first.
    pub events: Vec<GrantEventRow>,
    /// Its pending invitations and the operator's invite form (issue 38, members).
    pub invitations: crate::pages::members::OperatorInvite,
}

/// Facts, then Plan, Add-ons and Displaced (when any), Grants, Entitlements, Usage, Members and
/// the grants' Audit trail.
pub fn organization_detail(v: &OrgDetailView) -> Markup {
    html! {
        (back_link(paths::ORGANIZATIONS, "All organizations"))
        (facts(&[
            ("Organization", html! { (v.name) " " span.muted { "#" (v.id) } }),
            ("Type", or_none(v.org_type.as_deref(), "no type")),
            ("Resource pool", html! { "#" (v.pool_id) }),
            ("Created", html! { (v.created_at) }),
        ]))
        (card("plan-heading", "Plan", positions_table(&v.positions)))
        @if !v.other_conferrals.is_empty() {
            (card("addons-heading", "Add-ons", html! {
                p.muted { "Products on no ladder that the organization holds alongside its plan." }
                (addons_table(&v.other_conferrals))
            }))
        }
        @if !v.displaced.is_empty() {
            (card("displaced-heading", "Displaced", html! {
                p.muted {
                    "These held a ladder until something else took it. They confer nothing now and "
                    "come back when what displaced them ends."
                }
                (displaced_table(&v.displaced))
            }))
        }
        (card_with_aside(
            "grants-heading",
            "Grants",
            html! {
                a.btn.btn-secondary.btn-small href=(format!("{}?organization_id={}", paths::GRANTS_NEW, v.id)) {
                    "Grant a product"
                }
            },
            grants_table(&v.grants, "This organization has no grants."),
        ))
        (card("entitlements-heading", "Entitlements", entitlements_table(&v.entitlements)))
        (card("usage-heading", "Usage", usage_table(&v.usage)))
        (card("members-heading", "Members", members_table(&v.members)))
        (crate::pages::members::operator_invitations(&v.invitations))
        (card("audit-heading", "Audit trail", html! {
            p.muted { "Every act on the organization's grants, newest first." }
            (events_table(&v.events, "Nothing has happened to this organization's grants yet."))
        }))
    }
}

fn status_badge(status: &str) -> Markup {
    let tone = match status {
        "active" => Tone::Ok,
        "suspended" => Tone::Warn,
        _ => Tone::Muted,
    };
    badge(status, tone)
}

fn positions_table(positions: &[PositionRow]) -> Markup {
    let rows = positions
        .iter()
        .map(|p| {
            vec![
                html! { (p.ladder) },
                rank_cell(p.rank),
                html! { (p.product) },
                html! { (p.source) },
                status_badge(&p.status),
            ]
        })
        .collect();
    let columns = [
        Column::text("Ladder"),
        Column::text("Rank"),
        Column::text("Product"),
        Column::text("Source"),
        Column::text("Status"),
    ];
    table_cols(&columns, rows, "Holds no place on any ladder.")
}

fn addons_table(addons: &[PositionRow]) -> Markup {
    let rows =
        addons.iter().map(|p| vec![html! { (p.product) }, html! { (p.source) }, status_badge(&p.status)]).collect();
    table(&["Product", "Source", "Status"], rows, "")
}

fn displaced_table(displaced: &[DisplacedRow]) -> Markup {
    let rows = displaced
        .iter()
        .map(|d| vec![html! { (d.kind) }, html! { (d.product) }, html! { (d.source) }, html! { (d.since) }])
        .collect();
    table(&["What", "Product", "Source", "Since"], rows, "")
}

fn entitlements_table(entitlements: &[EntitlementRow]) -> Markup {
    let rows = entitlements
        .iter()
        .map(|e| vec![named_key(&e.name, &e.key), html! { (entitlement_value(e.value, e.unit.as_deref())) }])
        .collect();
    table(&["Resource", "Value"], rows, "No entitlements: nothing active confers any.")
}

fn usage_table(usage: &[UsageRow]) -> Markup {
    let rows = usage
        .iter()
        .map(|u| {
            vec![
                named_key(&u.name, &u.key),
                html! { (usage_value(u.used, u.limit, u.unit.as_deref())) },
                html! {
                    @if let Some(b) = usage_badge(u.used, u.limit) { (b) }
                },
            ]
        })
        .collect();
    let columns = [Column::text("Resource"), Column::num("Used"), Column::text("")];
    table_cols(&columns, rows, "Nothing counted yet.")
}

/// Bad "over limit" when use exceeds the limit; Warn "at limit" when it has reached a limit
/// above zero; nothing otherwise.
pub(crate) fn usage_badge(used: i64, limit: i64) -> Option<Markup> {
    if used > limit {
        Some(badge("over limit", Tone::Bad))
    } else if limit > 0 && used >= limit {
        Some(badge("at limit", Tone::Warn))
    } else {
        None
    }
}

fn members_table(members: &[MemberRow]) -> Markup {
    let rows = members.iter().map(|m| vec![html! { (m.email) }, html! { (m.role) }]).collect();
    table(&["Email", "Role"], rows, "No members.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(query: &str, total: u64, rows: Vec<OrgListRow>) -> OrgListView {
        OrgListView {
            query: query.into(),
            total: Total::Exactly(total),
            has_before: false,
            has_after: total > rows.len() as u64,
            rows,
            csrf: "tok".into(),
            org_types: vec![(1, "Community".into()), (2, "<Internal>".into())],
            create_form: FormState::default(),
        }
    }

    fn row(id: i64, name: &str) -> OrgListRow {
        OrgListRow {
            id,
            name: name.into(),
            org_type: Some("Community".into()),
            plan: "Wiki hosting: Basic · Support: Community".into(),
        }
    }

    #[test]
    fn list_has_a_get_search_form_enhanced_by_htmx() {
        let out = organization_list(&list("ac me", 3, vec![row(1, "Acme"), row(2, "Acme 2")])).into_string();
        assert!(
            out.contains(r#"<form class="search-form" role="search" method="get" action="/operator/organizations">"#)
        );
        assert!(out.contains(r#"name="q" value="ac me""#));
        assert!(out.contains(
            r##"hx-get="/operator/organizations" hx-trigger="input changed delay:300ms, search" hx-target="#org-results" hx-swap="outerHTML" hx-replace-url="true""##
        ));
        assert!(out.contains(r#"<div id="org-results">"#));
        // The search is a GET: only the create form above it carries the token.
        let search = &out[out.find(r#"<form class="search-form""#).unwrap()..];
        assert!(!search.contains("csrf_token"));
        assert_eq!(out.matches("csrf_token").count(), 1);
    }

    #[test]
    fn results_partial_is_only_the_container_with_links_and_paging() {
        let out =
            organization_results(&list("ac me", 3, vec![row(1, "Acme"), row(2, "<script>x</script>")])).into_string();
        assert!(out.starts_with(r#"<div id="org-results">"#));
        assert!(out.ends_with("</div>"));
        assert!(!out.contains("<html"));
        assert!(!out.contains("<form"));
        assert!(out.contains(r#"<a href="/operator/organizations/1">Acme</a>"#));
        assert!(out.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
        assert!(out.contains("<td>Wiki hosting: Basic · Support: Community</td>"));
        assert!(out.contains("3 organizations matching “ac me”"));
        assert!(out.contains(r#"href="/operator/organizations?q=ac%20me&amp;after=2""#), "{out}");
        assert!(out.contains(r#"href="/operator/organizations?q=ac%20me&amp;at=last""#), "{out}");
        let mut many = list("a", 0, vec![row(1, "A")]);
        many.total = Total::AtLeast(1000);
        assert!(organization_results(&many).into_string().contains("More than 1,000 organizations matching “a”"));
    }

    #[test]
    fn results_empty_states() {
        let out = organization_results(&list("", 0, vec![])).into_string();
        assert!(out.contains(r#"<p class="empty">No organizations yet.</p>"#));
        let out = organization_results(&list("<zz>", 0, vec![])).into_string();
        assert!(out.contains("No organizations match “&lt;zz&gt;”."));
    }

    fn position(ladder: &str, rank: i32, status: &str) -> PositionRow {
        PositionRow {
            ladder: ladder.into(),
            rank,
            product: format!("{ladder} product"),
            source: "grant #3".into(),
            status: status.into(),
        }
    }

    fn usage(key: &str, used: i64, limit: i64) -> UsageRow {
        UsageRow { key: key.into(), name: key.to_uppercase(), unit: None, used, limit }
    }

    fn detail() -> OrgDetailView {
        OrgDetailView {
            id: 7,
            name: "<script>Acme</script>".into(),
            org_type: Some("Community".into()),
            pool_id: 70,
            created_at: "2025-01-02".into(),
            positions: vec![position("Wiki hosting", 0, "active"), position("Support", 2, "suspended")],
            other_conferrals: vec![],
            displaced: vec![],
            entitlements: vec![EntitlementRow {
                key: "fedwiki.active_sites".into(),
                name: "Active sites".into(),
                unit: None,
                value: Amount::Number(3),
            }],
            usage: vec![
                usage("a", 1, 3),
                usage("b", 3, 3),
                usage("c", 4, 3),
                UsageRow { key: "d".into(), name: "D".into(), unit: Some("GB".into()), used: 0, limit: 0 },
            ],
            members: vec![MemberRow { email: "ann@example.org".into(), role: "owner".into() }],
            grants: vec![GrantListRow {
                id: 12,
                organization: Some((7, "Acme".into())),
                provision_domain: None,
                product: "Wiki Pro".into(),
                quantity: 1,
                kind: "operator".into(),
                status: "replaced".into(),
                starts_at: "2025-01-02".into(),
                ends_at: None,
                reason: "pilot".into(),
            }],
            events: vec![GrantEventRow {
                at: "2025-01-03 04:05".into(),
                act: "revoked".into(),
                actor: "the console".into(),
                reason: "<script>bad</script>".into(),
                grant_id: 12,
            }],
            invitations: crate::pages::members::OperatorInvite {
                organization_id: 7,
                csrf: "c".into(),
                pending: vec![],
                form: crate::forms::FormState::default(),
                mail_on: true,
            },
        }
    }

    #[test]
    fn detail_shows_facts_plan_entitlements_usage_and_members() {
        let out = organization_detail(&detail()).into_string();
        assert!(out.contains("&lt;script&gt;Acme&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
        assert!(out.contains("<dt>Resource pool</dt><dd>#70</dd>"));
        assert!(out.contains(
            r#"<td>Wiki hosting</td><td><span class="rank">0 <span class="badge badge-muted">floor</span></span></td>"#
        ));
        assert!(out.contains(r#"<span class="badge badge-ok">active</span>"#));
        assert!(out.contains(r#"<span class="badge badge-warn">suspended</span>"#));
        assert!(out.contains(r#"<td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>3</td>"#));
        assert!(out.contains("<td>ann@example.org</td><td>owner</td>"));
        // No add-ons or displaced: no sections.
        assert!(!out.contains("Add-ons"));
        assert!(!out.contains("Displaced"));
    }

    #[test]
    fn usage_badges_warn_at_the_limit_and_flag_going_over() {
        let out = organization_detail(&detail()).into_string();
        assert!(out.contains(r#"<td class="num">1 of 3</td><td></td>"#));
        assert!(out.contains(r#"<td class="num">3 of 3</td><td><span class="badge badge-warn">at limit</span></td>"#));
        assert!(out.contains(r#"<td class="num">4 of 3</td><td><span class="badge badge-bad">over limit</span></td>"#));
        assert!(out.contains(r#"<td class="num">0 of 0 GB</td><td></td>"#));
    }

    #[test]
    fn detail_shows_addons_and_displaced_when_any() {
        let mut v = detail();
        v.other_conferrals = vec![position("Backups", 0, "active")];
        v.displaced = vec![DisplacedRow {
            source: "subscription sub_1 item si_2".into(),
            product: "Wiki Pro".into(),
            since: "2025-02-03".into(),
            kind: "displaced subscription".into(),
        }];
        let out = organization_detail(&v).into_string();
        assert!(out.contains("Add-ons</h2>"));
        assert!(out.contains("<td>Backups product</td><td>grant #3</td>"));
        assert!(out.contains("Displaced</h2>"));
        assert!(out.contains(
            "<td>displaced subscription</td><td>Wiki Pro</td><td>subscription sub_1 item si_2</td><td>2025-02-03</td>"
        ));
    }

    #[test]
    fn detail_empty_states() {
        let v = OrgDetailView {
            positions: vec![],
            entitlements: vec![],
            usage: vec![],
            members: vec![],
            grants: vec![],
            events: vec![],
            org_type: None,
            ..detail()
        };
        let out = organization_detail(&v).into_string();
        assert!(out.contains("Holds no place on any ladder."));
        assert!(out.contains("No entitlements"));
        assert!(out.contains("Nothing counted yet."));
        assert!(out.contains("No members."));
        assert!(out.contains(r#"<span class="muted">no type</span>"#));
        assert!(out.contains(r#"<p class="empty">This organization has no grants.</p>"#));
        assert!(out.contains(r#"<p class="empty">Nothing has happened to this organization's grants yet.</p>"#));
    }

    #[test]
    fn detail_shows_grants_and_the_audit_trail() {
        let out = organization_detail(&detail()).into_string();
        assert!(out.contains(r#"<h2 id="grants-heading">Grants</h2>"#));
        assert!(out.contains(r#"href="/operator/grants/new?organization_id=7">Grant a product</a>"#));
        assert!(out.contains(r##"<td><a href="/operator/grants/12">#12</a></td>"##));
        assert!(out.contains(r#"<span class="badge badge-warn">replaced</span>"#));
        assert!(out.contains(r#"<span class="muted">open-ended</span>"#));
        assert!(out.contains(r#"<h2 id="audit-heading">Audit trail</h2>"#));
        assert!(out.contains("<td>2025-01-03 04:05</td><td>revoked</td><td>the console</td>"));
        assert!(out.contains("<td>&lt;script&gt;bad&lt;/script&gt;</td>"));
        assert!(!out.contains("<script>"));
        // The audit trail comes after the members.
        assert!(out.find("Audit trail").unwrap() > out.find("Members</h2>").unwrap());
    }

    #[test]
    fn list_offers_a_collapsed_create_form_above_the_search() {
        let out = organization_list(&list("", 0, vec![])).into_string();
        assert!(out.starts_with(r#"<details class="disclosure"><summary>Create an organization</summary>"#));
        assert!(out.find("<details").unwrap() < out.find("search-form").unwrap());
        let mut v = list("", 0, vec![]);
        v.create_form.field_errors = vec![("name".into(), "Name it.".into())];
        let out = organization_list(&v).into_string();
        assert!(out.starts_with(r#"<details class="disclosure" open>"#));
        assert!(out.contains("Name it."));
    }

    #[test]
    fn create_form_posts_with_htmx_and_has_its_fields() {
        let f = FormState {
            values: vec![("org_type_id".into(), "2".into()), ("name".into(), "<script>x</script>".into())],
            ..FormState::default()
        };
        let out =
            create_organization_form("tok", &[(1, "Community".into()), (2, "<Internal>".into())], &f).into_string();
        assert!(out.starts_with(r#"<div id="create-organization">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/organizations" hx-post="/operator/organizations" hx-target="#create-organization" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"name="name" type="text" value="&lt;script&gt;x&lt;/script&gt;" required"#));
        assert!(!out.contains("<script>"));
        assert!(out.contains(r#"<select id="org-type" name="org_type_id""#));
        assert!(out.contains(r#"<option value="">— none —</option>"#));
        assert!(out.contains(r#"<option value="2" selected>&lt;Internal&gt;</option>"#));
        assert!(out.contains(r#"name="email_domain" type="text""#));
        assert!(out.contains("optional; grants waiting for this domain are conferred when it is created"));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Create organization</button>"#));
    }
}
