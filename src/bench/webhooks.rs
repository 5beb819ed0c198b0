//! `bench webhooks --events N`: Stripe's side of billing at load. The console's server and a
//! worker run in process against a scratch database, with the project's Stripe stand-in; N
//! signed `customer.subscription.updated` events about real stand-in subscriptions are posted to
//! `/webhooks/stripe` from 32 keep-alive connections, and the run lasts until every reconcile
//! they asked for is done. The yardstick is TPC-B through sqlx at the same concurrency, in the
//! same run; `ratio` = ingest_per_s / yardstick_tps (the goal is at least 0.5).

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;

use super::{http::Http, yardstick};
use crate::{
    config::Config,
    demo,
    integrations::stripe::{Stripe, signature},
    jobs::{Worker, WorkerOptions},
    scratch::ScratchDb,
    services::billing::{
        self,
        catalog_sync::{Amount, Currency, NewPrice},
    },
};

/// The webhook senders, as Stripe's delivery fan-out and the issue ask.
pub const CONCURRENCY: usize = 32;
const SECRET: &str = "whsec_bench";
const KEY: &str = "sk_test_bench";

pub struct Options {
    pub events: usize,
    /// Distinct subscriptions the events are about (events cycle over them).
    pub subscriptions: usize,
    pub yardstick_seconds: f64,
    pub keep: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub events: usize,
    pub subscriptions: usize,
    pub concurrency: usize,
    /// Events answered 200 per second of posting.
    pub ingest_per_s: f64,
    /// Reconciles done per second, from the first event until the last reconcile.
    pub reconciled_per_s: f64,
    pub reconciles: i64,
    pub yardstick_tps: f64,
    /// ingest_per_s / yardstick_tps.
    pub ratio: f64,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(o.events >= 1 && o.subscriptions >= 1, "--events and --subscriptions must be at least 1");
    super::in_scratch(config, 48, o.keep, async |s| measure(config, s, o).await).await
}

async fn measure(config: &Config, s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    demo::load(&s.db).await?;
    let standin = stripe_standin::StandIn::start(stripe_standin::Config::default()).await?;
    let stripe = Arc::new(
        Stripe::connect(KEY, Some(&standin.base_url()), vec![SECRET.to_string()], Duration::from_secs(20))
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let subscriptions = seed(s, &standin, &stripe, o.subscriptions).await?;
    eprintln!("bench: {} subscriptions in the stand-in", subscriptions.len());
    // The yardstick first: the server's workers run on runtimes of their own, and the pool's
    // connections they opened do not outlive them.
    yardstick::prepare(&s.admin, CONCURRENCY as i64).await?;
    let tps = yardstick::run(&s.db.pool, CONCURRENCY as i64, o.yardstick_seconds).await?;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    let addr = listener.local_addr()?;
    let server = crate::web::serve_with(listener, s.db.clone(), Arc::new(config.clone()), Some(stripe.clone()))?;
    let handle = server.handle();
    let server_task = tokio::spawn(server);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker = Worker::new(s.db.clone(), crate::job_registry::handlers_with(Some(stripe.clone())), 8)
        .with_options(WorkerOptions { concurrency: 8, ..Default::default() });
    let worker_task = tokio::spawn(async move { worker.run(stop_rx).await });

    let started = Instant::now();
    let ingest = post_events(addr, &subscriptions, o.events).await;
    let ingest_s = started.elapsed().as_secs_f64();
    let ingested = ingest?;
    // Until every reconcile the events asked for is done.
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM integration.jobs WHERE kind = 'reconcile_subscription' AND state IN ('pending', 'running')",
        )
        .fetch_one(&s.admin)
        .await?;
        if open == 0 {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(600), "reconciles still open after 10 minutes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_s = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let _ = worker_task.await;
    handle.stop(true).await;
    let _ = server_task.await;
    standin.stop().await;
    let (reconciles, failed): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'failed')
         FROM integration.jobs WHERE kind = 'reconcile_subscription'",
    )
    .fetch_one(&s.admin)
    .await?;
    anyhow::ensure!(failed == 0, "{failed} reconciles failed");
    let ingest_per_s = ingested as f64 / ingest_s;
    Ok(Report {
        events: o.events,
        subscriptions: subscriptions.len(),
        concurrency: CONCURRENCY,
        ingest_per_s,
        reconciled_per_s: reconciles as f64 / all_s,
        reconciles,
        yardstick_tps: tps,
        ratio: ingest_per_s / tps,
    })
}

