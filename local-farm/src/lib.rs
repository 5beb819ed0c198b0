//! The local FedWiki farm: the farm API (docs/farm-api.md) over a data folder, in front of the
//! real FedWiki server (`wiki` from npm, run in farm mode as a child process). It serves every
//! site `<name>.<farm domain>` and the API from one address, routed by `Host`: an active site's
//! requests go to `wiki`, a parked site gets a "parked" page, an archived or unknown one a 404; and
//! it reports every change to the console with signed callbacks. Test controls live under
//! `/_farm/`.
//!
//! Start it in-process with [`LocalFarm::start`] or run the `local-farm` binary.

mod api;
mod callbacks;
mod control;
mod domain;
pub mod entry;
mod error;
mod farm;
mod gate;
mod ids;
mod pages;
mod proxy;
mod secrets;
mod server;
mod state;
mod wiki;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use callbacks::{signature_header, verify_signature};
pub use wiki::{WikiMode, install_hint, install_prefix, package_dir};

/// How to run the farm.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the farm keeps `farm.json`, the `wiki` server's data (`wiki/`) and its log.
    pub data_dir: PathBuf,
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Sites live at `<name>.<farm_domain>`.
    pub farm_domain: String,
    /// The bearer token every `/api` call must carry.
    pub token: String,
    pub wiki: WikiMode,
    /// Waits between callback delivery attempts; empty means a failed delivery is not retried.
    pub callback_retry: Vec<Duration>,
    /// How often active sites' data folders are measured for `site.modified`.
    pub modified_poll: Duration,
    /// Keep the sites in `farm.json` (a restart finds them); false keeps them in memory only, for
    /// a benchmark whose farm must answer at once.
    pub persist: bool,
    /// How long a member's edit session stands on the console's last word: a write after that
    /// asks the console again first (so a member removed from the organization is refused within
    /// this).
    pub edit_confirm_every: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: std::env::temp_dir().join("local-farm"),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            farm_domain: "wiki.localhost".to_string(),
            token: ids::new_id("farm"),
            wiki: WikiMode::Auto,
            callback_retry: [1, 2, 4, 8, 16].into_iter().map(Duration::from_secs).collect(),
            modified_poll: Duration::from_secs(2),
            persist: true,
            edit_confirm_every: Duration::from_secs(30),
        }
    }
}

/// The farm could not listen on its address: inside the `io::Error` that [`LocalFarm::start`]
/// answers (`get_ref` and `downcast_ref` find it), so a caller can name the setting that moves it.
#[derive(Debug)]
pub struct ListenError {
    pub address: SocketAddr,
    pub source: std::io::Error,
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not listen on {}: {}", self.address, self.source)
    }
}

impl std::error::Error for ListenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

// The console keeps the farm in its shared state.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<LocalFarm>();
};

/// A running farm. Dropping it without [`LocalFarm::stop`] still kills the `wiki` server.
pub struct LocalFarm {
    port: u16,
    farm_domain: String,
    wiki_data: PathBuf,
    farm: Arc<farm::Farm>,
    handle: actix_web::dev::ServerHandle,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    watcher: tokio::task::JoinHandle<()>,
    wiki: Option<wiki::WikiServer>,
    stopped: bool,
}

impl LocalFarm {
    /// Open the data folder, start `wiki` (per `config.wiki`), bind `config.listen` and serve in
    /// the background on the current tokio runtime.
    pub async fn start(config: Config) -> std::io::Result<LocalFarm> {
        let invalid = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, m.to_string());
        if config.token.is_empty() {
            return Err(invalid("the farm's token must not be empty"));
        }
        let farm_domain = config.farm_domain.trim_end_matches('.').to_ascii_lowercase();
        if farm_domain.is_empty() || farm_domain.starts_with('.') {
            return Err(invalid("the farm domain must be a host name such as wiki.localhost"));
        }
        std::fs::create_dir_all(&config.data_dir)?;
        let data_dir = std::path::absolute(&config.data_dir)?;
        let wiki_data = data_dir.join("wiki");
        std::fs::create_dir_all(&wiki_data)?;
        let store = state::Store::open(&data_dir, config.persist)?;
        let keys = secrets::Keys::load_or_create(&data_dir, config.persist)?;
        let site_secrets = secrets::SiteSecrets::open(&data_dir, config.persist)?;
        let callbacks = callbacks::Callbacks::start(config.callback_retry);
        let farm = Arc::new(farm::Farm {
            store,
            callbacks,
            wiki_data: wiki_data.clone(),
            farm_domain: farm_domain.clone(),
            secrets: site_secrets,
            confirm_url: std::sync::RwLock::new(None),
        });
        // Before `wiki` starts: it reads a site's owner once, at the site's first request.
        farm.write_owner_files()?;

