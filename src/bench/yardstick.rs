//! The yardstick every benchmark divides by: a pgbench-style TPC-B transaction loop through
//! sqlx, on the same database and at the same concurrency, so a figure is a ratio against what
//! this machine and this server do for a plain OLTP transaction in the same run.

use std::time::{Duration, Instant};

use sqlx::PgPool;

/// Accounts per branch (pgbench's scale uses 100000; this keeps setup short and the rows hot).
const ACCOUNTS_PER_BRANCH: i64 = 100_000;
const TELLERS_PER_BRANCH: i64 = 10;

/// Create the pgbench tables in schema `yardstick` (one branch per client, so clients do not
/// all queue on one branch row, as pgbench's scale would have it).
pub async fn prepare(admin: &PgPool, clients: i64) -> anyhow::Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS yardstick CASCADE;
         CREATE SCHEMA yardstick;
         CREATE TABLE yardstick.branches (bid int PRIMARY KEY, bbalance int NOT NULL, filler char(88));
         CREATE TABLE yardstick.tellers (tid int PRIMARY KEY, bid int NOT NULL, tbalance int NOT NULL, filler char(84));
         CREATE TABLE yardstick.accounts (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL, filler char(84));
         CREATE TABLE yardstick.history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
         INSERT INTO yardstick.branches SELECT b, 0 FROM generate_series(1, {clients}) b;
         INSERT INTO yardstick.tellers SELECT t, (t - 1) / {TELLERS_PER_BRANCH} + 1, 0 FROM generate_series(1, {clients} * {TELLERS_PER_BRANCH}) t;
         INSERT INTO yardstick.accounts SELECT a, (a - 1) / {ACCOUNTS_PER_BRANCH} + 1, 0 FROM generate_series(1, {clients} * {ACCOUNTS_PER_BRANCH}) a;
         ANALYZE yardstick.branches, yardstick.tellers, yardstick.accounts;
         GRANT USAGE ON SCHEMA yardstick TO console_runtime;
         GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA yardstick TO console_runtime;"
    )))
    .execute(admin)
    .await?;
    Ok(())
}

/// The same loop with `synchronous_commit = off` (its own pool of `clients` connections like
/// `pool`'s): the yardstick of a bench whose own work commits without waiting for the disk, so
/// the two compare like for like.
pub async fn run_async_commit(pool: &PgPool, clients: i64, seconds: f64) -> anyhow::Result<f64> {
    let options = (*pool.connect_options()).clone().options([("synchronous_commit", "off")]);
    let async_pool =
        sqlx::postgres::PgPoolOptions::new().max_connections(clients.max(1) as u32).connect_with(options).await?;
    let tps = run(&async_pool, clients, seconds).await;
    async_pool.close().await;
    tps
}

/// Run the TPC-B loop from `clients` connections for `seconds`; transactions per second.
pub async fn run(pool: &PgPool, clients: i64, seconds: f64) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let pool = pool.clone();
        tasks.spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (client as u64 + 1);
            let mut done = 0u64;
            let branch = client + 1;
            while Instant::now() < deadline {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let aid = (branch - 1) * ACCOUNTS_PER_BRANCH + (rng % ACCOUNTS_PER_BRANCH as u64) as i64 + 1;
                let tid = (branch - 1) * TELLERS_PER_BRANCH + ((rng >> 20) % TELLERS_PER_BRANCH as u64) as i64 + 1;
                let delta = ((rng >> 32) % 10001) as i32 - 5000;
                let mut tx = pool.begin().await?;
                sqlx::query("UPDATE yardstick.accounts SET abalance = abalance + $1 WHERE aid = $2")
                    .bind(delta)
                    .bind(aid as i32)
                    .execute(&mut *tx)
                    .await?;
                let _: i32 = sqlx::query_scalar("SELECT abalance FROM yardstick.accounts WHERE aid = $1")
                    .bind(aid as i32)
                    .fetch_one(&mut *tx)
                    .await?;
                sqlx::query("UPDATE yardstick.tellers SET tbalance = tbalance + $1 WHERE tid = $2")
                    .bind(delta)
                    .bind(tid as i32)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("UPDATE yardstick.branches SET bbalance = bbalance + $1 WHERE bid = $2")
                    .bind(delta)
                    .bind(branch as i32)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO yardstick.history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
                )
                .bind(tid as i32)
                .bind(branch as i32)
                .bind(aid as i32)
                .bind(delta)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                done += 1;
            }
            anyhow::Ok(done)
        });
    }
    let mut total = 0u64;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
