//! The farm's API, as the console calls it (the contract: `docs/farm-api.md`): list, read,
//! create, set the status of and delete sites, with a bearer token and a bound on every call.
//! Every call is idempotent on the farm's side, so a request's job may repeat any of them.

pub mod entry;
pub mod signature;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{
    hostname::FarmZone,
    ids::{SiteDomain, WorkspaceId},
    states::SiteStatus,
};

/// A site as the farm reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct FarmSite {
    pub domain: SiteDomain,
    /// The workspace the console created it for (the farm's owner string).
    pub owner: WorkspaceId,
    /// The farm's statuses are the console's three.
    pub status: SiteStatus,
    pub storage_bytes: i64,
    pub modified_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// The farm's list, with the moment it was taken.
#[derive(Debug, Clone, Deserialize)]
pub struct FarmList {
    pub listed_at: chrono::DateTime<chrono::Utc>,
    pub sites: Vec<FarmSite>,
}

/// One page of the farm's list: the moment it was taken, its sites, and the domain to read the
/// next page after (None after the last).
#[derive(Debug, Clone, Deserialize)]
pub struct FarmPage {
    pub listed_at: chrono::DateTime<chrono::Utc>,
    pub sites: Vec<FarmSite>,
    pub next: Option<SiteDomain>,
}

/// What went wrong with a farm call, with a sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FarmError {
    /// No answer in time, no connection, or the farm's own failure (5xx, 429): worth retrying.
    #[error("{0}")]
    Unavailable(String),
    /// The farm refused the call for good (another owner holds the name, a bad name).
    #[error("{0}")]
    Refused(String),
    #[error("the farm has no site {0}")]
    NotFound(String),
}

impl FarmError {
    pub fn is_transient(&self) -> bool {
        matches!(self, FarmError::Unavailable(_))
    }
}

/// The farm's client.
#[derive(Clone)]
pub struct Farm {
    http: reqwest::Client,
    base: String,
    token: String,
    zone: FarmZone,
    /// Where a site answers, `{domain}` standing for its host name.
    site_url: String,
    /// What the farm's callbacks are signed with.
    callback_secret: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
}

