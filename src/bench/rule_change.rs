//! `bench rule-change --pools N`: N pools carrying one set; a rule change above the sync cap,
//! committed and drained; the exclusive hold, the settled pools per second, the yardstick.

use std::{collections::BTreeMap, time::Instant};

use serde::Serialize;

use super::{carrying_organizations, id_of, yardstick};
use crate::{config::Config, demo, ids::EntitlementSetId, scratch::ScratchDb, services::rule_changes as rc};

pub struct Options {
    pub pools: i64,
    pub concurrency: i64,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub n: i64,
    pub concurrency: i64,
    pub hold_s: f64,
    pub drain_s: f64,
    pub settled_per_s: f64,
    pub yardstick_tps: f64,
    pub ratio: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    super::in_scratch(config, o.concurrency as u32 + 4, o.keep, async |s| measure(s, o).await).await
}

async fn measure(s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    demo::load(&s.db).await?;
    let ty = id_of(&s.admin, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Community").await?;
    let basic = id_of(&s.admin, "SELECT product_id FROM core.products WHERE name = $1", "Basic").await?;
    let set = id_of(&s.admin, "SELECT entitlement_set_id FROM core.entitlement_sets WHERE name = $1", "Basic").await?;
    let t = Instant::now();
    carrying_organizations(&s.admin, o.pools, ty, basic).await?;
    eprintln!("bench: {} carrying pools built in {:.1} s", o.pools, t.elapsed().as_secs_f64());

    let rules = [("fedwiki.active_sites", "5"), ("support.priority", "yes")]
        .iter()
        .map(|(k, v)| Ok((crate::ids::ResourceKey::from(*k), crate::services::catalog::RuleEntry::parse(v)?)))
        .collect::<Result<BTreeMap<_, _>, String>>()
        .map_err(anyhow::Error::msg)?;
    // Sync cap 0: every pool goes through the drain.
    let c = rc::commit_rule_change_batch(&s.db, EntitlementSetId(set), &rules, None, &"bench".into(), 0).await?;
    eprintln!(
        "bench: committed change #{} owing {} pools; exclusive hold {:.3} s",
        c.change_id,
        c.pools_owed,
        c.hold.as_secs_f64()
    );
    let t = Instant::now();
    let d = rc::drain_change(&s.db, c.change_id, o.concurrency).await?;
    let drain_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(d.finished && d.failed == 0, "the drain did not settle every pool: {d:?}");
    let settled_per_s = d.settled as f64 / drain_s;
    eprintln!("bench: drained {} pools in {drain_s:.2} s: {settled_per_s:.0} pools/s", d.settled);

    yardstick::prepare(&s.admin, o.concurrency).await?;
    let tps = yardstick::run(&s.db.pool, o.concurrency, o.yardstick_seconds).await?;
    eprintln!("bench: yardstick (TPC-B through sqlx, {} clients): {tps:.0} tps", o.concurrency);
    Ok(Report {
        n: o.pools,
        concurrency: o.concurrency,
        hold_s: c.hold.as_secs_f64(),
        drain_s,
        settled_per_s,
        yardstick_tps: tps,
        ratio: settled_per_s / tps,
    })
}
