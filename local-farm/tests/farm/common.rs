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
    let data = TempDir::new();
    let farm = start_in(data.path(), |c| c.wiki = WikiMode::Auto).await;
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
