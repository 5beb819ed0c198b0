//! The farm's callbacks (`POST /farm/callbacks`), after the web layer checked the signature on
//! the raw body: a duplicate does nothing; a callback writes only what it observed (storage and
//! modification time, SetSiteObservedByDomain) and nudges the job of a request waiting on the
//! site, never a status: the request's own workflow reads the farm and records. An observation that
//! occurred before what the console already holds of the site (a late delivery, or a sync that
//! listed the site after it) is not written.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx::within_for,
    },
    integrations::farm::FarmSite,
    jobs::Job,
    services::ServiceError,
    store::fedwiki::{self as store, Observed},
};

use super::RunSiteRequest;

pub static RECEIVE_FARM_CALLBACK_LOCKS: PathLocks = PathLocks {
    path: "Farm callback: record an observation",
    function: "services::fedwiki::callbacks::receive_farm_callback",
    kind: "Plain",
    locks: &[Lock::SiteRow],
    why: "The callback's id, then the site row by domain for the observed storage and modification time, held \
          through commit (none when the row holds a later observation); no status, no usage row, no instance lock.",
};

/// A callback's body.
#[derive(Debug, Deserialize)]
pub struct FarmCallback {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The farm's clock at the change: what orders the callbacks and the sync's lists.
    pub occurred_at: DateTime<Utc>,
    pub site: FarmSite,
}

/// What a callback did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    Recorded { observed: bool, nudged: usize },
    Duplicate,
}

/// Record one verified callback.
#[tracing::instrument(name = "Receive a farm callback", skip(db, cb), fields(id = %cb.id, kind = %cb.kind, domain = %cb.site.domain))]
pub async fn receive_farm_callback(db: &Db, cb: &FarmCallback) -> Result<Received, ServiceError> {
    if cb.id.is_empty() || cb.id.len() > 200 || cb.site.domain.as_str().len() > 253 {
        return Err(ServiceError::invalid_form("The callback's id or domain is not in the farm's form."));
    }
    within_for(db, TxKind::Plain, &RECEIVE_FARM_CALLBACK_LOCKS, async |tx: &mut Tx| {
    if !store::record_callback(tx.conn(), &cb.id, &cb.kind, &cb.site.domain).await? {
        return Ok(Received::Duplicate);
    }
    let observed = match cb.kind.as_str() {
        "site.created" | "site.status_changed" | "site.modified" => {
            store::set_site_observed_by_domain(
                tx.conn(),
                &cb.site.domain,
                cb.site.storage_bytes,
                cb.site.modified_at,
                cb.occurred_at,
            )
            .await?
        }
        _ => Observed::NoSite,
    };
    if let Observed::Older { known } = observed {
        // A late delivery: its values would put older ones back. A waiting request is still
        // nudged: its job reads the farm as it is now, not this callback.
        tracing::info!(occurred_at = %cb.occurred_at, known = %known, "an older callback than the site's latest observation: nothing written");
    }
    let observed = observed == Observed::Written;
    let waiting = store::open_requests_on_domain(tx.conn(), &cb.site.domain).await?;
    for id in &waiting {
        RunSiteRequest { request_id: *id }.enqueue(tx.conn()).await?;
    }
    Ok(Received::Recorded { observed, nudged: waiting.len() })
    })
    .await
}
