//! `member-console stress`: the standing reliability tool. It makes a fresh database, fills it
//! with the demo catalog and many organizations, runs the documented paths at random from many
//! connections at once against a few shared pools for a bounded time, counts what each path did
//! or refused, and then checks the entitlement invariants. A deadlock, an unexpected error or a
//! violated invariant is a bug: the run says so, shows what led to it, and exits non-zero.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, postgres::PgPoolOptions};

use crate::{
    config::{Config, random_hex},
    db::{Db, DbError, TxKind, begin, cluster::PrivateCluster, migrate},
    demo,
    services::{
        catalog::{self as catalog_svc, CatalogError},
        entitlements::{self as ent, EntitlementError, OrgName},
    },
    store::{
        catalog as catalog_store,
        entitlements::{self as ent_store, NewGrant},
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
/// conferral changes that have no declaration of their own by their function names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StressPath {
    CreateOrganization,
    ConferGrant,
    EndConferral,
    MaterializePool,
    RegisterProviders,
    UpdateProduct,
    ChangeProductSet,
    EditSetRules,
    SyncSourceStatus,
    UpdateConferralBounds,
}

impl StressPath {
    pub const ALL: [StressPath; 10] = [
        StressPath::CreateOrganization,
        StressPath::ConferGrant,
        StressPath::EndConferral,
        StressPath::MaterializePool,
        StressPath::RegisterProviders,
        StressPath::UpdateProduct,
        StressPath::ChangeProductSet,
        StressPath::EditSetRules,
        StressPath::SyncSourceStatus,
        StressPath::UpdateConferralBounds,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StressPath::CreateOrganization => ent::CREATE_ORGANIZATION_LOCKS.path,
            StressPath::ConferGrant => ent::CONFER_GRANT_LOCKS.path,
            StressPath::EndConferral => ent::END_CONFERRAL_LOCKS.path,
            StressPath::MaterializePool => ent::MATERIALIZE_POOL_LOCKS.path,
            StressPath::RegisterProviders => ent::REGISTER_PROVIDERS_LOCKS.path,
            StressPath::UpdateProduct => catalog_svc::UPDATE_PRODUCT_LOCKS.path,
            StressPath::ChangeProductSet => catalog_svc::CHANGE_PRODUCT_SET_LOCKS.path,
            StressPath::EditSetRules => catalog_svc::EDIT_SET_RULES_LOCKS.path,
            StressPath::SyncSourceStatus => "sync_source_status",
            StressPath::UpdateConferralBounds => "update_conferral_bounds",
        }
    }

    /// Relative frequency: the pool-changing paths most (they are where the collisions are), the
    /// exclusive-rendezvous paths least (each one stops every materialization while it runs).
    fn weight(self) -> u64 {
        match self {
            StressPath::ConferGrant => 6,
            StressPath::EndConferral => 5,
            StressPath::UpdateConferralBounds | StressPath::SyncSourceStatus | StressPath::MaterializePool => 3,
            StressPath::CreateOrganization | StressPath::UpdateProduct | StressPath::RegisterProviders => 2,
            StressPath::ChangeProductSet | StressPath::EditSetRules => 1,
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
    let root = server_url(config).await?;
    let name = format!("mc_stress_{}", random_hex(6));
    let mut conn = PgConnection::connect(&root)
        .await
        .with_context(|| format!("connecting to {}", crate::config::mask_url(&root)))?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\""))).execute(&mut conn).await?;
    eprintln!("stress: created database {name}");
    let admin_url = with_database(&root, &name)?;
    let result = run_in(config, &opts, &admin_url, &name).await;
    if opts.keep {
        eprintln!("stress: kept database {name} ({})", crate::config::mask_url(&admin_url));
    } else {
        // FORCE: a task abandoned past its grace may still hold a connection.
        let drop = sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")))
            .execute(&mut conn)
            .await;
        if let Err(e) = drop {
            eprintln!("stress: could not drop database {name}: {e}");
        }
    }
    let _ = conn.close().await;
    result
}

