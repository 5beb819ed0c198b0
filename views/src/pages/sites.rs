//! A member's sites (`/sites`): per organization, its FedWiki sites with address, status,
//! storage and last modification, the count against the plan ("2 of 3 active"), the acts on
//! each site, the swap, the create form, and the requests in flight and their outcomes. While a
//! request is in flight the section polls `/sites/live` and replaces itself until none is.
//! Each organization's own domains show their DNS verification (issue 40): the TXT record to
//! publish while one is pending or lapsing, the last check, and the notices about them.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, notice, polling, table_cols};
use crate::forms::FormState;
use crate::forms::{Input, Select, csrf_field, form_banners, input_field, select_field};
use crate::paths::{self, fill};
use crate::text::json_string;

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
    /// Host names under the organization's own domains placed on it.
    pub hostnames: Vec<Hostname>,
    /// What the console did to it on its own, worded: parked by the plan's limit, or when an
    /// archived site is deleted.
    pub note: Option<String>,
}

/// A host name under one of the organization's domains, placed on a site.
pub struct Hostname {
    pub name: String,
    /// false: under a lapsed domain, not served now.
    pub served: bool,
}

/// One of an organization's own domains and where its DNS proof stands.
pub struct DomainLine {
    pub name: String,
    /// "pending", "verified", "lapsing" or "lapsed".
    pub state: String,
    /// The record to publish: `_member-console-challenge.<name>` and its value (the token).
    pub record_name: String,
    pub token: String,
    /// Worded, e.g. "added 2026-12-07 10:00 UTC" / "verified 2026-12-07 10:00 UTC".
    pub since: String,
    /// Worded deadline: pending "expires 2026-12-14 10:00 UTC"; lapsing "lapses 2026-12-10 10:00 UTC";
    /// lapsed "released 2026-12-17 10:00 UTC"; verified None.
    pub deadline: Option<String>,
    /// The last check worded ("2026-12-07 10:05 UTC: no TXT record found"), None before the first.
    pub last_check: Option<String>,
}

impl DomainLine {
    /// Whether its names may be served: what the serve form can place a site under.
    fn holds(&self) -> bool {
        matches!(self.state.as_str(), "verified" | "lapsing")
    }
}

