//! The `member-console` command line.

use std::{io::Read, net::TcpListener, sync::Arc};

use clap::{Parser, Subcommand};
#[cfg(feature = "stand-ins")]
use member_console::stress;
use member_console::{
    boot::{self, Booted, boot},
    config::{Config, LogFormat},
    db::{locks, sql_functions},
    demo, jobs,
    scratch::ScratchDb,
    services::auth::{Email, NewPassword, ensure_account},
    stand_ins::{self, StandIns},
    stop_signal::StopSignal,
    web,
};
use private_cluster::PrivateCluster;

#[derive(Parser)]
#[command(name = "member-console", about = "Member Console: plans, grants, entitlements and FedWiki sites")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the web server, and the background worker unless --no-worker.
    Serve {
        /// Run the web server alone.
        #[arg(long)]
        no_worker: bool,
        /// Load the demo data at start (and run stand-ins for what is not configured).
        #[arg(long)]
        demo: bool,
        /// Run the stand-ins (Stripe, the local farm, the mail catcher, the local DNS) for what is
        /// not configured, as CONSOLE_STAND_INS=1 does: for trying the console, never with members.
        #[arg(long)]
        stand_ins: bool,
    },
    /// Run the background worker alone.
    Worker {
        /// The stand-ins run in `serve`: run without what is not configured (as
        /// CONSOLE_STAND_INS=1 does), leaving those jobs to serve's own worker.
        #[arg(long)]
        stand_ins: bool,
    },
    /// Apply the database migrations and exit.
    Migrate,
    /// Load the demo data (idempotent) and print the demo accounts.
    Demo,
    /// Create an operator account, or make an existing account an operator with a new password.
    CreateOperator {
        #[arg(long)]
        email: String,
        /// Read the password from standard input instead of asking for it.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Print the per-path lock orders, as docs/database-locks.md shows them.
    LockOrders {
        /// A `stress` run's JSON line (a file): each declared edge shows how many times it was
        /// observed in that run.
        #[arg(long)]
        observed: Option<std::path::PathBuf>,
    },
    /// Print the SQL functions in force, as docs/sql-functions.md shows them: read from a scratch
    /// database on the console's server, migrated, then dropped.
    SqlFunctions,
    /// Benchmarks, each against a scratch database, with the TPC-B yardstick in the same run.
    #[cfg(feature = "stand-ins")]
    Bench {
        #[command(subcommand)]
        which: BenchWhich,
    },
    /// Run the documented paths at random from many connections against a fresh database for a
    /// bounded time, then check the entitlement invariants; prints one JSON line, and exits
    /// non-zero on a deadlock, an unexpected error or a violated invariant.
    #[cfg(feature = "stand-ins")]
    Stress {
        /// How long the paths run.
        #[arg(long)]
        seconds: u64,
        /// Organizations created before the run.
        #[arg(long, default_value_t = stress::DEFAULT_ORGS)]
        orgs: usize,
        /// Concurrent tasks, each on its own connection.
        #[arg(long, default_value_t = stress::DEFAULT_CONNECTIONS)]
        connections: usize,
        /// Seed of the tasks' random choices (random when not given; the run prints it).
        #[arg(long)]
        seed: Option<u64>,
        /// Keep the stress database instead of dropping it.
        #[arg(long)]
        keep: bool,
        /// Set the stress database's default isolation (read-committed, repeatable-read,
        /// serializable): every path must still run at READ COMMITTED.
        #[arg(long, value_parser = stress::DefaultIsolation::parse)]
        default_isolation: Option<stress::DefaultIsolation>,
    },
    /// The private PostgreSQL cluster in CONSOLE_DATA_DIR.
    Pg {
        #[command(subcommand)]
        action: PgAction,
    },
}

