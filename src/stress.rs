//! `member-console stress`: the standing reliability tool. It makes a fresh database, fills it
//! with the demo catalog and many organizations, runs the documented paths at random from many
//! connections at once against a few shared pools for a bounded time, counts what each path did
//! or refused, and then checks the entitlement invariants. A deadlock, an unexpected error or a
//! violated invariant is a bug: the run says so, shows what led to it, and exits non-zero.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool, postgres::PgPoolOptions};
use tracing::instrument::WithSubscriber;

use crate::{
    config::{Config, random_hex},
    db::{Db, DbError, TxKind, begin, migrate},
    demo,
    jobs::{self, Backoff, Worker, WorkerOptions},
    scratch::ScratchDb,
    services::{
        auth::{self, AuthError, Email},
        catalog::{self as catalog_svc, CatalogError},
        entitlements::{self as ent, EntitlementError},
        grants::{self, EmailDomain, GrantError, IssueGrant, ManageGrant, Recipient},
        organizations::{self as org_svc, OrgName},
        plan_acts::{self as pa, Disposition, ReorderTiers},
        rule_changes::{self as rc, RuleChangeError},
        topology::{self, AddTier, RemoveTier, TopologyError},
    },
    store::{
        catalog as catalog_store,
        entitlements::{self as ent_store, NewGrant},
        plan_acts as pa_store,
    },
};

pub const DEFAULT_ORGS: usize = 200;
pub const DEFAULT_CONNECTIONS: usize = 8;
/// How many organizations the tasks share: few, so that they meet on the same pool rows.
const HOT_ORGS: usize = 6;
/// Subscriptions (one item each) among the shared organizations, for suspension to act on.
const SUBSCRIPTIONS: usize = 4;
/// Errors and deadlocks printed as they happen; the rest are only counted.
const PRINTED_ERRORS: usize = 10;
/// Violations and sequences printed after the check.
const PRINTED_VIOLATIONS: usize = 20;
const PRINTED_SEQUENCES: usize = 3;
/// Acts kept for showing the sequence behind a deadlock or a violation.
const MAX_EVENTS: usize = 500_000;
/// The job workers that run inside the run (expiry, start, sweep), each running this many jobs at
/// once and looking for due jobs at least this often.
const JOB_WORKERS: usize = 2;
const JOB_CONCURRENCY: usize = 2;
const JOB_POLL: Duration = Duration::from_millis(200);
/// How far ahead a grant's start or end is set: a start a few hundred ms ahead (so that starting
/// has work), an end 0.5-3 s ahead (so that expiry has work).
const START_AHEAD_MS: (u64, u64) = (200, 700);
const END_AHEAD_MS: (u64, u64) = (500, 3000);
/// The expiry and start paths act on grants due within this (sleeping until they are due).
const DUE_WITHIN_MS: u64 = 400;
/// After the tasks, how long the drains get to settle every rule change (the workers run them;
/// the run enqueues what is due as the poller would, without waiting for its 30 s schedule). A
/// change still draining after it is a violation. Long enough for a failed pool's backoff (2 s,
/// 4 s, 8 s) to come round a few times.
const DRAIN_WAIT: Duration = Duration::from_secs(30);
/// The error the Retry path records against a pool before retrying, as the drain records a
/// pool's settlement that rolled back (nothing fails on its own in a healthy run).
const SIMULATED_FAILURE: &str = "stress: a simulated failure of this pool's settlement";
/// The error a move of a fragile pool raises on its first attempt (a trigger of the stress
/// database, see `make_moves_fragile`): the drain records it (`Record a failed move`) and
/// RetryPlanAct (the tasks', or the settle's as an operator's) makes the move pending again.
const MOVE_FAILURE: &str = "stress: a simulated failure of the move of this organization";
/// How many organizations of the stress type have fragile moves: one shared, one not.
const FRAGILE_POOLS: usize = 2;
/// The bound a plan act's request gives its in-request listing and moves: 1-2 s, so that they
/// run for part of it and the drain job finishes the rest.
const IN_REQUEST_MS: (u64, u64) = (1000, 2000);

/// What `member-console stress` was asked for.
#[derive(Debug, Clone)]
pub struct StressOptions {
    pub seconds: u64,
    pub orgs: usize,
    pub connections: usize,
    /// The seed of the tasks' choices; random when not given (the run prints it).
    pub seed: Option<u64>,
    /// Leave the database in place for inspection.
    pub keep: bool,
}

impl StressOptions {
    pub fn new(seconds: u64) -> StressOptions {
        StressOptions { seconds, orgs: DEFAULT_ORGS, connections: DEFAULT_CONNECTIONS, seed: None, keep: false }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PathCount {
    pub done: u64,
    pub refused: u64,
}

/// The outcome of a run; serializes to the one JSON line the command prints.
#[derive(Debug, Clone, Serialize)]
pub struct StressReport {
    pub seconds: u64,
    pub orgs: usize,
    pub connections: usize,
    pub paths: BTreeMap<String, PathCount>,
    pub deadlocks: u64,
    pub errors: u64,
    pub violations: u64,
    #[serde(skip)]
    pub seed: u64,
    #[serde(skip)]
    pub database: String,
    /// The first deadlocks and errors, as printed.
    #[serde(skip)]
    pub first_errors: Vec<String>,
    /// The first violated invariants, as printed.
    #[serde(skip)]
    pub first_violations: Vec<String>,
}

impl StressReport {
    pub fn is_clean(&self) -> bool {
        self.deadlocks == 0 && self.errors == 0 && self.violations == 0
    }

    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

/// The command: run, print the JSON line on stdout, and say whether the run was clean.
pub async fn command(opts: StressOptions) -> anyhow::Result<bool> {
    let config = Config::from_env()?;
    eprintln!("member-console configuration:\n{config}");
    let report = run(&config, opts).await?;
    println!("{}", report.json_line());
    Ok(report.is_clean())
}

// Paths -------------------------------------------------------------------------------------------

/// The paths the tasks run, each named as its `PathLocks` declaration names it (the two
/// conferral changes that have no declaration of their own by their function names, and a
/// plan act's drain, whose parts are declared, by its span's name), the grant jobs the workers
/// run (by their activity names; counted from `integration.jobs`), and the parts of the plan
/// acts' drains, wherever they ran (by their declarations' names; counted from the obligations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StressPath {
    CreateOrganization,
    ConferGrant,
    EndConferral,
    MaterializePool,
    RegisterProviders,
    UpdateProduct,
    ChangeProductSet,
    RuleChangeBatchCommit,
    DrainChange,
    RetryRuleChange,
    SyncSourceStatus,
    UpdateConferralBounds,
    IssueGrant,
    RevokeGrant,
    ExpireGrant,
    StartWaitingGrant,
    ManageGrant,
    ExtendWaitingGrant,
    /// `expire_grant` jobs done by the workers.
    ExpireGrantActivity,
    /// `start_grant` jobs done by the workers.
    StartGrantActivity,
    AddTier,
    DeleteTier,
    RemoveTier,
    /// T0, then the listing and moves inside the request for 1-2 s (the drain job does the rest).
    ChangeOrgTypeDefault,
    /// T0, then, when rank 0 changed, the listing and moves as for a default change.
    ReorderTiers,
    /// `drain_plan_act` on a running act, beside its drain job: its parts are counted apart.
    DrainPlanAct,
    RetryPlanAct,
    ReorderPlanLadders,
    /// The parts of every plan act's drain (in a request, the job's, a task's, the settle's),
    /// counted from what they left in the database: the listings (one per act and type reached),
    /// the moves settled, the failures recorded, and the acts finished after their last probe.
    ListPlanActBatch,
    EnactObligation,
    RecordMoveFailure,
    LastProbe,
    /// A sign-in with the demo member's email, the right or a wrong password, from one of a few
    /// addresses: the reservation's rows, which no other path takes.
    SignIn,
    /// The organization counts' compaction, beside the inserts' appends.
    CompactCounts,
}

impl StressPath {
    pub const ALL: [StressPath; 34] = [
        StressPath::CreateOrganization,
        StressPath::ConferGrant,
        StressPath::EndConferral,
        StressPath::MaterializePool,
        StressPath::RegisterProviders,
        StressPath::UpdateProduct,
        StressPath::ChangeProductSet,
        StressPath::RuleChangeBatchCommit,
        StressPath::DrainChange,
        StressPath::RetryRuleChange,
        StressPath::SyncSourceStatus,
        StressPath::UpdateConferralBounds,
        StressPath::IssueGrant,
        StressPath::RevokeGrant,
        StressPath::ExpireGrant,
        StressPath::StartWaitingGrant,
        StressPath::ManageGrant,
        StressPath::ExtendWaitingGrant,
        StressPath::ExpireGrantActivity,
        StressPath::StartGrantActivity,
        StressPath::AddTier,
        StressPath::DeleteTier,
        StressPath::RemoveTier,
        StressPath::ChangeOrgTypeDefault,
        StressPath::ReorderTiers,
        StressPath::DrainPlanAct,
        StressPath::RetryPlanAct,
        StressPath::ReorderPlanLadders,
        StressPath::ListPlanActBatch,
        StressPath::EnactObligation,
        StressPath::RecordMoveFailure,
        StressPath::LastProbe,
        StressPath::SignIn,
        StressPath::CompactCounts,
    ];

    /// The grant paths (the tasks' and the workers').
    pub const GRANT_PATHS: [StressPath; 8] = [
        StressPath::IssueGrant,
        StressPath::RevokeGrant,
        StressPath::ExpireGrant,
        StressPath::StartWaitingGrant,
        StressPath::ManageGrant,
        StressPath::ExtendWaitingGrant,
        StressPath::ExpireGrantActivity,
        StressPath::StartGrantActivity,
    ];

    /// The plan-act paths (the tasks' and the parts of the drains).
    pub const PLAN_ACT_PATHS: [StressPath; 12] = [
        StressPath::AddTier,
        StressPath::DeleteTier,
        StressPath::RemoveTier,
        StressPath::ChangeOrgTypeDefault,
        StressPath::ReorderTiers,
        StressPath::DrainPlanAct,
        StressPath::RetryPlanAct,
        StressPath::ReorderPlanLadders,
        StressPath::ListPlanActBatch,
        StressPath::EnactObligation,
        StressPath::RecordMoveFailure,
        StressPath::LastProbe,
    ];

    /// Run by the job workers, not picked by the tasks.
    pub fn is_job(self) -> bool {
        matches!(self, StressPath::ExpireGrantActivity | StressPath::StartGrantActivity)
    }

    /// A part of the plan acts' drains, counted from the database after the run, not picked.
    pub fn is_drain_part(self) -> bool {
        matches!(
            self,
            StressPath::ListPlanActBatch
                | StressPath::EnactObligation
                | StressPath::RecordMoveFailure
                | StressPath::LastProbe
        )
    }

    /// Picked by the tasks (the rest are counted from what the workers and the drains did).
    pub fn is_picked(self) -> bool {
        !self.is_job() && !self.is_drain_part()
    }

    pub fn name(self) -> &'static str {
        match self {
            StressPath::CreateOrganization => org_svc::CREATE_ORGANIZATION_LOCKS.path,
            StressPath::ConferGrant => ent::CONFER_GRANT_LOCKS.path,
            StressPath::EndConferral => ent::END_CONFERRAL_LOCKS.path,
            StressPath::MaterializePool => ent::MATERIALIZE_POOL_LOCKS.path,
            StressPath::RegisterProviders => ent::REGISTER_PROVIDERS_LOCKS.path,
            StressPath::UpdateProduct => catalog_svc::UPDATE_PRODUCT_LOCKS.path,
            StressPath::ChangeProductSet => catalog_svc::CHANGE_PRODUCT_SET_LOCKS.path,
            StressPath::RuleChangeBatchCommit => rc::RULE_CHANGE_COMMIT_LOCKS.path,
            StressPath::DrainChange => rc::DRAIN_CHANGE_LOCKS.path,
            StressPath::RetryRuleChange => rc::RETRY_RULE_CHANGE_LOCKS.path,
            StressPath::SyncSourceStatus => "sync_source_status",
            StressPath::UpdateConferralBounds => "update_conferral_bounds",
            StressPath::IssueGrant => grants::ISSUE_GRANT_LOCKS.path,
            StressPath::RevokeGrant => grants::REVOKE_GRANT_LOCKS.path,
            StressPath::ExpireGrant => grants::EXPIRE_GRANT_LOCKS.path,
            StressPath::StartWaitingGrant => grants::START_GRANT_LOCKS.path,
            StressPath::ManageGrant => grants::MANAGE_GRANT_LOCKS.path,
            StressPath::ExtendWaitingGrant => grants::EXTEND_WAITING_GRANT_LOCKS.path,
            StressPath::ExpireGrantActivity => "ExpireGrantActivity",
            StressPath::StartGrantActivity => "StartGrantActivity",
            StressPath::AddTier => topology::ADD_TIER_LOCKS.path,
            StressPath::DeleteTier => topology::DELETE_TIER_LOCKS.path,
            StressPath::RemoveTier => topology::REMOVE_TIER_LOCKS.path,
            StressPath::ChangeOrgTypeDefault => pa::CHANGE_DEFAULT_T0_LOCKS.path,
            StressPath::ReorderTiers => pa::REORDER_TIERS_T0_LOCKS.path,
            // The service's span: it runs the four parts below, each declared.
            StressPath::DrainPlanAct => "DrainPlanAct",
            StressPath::RetryPlanAct => pa::RETRY_PLAN_ACT_LOCKS.path,
            StressPath::ReorderPlanLadders => topology::REORDER_PLAN_LADDERS_LOCKS.path,
            StressPath::ListPlanActBatch => pa::LIST_BATCH_LOCKS.path,
            StressPath::EnactObligation => pa::ENACT_OBLIGATION_LOCKS.path,
            StressPath::RecordMoveFailure => pa::RECORD_MOVE_FAILURE_LOCKS.path,
            StressPath::LastProbe => pa::LAST_PROBE_LOCKS.path,
            StressPath::SignIn => auth::SIGN_IN_LOCKS.path,
            StressPath::CompactCounts => org_svc::COMPACT_COUNTS_LOCKS.path,
        }
    }

    /// Relative frequency: the pool-changing paths most (they are where the collisions are), the
    /// exclusive-rendezvous paths least (each one stops every materialization while it runs).
    /// The grant paths about as often as the conferral changes; the jobs are not picked. The
    /// earlier paths' weights are 4× their relative frequencies, so that the tier acts (weight 1)
    /// come a quarter as often as a rule change: each takes the exclusive rendezvous, and a
    /// default change or a reorder keeps its task 1-2 s in its in-request drain.
    fn weight(self) -> u64 {
        const X: u64 = 4;
        match self {
            StressPath::ConferGrant | StressPath::IssueGrant => 6 * X,
            StressPath::EndConferral => 5 * X,
            StressPath::UpdateConferralBounds | StressPath::SyncSourceStatus | StressPath::MaterializePool => 3 * X,
            StressPath::CreateOrganization | StressPath::UpdateProduct | StressPath::RegisterProviders => 2 * X,
            StressPath::RevokeGrant
            | StressPath::ExpireGrant
            | StressPath::StartWaitingGrant
            | StressPath::ManageGrant
            | StressPath::ExtendWaitingGrant => 2 * X,
            // A drain or a retry finds no draining change more often than not (then it does
            // nothing and is not counted), so they are picked more often, to meet the jobs' drains.
            StressPath::DrainChange => 3 * X,
            StressPath::RetryRuleChange => 2 * X,
            StressPath::ChangeProductSet | StressPath::RuleChangeBatchCommit => X,
            // An add is refused more often than not (a holder of the product holds a plan on the
            // ladder already): twice as often as a delete or a removal, so the ladder keeps tiers.
            StressPath::AddTier => 2,
            StressPath::DeleteTier
            | StressPath::RemoveTier
            | StressPath::ChangeOrgTypeDefault
            | StressPath::ReorderTiers => 1,
            // Not plan acts under the exclusive rendezvous; a drain and a retry find nothing to
            // do while no act runs (then skipped or refused), so they come more often.
            StressPath::ReorderPlanLadders | StressPath::DrainPlanAct | StressPath::RetryPlanAct => 2,
            // Disjoint from the rest (their own rows), and a sign-in's hashing costs CPU: seldom.
            StressPath::SignIn | StressPath::CompactCounts => 2,
            StressPath::ExpireGrantActivity
            | StressPath::StartGrantActivity
            | StressPath::ListPlanActBatch
            | StressPath::EnactObligation
            | StressPath::RecordMoveFailure
            | StressPath::LastProbe => 0,
        }
    }
}

/// A small deterministic generator (xorshift64), so a task's choices follow from the seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed: neighbouring seeds give unrelated streams, and never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Every picked path once, in a random order, so that a short run tries the rare ones too (a
/// tier act is picked about once in 200): the ones that act on what a plan act left (a running
/// act to drain, a failed move to retry) last, after the round's default change and reorder.
pub fn opening_round(rng: &mut Rng) -> Vec<StressPath> {
    let mut paths: Vec<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
    for i in (1..paths.len()).rev() {
        paths.swap(i, rng.below(i + 1));
    }
    let after = |p: &StressPath| matches!(p, StressPath::DrainPlanAct | StressPath::RetryPlanAct);
    paths.sort_by_key(after);
    paths
}

/// The path picker: one path at random, by weight.
pub fn pick_path(rng: &mut Rng) -> StressPath {
    let total: u64 = StressPath::ALL.iter().map(|p| p.weight()).sum();
    let mut n = rng.next_u64() % total;
    for p in StressPath::ALL {
        if n < p.weight() {
            return p;
        }
        n -= p.weight();
    }
    unreachable!("the weights add up to total")
}

// The run -----------------------------------------------------------------------------------------

/// Make the database, fill it, run the paths for `opts.seconds`, check the invariants, and drop
/// the database (unless `keep`).
pub async fn run(config: &Config, opts: StressOptions) -> anyhow::Result<StressReport> {
    anyhow::ensure!(opts.orgs >= 1, "--orgs must be at least 1");
    anyhow::ensure!(opts.connections >= 1, "--connections must be at least 1");
    // One connection per task, one spare for the reads a task makes before its path, and room
    // for the tasks of one drain (DrainChange runs up to that many pools at once) and of one
    // plan act's moves (a default change's or a reorder's in-request drain, or DrainPlanAct).
    let connections = opts.connections as u32 + 2 + rc::DEFAULT_DRAIN_PARALLELISM as u32 + pa::MOVE_PARALLELISM as u32;
    let scratch = ScratchDb::create(config, "mc_stress", connections).await?;
    eprintln!("stress: created database {}", scratch.name);
    let result = run_in(config, &opts, &scratch).await;
    if opts.keep {
        scratch.db.pool.close().await;
        scratch.admin.close().await;
        eprintln!("stress: kept database {} ({})", scratch.name, crate::config::mask_url(&scratch.admin_url));
    } else {
        let name = scratch.name.clone();
        // FORCE (in drop_database): a task abandoned past its grace may still hold a connection.
        // Ending them can make the drop a slow statement, whose warning goes to stderr.
        if let Err(e) = scratch.drop_database().with_subscriber(warnings_on_stderr()).await {
            eprintln!("stress: could not drop database {name}: {e}");
        }
    }
    result
}

async fn run_in(config: &Config, opts: &StressOptions, scratch: &ScratchDb) -> anyhow::Result<StressReport> {
    let (admin, admin_url, name) = (scratch.admin.clone(), scratch.admin_url.as_str(), scratch.name.as_str());
    let db = scratch.db.clone();
    ent::register_providers(&db).await?;

    let seed = opts.seed.unwrap_or_else(|| u64::from_str_radix(&random_hex(8), 16).unwrap_or(1));
    eprintln!(
        "stress: seed {seed}; {} organizations, {} connections, {} s, lock_timeout {} ms",
        opts.orgs,
        opts.connections,
        opts.seconds,
        db.lock_timeout.as_millis()
    );
    let mut rng = Rng::new(seed);
    let fixture = build_fixture(&db, &admin, opts.orgs, &mut rng).await?;

    // The workers run the grant jobs (expiry, start), the rule changes' and the plan acts' drains
    // and the schedules (the sweep, the drains' pollers) for the whole run, on a pool of their
    // own, as `serve` runs them beside the web handlers. A drain settles several pools (or moves
    // several organizations) at once: room for every job a worker runs to be one.
    let drain_width = rc::DEFAULT_DRAIN_PARALLELISM.max(pa::MOVE_PARALLELISM) as usize;
    let job_pool = PgPoolOptions::new()
        .max_connections((JOB_WORKERS * (1 + JOB_CONCURRENCY * (1 + drain_width))) as u32)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(migrate::runtime_options(admin_url, &config.runtime_password)?)
        .await
        .context("connecting the job workers")?;
    let mut job_db = Db::new(job_pool);
    job_db.lock_timeout = config.lock_timeout;
    crate::job_registry::register_standard_schedules(&job_db).await?;

    let t0: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&admin).await?;
    let started = Instant::now();
    let ctx = Arc::new(Ctx {
        db: db.clone(),
        admin: admin.clone(),
        fx: fixture,
        sync_cap: config.rule_change_sync_cap,
        holder_cap: config.plan_act_holder_cap,
        quiet: warnings_on_stderr(),
        move_failures_seen: Mutex::new(BTreeSet::new()),
        started,
        t0,
        deadline: started + Duration::from_secs(opts.seconds),
        org_seq: AtomicU64::new(0),
        domain_seq: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
        events: Mutex::new(Vec::new()),
    });
    let workers = start_workers(&job_db, config.lock_timeout);
    run_tasks(&ctx, opts.connections, seed, config.lock_timeout).await;
    settle_plan_acts(&ctx).await;
    settle_drains(&ctx).await;
    stop_workers(&ctx, workers).await;
    sweep(&ctx).await;
    db.pool.close().await;
    job_db.pool.close().await;
    count_jobs(&ctx).await?;
    count_obligation_failures(&ctx).await?;
    count_drain_parts(&ctx).await?;

