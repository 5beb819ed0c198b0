//! A member's sites (`/sites`): per organization, its FedWiki sites with address, status,
//! storage and last modification, the count against the plan ("2 of 3 active"), the acts on
//! each site, the swap, the create form, and the requests in flight and their outcomes. While a
//! request is in flight the section polls `/sites/live` and replaces itself until none is.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, notice, polling, table_cols};
use crate::forms::FormState;
use crate::forms::{Input, Select, csrf_field, form_banners, input_field, select_field};
use crate::paths::{self, fill};

pub struct SiteLine {
    pub site_id: String,
    pub domain: String,
    /// Where the site answers.
    pub url: String,
    /// Where the member opens it to edit (an active site's); None for a site that is not active.
    pub open_url: Option<String>,
    /// "active", "parked" or "archived".
    pub status: String,
    pub keep_active: bool,
    pub storage_bytes: Option<i64>,
    pub modified: Option<String>,
    /// What is being done to it now ("activating", ...), when a request is in flight.
    pub in_flight: Option<String>,
    /// Host names under the organization's own domains that serve it.
    pub hostnames: Vec<String>,
    /// What the console did to it on its own, worded: parked by the plan's limit, or when an
    /// archived site is deleted.
    pub note: Option<String>,
}

pub struct RequestLine {
    pub domain: String,
    /// "create", "park", ...
    pub kind: String,
    /// "accepted", "done", "declined", "failed"
    pub state: String,
    pub outcome: Option<String>,
    pub when: String,
    /// Where to withdraw it, while it is in flight and may not have started (not a swap's).
    pub withdraw: Option<String>,
}

pub struct OrgSites {
    pub organization_id: i64,
    pub name: String,
    pub sites: Vec<SiteLine>,
    pub requests: Vec<RequestLine>,
    pub used: i64,
    pub limit: i64,
    /// The farm's zone: a new site's address is `<name>.<zone>`.
    pub zone: String,
    /// Minutes until the workspace may swap again, when it may not now.
    pub swap_in_minutes: Option<i64>,
    /// The create and swap forms as sent, when one was refused.
    pub form: FormState,
    /// Whether the plan allows domains of the organization's own, and the ones it holds.
    pub custom_domain: bool,
    pub domains: Vec<String>,
}

impl OrgSites {
    fn in_flight(&self) -> bool {
        self.requests.iter().any(|r| r.state == "accepted")
    }

    /// (site id, domain) of its sites in `status` that no request is acting on: what a swap can
    /// take.
    fn idle_sites(&self, status: &str) -> Vec<(&str, &str)> {
        self.sites
            .iter()
            .filter(|s| s.status == status && s.in_flight.is_none())
            .map(|s| (s.site_id.as_str(), s.domain.as_str()))
            .collect()
    }
}

pub struct SitesView {
    pub csrf: String,
    /// Whether the farm is connected (without it, nothing can be asked).
    pub connected: bool,
    pub notice: Option<String>,
    pub organizations: Vec<OrgSites>,
}

/// The whole page.
pub fn member_sites(v: &SitesView) -> Markup {
    // The layout gives the page its one h1 ("Sites", the title).
    html! {
        p.muted { "Your organizations' Federated Wiki sites. Open one to read and edit it." }
        @if !v.connected {
            (crate::components::refusal(
                "The wiki farm is not connected",
                "Sites cannot be created or changed right now. Try again later, or ask an operator."
            ))
        }
        @if let Some(n) = &v.notice {
            (notice(n))
        }
        (sites_section(v))
    }
}

/// The part that polls while a request is in flight, in its container `#member-sites`.
pub fn sites_section(v: &SitesView) -> Markup {
    let in_flight = v.organizations.iter().any(OrgSites::in_flight);
    let body = html! {
        @if v.organizations.is_empty() {
            p { "You are not a member of any organization yet, so there are no sites to show." }
        }
        @for o in &v.organizations {
            (org_sites(v, o))
        }
    };
    polling("member-sites", None, in_flight.then_some(paths::SITES_LIVE), body)
}

