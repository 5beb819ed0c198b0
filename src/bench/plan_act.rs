//! `bench plan-act --orgs N`: N organizations of one type on its default's floor; a default
//! change with migrate, drained to the end; T0's hold, the moves per second, the yardstick.
//!
//! T0 must not grow with N. It is milliseconds, so one run measures it against a reference type
//! of 1000 organizations in the same database: after warm-up changes (a connection's first
//! statements are prepared on first use), the two types' T0s alternate, the defaults going back
//! and forth, and each type's median is reported with their ratio. Only the big type's last act,
//! which takes the floors' ladder away, is drained.

use std::time::Instant;

use serde::Serialize;

use super::{floored_organizations, id_of, yardstick};
use crate::{
    config::Config,
    demo,
    ids::{LadderId, OrgTypeId, PlanActId},
    scratch::ScratchDb,
    services::plan_acts::{self as pa, Disposition},
};

/// Odd, so the last change takes the default off the ladder the floors were built on.
const T0_SAMPLES: usize = 101;
/// Even, so the defaults are back where they started.
const T0_WARMUPS: usize = 4;
/// The reference type's organizations: T0 at N is compared with T0 at this.
const REFERENCE_ORGS: i64 = 1000;

pub struct Options {
    pub orgs: i64,
    pub concurrency: i64,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub orgs: i64,
    pub concurrency: i64,
    /// The median of the samples at N organizations.
    pub t0_s: f64,
    pub t0_samples_s: Vec<f64>,
    /// The same at the reference type's 1000 organizations, measured alternately in this run.
    pub t0_1000_s: f64,
    /// t0_s / t0_1000_s: the goal is at most 1.1.
    pub t0_ratio: f64,
    /// From the drain's start to its first settled move: the listing, roughly.
    pub listing_s: f64,
    pub drain_s: f64,
    pub moves: u64,
    pub moves_per_s: f64,
    pub yardstick_tps: f64,
    pub ratio: f64,
    /// The yardstick with `synchronous_commit = off`, as a move commits.
    pub yardstick_async_tps: f64,
    pub ratio_async: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    // The drain's own parallelism, the listing and the last probe, or the yardstick's clients.
    let connections = o.concurrency.max(pa::MOVE_PARALLELISM) as u32 + 4;
    super::in_scratch(config, connections, o.keep, async |s| measure(s, o).await).await
}