    let tally = std::mem::take(&mut *ctx.tally.lock().unwrap_or_else(|p| p.into_inner()));
    let events = std::mem::take(&mut *ctx.events.lock().unwrap_or_else(|p| p.into_inner()));
    let mut deadlocks = tally.deadlocks;
    let mut first_errors = tally.messages;
    // A deadlock the server broke is counted in its statistics even if a path swallowed it.
    let server_deadlocks = server_deadlock_count(&admin, name).await?;
    if server_deadlocks > deadlocks {
        let m = format!("the server counted {server_deadlocks} deadlocks in {name}; the paths reported {deadlocks}");
        eprintln!("stress: {m}");
        first_errors.push(m);
        deadlocks = server_deadlocks;
    }
    print_deadlock_sequences(&events);

    let violations = find_violations(&admin).await?;
    print_violations(&violations, &events);

    let report = StressReport {
        seconds: opts.seconds,
        orgs: opts.orgs,
        connections: opts.connections,
        paths: StressPath::ALL
            .iter()
            .map(|p| (p.name().to_string(), tally.paths.get(p).copied().unwrap_or_default()))
            .collect(),
        deadlocks,
        errors: tally.errors,
        violations: violations.len() as u64,
        seed,
        database: name.to_string(),
        first_errors,
        first_violations: violations.iter().take(PRINTED_VIOLATIONS).map(|v| v.message.clone()).collect(),
    };
    eprintln!(
        "stress: {} acts, {} refused, {} deadlocks, {} errors, {} violations",
        report.paths.values().map(|c| c.done).sum::<u64>(),
        report.paths.values().map(|c| c.refused).sum::<u64>(),
        report.deadlocks,
        report.errors,
        report.violations
    );
    Ok(report)
}

/// The tasks, the progress line every 5 s, and the bound: a path still running well past the
/// deadline (its lock waits are bounded, so it should not be) is abandoned and counted.
async fn run_tasks(ctx: &Arc<Ctx>, connections: usize, seed: u64, lock_timeout: Duration) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..connections {
        let ctx = Arc::clone(ctx);
        let rng = Rng::new(seed.wrapping_add(1 + i as u64));
        tasks.spawn(task(ctx, i, rng));
    }
    let progress = {
        let ctx = Arc::clone(ctx);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            tick.tick().await;
            loop {
                tick.tick().await;
                if Instant::now() >= ctx.deadline {
                    break;
                }
                let t = ctx.tally.lock().unwrap_or_else(|p| p.into_inner());
                let done: u64 = t.paths.values().map(|c| c.done).sum();
                let refused: u64 = t.paths.values().map(|c| c.refused).sum();
                eprintln!(
                    "stress: {:>4} s: {done} done, {refused} refused, {} deadlocks, {} errors",
                    ctx.started.elapsed().as_secs(),
                    t.deadlocks,
                    t.errors
                );
            }
        })
    };
    let grace = lock_timeout * 3 + Duration::from_secs(10);
    let bound = tokio::time::sleep_until((ctx.deadline + grace).into());
    tokio::pin!(bound);
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) => ctx.tally_error(format!("a task failed: {e}")),
            },
            _ = &mut bound => {
                let n = tasks.len();
                tasks.abort_all();
                ctx.tally_error(format!("{n} tasks were still running {} s after the deadline", grace.as_secs()));
                break;
            }
        }
    }
    progress.abort();
}

/// The job workers and the signal that stops them.
struct Workers {
    stop: tokio::sync::watch::Sender<bool>,
    handles: Vec<tokio::task::JoinHandle<()>>,
    grace: Duration,
}

/// Start `JOB_WORKERS` workers with the console's own handlers. Their log is kept to warnings
/// (a job done is logged at info, hundreds of times a run).
fn start_workers(db: &Db, lock_timeout: Duration) -> Workers {
    let quiet = warnings_on_stderr();
    let grace = lock_timeout * 2 + Duration::from_secs(2);
    let options = WorkerOptions {
        concurrency: JOB_CONCURRENCY,
        poll_interval: JOB_POLL,
        shutdown_grace: grace,
        backoff: Backoff { base: Duration::from_millis(500), cap: Duration::from_secs(4) },
        ..WorkerOptions::default()
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let handles = (0..JOB_WORKERS)
        .map(|_| {
            let w = Worker::new(db.clone(), quietly(crate::job_registry::standard_handlers(), &quiet), JOB_CONCURRENCY)
                .with_options(options.clone());
            tokio::spawn(w.run(rx.clone()).with_subscriber(quiet.clone()))
        })
        .collect();
    Workers { stop, handles, grace }
}

/// A log of warnings only, on stderr (stdout carries the report's JSON line), in the command's
/// log format (main refused a bad CONSOLE_LOG_FORMAT before the run) and coloured only on a
/// terminal.
fn warnings_on_stderr() -> tracing::Dispatch {
    let format = crate::config::LogFormat::from_env().unwrap_or_default();
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(format.ansi_on_stderr());
    match format {
        crate::config::LogFormat::Text => tracing::Dispatch::new(builder.finish()),
        crate::config::LogFormat::Json => tracing::Dispatch::new(builder.json().finish()),
    }
}

/// The same handlers, each run under `quiet` (a worker runs them on tasks of their own, which
/// do not inherit the worker's subscriber).
fn quietly(standard: jobs::Handlers, quiet: &tracing::Dispatch) -> jobs::Handlers {
    let mut h = jobs::Handlers::new();
    for kind in standard.kinds() {
        let Some(handler) = standard.get(kind) else { continue };
        let quiet = quiet.clone();
        h.register(kind, move |ctx, payload| handler(ctx, payload).with_subscriber(quiet.clone()));
    }
    h
}

/// After the tasks: let the workers run until every start and end the tasks set has come (they
/// set them at most a few seconds ahead), so their jobs do that work; then stop them.
async fn stop_workers(ctx: &Ctx, workers: Workers) {
    let last: Result<Option<DateTime<Utc>>, sqlx::Error> = sqlx::query_scalar(
        "SELECT greatest(
             (SELECT max(ends_at) FROM core.grants
              WHERE status IN ('active', 'replaced', 'waiting') AND ends_at < now() + interval '10 seconds'),
             (SELECT max(starts_at) FROM core.grants
              WHERE status = 'waiting' AND organization_id IS NOT NULL AND starts_at < now() + interval '10 seconds'))",
    )
    .fetch_one(&ctx.admin)
    .await;
    match last {
        Ok(Some(t)) => {
            let wait = (t - Utc::now()).to_std().unwrap_or_default() + JOB_POLL * 3;
            eprintln!("stress: letting the job workers run {} ms more, past the last start or end", wait.as_millis());
            tokio::time::sleep(wait.min(Duration::from_secs(12))).await;
        }
        Ok(None) => {}
        Err(e) => ctx.tally_error(format!("reading the last start or end: {e}")),
    }
    let _ = workers.stop.send(true);
    for h in workers.handles {
        match tokio::time::timeout(workers.grace + Duration::from_secs(5), h).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => ctx.tally_error(format!("a job worker failed: {e}")),
            Err(_) => ctx.tally_error(format!("a job worker did not stop within {} s", workers.grace.as_secs() + 5)),
        }
    }
}

/// The sweep, as its schedule's job runs it in production: after it, no grant may be live past
/// its end (the invariants check that). What it still finds is shown: a job that did not run.
async fn sweep(ctx: &Ctx) {
    let due: Vec<(i64, String, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT grant_id, status, ends_at FROM core.grants
         WHERE (status IN ('active', 'replaced', 'waiting') AND ends_at <= now())
            OR (status = 'waiting' AND organization_id IS NOT NULL AND starts_at <= now())
         ORDER BY grant_id",
    )
    .fetch_all(&ctx.admin)
    .await
    .unwrap_or_default();
    match grants::sweep_grants(&ctx.db).await {
        Ok((expired, started)) => {
            if expired + started > 0 {
                let shown: Vec<String> =
                    due.iter().take(10).map(|(g, st, end)| format!("grant {g} ({st}, ends {end:?})")).collect();
                eprintln!(
                    "stress: the sweep expired {expired} and started {started} grants their jobs had not: {}",
                    shown.join(", ")
                );
            }
        }
        Err(e) => ctx.tally_error(format!("the sweep after the run failed: {e}")),
    }
}

/// After the tasks, with the workers still running: wait (at most `DRAIN_WAIT`) until no rule
/// change is draining. The drain jobs do the work; every tick the run enqueues a drain for each
/// change with a pool due (a failed pool whose next attempt came, a Retry whose job was not
/// enqueued because a drain of the change was running), as the poller does every 30 s. A change
/// still draining after the wait is a violation (the invariants report it).
async fn settle_drains(ctx: &Ctx) {
    let waited = Instant::now();
    let mut passes = 0;
    loop {
        let draining: Result<i64, sqlx::Error> =
            sqlx::query_scalar("SELECT count(*) FROM core.entitlement_set_changes WHERE state = 'draining'")
                .fetch_one(&ctx.admin)
                .await;
        let draining = match draining {
            Ok(n) => n,
            Err(e) => return ctx.tally_error(format!("reading the draining rule changes: {e}")),
        };
        if draining == 0 {
            if passes > 0 {
                eprintln!(
                    "stress: the drains settled every rule change {} ms after the run",
                    waited.elapsed().as_millis()
                );
            }
            return;
        }
        if waited.elapsed() >= DRAIN_WAIT {
            eprintln!("stress: {draining} rule changes still draining {} s after the run", DRAIN_WAIT.as_secs());
            return;
        }
        passes += 1;
        match rc::resume_drains(&ctx.db).await {
            Ok(_) | Err(DbError::LockNotAvailable) => {}
            Err(e) => ctx.tally_error(format!("enqueueing the due drains after the run: {e}")),
        }
        tokio::time::sleep(JOB_POLL).await;
    }
}