fn bytes(n: i64) -> String {
    match n {
        n if n < 1024 => format!("{n} B"),
        n if n < 1024 * 1024 => format!("{:.1} KB", n as f64 / 1024.0),
        n if n < 1024 * 1024 * 1024 => format!("{:.1} MB", n as f64 / (1024.0 * 1024.0)),
        n => format!("{:.1} GB", n as f64 / (1024.0 * 1024.0 * 1024.0)),
    }
}

fn status_badge(status: &str) -> Markup {
    match status {
        "active" => badge("active", Tone::Ok),
        "parked" => badge("parked", Tone::Warn),
        other => badge(other, Tone::Muted),
    }
}

fn act(v: &SitesView, s: &SiteLine, to: &str, label: &str) -> Markup {
    let action = fill(paths::SITE_STATUS, &[&s.site_id]);
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(&v.csrf))
            input type="hidden" name="to" value=(to);
            button.btn.btn-secondary.btn-small type="submit" aria-label=(format!("{label} {}", s.domain)) { (label) }
        }
    }
}

fn site_actions(v: &SitesView, s: &SiteLine) -> Markup {
    if let Some(doing) = &s.in_flight {
        return html! { span.muted { (doing) "…" } };
    }
    let delete = fill(paths::SITE_DELETE, &[&s.site_id]);
    let keep = fill(paths::SITE_KEEP_ACTIVE, &[&s.site_id]);
    html! {
        @if let Some(open) = &s.open_url {
            // The console lets the member in: the wiki shows them as its owner, with its edit tools.
            a.btn.btn-small href=(open) target="_blank" rel="noopener" aria-label=(format!("Edit {}", s.domain))
                title="Open the wiki signed in as its owner, to edit it" { "Edit" }
            " "
        }
        @match s.status.as_str() {
            "active" => { (act(v, s, "park", "Park")) (act(v, s, "archive", "Archive")) }
            "parked" => { (act(v, s, "activate", "Activate")) (act(v, s, "archive", "Archive")) }
            _ => { (act(v, s, "activate", "Activate")) }
        }
        form.inline method="post" action=(keep) {
            (csrf_field(&v.csrf))
            input type="hidden" name="keep" value=(if s.keep_active { "0" } else { "1" });
            button.btn.btn-secondary.btn-small type="submit" aria-label=(format!("Keep active {}", s.domain)) {
                @if s.keep_active { "Don't keep active" } @else { "Keep active" }
            }
        }
        details.inline.confirm {
            summary.btn.btn-secondary.btn-small aria-label=(format!("Delete {}…", s.domain)) { "Delete…" }
            form method="post" action=(delete) {
                (csrf_field(&v.csrf))
                p { (format!("Delete {} and every page in it? This cannot be undone.", s.domain)) }
                button.btn.btn-danger.btn-small type="submit" aria-label=(format!("Delete {}", s.domain)) { "Delete for good" }
            }
        }
    }
}

fn org_sites(v: &SitesView, o: &OrgSites) -> Markup {
    let rows = o
        .sites
        .iter()
        .map(|s| {
            vec![
                html! {
                    a href=(s.url) target="_blank" rel="noopener" { (s.domain) }
                    @for h in &s.hostnames {
                        br; span.muted { "also " (h) }
                    }
                },
                html! {
                    (status_badge(&s.status))
                    @if s.keep_active { " " (badge("kept active", Tone::Muted)) }
                    @if let Some(n) = &s.note { br; span.muted.site-note { (n) } }
                },
                html! { (s.storage_bytes.map(bytes).unwrap_or_else(|| "—".into())) },
                html! { (s.modified.clone().unwrap_or_else(|| "—".into())) },
                site_actions(v, s),
            ]
        })
        .collect();
    let columns = [
        Column::text("Site"),
        Column::text("Status"),
        Column::num("Storage"),
        Column::text("Last modified"),
        Column::text(""),
    ];
    let active = o.sites.iter().filter(|s| s.status == "active").count();
    let heading = format!("org-{}-sites", o.organization_id);
    html! {
        section.card id=(format!("sites-{}", o.organization_id)) aria-labelledby=(heading) {
            h2 id=(heading) { (o.name) }
            p.usage {
                strong { (format!("{active} of {} active", o.limit)) }
                @if o.limit == 0 {
                    " — the plan includes no active sites. " a href=(paths::BILLING) { "Choose a plan" } "."
                } @else if o.used >= o.limit {
                    " — every active slot is in use: park a site, swap, or " a href=(paths::BILLING) { "upgrade the plan" } "."
                }
            }
            (form_banners(&o.form))
            (table_cols(&columns, rows, "No sites yet: create the first below."))
            (swap_form(v, o))
            (create_form(v, o))
            (domains_panel(v, o))
            (requests(v, o))
        }
    }
}