async fn measure(s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    demo::load(&s.db).await?;
    let wiki = id_of(&s.admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Wiki hosting").await?;
    let support = id_of(&s.admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Support").await?;
    // Types of their own, so the demo's organizations are not among the N.
    let mut types = vec![];
    for (name, n) in [("Bench type", o.orgs), ("Bench reference type", REFERENCE_ORGS)] {
        let ty: i64 = sqlx::query_scalar(
            "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ($1, $2) RETURNING org_type_id",
        )
        .bind(name)
        .bind(wiki)
        .fetch_one(&s.admin)
        .await?;
        let t = Instant::now();
        floored_organizations(&s.admin, n, ty, wiki).await?;
        eprintln!("bench: {n} organizations of {name} on the Wiki hosting floor in {:.1} s", t.elapsed().as_secs_f64());
        types.push(ty);
    }
    let (ty, reference) = (types[0], types[1]);

    // Wiki→Support, Support→Wiki, ..., Wiki→Support, the two types alternating. Each T0 enqueues
    // a drain job that no worker runs here; each later act takes the type's default over.
    let (mut samples, mut reference_samples) = (vec![], vec![]);
    let mut act = PlanActId(0);
    for i in 0..T0_WARMUPS + T0_SAMPLES {
        let target = if i % 2 == 0 { support } else { wiki };
        for (t, out) in [(ty, &mut samples), (reference, &mut reference_samples)] {
            let started = Instant::now();
            let a = pa::change_org_type_default(
                &s.db,
                OrgTypeId(t),
                LadderId(target),
                Some(Disposition::Migrate),
                None,
                "bench",
                None,
            )
            .await?;
            if i >= T0_WARMUPS {
                out.push(started.elapsed().as_secs_f64());
            }
            if t == ty {
                act = a;
            }
        }
    }
    let (t0_s, t0_1000_s) = (median(&samples), median(&reference_samples));
    let ms = |v: &[f64]| v.iter().map(|x| (x * 1e5).round() / 1e2).collect::<Vec<_>>();
    eprintln!(
        "bench: T0 (exclusive hold) median {:.2} ms at {} organizations, {:.2} ms at {REFERENCE_ORGS}: {:?} / {:?} ms",
        t0_s * 1e3,
        o.orgs,
        t0_1000_s * 1e3,
        ms(&samples),
        ms(&reference_samples)
    );

    // The server's clock, as the obligations' settled_at is.
    let started_at: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8").fetch_one(&s.admin).await?;
    let t = Instant::now();
    let d = pa::drain_plan_act(&s.db, act, None).await?;
    let drain_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(d.finished && d.failed == 0, "the drain did not move every organization: {d:?}");
    let moves_per_s = d.moved as f64 / drain_s;
    let first_move: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(settled_at))::float8 FROM core.plan_act_obligations WHERE plan_act_id = $1",
    )
    .bind(act)
    .fetch_one(&s.admin)
    .await?;
    let listing_s = first_move.map_or(0.0, |f| (f - started_at).max(0.0));
    eprintln!(
        "bench: drained act #{act}: {} listed, {} moved in {drain_s:.2} s (listing ~{listing_s:.2} s): {moves_per_s:.0} moves/s",
        d.listed, d.moved
    );
    let t = Instant::now();
    check(s, o.orgs, ty, act.0, wiki, support).await?;
    eprintln!(
        "bench: checked in {:.1} s: the act is done, every organization migrated, entitlements fresh, floors on Support",
        t.elapsed().as_secs_f64()
    );

    yardstick::prepare(&s.admin, o.concurrency).await?;
    let tps = yardstick::run(&s.db.pool, o.concurrency, o.yardstick_seconds).await?;
    eprintln!("bench: yardstick (TPC-B through sqlx, {} clients): {tps:.0} tps", o.concurrency);
    let async_tps = yardstick::run_async_commit(&s.db.pool, o.concurrency, o.yardstick_seconds).await?;
    eprintln!("bench: yardstick with synchronous_commit = off: {async_tps:.0} tps");
    Ok(Report {
        orgs: o.orgs,
        concurrency: o.concurrency,
        t0_s,
        t0_samples_s: samples,
        t0_1000_s,
        t0_ratio: t0_s / t0_1000_s,
        listing_s,
        drain_s,
        moves: d.moved,
        moves_per_s,
        yardstick_tps: tps,
        ratio: moves_per_s / tps,
        yardstick_async_tps: async_tps,
        ratio_async: moves_per_s / async_tps,
    })
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What a finished migrate must have left: the act done, every organization migrated, every
/// pool's entitlements a fresh computation, each organization on Support's floor and off Wiki's.
async fn check(s: &ScratchDb, orgs: i64, ty: i64, act: i64, wiki: i64, support: i64) -> anyhow::Result<()> {
    let state: String = sqlx::query_scalar("SELECT state FROM core.plan_acts WHERE plan_act_id = $1")
        .bind(act)
        .fetch_one(&s.admin)
        .await?;
    anyhow::ensure!(state == "done", "act #{act} is {state}, not done");
    let (all, migrated): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'migrated') FROM core.plan_act_obligations WHERE plan_act_id = $1",
    )
    .bind(act)
    .fetch_one(&s.admin)
    .await?;
    anyhow::ensure!(
        all == orgs && migrated == orgs,
        "act #{act} has {all} obligations, {migrated} migrated; expected {orgs} migrated"
    );
    let stale: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM core.organizations o JOIN core.resource_pools p USING (organization_id)
         WHERE o.org_type_id = $1 AND EXISTS (
             (SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id)
             UNION ALL
             (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements e WHERE e.pool_id = p.pool_id
              EXCEPT SELECT resource_key, numeric_value, flag_value FROM core.compute_entitlements(p.pool_id)))",
    )
    .bind(ty)
    .fetch_one(&s.admin)
    .await?;
    anyhow::ensure!(stale == 0, "{stale} pools' entitlements differ from a fresh computation");
    // A floor held: an active floor grant with a holding conferral, positioned on the ladder.
    let (off_support, on_wiki): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE NOT EXISTS (
                    SELECT 1 FROM core.positions ps
                    JOIN core.conferrals c ON c.conferral_id = ps.conferral_id AND c.state = 'holding'
                    JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor' AND g.status = 'active'
                    JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = $3 AND t.rank = 0 AND t.product_id = g.product_id
                    WHERE ps.pool_id = p.pool_id AND ps.plan_ladder_id = $3 AND ps.rank = 0)),
                count(*) FILTER (WHERE EXISTS (
                    SELECT 1 FROM core.grants g
                    JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = $2 AND t.product_id = g.product_id
                    LEFT JOIN core.conferrals c ON c.grant_id = g.grant_id AND c.state = 'holding'
                    WHERE g.organization_id = o.organization_id AND g.kind = 'floor'
                      AND (g.status = 'active' OR c.conferral_id IS NOT NULL)))
         FROM core.organizations o JOIN core.resource_pools p ON p.organization_id = o.organization_id AND p.is_default
         WHERE o.org_type_id = $1",
    )
    .bind(ty)
    .bind(wiki)
    .bind(support)
    .fetch_one(&s.admin)
    .await?;
    anyhow::ensure!(
        off_support == 0 && on_wiki == 0,
        "{off_support} organizations lack the Support floor; {on_wiki} still hold a Wiki hosting floor"
    );
    Ok(())
}