/// After the tasks, with the workers still running: drain every plan act to its end (at most
/// `DRAIN_WAIT`). The drain jobs do most of it; every tick the run retries, as an operator would
/// from the act's page, the failed moves of each act that still owns its types (the fragile
/// pools' first attempts, see `make_moves_fragile`), and drains each running act itself. An act
/// still running after the wait, or a move left pending or failed, is a violation (the
/// invariants report it).
async fn settle_plan_acts(ctx: &Ctx) {
    let waited = Instant::now();
    let mut passes = 0;
    loop {
        let open: Result<(Vec<i64>, Vec<i64>), sqlx::Error> = async {
            let mut c = ctx.db.pool.acquire().await?;
            let failed = sqlx::query_scalar(
                "SELECT DISTINCT o.plan_act_id FROM core.plan_act_obligations o
                 JOIN core.org_types t ON t.org_type_id = o.org_type_id AND t.default_owner_act_id = o.plan_act_id
                 WHERE o.state = 'failed' ORDER BY 1",
            )
            .fetch_all(&mut *c)
            .await?;
            let running = pa_store::running_acts(&mut c).await?;
            Ok((failed, running))
        }
        .await;
        let (failed, running) = match open {
            Ok(x) => x,
            Err(e) => return ctx.tally_error(format!("reading the running plan acts: {e}")),
        };
        if failed.is_empty() && running.is_empty() {
            if passes > 0 {
                eprintln!("stress: every plan act was done {} ms after the run", waited.elapsed().as_millis());
            }
            return;
        }
        if waited.elapsed() >= DRAIN_WAIT {
            eprintln!(
                "stress: plan acts {running:?} still running, {failed:?} with failed moves, {} s after the run",
                DRAIN_WAIT.as_secs()
            );
            return;
        }
        passes += 1;
        for act in &failed {
            if let Err(e) = note_move_failures(ctx, Some(*act)).await {
                return ctx.tally_error(format!("reading the failed moves of plan act {act}: {e}"));
            }
            match pa::retry_plan_act(&ctx.db, *act, None).with_subscriber(ctx.quiet.clone()).await {
                Ok(_) | Err(TopologyError::Refused(_) | TopologyError::ChangeInProgress) => {}
                Err(e) => ctx.tally_error(format!("retrying plan act {act} after the run: {e}")),
            }
        }
        let acts: BTreeSet<i64> = failed.into_iter().chain(running).collect();
        for act in acts {
            match pa::drain_plan_act(&ctx.db, act, None).with_subscriber(ctx.quiet.clone()).await {
                Ok(_) | Err(DbError::LockNotAvailable) => {}
                Err(DbError::Deadlock(_)) => ctx.tally_deadlock(format!("draining plan act {act} after the run")),
                Err(e) => ctx.tally_error(format!("draining plan act {act} after the run: {e}")),
            }
        }
        tokio::time::sleep(JOB_POLL).await;
    }
}

/// The failed moves of an act whose error is not the simulated one, each counted once as an
/// error (a deadlock is never recorded as a move's failure: the drain hands it back). Read
/// before a Retry, which clears the errors it requeues, and after the run.
async fn note_move_failures(ctx: &Ctx, act: Option<i64>) -> Result<(), sqlx::Error> {
    let rows: Vec<(i64, i64, i32, String)> = sqlx::query_as(
        "SELECT plan_act_id, pool_id, attempts, last_error FROM core.plan_act_obligations
         WHERE ($1::bigint IS NULL OR plan_act_id = $1) AND last_error IS NOT NULL AND strpos(last_error, $2) = 0
         ORDER BY plan_act_id, pool_id",
    )
    .bind(act)
    .bind(MOVE_FAILURE)
    .fetch_all(&ctx.admin)
    .await?;
    for (act, pool, attempts, error) in rows {
        let new = ctx.move_failures_seen.lock().unwrap_or_else(|p| p.into_inner()).insert((act, pool, attempts));
        if new {
            ctx.tally_error(format!(
                "error in a move: plan act {act} failed pool {pool} (attempt {attempts}): {error}"
            ));
        }
    }
    Ok(())
}

/// The parts of the plan acts' drains, from what they left: a listing per (act, type) that
/// wrote obligations; a move per obligation a move settled (migrated, grandfathered, vacant,
/// or superseded by a move: a listing's supersession adds no attempt, and keeps the failure it
/// supersedes); a recorded failure per attempt that did not settle; a last probe per act that
/// finished with obligations. The failures that were not simulated are errors.
async fn count_drain_parts(ctx: &Ctx) -> anyhow::Result<()> {
    note_move_failures(ctx, None).await.context("reading the moves' failures")?;
    let (listings, moves, failures, probes): (i64, i64, i64, i64) = sqlx::query_as(
        "WITH o AS (
             SELECT plan_act_id, org_type_id, attempts,
                    (state IN ('migrated', 'grandfathered', 'vacant')
                     OR (state = 'superseded' AND attempts > 0 AND last_error IS NULL))::int AS moved
             FROM core.plan_act_obligations)
         SELECT (SELECT count(*) FROM (SELECT DISTINCT plan_act_id, org_type_id FROM o) l),
                (SELECT coalesce(sum(moved), 0)::bigint FROM o),
                (SELECT coalesce(sum(attempts - moved), 0)::bigint FROM o),
                (SELECT count(*) FROM core.plan_acts a
                 WHERE a.state = 'done' AND EXISTS (SELECT 1 FROM o WHERE o.plan_act_id = a.plan_act_id))",
    )
    .fetch_one(&ctx.admin)
    .await
    .context("counting the plan acts' drains")?;
    let mut t = ctx.tally.lock().unwrap_or_else(|p| p.into_inner());
    for (path, n) in [
        (StressPath::ListPlanActBatch, listings),
        (StressPath::EnactObligation, moves),
        (StressPath::RecordMoveFailure, failures),
        (StressPath::LastProbe, probes),
    ] {
        t.paths.entry(path).or_default().done += n.max(0) as u64;
    }
    Ok(())
}

/// The failures the drains recorded against pools (a pool's last error; the Retry path's
/// simulated ones left out), one per (change, pool): a deadlock counts as one, a lock wait that
/// timed out as a refused DrainChange (the pool is tried again after its backoff), anything else
/// as an error.
async fn count_obligation_failures(ctx: &Ctx) -> anyhow::Result<()> {
    let rows: Vec<(i64, i64, String, i32, String)> = sqlx::query_as(
        "SELECT a.change_id, o.pool_id, min(o.state), max(o.attempts), min(o.last_error)
         FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE o.last_error IS NOT NULL AND o.last_error <> $1
         GROUP BY a.change_id, o.pool_id ORDER BY a.change_id, o.pool_id",
    )
    .bind(SIMULATED_FAILURE)
    .fetch_all(&ctx.admin)
    .await
    .context("reading the drains' failures")?;
    let mut t = ctx.tally.lock().unwrap_or_else(|p| p.into_inner());
    for (change, pool, state, attempts, error) in rows {
        let kind = if error.contains("deadlock") {
            t.deadlocks += 1;
            "deadlock"
        } else if error == DbError::LockNotAvailable.to_string() {
            t.paths.entry(StressPath::DrainChange).or_default().refused += 1;
            continue;
        } else {
            t.errors += 1;
            "error"
        };
        if t.messages.len() < PRINTED_ERRORS {
            let line = format!(
                "{kind} in a drain: change {change} failed pool {pool} ({state} after {attempts} attempts): {error}"
            );
            eprintln!("stress: {line}");
            t.messages.push(line);
        }
    }
    Ok(())
}

/// The jobs' outcomes, from `integration.jobs`: the grant jobs done count as their activity's
/// runs; a failed attempt for want of a lock as refused; a deadlock as one; anything else (a job
/// failed for good, an attempt that ended in another error, a job left running) as an error.
async fn count_jobs(ctx: &Ctx) -> anyhow::Result<()> {
    type JobRow = (i64, String, String, i32, Option<String>, Option<i64>, Option<i64>, i64, i64);
    let rows: Vec<JobRow> = sqlx::query_as(
        "SELECT j.job_id, j.kind, j.state, j.attempts, j.last_error, g.grant_id, rp.pool_id,
                (extract(epoch FROM j.run_at - $1) * 1000)::bigint,
                (extract(epoch FROM coalesce(j.finished_at, now()) - $1) * 1000)::bigint
         FROM integration.jobs j
         LEFT JOIN core.grants g ON g.grant_id = (j.payload->>'grant_id')::bigint
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         ORDER BY j.job_id",
    )
    .bind(ctx.t0)
    .fetch_all(&ctx.admin)
    .await
    .context("reading the jobs")?;
    let mut events = vec![];
    for (job, kind, state, attempts, last_error, grant, pool, run_ms, end_ms) in rows {
        let path = match kind.as_str() {
            grants::EXPIRE_GRANT => Some(StressPath::ExpireGrantActivity),
            grants::START_GRANT => Some(StressPath::StartGrantActivity),
            _ => None,
        };
        let failed_attempts = (attempts - i32::from(state == "done")).max(0) as u64;
        let about = format!(
            "{kind} job {job}{}: {state} after {attempts} attempts{}",
            grant.map(|g| format!(" for grant {g}")).unwrap_or_default(),
            last_error.as_deref().map(|e| format!(", last error: {e}")).unwrap_or_default()
        );
        let mut t = ctx.tally.lock().unwrap_or_else(|p| p.into_inner());
        let mut failure = None;
        if state == "failed" || state == "running" {
            t.errors += 1;
            failure = Some("error");
        } else if let (true, Some(e)) = (failed_attempts > 0, last_error.as_deref()) {
            if e.contains("deadlock") {
                t.deadlocks += 1;
                failure = Some("deadlock");
            } else if e == DbError::LockNotAvailable.to_string() {
                if let Some(p) = path {
                    t.paths.entry(p).or_default().refused += failed_attempts;
                }
            } else {
                t.errors += 1;
                failure = Some("error");
            }
        }
        if let (Some(p), "done") = (path, state.as_str()) {
            t.paths.entry(p).or_default().done += 1;
        }
        if let Some(kind) = failure
            && t.messages.len() < PRINTED_ERRORS
        {
            eprintln!("stress: {kind} in a job: {about}");
            t.messages.push(format!("{kind} in a job: {about}"));
        }
        drop(t);
        let outcome = match (failure, state.as_str()) {
            (Some(kind), _) => kind,
            (None, "done") => "done",
            (None, _) => "pending",
        };
        if let Some(p) = path {
            events.push(Event {
                start_ms: run_ms.max(0) as u64,
                end_ms: end_ms.max(0) as u64,
                task: None,
                path: p,
                pool,
                detail: about,
                outcome,
            });
        }
    }
    let mut all = ctx.events.lock().unwrap_or_else(|p| p.into_inner());
    let room = MAX_EVENTS.saturating_sub(all.len());
    all.extend(events.into_iter().take(room));
    Ok(())
}