fn swap_form(v: &SitesView, o: &OrgSites) -> Markup {
    let parked = o.idle_sites("parked");
    let active = o.idle_sites("active");
    if parked.is_empty() || active.is_empty() {
        return html! {};
    }
    let f = &o.form;
    html! {
        div.form-panel {
            h3 { "Swap" }
            p.muted { "Park an active site and activate a parked one in one step." }
            @if let Some(m) = o.swap_in_minutes {
                p.muted.swap-cooldown { (format!("You can swap again in {m} minute{}.", if m == 1 { "" } else { "s" })) }
            } @else {
                form method="post" action=(paths::SITES_SWAP) {
                    (csrf_field(&v.csrf))
                    (select_field(&Select {
                        required: true,
                        ..f.select(&format!("swap-activate-{}", o.organization_id), "activate", "Activate", &parked)
                    }))
                    (select_field(&Select {
                        required: true,
                        ..f.select(&format!("swap-park-{}", o.organization_id), "park", "Park", &active)
                    }))
                    div.form-actions { button.btn.btn-secondary type="submit" { "Swap" } }
                }
            }
        }
    }
}

fn create_form(v: &SitesView, o: &OrgSites) -> Markup {
    let f = &o.form;
    let hint = format!("Letters, digits and hyphens; the site answers at <name>.{}.", o.zone);
    html! {
        div.form-panel {
            h3 { "Create a site" }
            (org_form(v, o, None, paths::SITES, html! {
                (input_field(&Input {
                    required: true,
                    placeholder: Some("handbook"),
                    hint: Some(&hint),
                    ..f.input(&format!("site-name-{}", o.organization_id), "name", "Name")
                }))
                div.form-actions { button.btn type="submit" { "Create site" } }
            }))
        }
    }
}

fn domains_panel(v: &SitesView, o: &OrgSites) -> Markup {
    // A plan that no longer allows custom domains still shows the ones held, to let them go.
    if !o.custom_domain && o.domains.is_empty() {
        return html! {};
    }
    let f = &o.form;
    let sites: Vec<(&str, &str)> = o.sites.iter().map(|s| (s.site_id.as_str(), s.domain.as_str())).collect();
    let served: Vec<(&str, &str)> =
        o.sites.iter().flat_map(|s| s.hostnames.iter().map(|h| (h.as_str(), s.domain.as_str()))).collect();
    html! {
        div.form-panel {
            h3 { "Your domains" }
            @if o.domains.is_empty() {
                p.muted { "Add a domain of your own, then serve a site at it or at a name under it." }
            } @else {
                ul.domains {
                    @for d in &o.domains {
                        li { code { (d) } " " (remove_button(v, o, "domain", d, &format!("Release {d}"), "Release")) }
                    }
                }
                @if let Some(e) = f.field_error("release") { p.field-error role="alert" { (e) } }
            }
            @if !served.is_empty() {
                ul.placements {
                    @for (h, site) in &served {
                        li {
                            code { (h) } " serves " (site) " "
                            (remove_button(v, o, "hostname", h, &format!("Stop serving {site} at {h}"), "Stop serving"))
                        }
                    }
                }
                @if let Some(e) = f.field_error("stop") { p.field-error role="alert" { (e) } }
            }
            @if !o.custom_domain {
                p.muted { "The plan no longer includes custom domains: you can release these, but not add more." }
            } @else {
                (org_form(v, o, None, paths::SITES_DOMAINS, html! {
                    (input_field(&Input {
                        required: true,
                        placeholder: Some("wiki.example.org"),
                        ..f.input(&format!("domain-{}", o.organization_id), "domain", "Domain")
                    }))
                    div.form-actions { button.btn.btn-secondary type="submit" { "Add domain" } }
                }))
                @if !o.domains.is_empty() && !sites.is_empty() {
                    (org_form(v, o, None, paths::SITES_DOMAINS, html! {
                        (select_field(&Select {
                            error: None,
                            required: true,
                            ..f.select(&format!("serve-site-{}", o.organization_id), "site", "Site", &sites)
                        }))
                        (input_field(&Input {
                            required: true,
                            placeholder: o.domains.first().map(String::as_str),
                            ..f.input(&format!("hostname-{}", o.organization_id), "hostname", "Serve it at")
                        }))
                        div.form-actions { button.btn.btn-secondary type="submit" { "Serve site" } }
                    }))
                }
            }
        }
    }
}

