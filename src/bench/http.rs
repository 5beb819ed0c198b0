//! `bench http --connections C --seconds S [--orgs N]`: the console's own HTTP server, started
//! in process as `serve` starts it, against a scratch database of N organizations. Members
//! signed in through the sign-in form load their pages over C keep-alive connections, `/readyz`
//! is loaded the same way in the same run as the yardstick, and then each operator page is
//! timed on its own. Any answer that is not 2xx fails the run: no figures are reported over
//! errors.
//!
//! The client is a few lines of HTTP/1.1 over a tokio socket (below): the package has no HTTP
//! client outside its tests, and a thin one spends little of the CPU the server is measured on.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use serde::Serialize;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use super::{floored_organizations, id_of};
use crate::{
    config::Config,
    demo,
    ids::{AccountId, LadderId, OrgTypeId, PlanActId},
    scratch::ScratchDb,
    services::{
        auth,
        plan_acts::{self as pa, Disposition},
    },
    store::plan_acts as pa_store,
    web::routes::{Access, ROUTES},
};

/// Members signed in over the form, each with a session of their own; the load goes round-robin
/// over them.
pub const MEMBERS: usize = 32;
/// What `boot` gives the server's pool of `console_runtime` connections.
const SERVE_POOL: u32 = 32;
const MEMBER_PASSWORD: &str = "bench-member-password";
/// Timed requests per operator page (after one untimed), of which the median is reported.
const OPERATOR_SAMPLES: usize = 15;
/// Each load connection's untimed requests before the first phase (new sockets, the server's
/// pooled connections preparing their statements).
const WARMUP_ROUNDS: usize = 2;

pub struct Options {
    pub orgs: i64,
    pub connections: usize,
    pub seconds: f64,
    pub keep: bool,
    /// The member pages to load; None: every member GET route of the route table without a path
    /// parameter. (Tests give a page a member may not see, to prove a refusal fails the run.)
    pub member_pages: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub orgs: i64,
    pub connections: usize,
    /// The member pages loaded, round-robin.
    pub member_pages: Vec<String>,
    pub page_requests: u64,
    pub page_rps: f64,
    pub page_p99_ms: f64,
    pub readyz_requests: u64,
    pub readyz_rps: f64,
    pub readyz_p99_ms: f64,
    /// page_rps / readyz_rps: the goal is at least 0.6 (and page_p99_ms at most 3 × readyz_p99_ms).
    pub ratio: f64,
    /// Each operator page (path and query) and the median of its timed requests, in ms: the goal
    /// is at most 100 ms at 100,000 organizations.
    pub operator_pages_ms: BTreeMap<String, f64>,
}

pub async fn run(config: &Config, o: &Options) -> anyhow::Result<Report> {
    anyhow::ensure!(o.orgs >= MEMBERS as i64, "--orgs must be at least {MEMBERS}: each member has one of them");
    anyhow::ensure!(o.connections >= 1 && o.seconds > 0.0, "--connections and --seconds must be positive");
    super::in_scratch(config, SERVE_POOL, o.keep, async |s| measure(config, s, o).await).await
}

/// What the setup leaves for the HTTP part.
struct Seeded {
    member_emails: Vec<String>,
    plan_act: PlanActId,
    /// One member's organization, for its operator page.
    member_org: i64,
}

async fn measure(config: &Config, s: &ScratchDb, o: &Options) -> anyhow::Result<Report> {
    let seeded = seed(s, o.orgs).await?;

    // The server as `serve` starts it (web::serve on the run-time role's pool), on a port of its
    // own, trusting 127.0.0.1 as a proxy so each sign-in can come from an address of its own
    // (the sign-in limits count per client address).
    let mut server_config = config.clone();
    server_config.trusted_proxies = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    let addr = listener.local_addr()?;
    let server = crate::web::serve(listener, s.db.clone(), Arc::new(server_config))?;
    let handle = server.handle();
    let server_task = tokio::spawn(server);
    eprintln!("bench: the console is listening on http://{addr}");
    let result = over_http(addr, o, &seeded).await;
    handle.stop(true).await;
    let _ = server_task.await;
    let (load, operator_pages_ms) = result?;
    Ok(Report {
        orgs: o.orgs,
        connections: o.connections,
        member_pages: load.member_pages,
        page_requests: load.pages.requests,
        page_rps: load.pages.rps(),
        page_p99_ms: load.pages.p99_ms(),
        readyz_requests: load.readyz.requests,
        readyz_rps: load.readyz.rps(),
        readyz_p99_ms: load.readyz.p99_ms(),
        ratio: load.pages.rps() / load.readyz.rps(),
        operator_pages_ms,
    })
}