async fn server_deadlock_count(admin: &PgPool, name: &str) -> anyhow::Result<u64> {
    // The runtime backends report their statistics as they exit: wait (briefly) for them to go.
    for _ in 0..50 {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND usename = 'console_runtime'",
        )
        .bind(name)
        .fetch_one(admin)
        .await?;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n: Option<i64> = sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(admin)
        .await?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

// The fixture ---------------------------------------------------------------------------------

struct Fixture {
    /// (organization, default pool) the tasks share.
    hot: Vec<(i64, i64)>,
    /// (product, name) an operator may grant.
    grantable: Vec<(i64, String)>,
    /// The types a new organization gets: Community, Business, or none.
    org_types: Vec<Option<i64>>,
    /// A product that is no tier, renamed and (un)published by UpdateProduct.
    addon: i64,
    /// A product no pool carries, whose set switches between the two sets below.
    uncarried: i64,
    uncarried_sets: [i64; 2],
    subscriptions: Vec<i64>,
    /// The sets the organizations carry, whose rules the rule changes edit.
    carried_sets: Vec<CarriedSet>,
    /// The ladder the tier acts change: its tiers are stress products, in and out.
    stress_ladder: i64,
    /// The ladder the stress type's default flips to and back (the stress ladder's other).
    wiki_ladder: i64,
    /// The org type whose default the default changes flip, and which the reorders reach.
    stress_type: i64,
    /// The products the tier acts add, delete, remove and reorder on the stress ladder.
    tier_products: Vec<(i64, &'static str)>,
}

/// A carried set and the values a rule change gives it: the site limit one of `sites` (empty:
/// no rule), the flag `flag` yes or no.
struct CarriedSet {
    id: i64,
    name: &'static str,
    sites: &'static [&'static str],
    flag: &'static str,
}

/// The demo's sets: Free and Community support are the floors of nearly every organization
/// (their changes owe many pools, and drain when above the cap), Basic, Pro and Priority
/// support are held by the shared organizations (few pools).
const CARRIED_SETS: &[(&str, &[&str], &str)] = &[
    ("Free", &["1", "2", "3"], "fedwiki.custom_domain"),
    ("Basic", &["3", "4", "6"], "fedwiki.custom_domain"),
    ("Pro", &["8", "10", "12"], "fedwiki.custom_domain"),
    ("Community support", &["", "1"], "support.priority"),
    ("Priority support", &["", "1", "2"], "support.priority"),
];

const ADDON: &str = "Stress add-on";
const ADDON_RENAMED: &str = "Stress add-on (renamed)";

/// The stress ladder's products, (name, rules): the first two its tiers at the start (its floor
/// and a step), the third added by AddTier; the third is also granted (so that a removal has
/// holders, and an add meets collisions). Every one can be added, deleted, removed, reordered.
const TIER_PRODUCTS: &[(&str, &[(&str, &str)])] = &[
    ("Stress base", &[("fedwiki.active_sites", "1"), ("support.priority", "no")]),
    ("Stress step", &[("fedwiki.active_sites", "5")]),
    ("Stress tier", &[("fedwiki.active_sites", "7"), ("support.priority", "yes")]),
];
const STRESS_LADDER: &str = "Stress ladder";
const STRESS_TYPE: &str = "Stress type";

async fn build_fixture(db: &Db, admin: &PgPool, orgs: usize, rng: &mut Rng) -> anyhow::Result<Fixture> {
    demo::load(db).await.context("loading the demo data")?;
    let mut grantable = vec![];
    for name in ["Free", "Basic", "Pro", "Community support", "Priority support"] {
        grantable.push((product_id(db, name).await?, name.to_string()));
    }
    // An add-on (no ladder: it stacks on the plan) and a bundle that is a tier of both ladders,
    // so that a conferral displaces whole holders and vacates ladders it does not take.
    let addon = product_with_rules(db, ADDON, &[("fedwiki.active_sites", "2")], true).await?;
    let bundle =
        product_with_rules(db, "Stress bundle", &[("fedwiki.active_sites", "20"), ("support.priority", "yes")], true)
            .await?;
    add_top_tier(db, admin, "Wiki hosting", bundle).await?;
    add_top_tier(db, admin, "Support", bundle).await?;
    grantable.push((bundle, "Stress bundle".into()));
    grantable.push((addon, ADDON.into()));

    let uncarried = product_with_rules(db, "Stress uncarried", &[("fedwiki.active_sites", "4")], false).await?;
    let set_a = set_of(db, uncarried).await?;
    let set_b = catalog_svc::create_entitlement_set(db, "Stress uncarried B").await?;
    put_rules(db, set_b, &[("fedwiki.active_sites", "5"), ("support.priority", "yes")]).await?;
    let mut carried_sets = vec![];
    for (name, sites, flag) in CARRIED_SETS {
        let mut c = db.pool.acquire().await?;
        let id = catalog_store::entitlement_set_id_by_name(&mut c, name)
            .await?
            .with_context(|| format!("the demo has no set {name}"))?;
        carried_sets.push(CarriedSet { id, name, sites, flag });
    }

    // The tier acts' catalog: a ladder of stress products, and an org type defaulting to it,
    // whose default flips between it and Wiki hosting. Set up on the plain handle, before any
    // organization, as the demo's seed does.
    let mut tier_products = vec![];
    for (name, r) in TIER_PRODUCTS {
        tier_products.push((product_with_rules(db, name, r, true).await?, *name));
    }
    let (stress_ladder, stress_type) = {
        let mut tx = begin(db, TxKind::Plain).await?;
        let ladder = catalog_store::ensure_ladder(tx.conn(), STRESS_LADDER, 2).await?;
        for (rank, (product, _)) in tier_products.iter().take(2).enumerate() {
            catalog_store::ensure_tier(tx.conn(), ladder, rank as i32, *product).await?;
        }
        let ty = catalog_store::ensure_org_type(tx.conn(), STRESS_TYPE, Some(ladder)).await?;
        tx.commit().await?;
        (ladder, ty)
    };
    let wiki_ladder = ladder_id(admin, "Wiki hosting").await?;
    grantable.push((tier_products[2].0, tier_products[2].1.to_string()));

    let community = org_type_id(admin, "Community").await?;
    let business = org_type_id(admin, "Business").await?;
    // Two of the shared organizations (the 5th and 6th) are of the stress type.
    let org_types = vec![Some(community), Some(business), Some(community), None, Some(stress_type), Some(stress_type)];
    eprintln!("stress: creating {orgs} organizations");
    let mut hot = vec![];
    let mut fragile = vec![];
    for i in 0..orgs {
        let name = OrgName::parse(&format!("Stress organization {i}")).map_err(anyhow::Error::msg)?;
        let ty = org_types[i % org_types.len()];
        let created = org_svc::create_organization(db, &name, ty).await?;
        if hot.len() < HOT_ORGS {
            hot.push((created.organization_id, created.pool_id));
        }
        // The first two of the stress type past the first shared one: a shared pool, and not.
        if ty == Some(stress_type) && i > HOT_ORGS - 2 && fragile.len() < FRAGILE_POOLS {
            fragile.push(created.pool_id);
        }
    }
    make_moves_fragile(admin, &fragile).await?;
    let mut subscriptions = vec![];
    for (i, (org, pool)) in hot.iter().take(SUBSCRIPTIONS).enumerate() {
        // Business organizations default to Support: a Priority support subscription sits on
        // their default ladder, as Basic does on a Community organization's.
        let product = if org_types[i % org_types.len()] == Some(business) { &grantable[4] } else { &grantable[1] };
        subscriptions.push(subscribe(db, admin, *org, *pool, product.0, rng).await?);
    }
    Ok(Fixture {
        hot,
        grantable,
        org_types,
        addon,
        uncarried,
        uncarried_sets: [set_a, set_b],
        subscriptions,
        carried_sets,
        stress_ladder,
        wiki_ladder,
        stress_type,
        tier_products,
    })
}

/// The moves of these pools fail on their first attempt, every act: a trigger of the stress
/// database raises `MOVE_FAILURE` when a move settles the obligation of one of them that has no
/// attempt yet, so the move rolls back, the drain records the failure (attempts 1), and once
/// RetryPlanAct has made it pending again the next move settles it (attempts 2). Only a move
/// settles an obligation (a listing's supersession and a failure's record are not settlings), so
/// no other path meets the trigger.
async fn make_moves_fragile(admin: &PgPool, pools: &[i64]) -> anyhow::Result<()> {
    if pools.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = pools.iter().map(|p| p.to_string()).collect();
    eprintln!("stress: the moves of pools {} fail on their first attempt", list.join(", "));
    let sql = format!(
        "CREATE FUNCTION public.stress_fragile_move() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.pool_id IN ({}) AND OLD.attempts = 0 THEN
                 RAISE EXCEPTION '{MOVE_FAILURE}';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER stress_fragile_move BEFORE UPDATE OF state ON core.plan_act_obligations FOR EACH ROW
             WHEN (OLD.state = 'pending' AND NEW.state IN ('migrated', 'grandfathered', 'vacant'))
             EXECUTE FUNCTION public.stress_fragile_move();",
        list.join(", ")
    );
    sqlx::raw_sql(AssertSqlSafe(sql)).execute(admin).await.context("making the fragile pools' moves fail")?;
    Ok(())
}

async fn ladder_id(admin: &PgPool, name: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1")
        .bind(name)
        .fetch_optional(admin)
        .await?
        .with_context(|| format!("the demo has no ladder {name}"))
}

fn rules(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A product with a set of its own (named as the product) holding `rules`.
async fn product_with_rules(db: &Db, name: &str, r: &[(&str, &str)], published: bool) -> anyhow::Result<i64> {
    let set = catalog_svc::create_entitlement_set(db, name).await?;
    put_rules(db, set, r).await?;
    Ok(catalog_svc::create_product(db, name, Some(set), published).await?)
}

/// A new set's rules, as every edit of rules is made: a rule change (no pool carries the set
/// yet, so it owes none and is settled in its commit).
async fn put_rules(db: &Db, set: i64, r: &[(&str, &str)]) -> anyhow::Result<()> {
    rc::commit_rule_change_batch(db, set, &rules(r), None, "stress setup", rc::DEFAULT_SYNC_CAP).await?;
    Ok(())
}

async fn product_id(db: &Db, name: &str) -> anyhow::Result<i64> {
    let mut c = db.pool.acquire().await?;
    catalog_store::product_id_by_name(&mut c, name).await?.with_context(|| format!("the demo has no product {name}"))
}

async fn set_of(db: &Db, product: i64) -> anyhow::Result<i64> {
    let mut c = db.pool.acquire().await?;
    let p = catalog_store::product(&mut c, product).await?.context("the product just made")?;
    p.entitlement_set_id.context("the product just made has a set")
}

async fn org_type_id(admin: &PgPool, name: &str) -> anyhow::Result<i64> {
    sqlx::query_scalar("SELECT org_type_id FROM core.org_types WHERE name = $1")
        .bind(name)
        .fetch_optional(admin)
        .await?
        .with_context(|| format!("the demo has no org type {name}"))
}

/// Make `product` the new top tier of `ladder` (setup, before any conferral of it).
async fn add_top_tier(db: &Db, admin: &PgPool, ladder: &str, product: i64) -> anyhow::Result<()> {
    let (id, top): (i64, i32) = sqlx::query_as(
        "SELECT l.plan_ladder_id, coalesce(max(t.rank), -1) FROM core.plan_ladders l
         LEFT JOIN core.plan_ladder_tiers t USING (plan_ladder_id) WHERE l.name = $1 GROUP BY l.plan_ladder_id",
    )
    .bind(ladder)
    .fetch_one(admin)
    .await?;
    let mut tx = begin(db, TxKind::Plain).await?;
    catalog_store::ensure_tier(tx.conn(), id, top + 1, product).await?;
    tx.commit().await?;
    Ok(())
}

/// A subscription with one item, inserted by the administrator (the Stripe sync comes later),
/// and its provision conferred to the pool.
async fn subscribe(db: &Db, admin: &PgPool, org: i64, pool: i64, product: i64, rng: &mut Rng) -> anyhow::Result<i64> {
    let n = format!("{:016x}", rng.next_u64());
    let sub: i64 = sqlx::query_scalar(
        "INSERT INTO core.subscriptions (organization_id, stripe_subscription_id, status) VALUES ($1, $2, 'active')
         RETURNING subscription_id",
    )
    .bind(org)
    .bind(format!("sub_stress_{n}"))
    .fetch_one(admin)
    .await?;
    let item: i64 = sqlx::query_scalar(
        "INSERT INTO core.subscription_items (subscription_id, stripe_item_id, product_id, quantity)
         VALUES ($1, $2, $3, 1) RETURNING subscription_item_id",
    )
    .bind(sub)
    .bind(format!("si_stress_{n}"))
    .bind(product)
    .fetch_one(admin)
    .await?;
    let mut tx = begin(db, TxKind::Materializing).await?;
    ent_store::confer(tx.conn(), pool, product, None, Some(item), 1).await?;
    ent_store::materialize_pool(tx.conn(), pool).await?;
    tx.commit().await?;
    Ok(sub)
}

// Tasks and their tally ------------------------------------------------------------------------

struct Ctx {
    db: Db,
    admin: PgPool,
    fx: Fixture,
    /// The console's sync cap (`CONSOLE_RULE_CHANGE_SYNC_CAP`), for the commits settled inline.
    sync_cap: i64,
    /// The console's holder cap (`CONSOLE_PLAN_ACT_HOLDER_CAP`), for the tier add and removal.
    holder_cap: i64,
    /// A log of warnings only, for the plan-act services the tasks call (each drain logs its
    /// last probe at info; a move's failure, logged from its own task, still shows).
    quiet: tracing::Dispatch,
    /// The moves' failures already counted as errors: (act, pool, attempts).
    move_failures_seen: Mutex<BTreeSet<(i64, i64, i32)>>,
    started: Instant,
    /// The server's clock when `started` was taken (for placing the jobs' runs among the acts).
    t0: DateTime<Utc>,
    deadline: Instant,
    org_seq: AtomicU64,
    /// The email domains: organizations are created for stress0.example.org, stress1..., in
    /// turn; grants are issued to the last one created and the next few.
    domain_seq: AtomicU64,
    tally: Mutex<Tally>,
    events: Mutex<Vec<Event>>,
}

#[derive(Default)]
struct Tally {
    paths: BTreeMap<StressPath, PathCount>,
    deadlocks: u64,
    errors: u64,
    /// The first deadlocks and errors.
    messages: Vec<String>,
}

/// One act, kept to show the sequence behind a deadlock or a violation.
struct Event {
    start_ms: u64,
    end_ms: u64,
    /// The task; None for a job the workers ran.
    task: Option<usize>,
    path: StressPath,
    pool: Option<i64>,
    detail: String,
    outcome: &'static str,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  {:>7}..{:<7} ms {:<7} {:<38} pool {:<6} {:<8} {}",
            self.start_ms,
            self.end_ms,
            self.task.map(|t| format!("task {t}")).unwrap_or_else(|| "job".into()),
            self.path.name(),
            self.pool.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            self.outcome,
            self.detail
        )
    }
}

enum Outcome {
    Done,
    Refused,
    /// Nothing to act on (e.g. a pool with no holding conferral): not counted.
    Skipped,
}

enum Failure {
    Deadlock(String),
    Error(String),
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Deadlock(_) => Failure::Deadlock(e.to_string()),
            other => Failure::Error(other.to_string()),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        DbError::from(e).into()
    }
}

/// What an act touched, for the event log.
#[derive(Default)]
struct Note {
    pool: Option<i64>,
    detail: String,
    /// The path the act turned out to take, when not the one picked (a manage of a waiting
    /// grant that started meanwhile extends it).
    taken: Option<StressPath>,
}

impl Ctx {
    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn record(&self, task: usize, path: StressPath, start_ms: u64, note: Note, result: Result<Outcome, Failure>) {
        let path = note.taken.unwrap_or(path);
        let outcome = {
            let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
            let count = t.paths.entry(path).or_default();
            match &result {
                Ok(Outcome::Done) => {
                    count.done += 1;
                    "done"
                }
                Ok(Outcome::Refused) => {
                    count.refused += 1;
                    "refused"
                }
                Ok(Outcome::Skipped) => "skipped",
                Err(f) => {
                    let (kind, message) = match f {
                        Failure::Deadlock(m) => {
                            t.deadlocks += 1;
                            ("deadlock", m)
                        }
                        Failure::Error(m) => {
                            t.errors += 1;
                            ("error", m)
                        }
                    };
                    if t.messages.len() < PRINTED_ERRORS {
                        let line = format!(
                            "{kind} in {} (task {task}, pool {:?}, {}): {message}",
                            path.name(),
                            note.pool,
                            note.detail
                        );
                        eprintln!("stress: {line}");
                        t.messages.push(line);
                    }
                    kind
                }
            }
        };
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() < MAX_EVENTS {
            events.push(Event {
                start_ms,
                end_ms: self.elapsed_ms(),
                task: Some(task),
                path,
                pool: note.pool,
                detail: note.detail,
                outcome,
            });
        }
    }

    fn tally_error(&self, message: String) {
        eprintln!("stress: error: {message}");
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.errors += 1;
        if t.messages.len() < PRINTED_ERRORS {
            t.messages.push(message);
        }
    }

    fn tally_deadlock(&self, message: String) {
        let message = format!("deadlock {message}");
        eprintln!("stress: {message}");
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.deadlocks += 1;
        if t.messages.len() < PRINTED_ERRORS {
            t.messages.push(message);
        }
    }
}

/// One task: every path once (the opening round), then paths at random until the deadline.
async fn task(ctx: Arc<Ctx>, id: usize, mut rng: Rng) {
    let mut opening = opening_round(&mut rng).into_iter();
    while Instant::now() < ctx.deadline {
        let path = opening.next().unwrap_or_else(|| pick_path(&mut rng));
        let mut note = Note::default();
        let start = ctx.elapsed_ms();
        let result = run_path(&ctx, path, &mut rng, &mut note).await;
        ctx.record(id, path, start, note, result);
    }
}

async fn run_path(ctx: &Ctx, path: StressPath, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    match path {
        StressPath::CreateOrganization => create_organization(ctx, rng, note).await,
        StressPath::ConferGrant => confer_grant(ctx, rng, note).await,
        StressPath::EndConferral => end_conferral(ctx, rng, note).await,
        StressPath::MaterializePool => materialize_pool(ctx, rng, note).await,
        StressPath::RegisterProviders => register_providers(ctx, rng, note).await,
        StressPath::UpdateProduct => update_product(ctx, note).await,
        StressPath::ChangeProductSet => change_product_set(ctx, note).await,
        StressPath::RuleChangeBatchCommit => commit_rule_change(ctx, rng, note).await,
        StressPath::DrainChange => drain_change(ctx, rng, note).await,
        StressPath::RetryRuleChange => retry_rule_change(ctx, rng, note).await,
        StressPath::SyncSourceStatus => sync_source_status(ctx, rng, note).await,
        StressPath::UpdateConferralBounds => update_conferral_bounds(ctx, rng, note).await,
        StressPath::IssueGrant => issue_grant(ctx, rng, note).await,
        StressPath::RevokeGrant => revoke_grant(ctx, rng, note).await,
        StressPath::ExpireGrant => expire_grant(ctx, rng, note).await,
        StressPath::StartWaitingGrant => start_waiting_grant(ctx, rng, note).await,
        StressPath::ManageGrant => manage_grant(ctx, rng, note).await,
        StressPath::ExtendWaitingGrant => extend_waiting_grant(ctx, rng, note).await,
        StressPath::AddTier => add_tier(ctx, rng, note).await,
        StressPath::DeleteTier => delete_tier(ctx, rng, note).await,
        StressPath::RemoveTier => remove_tier(ctx, rng, note).await,
        StressPath::ChangeOrgTypeDefault => change_org_type_default(ctx, rng, note).await,
        StressPath::ReorderTiers => reorder_tiers(ctx, rng, note).await,
        StressPath::DrainPlanAct => drain_plan_act(ctx, rng, note).await,
        StressPath::RetryPlanAct => retry_plan_act(ctx, rng, note).await,
        StressPath::ReorderPlanLadders => reorder_plan_ladders(ctx, rng, note).await,
        StressPath::SignIn => sign_in(ctx, rng, note).await,
        StressPath::CompactCounts => compact_counts(ctx, note).await,
        StressPath::ExpireGrantActivity
        | StressPath::StartGrantActivity
        | StressPath::ListPlanActBatch
        | StressPath::EnactObligation
        | StressPath::RecordMoveFailure
        | StressPath::LastProbe => Ok(Outcome::Skipped),
    }
}

/// A typed refusal counts as refused; a deadlock, and anything the tool's own choices should
/// never cause (a missing row, a passed deadline), count as failures.
fn entitlement_outcome<T>(r: Result<T, EntitlementError>) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(EntitlementError::Invalid(_)) | Err(EntitlementError::Db(DbError::LockNotAvailable)) => {
            Ok(Outcome::Refused)
        }
        Err(EntitlementError::Db(e)) => Err(e.into()),
        Err(e @ EntitlementError::NotFound(_)) => Err(Failure::Error(e.to_string())),
    }
}

fn catalog_outcome<T>(r: Result<T, CatalogError>) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(CatalogError::Invalid(_) | CatalogError::Carried { .. } | CatalogError::ChangeInProgress) => {
            Ok(Outcome::Refused)
        }
        Err(CatalogError::Db(DbError::LockNotAvailable)) => Ok(Outcome::Refused),
        Err(CatalogError::Db(e)) => Err(e.into()),
        Err(e @ CatalogError::NotFound(_)) => Err(Failure::Error(e.to_string())),
    }
}

fn hot_pool(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> (i64, i64) {
    let (org, pool) = *rng.pick(&ctx.fx.hot);
    note.pool = Some(pool);
    (org, pool)
}

/// A holding conferral of the pool, at random.
async fn holding_conferral(ctx: &Ctx, rng: &mut Rng, pool: i64) -> Result<Option<i64>, Failure> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT conferral_id FROM core.conferrals WHERE pool_id = $1 AND state = 'holding' ORDER BY conferral_id",
    )
    .bind(pool)
    .fetch_all(&ctx.db.pool)
    .await?;
    Ok((!ids.is_empty()).then(|| *rng.pick(&ids)))
}

