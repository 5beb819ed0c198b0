//! The operators' farm page (`/operator/farm`): the maintenance runs (sync, retention, quota) with
//! what each did and how long it took, the next run, "Run now" (refused while one is queued or
//! running), and, when asked, the sites the farm and the console disagree about.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, card, info_note, notice, table_cols};
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
    }
}