/// The server's `postgres` database: the configured server's, or the private cluster's.
async fn server_url(config: &Config) -> anyhow::Result<String> {
    match &config.database_url {
        Some(u) => with_database(u, "postgres"),
        None => {
            let dir = config.data_dir.clone();
            let cluster = tokio::task::spawn_blocking(move || PrivateCluster::ensure_started(&dir)).await??;
            Ok(cluster.admin_url("postgres"))
        }
    }
}

fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    let mut u = url::Url::parse(url).context("DATABASE_URL is not a URL")?;
    u.set_path(&format!("/{database}"));
    Ok(u.to_string())
}

async fn run_in(config: &Config, opts: &StressOptions, admin_url: &str, name: &str) -> anyhow::Result<StressReport> {
    let admin = PgPoolOptions::new().max_connections(4).connect(admin_url).await?;
    migrate::run(&admin, admin_url, &config.runtime_password).await?;
    // One connection per task, and one spare for the reads a task makes before its path.
    let pool = PgPoolOptions::new()
        .max_connections(opts.connections as u32 + 2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(migrate::runtime_options(admin_url, &config.runtime_password)?)
        .await
        .context("connecting as console_runtime")?;
    let mut db = Db::new(pool);
    db.lock_timeout = config.lock_timeout;
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

    let started = Instant::now();
    let ctx = Arc::new(Ctx {
        db: db.clone(),
        admin: admin.clone(),
        fx: fixture,
        started,
        deadline: started + Duration::from_secs(opts.seconds),
        org_seq: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
        events: Mutex::new(Vec::new()),
    });
    run_tasks(&ctx, opts.connections, seed, config.lock_timeout).await;
    db.pool.close().await;

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
    admin.close().await;

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
}

const ADDON: &str = "Stress add-on";
const ADDON_RENAMED: &str = "Stress add-on (renamed)";

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
    catalog_svc::edit_set_rules(db, set_b, &rules(&[("fedwiki.active_sites", "5"), ("support.priority", "yes")]))
        .await?;

    let community = org_type_id(admin, "Community").await?;
    let business = org_type_id(admin, "Business").await?;
    let org_types = vec![Some(community), Some(business), Some(community), None];
    eprintln!("stress: creating {orgs} organizations");
    let mut hot = vec![];
    for i in 0..orgs {
        let name = OrgName::parse(&format!("Stress organization {i}")).map_err(anyhow::Error::msg)?;
        let created = ent::create_organization(db, &name, org_types[i % org_types.len()]).await?;
        if hot.len() < HOT_ORGS {
            hot.push((created.organization_id, created.pool_id));
        }
    }
    let mut subscriptions = vec![];
    for (i, (org, pool)) in hot.iter().take(SUBSCRIPTIONS).enumerate() {
        // Business organizations default to Support: a Priority support subscription sits on
        // their default ladder, as Basic does on a Community organization's.
        let product = if org_types[i % org_types.len()] == Some(business) { &grantable[4] } else { &grantable[1] };
        subscriptions.push(subscribe(db, admin, *org, *pool, product.0, rng).await?);
    }
    Ok(Fixture { hot, grantable, org_types, addon, uncarried, uncarried_sets: [set_a, set_b], subscriptions })
}

