//! The operators' farm page (`/operator/farm`): the maintenance runs (sync, retention, quota) with
//! what each did and how long it took, the next run, "Run now" (refused while one is queued or
//! running), when asked the sites the farm and the console disagree about, and the custom domains
//! waiting on their DNS record (issue 40): claims still pending and verified ones whose record
//! went missing.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, card, info_note, notice, or_none, table_cols};
use crate::forms::csrf_field;
use crate::paths;

pub struct FarmRunRow {
    pub started: String,
    /// "12.3 s", or "running".
    pub took: String,
    /// "ok", "failed" or "running".
    pub outcome: String,
    pub error: Option<String>,
    pub farm_sites: Option<i32>,
    /// "2 adopted, 1 status written, …", the counts that are not zero.
    pub did: String,
}

pub struct DriftRow {
    pub domain: String,
    pub farm: String,
    pub console: String,
    pub workspace: String,
}

pub struct FarmDriftView {
    pub farm_sites: usize,
    pub console_sites: usize,
    pub total: usize,
    pub rows: Vec<DriftRow>,
    pub farm_error: Option<String>,
}

/// A custom domain whose claim waits on DNS: not yet proved, or proved and now missing its record.
pub struct WatchedClaimRow {
    pub name: String,
    /// The organization's name and its operator page URL, when the owner is one.
    pub organization: Option<(String, String)>,
    /// "pending", "lapsing" or "lapsed".
    pub state: String,
    pub since: String,
    pub deadline: Option<String>,
    pub last_check: Option<String>,
}

pub struct FarmView {
    pub csrf: String,
    /// Whether a farm is connected at all.
    pub connected: bool,
    pub runs: Vec<FarmRunRow>,
    pub next_run: Option<String>,
    /// "queued" or "running".
    pub run_state: Option<String>,
    pub drift: Option<FarmDriftView>,
    pub notice: Option<String>,
    pub refusal: Option<String>,
    /// Pending, lapsing and lapsed domain claims.
    pub claims: Vec<WatchedClaimRow>,
}

pub fn operator_farm(v: &FarmView) -> Markup {
    html! {
        @if let Some(n) = &v.notice { (notice(n)) }
        @if let Some(r) = &v.refusal { div.refusal role="alert" { p { (r) } } }
        @if !v.connected {
            (info_note(html! { p { "No farm is connected: sites cannot be synced or maintained now." } }))
        }
        (card("maintenance-heading", "Maintenance", html! {
            p.muted {
                "Each run syncs the console with the farm, deletes archived sites past retention, then parks "
                "active sites above a plan's limit and brings back the ones it parked when there is room."
            }
            p {
                @match (&v.run_state, &v.next_run) {
                    (Some(state), _) => { "A run is " (state) " now." }
                    (None, Some(next)) => { "Next run: " (next) "." }
                    (None, None) => { "No run is scheduled (no worker with a farm has started)." }
                }
            }
            @if v.connected {
                form.inline method="post" action=(paths::OPERATOR_FARM_RUN) {
                    (csrf_field(&v.csrf))
                    button.btn.btn-secondary type="submit" disabled[v.run_state.is_some()] { "Run now" }
                }
            }
            (table_cols(
                &[Column::text("Started"), Column::text("Outcome"), Column::num("Took"), Column::num("Farm sites"), Column::text("What it did")],
                v.runs.iter().map(|r| vec![
                    html! { (r.started) },
                    html! {
                        (badge(&r.outcome, match r.outcome.as_str() { "ok" => Tone::Ok, "failed" => Tone::Bad, _ => Tone::Muted }))
                        @if let Some(e) = &r.error { br; span.muted { (e) } }
                    },
                    html! { (r.took) },
                    html! { (r.farm_sites.map(|n| n.to_string()).unwrap_or_else(|| "—".into())) },
                    html! { (r.did) },
                ]).collect(),
                "No run yet.",
            ))
        }))
        (card("drift-heading", "Drift between the farm and the console", html! {
            @match &v.drift {
                None => {
                    p.muted { "Comparing reads the farm's whole list." }
                    a.btn.btn-secondary href=(format!("{}?drift=1", paths::OPERATOR_FARM)) { "Compare now" }
                }
                Some(d) => {
                    @if let Some(e) = &d.farm_error {
                        div.refusal role="alert" { p { "The farm did not answer: " (e) } }
                    } @else {
                        p { (d.farm_sites) " sites on the farm, " (d.console_sites) " in the console; " (d.total) " differ." }
                        @if d.total > d.rows.len() { p.muted { "The first " (d.rows.len()) " by domain." } }
                        (table_cols(
                            &[Column::text("Site"), Column::text("On the farm"), Column::text("In the console"), Column::text("Workspace")],
                            d.rows.iter().map(|r| vec![
                                html! { code { (r.domain) } },
                                html! { (r.farm) },
                                html! { (r.console) },
                                html! { (r.workspace) },
                            ]).collect(),
                            "None: the farm and the console agree.",
                        ))
                    }
                }
            }
        }))
        (claims_card(&v.claims))
    }
}

