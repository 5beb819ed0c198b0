//! The test harness: a real PostgreSQL, a fresh database per test cloned from a migrated
//! template, and helpers that prove one transaction waits on another.

pub mod acts;
pub mod browser;
pub mod dns;
pub mod farm;
pub mod locks;
pub mod pages;
pub mod stripe;
pub mod worker;
use std::time::{Duration, Instant};

use member_console::db::{Db, migrate};
use sqlx::{
    Connection, Execute, Executor, FromRow, PgConnection, PgPool, Postgres,
    pool::PoolConnection,
    postgres::{PgArguments, PgPoolOptions, PgQueryResult, PgRow},
    query::{Query, QueryAs, QueryScalar},
};

/// The password tests give `console_runtime` (the role is cluster-wide).
pub const TEST_RUNTIME_PASSWORD: &str = "console-runtime-test";

/// The server every test uses: `DATABASE_URL` (the test command sets it), or a private cluster
/// under `target/` when it is unset, so `cargo nextest run` works on its own.
pub fn root_admin_url() -> String {
    if let Ok(u) = std::env::var("DATABASE_URL")
        && !u.is_empty()
    {
        return u;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-pg");
    let cluster = private_cluster::PrivateCluster::ensure_started(&dir)
        .unwrap_or_else(|e| panic!("no DATABASE_URL and the private cluster did not start: {e}"));
    cluster.admin_url("postgres")
}

/// The configuration a command of the binary would read, on the server at `root`, its data in a
/// scratch folder named after `what`. The harness's runtime password: the role is cluster-wide,
/// and another password would be set on it under the other tests' feet.
pub fn command_config(root: &str, what: &str) -> member_console::config::Config {
    let dir = std::env::temp_dir().join(format!("mc-{what}-{}", member_console::config::random_hex(6)));
    member_console::config::Config::from_lookup(|k| match k {
        "DATABASE_URL" => Some(root.to_string()),
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(TEST_RUNTIME_PASSWORD.into()),
        _ => None,
    })
    .unwrap()
}

/// `url` with its database replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let mut u = url::Url::parse(url).expect("a database URL");
    u.set_path(&format!("/{database}"));
    u.to_string()
}

fn template_name() -> String {
    // Named after the migrations it holds, so a changed migration makes a new template.
    let mut h: u64 = 0xcbf29ce484222325;
    for m in migrate::MIGRATOR.iter() {
        for b in m.version.to_le_bytes().iter().chain(m.checksum.iter()) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    // And after what the harness adds to it (pgrowlocks).
    for b in b"pgrowlocks" {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("mc_template_{h:016x}")
}

async fn ensure_template(root: &str) -> String {
    let name = template_name();
    let mut conn = PgConnection::connect(root).await.expect("connect to the test server");
    // Session-level lock in the harness only: one test process builds the template.
    sqlx::query("SELECT pg_advisory_lock(hashtext('member-console test template'))").execute(&mut conn).await.unwrap();
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(&name)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    if !exists {
        let building = format!("{name}_building");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)")))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{building}\""))).execute(&mut conn).await.unwrap();
        let url = with_database(root, &building);
        let admin = PgPoolOptions::new().max_connections(2).connect(&url).await.unwrap();
        migrate::run(&admin, &url, TEST_RUNTIME_PASSWORD).await.expect("migrations apply to a fresh database");
        // The row-level lock tests read held row locks with pgrowlocks (contrib): created here, in
        // the test template only, as the administrator; never by a migration.
        sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS pgrowlocks").execute(&admin).await.unwrap();
        admin.close().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ALTER DATABASE \"{building}\" RENAME TO \"{name}\"")))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::query("SELECT pg_advisory_unlock(hashtext('member-console test template'))")
        .execute(&mut conn)
        .await
        .unwrap();
    name
}

