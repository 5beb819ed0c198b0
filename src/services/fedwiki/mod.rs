//! FedWiki sites (issue 13; `docs/fedwiki.md`): a member's acts on the organization's wikis,
//! recorded as lifecycle requests and carried by durable jobs through the slot gate, the farm
//! and the record step, with the domains registry naming them. Each module is one part of the
//! spec: `handlers` ("FedWiki at the handler"), `intake` ("Lifecycle intake"), `gate` ("At the
//! slot gate"), `record` ("When recording an outcome"), `registry` ("Registry"), `maintenance`
//! ("In the farm sync", "In the retention purge", "In the downgrade sweep and at boot").

pub mod callbacks;
pub mod domains;
pub mod entry;
pub mod gate;
pub mod handlers;
pub mod intake;
pub mod maintenance;
pub mod names;
pub mod reads;
pub mod record;
pub mod registry;
pub mod repair;
pub mod verification;
pub mod workflow;

use std::{sync::Arc, time::Duration};

use crate::{
    ids::RequestId,
    integrations::farm::Farm,
    jobs::{Job, JobContext, JobError, remote_failure},
};

pub use callbacks::{FarmCallback, Received, receive_farm_callback};
pub use handlers::{SwapSites, change_status, create_site, set_keep_active, swap_active_site, withdraw_request};
pub use workflow::{Ran, run_site_request};

/// Attempts a request's job gets: with the queue's backoff and 30 s per farm call, a few minutes of a farm that
/// does not answer before the request ends failed.
pub const REQUEST_ATTEMPTS: i32 = 6;

/// The job that carries one lifecycle request (both of a swap's) to its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunSiteRequest {
    pub request_id: RequestId,
}

impl Job for RunSiteRequest {
    const KIND: &'static str = "fedwiki_request";
    const MAX_ATTEMPTS: i32 = REQUEST_ATTEMPTS;
    type Context = FarmJobs;

    fn dedupe_key(&self) -> Option<String> {
        Some(intake::job_key(self.request_id))
    }

    /// The workflow, safe to run again at any step; its last attempt records the failure.
    async fn run(&self, farm: &FarmJobs, job: &JobContext) -> Result<(), JobError> {
        run_site_request(&job.db, &farm.farm, self.request_id, job.is_last_attempt()).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// What the sites' jobs need: the farm, and how long an archived site is kept.
#[derive(Clone)]
pub struct FarmJobs {
    pub farm: Arc<Farm>,
    pub retention: Duration,
}

impl FarmJobs {
    pub fn new(farm: Arc<Farm>, settings: &crate::config::FarmSettings) -> FarmJobs {
        FarmJobs { farm, retention: settings.retention }
    }
}

/// The workspace of the farm's sites no organization owns (adopted by the sync).
pub const SYSTEM_WORKSPACE: &str = "system";

/// The maintenance run (a schedule: the queue keeps one pending or running, so runs never overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FedwikiMaintenance {}

impl Job for FedwikiMaintenance {
    const KIND: &'static str = "fedwiki_maintenance";
    type Context = FarmJobs;

    /// A run that fails is recorded as failed; the next one, on schedule, repairs.
    async fn run(&self, farm: &FarmJobs, job: &JobContext) -> Result<(), JobError> {
        maintenance::run_maintenance(&job.db, &farm.farm, farm.retention).await.map_err(remote_failure)?;
        Ok(())
    }
}
