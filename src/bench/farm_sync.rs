//! `bench farm-sync --sites N`: one farm sync pass (SyncSitesToDBActivity) over N sites that all
//! changed. N sites of N/4 organizations (Basic, so each pool has its usage row) are parked in
//! the console and active on the local farm (its API only, in memory, so it answers at once and
//! the figure is the console's): the pass writes every status (writeStatus: the site row, the two
//! request checks, the status, the pool's recount) one site per transaction, then recounts every
//! pool. `sites_per_s` is the pass's rate; the yardstick is TPC-B through sqlx on one connection
//! (the pass is one sequence of transactions), in the same run; `ratio` = sites_per_s /
//! yardstick_tps (the goal is at least 0.5). The run checks the outcome: every site active in the
//! console, every usage row its count.

use std::time::Instant;

use serde::Serialize;

use super::yardstick;
use crate::{
    config::Config, integrations::farm::Farm, scratch::ScratchDb, services::fedwiki::maintenance,
    store::fedwiki_maintenance::RunCounts,
};

const SITES_PER_POOL: i64 = 4;

pub struct Options {
    pub sites: i64,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub sites: i64,
    pub pools: i64,
    pub statuses_written: i32,
    pub pass_s: f64,
    pub sites_per_s: f64,
    /// TPC-B on one connection, the pass's own concurrency.
    pub yardstick_tps: f64,
    /// sites_per_s / yardstick_tps.
    pub ratio: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(o.sites >= SITES_PER_POOL, "--sites must be at least {SITES_PER_POOL}");
    super::in_scratch(config, 8, o.keep, async |s| measure(s, o).await).await
}

async fn measure(s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    crate::demo::load(&s.db).await?;
    let api = super::ApiFarm::start("bench", super::FARM_TIMEOUT).await?;
    let farm = api.farm.clone();
    let pools = o.sites / SITES_PER_POOL;
    seed(s, &farm, pools).await?;
    eprintln!("bench: {} sites in {pools} pools, parked here and active on the farm", pools * SITES_PER_POOL);
    yardstick::prepare(&s.admin, 1).await?;
    let tps = yardstick::run(&s.db.pool, 1, o.yardstick_seconds).await?;

    let mut counts = RunCounts::default();
    let started = Instant::now();
    maintenance::sync_sites(&s.db, &farm, &mut counts).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let pass_s = started.elapsed().as_secs_f64();
    api.stop().await;

    let (active, usage_ok): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM fedwiki.sites WHERE status = 'active'),
                (SELECT count(*) FROM core.numeric_entitlement_usage u
                  WHERE u.resource_key = 'fedwiki.active_sites' AND u.used = fedwiki.count_slots(u.pool_id))",
    )
    .fetch_one(&s.admin)
    .await?;
    let sites = pools * SITES_PER_POOL;
    anyhow::ensure!(active == sites, "{active} of {sites} sites active after the pass");
    anyhow::ensure!(usage_ok >= pools, "{usage_ok} of {pools} usage rows agree with their count");
    let sites_per_s = sites as f64 / pass_s;
    Ok(Report {
        sites,
        pools,
        statuses_written: counts.statuses_written,
        pass_s,
        sites_per_s,
        yardstick_tps: tps,
        ratio: sites_per_s / tps,
    })
}

/// The pools' organizations (Basic by an operator grant), their workspaces and sites, parked in
/// the console and active on the farm.
async fn seed(s: &ScratchDb, farm: &Farm, pools: i64) -> anyhow::Result<()> {
    let community =
        super::id_of(&s.admin, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Community").await?;
    let basic = super::id_of(&s.admin, "SELECT product_id FROM core.products WHERE name = $1", "Basic").await?;
    super::carrying_organizations(&s.admin, pools, community, basic).await?;
    super::bench_sites(&s.admin, farm, SITES_PER_POOL, crate::states::SiteStatus::Active).await
}