/// A fresh, migrated database of this test's own; dropped when the value is dropped.
pub struct TestDb {
    pub name: String,
    pub root_url: String,
    pub admin_url: String,
    /// Connected as `console_runtime`, as the program is.
    pub db: Db,
    /// Connected as the administrator, for inspecting `pg_locks` and setting up.
    pub admin: PgPool,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let root = root_admin_url();
        let template = ensure_template(&root).await;
        let name = format!("mc_test_{}", member_console::config::random_hex(6));
        let mut conn = PgConnection::connect(&root).await.unwrap();
        let mut tries = 0;
        loop {
            let sql = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
            match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await {
                Ok(_) => break,
                // Another test is cloning the same template at this instant.
                Err(e) if tries < 50 && e.to_string().contains("being accessed by other users") => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("could not create the test database: {e}"),
            }
        }
        let admin_url = with_database(&root, &name);
        let admin = PgPoolOptions::new().max_connections(4).connect(&admin_url).await.unwrap();
        migrate::harden_database(&admin).await.unwrap();
        let runtime = migrate::runtime_options(&admin_url, TEST_RUNTIME_PASSWORD).unwrap();
        let pool = PgPoolOptions::new().max_connections(10).connect_with(runtime).await.unwrap();
        let mut db = Db::new(pool);
        db.lock_timeout = Duration::from_secs(5);
        TestDb { name, root_url: root, admin_url, db, admin }
    }

    /// A handle whose connections write the lock trace (`core.lock_trace`), with tracing turned on
    /// in this process (nextest runs each test in a process of its own).
    pub async fn traced_db(&self) -> Db {
        member_console::db::trace::enable();
        let runtime = member_console::db::trace::options(
            migrate::runtime_options(&self.admin_url, TEST_RUNTIME_PASSWORD).unwrap(),
            None,
        );
        let pool = PgPoolOptions::new().max_connections(4).connect_with(runtime).await.unwrap();
        let mut db = Db::new(pool);
        db.lock_timeout = Duration::from_secs(5);
        db
    }

    /// Run `q` as the administrator and return its one row.
    pub async fn one<'q, O, Q: Rows<'q, O>>(&self, q: Q) -> O {
        self.admin.fetch_one(q).await.and_then(Q::decode).unwrap_or_else(|e| panic!("admin query failed: {e}"))
    }

    /// Run `q` as the administrator and return its row, if any.
    pub async fn optional<'q, O, Q: Rows<'q, O>>(&self, q: Q) -> Option<O> {
        let row = self.admin.fetch_optional(q).await;
        row.and_then(|r| r.map(Q::decode).transpose()).unwrap_or_else(|e| panic!("admin query failed: {e}"))
    }

    /// Run `q` as the administrator and return all its rows.
    pub async fn all<'q, O, Q: Rows<'q, O>>(&self, q: Q) -> Vec<O> {
        let rows = self.admin.fetch_all(q).await;
        rows.and_then(|r| r.into_iter().map(Q::decode).collect()).unwrap_or_else(|e| panic!("admin query failed: {e}"))
    }

    /// Execute `q` as the administrator.
    pub async fn run(&self, q: Query<'_, Postgres, PgArguments>) -> PgQueryResult {
        q.execute(&self.admin).await.unwrap_or_else(|e| panic!("admin statement failed: {e}"))
    }

    /// A connection of the run-time role of its own, outside the pool (a "transaction A").
    pub async fn runtime_conn(&self) -> PgConnection {
        let opts = migrate::runtime_options(&self.admin_url, TEST_RUNTIME_PASSWORD).unwrap();
        PgConnection::connect_with(&opts).await.unwrap()
    }

    /// The same with a transaction begun, and its backend: the "A" a lock test leaves open.
    pub async fn runtime_begin(&self) -> (PgConnection, i32) {
        let mut a = self.runtime_conn().await;
        let pid = backend_pid(&mut a).await;
        sqlx::query("BEGIN").execute(&mut a).await.unwrap();
        (a, pid)
    }
}

/// A query built with sqlx whose rows are `O` (`query_as`, `query_scalar`), for `TestDb::one`,
/// `optional` and `all`.
pub trait Rows<'q, O>: Execute<'q, Postgres> + 'q {
    fn decode(row: PgRow) -> sqlx::Result<O>;
}

impl<'q, O> Rows<'q, O> for QueryAs<'q, Postgres, O, PgArguments>
where
    O: Send + 'q + for<'r> FromRow<'r, PgRow>,
{
    fn decode(row: PgRow) -> sqlx::Result<O> {
        O::from_row(&row)
    }
}

