//! What the farm does to its sites, one public function per API path, plus the watcher that
//! notices when an active site's data changes. Every change is written to `farm.json` and
//! reported by a callback while the store's lock is held, so callbacks leave in change order.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SubsecRound, Utc};

use crate::callbacks::{Callbacks, EventType};
use crate::domain::SiteDomain;
use crate::error;
use crate::secrets::{SiteSecrets, write_owner_file};
use crate::state::{Site, Status, Store, now};
use standin_http::{ApiError, ApiResult};

pub struct Farm {
    pub store: Store,
    pub callbacks: Callbacks,
    /// The `wiki` server's data folder: one folder per site (see [`SiteDomain::folder`]).
    pub wiki_data: PathBuf,
    pub farm_domain: String,
    /// Each domain's friend secret (the owner file's).
    pub secrets: SiteSecrets,
    /// Where the console confirms a member's edit session (docs/farm-api.md), signed with the
    /// callbacks' secret; None: no session can be confirmed, so none outlives its first interval.
    pub confirm_url: std::sync::RwLock<Option<String>>,
}

/// Whether a create made the site or found it already there for the same owner.
pub enum Created {
    New(Site),
    Existing(Site),
}

impl Farm {
    pub fn parse_domain(&self, raw: &str) -> ApiResult<SiteDomain> {
        SiteDomain::parse(raw, &self.farm_domain).map_err(ApiError::bad_request)
    }

    /// Every site by domain, and the farm's time taken before reading them.
    pub fn list(&self) -> (DateTime<Utc>, Vec<Site>) {
        let listed_at = now();
        let sites = self.store.lock().sites.values().cloned().collect();
        (listed_at, sites)
    }

    /// Up to `limit` sites after `after`, by domain, and whether more follow.
    pub fn page(&self, after: &str, limit: usize) -> (DateTime<Utc>, Vec<Site>, bool) {
        use std::ops::Bound::{Excluded, Unbounded};
        let listed_at = now();
        let st = self.store.lock();
        let lower = if after.is_empty() { Unbounded } else { Excluded(after.to_string()) };
        let mut range = st.sites.range((lower, Unbounded)).map(|(_, s)| s.clone());
        let sites: Vec<Site> = range.by_ref().take(limit).collect();
        let more = range.next().is_some();
        (listed_at, sites, more)
    }

    pub fn get(&self, domain: &str) -> ApiResult<Site> {
        self.store.get(domain).ok_or_else(|| error::no_site(domain))
    }

    /// Create a site with an empty data folder (a leftover folder of a deleted site is cleared
    /// first); the same owner asking again gets the site as it is.
    #[tracing::instrument(name = "Create a site", skip(self), fields(domain = %domain))]
    pub fn create(
        &self,
        domain: &SiteDomain,
        owner: &str,
        owner_name: Option<&str>,
        status: Status,
    ) -> ApiResult<Created> {
        let mut st = self.store.lock();
        if let Some(site) = st.sites.get(domain.as_str()) {
            return if site.owner == owner {
                Ok(Created::Existing(site.clone()))
            } else {
                Err(error::taken(domain.as_str()))
            };
        }
        let folder = domain.folder(&self.wiki_data);
        seed(&folder).map_err(|e| error::storage("create the site's data folder", &e))?;
        let owner_name = owner_name.map(str::to_string);
        self.write_owner(domain, owner_name.as_deref(), &folder)
            .map_err(|e| error::storage("write the site's owner file", &e))?;
        let usage = measure(&folder);
        let site = Site {
            domain: domain.to_string(),
            owner: owner.to_string(),
            owner_name,
            status,
            storage_bytes: usage.storage_bytes,
            modified_at: usage.modified_at,
            created_at: now(),
        };
        st.sites.insert(site.domain.clone(), site.clone());
        if let Err(e) = st.save() {
            st.sites.remove(domain.as_str());
            return Err(error::storage("save its state", &e));
        }
        self.callbacks.emit(EventType::Created, &site);
        Ok(Created::New(site))
    }

    /// The name the wiki shows as its owner: the one the create call gave, else the site's name.
    pub fn owner_display_name(site: &Site) -> String {
        display_name(&site.domain, site.owner_name.as_deref())
    }

    /// Write the site's `status/owner.json` (its display name and the domain's secret), which
    /// makes the wiki claimed: only a `wiki` session holding the secret is its owner.
    fn write_owner(&self, domain: &SiteDomain, owner_name: Option<&str>, folder: &Path) -> std::io::Result<()> {
        let name = display_name(domain.as_str(), owner_name);
        write_owner_file(folder, &name, &self.secrets.secret_for(domain.as_str())?)
    }

    /// Give every site the farm holds its owner file (sites made before the farm wrote them, or
    /// whose file was removed), before `wiki` starts and reads them.
    pub fn write_owner_files(&self) -> std::io::Result<()> {
        let sites: Vec<Site> = self.store.lock().sites.values().cloned().collect();
        for site in sites {
            let Ok(domain) = SiteDomain::parse(&site.domain, &self.farm_domain) else { continue };
            self.write_owner(&domain, site.owner_name.as_deref(), &domain.folder(&self.wiki_data))?;
        }
        Ok(())
    }

    /// The secret that claims the site's wiki for its owner.
    pub fn site_secret(&self, domain: &str) -> std::io::Result<String> {
        self.secrets.secret_for(domain)
    }