/// Something the console did to a domain on its own that the members should hear about (a
/// claim released because another organization verified first, a record gone missing, ...).
pub struct DomainNotice {
    pub notice_id: i64,
    pub sentence: String,
    pub when: String,
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
    /// Whether the plan allows domains of the organization's own, and the ones it claimed.
    pub custom_domain: bool,
    pub domains: Vec<DomainLine>,
    /// Notices about its domains not yet dismissed, newest first.
    pub notices: Vec<DomainNotice>,
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
    /// The demo's local DNS control URL, when it runs: where a member adds the TXT record.
    pub local_dns: Option<String>,
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
                        br; span.muted { "also " (h.name) @if !h.served { " " (NOT_SERVED) } }
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

/// What a host name under a lapsed domain says instead of being served.
const NOT_SERVED: &str = "(not served: its domain lapsed)";

/// The notices about the organization's domains, each with its time and a way to dismiss it.
fn domain_notices(v: &SitesView, o: &OrgSites) -> Markup {
    if o.notices.is_empty() {
        return html! {};
    }
    html! {
        ul.domain-notices aria-label=(format!("Notices about {}'s domains", o.name)) {
            @for n in &o.notices {
                li {
                    span.domain-notice-when { (n.when) } " "
                    span { (n.sentence) } " "
                    (org_form(v, o, Some("inline"), paths::SITES_DOMAINS_NOTICE_DISMISS, html! {
                        input type="hidden" name="notice_id" value=(n.notice_id);
                        button.btn.btn-secondary.btn-small type="submit"
                            aria-label=(format!("Dismiss: {}", n.sentence)) { "Dismiss" }
                    }))
                }
            }
        }
    }
}

fn domains_panel(v: &SitesView, o: &OrgSites) -> Markup {
    // A plan that no longer allows custom domains still shows the ones held, to let them go, and
    // the notices (a claim another organization won leaves only its notice).
    if !o.custom_domain && o.domains.is_empty() && o.notices.is_empty() {
        return html! {};
    }
    let f = &o.form;
    let sites: Vec<(&str, &str)> = o.sites.iter().map(|s| (s.site_id.as_str(), s.domain.as_str())).collect();
    let placed: Vec<(&Hostname, &str)> =
        o.sites.iter().flat_map(|s| s.hostnames.iter().map(|h| (h, s.domain.as_str()))).collect();
    // Only a verified (or lapsing, still verified) domain's names can serve a site.
    let holding = o.domains.iter().find(|d| d.holds());
    html! {
        div.form-panel {
            h3 { "Your domains" }
            (domain_notices(v, o))
            @if o.domains.is_empty() {
                @if o.custom_domain { p.muted { "Add a domain of your own, prove it is yours with a DNS record, then serve a site at it or at a name under it." } }
            } @else {
                ul.domains {
                    @for d in &o.domains {
                        (domain_line(v, o, d))
                    }
                }
                @if let Some(e) = f.field_error("release") { p.field-error role="alert" { (e) } }
            }
            @if !placed.is_empty() {
                ul.placements {
                    @for (h, site) in &placed {
                        li {
                            code { (h.name) }
                            @if h.served { " serves " (site) } @else { " would serve " (site) " " span.muted { (NOT_SERVED) } }
                            " "
                            (remove_button(v, o, "hostname", &h.name, &format!("Stop serving {site} at {}", h.name), "Stop serving"))
                        }
                    }
                }
                @if let Some(e) = f.field_error("stop") { p.field-error role="alert" { (e) } }
            }
            @if !o.custom_domain {
                @if !o.domains.is_empty() {
                    p.muted { "The plan no longer includes custom domains: you can release these, but not add more." }
                }
            } @else {
                (org_form(v, o, None, paths::SITES_DOMAINS, html! {
                    (input_field(&Input {
                        required: true,
                        placeholder: Some("wiki.example.org"),
                        hint: Some("You will then be asked to publish a TXT record in its DNS, to prove it is yours."),
                        ..f.input(&format!("domain-{}", o.organization_id), "domain", "Domain")
                    }))
                    div.form-actions { button.btn.btn-secondary type="submit" { "Add domain" } }
                }))
                @if let Some(first) = holding.filter(|_| !sites.is_empty()) {
                    (org_form(v, o, None, paths::SITES_DOMAINS, html! {
                        (select_field(&Select {
                            error: None,
                            required: true,
                            ..f.select(&format!("serve-site-{}", o.organization_id), "site", "Site", &sites)
                        }))
                        (input_field(&Input {
                            required: true,
                            placeholder: Some(first.name.as_str()),
                            ..f.input(&format!("hostname-{}", o.organization_id), "hostname", "Serve it at")
                        }))
                        div.form-actions { button.btn.btn-secondary type="submit" { "Serve site" } }
                    }))
                } @else if let Some(e) = f.field_error("hostname") {
                    // A placement asked while no domain holds (a pending one, say): its reason.
                    p.field-error role="alert" { (e) }
                }
            }
        }
    }
}

/// The badge of a domain's state, in the tone of what it asks of the member.
fn domain_badge(state: &str) -> Markup {
    match state {
        "verified" => badge("verified", Tone::Ok),
        "lapsing" => badge("lapsing", Tone::Warn),
        "lapsed" => badge("lapsed", Tone::Bad),
        // Pending asks for a step, but nothing is wrong yet.
        other => badge(other, Tone::Muted),
    }
}

/// One domain: its name and state, and unless verified the record that proves it, the deadline
/// and the last check; then its acts.
fn domain_line(v: &SitesView, o: &OrgSites, d: &DomainLine) -> Markup {
    let verified = d.state == "verified";
    let urgent = matches!(d.state.as_str(), "lapsing" | "lapsed");
    html! {
        li.domain {
            div.domain-head {
                code { (d.name) } " " (domain_badge(&d.state)) " "
                span.muted { (d.since) }
                @if let Some(deadline) = &d.deadline {
                    span.muted { " · " }
                    @if urgent { strong.domain-deadline { (deadline) } } @else { span.muted { (deadline) } }
                }
            }
            @if !verified {
                p.domain-ask {
                    @match d.state.as_str() {
                        "lapsing" => { "The record that proves this domain is yours is missing. Publish it again to keep the domain:" }
                        "lapsed" => { "The record is still missing, so the names under this domain are not served. Publish it again to restore them, or release the domain:" }
                        _ => { "To prove this domain is yours, publish this record in its DNS, then check:" }
                    }
                }
                (record(d))
                @if d.state == "pending" && let Some(dns) = &v.local_dns {
                    (local_dns_hint(dns, d))
                }
            }
            p.muted.domain-check {
                @match &d.last_check {
                    Some(c) => { "Last checked " (c) "." }
                    None => { "Not checked yet." }
                }
            }
            div.domain-acts {
                (org_form(v, o, Some("inline"), paths::SITES_DOMAINS_CHECK, html! {
                    input type="hidden" name="domain" value=(d.name);
                    @if verified {
                        button.btn.btn-secondary.btn-small type="submit" aria-label=(format!("Check now {}", d.name)) { "Check now" }
                    } @else {
                        button.btn type="submit" aria-label=(format!("Check now {}", d.name)) { "Check now" }
                    }
                }))
                (release(v, o, d))
            }
        }
    }
}

/// The TXT record to publish, each part in a `<code>` with a button that copies it.
fn record(d: &DomainLine) -> Markup {
    html! {
        dl.dns-record aria-label=(format!("The DNS record for {}", d.name)) {
            div { dt { "Type" } dd { code { "TXT" } } }
            div { dt { "Name" } dd { (copyable(&d.record_name, "Copy the record's name")) } }
            div { dt { "Value" } dd { (copyable(&d.token, "Copy the record's value")) } }
        }
    }
}

/// `value` in a `<code>`, and a button that puts it on the clipboard (static/console.js; it
/// selects the `<code>` where it cannot).
fn copyable(value: &str, label: &str) -> Markup {
    html! {
        span.copyable {
            code { (value) } " "
            button.btn.btn-secondary.btn-small.copy type="button" data-copy=(value) aria-label=(label) { "Copy" }
        }
    }
}

/// Under a pending domain in the demo, which answers DNS itself: how to add the record there.
fn local_dns_hint(local_dns: &str, d: &DomainLine) -> Markup {
    let base = local_dns.trim_end_matches('/');
    let command = format!(
        "curl -X PUT {base}/_dns/records/{}/txt -H 'content-type: application/json' -d '{{\"values\":[{}]}}'",
        d.record_name,
        json_string(&d.token)
    );
    html! {
        div.dns-hint {
            p.muted { "This demo answers DNS itself: add the record with this command, then Check now." }
            span.copyable {
                code { (command) } " "
                button.btn.btn-secondary.btn-small.copy type="button" data-copy=(command) aria-label="Copy the command" { "Copy" }
            }
        }
    }
}

/// How a domain is let go: a pending claim is cancelled, a verified one released, and a lapsed
/// one, whose names still point at sites, released only once the member confirms.
fn release(v: &SitesView, o: &OrgSites, d: &DomainLine) -> Markup {
    let name = &d.name;
    match d.state.as_str() {
        "pending" => remove_button(v, o, "domain", name, &format!("Cancel the claim on {name}"), "Cancel"),
        "lapsed" => html! {
            details.inline.confirm {
                summary.btn.btn-secondary.btn-small aria-label=(format!("Release {name}…")) { "Release…" }
                (org_form(v, o, None, paths::SITES_DOMAINS_REMOVE, html! {
                    input type="hidden" name="domain" value=(name);
                    p { (format!("Release {name} and stop serving the names under it?")) }
                    button.btn.btn-danger.btn-small type="submit" aria-label=(format!("Release {name}")) { "Release" }
                }))
            }
        },
        _ => remove_button(v, o, "domain", name, &format!("Release {name}"), "Release"),
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
                notices: vec![],
            }],
            local_dns: None,
        }
    }

    fn domain(name: &str, state: &str) -> DomainLine {
        let deadline = match state {
            "pending" => Some("expires 2026-12-14 10:00 UTC"),
            "lapsing" => Some("lapses 2026-12-10 10:00 UTC"),
            "lapsed" => Some("released 2026-12-17 10:00 UTC"),
            _ => None,
        };
        DomainLine {
            name: name.into(),
            state: state.into(),
            record_name: format!("_member-console-challenge.{name}"),
            token: format!("tok-{name}"),
            since: "added 2026-12-07 10:00 UTC".into(),
            deadline: deadline.map(Into::into),
            last_check: None,
        }
    }

    /// The page of an organization whose plan allows custom domains, holding these.
    fn with_domains(domains: Vec<DomainLine>) -> SitesView {
        let mut v = view("done");
        v.organizations[0].custom_domain = true;
        v.organizations[0].domains = domains;
        v
    }

    fn page(v: &SitesView) -> String {
        member_sites(v).into_string()
    }

    #[test]
    fn a_pending_domain_shows_the_txt_record_to_publish_its_deadline_and_its_last_check() {
        let mut v = with_domains(vec![domain("acme.example", "pending")]);
        let html = page(&v);
        for part in [
            "<dt>Type</dt><dd><code>TXT</code></dd>",
            "<dt>Name</dt><dd><span class=\"copyable\"><code>_member-console-challenge.acme.example</code>",
            "<dt>Value</dt><dd><span class=\"copyable\"><code>tok-acme.example</code>",
            "<code>acme.example</code> <span class=\"badge badge-muted\">pending</span>",
            "expires 2026-12-14 10:00 UTC",
            "Not checked yet.",
        ] {
            assert!(html.contains(part), "{part} in {html}");
        }
        v.organizations[0].domains[0].last_check = Some("2026-12-07 10:05 UTC: no TXT record found".into());
        assert!(page(&v).contains("Last checked 2026-12-07 10:05 UTC: no TXT record found."));

        // Verified, it holds: no record to publish, a badge that says so, still a (small) check.
        let html = page(&with_domains(vec![domain("acme.example", "verified")]));
        assert!(!html.contains("_member-console-challenge") && !html.contains("data-copy"), "{html}");
        assert!(html.contains(r#"<span class="badge badge-ok">verified</span>"#), "{html}");
        assert!(
            html.contains(r#"<button class="btn btn-secondary btn-small" type="submit" aria-label="Check now acme.example">Check now</button>"#),
            "{html}"
        );
    }

    #[test]
    fn check_now_posts_the_organization_and_the_domain() {
        let html = page(&with_domains(vec![domain("acme.example", "lapsing")]));
        let form = html.split(r#"action="/sites/domains/check""#).nth(1).expect("a check form");
        let form = &form[..form.find("</form>").unwrap()];
        assert!(form.contains(r#"name="organization_id" value="7""#), "{form}");
        assert!(form.contains(r#"name="domain" value="acme.example""#), "{form}");
        assert!(form.contains(r#"name="csrf_token" value="t""#), "{form}");
        assert!(html.contains(r#"<strong class="domain-deadline">lapses 2026-12-10 10:00 UTC</strong>"#), "{html}");
        assert!(html.contains("_member-console-challenge.acme.example"), "a lapsing domain shows its record again");
    }

    #[test]
    fn the_copy_buttons_carry_the_record_name_and_value_and_run_no_inline_script() {
        let html = page(&with_domains(vec![domain("acme.example", "pending")]));
        assert!(
            html.contains(r#"<button class="btn btn-secondary btn-small copy" type="button" data-copy="_member-console-challenge.acme.example" aria-label="Copy the record's name">Copy</button>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<button class="btn btn-secondary btn-small copy" type="button" data-copy="tok-acme.example" aria-label="Copy the record's value">Copy</button>"#),
            "{html}"
        );
        assert_eq!(html.matches("data-copy=").count(), 2, "{html}");
        // The CSP allows no inline script: static/console.js does the copying.
        assert!(!html.contains("<script") && !html.contains("onclick"), "{html}");
    }

    #[test]
    fn a_lapsed_domain_is_released_only_after_a_confirm_and_a_pending_one_is_cancelled() {
        let html = page(&with_domains(vec![domain("acme.example", "lapsed")]));
        assert!(html.contains(r#"<span class="badge badge-bad">lapsed</span>"#), "{html}");
        // The site's own "Delete…" is a confirm too: the domain's is the one its summary names.
        let summary = r#"<details class="inline confirm"><summary class="btn btn-secondary btn-small" aria-label="Release acme.example…">Release…</summary>"#;
        let confirm = html.split(summary).nth(1).expect("a confirm");
        let confirm = &confirm[..confirm.find("</details>").unwrap()];
        assert!(confirm.contains("Release acme.example and stop serving the names under it?"), "{confirm}");
        assert!(confirm.contains(r#"action="/sites/domains/remove""#), "{confirm}");
        assert!(confirm.contains(r#"name="domain" value="acme.example""#), "{confirm}");
        assert_eq!(html.matches(r#"action="/sites/domains/remove""#).count(), 1, "no release outside the confirm");

        let html = page(&with_domains(vec![domain("acme.example", "pending")]));
        assert!(
            !html.contains("Release…") && html.matches("<details").count() == 1,
            "the site's Delete… alone: {html}"
        );
        assert!(html.contains(r#"aria-label="Cancel the claim on acme.example">Cancel</button>"#), "{html}");
        let html = page(&with_domains(vec![domain("acme.example", "verified")]));
        assert!(html.contains(r#"aria-label="Release acme.example">Release</button>"#), "{html}");
    }

    #[test]
    fn the_serve_form_waits_for_a_domain_that_holds_and_suggests_it() {
        let html = page(&with_domains(vec![domain("a.example", "pending"), domain("b.example", "lapsed")]));
        assert!(!html.contains("Serve site"), "{html}");
        assert!(html.contains("publish a TXT record"), "the add form says a record will be asked for: {html}");
        let html = page(&with_domains(vec![domain("a.example", "pending"), domain("b.example", "lapsing")]));
        assert!(html.contains("Serve site") && html.contains(r#"placeholder="b.example""#), "{html}");
        let html = page(&with_domains(vec![domain("c.example", "verified"), domain("b.example", "lapsing")]));
        assert!(html.contains(r#"placeholder="c.example""#), "{html}");
    }

    #[test]
    fn the_demo_says_how_to_add_the_record_to_its_own_dns_under_a_pending_domain_only() {
        let mut v = with_domains(vec![domain("acme.example", "pending"), domain("b.example", "lapsing")]);
        assert!(!page(&v).contains("This demo answers DNS itself"));
        v.local_dns = Some("http://127.0.0.1:8053/".into());
        let html = page(&v);
        assert_eq!(html.matches("This demo answers DNS itself").count(), 1, "{html}");
        let command = "curl -X PUT http://127.0.0.1:8053/_dns/records/_member-console-challenge.acme.example/txt \
                       -H 'content-type: application/json' -d '{&quot;values&quot;:[&quot;tok-acme.example&quot;]}'";
        assert!(html.contains(&format!("<code>{command}</code>")), "{html}");
        assert!(html.contains(&format!(r#"data-copy="{command}" aria-label="Copy the command""#)), "{html}");
    }

    #[test]
    fn notices_show_with_their_time_and_a_dismiss_even_when_the_plan_has_no_custom_domains() {
        let mut v = view("done");
        v.organizations[0].notices = vec![DomainNotice {
            notice_id: 5,
            sentence: "Beta verified acme.example first: your claim on it was released.".into(),
            when: "2026-12-07 11:00 UTC".into(),
        }];
        let html = page(&v);
        assert!(
            html.contains("Your domains") && !html.contains("Add domain"),
            "the plan has no custom domains: {html}"
        );
        assert!(html.contains("2026-12-07 11:00 UTC") && html.contains("your claim on it was released"), "{html}");
        let form = html.split(r#"action="/sites/domains/notices/dismiss""#).nth(1).expect("a dismiss form");
        let form = &form[..form.find("</form>").unwrap()];
        assert!(form.contains(r#"name="organization_id" value="7""#), "{form}");
        assert!(form.contains(r#"name="notice_id" value="5""#), "{form}");
        assert!(form.contains(">Dismiss</button>"), "{form}");
        v.organizations[0].notices.clear();
        let html = page(&v);
        assert!(!html.contains("/sites/domains/notices/dismiss") && !html.contains("Your domains"), "{html}");
    }

    #[test]
    fn a_host_name_under_a_lapsed_domain_says_it_is_not_served() {
        let mut v = with_domains(vec![domain("a.example", "verified"), domain("b.example", "lapsed")]);
        v.organizations[0].sites[0].hostnames = vec![
            Hostname { name: "wiki.a.example".into(), served: true },
            Hostname { name: "wiki.b.example".into(), served: false },
        ];
        let html = page(&v);
        assert!(html.contains(r#"<span class="muted">also wiki.a.example</span>"#), "{html}");
        assert!(
            html.contains(r#"<span class="muted">also wiki.b.example (not served: its domain lapsed)</span>"#),
            "{html}"
        );
        assert!(html.contains("<code>wiki.a.example</code> serves acme.wiki.localhost"), "{html}");
        assert_eq!(html.matches("(not served: its domain lapsed)").count(), 2, "in the table and the list: {html}");
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