impl<'q, O> Rows<'q, O> for QueryScalar<'q, Postgres, O, PgArguments>
where
    O: Send + 'q,
    (O,): for<'r> FromRow<'r, PgRow>,
{
    fn decode(row: PgRow) -> sqlx::Result<O> {
        <(O,)>::from_row(&row).map(|(o,)| o)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (root, name) = (self.root_url.clone(), self.name.clone());
        // Drop runs outside async; a thread of its own drops the database.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                if let Ok(mut c) = PgConnection::connect(&root).await {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
                }
            })
        })
        .join();
    }
}

pub async fn backend_pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(conn).await.unwrap()
}

/// An administrator's connection that ran `sql` in a transaction it leaves open (a row taken FOR
/// UPDATE, a table locked): the "A" a lock test pauses others on. Returns it and its backend; end
/// it with COMMIT or ROLLBACK, or drop it.
pub async fn hold_open(t: &TestDb, sql: &str) -> (PoolConnection<Postgres>, i32) {
    let mut a = t.admin.acquire().await.unwrap();
    let pid = backend_pid(&mut a).await;
    sqlx::query("BEGIN").execute(&mut *a).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut *a).await.unwrap();
    (a, pid)
}

/// Hold `table`'s lock in an open transaction: whatever reads or writes it next waits.
pub async fn pause_on(t: &TestDb, table: &str) -> (PoolConnection<Postgres>, i32) {
    hold_open(t, &format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).await
}

/// The same in SHARE mode: reads pass, the next write waits.
pub async fn pause_writes_on(t: &TestDb, table: &str) -> (PoolConnection<Postgres>, i32) {
    hold_open(t, &format!("LOCK TABLE {table} IN SHARE MODE")).await
}

/// Wait until `check` holds, polling every 20 ms; panics after `within` with `what` and `log`
/// (a process's log, say).
pub async fn wait_until<F: AsyncFn() -> bool>(what: &str, within: Duration, log: impl Fn() -> String, check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}\n{}", log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until some backend of `database` is blocked by `blocker_pid` and return its pid: the
/// proof that "B waits on A". Panics after 10 s.
pub async fn wait_for_waiter(admin: &PgPool, database: &str, blocker_pid: i32) -> i32 {
    let start = Instant::now();
    loop {
        let waiter: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND $2 = ANY (pg_blocking_pids(pid)) LIMIT 1",
        )
        .bind(database)
        .bind(blocker_pid)
        .fetch_optional(admin)
        .await
        .unwrap();
        if let Some(pid) = waiter {
            return pid;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "nothing waited on backend {blocker_pid} within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Is anything in `database` waiting on `blocker_pid` right now?
pub async fn anyone_waits_on(admin: &PgPool, database: &str, blocker_pid: i32) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND $2 = ANY (pg_blocking_pids(pid)))",
    )
    .bind(database)
    .bind(blocker_pid)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// The granted locks of one backend, as (locktype, relation name or advisory key, mode).
pub async fn granted_locks(admin: &PgPool, pid: i32) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT locktype,
                CASE WHEN locktype = 'advisory'
                     THEN ((classid::bigint << 32) | objid::bigint)::text
                     ELSE coalesce(relation::regclass::text, '') END,
                mode
         FROM pg_locks WHERE pid = $1 AND granted AND locktype IN ('advisory', 'relation')",
    )
    .bind(pid)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// The kinds (`locktype`) of the locks backend `pid` holds or waits for on `relation` in this
/// database.
pub async fn lock_types_on(admin: &PgPool, pid: i32, relation: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT l.locktype FROM pg_locks l JOIN pg_database d ON d.oid = l.database
         WHERE l.pid = $1 AND d.datname = current_database() AND l.relation = $2::text::regclass",
    )
    .bind(pid)
    .bind(relation)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// A running console (web server, no worker) on a free port, against a test database. A clone is
/// another handle to the same server.
#[derive(Clone)]
pub struct TestApp {
    pub base: String,
    pub handle: actix_web::dev::ServerHandle,
}