async fn create_organization(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let n = ctx.org_seq.fetch_add(1, Ordering::Relaxed);
    let ty = *rng.pick(&ctx.fx.org_types);
    let name = OrgName::parse(&format!("Stress newcomer {n}")).map_err(Failure::Error)?;
    note.detail = format!("type {ty:?}");
    // Half with the next email domain, so that the grants waiting for it are provisioned.
    let domain = (rng.below(2) == 0).then(|| domain(ctx.domain_seq.fetch_add(1, Ordering::Relaxed)));
    if let Some(d) = &domain {
        note.detail.push_str(&format!(", domain {}", d.as_str()));
    }
    let r = org_svc::create_organization_with_domain(&ctx.db, &name, ty, domain.as_ref()).await;
    if let Ok((c, provisioned)) = &r {
        note.pool = Some(c.pool_id);
        if let Some(g) = c.floor_grant_id {
            note.detail.push_str(&format!(", floor grant {g}"));
        }
        if domain.is_some() {
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT grant_id FROM core.grant_events WHERE act = 'provisioned' AND organization_id = $1
                 ORDER BY grant_id",
            )
            .bind(c.organization_id)
            .fetch_all(&ctx.db.pool)
            .await?;
            let ids: Vec<String> = ids.iter().map(|g| format!("grant {g}")).collect();
            note.detail.push_str(&format!(", {provisioned} provisioned [{}]", ids.join(", ")));
        }
    }
    entitlement_outcome(r)
}

async fn confer_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, _) = hot_pool(ctx, rng, note);
    let (product, name) = rng.pick(&ctx.fx.grantable).clone();
    let quantity = 1 + rng.below(3) as i32;
    let grant = NewGrant {
        organization_id: Some(org),
        product_id: product,
        quantity,
        kind: "operator",
        status: "active",
        starts_at: None,
        ends_at: None,
        reason: "stress".into(),
        created_by: None,
        plan_act_id: None,
        provision_domain: None,
    };
    let r = ent::confer_grant(&ctx.db, &grant).await;
    note.detail = match &r {
        Ok(g) => format!("{name} x{quantity} as grant {g}"),
        Err(_) => format!("{name} x{quantity}"),
    };
    entitlement_outcome(r)
}

async fn end_conferral(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    let Some(c) = holding_conferral(ctx, rng, pool).await? else { return Ok(Outcome::Skipped) };
    let r = ent::end_conferral(&ctx.db, c, "stress").await;
    note.detail = match &r {
        Ok(x) => format!(
            "conferral {c}: ended {}, {} grants resumed, {} subscriptions delivered{}",
            x.ended,
            x.resumed_grants,
            x.delivered_subscriptions,
            x.floor_grant_id.map(|g| format!(", floor grant {g}")).unwrap_or_default()
        ),
        Err(_) => format!("conferral {c}"),
    };
    entitlement_outcome(r)
}

async fn update_conferral_bounds(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    let Some(c) = holding_conferral(ctx, rng, pool).await? else { return Ok(Outcome::Skipped) };
    let quantity = 1 + rng.below(3) as i32;
    note.detail = format!("conferral {c} quantity {quantity}");
    entitlement_outcome(ent::update_conferral_bounds(&ctx.db, c, quantity, None).await)
}

async fn sync_source_status(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    if ctx.fx.subscriptions.is_empty() {
        return Ok(Outcome::Skipped);
    }
    let i = rng.below(ctx.fx.subscriptions.len());
    let sub = ctx.fx.subscriptions[i];
    note.pool = Some(ctx.fx.hot[i].1);
    let status = if rng.below(2) == 0 { "suspended" } else { "active" };
    let r = ent::sync_source_status(&ctx.db, sub, status).await;
    note.detail = match &r {
        Ok(n) => format!("subscription {sub} {status}: {n} changed"),
        Err(_) => format!("subscription {sub} {status}"),
    };
    entitlement_outcome(r)
}

async fn materialize_pool(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (_, pool) = hot_pool(ctx, rng, note);
    entitlement_outcome(ent::materialize_pool(&ctx.db, pool).await)
}

async fn register_providers(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    // As a deploy that moves a key to another provider would: half the time a key names someone
    // else first, so the stamp really takes its FOR UPDATE against open entitlement inserts.
    if rng.below(2) == 0 {
        let (_, keys) = rng.pick(ent::PROVIDERS);
        let key = rng.pick(keys).key;
        sqlx::query("UPDATE core.resource_keys SET provider = 'stress-elsewhere' WHERE resource_key = $1")
            .bind(key)
            .execute(&ctx.admin)
            .await?;
        note.detail = format!("after moving {key} away");
    }
    entitlement_outcome(ent::register_providers(&ctx.db).await)
}

async fn update_product(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let current = {
        let mut c = ctx.db.pool.acquire().await?;
        catalog_store::product(&mut c, ctx.fx.addon).await?
    };
    let Some(p) = current else { return Err(Failure::Error("the add-on product is gone".into())) };
    let name = if p.name == ADDON { ADDON_RENAMED } else { ADDON };
    note.detail = format!("product {} → {name:?}, published {}", p.product_id, !p.published);
    catalog_outcome(catalog_svc::update_product(&ctx.db, p.product_id, name, p.entitlement_set_id, !p.published).await)
}

async fn change_product_set(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let current = {
        let mut c = ctx.db.pool.acquire().await?;
        catalog_store::product(&mut c, ctx.fx.uncarried).await?
    };
    let Some(p) = current else { return Err(Failure::Error("the uncarried product is gone".into())) };
    let [a, b] = ctx.fx.uncarried_sets;
    let to = if p.entitlement_set_id == Some(a) { b } else { a };
    note.detail = format!("product {} set {:?} → {to}", p.product_id, p.entitlement_set_id);
    catalog_outcome(catalog_svc::update_product(&ctx.db, p.product_id, &p.name, Some(to), p.published).await)
}

// Sign-in and counts ------------------------------------------------------------------------------

/// The demo member signs in, with the right password one time in two, from one of four
/// addresses: a failure is a refusal, a throttled attempt too.
async fn sign_in(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let email = Email::parse(demo::MEMBER_EMAIL).map_err(|e| Failure::Error(e.to_string()))?;
    let right = rng.below(2) == 0;
    let address = format!("192.0.2.{}", 1 + rng.below(4));
    note.detail = format!("from {address}, {} password", if right { "the right" } else { "a wrong" });
    let password = if right { demo::MEMBER_PASSWORD } else { "not the password" };
    match auth::sign_in(&ctx.db, &email, password, &address, None).await {
        Ok(_) => Ok(Outcome::Done),
        Err(AuthError::InvalidCredentials | AuthError::Throttled { .. }) => Ok(Outcome::Refused),
        Err(AuthError::Db(e)) => Err(e.into()),
    }
}

async fn compact_counts(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let folded = org_svc::compact_counts(&ctx.db).await?;
    note.detail = format!("{folded} rows folded");
    Ok(Outcome::Done)
}

// Rule-change paths ------------------------------------------------------------------------------

/// A typed refusal (another change holds the rendezvous, nothing changed) counts as refused; a
/// set or change the tool picked that is gone is an error, as are a deadlock and any other
/// database error.
fn rule_change_outcome<T>(r: Result<T, RuleChangeError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(e @ (RuleChangeError::Invalid(_) | RuleChangeError::ChangeInProgress)) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(RuleChangeError::Db(DbError::LockNotAvailable)) => {
            note.detail.push_str("; refused: a lock wait timed out");
            Ok(Outcome::Refused)
        }
        Err(e @ RuleChangeError::NotFound(_)) => Err(Failure::Error(e.to_string())),
        Err(RuleChangeError::Db(e)) => Err(e.into()),
    }
}

/// RuleChangeBatchCommit on a set the organizations carry: the site limit to one of a few
/// values and the flag to yes or no (sometimes what they are already: "Nothing changed"). Half
/// under the console's sync cap (settled inline when the set owes at most that many pools),
/// half with cap 0, so that the change drains (the drain job, and the tasks' DrainChange).
async fn commit_rule_change(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let set = rng.pick(&ctx.fx.carried_sets);
    let sites = *rng.pick(set.sites);
    let flag = *rng.pick(&["yes", "no"]);
    let cap = if rng.below(2) == 0 { ctx.sync_cap } else { 0 };
    note.detail = format!("set {} ({}): sites {sites:?}, {} {flag}, cap {cap}", set.id, set.name, set.flag);
    let submitted = rules(&[("fedwiki.active_sites", sites), (set.flag, flag)]);
    let r = rc::commit_rule_change_batch(&ctx.db, set.id, &submitted, None, "stress", cap).await;
    if let Ok(c) = &r {
        note.detail.push_str(&format!(
            " → change {}: {} acts, {} pools, {}, held {} ms",
            c.change_id,
            c.acts,
            c.pools_owed,
            if c.settled_inline { "settled inline" } else { "draining" },
            c.hold.as_millis()
        ));
    }
    rule_change_outcome(r, note)
}

/// DrainChange on a draining change, beside the drain job doing the same (and the other tasks):
/// 1-4 pools at a time. A pass that found nothing due (the job settled it first, or its failed
/// pools wait for their next attempt) is refused; no draining change, skipped.
async fn drain_change(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT change_id FROM core.entitlement_set_changes WHERE state = 'draining' ORDER BY change_id",
    )
    .fetch_all(&ctx.db.pool)
    .await?;
    if ids.is_empty() {
        return Ok(Outcome::Skipped);
    }
    let change = *rng.pick(&ids);
    let parallelism = 1 + rng.below(4) as i64;
    note.detail = format!("change {change}, {parallelism} pools at a time");
    match rc::drain_change(&ctx.db, change, parallelism).await {
        Ok(d) => {
            note.detail.push_str(&format!(": {} settled, {} failed, finished {}", d.settled, d.failed, d.finished));
            if d.settled + d.failed > 0 {
                Ok(Outcome::Done)
            } else {
                note.detail.push_str("; nothing due");
                Ok(Outcome::Refused)
            }
        }
        Err(DbError::LockNotAvailable) => {
            note.detail.push_str("; refused: a lock wait timed out");
            Ok(Outcome::Refused)
        }
        Err(e) => Err(e.into()),
    }
}

/// "Retry a rule change's failed pools" on a change with failed pools. Nothing fails on its own
/// in a healthy run, so when none has, one owed pool of a draining change is failed first, as
/// the drain records a pool whose settlement rolled back (`record_obligation_failure`, with
/// `SIMULATED_FAILURE`); the drains must then settle it once retried. A retry that found
/// nothing failed any more (a drain settled it first) is refused.
async fn retry_rule_change(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    const FAILED: &str = "SELECT DISTINCT a.change_id, o.pool_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE o.state = 'failed' ORDER BY a.change_id, o.pool_id LIMIT 40";
    const OWED: &str = "SELECT DISTINCT a.change_id, o.pool_id FROM core.entitlement_set_change_obligations o
         JOIN core.entitlement_set_change_acts a USING (act_id)
         JOIN core.entitlement_set_changes ch ON ch.change_id = a.change_id
         WHERE ch.state = 'draining' AND o.state = 'owed' ORDER BY o.pool_id DESC LIMIT 8";
    let failed: Vec<(i64, i64)> = sqlx::query_as(FAILED).fetch_all(&ctx.db.pool).await?;
    let change = if let Some((change, pool)) = (!failed.is_empty()).then(|| *rng.pick(&failed)) {
        note.pool = Some(pool);
        note.detail = format!("change {change} (pool {pool} failed)");
        change
    } else {
        let owed: Vec<(i64, i64)> = sqlx::query_as(OWED).fetch_all(&ctx.db.pool).await?;
        if owed.is_empty() {
            // Nothing failed and nothing owed at this moment (the workers' drains are quick):
            // the operator's Retry would find nothing either.
            note.detail = "nothing failed or owed to retry".into();
            return Ok(Outcome::Refused);
        }
        // Among the last owed pools: the drains go in ascending pool_id, so these are still
        // owed when the failure is recorded more often than not.
        let (change, pool) = *rng.pick(&owed);
        note.pool = Some(pool);
        note.detail = format!("change {change}, after failing pool {pool}");
        match rc::record_obligation_failure(&ctx.db, change, pool, SIMULATED_FAILURE).await {
            Ok(()) => {}
            Err(DbError::LockNotAvailable) => {
                note.detail.push_str("; refused: a lock wait timed out recording the failure");
                return Ok(Outcome::Refused);
            }
            Err(e) => return Err(e.into()),
        }
        change
    };
    let r = rc::retry_failed(&ctx.db, change).await;
    match &r {
        Ok(0) => {
            note.detail.push_str(": nothing failed any more (a drain settled it first)");
            return Ok(Outcome::Refused);
        }
        Ok(n) => note.detail.push_str(&format!(": {n} obligations due now")),
        Err(_) => {}
    }
    rule_change_outcome(r, note)
}

// Plan-act paths ---------------------------------------------------------------------------------

/// The refusals the spec names count as refused: "another change is in progress" (a lock wait
/// past its bound under the exclusive rendezvous; `TopologyError` folds a deadlock into it too,
/// which the server's count of deadlocks still catches), and the act's own reads (`Refused`: the
/// cap, collisions, holders, the last tier; `Invalid`: the form's checks against what the act
/// found). A tier gone from the rank the task read (a reorder or a removal came between) is
/// refused too. Any other missing row and any database error are failures.
fn topology_outcome<T>(r: Result<T, TopologyError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(e @ (TopologyError::Invalid(_) | TopologyError::Refused(_) | TopologyError::ChangeInProgress))
        | Err(e @ TopologyError::NotFound("tier")) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(e @ TopologyError::NotFound(_)) => Err(Failure::Error(e.to_string())),
        Err(TopologyError::Db(e)) => Err(e.into()),
    }
}

/// The stress ladder's tiers now: (rank, product), by rank.
async fn stress_tiers(ctx: &Ctx) -> Result<Vec<(i32, i64)>, Failure> {
    Ok(sqlx::query_as("SELECT rank, product_id FROM core.plan_ladder_tiers WHERE plan_ladder_id = $1 ORDER BY rank")
        .bind(ctx.fx.stress_ladder)
        .fetch_all(&ctx.db.pool)
        .await?)
}

fn tier_name(ctx: &Ctx, product: i64) -> &'static str {
    ctx.fx.tier_products.iter().find(|(p, _)| *p == product).map(|(_, n)| *n).unwrap_or("no tier")
}

fn show_tiers(ctx: &Ctx, tiers: &[(i32, i64)]) -> String {
    let names: Vec<&str> = tiers.iter().map(|(_, p)| tier_name(ctx, *p)).collect();
    format!("[{}]", names.join(", "))
}

/// A disposition at random; with `gate`, one time in five none (the gate decides).
fn pick_disposition(rng: &mut Rng, gate: bool) -> Option<Disposition> {
    if gate && rng.below(5) == 0 {
        return None;
    }
    Some(if rng.below(2) == 0 { Disposition::Migrate } else { Disposition::Grandfather })
}

/// The end of a request's 1-2 s.
fn in_request(rng: &mut Rng) -> Instant {
    let (low, high) = IN_REQUEST_MS;
    Instant::now() + Duration::from_millis(low + rng.next_u64() % (high - low + 1))
}

fn show_disposition(d: Option<Disposition>) -> &'static str {
    d.map(Disposition::as_str).unwrap_or("no disposition")
}

/// AddTier on the stress ladder: a stress product that is not a tier of it (when every one is,
/// any: refused), at a rank from 1 to the top (0 on an empty ladder). Refused when a holder of
/// the product already holds a plan on the ladder (an organization of the stress type holds its
/// floor there) or holds the product twice.
async fn add_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    let missing: Vec<i64> =
        ctx.fx.tier_products.iter().map(|(p, _)| *p).filter(|p| !tiers.iter().any(|(_, t)| t == p)).collect();
    let product = if missing.is_empty() { rng.pick(&ctx.fx.tier_products).0 } else { *rng.pick(&missing) };
    let rank = if tiers.is_empty() { 0 } else { 1 + rng.below(tiers.len()) as i32 };
    note.detail = format!("{} at rank {rank} of {}", tier_name(ctx, product), show_tiers(ctx, &tiers));
    let a = AddTier {
        ladder_id: ctx.fx.stress_ladder,
        product_id: product,
        rank: Some(rank),
        reason: "stress".into(),
        actor: None,
    };
    let r = topology::add_tier(&ctx.db, &a, ctx.holder_cap).with_subscriber(ctx.quiet.clone()).await;
    if let Ok((act, reach)) = &r {
        note.detail.push_str(&format!(": plan act {act}, {} holders", reach.holders));
    }
    topology_outcome(r, note)
}

