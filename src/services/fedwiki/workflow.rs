//! A lifecycle request's workflow, carried by its durable job (`RunSiteRequest`): the slot gate
//! for a create or an activation, the farm call with no lock held, then the record step. Each
//! step is safe to run again (the gate keeps its hold, the farm's calls are idempotent, the
//! record step leaves a finished request alone), so a crash anywhere resumes and records once.
//! A failure the farm may get over is retried with backoff; the last attempt, or a refusal,
//! ends the request failed with a reason the member reads.

use crate::{
    db::Db,
    ids::RequestId,
    integrations::farm::{Farm, FarmError},
    services::ServiceError,
    states::{RequestKind, RequestState, SiteStatus},
    store::fedwiki::{self as store, RequestRow},
};

use super::{
    gate::{Gate, hold_site_slot},
    record::{Activity, Recorded, delete_fedwiki_site, finish_all_with},
    registry,
};

/// What became of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    Recorded(Recorded),
    /// The request was already finished: nothing to do.
    Nothing,
}

/// Run request `id`'s workflow. `last_attempt`: a farm failure now ends the request failed
/// instead of asking for another attempt.
#[tracing::instrument(name = "Run a site request", skip(db, farm))]
pub async fn run_site_request(db: &Db, farm: &Farm, id: RequestId, last_attempt: bool) -> Result<Ran, ServiceError> {
    let (req, partner) = {
        let mut read = db.read().await?;
        let Some(req) = store::request(read.conn(), id).await? else { return Ok(Ran::Nothing) };
        let partner = store::swap_partner(read.conn(), id).await?;
        (req, partner)
    };
    // A swap's park half is carried by its activation's job, with one outcome for both halves:
    // run on its own it would park the site while the activation still waits for its job.
    if req.state != RequestState::Accepted || req.swap_of.is_some() {
        return Ok(Ran::Nothing);
    }
    let outcome = match (&req.kind, &partner) {
        (RequestKind::Activate, Some(parked)) => swap(db, farm, &req, parked).await,
        (RequestKind::Create, _) => create(db, farm, &req).await,
        (RequestKind::Activate, None) => activate(db, farm, &req).await,
        (RequestKind::Park, _) => status(db, farm, &req, SiteStatus::Parked).await,
        (RequestKind::Archive, _) => status(db, farm, &req, SiteStatus::Archived).await,
        (RequestKind::Delete, _) => delete(db, farm, &req).await,
    };
    match outcome {
        Ok(r) => Ok(Ran::Recorded(r)),
        Err(Step::Farm(e)) if e.is_transient() && !last_attempt => {
            Err(ServiceError::Remote { sentence: e.to_string(), transient: true })
        }
        Err(Step::Farm(e)) => {
            let requests: Vec<RequestRow> = std::iter::once(req.clone()).chain(partner.clone()).collect();
            let reason = format!("{}. The request was not carried out.", e.to_string().trim_end_matches('.'));
            let r = finish_all_with(db, &requests, Activity::Finish { state: RequestState::Failed, outcome: reason })
                .await?;
            match req.kind {
                // The site was never recorded: its name goes back to the pool of free names.
                RequestKind::Create => {
                    registry::release_site_names(db, &req.instance_id).await?;
                }
                // The deletion released the name first, and the site stays: it takes its name
                // back (no create can have taken it while the row held it).
                RequestKind::Delete => {
                    super::maintenance::sync_placement(db, &req.instance_id, &req.domain, &req.workspace_id).await?;
                }
                _ => {}
            }
            Ok(Ran::Recorded(r))
        }
        Err(Step::Service(e)) => Err(e),
    }
}

/// A step's failure: the farm's, or the console's own.
enum Step {
    Farm(FarmError),
    Service(ServiceError),
}

impl From<ServiceError> for Step {
    fn from(e: ServiceError) -> Self {
        Step::Service(e)
    }
}

impl From<FarmError> for Step {
    fn from(e: FarmError) -> Self {
        Step::Farm(e)
    }
}