/// The demo (its operator, catalog and ladders), N organizations of a type of their own on the
/// Wiki hosting floor, as the console creates them; 32 members, each of one organization spread
/// over the N; and a default change over the N, listed (its moves are the worker's, which does
/// not run here), so its page has an act of N organizations to show.
async fn seed(s: &ScratchDb, orgs: i64) -> anyhow::Result<Seeded> {
    demo::load(&s.db).await?;
    let wiki = id_of(&s.admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Wiki hosting").await?;
    let support = id_of(&s.admin, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = $1", "Support").await?;
    let operator =
        id_of(&s.admin, "SELECT account_id FROM core.accounts WHERE email = $1", demo::OPERATOR_EMAIL).await?;
    let ty: i64 = sqlx::query_scalar(
        "INSERT INTO core.org_types (name, default_plan_ladder_id) VALUES ($1, $2) RETURNING org_type_id",
    )
    .bind("Bench type")
    .bind(wiki)
    .fetch_one(&s.admin)
    .await?;
    let t = Instant::now();
    floored_organizations(&s.admin, orgs, ty, wiki).await?;
    eprintln!("bench: {orgs} organizations on the Wiki hosting floor in {:.1} s", t.elapsed().as_secs_f64());

    // One hash for all of them (the sign-ins verify it 32 times, as they would 32 hashes).
    let hash = auth::hash_password(MEMBER_PASSWORD.to_string()).await;
    let member_emails: Vec<String> = (1..=MEMBERS).map(|i| format!("bench-member-{i:02}@example.com")).collect();
    let accounts: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO core.accounts (email, password_hash) SELECT e, $2 FROM unnest($1::text[]) e RETURNING account_id",
    )
    .bind(&member_emails)
    .bind(&hash)
    .fetch_all(&s.admin)
    .await?;
    anyhow::ensure!(accounts.len() == MEMBERS, "{} member accounts were created, not {MEMBERS}", accounts.len());
    // Member k owns the organization at position k × (N / 32) of the type's.
    let member_org: i64 = sqlx::query_scalar(
        "WITH o AS (SELECT organization_id, row_number() OVER (ORDER BY organization_id) - 1 AS r
                    FROM core.organizations WHERE org_type_id = $1),
              a AS (SELECT account_id, row_number() OVER (ORDER BY account_id) - 1 AS k
                    FROM unnest($2::bigint[]) account_id),
              m AS (INSERT INTO core.organization_members (organization_id, account_id, role)
                    SELECT o.organization_id, a.account_id, 'owner' FROM a JOIN o ON o.r = a.k * ($3 / $4)
                    RETURNING organization_id)
         SELECT max(organization_id) FROM m",
    )
    .bind(ty)
    .bind(&accounts)
    .bind(orgs)
    .bind(MEMBERS as i64)
    .fetch_one(&s.admin)
    .await?;

    let t = Instant::now();
    let act = pa::change_org_type_default(
        &s.db,
        OrgTypeId(ty),
        LadderId(support),
        Some(Disposition::Migrate),
        Some(AccountId(operator)),
        "bench",
        None,
    )
    .await?;
    // The drain's listing, batch after batch as the worker lists (pa::drain_plan_act), without
    // its moves.
    let mut listed = 0;
    loop {
        let types = {
            let mut c = s.db.read().await?;
            pa_store::types_to_list(&mut c, act).await?
        };
        if types.is_empty() {
            break;
        }
        for t in types {
            let mut tx = crate::db::begin(&s.db, crate::db::TxKind::Materializing).await?;
            listed += pa_store::write_obligations(tx.conn(), act, t, pa::LISTING_BATCH).await?;
            tx.commit().await?;
        }
    }
    eprintln!(
        "bench: plan act #{act} over the type, {listed} organizations listed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // Quiet before the phases: the seeding's rows vacuumed (autovacuum would otherwise take them
    // up during a phase, and not the same one each run) and its dirty pages written.
    let t = Instant::now();
    sqlx::raw_sql("VACUUM (ANALYZE)").execute(&s.admin).await?;
    sqlx::raw_sql("CHECKPOINT").execute(&s.admin).await?;
    eprintln!("bench: vacuumed, analyzed and checkpointed in {:.1} s", t.elapsed().as_secs_f64());
    Ok(Seeded { member_emails, plan_act: act, member_org })
}

struct Load {
    member_pages: Vec<String>,
    pages: Tally,
    readyz: Tally,
}

async fn over_http(addr: SocketAddr, o: &Options, seeded: &Seeded) -> anyhow::Result<(Load, BTreeMap<String, f64>)> {
    let t = Instant::now();
    let mut sign_ins = tokio::task::JoinSet::new();
    for (i, email) in seeded.member_emails.iter().enumerate() {
        let (email, from) = (email.clone(), format!("10.64.0.{}", i + 1));
        sign_ins.spawn(async move { sign_in(addr, &email, MEMBER_PASSWORD, &from).await.map(|s| (i, s)) });
    }
    let mut sessions = vec![String::new(); MEMBERS];
    while let Some(r) = sign_ins.join_next().await {
        let (i, cookie) = r??;
        sessions[i] = cookie;
    }
    eprintln!("bench: {MEMBERS} members signed in over /login in {:.1} s", t.elapsed().as_secs_f64());

    let member_pages = match &o.member_pages {
        Some(p) => p.clone(),
        None => ROUTES
            .iter()
            .filter(|r| r.access.is_member() && r.method == "GET" && !r.path.contains('{'))
            // Checkout's return is where Stripe sends a browser back, with a session to read: not
            // a page a member loads.
            .filter(|r| r.path != views::paths::BILLING_RETURN)
            // The sites' live section is the sites page's own part, polled while a request is in
            // flight: loading the page loads what it reads.
            .filter(|r| r.path != views::paths::SITES_LIVE)
            .map(|r| r.path.to_string())
            .collect(),
    };
    anyhow::ensure!(!member_pages.is_empty(), "no member page to load");
    let load = load(addr, o, Arc::new(sessions), Arc::new(member_pages)).await?;
    let operator_pages = operator_pages(addr, seeded).await?;
    Ok((load, operator_pages))
}

/// Sign in through the form as a browser does: the form's CSRF token and session cookie, then
/// the POST, from `from` as the proxy names it. The session's cookie header.
async fn sign_in(addr: SocketAddr, email: &str, password: &str, from: &str) -> anyhow::Result<String> {
    let mut c = Http::new(addr);
    let mut jar = Jar::default();
    let page = c.send("GET", "/login", &[("X-Forwarded-For", from)], None).await?;
    anyhow::ensure!(page.status == 200, "GET /login answered {}", page.status);
    jar.take(&page);
    let html = String::from_utf8_lossy(&page.body);
    let token = csrf_from(&html).context("no CSRF token on /login")?;
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("email", email)
        .append_pair("password", password)
        .append_pair("csrf_token", &token)
        .finish();
    let cookie = jar.header();
    let r = c
        .send(
            "POST",
            "/login",
            &[("X-Forwarded-For", from), ("Cookie", &cookie)],
            Some(("application/x-www-form-urlencoded", form.as_bytes())),
        )
        .await?;
    anyhow::ensure!(
        r.status == 303 && r.header("location") == Some("/"),
        "signing in as {email} answered {} (location {:?})",
        r.status,
        r.header("location")
    );
    jar.take(&r);
    let cookie = jar.header();
    let home = c.send("GET", "/", &[("Cookie", &cookie)], None).await?;
    anyhow::ensure!(
        home.status == 200 && String::from_utf8_lossy(&home.body).contains(email),
        "{email}'s home answered {} without their address",
        home.status
    );
    Ok(cookie)
}

/// Latencies and failures of one kind of request over the phases.
#[derive(Default)]
struct Tally {
    requests: u64,
    elapsed: Duration,
    micros: Vec<u32>,
    failures: u64,
    examples: Vec<String>,
}

impl Tally {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn p99_ms(&self) -> f64 {
        let mut v = self.micros.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len().max(1)) - 1;
        v.get(i).map_or(0.0, |&us| us as f64 / 1e3)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Pages,
    Readyz,
}

/// The two loads in alternating phases, pages / readyz / readyz / pages, each a quarter of the
/// time, so neither gets the warmer or the colder half of the run; the same connections go on
/// from phase to phase.
async fn load(
    addr: SocketAddr,
    o: &Options,
    sessions: Arc<Vec<String>>,
    pages: Arc<Vec<String>>,
) -> anyhow::Result<Load> {
    let mut conns: Vec<Http> = (0..o.connections).map(|_| Http::new(addr)).collect();
    let mut warmup = tokio::task::JoinSet::new();
    for (i, mut c) in conns.drain(..).enumerate() {
        let (sessions, pages) = (sessions.clone(), pages.clone());
        warmup.spawn(async move {
            for k in 0..WARMUP_ROUNDS * pages.len() {
                let cookie = &sessions[(i + k) % sessions.len()];
                let _ = c.send("GET", &pages[k % pages.len()], &[("Cookie", cookie)], None).await;
                let _ = c.send("GET", "/readyz", &[], None).await;
            }
            c
        });
    }
    while let Some(c) = warmup.join_next().await {
        conns.push(c?);
    }

    let phase = Duration::from_secs_f64(o.seconds / 4.0);
    let (mut page_tally, mut readyz_tally) = (Tally::default(), Tally::default());
    for kind in [Kind::Pages, Kind::Readyz, Kind::Readyz, Kind::Pages] {
        let tally = if kind == Kind::Pages { &mut page_tally } else { &mut readyz_tally };
        let started = Instant::now();
        let deadline = started + phase;
        let mut tasks = tokio::task::JoinSet::new();
        for (i, mut c) in conns.drain(..).enumerate() {
            let (sessions, pages) = (sessions.clone(), pages.clone());
            tasks.spawn(async move {
                let (mut micros, mut failures, mut examples) = (Vec::new(), 0u64, Vec::new());
                let mut k = i;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let (path, answer) = match kind {
                        Kind::Pages => {
                            let path = &pages[k % pages.len()];
                            let cookie = &sessions[k % sessions.len()];
                            (path.as_str(), c.send("GET", path, &[("Cookie", cookie)], None).await)
                        }
                        Kind::Readyz => ("/readyz", c.send("GET", "/readyz", &[], None).await),
                    };
                    micros.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    k += 1;
                    let failure = match answer {
                        Ok(a) if (200..300).contains(&a.status) => continue,
                        Ok(a) => format!("GET {path} answered {}", a.status),
                        Err(e) => format!("GET {path} failed: {e:#}"),
                    };
                    failures += 1;
                    if examples.len() < 3 {
                        examples.push(failure);
                    }
                }
                (c, micros, failures, examples)
            });
        }
        while let Some(r) = tasks.join_next().await {
            let (c, micros, failures, examples) = r?;
            conns.push(c);
            tally.requests += micros.len() as u64 - failures;
            tally.micros.extend(micros);
            tally.failures += failures;
            tally.examples.extend(examples.into_iter().take(3usize.saturating_sub(tally.examples.len())));
        }
        tally.elapsed += started.elapsed();
    }
    for (what, t) in [("member pages", &page_tally), ("/readyz", &readyz_tally)] {
        anyhow::ensure!(
            t.failures == 0,
            "{} of {} requests for {what} failed, so no figures are reported; for example: {}",
            t.failures,
            t.micros.len(),
            t.examples.join("; ")
        );
        anyhow::ensure!(t.requests > 0, "no request for {what} completed in {:.2} s", t.elapsed.as_secs_f64());
        eprintln!(
            "bench: {what}: {} requests in {:.2} s over {} connections, {:.0}/s, p99 {:.2} ms",
            t.requests,
            t.elapsed.as_secs_f64(),
            o.connections,
            t.rps(),
            t.p99_ms()
        );
    }
    Ok(Load { member_pages: pages.to_vec(), pages: page_tally, readyz: readyz_tally })
}

