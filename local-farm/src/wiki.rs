//! The real FedWiki server (`wiki` from npm), run as a child process in farm mode.
//!
//! `wiki --farm` serves every site from one port and keeps each site in `<data>/<Host without
//! port>` (a leading `www.` dropped), creating the site on the first request for a new host. So the
//! farm in front is the gate: it forwards only requests for sites it holds as active, and `wiki`
//! listens on loopback only. (`--allowed '*'`, which makes `wiki` serve only hosts whose folder
//! exists, is not used: it learns of new folders through an asynchronous file watch that can miss
//! a folder made while it starts, leaving that site unserved until `wiki` restarts.)
//!
//! Security is `wiki-security-friends`: every site has an owner file naming a secret that only
//! the farm holds (see `secrets`), and the farm claims a `wiki` session for a member it let in
//! (see `entry`); the farm also refuses every write itself unless the request carries its edit
//! session. `--packageDir` names the folder that really holds `wiki-client` and the plugins:
//! `wiki` assumes `<its own package>/node_modules`, which a hoisted npm install does not have.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::secrets::Keys;

/// Whether and how the farm runs the `wiki` server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WikiMode {
    /// Find `wiki` (`FARM_WIKI_BIN`, else `wiki` on `PATH`, else the project-local install under
    /// `.tools/wiki`) and start it if present; without it the farm runs its API alone.
    #[default]
    Auto,
    /// Start this `wiki` executable (absent: as `Auto` without `wiki`).
    Bin(PathBuf),
    /// Never start `wiki`: the API only (benches, API tests).
    Off,
}

fn repo_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.parent().unwrap_or(crate_dir).to_path_buf()
}

/// Where `scripts/install-wiki` (which `scripts/test` runs) installs `wiki` with npm:
/// `.tools/wiki` at the repository's root.
pub fn install_prefix() -> PathBuf {
    repo_root().join(".tools").join("wiki")
}

/// The command that installs the pinned `wiki` (local-farm/wiki/package-lock.json).
fn install_command() -> String {
    format!("`{}`", repo_root().join("scripts").join("install-wiki").display())
}

/// The sentence that says how to install `wiki`.
pub fn install_hint() -> String {
    format!(
        "The FedWiki server (`wiki`) is not installed on this machine. Install it with {} (the pinned \
         wiki 0.40 from local-farm/wiki/, into {}; or set FARM_WIKI_BIN to its path) and restart the farm.",
        install_command(),
        install_prefix().display()
    )
}

/// The `wiki` executable this mode names, if it is on the machine.
pub fn find(mode: &WikiMode) -> Option<PathBuf> {
    match mode {
        WikiMode::Off => None,
        WikiMode::Bin(path) => path.is_file().then(|| path.clone()),
        WikiMode::Auto => {
            if let Some(bin) = std::env::var_os("FARM_WIKI_BIN").filter(|v| !v.is_empty()) {
                let bin = PathBuf::from(bin);
                return bin.is_file().then_some(bin);
            }
            let on_path = std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("wiki")).collect::<Vec<_>>())
                .unwrap_or_default();
            let local = install_prefix().join("node_modules").join(".bin").join("wiki");
            on_path.into_iter().chain([local]).find(|p| p.is_file())
        }
    }
}

/// The folder holding `wiki-client` (and the plugins and `wiki-security-friends`) for the `wiki`
/// executable `bin`: `bin` is followed to the file it links to (npm's `.bin/wiki` is a link to
/// `wiki/cli.js`), the nearest folder above it holding a `package.json` is the `wiki` package, and
/// the packages are either nested in its `node_modules` or hoisted beside it. None when neither
/// holds `wiki-client`.
pub fn package_dir(bin: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(bin).ok()?;
    let package = real.ancestors().skip(1).find(|dir| dir.join("package.json").is_file())?;
    let nested = package.join("node_modules");
    let hoisted = package.parent().filter(|p| p.file_name().is_some_and(|n| n == "node_modules"));
    [Some(nested), hoisted.map(Path::to_path_buf)]
        .into_iter()
        .flatten()
        .find(|dir| dir.join("wiki-client").join("package.json").is_file())
}

/// `wiki`'s config file: its cookie secret and admin secret.
fn write_config(path: &Path, keys: &Keys) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let body = serde_json::json!({ "cookieSecret": keys.wiki_cookie_secret, "admin": keys.wiki_admin });
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(body.to_string().as_bytes())
}