fn rules(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A product with a set of its own (named as the product) holding `rules`.
async fn product_with_rules(db: &Db, name: &str, r: &[(&str, &str)], published: bool) -> anyhow::Result<i64> {
    let set = catalog_svc::create_entitlement_set(db, name).await?;
    catalog_svc::edit_set_rules(db, set, &rules(r)).await?;
    Ok(catalog_svc::create_product(db, name, Some(set), published).await?)
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
    started: Instant,
    deadline: Instant,
    org_seq: AtomicU64,
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
    task: usize,
    path: StressPath,
    pool: Option<i64>,
    detail: String,
    outcome: &'static str,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  {:>7}..{:<7} ms task {:<2} {:<38} pool {:<6} {:<8} {}",
            self.start_ms,
            self.end_ms,
            self.task,
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
            DbError::Deadlock => Failure::Deadlock(e.to_string()),
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
}

impl Ctx {
    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn record(&self, task: usize, path: StressPath, start_ms: u64, note: Note, result: Result<Outcome, Failure>) {
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
                task,
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
}

/// One task: paths at random until the deadline.
async fn task(ctx: Arc<Ctx>, id: usize, mut rng: Rng) {
    while Instant::now() < ctx.deadline {
        let path = pick_path(&mut rng);
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
        StressPath::EditSetRules => edit_set_rules(ctx, rng, note).await,
        StressPath::SyncSourceStatus => sync_source_status(ctx, rng, note).await,
        StressPath::UpdateConferralBounds => update_conferral_bounds(ctx, rng, note).await,
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
    let r = ent::create_organization(&ctx.db, &name, ty).await;
    if let Ok(c) = &r {
        note.pool = Some(c.pool_id);
        if let Some(g) = c.floor_grant_id {
            note.detail.push_str(&format!(", floor grant {g}"));
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

async fn edit_set_rules(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let set = *rng.pick(&ctx.fx.uncarried_sets);
    let sites = (1 + rng.below(9)).to_string();
    let priority = *rng.pick(&["yes", "no", ""]);
    note.detail = format!("set {set}: sites {sites}, priority {priority:?}");
    let submitted = rules(&[("fedwiki.active_sites", &sites), ("support.priority", priority)]);
    catalog_outcome(catalog_svc::edit_set_rules(&ctx.db, set, &submitted).await)
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
                           WHERE ps.pool_id = rp.pool_id AND ps.plan_ladder_id = t.default_plan_ladder_id)",
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

/// The ("grant" | "conferral", id) pairs a message names.
fn named_ids(message: &str) -> Vec<(&'static str, i64)> {
    let words: Vec<&str> = message.split(|c: char| c.is_whitespace() || c == '(' || c == ';').collect();
    let mut out = vec![];
    for pair in words.windows(2) {
        for word in ["grant", "conferral"] {
            if pair[0] == word {
                if let Ok(n) = pair[1].trim_end_matches([',', ')', ':']).parse::<i64>() {
                    out.push((word, n));
                }
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
        eprintln!("stress: acts overlapping the deadlock in {} (task {}):", d.path.name(), d.task);
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
    fn the_picker_reaches_every_path() {
        let mut rng = Rng::new(7);
        let mut seen = BTreeSet::new();
        for _ in 0..10_000 {
            seen.insert(pick_path(&mut rng));
        }
        assert_eq!(seen.len(), StressPath::ALL.len());
    }

    #[test]
    fn violations_point_at_the_acts_that_name_their_ids() {
        let m = "(4) x: floor grant 43 (product 4) is active but has no holding conferral (pool 6; its last conferral 120 ended: stress)";
        assert_eq!(named_ids(m), vec![("grant", 43), ("conferral", 120)]);
        assert!(mentions("conferral 120: ended true", "conferral", 120));
        assert!(!mentions("conferral 1205: ended true", "conferral", 120));
        assert!(mentions("Basic x1, floor grant 43", "grant", 43));
        assert!(!mentions("Basic x1 as grant 143", "grant", 43));
    }

    #[test]
    fn paths_are_named_as_their_declarations() {
        let declared: Vec<&str> = crate::db::locks::declared().iter().map(|p| p.path).collect();
        for p in StressPath::ALL {
            let by_function = matches!(p, StressPath::SyncSourceStatus | StressPath::UpdateConferralBounds);
            assert_eq!(declared.contains(&p.name()), !by_function, "{}", p.name());
        }
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