fn claim_badge(state: &str) -> Markup {
    match state {
        "lapsing" => badge("lapsing", Tone::Warn),
        "lapsed" => badge("lapsed", Tone::Bad),
        other => badge(other, Tone::Muted),
    }
}

/// The claims the DNS checks are watching, so an operator can tell a member what is missing.
fn claims_card(claims: &[WatchedClaimRow]) -> Markup {
    card(
        "claims-heading",
        "Domains waiting on DNS",
        html! {
            p.muted {
                "A claim holds its domain once the TXT record proves it; a verified domain whose record "
                "goes missing lapses, then is released."
            }
            (table_cols(
                &[Column::text("Domain"), Column::text("Organization"), Column::text("State"), Column::text("Since"), Column::text("Deadline"), Column::text("Last check")],
                claims.iter().map(|c| vec![
                    html! { code { (c.name) } },
                    html! {
                        @match &c.organization {
                            Some((name, href)) => { a href=(href) { (name) } }
                            None => { span.muted { "—" } }
                        }
                    },
                    claim_badge(&c.state),
                    html! { (c.since) },
                    or_none(c.deadline.as_deref(), "—"),
                    or_none(c.last_check.as_deref(), "not checked yet"),
                ]).collect(),
                "No domain is waiting on DNS.",
            ))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(claims: Vec<WatchedClaimRow>) -> FarmView {
        FarmView {
            csrf: "t".into(),
            connected: true,
            runs: vec![],
            next_run: None,
            run_state: None,
            drift: None,
            notice: None,
            refusal: None,
            claims,
        }
    }

    fn claim(name: &str, organization: Option<(&str, &str)>, state: &str, deadline: Option<&str>) -> WatchedClaimRow {
        WatchedClaimRow {
            name: name.into(),
            organization: organization.map(|(n, href)| (n.into(), href.into())),
            state: state.into(),
            since: "2026-12-07 10:00 UTC".into(),
            deadline: deadline.map(Into::into),
            last_check: None,
        }
    }

    /// The "Domains waiting on DNS" card, from its heading on.
    fn claims_card_of(v: &FarmView) -> String {
        let html = operator_farm(v).into_string();
        let at = html.find(r#"<h2 id="claims-heading">Domains waiting on DNS</h2>"#).expect("the card");
        html[at..].to_string()
    }

    #[test]
    fn the_farm_page_lists_the_claims_waiting_on_dns_with_their_owner_and_deadline() {
        let mut lapsing = claim(
            "wiki.acme.example",
            Some(("Acme", "/operator/organizations/7")),
            "lapsing",
            Some("lapses 2026-12-10 10:00 UTC"),
        );
        lapsing.last_check = Some("2026-12-07 10:05 UTC: no TXT record found".into());
        let card = claims_card_of(&view(vec![
            claim("beta.example", None, "pending", Some("expires 2026-12-14 10:00 UTC")),
            lapsing,
            claim("gone.example", Some(("Gamma", "/operator/organizations/9")), "lapsed", None),
        ]));
        for part in [
            "<code>beta.example</code>",
            r#"<span class="badge badge-muted">pending</span>"#,
            "expires 2026-12-14 10:00 UTC",
            "<code>wiki.acme.example</code>",
            r#"<a href="/operator/organizations/7">Acme</a>"#,
            r#"<span class="badge badge-warn">lapsing</span>"#,
            "lapses 2026-12-10 10:00 UTC",
            "2026-12-07 10:05 UTC: no TXT record found",
            r#"<span class="badge badge-bad">lapsed</span>"#,
            r#"<a href="/operator/organizations/9">Gamma</a>"#,
        ] {
            assert!(card.contains(part), "{part} in {card}");
        }
        assert_eq!(card.matches("<tr>").count(), 4, "a header and a row per claim: {card}");
        assert!(!card.contains("No domain is waiting on DNS."), "{card}");
    }

    #[test]
    fn with_no_claim_the_card_says_none_waits() {
        let card = claims_card_of(&view(vec![]));
        assert!(card.contains("No domain is waiting on DNS."), "{card}");
        assert!(!card.contains("<table"), "{card}");
    }
}