/// A running `wiki --farm` child and its process group.
pub struct WikiServer {
    child: Mutex<Option<Child>>,
    pid: u32,
    port: u16,
}

impl WikiServer {
    /// Start `bin` in farm mode on a free loopback port with its sites under `wiki_data`, its log
    /// in `<data>/wiki.log`, and wait until it answers.
    pub async fn start(bin: &Path, data_dir: &Path, wiki_data: &Path, keys: &Keys) -> std::io::Result<WikiServer> {
        let packages = package_dir(bin).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no wiki-client was found beside or under the wiki package that {} belongs to, so the wiki's \
                     pages could not load their client; reinstall it with {}",
                    bin.display(),
                    install_command()
                ),
            )
        })?;
        if !packages.join("wiki-security-friends").is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{} holds no wiki-security-friends, which the farm's sites are secured with; reinstall with {}",
                    packages.display(),
                    install_command()
                ),
            ));
        }
        // The secrets go in a file readable by the farm's user only, not on the command line,
        // which every user of the machine can read.
        let config = data_dir.join("wiki-config.json");
        write_config(&config, keys)?;
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(data_dir.join("wiki.log"))?;
        let mut command = Command::new(bin);
        command
            .arg("--farm")
            .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
            .arg("--data")
            .arg(wiki_data)
            // Outside the sites' folder, so that it is never taken for a site.
            .arg("--commons")
            .arg(data_dir.join("wiki-commons"))
            .arg("--packageDir")
            .arg(&packages)
            .args(["--security_type", "friends"])
            .arg("--config")
            .arg(&config)
            // No `config.json` of some other project is read from the working directory.
            .current_dir(data_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: `wiki` forks a cluster worker, and stopping ends both.
            .process_group(0)
            .kill_on_drop(true);
        // If the farm's process dies without stopping it, the kernel ends `wiki` too (its cluster
        // worker follows when its primary is gone).
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches only the child being set up.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn()?;
        let pid = child.id().ok_or_else(|| std::io::Error::other("the wiki server exited at once"))?;
        let server = WikiServer { child: Mutex::new(Some(child)), pid, port };
        if let Err(e) = server.wait_until_answering(Duration::from_secs(30)).await {
            server.stop().await;
            return Err(e);
        }
        Ok(server)
    }

    /// Wait until wiki itself answers on its port. Not a request with a `Host`: any host it is
    /// asked for would become a site. A request without one gets wiki's farm's own 400 "Missing
    /// host header", which tells it apart from whatever else could answer there: a connect alone
    /// also succeeds when the loopback connection meets itself (its source port chosen equal to
    /// the port probed before wiki listens) or another process took the port, and the first
    /// requests then went nowhere (a 502 at a member's entry, seen in CI).
    async fn wait_until_answering(&self, limit: Duration) -> std::io::Result<()> {
        let started = Instant::now();
        loop {
            if !self.running() {
                return Err(std::io::Error::other("the wiki server exited while starting (see wiki.log)"));
            }
            if matches!(tokio::time::timeout(Duration::from_secs(1), probe(self.port)).await, Ok(Ok(true))) {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the wiki server did not answer within 30 s (see wiki.log)",
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:PORT`, where the farm forwards active sites' requests.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn running(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Ask the process group to end, then make it.
    pub async fn stop(&self) {
        let child = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut child) = child else { return };
        self.signal(libc::SIGTERM);
        if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
            tracing::warn!(pid = self.pid, "the wiki server did not stop on SIGTERM; killing it");
        }
        self.signal(libc::SIGKILL);
        let _ = child.wait().await;
    }

    fn signal(&self, signal: libc::c_int) {
        let Ok(group) = libc::pid_t::try_from(self.pid) else { return };
        // SAFETY: killpg only sends a signal; the group is the child's own (process_group(0)).
        unsafe {
            libc::killpg(group, signal);
        }
    }
}

/// Whether `wiki --farm` answers on `port`: a request without a `Host` gets its 400 "Missing
/// host header".
async fn probe(port: u16) -> std::io::Result<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    let mut answer = Vec::new();
    stream.take(4096).read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    Ok(answer.starts_with("HTTP/1.1 400") && answer.contains("Missing host header"))
}

impl Drop for WikiServer {
    fn drop(&mut self) {
        let alive = self.child.get_mut().unwrap_or_else(|p| p.into_inner()).is_some();
        if alive {
            self.signal(libc::SIGKILL);
        }
    }
}