/// A one-button form that releases a domain or stops serving a host name.
fn remove_button(v: &SitesView, o: &OrgSites, field: &str, value: &str, label: &str, text: &str) -> Markup {
    org_form(
        v,
        o,
        Some("inline"),
        paths::SITES_DOMAINS_REMOVE,
        html! {
            input type="hidden" name=(field) value=(value);
            button.btn.btn-secondary.btn-small type="submit" aria-label=(label) { (text) }
        },
    )
}

/// A plain POST form that acts for one organization: the CSRF token and its id, then `body`.
fn org_form(v: &SitesView, o: &OrgSites, class: Option<&str>, action: &str, body: Markup) -> Markup {
    html! {
        form class=[class] method="post" action=(action) {
            (csrf_field(&v.csrf))
            input type="hidden" name="organization_id" value=(o.organization_id);
            (body)
        }
    }
}

fn requests(v: &SitesView, o: &OrgSites) -> Markup {
    if o.requests.is_empty() {
        return html! {};
    }
    let rows = o
        .requests
        .iter()
        .take(6)
        .map(|r| {
            let tone = match r.state.as_str() {
                "done" => Tone::Ok,
                "accepted" => Tone::Warn,
                _ => Tone::Bad,
            };
            let state = if r.state == "accepted" { "in flight" } else { r.state.as_str() };
            vec![
                html! { (r.when) },
                html! { (r.kind) " " (r.domain) },
                html! {
                    (badge(state, tone))
                    @if let Some(to) = &r.withdraw {
                        " "
                        form.inline method="post" action=(to) {
                            (csrf_field(&v.csrf))
                            button.btn.btn-secondary.btn-small type="submit"
                                aria-label=(format!("Withdraw the request to {} {}", r.kind, r.domain))
                                title="Withdraw it before it starts" { "Withdraw" }
                        }
                    }
                },
                html! { (r.outcome.clone().unwrap_or_default()) },
            ]
        })
        .collect();
    html! {
        div.requests {
            h3 { "Recent requests" }
            (table_cols(&[Column::text("When"), Column::text("Request"), Column::text("State"), Column::text("Outcome")],
                rows, ""))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(state: &str) -> SitesView {
        SitesView {
            csrf: "t".into(),
            connected: true,
            notice: None,
            organizations: vec![OrgSites {
                organization_id: 7,
                name: "Acme".into(),
                sites: vec![SiteLine {
                    site_id: "s-1".into(),
                    domain: "acme.wiki.localhost".into(),
                    url: "http://acme.wiki.localhost:8090/".into(),
                    open_url: Some("/sites/s1/open".into()),
                    status: "active".into(),
                    keep_active: false,
                    storage_bytes: Some(2048),
                    modified: None,
                    in_flight: None,
                    hostnames: vec![],
                    note: None,
                }],
                requests: vec![RequestLine {
                    domain: "acme.wiki.localhost".into(),
                    kind: "create".into(),
                    state: state.into(),
                    outcome: None,
                    when: "now".into(),
                    withdraw: None,
                }],
                used: 1,
                limit: 3,
                zone: "wiki.localhost".into(),
                swap_in_minutes: None,
                form: FormState::default(),
                custom_domain: false,
                domains: vec![],
            }],
        }
    }

    #[test]
    fn the_section_polls_only_while_a_request_is_in_flight() {
        let polling = sites_section(&view("accepted")).into_string();
        assert!(polling.contains(r#"hx-get="/sites/live""#) && polling.contains("every 2s"), "{polling}");
        let settled = sites_section(&view("done")).into_string();
        assert!(!settled.contains("hx-trigger"), "{settled}");
        assert!(settled.contains("1 of 3 active") && settled.contains("2.0 KB"), "{settled}");
    }
}