/// Each operator page timed on its own, one request after another as the signed-in operator:
/// the median of OPERATOR_SAMPLES requests after an untimed one.
async fn operator_pages(addr: SocketAddr, seeded: &Seeded) -> anyhow::Result<BTreeMap<String, f64>> {
    let cookie = sign_in(addr, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD, "10.64.1.1").await?;
    let mut paths: Vec<String> = ROUTES
        .iter()
        .filter(|r| r.access == Access::Operator && r.method == "GET" && !r.path.contains('{'))
        .map(|r| r.path.to_string())
        .collect();
    let act = seeded.plan_act;
    paths.extend([
        "/operator/organizations?at=last".to_string(),
        // Every bench organization's name starts so: a search matching N of them.
        "/operator/organizations?q=bench".to_string(),
        format!("/operator/organizations/{}", seeded.member_org),
        format!("/operator/plan-acts/{act}"),
        format!("/operator/plan-acts/{act}/progress"),
    ]);
    let mut c = Http::new(addr);
    let mut out = BTreeMap::new();
    for path in paths {
        let mut samples = Vec::with_capacity(OPERATOR_SAMPLES);
        for i in 0..=OPERATOR_SAMPLES {
            let t = Instant::now();
            let a = c.send("GET", &path, &[("Cookie", &cookie)], None).await?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            anyhow::ensure!((200..300).contains(&a.status), "GET {path} as the operator answered {}", a.status);
            if i > 0 {
                samples.push(ms);
            }
        }
        samples.sort_by(f64::total_cmp);
        let median = (samples[samples.len() / 2] * 100.0).round() / 100.0;
        eprintln!("bench: {path}: median {median:.2} ms");
        out.insert(path, median);
    }
    Ok(out)
}

