//! `bench slots --pools N`: the slot gate at load. N organizations holding Basic (3 active
//! sites) each have four parked sites on the local farm (its API only, in memory, so it answers
//! at once and the figure is the console's). An activation is recorded for every site
//! (RecordLifecycleRequest, untimed); then 32 tasks run the activations' gates
//! (HoldSiteSlotActivity) in a shuffled order, so up to 32 gates meet on the pools' usage rows:
//! three of each pool's four hold a slot and the fourth is refused at the limit. `gates_per_s`
//! is that phase's rate; the yardstick is TPC-B through sqlx at the same concurrency, in the same
//! run; `ratio` = gates_per_s / yardstick_tps (the goal is at least 0.4). Then the rest of each
//! request (the farm call and the record step, as its job runs them) is timed on its own
//! (`records_per_s`), and the run checks the outcome: every pool 3 of 3 active, its usage row 3,
//! no hold left.

use std::{sync::Arc, time::Instant};

use anyhow::Context;
use serde::Serialize;

use super::yardstick;
use crate::{
    config::{Config, FarmSettings},
    demo,
    ids::{AccountId, RequestId},
    integrations::farm::Farm,
    scratch::ScratchDb,
    services::fedwiki::{
        self,
        gate::{Gate, hold_site_slot},
    },
    states::RequestKind,
    store::fedwiki as store,
};

pub const CONCURRENCY: usize = 32;
const SITES_PER_POOL: i64 = 4;
const LIMIT: i64 = 3;

pub struct Options {
    pub pools: i64,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub pools: i64,
    pub concurrency: usize,
    /// Gates run: one activation per site.
    pub gates: usize,
    pub gates_per_s: f64,
    /// Of the gates, the ones that held a slot, and the ones refused at the limit.
    pub held: u64,
    pub refused_at_limit: u64,
    /// The rest of every request (the farm call and the record step) per second.
    pub records_per_s: f64,
    pub yardstick_tps: f64,
    /// gates_per_s / yardstick_tps.
    pub ratio: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(o.pools >= 1, "--pools must be at least 1");
    super::in_scratch(config, 48, o.keep, async |s| measure(s, o).await).await
}

async fn measure(s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    demo::load(&s.db).await?;
    let api = super::ApiFarm::start("bench", super::FARM_TIMEOUT).await?;
    let farm = api.farm.clone();
    let member = seed(s, &farm, o.pools).await?;
    let requests = record_activations(s, member).await?;
    eprintln!("bench: {} pools, {} activations recorded", o.pools, requests.len());
    yardstick::prepare(&s.admin, CONCURRENCY as i64).await?;
    let tps = yardstick::run(&s.db.pool, CONCURRENCY as i64, o.yardstick_seconds).await?;

    // The gates, from 32 tasks taking the shuffled requests in turn.
    let queue = Arc::new(std::sync::Mutex::new(requests.clone()));
    let started = Instant::now();
    let gates = in_parallel(&queue, s, |db, req| async move {
        Ok(match hold_site_slot(&db, &req).await.map_err(|e| anyhow::anyhow!("{e}"))? {
            Gate::Held => (1, 0),
            Gate::Full { .. } => (0, 1),
            other => anyhow::bail!("a gate of request {} answered {other:?}", req.request_id),
        })
    })
    .await?;
    let gate_s = started.elapsed().as_secs_f64();

    // The rest of every request, as its job runs it.
    *queue.lock().unwrap_or_else(|p| p.into_inner()) = requests.clone();
    let started = Instant::now();
    let f = farm.clone();
    in_parallel(&queue, s, move |db, req| {
        let f = f.clone();
        async move {
            fedwiki::run_site_request(&db, &f, req.request_id, true).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok((0, 0))
        }
    })
    .await?;
    let record_s = started.elapsed().as_secs_f64();
    api.stop().await;
    check_outcome(s, o.pools).await?;
    let gates_per_s = requests.len() as f64 / gate_s;
    Ok(Report {
        pools: o.pools,
        concurrency: CONCURRENCY,
        gates: requests.len(),
        gates_per_s,
        held: gates.0,
        refused_at_limit: gates.1,
        records_per_s: requests.len() as f64 / record_s,
        yardstick_tps: tps,
        ratio: gates_per_s / tps,
    })
}