/// DeleteTier on the stress ladder: a tier nobody holds when there is one (else any: refused).
async fn delete_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers: Vec<(i32, i64, i64)> = sqlx::query_as(
        "SELECT t.rank, t.product_id,
                (SELECT count(*) FROM core.positions p JOIN core.conferrals c USING (conferral_id)
                 WHERE p.plan_ladder_id = t.plan_ladder_id AND c.product_id = t.product_id)
         FROM core.plan_ladder_tiers t WHERE t.plan_ladder_id = $1 ORDER BY t.rank",
    )
    .bind(ctx.fx.stress_ladder)
    .fetch_all(&ctx.db.pool)
    .await?;
    let unheld: Vec<&(i32, i64, i64)> = tiers.iter().filter(|t| t.2 == 0).collect();
    // An empty ladder: rank 0, which is gone (refused, as an operator's stale form would be).
    let (rank, product, holders) = match (tiers.is_empty(), unheld.is_empty()) {
        (true, _) => (0, 0, 0),
        (false, true) => *rng.pick(&tiers),
        (false, false) => **rng.pick(&unheld),
    };
    note.detail = format!("{} at rank {rank} ({holders} holders) of {} tiers", tier_name(ctx, product), tiers.len());
    let r = topology::delete_tier(&ctx.db, ctx.fx.stress_ladder, rank, None, "stress")
        .with_subscriber(ctx.quiet.clone())
        .await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}"));
    }
    topology_outcome(r, note)
}

/// RemoveTier on the stress ladder: any tier, migrate or grandfather. Its holders: the stress
/// type's organizations when it is the floor, those granted the stress tier (IssueGrant and
/// ConferGrant grant it) when it is a tier.
async fn remove_tier(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    // An empty ladder: rank 0, which is gone (refused).
    let (rank, product) = if tiers.is_empty() { (0, 0) } else { *rng.pick(&tiers) };
    let disposition = pick_disposition(rng, false);
    note.detail = format!(
        "{} at rank {rank} of {}, {}",
        tier_name(ctx, product),
        show_tiers(ctx, &tiers),
        show_disposition(disposition)
    );
    let r = RemoveTier { ladder_id: ctx.fx.stress_ladder, rank, disposition, reason: "stress".into(), actor: None };
    let r = topology::remove_tier(&ctx.db, &r, ctx.holder_cap).with_subscriber(ctx.quiet.clone()).await;
    if let Ok((act, reach)) = &r {
        note.detail.push_str(&format!(": plan act {act}, {} holders", reach.holders));
    }
    topology_outcome(r, note)
}

/// After a default change's or a reorder's request: what its in-request drain settled.
async fn act_progress(ctx: &Ctx, act: i64) -> Result<String, Failure> {
    let mut c = ctx.db.pool.acquire().await?;
    let n = pa_store::counts(&mut c, act).await?;
    Ok(format!(
        "{} pending, {} migrated, {} grandfathered, {} vacant, {} failed, {} superseded",
        n.pending, n.migrated, n.grandfathered, n.vacant, n.failed, n.superseded
    ))
}

/// ChangeOrgTypeDefault: the stress type's default flips between the stress ladder and Wiki
/// hosting, with a disposition (sometimes none: the gate decides), and the request's 1-2 s for
/// its listing and moves; the drain job does the rest.
async fn change_org_type_default(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let fx = &ctx.fx;
    let current: Option<i64> =
        sqlx::query_scalar("SELECT default_plan_ladder_id FROM core.org_types WHERE org_type_id = $1")
            .bind(fx.stress_type)
            .fetch_one(&ctx.db.pool)
            .await?;
    let to = if current == Some(fx.stress_ladder) { fx.wiki_ladder } else { fx.stress_ladder };
    let disposition = pick_disposition(rng, true);
    let within = in_request(rng);
    note.detail =
        format!("type {} from ladder {current:?} to ladder {to}, {}", fx.stress_type, show_disposition(disposition));
    let r = pa::change_org_type_default(&ctx.db, fx.stress_type, to, disposition, None, "stress", Some(within))
        .with_subscriber(ctx.quiet.clone())
        .await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}, in the request: {}", act_progress(ctx, *act).await?));
    }
    topology_outcome(r, note)
}

/// ReorderTiers on the stress ladder: its tiers rotated one way or the other (rank 0 changes:
/// the types defaulting to it are reached), or, with three or more, ranks 1 and 2 swapped (rank
/// 0 kept: no organization reached); a disposition, sometimes none; the request's 1-2 s. With
/// fewer than two tiers, refused (nothing to reorder).
async fn reorder_tiers(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let tiers = stress_tiers(ctx).await?;
    let mut order: Vec<i64> = tiers.iter().map(|(_, p)| *p).collect();
    let how = match rng.below(3) {
        _ if order.len() < 2 => "too few tiers to reorder",
        2 if order.len() >= 3 => {
            order.swap(1, 2);
            "ranks 1 and 2 swapped"
        }
        1 => {
            order.rotate_right(1);
            "the top to rank 0"
        }
        _ => {
            order.rotate_left(1);
            "rank 0 to the top"
        }
    };
    let disposition = pick_disposition(rng, true);
    let within = in_request(rng);
    note.detail = format!("{} with {how}, {}", show_tiers(ctx, &tiers), show_disposition(disposition));
    let r = ReorderTiers { ladder_id: ctx.fx.stress_ladder, order, disposition, reason: "stress".into(), actor: None };
    let r = pa::reorder_tiers(&ctx.db, &r, Some(within)).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(act) = &r {
        note.detail.push_str(&format!(": plan act {act}, in the request: {}", act_progress(ctx, *act).await?));
    }
    topology_outcome(r, note)
}

/// DrainPlanAct on a running act, beside its drain job (and the other tasks): the listing
/// batches, the moves, the failures' records and the last probe. With no act running, the
/// newest act that reached organizations, as a job repeated after its act is done would (only
/// the last probe runs again). A pass that found nothing to do is refused; no act, skipped.
async fn drain_plan_act(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let acts: Vec<i64> =
        sqlx::query_scalar("SELECT plan_act_id FROM core.plan_acts WHERE state = 'running' ORDER BY plan_act_id")
            .fetch_all(&ctx.db.pool)
            .await?;
    let act = if acts.is_empty() {
        let Some(act) = newest_reaching_act(ctx).await? else { return Ok(Outcome::Skipped) };
        note.detail = format!("plan act {act} (none running)");
        act
    } else {
        let act = *rng.pick(&acts);
        note.detail = format!("plan act {act}");
        act
    };
    match pa::drain_plan_act(&ctx.db, act, None).with_subscriber(ctx.quiet.clone()).await {
        Ok(d) => {
            note.detail.push_str(&format!(
                ": {} listed, {} moved, {} failed, finished {}",
                d.listed, d.moved, d.failed, d.finished
            ));
            if d.listed + d.moved + d.failed > 0 || d.finished {
                Ok(Outcome::Done)
            } else {
                note.detail.push_str("; nothing to do");
                Ok(Outcome::Refused)
            }
        }
        Err(DbError::LockNotAvailable) => {
            note.detail.push_str("; refused: a lock wait timed out");
            Ok(Outcome::Refused)
        }
        Err(e) => Err(e.into()),
    }
}

/// RetryPlanAct on an act with failed moves (the fragile pools' first attempts) that still owns
/// its types; when there is none, on the newest act that reached organizations, which has
/// nothing to retry (refused, and rolled back). The failures that were not simulated are
/// counted as errors before the Retry clears them.
async fn retry_plan_act(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let failed: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT o.plan_act_id, o.pool_id FROM core.plan_act_obligations o
         JOIN core.org_types t ON t.org_type_id = o.org_type_id AND t.default_owner_act_id = o.plan_act_id
         WHERE o.state = 'failed' ORDER BY o.plan_act_id, o.pool_id LIMIT 40",
    )
    .fetch_all(&ctx.db.pool)
    .await?;
    let act = if let Some((act, pool)) = (!failed.is_empty()).then(|| *rng.pick(&failed)) {
        note.pool = Some(pool);
        note.detail = format!("plan act {act} (pool {pool} failed)");
        note_move_failures(ctx, Some(act)).await?;
        act
    } else {
        let Some(act) = newest_reaching_act(ctx).await? else { return Ok(Outcome::Skipped) };
        note.detail = format!("plan act {act} (no move failed)");
        act
    };
    let r = pa::retry_plan_act(&ctx.db, act, None).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(retry) = &r {
        note.detail.push_str(&format!(": requeued by plan act {retry}"));
    }
    topology_outcome(r, note)
}

/// The newest act that reached organizations (a default change, or a reorder that changed rank 0).
async fn newest_reaching_act(ctx: &Ctx) -> Result<Option<i64>, Failure> {
    Ok(sqlx::query_scalar(
        "SELECT max(plan_act_id) FROM core.plan_acts a
         WHERE EXISTS (SELECT 1 FROM core.plan_act_reached_types r WHERE r.plan_act_id = a.plan_act_id)",
    )
    .fetch_one(&ctx.db.pool)
    .await?)
}

/// ReorderPlanLadders: the ladders' display order rotated, or two of them swapped.
async fn reorder_plan_ladders(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let mut ids: Vec<i64> =
        sqlx::query_scalar("SELECT plan_ladder_id FROM core.plan_ladders ORDER BY sort_order, plan_ladder_id")
            .fetch_all(&ctx.db.pool)
            .await?;
    if ids.len() < 2 {
        return Ok(Outcome::Skipped);
    }
    if rng.below(2) == 0 {
        ids.rotate_left(1);
    } else {
        let (a, b) = (rng.below(ids.len()), rng.below(ids.len()));
        ids.swap(a, b);
    }
    let positions: BTreeMap<i64, i32> = ids.iter().enumerate().map(|(i, id)| (*id, i as i32 + 1)).collect();
    note.detail = format!("ladders in the order {ids:?}");
    let r = topology::reorder_plan_ladders(&ctx.db, &positions).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(n) = &r {
        note.detail.push_str(&format!(": {n} moved"));
    }
    topology_outcome(r, note)
}

// Grant paths ------------------------------------------------------------------------------------

/// The n-th email domain.
fn domain(n: u64) -> EmailDomain {
    EmailDomain::parse(&format!("stress{n}.example.org")).expect("a well-formed domain")
}

fn ms_ahead(rng: &mut Rng, (low, high): (u64, u64)) -> chrono::Duration {
    chrono::Duration::milliseconds((low + rng.next_u64() % (high - low + 1)) as i64)
}

/// `+N ms` from now, for the event log.
fn show_time(t: Option<DateTime<Utc>>) -> String {
    match t {
        None => "none".into(),
        Some(t) => format!("{:+} ms", (t - Utc::now()).num_milliseconds()),
    }
}

/// A typed refusal counts as refused (its reason kept in the log); a deadlock and any other
/// database error are failures.
fn grant_outcome<T>(r: Result<T, GrantError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            e @ (GrantError::Refused(_)
            | GrantError::Invalid(_)
            | GrantError::NotFound(_)
            | GrantError::Db(DbError::LockNotAvailable)),
        ) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        Err(GrantError::Db(e)) => Err(e.into()),
    }
}

/// A job-like act that found nothing to do (false) is refused: the job or another task was first.
fn due_outcome(r: Result<bool, GrantError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(true) => Ok(Outcome::Done),
        Ok(false) => {
            note.detail.push_str("; nothing to do (not live, or not due)");
            Ok(Outcome::Refused)
        }
        Err(e) => grant_outcome(Err::<(), _>(e), note),
    }
}

/// IssueGrant: to a shared organization now (open-ended, or ending 0.5-3 s ahead), from a start a
/// few hundred ms ahead, or to an email domain (the last one with an organization, or one of the
/// next few that have none yet).
async fn issue_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (product, name) = rng.pick(&ctx.fx.grantable).clone();
    let quantity = 1 + rng.below(3) as i32;
    let now = Utc::now();
    let roll = rng.below(20);
    let (recipient, starts_at, ends_at) = if roll < 5 {
        let next = ctx.domain_seq.load(Ordering::Relaxed);
        let d = domain((next + rng.below(4) as u64).saturating_sub(1));
        let starts = (rng.below(3) == 0).then(|| now + ms_ahead(rng, START_AHEAD_MS));
        let ends = (rng.below(2) == 0).then(|| starts.unwrap_or(now) + ms_ahead(rng, END_AHEAD_MS));
        (Recipient::Domain(d), starts, ends)
    } else {
        let (org, _) = hot_pool(ctx, rng, note);
        let (starts, ends) = match roll {
            5..=9 => (None, None),
            10..=14 => (None, Some(now + ms_ahead(rng, END_AHEAD_MS))),
            _ => {
                let s = now + ms_ahead(rng, START_AHEAD_MS);
                (Some(s), (rng.below(2) == 0).then(|| s + ms_ahead(rng, END_AHEAD_MS)))
            }
        };
        (Recipient::Organization(org), starts, ends)
    };
    let to = match &recipient {
        Recipient::Organization(o) => format!("organization {o}"),
        Recipient::Domain(d) => format!("domain {}", d.as_str()),
    };
    note.detail = format!("{name} x{quantity} to {to}, from {}, until {}", show_time(starts_at), show_time(ends_at));
    let g = IssueGrant {
        recipient,
        product_id: product,
        quantity,
        starts_at,
        ends_at,
        reason: "stress".into(),
        actor: None,
    };
    let r = grants::issue_grant(&ctx.db, &g).await;
    if let Ok(id) = &r {
        note.detail.push_str(&format!(" as grant {id}"));
        if note.pool.is_none() {
            note.pool = pool_of_grant(ctx, *id).await?;
        }
    }
    grant_outcome(r, note)
}

/// The default pool of the grant's organization (None while it names none).
async fn pool_of_grant(ctx: &Ctx, grant: i64) -> Result<Option<i64>, Failure> {
    Ok(sqlx::query_scalar(
        "SELECT rp.pool_id FROM core.grants g
         JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.grant_id = $1",
    )
    .bind(grant)
    .fetch_optional(&ctx.db.pool)
    .await?)
}

/// A grant (id, start, pool) of one of `statuses`, not a floor, at random: half the time of a
/// shared organization; a quarter, a grant of the email domain whose organization is being
/// created now or is next (so that the act meets its provisioning); else any.
async fn pick_grant(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
    statuses: &[&str],
) -> Result<Option<(i64, DateTime<Utc>)>, Failure> {
    let statuses: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    let (scope, org) = match rng.below(4) {
        0 | 1 => ("hot", Some(hot_pool(ctx, rng, note).0)),
        2 => ("creating", None),
        _ => ("any", None),
    };
    let next = ctx.domain_seq.load(Ordering::Relaxed);
    let domains: Vec<String> = [next.saturating_sub(1), next].iter().map(|k| domain(*k).as_str().to_string()).collect();
    let rows: Vec<(i64, DateTime<Utc>, Option<i64>)> = sqlx::query_as(
        "SELECT g.grant_id, g.starts_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = ANY($1) AND g.kind <> 'floor'
           AND CASE $2 WHEN 'hot' THEN g.organization_id = $3
                       WHEN 'creating' THEN g.provision_domain = ANY($4)
                       ELSE true END
         ORDER BY g.grant_id DESC LIMIT 40",
    )
    .bind(&statuses)
    .bind(scope)
    .bind(org)
    .bind(&domains)
    .fetch_all(&ctx.db.pool)
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let (grant, starts, pool) = *rng.pick(&rows);
    note.pool = pool;
    Ok(Some((grant, starts)))
}

/// A grant whose date (`column`) comes within `DUE_WITHIN_MS`, waited for: (grant, pool).
async fn due_grant(ctx: &Ctx, rng: &mut Rng, sql: &str) -> Result<Option<(i64, Option<i64>)>, Failure> {
    let rows: Vec<(i64, DateTime<Utc>, Option<i64>)> = sqlx::query_as(AssertSqlSafe(sql.to_string()))
        .bind(DUE_WITHIN_MS as f64 / 1000.0)
        .fetch_all(&ctx.db.pool)
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let (grant, at, pool) = *rng.pick(&rows);
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait + Duration::from_millis(1)).await;
    }
    Ok(Some((grant, pool)))
}