fn csrf_from(html: &str) -> Option<String> {
    let marker = "name=\"csrf-token\" content=\"";
    let start = html.find(marker)? + marker.len();
    let end = html[start..].find('"')? + start;
    Some(html[start..end].to_string())
}

/// A browser's cookies for one site, as far as a sign-in needs: name → value.
#[derive(Default)]
struct Jar(HashMap<String, String>);

impl Jar {
    fn take(&mut self, a: &Answer) {
        for v in a.headers.iter().filter(|(k, _)| k == "set-cookie").map(|(_, v)| v) {
            let pair = v.split(';').next().unwrap_or_default();
            let Some((name, value)) = pair.split_once('=') else { continue };
            let expired = v.to_ascii_lowercase().contains("max-age=0");
            if expired || value.is_empty() {
                self.0.remove(name.trim());
            } else {
                self.0.insert(name.trim().to_string(), value.trim().to_string());
            }
        }
    }

    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

pub(crate) struct Answer {
    pub(crate) status: u16,
    /// Names lowered.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// One keep-alive HTTP/1.1 connection, requests one at a time. A connection the server has
/// closed while it sat idle is opened again once, as browsers do. The stress run uses it too, for
/// the changes it makes in the Stripe stand-in that the console's client never asks for.
pub(crate) struct Http {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

enum Failed {
    /// Nothing of an answer came back on a connection used before: it was closed meanwhile.
    Stale(anyhow::Error),
    Other(anyhow::Error),
}

impl Http {
    pub(crate) fn new(addr: SocketAddr) -> Http {
        Http { addr, stream: None, buf: Vec::with_capacity(16 * 1024) }
    }

    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, &[u8])>,
    ) -> anyhow::Result<Answer> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some((kind, b)) = body {
            head.push_str(&format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", b.len()));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body.map_or(&[][..], |(_, b)| b));
        for attempt in 0..2 {
            let reused = self.stream.is_some();
            if !reused {
                let s = TcpStream::connect(self.addr).await.with_context(|| format!("connecting to {}", self.addr))?;
                s.set_nodelay(true)?;
                self.stream = Some(s);
                self.buf.clear();
            }
            match self.exchange(&request, method == "HEAD").await {
                Ok(a) => return Ok(a),
                Err(Failed::Stale(_)) if reused && attempt == 0 => self.stream = None,
                Err(Failed::Stale(e) | Failed::Other(e)) => {
                    self.stream = None;
                    return Err(e.context(format!("{method} {path}")));
                }
            }
        }
        unreachable!("the second attempt is on a new connection, so it returns")
    }

    async fn exchange(&mut self, request: &[u8], head_only: bool) -> Result<Answer, Failed> {
        let Some(stream) = self.stream.as_mut() else { return Err(Failed::Other(anyhow::anyhow!("no connection"))) };
        let buf = &mut self.buf;
        stream.write_all(request).await.map_err(|e| Failed::Stale(e.into()))?;
        let other = |e: std::io::Error| Failed::Other(e.into());
        // The head.
        let head_end = loop {
            if let Some(i) = find(buf, b"\r\n\r\n") {
                break i + 4;
            }
            if read_more(stream, buf).await.map_err(|e| Failed::Stale(e.into()))? == 0 {
                let e = anyhow::anyhow!("the connection closed before an answer");
                return Err(if buf.is_empty() { Failed::Stale(e) } else { Failed::Other(e) });
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Failed::Other(anyhow::anyhow!("not an HTTP answer: {head:?}")))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.to_ascii_lowercase());
        let close = get("connection").is_some_and(|v| v.contains("close"));
        let mut body = Vec::new();
        let mut consumed = head_end;
        if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let line_end = loop {
                    if let Some(i) = find(&buf[consumed..], b"\r\n") {
                        break consumed + i;
                    }
                    if read_more(stream, buf).await.map_err(other)? == 0 {
                        return Err(Failed::Other(anyhow::anyhow!("the connection closed inside a chunked body")));
                    }
                };
                let size_text = String::from_utf8_lossy(&buf[consumed..line_end]).into_owned();
                let size = usize::from_str_radix(size_text.split(';').next().unwrap_or_default().trim(), 16)
                    .map_err(|_| Failed::Other(anyhow::anyhow!("a bad chunk size {size_text:?}")))?;
                consumed = line_end + 2;
                if size == 0 {
                    // Trailers, if any, up to the empty line.
                    loop {
                        match find(&buf[consumed..], b"\r\n") {
                            Some(0) => {
                                consumed += 2;
                                break;
                            }
                            Some(i) => consumed += i + 2,
                            None => {
                                if read_more(stream, buf).await.map_err(other)? == 0 {
                                    return Err(Failed::Other(anyhow::anyhow!("the connection closed in trailers")));
                                }
                            }
                        }
                    }
                    break;
                }
                while buf.len() < consumed + size + 2 {
                    if read_more(stream, buf).await.map_err(other)? == 0 {
                        return Err(Failed::Other(anyhow::anyhow!("the connection closed inside a chunk")));
                    }
                }
                body.extend_from_slice(&buf[consumed..consumed + size]);
                consumed += size + 2;
            }
        } else if let Some(len) = get("content-length") {
            let len: usize = len.parse().map_err(|_| Failed::Other(anyhow::anyhow!("a bad Content-Length {len:?}")))?;
            while buf.len() < head_end + len {
                if read_more(stream, buf).await.map_err(other)? == 0 {
                    return Err(Failed::Other(anyhow::anyhow!("the connection closed inside the body")));
                }
            }
            body.extend_from_slice(&buf[head_end..head_end + len]);
            consumed = head_end + len;
        } else {
            // Neither: the body runs to the end of the connection.
            while read_more(stream, buf).await.map_err(other)? > 0 {}
            body.extend_from_slice(&buf[head_end..]);
            consumed = buf.len();
        }
        buf.drain(..consumed);
        if close || (get("content-length").is_none() && get("transfer-encoding").is_none() && !head_only) {
            self.stream = None;
        }
        Ok(Answer { status, headers, body })
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers its first request chunked, with a trailer, and its second with a
    /// length, on the same connection; then closes it.
    #[tokio::test]
    async fn the_client_reads_chunked_and_sized_answers_on_one_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            for answer in [
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: a=1; Path=/\r\n\r\n5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"[..],
                &b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"[..],
            ] {
                while find(&seen, b"\r\n\r\n").is_none() {
                    read_more(&mut s, &mut seen).await.unwrap();
                }
                seen.clear();
                s.write_all(answer).await.unwrap();
            }
        });
        let mut c = Http::new(addr);
        let a = c.send("GET", "/one", &[], None).await.unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello, world"[..]));
        let mut jar = Jar::default();
        jar.take(&a);
        assert_eq!(jar.header(), "a=1");
        let b = c.send("GET", "/two", &[], None).await.unwrap();
        assert_eq!((b.status, b.body.as_slice()), (404, &b"nope"[..]));
        server.await.unwrap();
    }
}