/// Run `work` on every request of `queue` from `CONCURRENCY` tasks; the sums of what it counted.
async fn in_parallel<F, Fut>(
    queue: &Arc<std::sync::Mutex<Vec<store::RequestRow>>>,
    s: &ScratchDb,
    work: F,
) -> anyhow::Result<(u64, u64)>
where
    F: Fn(crate::db::Db, store::RequestRow) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<(u64, u64)>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (queue, db, work) = (queue.clone(), s.db.clone(), work.clone());
        tasks.spawn(async move {
            let mut counted = (0, 0);
            loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some(req) = next else { break };
                let (a, b) = work(db.clone(), req).await?;
                counted = (counted.0 + a, counted.1 + b);
            }
            Ok::<_, anyhow::Error>(counted)
        });
    }
    let mut total = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (a, b) = done??;
        total = (total.0 + a, total.1 + b);
    }
    Ok(total)
}

/// An activation recorded for every site, through the intake the handler uses, shuffled so
/// that the gates of one pool meet.
async fn record_activations(s: &ScratchDb, member: AccountId) -> anyhow::Result<Vec<store::RequestRow>> {
    let settings = FarmSettings::default();
    let sites: Vec<crate::ids::SiteId> =
        sqlx::query_scalar("SELECT site_id FROM fedwiki.sites ORDER BY random()").fetch_all(&s.admin).await?;
    let mut out = Vec::with_capacity(sites.len());
    for site in sites {
        let id: RequestId = fedwiki::change_status(&s.db, &settings, member, &site, RequestKind::Activate)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut read = s.db.read().await?;
        out.push(store::request(read.conn(), id).await?.context("the request just recorded")?);
    }
    // The jobs the intake enqueued are this run's to do, not a worker's.
    sqlx::query("DELETE FROM integration.jobs WHERE kind = 'fedwiki_request'").execute(&s.admin).await?;
    Ok(out)
}

/// Every pool ends 3 of 3 active, its usage row 3, no hold left.
async fn check_outcome(s: &ScratchDb, pools: i64) -> anyhow::Result<()> {
    let (active, usage_ok, holds): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM fedwiki.sites WHERE status = 'active'),
                (SELECT count(*) FROM core.numeric_entitlement_usage u
                  WHERE u.resource_key = 'fedwiki.active_sites' AND u.used = 3 AND u.used = fedwiki.count_slots(u.pool_id)),
                (SELECT count(*) FROM fedwiki.slot_holds)",
    )
    .fetch_one(&s.admin)
    .await?;
    anyhow::ensure!(active == pools * LIMIT, "{active} sites active, not {}", pools * LIMIT);
    anyhow::ensure!(usage_ok == pools, "{usage_ok} of {pools} usage rows count 3 active sites");
    anyhow::ensure!(holds == 0, "{holds} holds left");
    Ok(())
}

/// The pools' organizations (Basic by an operator grant), the demo member a member of each,
/// their workspaces, and four parked sites each, in the console and on the farm.
async fn seed(s: &ScratchDb, farm: &Farm, pools: i64) -> anyhow::Result<AccountId> {
    let community =
        super::id_of(&s.admin, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Community").await?;
    let basic = super::id_of(&s.admin, "SELECT product_id FROM core.products WHERE name = $1", "Basic").await?;
    super::carrying_organizations(&s.admin, pools, community, basic).await?;
    let member: i64 = sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = $1")
        .bind(demo::MEMBER_EMAIL)
        .fetch_one(&s.admin)
        .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO core.organization_members (organization_id, account_id, role)
         SELECT organization_id, {member}, 'member' FROM core.organizations WHERE name LIKE 'Bench %';"
    )))
    .execute(&s.admin)
    .await?;
    super::bench_sites(&s.admin, farm, SITES_PER_POOL, crate::states::SiteStatus::Parked).await?;
    Ok(AccountId(member))
}