async fn revoke_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((g, _)) = pick_grant(ctx, rng, note, &["active", "replaced", "waiting"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let r = grants::revoke_grant(&ctx.db, g, None, "stress").await;
    note.detail = match &r {
        Ok(head) if *head == g => format!("grant {g} revoked"),
        Ok(head) => format!("grant {g}: its lineage's head grant {head} revoked"),
        Err(_) => format!("grant {g}"),
    };
    grant_outcome(r, note)
}

/// ExpireGrantTx as the sweep calls it, on a grant whose end comes now, racing its job.
async fn expire_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    const DUE: &str = "SELECT g.grant_id, g.ends_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status IN ('active', 'replaced', 'waiting') AND g.ends_at < now() + make_interval(secs => $1)
         ORDER BY g.ends_at LIMIT 8";
    let Some((g, pool)) = due_grant(ctx, rng, DUE).await? else { return Ok(Outcome::Skipped) };
    note.pool = pool;
    note.detail = format!("grant {g}");
    due_outcome(grants::expire_grant(&ctx.db, g).await, note)
}

/// "Start a waiting grant" on a grant whose start comes now, racing its job.
async fn start_waiting_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    const DUE: &str = "SELECT g.grant_id, g.starts_at, rp.pool_id FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'waiting' AND g.organization_id IS NOT NULL
           AND g.starts_at < now() + make_interval(secs => $1) AND (g.ends_at IS NULL OR g.ends_at > now())
         ORDER BY g.starts_at LIMIT 8";
    let Some((g, pool)) = due_grant(ctx, rng, DUE).await? else { return Ok(Outcome::Skipped) };
    note.pool = pool;
    note.detail = format!("grant {g}");
    due_outcome(grants::start_waiting_grant(&ctx.db, g).await, note)
}

/// ManageGrantTx on an active (or replaced) grant: the lineage is extended, open-ended, to an
/// end 0.5-3 s ahead, or an hour ahead.
async fn manage_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((g, _)) = pick_grant(ctx, rng, note, &["active", "replaced"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let now = Utc::now();
    let ends_at = match rng.below(3) {
        0 => None,
        1 => Some(now + ms_ahead(rng, END_AHEAD_MS)),
        _ => Some(now + chrono::Duration::hours(1)),
    };
    let m = ManageGrant {
        starts_at: None,
        ends_at,
        quantity: 1 + rng.below(3) as i32,
        reason: "stress".into(),
        actor: None,
    };
    note.detail = format!("grant {g} x{} until {}", m.quantity, show_time(ends_at));
    let r = grants::manage_grant(&ctx.db, g, &m).await;
    match &r {
        Ok(new) if *new != g => note.detail.push_str(&format!(": extended as grant {new}")),
        Ok(_) => {
            note.detail.push_str(": rescheduled in place (it was waiting)");
            note.taken = Some(StressPath::ExtendWaitingGrant);
        }
        Err(_) => {}
    }
    grant_outcome(r, note)
}

/// ExtendWaitingGrantTx (a manage of a waiting grant): a new start a few hundred ms ahead, or
/// the same start (the form's start left empty); an end after it, or none.
async fn extend_waiting_grant(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some((g, starts)) = pick_grant(ctx, rng, note, &["waiting"]).await? else {
        return Ok(Outcome::Skipped);
    };
    let now = Utc::now();
    let starts_at = (rng.below(2) == 0).then(|| now + ms_ahead(rng, START_AHEAD_MS));
    let from = starts_at.unwrap_or(starts).max(now);
    let ends_at = (rng.below(2) == 0).then(|| from + ms_ahead(rng, END_AHEAD_MS));
    let m = ManageGrant { starts_at, ends_at, quantity: 1 + rng.below(3) as i32, reason: "stress".into(), actor: None };
    note.detail = format!(
        "grant {g} x{} from {} until {}",
        m.quantity,
        if starts_at.is_some() { show_time(starts_at) } else { "its start".into() },
        show_time(ends_at)
    );
    let r = grants::manage_grant(&ctx.db, g, &m).await;
    if let Ok(new) = &r
        && *new != g
    {
        // It started meanwhile, and a manage that keeps the start extends it.
        note.detail.push_str(&format!(": it had started; extended as grant {new}"));
        note.taken = Some(StressPath::ManageGrant);
    }
    grant_outcome(r, note)
}

// Invariants ------------------------------------------------------------------------------------

/// One violated row, and the pool it concerns when there is one.
struct Violation {
    invariant: &'static str,
    pool: Option<i64>,
    message: String,
}

/// Every violated invariant, one message per violating row (empty: all hold).
pub async fn check_invariants(admin: &PgPool) -> anyhow::Result<Vec<String>> {
    Ok(find_violations(admin).await?.into_iter().map(|v| v.message).collect())
}

/// Queries returning (pool, message) per violating row.
const INVARIANT_QUERIES: &[(&str, &str)] = &[
    (
        "(counts) the kept organization counts equal a count of the organizations",
        "SELECT NULL::bigint, format('org type %s: kept %s, counted %s', coalesce(t::text, 'none'), sum(kept), sum(counted))
         FROM (SELECT org_type_id AS t, delta AS kept, 0 AS counted FROM core.organization_counts
               UNION ALL
               SELECT org_type_id, 0, 1 FROM core.organizations) x
         GROUP BY t HAVING sum(kept) <> sum(counted)",
    ),
    (
        "(2) one live position per (pool, ladder)",
        "SELECT pool_id, format('pool %s holds %s live positions on ladder %s', pool_id, count(*), plan_ladder_id)
         FROM core.positions GROUP BY pool_id, plan_ladder_id HAVING count(*) > 1",
    ),
    (
        "(2) a holding conferral has its shape's positions",
        "SELECT c.pool_id, format('holding conferral %s (product %s) has no position on ladder %s at rank %s in pool %s',
                                  c.conferral_id, c.product_id, t.plan_ladder_id, t.rank, c.pool_id)
         FROM core.conferrals c JOIN core.plan_ladder_tiers t ON t.product_id = c.product_id
         WHERE c.state = 'holding'
           AND NOT EXISTS (SELECT 1 FROM core.positions p
                           WHERE p.conferral_id = c.conferral_id AND p.pool_id = c.pool_id
                             AND p.plan_ladder_id = t.plan_ladder_id AND p.rank = t.rank)",
    ),
    (
        "(2) positions only of holding conferrals, within their shape",
        "SELECT p.pool_id, format('pool %s holds a position on ladder %s (rank %s) for conferral %s (%s, product %s), %s',
                                  p.pool_id, p.plan_ladder_id, p.rank, c.conferral_id, c.state, c.product_id,
                                  CASE WHEN c.state <> 'holding' THEN 'which has ended'
                                       WHEN c.pool_id <> p.pool_id THEN 'which belongs to pool ' || c.pool_id
                                       ELSE 'which is not a tier there' END)
         FROM core.positions p JOIN core.conferrals c ON c.conferral_id = p.conferral_id
         WHERE c.state <> 'holding' OR c.pool_id <> p.pool_id
            OR NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                           WHERE t.product_id = c.product_id AND t.plan_ladder_id = p.plan_ladder_id AND t.rank = p.rank)",
    ),
    // A tier removal that grandfathers its holders gives them a legacy grant of the product, off
    // the ladder, and no floor (domain.md: the legacy grant confers what the tier did), so an
    // incumbent of a tier of its type's default ladder holds nothing there until a path that
    // ends something in its pool, or a move, reapplies the default. That vacancy, while the
    // legacy grant (its lineage's head) is active, is by design; any other is a violation.
    (
        "(3) the default ladder is never vacant",
        "SELECT rp.pool_id, format('organization %s (type %s) %s', o.organization_id, t.name,
                                   CASE WHEN rp.pool_id IS NULL THEN 'has no default pool'
                                        ELSE format('holds nothing on its default ladder %s in pool %s',
                                                    t.default_plan_ladder_id, rp.pool_id) END)
         FROM core.organizations o JOIN core.org_types t ON t.org_type_id = o.org_type_id
         LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE EXISTS (SELECT 1 FROM core.plan_ladder_tiers pt
                       WHERE pt.plan_ladder_id = t.default_plan_ladder_id AND pt.rank = 0)
           AND NOT EXISTS (SELECT 1 FROM core.positions ps
                           WHERE ps.pool_id = rp.pool_id AND ps.plan_ladder_id = t.default_plan_ladder_id)
           AND NOT EXISTS (SELECT 1 FROM core.grants lg
                           JOIN core.grants root ON root.grant_id = lg.lineage_id AND root.kind = 'legacy'
                           JOIN core.plan_acts pa ON pa.plan_act_id = root.plan_act_id
                                AND pa.kind = 'tier_removal' AND pa.disposition = 'grandfather'
                           JOIN core.plan_act_details pd ON pd.plan_act_id = pa.plan_act_id
                           WHERE lg.organization_id = o.organization_id AND lg.status = 'active'
                             AND pd.plan_ladder_id = t.default_plan_ladder_id)",
    ),
    // Every path that gives a floor (core.reapply_defaults_if_vacant) gives it only where the
    // default ladder is vacant, and a move ends the floor it takes away: after the drains, no
    // organization holds two.
    (
        "(3) an organization holds at most one active floor grant",
        "SELECT min(rp.pool_id), format('organization %s (type %s) holds %s active floor grants: %s (pool %s)',
                                        o.organization_id, coalesce(t.name, 'none'), count(*),
                                        string_agg(format('grant %s (product %s)', g.grant_id, g.product_id), ', '
                                                   ORDER BY g.grant_id),
                                        coalesce(min(rp.pool_id)::text, 'none'))
         FROM core.grants g JOIN core.organizations o ON o.organization_id = g.organization_id
         LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
         LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE g.kind = 'floor' AND g.status = 'active'
         GROUP BY o.organization_id, t.name HAVING count(*) > 1",
    ),
    (
        "(4) at most one holding conferral per grant",
        "SELECT min(pool_id), format('grant %s has %s holding conferrals', grant_id, count(*))
         FROM core.conferrals WHERE state = 'holding' AND grant_id IS NOT NULL
         GROUP BY grant_id HAVING count(*) > 1",
    ),
    (
        "(4) an active grant holds",
        "SELECT rp.pool_id, format('%s grant %s (product %s) is active but has no holding conferral (pool %s; %s)',
                                   g.kind, g.grant_id, g.product_id, rp.pool_id,
                                   coalesce((SELECT format('its last conferral %s ended: %s', c.conferral_id, c.ended_reason)
                                             FROM core.conferrals c WHERE c.grant_id = g.grant_id
                                             ORDER BY c.conferral_id DESC LIMIT 1), 'never conferred'))
         FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'active'
           AND NOT EXISTS (SELECT 1 FROM core.conferrals c WHERE c.grant_id = g.grant_id AND c.state = 'holding')",
    ),
    (
        "(4) a grant that is not active does not hold",
        "SELECT c.pool_id, format('%s grant %s is %s but conferral %s holds for it in pool %s',
                                  g.kind, g.grant_id, g.status, c.conferral_id, c.pool_id)
         FROM core.grants g JOIN core.conferrals c ON c.grant_id = g.grant_id AND c.state = 'holding'
         WHERE g.status <> 'active'",
    ),
    // (5) There are no usage sources yet (nothing counts sites), so usage is checked for presence
    // and sign only; once sources land, compare `used` with a recount here.
    (
        "(5) a numeric entitlement has a usage row",
        "SELECT e.pool_id, format('pool %s is entitled to %s but has no usage row', e.pool_id, e.resource_key)
         FROM core.pool_entitlements e
         JOIN core.resource_keys k ON k.resource_key = e.resource_key AND k.kind = 'numeric'
         WHERE NOT EXISTS (SELECT 1 FROM core.numeric_entitlement_usage u
                           WHERE u.pool_id = e.pool_id AND u.resource_key = e.resource_key)",
    ),
    (
        "(5) usage is never negative",
        "SELECT pool_id, format('pool %s counts %s used of %s', pool_id, used, resource_key)
         FROM core.numeric_entitlement_usage WHERE used < 0",
    ),
    // Grants. With (4): an active grant holds exactly one conferral, a grant that is not active
    // none. The stress run sweeps (as the schedule's job does) before checking, so (6) allows no
    // grace: a grant live past its end, or waiting past its start, is one neither its job nor the
    // sweep handled.
    (
        "(4) an active grant names an organization",
        "SELECT NULL::bigint, format('%s grant %s is active but names no organization (domain %s)',
                                     kind, grant_id, provision_domain)
         FROM core.grants WHERE status = 'active' AND organization_id IS NULL",
    ),
    (
        "(4) a grant holds in its organization's pool",
        "SELECT c.pool_id, format('conferral %s holds for %s grant %s in pool %s, not a pool of its organization %s',
                                  c.conferral_id, g.kind, g.grant_id, c.pool_id, g.organization_id)
         FROM core.conferrals c JOIN core.grants g ON g.grant_id = c.grant_id
         WHERE c.state = 'holding'
           AND NOT EXISTS (SELECT 1 FROM core.resource_pools rp
                           WHERE rp.pool_id = c.pool_id AND rp.organization_id = g.organization_id)",
    ),
    (
        "(6) no grant is live past its end",
        "SELECT rp.pool_id, format('%s grant %s is %s past its end by %s (pool %s)',
                                   g.kind, g.grant_id, g.status, date_trunc('milliseconds', now() - g.ends_at),
                                   coalesce(rp.pool_id::text, 'none'))
         FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status IN ('active', 'replaced', 'waiting') AND g.ends_at <= now()",
    ),
    (
        "(6) no grant with an organization waits past its start",
        "SELECT rp.pool_id, format('%s grant %s still waits %s after its start (pool %s)',
                                   g.kind, g.grant_id, date_trunc('milliseconds', now() - g.starts_at), rp.pool_id)
         FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'waiting' AND g.organization_id IS NOT NULL AND g.starts_at <= now()
           AND (g.ends_at IS NULL OR g.ends_at > now())",
    ),
    (
        "(7) a lineage has exactly one head",
        "SELECT NULL::bigint, format('the lineage of grant %s has %s heads', l.lineage_id, count(h.grant_id))
         FROM (SELECT DISTINCT lineage_id FROM core.grants) l
         LEFT JOIN core.grants h ON h.lineage_id = l.lineage_id
              AND NOT EXISTS (SELECT 1 FROM core.grants n WHERE n.extends_grant_id = h.grant_id)
         GROUP BY l.lineage_id HAVING count(h.grant_id) <> 1",
    ),
    (
        "(7) an extension is in the lineage of the grant it extends",
        "SELECT NULL::bigint, format('grant %s extends grant %s but is in the lineage of grant %s, not of grant %s',
                                     g.grant_id, p.grant_id, g.lineage_id, p.lineage_id)
         FROM core.grants g JOIN core.grants p ON p.grant_id = g.extends_grant_id
         WHERE g.lineage_id <> p.lineage_id",
    ),
    (
        "(7) at most one live grant per lineage",
        "SELECT min(rp.pool_id), format('the lineage of grant %s has %s live grants: %s', g.lineage_id, count(*),
                                        string_agg(format('grant %s (%s)', g.grant_id, g.status), ', '
                                                   ORDER BY g.grant_id))
         FROM core.grants g
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status IN ('active', 'replaced', 'waiting')
         GROUP BY g.lineage_id HAVING count(*) > 1",
    ),
    (
        "(7) a live grant is its lineage's head",
        "SELECT rp.pool_id, format('%s grant %s is %s but grant %s extends it', g.kind, g.grant_id, g.status, n.grant_id)
         FROM core.grants g JOIN core.grants n ON n.extends_grant_id = g.grant_id
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status IN ('active', 'replaced', 'waiting')",
    ),
    (
        "(8) a domain grant is attached once its domain has an organization",
        "SELECT rp.pool_id, format('grant %s still waits for %s, but organization %s has that domain (pool %s)',
                                   g.grant_id, g.provision_domain, o.organization_id, rp.pool_id)
         FROM core.grants g JOIN core.organizations o ON o.email_domain = g.provision_domain
         LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE g.organization_id IS NULL AND g.status = 'waiting'",
    ),
    (
        "(8) a domain grant is attached to its domain's organization",
        "SELECT rp.pool_id, format('grant %s for %s is attached to organization %s, whose domain is %s (pool %s)',
                                   g.grant_id, g.provision_domain, o.organization_id,
                                   coalesce(o.email_domain, 'none'), rp.pool_id)
         FROM core.grants g JOIN core.organizations o ON o.organization_id = g.organization_id
         LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
         WHERE g.provision_domain IS NOT NULL AND o.email_domain IS DISTINCT FROM g.provision_domain",
    ),
    (
        "(9) an expired grant has exactly one expired event",
        "SELECT rp.pool_id, format('%s grant %s is %s and has %s expired events (pool %s)',
                                   g.kind, g.grant_id, g.status, count(e.event_id), coalesce(rp.pool_id::text, 'none'))
         FROM core.grants g
         LEFT JOIN core.grant_events e ON e.grant_id = g.grant_id AND e.act = 'expired'
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'expired' OR e.event_id IS NOT NULL
         GROUP BY g.grant_id, g.kind, g.status, rp.pool_id
         HAVING count(e.event_id) <> (g.status = 'expired')::int",
    ),
    (
        "(9) a revoked grant has exactly one revoked event",
        "SELECT rp.pool_id, format('%s grant %s is %s and has %s revoked events (pool %s)',
                                   g.kind, g.grant_id, g.status, count(e.event_id), coalesce(rp.pool_id::text, 'none'))
         FROM core.grants g
         LEFT JOIN core.grant_events e ON e.grant_id = g.grant_id AND e.act = 'revoked'
         LEFT JOIN core.resource_pools rp ON rp.organization_id = g.organization_id AND rp.is_default
         WHERE g.status = 'revoked' OR e.event_id IS NOT NULL
         GROUP BY g.grant_id, g.kind, g.status, rp.pool_id
         HAVING count(e.event_id) <> (g.status = 'revoked')::int",
    ),
    // Rule changes. The run waits for the drains before checking (`settle_drains`), so (10)
    // allows no change still draining; with (1), every pool a change owed has its new rules.
    (
        "(10) no rule change is still draining",
        "SELECT min(o.pool_id) FILTER (WHERE o.state <> 'settled'),
                format('change %s (set %s) is still draining: %s pools unsettled (%s failed), the first pool %s',
                       ch.change_id, ch.entitlement_set_id,
                       count(DISTINCT o.pool_id) FILTER (WHERE o.state <> 'settled'),
                       count(DISTINCT o.pool_id) FILTER (WHERE o.state = 'failed'),
                       coalesce((min(o.pool_id) FILTER (WHERE o.state <> 'settled'))::text, 'none'))
         FROM core.entitlement_set_changes ch
         LEFT JOIN core.entitlement_set_change_acts a ON a.change_id = ch.change_id
         LEFT JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
         WHERE ch.state = 'draining'
         GROUP BY ch.change_id, ch.entitlement_set_id",
    ),
    (
        "(10) every obligation of a settled change is settled",
        "SELECT o.pool_id, format('change %s is settled but act %s (%s) is %s to pool %s after %s attempts',
                                  ch.change_id, a.act_id, a.resource_key, o.state, o.pool_id, o.attempts)
         FROM core.entitlement_set_changes ch
         JOIN core.entitlement_set_change_acts a ON a.change_id = ch.change_id
         JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
         WHERE ch.state = 'settled' AND o.state <> 'settled'",
    ),
    (
        "(10) a change has settled_at exactly when it is settled",
        "SELECT NULL::bigint, format('change %s (set %s) is %s but its settled_at is %s',
                                     change_id, entitlement_set_id, state, coalesce(settled_at::text, 'empty'))
         FROM core.entitlement_set_changes WHERE (state = 'settled') <> (settled_at IS NOT NULL)",
    ),
    // core.settle_obligation counts each attempt that changes an obligation: a failure recorded
    // (state failed, last_error set) or the settling (state settled; settling it again finds it
    // settled and changes nothing). So a settled obligation's attempts are its failures + 1.
    // last_error is never cleared, and the row keeps no count of failures apart from attempts,
    // so the check is: no error recorded, exactly 1 attempt; an error recorded, at least 2. More
    // attempts with no error is an obligation settled twice; one attempt with an error, a
    // failure recorded without its attempt. (Two settlings after a failure cannot be told from
    // two failures and a settling.)
    (
        "(10) no obligation settled twice (attempts = failures + 1)",
        "SELECT o.pool_id, format('act %s (%s) of change %s is settled to pool %s after %s attempts with %s',
                                  a.act_id, a.resource_key, a.change_id, o.pool_id, o.attempts,
                                  coalesce('the failure ' || quote_literal(o.last_error) || ' recorded',
                                           'no failure recorded'))
         FROM core.entitlement_set_change_obligations o JOIN core.entitlement_set_change_acts a USING (act_id)
         WHERE o.state = 'settled'
           AND ((o.last_error IS NULL AND o.attempts <> 1) OR (o.last_error IS NOT NULL AND o.attempts < 2))",
    ),
    // Plan acts. The run drains every act to its end, retrying the failed moves of the acts that
    // own their types (`settle_plan_acts`); a failed move of an act that no longer owns its type
    // is superseded by the owner's listing, which lists every organization of the type.
    (
        "(11) every plan act is done",
        "SELECT min(o.pool_id) FILTER (WHERE o.state IN ('pending', 'failed')),
                format('plan act %s (%s, %s) is still %s: %s organizations pending, %s failed, the first pool %s',
                       a.plan_act_id, a.kind, coalesce(a.disposition, 'no disposition'), a.state,
                       count(o.pool_id) FILTER (WHERE o.state = 'pending'),
                       count(o.pool_id) FILTER (WHERE o.state = 'failed'),
                       coalesce((min(o.pool_id) FILTER (WHERE o.state IN ('pending', 'failed')))::text, 'none'))
         FROM core.plan_acts a LEFT JOIN core.plan_act_obligations o ON o.plan_act_id = a.plan_act_id
         WHERE a.state <> 'done'
         GROUP BY a.plan_act_id, a.kind, a.disposition, a.state",
    ),
    (
        "(11) no move is left pending or failed",
        "SELECT o.pool_id, format('plan act %s (%s) left organization %s %s in pool %s after %s attempts%s',
                                  a.plan_act_id, a.kind, o.organization_id, o.state, o.pool_id, o.attempts,
                                  coalesce(': ' || o.last_error, ''))
         FROM core.plan_act_obligations o JOIN core.plan_acts a ON a.plan_act_id = o.plan_act_id
         WHERE o.state IN ('pending', 'failed')",
    ),
    // core.settle_plan_act_obligation (a move's settling) and core.record_plan_act_obligation_failure
    // each add one attempt, and only to a pending obligation; only a Retry
    // (core.requeue_plan_act_obligations, one call per Retry act, each obligation at most once)
    // makes a failed one pending again, and keeps its attempts; a listing's supersession adds
    // none. So an obligation a move settled (migrated, grandfathered, vacant) has one settling
    // and at most one failure per Retry of its act before it: 1 <= attempts <= 1 + retries; and
    // no obligation has more than 1 + retries (a settling on top of a settled one, or a failure
    // recorded on a settled one, would be one more).
    (
        "(12) no move settled twice (1 <= attempts <= 1 + the act's retries)",
        "SELECT o.pool_id, format('plan act %s (%s) has organization %s %s in pool %s after %s attempts, with %s retries of the act',
                                  a.plan_act_id, a.kind, o.organization_id, o.state, o.pool_id, o.attempts, r.n)
         FROM core.plan_act_obligations o JOIN core.plan_acts a ON a.plan_act_id = o.plan_act_id
         CROSS JOIN LATERAL (SELECT count(*) AS n FROM core.plan_acts ra
                             JOIN core.plan_act_details d ON d.plan_act_id = ra.plan_act_id
                             WHERE ra.kind = 'retry' AND (d.detail->>'retry_of')::bigint = o.plan_act_id) r
         WHERE o.attempts > 1 + r.n OR (o.state IN ('migrated', 'grandfathered', 'vacant') AND o.attempts < 1)",
    ),
];

