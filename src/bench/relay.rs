//! `bench relay --orgs N`: N organizations holding Basic, one connection to the receiver the
//! project ships (in this process, on loopback) for the keys Basic sets, every record confirmed
//! at generation 1. Then a rule change raises Basic's site count, drained, which notices all N
//! organizations; the measured part is the relay from those notices until the receiver confirmed
//! every record's generation 2: the relay's passes (ClaimDesiredStateOutbox, recomputeAddress)
//! and the connection's dispatch (the stamp, the signed push, writePushAnswer) running side by
//! side, as their two jobs do. `records_per_s` = N / that time; the yardstick is TPC-B through
//! sqlx at the recompute's parallelism, in the same run; `ratio` = records_per_s / yardstick_tps
//! (the goal is at least 0.5). The run checks the outcome: every record confirmed at generation 2,
//! and the receiver holding the new count for every organization.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use desired_state_receiver::{Config as ReceiverConfig, Receiver};
use serde::Serialize;

use super::{carrying_organizations, id_of, yardstick};
use crate::{
    config::Config,
    demo,
    ids::{ConnectionId, EntitlementSetId},
    integrations::desired_state::Relay,
    scratch::ScratchDb,
    services::{
        desired_state::{self as ds, NewConnection, connections, relay::RECOMPUTE_PARALLELISM},
        rule_changes as rc,
    },
    store::desired_state as store,
};

/// How long one relay pass or dispatch run may go before the loop checks again, as the jobs'.
const RUN_BUDGET: Duration = Duration::from_secs(20);
/// The site count the rule change sets (Basic's is 3).
const NEW_SITES: i64 = 5;

pub struct Options {
    pub orgs: i64,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub orgs: i64,
    /// Setting up: the first relay of every organization, to generation 1 (not measured).
    pub initial_s: f64,
    /// The rule change's drain, which wrote the entitlements and the notices (not measured).
    pub drain_s: f64,
    /// From the notices to the last confirmation.
    pub relay_s: f64,
    pub relay_passes: usize,
    pub dispatch_runs: usize,
    pub records_per_s: f64,
    /// TPC-B at the recompute's parallelism.
    pub yardstick_tps: f64,
    /// records_per_s / yardstick_tps.
    pub ratio: f64,
    /// The yardstick with `synchronous_commit = off`, as a recompute commits.
    pub yardstick_async_tps: f64,
    pub ratio_async: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(o.orgs >= 1, "--orgs must be at least 1");
    super::in_scratch(config, RECOMPUTE_PARALLELISM as u32 + 8, o.keep, async |s| measure(s, o).await).await
}

