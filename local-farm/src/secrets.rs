//! What the farm keeps secret, in its data folder (files readable by the farm's user only):
//! - `farm-keys.json`: the key that signs the farm's own edit-session cookie, the `wiki` server's
//!   cookie secret (stable across restarts, so a member's wiki session survives one) and the
//!   `wiki` admin secret (never handed out: without one, `wiki-security-friends` takes every
//!   visitor for the admin);
//! - `site-secrets.json`: one random secret per site domain, the "friend" secret that makes a
//!   `wiki` session the site's owner. It never leaves the farm: the farm itself presents it to
//!   `wiki` when a member enters. A domain keeps its secret after the site is deleted: `wiki`
//!   holds a site's owner in memory from the site's first request, so a site made again at the
//!   same domain must be claimed by the same secret;
//! - each site's `status/owner.json`, which `wiki-security-friends` reads: `{"name": <the owner's
//!   display name>, "friend": {"secret": <the site's secret>}}`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// 32 random bytes as 64 lowercase hex digits.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        // Never on the machines the farm runs on; refuse to make a guessable secret.
        panic!("the operating system's randomness is unavailable");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Write `body` to `path` readable by the owner only: a temporary file, then a rename.
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The farm's own keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Keys {
    /// Signs the farm's edit-session cookie.
    pub session_key: String,
    /// `wiki --cookieSecret`: signs and encrypts `wiki`'s own session cookie.
    pub wiki_cookie_secret: String,
    /// `wiki --admin`: a friend secret nobody holds.
    pub wiki_admin: String,
}

impl Keys {
    fn fresh() -> Keys {
        Keys { session_key: random_hex(), wiki_cookie_secret: random_hex(), wiki_admin: random_hex() }
    }

    /// `<data>/farm-keys.json`, made on the first start; in memory only when `persist` is false.
    pub fn load_or_create(data_dir: &Path, persist: bool) -> std::io::Result<Keys> {
        if !persist {
            return Ok(Keys::fresh());
        }
        let path = data_dir.join("farm-keys.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let keys = Keys::fresh();
                write_private(&path, &serde_json::to_vec_pretty(&keys).map_err(std::io::Error::other)?)?;
                Ok(keys)
            }
            Err(e) => Err(e),
        }
    }
}

/// Every domain's friend secret.
pub struct SiteSecrets {
    file: Option<PathBuf>,
    secrets: Mutex<BTreeMap<String, String>>,
}

impl SiteSecrets {
    /// `<data>/site-secrets.json`, or empty; in memory only when `persist` is false.
    pub fn open(data_dir: &Path, persist: bool) -> std::io::Result<SiteSecrets> {
        if !persist {
            return Ok(SiteSecrets { file: None, secrets: Mutex::default() });
        }
        let path = data_dir.join("site-secrets.json");
        let secrets = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(SiteSecrets { file: Some(path), secrets: Mutex::new(secrets) })
    }

    /// The domain's secret, made (and saved) the first time it is asked for.
    pub fn secret_for(&self, domain: &str) -> std::io::Result<String> {
        let mut secrets = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = secrets.get(domain) {
            return Ok(s.clone());
        }
        let secret = random_hex();
        secrets.insert(domain.to_string(), secret.clone());
        if let Some(path) = &self.file
            && let Err(e) = serde_json::to_vec_pretty(&*secrets)
                .map_err(std::io::Error::other)
                .and_then(|body| write_private(path, &body))
        {
            secrets.remove(domain);
            return Err(e);
        }
        Ok(secret)
    }
}

/// What `wiki-security-friends` reads from `status/owner.json`.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct OwnerFile {
    name: String,
    friend: Friend,
}

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Friend {
    secret: String,
}

/// Make `<site folder>/status/owner.json` name `name` as the owner, claimed by `secret`, unless it
/// already says exactly that.
pub fn write_owner_file(site_folder: &Path, name: &str, secret: &str) -> std::io::Result<()> {
    let status = site_folder.join("status");
    let path = status.join("owner.json");
    let wanted = OwnerFile { name: name.to_string(), friend: Friend { secret: secret.to_string() } };
    if let Ok(bytes) = std::fs::read(&path)
        && serde_json::from_slice::<OwnerFile>(&bytes).is_ok_and(|found| found == wanted)
    {
        return Ok(());
    }
    std::fs::create_dir_all(&status)?;
    write_private(&path, &serde_json::to_vec_pretty(&wanted).map_err(std::io::Error::other)?)
}