    /// Set a site's status; the same status again changes nothing and reports nothing.
    #[tracing::instrument(name = "Set a site's status", skip(self), fields(domain = %domain))]
    pub fn set_status(&self, domain: &str, status: Status) -> ApiResult<Site> {
        let mut st = self.store.lock();
        let Some(before) = st.sites.get(domain).cloned() else { return Err(error::no_site(domain)) };
        if before.status == status {
            return Ok(before);
        }
        let usage = SiteDomain::parse(domain, &self.farm_domain)
            .map(|d| measure(&d.folder(&self.wiki_data)))
            .unwrap_or(Usage { storage_bytes: before.storage_bytes, modified_at: before.modified_at });
        let site =
            Site { status, storage_bytes: usage.storage_bytes, modified_at: usage.modified_at, ..before.clone() };
        st.sites.insert(domain.to_string(), site.clone());
        if let Err(e) = st.save() {
            st.sites.insert(domain.to_string(), before);
            return Err(error::storage("save its state", &e));
        }
        self.callbacks.emit(EventType::StatusChanged, &site);
        Ok(site)
    }

    /// Forget a site and remove its data folder; a site that is not there is already deleted.
    #[tracing::instrument(name = "Delete a site", skip(self), fields(domain = %domain))]
    pub fn delete(&self, domain: &str) -> ApiResult<()> {
        let mut st = self.store.lock();
        let removed = st.sites.remove(domain);
        if let Some(site) = &removed {
            if let Err(e) = st.save() {
                st.sites.insert(domain.to_string(), site.clone());
                return Err(error::storage("save its state", &e));
            }
            self.callbacks.emit(EventType::Deleted, site);
        }
        // Also after a crash between the state write and the folder's removal: a retry cleans up.
        if let Ok(domain) = SiteDomain::parse(domain, &self.farm_domain) {
            remove_folder(&domain.folder(&self.wiki_data))
                .map_err(|e| error::storage("remove the site's data folder", &e))?;
        }
        Ok(())
    }

    /// Measure every active site's folder and report those whose storage or latest page
    /// modification changed since last seen.
    pub async fn refresh_active(&self) {
        let active: Vec<(String, PathBuf)> = {
            let st = self.store.lock();
            st.sites
                .values()
                .filter(|s| s.status == Status::Active)
                .filter_map(|s| SiteDomain::parse(&s.domain, &self.farm_domain).ok())
                .map(|d| (d.to_string(), d.folder(&self.wiki_data)))
                .collect()
        };
        if active.is_empty() {
            return;
        }
        let measured = tokio::task::spawn_blocking(move || {
            active.into_iter().map(|(domain, folder)| (domain, measure(&folder))).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let mut st = self.store.lock();
        let mut changed = Vec::new();
        for (domain, usage) in measured {
            let Some(site) = st.sites.get_mut(&domain) else { continue };
            if site.status != Status::Active
                || (site.storage_bytes == usage.storage_bytes && site.modified_at == usage.modified_at)
            {
                continue;
            }
            site.storage_bytes = usage.storage_bytes;
            site.modified_at = usage.modified_at;
            changed.push(site.clone());
        }
        if changed.is_empty() {
            return;
        }
        if let Err(e) = st.save() {
            // The sites keep their new values in memory; the next change writes them.
            tracing::error!(error = %e, "could not save the farm's state");
        }
        for site in &changed {
            self.callbacks.emit(EventType::Modified, site);
        }
    }

    /// Measure active sites every `poll` until the task is aborted.
    pub async fn watch(self: std::sync::Arc<Self>, poll: Duration) {
        loop {
            tokio::time::sleep(poll).await;
            self.refresh_active().await;
        }
    }
}

fn display_name(domain: &str, owner_name: Option<&str>) -> String {
    owner_name.map(str::to_string).unwrap_or_else(|| domain.split('.').next().unwrap_or_default().to_string())
}

/// What the farm reports about a site's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub storage_bytes: u64,
    pub modified_at: Option<DateTime<Utc>>,
}

/// The total size of the files under `folder` but the owner file the farm writes (the site's
/// data is what its members and `wiki` wrote), and the latest modification time among the page
/// files in `folder/pages` (where `wiki` keeps one file per page).
pub fn measure(folder: &Path) -> Usage {
    let modified_at = std::fs::read_dir(folder.join("pages"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| meta.is_file())
        .filter_map(|meta| meta.modified().ok())
        .max()
        .map(|t: SystemTime| DateTime::<Utc>::from(t).trunc_subsecs(3));
    let owner_file = std::fs::metadata(folder.join("status").join("owner.json")).map(|m| m.len()).unwrap_or(0);
    Usage { storage_bytes: size_of(folder).saturating_sub(owner_file), modified_at }
}

fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    std::fs::read_dir(path).into_iter().flatten().flatten().map(|entry| size_of(&entry.path())).sum()
}

/// A new site's folder: empty, with the `pages` folder `wiki` keeps its pages in. `wiki` serves
/// its default pages (Welcome Visitors …) until a visitor edits one.
fn seed(folder: &Path) -> std::io::Result<()> {
    remove_folder(folder)?;
    std::fs::create_dir_all(folder.join("pages"))
}

/// Remove a folder and everything in it; tries again when `wiki` writes into it meanwhile.
fn remove_folder(folder: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::remove_dir_all(folder) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if tries < 5 => {
                tracing::debug!(error = %e, folder = %folder.display(), "retrying the folder's removal");
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}
