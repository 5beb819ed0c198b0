//! `bench all [--quick]`: every bench once, one after another on the same machine, and one
//! table of their figures and ratios, in the shape of `docs/operations.md`'s table.
//!
//! Each ratio is against the yardstick of its own run (its own concurrency, just after its own
//! work). The machine's two yardsticks, TPC-B at 4 clients with commits that wait for the disk
//! and with `synchronous_commit = off`, are the plan-act bench's, and are printed above the table:
//! the first moves with the disk, the second with the CPU, so a ratio is read against them.

use std::fmt::Write as _;

use serde::Serialize;

use super::{farm_sync, http, plan_act, relay, rule_change, slots, webhooks};
use crate::config::Config;

pub struct Options {
    /// A small N for each bench, and short yardsticks: every figure in a few minutes.
    pub quick: bool,
}

/// One bench's line of the table.
#[derive(Debug, Serialize)]
pub struct Row {
    pub bench: &'static str,
    pub command: String,
    pub n: i64,
    /// What it measured, in words and numbers.
    pub figures: String,
    pub ratio: f64,
    /// Against the yardstick with `synchronous_commit = off`, for the benches whose own commits
    /// skip the disk wait.
    pub ratio_async: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub quick: bool,
    /// The machine's yardsticks: TPC-B through sqlx at 4 clients, with and without the disk wait.
    pub yardstick_tps: f64,
    pub yardstick_async_tps: f64,
    pub rows: Vec<Row>,
}

/// The sizes: the quick set runs in a few minutes on two cores; the full set is each bench's
/// own default.
struct Sizes {
    orgs: i64,
    http_orgs: i64,
    http_seconds: f64,
    slot_pools: i64,
    sites: i64,
    events: usize,
    subscriptions: usize,
    relay_orgs: i64,
    yardstick_seconds: f64,
}

impl Sizes {
    fn of(quick: bool) -> Sizes {
        if quick {
            Sizes {
                orgs: 2_000,
                http_orgs: 2_000,
                http_seconds: 6.0,
                slot_pools: 500,
                sites: 2_000,
                events: 2_000,
                subscriptions: 100,
                relay_orgs: 2_000,
                yardstick_seconds: 3.0,
            }
        } else {
            Sizes {
                orgs: 10_000,
                http_orgs: 100_000,
                http_seconds: 15.0,
                slot_pools: 3_000,
                sites: 100_000,
                events: 5_000,
                subscriptions: 200,
                relay_orgs: 10_000,
                yardstick_seconds: 10.0,
            }
        }
    }
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    let s = Sizes::of(o.quick);
    let y = s.yardstick_seconds;
    let mut rows = vec![];

    let p = plan_act::run(
        config,
        &plan_act::Options {
            orgs: s.orgs,
            concurrency: crate::services::plan_acts::MOVE_PARALLELISM,
            yardstick_seconds: y,
            keep: false,
        },
    )
    .await?;
    rows.push(Row {
        bench: "plan-act",
        command: format!("bench plan-act --orgs {}", s.orgs),
        n: p.orgs,
        figures: format!(
            "T0 {:.2} ms ({:.2}× T0 at 1000); {:.0} moves/s ({:.0} µs a move)",
            p.t0_s * 1e3,
            p.t0_ratio,
            p.moves_per_s,
            1e6 / p.moves_per_s
        ),
        ratio: p.ratio,
        ratio_async: Some(p.ratio_async),
    });
    let (yardstick_tps, yardstick_async_tps) = (p.yardstick_tps, p.yardstick_async_tps);

    let r = rule_change::run(
        config,
        &rule_change::Options {
            pools: s.orgs,
            concurrency: crate::services::rule_changes::DEFAULT_DRAIN_PARALLELISM,
            yardstick_seconds: y,
            keep: false,
        },
    )
    .await?;
    rows.push(Row {
        bench: "rule-change",
        command: format!("bench rule-change --pools {}", s.orgs),
        n: r.n,
        figures: format!("hold {:.3} s; {:.0} pools/s", r.hold_s, r.settled_per_s),
        ratio: r.ratio,
        ratio_async: None,
    });

    let r = relay::run(config, &relay::Options { orgs: s.relay_orgs, yardstick_seconds: y, keep: false }).await?;
    rows.push(Row {
        bench: "relay",
        command: format!("bench relay --orgs {}", s.relay_orgs),
        n: r.orgs,
        figures: format!("{:.0} records/s", r.records_per_s),
        ratio: r.ratio,
        ratio_async: Some(r.ratio_async),
    });

    let r = webhooks::run(
        config,
        &webhooks::Options { events: s.events, subscriptions: s.subscriptions, yardstick_seconds: y, keep: false },
    )
    .await?;
    rows.push(Row {
        bench: "webhooks",
        command: format!("bench webhooks --events {} --subscriptions {}", s.events, s.subscriptions),
        n: r.events as i64,
        figures: format!("ingest {:.0}/s; {} reconciles at {:.0}/s", r.ingest_per_s, r.reconciles, r.reconciled_per_s),
        ratio: r.ratio,
        ratio_async: None,
    });

    let r = slots::run(config, &slots::Options { pools: s.slot_pools, yardstick_seconds: y, keep: false }).await?;
    rows.push(Row {
        bench: "slots",
        command: format!("bench slots --pools {}", s.slot_pools),
        n: r.pools,
        figures: format!("{:.0} gates/s; records {:.0}/s", r.gates_per_s, r.records_per_s),
        ratio: r.ratio,
        ratio_async: None,
    });

    let r = farm_sync::run(config, &farm_sync::Options { sites: s.sites, yardstick_seconds: y, keep: false }).await?;
    rows.push(Row {
        bench: "farm-sync",
        command: format!("bench farm-sync --sites {}", s.sites),
        n: r.sites,
        figures: format!("{:.0} sites/s", r.sites_per_s),
        ratio: r.ratio,
        ratio_async: None,
    });

    let r = http::run(
        config,
        &http::Options { orgs: s.http_orgs, connections: 64, seconds: s.http_seconds, keep: false, member_pages: None },
    )
    .await?;
    let slowest = r.operator_pages_ms.iter().max_by(|a, b| a.1.total_cmp(b.1));
    rows.push(Row {
        bench: "http",
        command: format!("bench http --connections 64 --seconds {} --orgs {}", s.http_seconds, s.http_orgs),
        n: r.orgs,
        figures: format!(
            "member pages {:.0}/s p99 {:.1} ms; /readyz {:.0}/s p99 {:.1} ms; slowest operator page {}",
            r.page_rps,
            r.page_p99_ms,
            r.readyz_rps,
            r.readyz_p99_ms,
            slowest.map_or_else(String::new, |(p, ms)| format!("{p} {ms:.1} ms"))
        ),
        ratio: r.ratio,
        ratio_async: None,
    });

    Ok(Report { quick: o.quick, yardstick_tps, yardstick_async_tps, rows })
}

/// The report as Markdown: the machine's yardsticks, then one row per bench.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Yardsticks (TPC-B through sqlx, 4 clients): {:.0} tps; with `synchronous_commit = off` {:.0} tps.\n",
        r.yardstick_tps, r.yardstick_async_tps
    );
    let _ = writeln!(out, "| bench | command | N | figures | ratio | ratio_async |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for row in &r.rows {
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {:.2} | {} |",
            row.bench,
            row.command,
            row.n,
            row.figures,
            row.ratio,
            row.ratio_async.map_or_else(|| "–".to_string(), |a| format!("{a:.2}"))
        );
    }
    out
}