        // Before `wiki` starts: an address in use is refused at once, with nothing to stop.
        let listener = std::net::TcpListener::bind(config.listen)
            .map_err(|source| std::io::Error::new(source.kind(), ListenError { address: config.listen, source }))?;
        let (wiki, wiki_url) = start_wiki(&config.wiki, &data_dir, &wiki_data, &keys).await;
        let port = listener.local_addr()?.port();
        let proxy = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(std::io::Error::other)?;
        let app = server::AppState {
            farm: farm.clone(),
            token: config.token,
            faults: Mutex::default(),
            wiki_url,
            proxy,
            keys,
            nonces: entry::Nonces::default(),
            confirm_every: config.edit_confirm_every,
            calls: Mutex::default(),
        };
        let server = server::build(listener, app)?;
        let handle = server.handle();
        let task = tokio::spawn(server);
        let watcher = tokio::spawn(farm.clone().watch(config.modified_poll));
        tracing::info!(port, farm_domain, wiki = wiki.is_some(), "the local farm is serving");
        Ok(LocalFarm { port, farm_domain, wiki_data, farm, handle, task: Some(task), watcher, wiki, stopped: false })
    }

    /// The API, e.g. `http://127.0.0.1:41234`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A site's address on this farm, e.g. `http://acme.wiki.localhost:41234/`.
    pub fn site_url(&self, domain: &str) -> String {
        format!("http://{domain}:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sites live at `<name>.<farm_domain()>`.
    pub fn farm_domain(&self) -> &str {
        &self.farm_domain
    }

    /// Whether the `wiki` server is running (so active sites are served).
    pub fn wiki_running(&self) -> bool {
        self.wiki.as_ref().is_some_and(wiki::WikiServer::running)
    }

    /// Where the `wiki` server itself listens (loopback), when it runs.
    pub fn wiki_url(&self) -> Option<String> {
        self.wiki.as_ref().map(wiki::WikiServer::url)
    }

    /// The folder that holds a site's data (whether or not the site exists).
    pub fn site_dir(&self, domain: &str) -> PathBuf {
        match domain::SiteDomain::parse(domain, &self.farm_domain) {
            Ok(d) => d.folder(&self.wiki_data),
            Err(_) => self.wiki_data.join(domain),
        }
    }

    /// The `wiki` server's data folder, one folder per site.
    pub fn wiki_data_dir(&self) -> &Path {
        &self.wiki_data
    }

    /// Send callbacks to `url`, signed with `secret`, from now on (the console's URL is known
    /// only once it has bound its port). Changes made before this are not reported.
    pub fn set_callback(&self, url: String, secret: String) {
        self.farm.callbacks.set_endpoint(url, secret);
    }

    /// Where the console confirms members' edit sessions (its `/farm/edit-sessions/confirm`),
    /// signed with the callbacks' secret (set by [`LocalFarm::set_callback`]).
    pub fn set_confirm_url(&self, url: String) {
        *self.farm.confirm_url.write().unwrap_or_else(|p| p.into_inner()) = Some(url);
    }

    /// Stop serving, stop the watcher and callbacks, and stop the `wiki` server.
    pub async fn stop(mut self) {
        self.stopped = true;
        self.handle.stop(true).await;
        self.watcher.abort();
        self.farm.callbacks.stop();
        if let Some(wiki) = &self.wiki {
            wiki.stop().await;
        }
        // The server's own result is only interesting while it runs.
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LocalFarm {
    fn drop(&mut self) {
        if !self.stopped {
            // Without `stop`: the actix server's own threads would keep serving; end them too.
            // (The `wiki` server is killed by its own Drop.)
            self.watcher.abort();
            self.farm.callbacks.stop();
            drop(self.handle.stop(false));
        }
    }
}

/// Find and start `wiki`; without it, the sentence active sites answer with, logged once.
async fn start_wiki(
    mode: &WikiMode,
    data_dir: &Path,
    wiki_data: &Path,
    keys: &secrets::Keys,
) -> (Option<wiki::WikiServer>, Result<String, String>) {
    if *mode == WikiMode::Off {
        return (None, Err("This farm runs without the FedWiki server (its API only), so it serves no wiki.".into()));
    }
    let Some(bin) = wiki::find(mode) else {
        let hint = install_hint();
        tracing::warn!("{hint}");
        return (None, Err(hint));
    };
    match wiki::WikiServer::start(&bin, data_dir, wiki_data, keys).await {
        Ok(server) => {
            let url = server.url();
            tracing::info!(bin = %bin.display(), url, "the FedWiki server is running");
            (Some(server), Ok(url))
        }
        Err(e) => {
            let why = format!("The FedWiki server ({}) could not start: {e}.", bin.display());
            tracing::error!("{why}");
            (None, Err(why))
        }
    }
}