impl TestApp {
    pub async fn spawn(t: &TestDb) -> TestApp {
        Self::spawn_with(t, |_| {}).await
    }

    /// With Stripe (the stand-in) connected, as `serve` connects it.
    pub async fn spawn_with_stripe(
        t: &TestDb,
        stripe: std::sync::Arc<member_console::integrations::stripe::Stripe>,
    ) -> TestApp {
        Self::spawn_inner(t, |_| {}, Some(stripe)).await
    }

    pub async fn spawn_with(t: &TestDb, tweak: impl FnOnce(&mut member_console::config::Config)) -> TestApp {
        Self::spawn_inner(t, tweak, None).await
    }

    /// With Stripe and the farm (the stand-in, the local farm) connected, as `serve` connects them.
    pub async fn spawn_connected(
        t: &TestDb,
        stripe: Option<std::sync::Arc<member_console::integrations::stripe::Stripe>>,
        farm: Option<std::sync::Arc<member_console::integrations::farm::Farm>>,
    ) -> TestApp {
        Self::spawn_full(t, |_| {}, member_console::web::Connected { stripe, farm, mail: false, local_dns: None }).await
    }

    async fn spawn_inner(
        t: &TestDb,
        tweak: impl FnOnce(&mut member_console::config::Config),
        stripe: Option<std::sync::Arc<member_console::integrations::stripe::Stripe>>,
    ) -> TestApp {
        Self::spawn_full(t, tweak, member_console::web::Connected { stripe, farm: None, mail: false, local_dns: None })
            .await
    }

    async fn spawn_full(
        t: &TestDb,
        tweak: impl FnOnce(&mut member_console::config::Config),
        connected: member_console::web::Connected,
    ) -> TestApp {
        let dir = std::env::temp_dir().join(format!("mc-test-{}", t.name));
        let mut config = member_console::config::Config::from_lookup(|k| match k {
            "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
            "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
            "CONSOLE_RUNTIME_DB_PASSWORD" => Some(TEST_RUNTIME_PASSWORD.into()),
            _ => None,
        })
        .unwrap();
        tweak(&mut config);
        let config = std::sync::Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = member_console::web::serve_connected(listener, t.db.clone(), config.clone(), connected).unwrap();
        let handle = server.handle();
        tokio::spawn(server);
        TestApp { base, handle }
    }

    /// A browser-like client: keeps cookies, does not follow redirects (tests look at them).
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// GET a page and return its CSRF token (from the layout's meta tag).
    pub async fn csrf(&self, client: &reqwest::Client, path: &str) -> String {
        let html = client.get(self.url(path)).send().await.unwrap().text().await.unwrap();
        csrf_from(&html).unwrap_or_else(|| panic!("no csrf token on {path}: {html}"))
    }

    /// Sign in through the form, as a person would; returns the response.
    pub async fn sign_in(&self, client: &reqwest::Client, email: &str, password: &str) -> reqwest::Response {
        let token = self.csrf(client, "/login").await;
        post_sign_in(client, &self.url("/login"), email, password, &token).await
    }
}

/// Post the sign-in form to `login` (a full URL) with the CSRF token the client was given.
pub async fn post_sign_in(
    client: &reqwest::Client,
    login: &str,
    email: &str,
    password: &str,
    token: &str,
) -> reqwest::Response {
    client.post(login).form(&[("email", email), ("password", password), ("csrf_token", token)]).send().await.unwrap()
}

pub fn csrf_from(html: &str) -> Option<String> {
    let start = html.find("name=\"csrf-token\" content=\"")? + "name=\"csrf-token\" content=\"".len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].to_string())
}

/// A set's rules as the rules form sends them: key → what was written (blank: no rule).
pub fn rules(
    pairs: &[(&str, &str)],
) -> std::collections::BTreeMap<member_console::ids::ResourceKey, member_console::services::catalog::RuleEntry> {
    pairs
        .iter()
        .map(|(k, v)| {
            let entry = member_console::services::catalog::RuleEntry::parse(v).unwrap_or_else(|e| panic!("{e}"));
            (member_console::ids::ResourceKey::from(*k), entry)
        })
        .collect()
}
