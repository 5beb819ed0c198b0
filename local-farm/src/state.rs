//! The farm's sites, kept in memory and written to `<data>/farm.json` after every change
//! (a temporary file, then a rename, so a crash leaves the old or the new file, never half).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A site's status on the farm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Parked,
    Archived,
}

impl Status {
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "active" => Some(Status::Active),
            "parked" => Some(Status::Parked),
            "archived" => Some(Status::Archived),
            _ => None,
        }
    }
}

/// A site, exactly as the API answers it and the callbacks carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    pub domain: String,
    pub owner: String,
    /// How the wiki names its owner ("Wiki by …"), as the create call gave it; null when it gave
    /// none (the wiki then shows the site's name).
    #[serde(default)]
    pub owner_name: Option<String>,
    pub status: Status,
    /// Total size of the files in the site's data folder, as last measured.
    pub storage_bytes: u64,
    /// The latest modification time among the site's page files, as last measured.
    #[serde(with = "rfc3339_opt")]
    pub modified_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

/// Now, to the millisecond: every time the farm writes is RFC 3339 UTC with milliseconds.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(3)
}

pub fn format_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub mod rfc3339 {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let raw = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&raw).map(|t| t.with_timezone(&Utc)).map_err(serde::de::Error::custom)
    }
}

pub mod rfc3339_opt {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&format_time(t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        let raw = Option::<String>::deserialize(d)?;
        raw.map(|raw| {
            DateTime::parse_from_rfc3339(&raw).map(|t| t.with_timezone(&Utc)).map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// What `farm.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct FarmFile {
    sites: Vec<Site>,
}

pub struct Inner {
    /// By domain, so lists come out sorted.
    pub sites: BTreeMap<String, Site>,
    /// None: kept in memory only (a benchmark's farm, which must answer at once).
    file: Option<PathBuf>,
}

impl Inner {
    /// Write every site to `farm.json`: a temporary file beside it, synced, then renamed over it.
    pub fn save(&self) -> std::io::Result<()> {
        let Some(path) = &self.file else { return Ok(()) };
        let file = FarmFile { sites: self.sites.values().cloned().collect() };
        let body = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        let tmp = path.with_extension("json.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    }
}

/// The sites, shared by the API, the watcher and the proxy.
#[derive(Clone)]
pub struct Store(Arc<Mutex<Inner>>);

impl Store {
    /// Read `<data>/farm.json`, or start empty when there is none; with `persist` false, start
    /// empty and write nothing.
    pub fn open(data_dir: &Path, persist: bool) -> std::io::Result<Store> {
        if !persist {
            return Ok(Store(Arc::new(Mutex::new(Inner { sites: BTreeMap::new(), file: None }))));
        }
        let file = data_dir.join("farm.json");
        let sites = match std::fs::read(&file) {
            Ok(bytes) => {
                let parsed: FarmFile = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", file.display()))
                })?;
                parsed.sites.into_iter().map(|s| (s.domain.clone(), s)).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Store(Arc::new(Mutex::new(Inner { sites, file: Some(file) }))))
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, domain: &str) -> Option<Site> {
        self.lock().sites.get(domain).cloned()
    }
}