#[cfg(feature = "stand-ins")]
#[derive(Subcommand)]
enum BenchWhich {
    /// Every bench once, one after another, and one table of their figures and ratios, with
    /// the machine's two yardsticks (for docs/operations.md).
    All {
        /// A small N for each bench and 3-second yardsticks: a few minutes in all.
        #[arg(long)]
        quick: bool,
    },
    /// A rule change that changes N organizations' entitlements, relayed to the receiver the
    /// project ships until it confirmed every record: the relay's rate against the yardstick.
    Relay {
        #[arg(long, default_value_t = 10_000)]
        orgs: i64,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
    /// A rule change above the sync cap over N carrying pools: commit hold and drain rate.
    RuleChange {
        #[arg(long, default_value_t = 10_000)]
        pools: i64,
        #[arg(long, default_value_t = member_console::services::rule_changes::DEFAULT_DRAIN_PARALLELISM)]
        concurrency: i64,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
    /// A default change with migrate over N organizations of one type: T0's hold and move rate.
    PlanAct {
        #[arg(long, default_value_t = 10_000)]
        orgs: i64,
        /// The yardstick's clients; the drain's parallelism is its own (MOVE_PARALLELISM).
        #[arg(long, default_value_t = member_console::services::plan_acts::MOVE_PARALLELISM)]
        concurrency: i64,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
    /// The HTTP server in process over N organizations: member pages and /readyz under load from
    /// signed-in members, then each operator page on its own.
    Http {
        /// Concurrent keep-alive client connections.
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// How long the load runs: half on member pages, half on /readyz, in alternating phases.
        #[arg(long, default_value_t = 15.0)]
        seconds: f64,
        #[arg(long, default_value_t = 100_000)]
        orgs: i64,
        /// Load only these member pages (repeatable; default: every member page).
        #[arg(long = "page")]
        pages: Vec<String>,
        #[arg(long)]
        keep: bool,
    },
    /// Concurrent site activations over N pools of limit 3 against the local farm's API: the
    /// slot gate's rate against the TPC-B yardstick.
    Slots {
        #[arg(long, default_value_t = 3_000)]
        pools: i64,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
    /// One farm sync pass over N sites that all changed (parked here, active on the local
    /// farm's API): its rate against the TPC-B yardstick on one connection.
    FarmSync {
        #[arg(long, default_value_t = 100_000)]
        sites: i64,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
    /// Signed Stripe events posted to /webhooks/stripe at concurrency 32 until every reconcile
    /// they ask for is done, against the Stripe stand-in.
    Webhooks {
        #[arg(long, default_value_t = 5_000)]
        events: usize,
        /// Distinct subscriptions the events are about.
        #[arg(long, default_value_t = 200)]
        subscriptions: usize,
        #[arg(long, default_value_t = 10.0)]
        yardstick_seconds: f64,
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Subcommand)]
enum PgAction {
    /// Start it (or find it running) and print its administrative URL.
    Start,
    /// Stop it.
    Stop,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Before anything logs: a bad value stops the command at once, by name.
    init_logging(LogFormat::from_env()?);
    match cli.command {
        Command::LockOrders { observed } => {
            let counts = observed.map(|path| observed_counts(&path)).transpose()?;
            print!("{}", locks::render_orders_observed(&member_console::lock_paths::declared(), counts.as_ref()));
            Ok(())
        }
        Command::Pg { action } => pg(action),
        other => tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(on_the_database(other)),
    }
}

/// The observed lock edges of a `stress` run's JSON line (a file): how many times each was seen.
#[cfg(feature = "stand-ins")]
fn observed_counts(
    path: &std::path::Path,
) -> anyhow::Result<std::collections::BTreeMap<(String, String, String), u64>> {
    let text = std::fs::read_to_string(path)?;
    // The JSON line is the file's last line (a run's stderr may precede it).
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(line)?;
    let edges: Vec<stress::observed::ObservedEdge> = serde_json::from_value(report["observed_edges"].clone())?;
    Ok(stress::observed::counts(&edges))
}

#[cfg(not(feature = "stand-ins"))]
fn observed_counts(_: &std::path::Path) -> anyhow::Result<std::collections::BTreeMap<(String, String, String), u64>> {
    anyhow::bail!("this build has no stress run (built without the `stand-ins` feature), so it reads no observed edges")
}

fn init_logging(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // hickory-server logs every query the local DNS answers at info.
                .unwrap_or_else(|_| "info,sqlx=warn,actix_server=warn,hickory_server=warn".into()),
        )
        .with_target(false)
        // Logs to stderr: stdout carries what a command answers (a URL, one line of JSON).
        .with_writer(std::io::stderr)
        .with_ansi(format.ansi_on_stderr());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// What `serve` or `worker` may run, decided from the configuration before anything starts.
enum Allowed {
    Serve(StandIns),
    /// The lines the worker says about what it goes without.
    Worker(Vec<String>),
    Other,
}

/// A command on the database. With no DATABASE_URL it holds the private cluster from before the
/// command to after it, whatever the outcome, and stops it then if it started it (and no other
/// console process uses it): a one-shot command leaves no server running behind it.
async fn on_the_database(command: Command) -> anyhow::Result<()> {
    // First: from here a stop signal is heard wherever the command stands, and the command ends
    // in order, stopping the cluster it started. Not at create-operator's password prompt, which
    // blocks a thread no signal could free: Ctrl-C there ends the process as before (leaving a
    // cluster it started running; `pg stop` stops it).
    let stop = match command {
        Command::CreateOperator { .. } => StopSignal::never(),
        _ => StopSignal::install()?,
    };
    let config = Config::from_env()?;
    // Refused here, before the private cluster starts: a refused serve starts nothing.
    let allowed = match &command {
        Command::Serve { demo, stand_ins, .. } => Allowed::Serve(stand_ins::for_serve(&config, *demo, *stand_ins)?),
        Command::Worker { stand_ins } => Allowed::Worker(stand_ins::for_worker(&config, *stand_ins)?),
        _ => Allowed::Other,
    };
    let cluster = boot::hold_private_cluster(&config).await?;
    let result = if stop.came() {
        // It came while the cluster started (that cannot be cut short): nothing more starts.
        match command {
            Command::Serve { .. } | Command::Worker { .. } => Ok(()),
            _ => Err(interrupted()),
        }
    } else {
        match command {
            // Every phase of theirs ends on a stop signal; serving finishes requests and jobs in
            // flight first.
            Command::Serve { .. } | Command::Worker { .. } | Command::CreateOperator { .. } => {
                run(command, config, allowed, &stop).await
            }
            Command::Migrate | Command::Demo => until_interrupted(&stop, run(command, config, allowed, &stop)).await,
            #[cfg(feature = "stand-ins")]
            Command::Bench { which } => until_interrupted(&stop, bench(which, &config)).await,
            Command::SqlFunctions => until_interrupted(&stop, print_sql_functions(&config)).await,
            // Its own database, not the booted one: it does not go through `run`.
            #[cfg(feature = "stand-ins")]
            Command::Stress { seconds, orgs, connections, seed, keep, default_isolation } => {
                let opts = stress::StressOptions {
                    seconds,
                    orgs,
                    connections,
                    seed,
                    keep,
                    default_isolation,
                    require_every_spec_path: true,
                };
                until_interrupted(&stop, async {
                    let clean = stress::command(opts).await?;
                    anyhow::ensure!(
                        clean,
                        "the stress run found deadlocks, errors, violations or lock-order failures (undeclared edges, a cycle, keys out of order, spec paths never observed)"
                    );
                    Ok(())
                })
                .await
            }
            Command::LockOrders { .. } | Command::Pg { .. } => unreachable!("handled before the runtime starts"),
        }
    };
    boot::release_private_cluster(cluster).await;
    result
}

fn interrupted() -> anyhow::Error {
    anyhow::anyhow!("interrupted by Ctrl-C or SIGTERM")
}

async fn print_sql_functions(config: &Config) -> anyhow::Result<()> {
    let scratch = ScratchDb::create(config, "mc_sql_functions", 2).await?;
    let rendered = async {
        let mut conn = scratch.admin.acquire().await?;
        sql_functions::render(&mut conn).await
    }
    .await;
    let dropped = scratch.drop_database().await;
    print!("{}", rendered?);
    dropped
}

/// A one-shot command until it ends or Ctrl-C or SIGTERM comes. On a signal the command is
/// dropped where it stands (a scratch database it made stays behind), so that the private
/// cluster it started can still be stopped.
async fn until_interrupted(
    stop: &StopSignal,
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    stop.unless_stopped(work).await.unwrap_or_else(|| Err(interrupted()))
}

#[cfg(feature = "stand-ins")]
async fn bench(which: BenchWhich, config: &Config) -> anyhow::Result<()> {
    match which {
        BenchWhich::All { quick } => {
            let r = member_console::bench::all::run(config, &member_console::bench::all::Options { quick }).await?;
            print!("{}", member_console::bench::all::table(&r));
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::RuleChange { pools, concurrency, yardstick_seconds, keep } => {
            anyhow::ensure!(pools >= 1 && concurrency >= 1, "--pools and --concurrency must be at least 1");
            let o = member_console::bench::rule_change::Options { pools, concurrency, yardstick_seconds, keep };
            let r = member_console::bench::rule_change::run(config, &o).await?;
            println!(
                "rule change over {} pools: exclusive hold {:.3} s; drain {:.0} pools/s; yardstick {:.0} tps; ratio {:.2}",
                r.n, r.hold_s, r.settled_per_s, r.yardstick_tps, r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::PlanAct { orgs, concurrency, yardstick_seconds, keep } => {
            anyhow::ensure!(orgs >= 1 && concurrency >= 1, "--orgs and --concurrency must be at least 1");
            let o = member_console::bench::plan_act::Options { orgs, concurrency, yardstick_seconds, keep };
            let r = member_console::bench::plan_act::run(config, &o).await?;
            println!(
                "default change over {} organizations: T0 {:.2} ms (median of {}; {:.2}× T0 at 1000); {} moves in {:.2} s, {:.0} moves/s; yardstick {:.0} tps; ratio {:.2}",
                r.orgs,
                r.t0_s * 1e3,
                r.t0_samples_s.len(),
                r.t0_ratio,
                r.moves,
                r.drain_s,
                r.moves_per_s,
                r.yardstick_tps,
                r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::Http { connections, seconds, orgs, pages, keep } => {
            let member_pages = (!pages.is_empty()).then_some(pages);
            let o = member_console::bench::http::Options { orgs, connections, seconds, keep, member_pages };
            let r = member_console::bench::http::run(config, &o).await?;
            println!(
                "HTTP over {} organizations, {} connections: member pages {:.0}/s p99 {:.2} ms; /readyz {:.0}/s p99 {:.2} ms; ratio {:.2}; slowest operator page {}",
                r.orgs,
                r.connections,
                r.page_rps,
                r.page_p99_ms,
                r.readyz_rps,
                r.readyz_p99_ms,
                r.ratio,
                r.operator_pages_ms
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or_else(String::new, |(p, ms)| format!("{p} {ms:.2} ms"))
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::Slots { pools, yardstick_seconds, keep } => {
            let o = member_console::bench::slots::Options { pools, yardstick_seconds, keep };
            let r = member_console::bench::slots::run(config, &o).await?;
            println!(
                "slots: {} pools at concurrency {}: {} gates at {:.0}/s ({} held, {} refused at the limit); the farm call and record step at {:.0}/s; yardstick {:.0} tps; ratio {:.2}",
                r.pools,
                r.concurrency,
                r.gates,
                r.gates_per_s,
                r.held,
                r.refused_at_limit,
                r.records_per_s,
                r.yardstick_tps,
                r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::FarmSync { sites, yardstick_seconds, keep } => {
            let o = member_console::bench::farm_sync::Options { sites, yardstick_seconds, keep };
            let r = member_console::bench::farm_sync::run(config, &o).await?;
            println!(
                "farm-sync: {} sites in {} pools: {} statuses written in {:.1} s, {:.0} sites/s; yardstick {:.0} tps (one connection); ratio {:.2}",
                r.sites, r.pools, r.statuses_written, r.pass_s, r.sites_per_s, r.yardstick_tps, r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::Relay { orgs, yardstick_seconds, keep } => {
            let o = member_console::bench::relay::Options { orgs, yardstick_seconds, keep };
            let r = member_console::bench::relay::run(config, &o).await?;
            println!(
                "relay: {} organizations changed by a rule change: relayed and confirmed in {:.2} s, {:.0} records/s ({} passes, {} dispatch runs); yardstick {:.0} tps; ratio {:.2}",
                r.orgs, r.relay_s, r.records_per_s, r.relay_passes, r.dispatch_runs, r.yardstick_tps, r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
        BenchWhich::Webhooks { events, subscriptions, yardstick_seconds, keep } => {
            let o = member_console::bench::webhooks::Options { events, subscriptions, yardstick_seconds, keep };
            let r = member_console::bench::webhooks::run(config, &o).await?;
            println!(
                "webhooks: {} events about {} subscriptions at concurrency {}: ingest {:.0}/s; {} reconciles at {:.0}/s; yardstick {:.0} tps; ratio {:.2}",
                r.events,
                r.subscriptions,
                r.concurrency,
                r.ingest_per_s,
                r.reconciles,
                r.reconciled_per_s,
                r.yardstick_tps,
                r.ratio
            );
            println!("{}", serde_json::to_string(&r)?);
        }
    }
    Ok(())
}

/// Left running after `pg start` (that is what it is for) and stopped by `pg stop`, whoever
/// started it and whoever uses it.
fn pg(action: PgAction) -> anyhow::Result<()> {
    let config = Config::from_env()?;
    let cluster = PrivateCluster::ensure_started(&config.data_dir)?;
    boot::say_where_relocated(&cluster);
    match action {
        PgAction::Start => println!("{}", cluster.admin_url("postgres")),
        PgAction::Stop => cluster.stop()?,
    }
    Ok(())
}

async fn run(command: Command, config: Config, allowed: Allowed, stop: &StopSignal) -> anyhow::Result<()> {
    eprintln!("member-console configuration:\n{config}");
    let booted = match command {
        // Migrations and connecting, too, end on a stop signal (a migration cut short is rolled
        // back with its connection).
        Command::Serve { .. } | Command::Worker { .. } => match stop.unless_stopped(boot(config)).await {
            Some(booted) => booted?,
            None => return Ok(()),
        },
        _ => boot(config).await?,
    };
    let result = match (command, allowed) {
        (Command::Serve { no_worker, demo: with_demo, .. }, Allowed::Serve(stand_ins)) => {
            serve(&booted, !no_worker, with_demo, stand_ins, stop).await
        }
        (Command::Worker { .. }, Allowed::Worker(without)) => worker_only(&booted, &without, stop).await,
        (Command::Migrate, _) => {
            println!("migrations are current");
            Ok(())
        }
        (Command::Demo, _) => {
            demo::load_with_community(&booted.db).await?;
            println!("{}", demo::describe());
            Ok(())
        }
        (Command::CreateOperator { email, password_stdin }, _) => {
            create_operator(&booted, &email, password_stdin).await
        }
        _ => unreachable!("serve and worker come with what they may run; the rest are not booted"),
    };
    booted.shutdown().await;
    result
}

/// Start the demo's receiver and point the demo connection at it; a failure is said and skipped.
#[cfg(feature = "stand-ins")]
async fn demo_receiver(db: &member_console::db::Db) -> Option<desired_state_receiver::Receiver> {
    let started = desired_state_receiver::Receiver::start(desired_state_receiver::Config {
        secrets: vec![],
        ..desired_state_receiver::Config::default()
    })
    .await;
    let receiver = match started {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "the demo's receiver could not start (on a free port of 127.0.0.1)");
            return None;
        }
    };
    match demo::load_connection(db, &receiver.push_url()).await {
        Ok(secrets) => {
            if let Err(e) = receiver.set_secrets(&secrets) {
                tracing::warn!(error = %e, "the demo's receiver refused the connection's secret");
            }
            eprintln!("Desired state: the demo connection pushes to the receiver at {}", receiver.url());
        }
        Err(e) => tracing::warn!(error = %e, "the demo's connection could not be loaded"),
    }
    Some(receiver)
}

/// What `serve` has started so far, stopped in reverse order however `serve` ends: a stop
/// signal in any phase, a failure, or the end of serving.
#[derive(Default)]
struct Started {
    billing: Option<boot::ServeStripe>,
    sites: Option<boot::ServeFarm>,
    mail: Option<boot::ServeMail>,
    dns: Option<boot::ServeDns>,
    serving: Option<Serving>,
    #[cfg(feature = "stand-ins")]
    receiver: Option<desired_state_receiver::Receiver>,
}

/// The web server and what runs beside it.
struct Serving {
    handle: actix_web::dev::ServerHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_jobs: tokio::sync::watch::Sender<bool>,
    worker: Option<tokio::task::JoinHandle<()>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Started {
    async fn stop(self) {
        if let Some(s) = self.serving {
            // Requests and jobs in flight finish first (the worker gives back what it cannot).
            let _ = s.stop_jobs.send(true);
            s.handle.stop(true).await;
            let _ = s.server.await;
            if let Some(w) = s.worker {
                let _ = w.await;
            }
            let _ = s.sampler.await;
        }
        #[cfg(feature = "stand-ins")]
        if let Some(r) = self.receiver {
            r.stop().await;
        }
        if let Some(d) = self.dns {
            d.stop().await;
        }
        if let Some(b) = self.billing {
            b.stop().await;
        }
        if let Some(f) = self.sites {
            f.stop().await;
        }
        if let Some(m) = self.mail {
            m.stop().await;
        }
    }
}

async fn serve(
    b: &Booted,
    with_worker: bool,
    with_demo: bool,
    stand_ins: StandIns,
    stop: &StopSignal,
) -> anyhow::Result<()> {
    let mut started = Started::default();
    let result = start_and_serve(b, with_worker, with_demo, stand_ins, stop, &mut started).await;
    started.stop().await;
    result
}

/// Each phase ends on a stop signal (Ok: a stop is how serving ends), leaving in `started` what
/// must be stopped.
async fn start_and_serve(
    b: &Booted,
    with_worker: bool,
    with_demo: bool,
    stand_ins: StandIns,
    stop: &StopSignal,
    started: &mut Started,
) -> anyhow::Result<()> {
    // First, so that a second console on the same address stops at once, loading nothing.
    let listener = TcpListener::bind(b.config.bind).map_err(|e| {
        anyhow::anyhow!("the console could not listen on {} (CONSOLE_BIND moves it): {e}", b.config.bind)
    })?;
    let address = listener.local_addr()?;
    if with_demo {
        let Some(loaded) = stop.unless_stopped(demo::load_with_community(&b.db)).await else { return Ok(()) };
        loaded?;
        eprintln!("{}", demo::describe());
    }
    let Some(billing) = stop.unless_stopped(boot::stripe_for_serve(&b.config, address)).await else { return Ok(()) };
    let stripe = started.billing.insert(billing?).stripe.clone();
    let Some(sites) = stop.unless_stopped(boot::farm_for_serve(&b.config, address)).await else { return Ok(()) };
    let farm = started.sites.insert(sites?).farm.clone();
    let Some(mail) = stop.unless_stopped(boot::mail_for_serve(&b.config, stand_ins.mail)).await else { return Ok(()) };
    let mailer = started.mail.insert(mail?).mailer.clone();
    let Some(dns) = stop.unless_stopped(boot::dns_for_serve(&b.config, stand_ins.dns)).await else { return Ok(()) };
    let dns = started.dns.insert(dns?);
    let zone = member_console::services::fedwiki::registry::ensure_farm_zone(&b.db, &b.config.farm.domain);
    let Some(zone) = stop.unless_stopped(zone).await else { return Ok(()) };
    zone?;
    let connected = web::Connected {
        stripe: stripe.clone(),
        farm: farm.clone(),
        mail: mailer.is_some(),
        local_dns: dns.control_url(),
    };
    let mut config = (*b.config).clone();
    // The demo is open to sign-up unless CONSOLE_SIGNUP says otherwise.
    if with_demo && config.signup.is_none() {
        config.signup = Some(member_console::config::SignupMode::Open);
    }
    // The local DNS, when it runs, is this console's DNS_RESOLVER.
    if let Some(address) = dns.resolver() {
        config.dns_resolver = Some(address);
    }
    let config = Arc::new(config);
    eprintln!("Sign-up: {} (CONSOLE_SIGNUP)", config.signup_mode().as_str());
    let server = web::serve_connected(listener, b.db.clone(), config.clone(), connected)?;
    let handle = server.handle();
    let (stop_jobs, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(member_console::services::observability::run_sampler(
        b.db.clone(),
        jobs::worker::new_worker_id(),
        stop_rx.clone(),
    ));
    let dns_resolver = Arc::new(member_console::integrations::dns::Resolver::for_config(&config));
    let worker = with_worker
        .then(|| tokio::spawn(start_worker(b, stripe.clone(), farm.clone(), mailer, dns_resolver.clone(), stop_rx)));
    started.serving = Some(Serving { handle, server: tokio::spawn(server), stop_jobs, worker, sampler });
    eprintln!("Member Console is listening on http://{address}");
    // The demo's subscriptions go through Stripe (or the stand-in) and its webhooks, so they
    // come once the server answers. Never against a live account.
    if with_demo
        && let Some(s) = &stripe
        && b.config.stripe.secret_key.as_deref().is_none_or(|k| k.starts_with("sk_test_"))
    {
        let Some(loaded) = stop.unless_stopped(demo::load_billing(&b.db, s)).await else { return Ok(()) };
        if let Err(e) = loaded {
            tracing::warn!(error = %e, "the demo's billing could not be loaded");
        }
    }
    if with_demo && let Some(f) = &farm {
        let Some(loaded) = stop.unless_stopped(demo::load_sites(&b.db, f, &b.config.farm)).await else {
            return Ok(());
        };
        if let Err(e) = loaded {
            tracing::warn!(error = %e, "the demo's sites could not be loaded");
        }
    }
    // The demo's domains, verified through its DNS (the local one, when it runs).
    if with_demo {
        let control = started.dns.as_ref().and_then(|d| d.control_url());
        let loaded = demo::load_domains(&b.db, &dns_resolver, control.as_deref());
        let Some(loaded) = stop.unless_stopped(loaded).await else { return Ok(()) };
        if let Err(e) = loaded {
            tracing::warn!(error = %e, "the demo's domains could not be loaded");
        }
    }
    // The demo's connected system: the receiver the project ships, on a free port.
    #[cfg(feature = "stand-ins")]
    if with_demo {
        let Some(receiver) = stop.unless_stopped(demo_receiver(&b.db)).await else { return Ok(()) };
        started.receiver = receiver;
    }
    #[cfg(not(feature = "stand-ins"))]
    if with_demo {
        eprintln!("Desired state: the demo's connected system is left out (this build has no stand-ins)");
    }
    stop.wait().await;
    Ok(())
}

async fn worker_only(b: &Booted, without: &[String], stop: &StopSignal) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stripe = member_console::boot::connect_stripe(&b.config)?;
    // A worker of its own reaches only a configured farm (a local farm lives in `serve`).
    let farm = member_console::boot::connect_farm(&b.config)?;
    // And only a configured mail server (the demo's catcher lives in `serve`).
    let mail = member_console::integrations::mail::Mailer::from_settings(&b.config.mail)?.map(Arc::new);
    for line in without {
        eprintln!("Worker: {line}");
    }
    let dns = Arc::new(member_console::integrations::dns::Resolver::for_config(&b.config));
    let worker = tokio::spawn(start_worker(b, stripe, farm, mail, dns, stop_rx));
    eprintln!("Member Console worker is running");
    stop.wait().await;
    let _ = stop_tx.send(true);
    let _ = worker.await;
    Ok(())
}

fn start_worker(
    b: &Booted,
    stripe: Option<Arc<member_console::integrations::stripe::Stripe>>,
    farm: Option<Arc<member_console::integrations::farm::Farm>>,
    mail: Option<Arc<member_console::integrations::mail::Mailer>>,
    dns: Arc<member_console::integrations::dns::Resolver>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + use<> {
    let db = b.db.clone();
    let farm_settings = b.config.farm.clone();
    let maintenance_every = farm_settings.maintenance_every;
    let tokens = member_console::services::tokens::TokenKey::from_session_key(&b.config.session_key);
    let options = jobs::WorkerOptions {
        concurrency: b.config.worker_concurrency,
        lease: b.config.job_lease,
        ..Default::default()
    };
    async move {
        if let Err(e) = member_console::job_registry::register_standard_schedules(&db).await {
            tracing::error!(error = %e, "could not register the standard schedules");
        }
        if stripe.is_some()
            && let Err(e) = member_console::job_registry::register_billing_schedules(&db).await
        {
            tracing::error!(error = %e, "could not register the billing schedules");
        }
        if farm.is_some() {
            if let Err(e) = member_console::job_registry::register_farm_schedules(&db, maintenance_every).await {
                tracing::error!(error = %e, "could not register the sites' maintenance schedule");
            }
            // Settle the requests no job carries, recount, reconcile the domains.
            match member_console::services::fedwiki::repair::repair_at_start(&db).await {
                Ok(r) => tracing::info!(?r, "the sites were repaired at start"),
                Err(e) => tracing::error!(error = %e, "could not repair the sites at start; the maintenance runs will"),
            }
        }
        if let Err(e) = member_console::job_registry::register_domain_schedules(&db).await {
            tracing::error!(error = %e, "could not register the domains' checks");
        }
        let farm = farm.map(|f| member_console::job_registry::FarmJobs::new(f, &farm_settings));
        let mut handlers = member_console::job_registry::handlers_connected(stripe, farm);
        handlers.merge(member_console::job_registry::domain_handlers(dns));
        if let Some(mailer) = mail {
            handlers.merge(member_console::job_registry::mail_handlers(mailer, tokens));
        }
        jobs::Worker::new(db, handlers, options.concurrency).with_options(options).run(stop).await;
    }
}

async fn create_operator(b: &Booted, email: &str, from_stdin: bool) -> anyhow::Result<()> {
    let email = Email::parse(email).map_err(anyhow::Error::msg)?;
    let password = if from_stdin {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s.trim_end_matches(['\n', '\r']).to_string()
    } else {
        let p = rpassword::prompt_password(format!("Password for {}: ", email.as_str()))?;
        let again = rpassword::prompt_password("Again: ")?;
        anyhow::ensure!(p == again, "the two passwords differ; nothing was changed");
        p
    };
    let password = NewPassword::parse(&password).map_err(anyhow::Error::msg)?;
    ensure_account(&b.db, &email, &password, true).await?;
    println!("{} is an operator", email.as_str());
    Ok(())
}