async fn measure(s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    demo::load(&s.db).await?;
    let ty = id_of(&s.admin, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Community").await?;
    let basic = id_of(&s.admin, "SELECT product_id FROM core.products WHERE name = $1", "Basic").await?;
    let set = id_of(&s.admin, "SELECT entitlement_set_id FROM core.entitlement_sets WHERE name = $1", "Basic").await?;
    carrying_organizations(&s.admin, o.orgs, ty, basic).await?;

    let receiver = Receiver::start(ReceiverConfig { secrets: vec![], ..ReceiverConfig::default() }).await?;
    let relay = Relay::new(Duration::from_secs(10)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let form = NewConnection::parse(
        "Bench receiver",
        &receiver.push_url(),
        "fedwiki.active_sites, fedwiki.custom_domain",
        false,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let c = connections::create_connection(&s.db, &form).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let row = store::connection(&s.db.pool, c).await?.ok_or_else(|| anyhow::anyhow!("the connection vanished"))?;
    receiver.set_secrets(&[row.secret])?;

    // Every organization (the demo's too) to generation 1: the connection's own notice.
    let all: i64 = sqlx::query_scalar("SELECT count(*) FROM core.organizations").fetch_one(&s.admin).await?;
    let t = Instant::now();
    relay_until_confirmed(s, &relay, c, all, 1).await?;
    let initial_s = t.elapsed().as_secs_f64();
    eprintln!("bench: {all} records confirmed at generation 1 in {initial_s:.1} s");

    let sites = NEW_SITES.to_string();
    let rules = [("fedwiki.active_sites", sites.as_str()), ("fedwiki.custom_domain", "yes")]
        .iter()
        .map(|(k, v)| Ok((crate::ids::ResourceKey::from(*k), crate::services::catalog::RuleEntry::parse(v)?)))
        .collect::<Result<BTreeMap<_, _>, String>>()
        .map_err(anyhow::Error::msg)?;
    let t = Instant::now();
    let change = rc::commit_rule_change_batch(&s.db, EntitlementSetId(set), &rules, None, &"bench".into(), 0).await?;
    let d = rc::drain_change(&s.db, change.change_id, rc::DEFAULT_DRAIN_PARALLELISM).await?;
    anyhow::ensure!(d.finished && d.failed == 0, "the drain did not settle every pool: {d:?}");
    let drain_s = t.elapsed().as_secs_f64();
    let notices: i64 = sqlx::query_scalar("SELECT count(*) FROM core.desired_state_outbox").fetch_one(&s.admin).await?;
    eprintln!("bench: the rule change changed {} pools in {drain_s:.1} s and left {notices} notices", d.settled);

    let t = Instant::now();
    let (relay_passes, dispatch_runs) = relay_until_confirmed(s, &relay, c, o.orgs, 2).await?;
    let relay_s = t.elapsed().as_secs_f64();
    let records_per_s = o.orgs as f64 / relay_s;
    eprintln!("bench: {} records relayed and confirmed in {relay_s:.2} s: {records_per_s:.0} records/s", o.orgs);

    let held = receiver.snapshot();
    receiver.stop().await;
    let holding_new = held["recipients"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter(|r| r["generation"] == 2 && r["content"]["entitlements"]["fedwiki.active_sites"] == NEW_SITES)
                .count()
        })
        .unwrap_or(0);
    anyhow::ensure!(
        holding_new as i64 >= o.orgs,
        "the receiver holds the new count at generation 2 for {holding_new} of {} organizations",
        o.orgs
    );

    let clients = RECOMPUTE_PARALLELISM as i64;
    yardstick::prepare(&s.admin, clients).await?;
    let tps = yardstick::run(&s.db.pool, clients, o.yardstick_seconds).await?;
    eprintln!("bench: yardstick (TPC-B through sqlx, {clients} clients): {tps:.0} tps");
    let async_tps = yardstick::run_async_commit(&s.db.pool, clients, o.yardstick_seconds).await?;
    eprintln!("bench: yardstick with synchronous_commit = off: {async_tps:.0} tps");
    Ok(Report {
        orgs: o.orgs,
        initial_s,
        drain_s,
        relay_s,
        relay_passes,
        dispatch_runs,
        records_per_s,
        yardstick_tps: tps,
        ratio: records_per_s / tps,
        yardstick_async_tps: async_tps,
        ratio_async: records_per_s / async_tps,
    })
}

/// The relay's passes and the connection's dispatch side by side, until `expected` records of
/// `c` are confirmed at `generation` (or later); how many passes and runs it took.
async fn relay_until_confirmed(
    s: &ScratchDb,
    relay: &Relay,
    c: ConnectionId,
    expected: i64,
    generation: i64,
) -> anyhow::Result<(usize, usize)> {
    let relayed = AtomicBool::new(false);
    let passes = async {
        let mut n = 0;
        loop {
            let p = ds::process_desired_state_outbox(&s.db, RUN_BUDGET).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            n += 1;
            anyhow::ensure!(p.failed == 0, "the relay failed on {} addresses", p.failed);
            let left: i64 =
                sqlx::query_scalar("SELECT count(*) FROM core.desired_state_outbox").fetch_one(&s.admin).await?;
            if left == 0 {
                relayed.store(true, Ordering::Release);
                return Ok(n);
            }
        }
    };
    let dispatches = async {
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let d = ds::dispatch_connection(&s.db, relay, c, RUN_BUDGET).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            n += 1;
            anyhow::ensure!(d.failed == 0, "{} pushes failed", d.failed);
            if d.pushed == 0 {
                let confirmed: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM core.desired_state_records
                      WHERE connection_id = $1 AND confirmed_generation >= $2",
                )
                .bind(c.0)
                .bind(generation)
                .fetch_one(&s.admin)
                .await?;
                if confirmed >= expected && relayed.load(Ordering::Acquire) {
                    return Ok(n);
                }
                anyhow::ensure!(Instant::now() < deadline, "{confirmed} of {expected} confirmed after 10 minutes");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    Ok(tokio::try_join!(passes, dispatches)?)
}
