//! Helpers shared by the farm's tests.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use local_farm::{Config, LocalFarm, WikiMode};
use serde_json::{Value, json};

pub const TOKEN: &str = "farm-test-token";
pub const SECRET: &str = "farm-test-callback-secret";

/// A folder of its own under the system's temp folder, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("local-farm-test-{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    /// Kept when the test failed, for its `farm.json` and `wiki.log`.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the farm's data folder is kept: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The tests' config: API only, fast retries and a fast watcher.
pub fn config(data: &Path) -> Config {
    Config {
        data_dir: data.to_path_buf(),
        token: TOKEN.to_string(),
        wiki: WikiMode::Off,
        callback_retry: vec![Duration::from_millis(100), Duration::from_millis(200)],
        modified_poll: Duration::from_millis(100),
        ..Config::default()
    }
}

pub async fn start_in(data: &Path, adjust: impl FnOnce(&mut Config)) -> LocalFarm {
    let mut config = config(data);
    adjust(&mut config);
    LocalFarm::start(config).await.expect("the farm starts")
}

/// A farm without `wiki` in a fresh data folder.
pub async fn start() -> (LocalFarm, TempDir) {
    let data = TempDir::new();
    (start_in(data.path(), |_| {}).await, data)
}

/// A farm running the real `wiki`; fails (never skips) when `wiki` is missing.
pub async fn start_with_wiki() -> (LocalFarm, TempDir) {
    start_with_wiki_and(|_| {}).await
}

/// As [`start_with_wiki`], with the config adjusted.
pub async fn start_with_wiki_and(adjust: impl FnOnce(&mut Config)) -> (LocalFarm, TempDir) {
    let data = TempDir::new();
    let farm = start_in(data.path(), |c| {
        c.wiki = WikiMode::Auto;
        adjust(c);
    })
    .await;
    assert!(
        farm.wiki_running(),
        "these tests need the real FedWiki server, and it is not running. {} (scripts/test installs it and \
         sets FARM_WIKI_BIN.) If it is installed, the farm's log says why it did not start.",
        local_farm::install_hint(),
    );
    (farm, data)
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().expect("reqwest client")
}

/// A client that finds `domain` on the farm's port, as a browser finds `*.localhost`.
pub fn browser(farm: &LocalFarm, domain: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .resolve(domain, SocketAddr::from(([127, 0, 0, 1], farm.port())))
        .build()
        .expect("reqwest client")
}

pub async fn json_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body read");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Call the API with the token.
pub async fn api(farm: &LocalFarm, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{}{path}", farm.base_url())).bearer_auth(TOKEN);
    if let Some(body) = body {
        req = req.header("Content-Type", "application/json").body(body.to_string());
    }
    json_of(req.send().await.expect("the farm answers")).await
}

pub async fn put_site(farm: &LocalFarm, domain: &str, owner: &str, status: &str) -> (u16, Value) {
    api(farm, reqwest::Method::PUT, &format!("/api/sites/{domain}"), Some(json!({ "owner": owner, "status": status })))
        .await
}

pub async fn set_status(farm: &LocalFarm, domain: &str, status: &str) -> (u16, Value) {
    api(farm, reqwest::Method::PUT, &format!("/api/sites/{domain}/status"), Some(json!({ "status": status }))).await
}

pub async fn get_site(farm: &LocalFarm, domain: &str) -> (u16, Value) {
    api(farm, reqwest::Method::GET, &format!("/api/sites/{domain}"), None).await
}

pub async fn delete_site(farm: &LocalFarm, domain: &str) -> (u16, Value) {
    api(farm, reqwest::Method::DELETE, &format!("/api/sites/{domain}"), None).await
}

pub async fn list(farm: &LocalFarm) -> (u16, Value) {
    api(farm, reqwest::Method::GET, "/api/sites", None).await
}

/// A test control under `/_farm/` (no token).
pub async fn control(farm: &LocalFarm, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http().request(method, format!("{}{path}", farm.base_url()));
    if let Some(body) = body {
        req = req.header("Content-Type", "application/json").body(body.to_string());
    }
    json_of(req.send().await.expect("the farm answers")).await
}

/// Poll `check` until it returns `Some`.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

pub fn rfc3339(v: &Value) -> chrono::DateTime<chrono::Utc> {
    let raw = v.as_str().unwrap_or_else(|| panic!("a time, not {v}"));
    assert!(raw.ends_with('Z'), "{raw} is not UTC");
    chrono::DateTime::parse_from_rfc3339(raw).expect("RFC 3339").with_timezone(&chrono::Utc)
}

/// One callback as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub timestamp: String,
    pub signature: String,
    pub body: String,
}

impl Seen {
    pub fn event(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON callback")
    }
}

/// A console stand-in that records callbacks and answers them with the queued statuses (200
/// once the queue is empty).
#[derive(Clone, Default)]
pub struct Receiver {
    seen: Arc<Mutex<Vec<Seen>>>,
    answers: Arc<Mutex<VecDeque<u16>>>,
    pub url: String,
}

impl Receiver {
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    pub fn events(&self) -> Vec<Value> {
        self.seen().iter().map(Seen::event).collect()
    }

    /// Wait until `n` callbacks arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Seen> {
        eventually(&format!("{n} callbacks"), async || {
            let seen = self.seen();
            (seen.len() >= n).then_some(seen)
        })
        .await
    }
}

async fn receive(req: HttpRequest, body: web::Bytes, rx: web::Data<Receiver>) -> HttpResponse {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let seen = Seen {
        timestamp: header("Farm-Timestamp"),
        signature: header("Farm-Signature"),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    rx.seen.lock().expect("lock").push(seen);
    let status = rx.answers.lock().expect("lock").pop_front().unwrap_or(200);
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("status")).finish()
}