/// Organizations of the demo's Community type, each with a Stripe customer paying for Pro.
async fn seed(
    s: &ScratchDb,
    standin: &stripe_standin::StandIn,
    stripe: &Stripe,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let pro = super::id_of(&s.admin, "SELECT product_id FROM core.products WHERE name = $1", "Pro").await?;
    let ty = super::id_of(&s.admin, "SELECT org_type_id FROM core.org_types WHERE name = $1", "Community").await?;
    let pro = crate::ids::ProductId(pro);
    let price = billing::set_price(
        &s.db,
        pro,
        &Amount::parse("30")
            .and_then(|a| NewPrice::new(crate::states::BillingInterval::Month, &a, Currency::parse("eur")?))
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    billing::sync_product(&s.db, pro).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    billing::apply_product_sync(&s.db, stripe, pro, "bench").await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let stripe_price: String = sqlx::query_scalar("SELECT stripe_price_id FROM billing.prices WHERE price_id = $1")
        .bind(price)
        .fetch_one(&s.admin)
        .await?;
    super::floored_organizations(
        &s.admin,
        n as i64,
        ty,
        super::id_of(&s.admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Wiki hosting").await?,
    )
    .await?;
    let orgs: Vec<i64> =
        sqlx::query_scalar("SELECT organization_id FROM core.organizations WHERE name LIKE 'Bench %' ORDER BY 1")
            .fetch_all(&s.admin)
            .await?;
    let addr: SocketAddr = standin.base_url().trim_start_matches("http://").parse()?;
    let mut http = Http::new(addr);
    let mut subs = Vec::with_capacity(n);
    for org in orgs {
        let customer = stripe_post(&mut http, "/v1/customers", &format!("name=Bench+{org}&metadata[organization_id]={org}&payment_method=pm_card_visa&invoice_settings[default_payment_method]=pm_card_visa")).await?;
        sqlx::query("INSERT INTO billing.customers (organization_id, stripe_customer_id) VALUES ($1, $2)")
            .bind(org)
            .bind(&customer)
            .execute(&s.admin)
            .await?;
        let sub = stripe_post(
            &mut http,
            "/v1/subscriptions",
            &format!("customer={customer}&items[0][price]={stripe_price}&items[0][quantity]=1&metadata[organization_id]={org}"),
        )
        .await?;
        subs.push(sub);
    }
    Ok(subs)
}

/// POST a form to the stand-in; the new object's id.
async fn stripe_post(http: &mut Http, path: &str, form: &str) -> anyhow::Result<String> {
    let bearer = format!("Bearer {KEY}");
    let a = http
        .send(
            "POST",
            path,
            &[("Authorization", bearer.as_str())],
            Some(("application/x-www-form-urlencoded", form.as_bytes())),
        )
        .await?;
    anyhow::ensure!(a.status == 200, "{path}: {} {}", a.status, String::from_utf8_lossy(&a.body));
    let v: serde_json::Value = serde_json::from_slice(&a.body)?;
    v["id"].as_str().map(String::from).context("an id")
}

/// Post `n` signed events from CONCURRENCY connections; how many were answered 200.
async fn post_events(addr: SocketAddr, subscriptions: &[String], n: usize) -> anyhow::Result<usize> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriptions = Arc::new(subscriptions.to_vec());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (next, subscriptions) = (next.clone(), subscriptions.clone());
        tasks.spawn(async move {
            let mut http = Http::new(addr);
            let mut ok = 0usize;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(ok);
                }
                let sub = &subscriptions[i % subscriptions.len()];
                let now = chrono::Utc::now().timestamp();
                let body = serde_json::to_vec(&serde_json::json!({
                    "id": format!("evt_bench_{i}"), "object": "event", "type": "customer.subscription.updated",
                    "created": now, "livemode": false, "pending_webhooks": 1,
                    "data": { "object": { "id": sub, "object": "subscription" } }
                }))?;
                let sig = signature::sign(SECRET, now, &body);
                let a = http
                    .send(
                        "POST",
                        "/webhooks/stripe",
                        &[("Stripe-Signature", sig.as_str())],
                        Some(("application/json", &body)),
                    )
                    .await?;
                anyhow::ensure!(a.status == 200, "event {i}: {} {}", a.status, String::from_utf8_lossy(&a.body));
                ok += 1;
            }
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    Ok(total)
}