impl Farm {
    /// A client of the farm at `base` (no trailing slash needed) whose sites live under `zone`.
    pub fn new(base: &str, token: &str, zone: &FarmZone, call_timeout: Duration) -> Result<Farm, FarmError> {
        let http = reqwest::Client::builder()
            .timeout(call_timeout)
            .connect_timeout(call_timeout.min(Duration::from_secs(5)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| FarmError::Unavailable(format!("the farm's client could not be built: {e}")))?;
        Ok(Farm {
            http,
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            zone: zone.clone(),
            site_url: "https://{domain}/".into(),
            callback_secret: String::new(),
        })
    }

    /// Where sites answer: a template with `{domain}` (the local farm's is `http://{domain}:PORT/`).
    pub fn with_site_url(mut self, template: &str) -> Farm {
        self.site_url = template.to_string();
        self
    }

    /// The secret the farm signs its callbacks with.
    pub fn with_callback_secret(mut self, secret: &str) -> Farm {
        self.callback_secret = secret.to_string();
        self
    }

    pub fn callback_secret(&self) -> &str {
        &self.callback_secret
    }

    /// The address a site answers at.
    pub fn site_url(&self, domain: &SiteDomain) -> String {
        self.site_url.replace("{domain}", domain.as_str())
    }

    /// Where a member follows `claims` into the site's wiki to edit it: the site's own
    /// `/_farm/enter` with a credential signed under the farm's token.
    pub fn entry_url(&self, claims: &entry::EntryClaims) -> String {
        let site = self.site_url(&claims.domain);
        format!("{}/_farm/enter?c={}", site.trim_end_matches('/'), entry::sign(&self.token, claims))
    }

    /// The farm's zone: a site named `acme` answers at `acme.<zone>`.
    pub fn zone(&self) -> &FarmZone {
        &self.zone
    }

    #[tracing::instrument(name = "Farm: list sites", skip(self))]
    pub async fn list_sites(&self) -> Result<FarmList, FarmError> {
        let r = self.send(self.http.get(format!("{}/api/sites", self.base)), "list the farm's sites").await?;
        json(r, "the farm's list").await
    }

    /// One page of the list: at most `limit` sites after `after`, by domain.
    pub async fn list_page(&self, after: &SiteDomain, limit: usize) -> Result<FarmPage, FarmError> {
        let req = self
            .http
            .get(format!("{}/api/sites", self.base))
            .query(&[("after", after.as_str()), ("limit", &limit.to_string())]);
        let r = self.send(req, "list the farm's sites").await?;
        json(r, "a page of the farm's list").await
    }

    #[tracing::instrument(name = "Farm: read a site", skip(self))]
    pub async fn get_site(&self, domain: &SiteDomain) -> Result<Option<FarmSite>, FarmError> {
        let url = format!("{}/api/sites/{}", self.base, domain);
        match self.send(self.http.get(url), "read a site on the farm").await {
            Ok(r) => json(r, "the farm's site").await.map(Some),
            Err(FarmError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Create `domain` for `owner` in `status`; the farm answers the existing site on a repeat.
    pub async fn create_site(
        &self,
        domain: &SiteDomain,
        owner: &WorkspaceId,
        status: SiteStatus,
    ) -> Result<FarmSite, FarmError> {
        self.create_named_site(domain, owner, None, status).await
    }

    /// [`Farm::create_site`], the wiki naming its owner `owner_name` when given ("Wiki by …").
    #[tracing::instrument(name = "Farm: create a site", skip(self))]
    pub async fn create_named_site(
        &self,
        domain: &SiteDomain,
        owner: &WorkspaceId,
        owner_name: Option<&str>,
        status: SiteStatus,
    ) -> Result<FarmSite, FarmError> {
        let url = format!("{}/api/sites/{}", self.base, domain);
        let mut body = serde_json::json!({ "owner": owner, "status": status });
        if let Some(name) = owner_name {
            body["owner_name"] = name.into();
        }
        let r = self.send(self.http.put(url).json(&body), "create the site on the farm").await?;
        json(r, "the farm's new site").await
    }

    #[tracing::instrument(name = "Farm: set a site's status", skip(self))]
    pub async fn set_status(&self, domain: &SiteDomain, status: SiteStatus) -> Result<FarmSite, FarmError> {
        let url = format!("{}/api/sites/{}/status", self.base, domain);
        let body = serde_json::json!({ "status": status });
        let r = self.send(self.http.put(url).json(&body), "change the site's status on the farm").await?;
        json(r, "the farm's site").await
    }

    /// Delete `domain`; deleting a site the farm does not have is done too.
    #[tracing::instrument(name = "Farm: delete a site", skip(self))]
    pub async fn delete_site(&self, domain: &SiteDomain) -> Result<(), FarmError> {
        let url = format!("{}/api/sites/{}", self.base, domain);
        match self.send(self.http.delete(url), "delete the site on the farm").await {
            Ok(_) | Err(FarmError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One call, measured under `what` (a 404 is an answer, not a failure).
    async fn send(&self, req: reqwest::RequestBuilder, what: &'static str) -> Result<reqwest::Response, FarmError> {
        crate::metrics::timed(crate::metrics::System::Farm, what, self.send_unmeasured(req, what), |r| {
            matches!(r, Err(FarmError::Unavailable(_) | FarmError::Refused(_)))
        })
        .await
    }

    async fn send_unmeasured(&self, req: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response, FarmError> {
        let started = std::time::Instant::now();
        let r = crate::trace_context::outgoing(req).bearer_auth(&self.token).send().await.map_err(|e| {
            tracing::warn!(error = %e, elapsed_ms = started.elapsed().as_millis() as u64, "the farm did not answer");
            if e.is_timeout() {
                FarmError::Unavailable(format!("The farm did not answer in time when asked to {what}."))
            } else {
                FarmError::Unavailable(format!("The farm could not be reached to {what}."))
            }
        })?;
        let status = r.status();
        if status.is_success() {
            return Ok(r);
        }
        let said = r.json::<ErrorBody>().await.map(|b| b.error).unwrap_or_default();
        tracing::warn!(status = status.as_u16(), said, "the farm refused a call");
        let said = if said.is_empty() { String::new() } else { format!(": {said}") };
        Err(match status.as_u16() {
            404 => FarmError::NotFound(what.to_string()),
            429 | 500..=599 => FarmError::Unavailable(format!("The farm failed to {what} ({status}){said}")),
            401 | 403 => FarmError::Unavailable(format!(
                "The farm refused the console's token when asked to {what}; an operator must check FARM_TOKEN"
            )),
            _ => FarmError::Refused(format!("The farm refused to {what}{said}")),
        })
    }
}

async fn json<T: serde::de::DeserializeOwned>(r: reqwest::Response, what: &str) -> Result<T, FarmError> {
    r.json::<T>().await.map_err(|e| {
        tracing::warn!(error = %e, "the farm's answer could not be read");
        FarmError::Unavailable(format!("The farm's answer ({what}) could not be read."))
    })
}
