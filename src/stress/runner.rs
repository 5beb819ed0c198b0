//! The run: the scratch database and the Stripe stand-in, the tasks and the job workers for the
//! time asked, then the drains' end, the sweep, a final reconcile of every subscription, and the
//! invariants.

use super::*;

/// Make the database, fill it, run the paths for `opts.seconds`, check the invariants, and drop
/// the database (unless `keep`).
pub async fn run(config: &Config, opts: StressOptions) -> anyhow::Result<StressReport> {
    anyhow::ensure!(opts.orgs >= 1, "--orgs must be at least 1");
    anyhow::ensure!(opts.connections >= 1, "--connections must be at least 1");
    // One connection per task, one spare for the reads a task makes before its path, and room
    // for the tasks of one drain (DrainChange runs up to that many pools at once) and of one
    // plan act's moves (a default change's or a reorder's in-request drain, or DrainPlanAct).
    let connections = opts.connections as u32 + 2 + rc::DEFAULT_DRAIN_PARALLELISM as u32 + pa::MOVE_PARALLELISM as u32;
    // Every run traces its locks (docs/database-locks.md, "The lock trace"): every connection to
    // the run's database carries the setting, and this process notes the Rust statements' locks.
    // With --default-isolation the database defaults to that level too: every path must run at
    // READ COMMITTED whatever it says.
    crate::db::trace::enable();
    let isolation = opts.default_isolation.map(DefaultIsolation::sql);
    let mut settings = vec![(crate::db::trace::SETTING, "on")];
    if let Some(level) = isolation {
        settings.push(("default_transaction_isolation", level));
    }
    let scratch = ScratchDb::create_with(config, "mc_stress", connections, &settings).await?;
    eprintln!(
        "stress: created database {} (default_transaction_isolation: {})",
        scratch.name,
        isolation.unwrap_or("the server's")
    );
    let result = run_in(config, &opts, &scratch).await;
    if opts.keep {
        scratch.db.close().await;
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

pub(super) async fn run_in(config: &Config, opts: &StressOptions, scratch: &ScratchDb) -> anyhow::Result<StressReport> {
    let db = &scratch.db;
    ent::register_providers(db).await?;

    let seed = opts.seed.unwrap_or_else(|| u64::from_str_radix(&random_hex(8), 16).unwrap_or(1));
    eprintln!(
        "stress: seed {seed}; {} organizations, {} connections, {} s, lock_timeout {} ms",
        opts.orgs,
        opts.connections,
        opts.seconds,
        db.lock_timeout.as_millis()
    );
    let mut rng = Rng::new(seed);
    // The run's own Stripe: a stand-in in this process, which the console's client, the workers'
    // billing jobs and the billing acts all call, and which stops with the run.
    let standin = stripe_standin::StandIn::start(stripe_standin::Config::default())
        .await
        .context("starting the Stripe stand-in")?;
    // And its own farm: the local one, its API only (no `wiki`: the paths never open a site).
    let api = crate::bench::ApiFarm::start("stress", FARM_TIMEOUT).await?;
    // And its own mail server: the project's catcher, which keeps what the account paths send.
    let catcher =
        mail_catcher::MailCatcher::start(mail_catcher::Config::default()).await.context("starting the mail catcher")?;
    let settings = crate::config::MailSettings { smtp_url: Some(catcher.smtp_url()), ..config.mail.clone() };
    let mailer =
        crate::integrations::mail::Mailer::from_settings(&settings)?.context("the catcher's address makes a mailer")?;
    // The key the account acts' links are made under (`acts::on_signup`'s).
    let mail = crate::services::mail::MailContext {
        mailer: Arc::new(mailer),
        tokens: crate::services::tokens::TokenKey::from_session_key(&[7; 64]),
    };
    let result =
        run_billed(config, opts, scratch, seed, &mut rng, &standin, Outside { farm: api.farm.clone(), mail }).await;
    api.stop().await;
    standin.stop().await;
    catcher.stop().await;
    result
}

/// The run's farm and mail server (beside its Stripe stand-in).
struct Outside {
    farm: Arc<crate::integrations::farm::Farm>,
    mail: crate::services::mail::MailContext,
}

async fn run_billed(
    config: &Config,
    opts: &StressOptions,
    scratch: &ScratchDb,
    seed: u64,
    rng: &mut Rng,
    standin: &stripe_standin::StandIn,
    Outside { farm, mail }: Outside,
) -> anyhow::Result<StressReport> {
    let (admin, admin_url, name) = (scratch.admin.clone(), scratch.admin_url.as_str(), scratch.name.as_str());
    let db = scratch.db.clone();
    let base = standin.base_url();
    let standin_addr: std::net::SocketAddr =
        base.trim_start_matches("http://").parse().with_context(|| format!("the stand-in's address {base}"))?;
    let stripe =
        Arc::new(Stripe::connect(STRIPE_KEY, Some(&base), vec![], STRIPE_TIMEOUT).map_err(|e| anyhow::anyhow!("{e}"))?);
    let fixture = build_fixture(&db, &admin, &stripe, opts.orgs, rng).await?;
    // The member who acts on the shared organizations' sites: the demo's.
    let site_member = demo_account_in(&db, demo::MEMBER_EMAIL, fixture.hot.iter().map(|(o, _)| *o), "member").await?;
    seed_site_pairs(&db, &farm, &fixture, site_member).await?;
    // The owner who changes the billed organizations' plans: the demo's operator (the demo
    // member is a plain member of the shared ones, for the sites).
    let plan_owner =
        demo_account_in(&db, demo::OPERATOR_EMAIL, fixture.subscribers.iter().map(|s| s.org), "owner").await?;
    let connected = super::relay::connect(&db).await?;
    let members = members_fixture(&db).await?;

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
    // The outbox processor's pass every 5 s (the reconciles the grant, conferral and plan-act
    // paths ask for), and the billing sweep, whose first pass comes at the start.
    crate::job_registry::register_billing_schedules(&job_db).await?;

    let dns = local_dns::LocalDns::start(local_dns::Config::default()).await.context("starting the local DNS")?;
    let resolver = crate::integrations::dns::Resolver::new(Some(dns.dns_addr()), Duration::from_secs(2))
        .map_err(|e| anyhow::anyhow!("the resolver: {e}"))?;
    let t0: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&admin).await?;
    let started = Instant::now();
    let ctx = Arc::new(Ctx {
        db: db.clone(),
        admin: admin.clone(),
        fx: fixture,
        stripe: stripe.clone(),
        standin: standin_addr,
        farm: farm.clone(),
        // A short activation cooldown, so activations take the workspace lock too; swaps have
        // none, so they meet each other on it.
        farm_settings: crate::config::FarmSettings {
            swap_cooldown: Duration::ZERO,
            activation_cooldown: Duration::from_secs(1),
            ..crate::config::FarmSettings::default()
        },
        site_member,
        dns,
        resolver,
        plan_owner,
        members,
        on_sale: Default::default(),
        connections: connected.connections.clone(),
        relay: connected.relay.clone(),
        sync_cap: config.rule_change_sync_cap,
        holder_cap: config.plan_act_holder_cap,
        quiet: warnings_on_stderr(),
        move_failures_seen: Mutex::new(BTreeSet::new()),
        outbox_failures_seen: Mutex::new(BTreeSet::new()),
        started,
        t0,
        deadline: started + Duration::from_secs(opts.seconds),
        org_seq: AtomicU64::new(0),
        domain_seq: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
        events: Mutex::new(Vec::new()),
    });
    let workers = start_workers(&job_db, config.lock_timeout, &stripe, &farm, &mail);
    run_tasks(&ctx, opts.connections, seed, config.lock_timeout).await;
    settle_plan_acts(&ctx).await;
    settle_drains(&ctx).await;
    stop_workers(&ctx, workers).await;
    sweep(&ctx).await;
    reconcile_every_subscription(&ctx).await;
    final_maintenance(&ctx).await;
    super::relay::settle_relay(&ctx).await;
    if let Err(e) = note_outbox_failures(&ctx).await {
        ctx.tally_error(format!("reading the outbox's failures: {e}"));
    }
    db.close().await;
    job_db.close().await;
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

    let mut violations = find_violations(&admin).await?;
    violations.extend(super::relay::receiver_violations(&ctx, &connected).await);
    for r in connected.receivers {
        r.stop().await;
    }
    print_violations(&violations, &events);

    let observed = observed_order(&admin).await?;
    for f in observed.failures().iter().take(PRINTED_VIOLATIONS) {
        eprintln!("stress: {f}");
    }
    eprintln!(
        "stress: the lock trace: {} transactions, {} locks, {} observed edges, {} of {} spec paths observed",
        observed.transactions,
        observed.locks,
        observed.observed_edges.len(),
        observed.paths_observed.len(),
        crate::lock_paths::SPEC_PATHS.len()
    );

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
        observed_edges: observed.observed_edges,
        undeclared_edges: observed.undeclared_edges,
        lock_cycle: observed.cycle,
        same_table_order_violations: observed.same_table_order_violations,
        paths_observed: observed.paths_observed,
        paths_unobserved: observed.paths_unobserved,
        require_every_spec_path: opts.require_every_spec_path,
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
pub(super) async fn run_tasks(ctx: &Arc<Ctx>, connections: usize, seed: u64, lock_timeout: Duration) {
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
pub(super) struct Workers {
    pub(super) stop: tokio::sync::watch::Sender<bool>,
    pub(super) handles: Vec<tokio::task::JoinHandle<()>>,
    pub(super) grace: Duration,
}

/// Start `JOB_WORKERS` workers with the console's own handlers, billing's included (the
/// reconciles the outbox and the sweep ask for, the invoices' converges). Their log is kept to
/// warnings (a job done is logged at info, hundreds of times a run).
pub(super) fn start_workers(
    db: &Db,
    lock_timeout: Duration,
    stripe: &Arc<Stripe>,
    farm: &Arc<crate::integrations::farm::Farm>,
    mail: &crate::services::mail::MailContext,
) -> Workers {
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
            let farm_jobs = crate::job_registry::FarmJobs::new(farm.clone(), &crate::config::FarmSettings::default());
            let mut handlers = crate::job_registry::handlers_connected(Some(stripe.clone()), Some(farm_jobs));
            handlers.merge(crate::job_registry::mail_handlers(mail.mailer.clone(), mail.tokens.clone()));
            let w = Worker::new(db.clone(), quietly(handlers, &quiet), JOB_CONCURRENCY).with_options(options.clone());
            tokio::spawn(w.run(rx.clone()).with_subscriber(quiet.clone()))
        })
        .collect();
    Workers { stop, handles, grace }
}

/// A log of warnings only, on stderr (stdout carries the report's JSON line), in the command's
/// log format (main refused a bad CONSOLE_LOG_FORMAT before the run) and coloured only on a
/// terminal.
pub(super) fn warnings_on_stderr() -> tracing::Dispatch {
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
pub(super) fn quietly(standard: jobs::Handlers, quiet: &tracing::Dispatch) -> jobs::Handlers {
    let mut h = jobs::Handlers::new();
    for kind in standard.kinds() {
        let Some(handler) = standard.get(kind) else { continue };
        let quiet = quiet.clone();
        h.register_kind(kind, move |ctx, payload| handler(ctx, payload).with_subscriber(quiet.clone()));
    }
    h
}

/// After the tasks: let the workers run until every start and end the tasks set has come (they
/// set them at most a few seconds ahead), so their jobs do that work; then stop them.
pub(super) async fn stop_workers(ctx: &Ctx, workers: Workers) {
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
pub(super) async fn sweep(ctx: &Ctx) {
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

/// After the run and the sweep, with nothing else running: every subscription reconciled with
/// Stripe as it is now, as the outbox reconciles (so the collection pause follows), pass after
/// pass until one changes nothing (a reconcile that ends a
/// provision asks for its organization's other subscriptions again, and may free a ladder for
/// them), so the invariants compare converged state. A pass still changing things after
/// `FINAL_RECONCILE_PASSES` is left to the invariants.
pub(super) async fn reconcile_every_subscription(ctx: &Ctx) {
    let ids: Vec<crate::ids::StripeSubscriptionId> =
        match sqlx::query_scalar("SELECT stripe_subscription_id FROM core.subscriptions ORDER BY subscription_id")
            .fetch_all(&ctx.admin)
            .await
        {
            Ok(ids) => ids,
            Err(e) => return ctx.tally_error(format!("reading the subscriptions after the run: {e}")),
        };
    for pass in 1..=FINAL_RECONCILE_PASSES {
        let mut changed = 0;
        for id in &ids {
            // As the outbox's reconcile: a collection pause in disagreement is applied in Stripe.
            let r = billing::reconcile::apply_subscription_collection(&ctx.db, &ctx.stripe, id);
            match r.with_subscriber(ctx.quiet.clone()).await {
                Ok(Reconciled::Converged { changed: true, .. }) => changed += 1,
                Ok(Reconciled::Converged { .. } | Reconciled::Stale) => {}
                Ok(Reconciled::Unknown) => ctx.tally_error(format!("Stripe does not know {id} after the run")),
                Err(ServiceError::Db(DbError::Deadlock(m))) => {
                    ctx.tally_deadlock(format!("reconciling {id} after the run: {m}"))
                }
                Err(e) => ctx.tally_error(format!("reconciling {id} after the run: {e}")),
            }
        }
        if changed == 0 {
            let passes = if pass == 1 { "one pass".to_string() } else { format!("{pass} passes") };
            eprintln!("stress: the final reconcile of {} subscriptions converged in {passes}", ids.len());
            return;
        }
        eprintln!("stress: the final reconcile's pass {pass} changed {changed} of {} subscriptions", ids.len());
    }
}

/// After the run, with nothing else running and every plan settled: one maintenance run, as the
/// schedule would make next, so the invariants see its outcome (no active site above a pool's
/// limit, no archived site past retention).
pub(super) async fn final_maintenance(ctx: &Ctx) {
    let r = crate::services::fedwiki::maintenance::run_maintenance(&ctx.db, &ctx.farm, SITE_RETENTION)
        .with_subscriber(ctx.quiet.clone())
        .await;
    match r {
        Ok(c) => eprintln!("stress: the final maintenance run: {c:?}"),
        Err(ServiceError::Db(DbError::Deadlock(m))) => ctx.tally_deadlock(format!("the final maintenance run: {m}")),
        Err(e) => ctx.tally_error(format!("the final maintenance run: {e}")),
    }
}

/// After the tasks, with the workers still running: wait (at most `DRAIN_WAIT`) until no rule
/// change is draining. The drain jobs do the work; every tick the run enqueues a drain for each
/// change with a pool due (a failed pool whose next attempt came, a Retry whose job was not
/// enqueued because a drain of the change was running), as the poller does every 30 s. A change
/// still draining after the wait is a violation (the invariants report it).
pub(super) async fn settle_drains(ctx: &Ctx) {
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
pub(super) async fn settle_plan_acts(ctx: &Ctx) {
    let waited = Instant::now();
    let mut passes = 0;
    loop {
        let open: Result<(Vec<PlanActId>, Vec<PlanActId>), sqlx::Error> = async {
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
                Ok(_) | Err(ServiceError::Refused(_) | ServiceError::Db(DbError::LockNotAvailable)) => {}
                Err(e) => ctx.tally_error(format!("retrying plan act {act} after the run: {e}")),
            }
        }
        let acts: BTreeSet<PlanActId> = failed.into_iter().chain(running).collect();
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
pub(super) async fn note_move_failures(ctx: &Ctx, act: Option<PlanActId>) -> Result<(), sqlx::Error> {
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
pub(super) async fn count_drain_parts(ctx: &Ctx) -> anyhow::Result<()> {
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
pub(super) async fn count_obligation_failures(ctx: &Ctx) -> anyhow::Result<()> {
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
pub(super) async fn count_jobs(ctx: &Ctx) -> anyhow::Result<()> {
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
            <crate::services::fedwiki::RunSiteRequest as crate::jobs::Job>::KIND => {
                Some(StressPath::RunSiteRequestActivity)
            }
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

pub(super) async fn server_deadlock_count(admin: &PgPool, name: &str) -> anyhow::Result<u64> {
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

/// A demo account, made a member of each of `orgs` as `role`.
async fn demo_account_in(
    db: &Db,
    email: &str,
    orgs: impl IntoIterator<Item = OrganizationId>,
    role: &str,
) -> anyhow::Result<crate::ids::AccountId> {
    let mut conn = db.pool.acquire().await?;
    let account = crate::store::accounts::account_by_email(&mut conn, email)
        .await?
        .with_context(|| format!("the demo account {email}"))?
        .account_id;
    for org in orgs {
        crate::store::accounts::ensure_membership(&mut conn, org, account, role).await?;
    }
    Ok(account)
}

/// An active and a parked site in each shared organization, so a swap has something to swap
/// from the run's first second.
async fn seed_site_pairs(
    db: &Db,
    farm: &crate::integrations::farm::Farm,
    fixture: &Fixture,
    member: crate::ids::AccountId,
) -> anyhow::Result<()> {
    use crate::services::fedwiki::{self, names::SiteName};
    let settings = crate::config::FarmSettings::default();
    let err = |e: ServiceError| anyhow::anyhow!("seeding the sites: {e}");
    for (org, _) in &fixture.hot {
        let mut made = vec![];
        for name in [format!("home-{org}"), format!("spare-{org}")] {
            let name = SiteName::parse(&name).map_err(|e| anyhow::anyhow!(e))?;
            let id = fedwiki::create_site(db, &settings, member, *org, &name).await.map_err(err)?;
            fedwiki::run_site_request(db, farm, id, true).await.map_err(err)?;
            made.push(name.domain(&settings.domain));
        }
        // With room for both, the spare is parked.
        let spare: (crate::ids::SiteId, String) =
            sqlx::query_as("SELECT site_id, status FROM fedwiki.sites WHERE domain = $1")
                .bind(&made[1])
                .fetch_one(&db.pool)
                .await?;
        if spare.1 == "active" {
            let id = fedwiki::change_status(db, &settings, member, &spare.0, crate::states::RequestKind::Park)
                .await
                .map_err(err)?;
            fedwiki::run_site_request(db, farm, id, true).await.map_err(err)?;
        }
    }
    Ok(())
}

/// The run's lock trace, read back and checked against the declarations and the spec's paths.
pub(super) async fn observed_order(admin: &PgPool) -> anyhow::Result<super::observed::ObservedOrder> {
    let mut conn = admin.acquire().await?;
    let rows = crate::db::trace::read_all(&mut conn).await.context("reading the lock trace")?;
    Ok(super::observed::check(&rows, &crate::lock_paths::declared(), crate::lock_paths::SPEC_PATHS))
}