async fn find_violations(admin: &PgPool) -> anyhow::Result<Vec<Violation>> {
    let mut out = vec![];
    // (1) Materialized entitlements equal a fresh computation.
    const FRESH: &str = "(1) materialized entitlements equal a fresh computation";
    let mut conn = admin.acquire().await?;
    for pool in ent_store::pools_out_of_date(&mut conn).await? {
        let stored = ent_store::pool_entitlements(&mut conn, pool).await?;
        let fresh = ent_store::computed_entitlements(&mut conn, pool).await?;
        out.push(Violation {
            invariant: FRESH,
            pool: Some(pool),
            message: format!(
                "{FRESH}: pool {pool} materialized {} but a fresh computation gives {}",
                show_values(&stored),
                show_values(&fresh)
            ),
        });
    }
    for (name, sql) in INVARIANT_QUERIES {
        let rows: Vec<(Option<i64>, String)> = sqlx::query_as(AssertSqlSafe(*sql))
            .fetch_all(&mut *conn)
            .await
            .with_context(|| format!("checking {name}"))?;
        out.extend(rows.into_iter().map(|(pool, message)| Violation {
            invariant: name,
            pool,
            message: format!("{name}: {message}"),
        }));
    }
    Ok(out)
}

fn show_values(v: &[ent_store::EntitlementValue]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|e| match (e.numeric_value, e.flag_value) {
            (Some(n), _) => format!("{}={n}", e.resource_key),
            (_, Some(f)) => format!("{}={f}", e.resource_key),
            _ => format!("{}=?", e.resource_key),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The first violations, then the acts on the first few violated pools, in order.
fn print_violations(violations: &[Violation], events: &[Event]) {
    if violations.is_empty() {
        eprintln!("stress: every invariant holds");
        return;
    }
    let mut by_invariant: BTreeMap<&str, usize> = BTreeMap::new();
    for v in violations {
        *by_invariant.entry(v.invariant).or_default() += 1;
    }
    eprintln!("stress: {} violations:", violations.len());
    for (invariant, n) in &by_invariant {
        eprintln!("  {n:>6}  {invariant}");
    }
    eprintln!("stress: the first:");
    for v in violations.iter().take(PRINTED_VIOLATIONS) {
        eprintln!("  {}", v.message);
    }
    // The sequence behind the first few: the acts that name the grants and conferrals a
    // violation names, else the last acts on its pool.
    for v in violations.iter().take(PRINTED_SEQUENCES) {
        let ids = named_ids(&v.message);
        let mut acts: Vec<&Event> = if ids.is_empty() {
            events.iter().filter(|e| e.pool.is_some() && e.pool == v.pool).collect()
        } else {
            events.iter().filter(|e| ids.iter().any(|(word, n)| mentions(&e.detail, word, *n))).collect()
        };
        acts.sort_by_key(|e| (e.end_ms, e.start_ms));
        let skip = acts.len().saturating_sub(25);
        eprintln!(
            "stress: the acts behind “{}” (by end time{}):",
            v.message,
            if skip > 0 { "; the last 25" } else { "" }
        );
        for e in &acts[skip..] {
            eprintln!("{e}");
        }
    }
}

/// The ("grant" | "conferral" | "change" | "plan act", id) pairs a message names.
fn named_ids(message: &str) -> Vec<(&'static str, i64)> {
    let words: Vec<&str> = message.split(|c: char| c.is_whitespace() || c == '(' || c == ';').collect();
    let mut out = vec![];
    for (i, pair) in words.windows(2).enumerate() {
        let plan = i > 0 && words[i - 1] == "plan";
        for (word, name) in [("grant", "grant"), ("conferral", "conferral"), ("change", "change"), ("act", "plan act")]
        {
            if pair[0] == word
                && (word != "act" || plan)
                && let Ok(n) = pair[1].trim_end_matches([',', ')', ':']).parse::<i64>()
            {
                out.push((name, n));
            }
        }
    }
    out
}

/// Does `detail` name `word n` (and not `word n0`)?
fn mentions(detail: &str, word: &str, n: i64) -> bool {
    let needle = format!("{word} {n}");
    detail.match_indices(&needle).any(|(i, _)| {
        let before_ok = i == 0 || !detail[..i].ends_with(|c: char| c.is_alphanumeric());
        let after_ok = !detail[i + needle.len()..].starts_with(|c: char| c.is_ascii_digit());
        before_ok && after_ok
    })
}

/// For the first deadlocks: every act that overlapped it, so the cycle can be read off.
fn print_deadlock_sequences(events: &[Event]) {
    for d in events.iter().filter(|e| e.outcome == "deadlock").take(PRINTED_SEQUENCES) {
        let by = d.task.map(|t| format!("task {t}")).unwrap_or_else(|| "a job".into());
        eprintln!("stress: acts overlapping the deadlock in {} ({by}):", d.path.name());
        let mut around: Vec<&Event> =
            events.iter().filter(|e| e.start_ms <= d.end_ms && e.end_ms >= d.start_ms).collect();
        around.sort_by_key(|e| (e.start_ms, e.task));
        for e in around {
            eprintln!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_picker_reaches_every_path_but_the_jobs() {
        let mut rng = Rng::new(7);
        let mut seen = BTreeSet::new();
        for _ in 0..10_000 {
            seen.insert(pick_path(&mut rng));
        }
        let picked: BTreeSet<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
        assert_eq!(seen, picked);
    }

    #[test]
    fn the_opening_round_tries_every_picked_path_once_the_drain_and_retry_last() {
        let round = opening_round(&mut Rng::new(11));
        let picked: Vec<StressPath> = StressPath::ALL.into_iter().filter(|p| p.is_picked()).collect();
        assert_eq!(round.len(), picked.len());
        assert_eq!(round.iter().copied().collect::<BTreeSet<_>>(), picked.into_iter().collect::<BTreeSet<_>>());
        let last: BTreeSet<StressPath> = round[round.len() - 2..].iter().copied().collect();
        assert_eq!(last, [StressPath::DrainPlanAct, StressPath::RetryPlanAct].into_iter().collect());
        assert_ne!(round, opening_round(&mut Rng::new(12)), "each task's round has an order of its own");
    }

    #[test]
    fn violations_point_at_the_acts_that_name_their_ids() {
        let m = "(4) x: floor grant 43 (product 4) is active but has no holding conferral (pool 6; its last conferral 120 ended: stress)";
        assert_eq!(named_ids(m), vec![("grant", 43), ("conferral", 120)]);
        assert!(mentions("conferral 120: ended true", "conferral", 120));
        assert!(!mentions("conferral 1205: ended true", "conferral", 120));
        assert!(mentions("Basic x1, floor grant 43", "grant", 43));
        assert!(!mentions("Basic x1 as grant 143", "grant", 43));
        let m = "(11) x: plan act 12 (default_change, migrate) is still running: 1 organizations pending, 0 failed, \
                 the first pool 7; act 5 (fedwiki.active_sites) of change 3";
        assert_eq!(named_ids(m), vec![("plan act", 12), ("change", 3)]);
        assert!(mentions("type 3 from ladder Some(1) to ladder 4: plan act 12, in the request", "plan act", 12));
        assert!(!mentions("requeued by plan act 120", "plan act", 12));
    }

    #[test]
    fn paths_are_named_as_their_declarations() {
        let declared: Vec<&str> = crate::lock_paths::declared().iter().map(|p| p.path).collect();
        for p in StressPath::ALL {
            let undeclared = p.is_job()
                || matches!(
                    p,
                    StressPath::SyncSourceStatus | StressPath::UpdateConferralBounds | StressPath::DrainPlanAct
                );
            assert_eq!(declared.contains(&p.name()), !undeclared, "{}", p.name());
        }
        for p in StressPath::GRANT_PATHS.into_iter().chain(StressPath::PLAN_ACT_PATHS) {
            assert!(StressPath::ALL.contains(&p));
        }
        // Every path is counted under a name of its own.
        let names: BTreeSet<&str> = StressPath::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), StressPath::ALL.len());
    }

    #[test]
    fn the_report_is_one_json_line_in_the_documented_order() {
        let mut paths = BTreeMap::new();
        paths.insert("RegisterProviders".to_string(), PathCount { done: 2, refused: 1 });
        let r = StressReport {
            seconds: 5,
            orgs: 40,
            connections: 6,
            paths,
            deadlocks: 0,
            errors: 0,
            violations: 3,
            seed: 1,
            database: "x".into(),
            first_errors: vec![],
            first_violations: vec!["v".into()],
        };
        assert_eq!(
            r.json_line(),
            r#"{"seconds":5,"orgs":40,"connections":6,"paths":{"RegisterProviders":{"done":2,"refused":1}},"deadlocks":0,"errors":0,"violations":3}"#
        );
        assert!(!r.is_clean());
    }
}