fn full(used: i64, limit: i64) -> String {
    if limit == 0 {
        "The plan includes no active sites: upgrade the plan to activate one.".into()
    } else {
        format!("{used} of {limit} active sites are in use: park one or upgrade your plan.")
    }
}

async fn create(db: &Db, farm: &Farm, req: &RequestRow) -> Result<Recorded, Step> {
    let starts = match req.starts_as {
        Some(s) => s,
        None => match hold_site_slot(db, req).await? {
            Gate::Held | Gate::AlreadyActive => SiteStatus::Active,
            Gate::Full { .. } => SiteStatus::Parked,
            Gate::Gone => return Ok(Recorded::AlreadyFinished),
        },
    };
    // The wiki names its owner by the organization's name ("Wiki by …").
    let owner_name = super::entry::owner_name(db, &req.workspace_id).await?;
    let made = farm.create_named_site(&req.domain, &req.workspace_id, owner_name.as_deref(), starts).await?;
    // A site the farm already had for this owner (a retry, or one made by hand) is answered as it
    // is, not in the status asked for: the farm is brought to what the gate granted before it is
    // recorded, so it never holds more active sites than the plan's slots.
    if made.status != starts {
        farm.set_status(&req.domain, starts).await?;
    }
    Ok(finish_all_with(db, std::slice::from_ref(req), Activity::Created { status: starts }).await?)
}

async fn activate(db: &Db, farm: &Farm, req: &RequestRow) -> Result<Recorded, Step> {
    match hold_site_slot(db, req).await? {
        Gate::Held | Gate::AlreadyActive => status(db, farm, req, SiteStatus::Active).await,
        Gate::Full { used, limit } => Ok(finish_all_with(
            db,
            std::slice::from_ref(req),
            Activity::Finish { state: RequestState::Declined, outcome: full(used, limit) },
        )
        .await?),
        Gate::Gone => Ok(finish_all_with(
            db,
            std::slice::from_ref(req),
            Activity::Finish {
                state: RequestState::Failed,
                outcome: format!("{} was deleted before it could be activated.", req.domain),
            },
        )
        .await?),
    }
}

async fn status(db: &Db, farm: &Farm, req: &RequestRow, to: SiteStatus) -> Result<Recorded, Step> {
    farm.set_status(&req.domain, to).await?;
    Ok(finish_all_with(db, std::slice::from_ref(req), Activity::Status { status: to }).await?)
}

async fn swap(db: &Db, farm: &Farm, activated: &RequestRow, parked: &RequestRow) -> Result<Recorded, Step> {
    // Park first: the farm never holds more active sites than the plan allows.
    farm.set_status(&parked.domain, SiteStatus::Parked).await?;
    if let Err(e) = farm.set_status(&activated.domain, SiteStatus::Active).await {
        // Put the parked side back as the console still holds it, then report the failure.
        let _ = farm.set_status(&parked.domain, SiteStatus::Active).await;
        return Err(e.into());
    }
    let both = [activated.clone(), parked.clone()];
    match finish_all_with(db, &both, Activity::Swap).await? {
        Recorded::OverLimit { used, limit } => {
            // Undo on the farm what the guard refused, then say why.
            let _ = farm.set_status(&activated.domain, SiteStatus::Parked).await;
            let _ = farm.set_status(&parked.domain, SiteStatus::Active).await;
            Ok(finish_all_with(
                db,
                &both,
                Activity::Finish { state: RequestState::Declined, outcome: full(used, limit) },
            )
            .await?)
        }
        other => Ok(other),
    }
}

async fn delete(db: &Db, farm: &Farm, req: &RequestRow) -> Result<Recorded, Step> {
    // A member's deletion releases the name before the site's deletion.
    registry::release_site_names(db, &req.instance_id).await?;
    farm.delete_site(&req.domain).await?;
    delete_fedwiki_site(db, &req.instance_id, &req.workspace_id).await?;
    Ok(finish_all_with(db, std::slice::from_ref(req), Activity::Deleted).await?)
}