/// Start a receiver answering `answers` first, and point the farm's callbacks at it.
pub async fn receiver(farm: &LocalFarm, answers: &[u16]) -> Receiver {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let rx = Receiver {
        url: format!("http://{}/farm/callbacks", listener.local_addr().expect("addr")),
        ..Default::default()
    };
    rx.answers.lock().expect("lock").extend(answers);
    let data = web::Data::new(rx.clone());
    let server =
        HttpServer::new(move || App::new().app_data(data.clone()).route("/farm/callbacks", web::post().to(receive)))
            .workers(1)
            .disable_signals()
            .listen(listener)
            .expect("listen")
            .run();
    tokio::spawn(server);
    farm.set_callback(rx.url.clone(), SECRET.to_string());
    rx
}

/// A credential as the console makes it: for `domain` of `owner`, for account 7, living `ttl` s.
pub fn credential(domain: &str, owner: &str, ttl: i64) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nonce = format!("nonce-{:08}-{:08}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    local_farm::entry::sign_entry(
        TOKEN,
        &local_farm::entry::EntryClaims {
            domain: domain.to_string(),
            account_id: 7,
            name: "ann@example.org".to_string(),
            owner: owner.to_string(),
            exp: chrono::Utc::now().timestamp() + ttl,
            nonce,
        },
    )
}

/// A client for `domain` that follows no redirects (to read the entry's own answer).
pub fn site_client(farm: &LocalFarm, domain: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(domain, SocketAddr::from(([127, 0, 0, 1], farm.port())))
        .build()
        .expect("reqwest client")
}

/// The `name=value` of every `Set-Cookie` of an answer that sets a value (not one that clears).
pub fn cookies_set(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .filter(|pair| pair.split_once('=').is_some_and(|(_, v)| !v.is_empty()))
        .map(str::to_string)
        .collect()
}

/// The names of the cookies an answer clears (`Max-Age=0`).
pub fn cookies_cleared(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| v.contains("Max-Age=0"))
        .filter_map(|v| v.split('=').next())
        .map(str::to_string)
        .collect()
}

/// Follow `/_farm/enter` with a fresh credential, as a member coming from the console does: the
/// `Cookie` header the browser then sends to the site.
pub async fn enter(farm: &LocalFarm, domain: &str, owner: &str) -> String {
    let url = format!("{}_farm/enter?c={}", farm.site_url(domain), credential(domain, owner, 60));
    let resp = site_client(farm, domain).get(url).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 303, "the entry: {:?}", resp.text().await);
    assert_eq!(resp.headers().get("location").and_then(|v| v.to_str().ok()), Some("/"));
    let cookies = cookies_set(&resp);
    assert!(cookies.iter().any(|c| c.starts_with("farmEdit=")), "{cookies:?}");
    assert!(cookies.iter().any(|c| c.starts_with("wikiSession=")), "{cookies:?}");
    cookies.join("; ")
}

/// What the wiki client sends to make a page: `PUT /page/{slug}/action` with a `create` action.
pub async fn create_page(
    farm: &LocalFarm,
    domain: &str,
    slug: &str,
    text: &str,
    cookies: Option<&str>,
) -> reqwest::Response {
    let action = json!({
        "type": "create",
        "id": "a1b2c3d4e5f60718",
        "item": { "title": slug, "story": [{ "type": "paragraph", "id": "p1", "text": text }] },
        "date": 1_790_000_000_000u64,
    });
    let mut req = site_client(farm, domain)
        .put(format!("{}page/{slug}/action", farm.site_url(domain)))
        .form(&[("action", action.to_string())]);
    if let Some(c) = cookies {
        req = req.header("Cookie", c);
    }
    req.send().await.expect("answer")
}

/// Every file under `dir` with its bytes: what a test compares before and after.
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.insert(path, bytes);
            }
        }
    }
    out
}

/// A console stand-in that answers the farm's confirm calls (`allowed` as set), after checking
/// their signature, and counts them.
#[derive(Clone)]
pub struct ConfirmingConsole {
    pub allow: Arc<std::sync::atomic::AtomicBool>,
    pub asked: Arc<Mutex<Vec<Value>>>,
    pub url: String,
}

async fn confirm_call(req: HttpRequest, body: web::Bytes, c: web::Data<ConfirmingConsole>) -> HttpResponse {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if !local_farm::verify_signature(SECRET, &header("Farm-Timestamp"), &body, &header("Farm-Signature")) {
        return HttpResponse::BadRequest().body("signature refused");
    }
    c.asked.lock().expect("lock").push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    HttpResponse::Ok().json(json!({ "allowed": c.allow.load(Ordering::SeqCst) }))
}

/// Start a console stand-in and point the farm's callbacks (to nowhere useful) and confirm calls
/// at it.
pub async fn confirming_console(farm: &LocalFarm, allow: bool) -> ConfirmingConsole {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let c = ConfirmingConsole {
        allow: Arc::new(std::sync::atomic::AtomicBool::new(allow)),
        asked: Arc::default(),
        url: format!("{base}/farm/edit-sessions/confirm"),
    };
    let data = web::Data::new(c.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/farm/edit-sessions/confirm", web::post().to(confirm_call))
            .route("/farm/callbacks", web::post().to(HttpResponse::Ok))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .expect("listen")
    .run();
    tokio::spawn(server);
    farm.set_callback(format!("{base}/farm/callbacks"), SECRET.to_string());
    farm.set_confirm_url(c.url.clone());
    c
}
