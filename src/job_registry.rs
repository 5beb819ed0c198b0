//! The console's jobs and schedules, wired in one place above the services that define them and
//! the queue that runs them (neither imports this module).

use std::{sync::Arc, time::Duration};

use crate::{
    db::{Db, DbError},
    integrations::desired_state::Relay,
    integrations::{farm::Farm, stripe::Stripe},
    jobs::{self, Handlers, JobError, PurgeExpired, ensure_schedule},
    services::{
        ServiceError,
        billing::{self, ConvergeInvoice, ProcessOutbox, ReconcileSubscription, SweepBilling},
        desired_state::{
            self as ds, DispatchDesiredState, ProcessDesiredStateOutbox, ReadBackDesiredState, ScheduleReadBacks,
        },
        fedwiki::{self, RunSiteRequest},
        grants::{self, ExpireGrant, StartGrant, SweepGrants},
        organizations::{self, CompactCounts},
        plan_acts::{self as pa, DrainPlanAct, ResumePlanActDrains},
        rule_changes::{self as rc, DrainRuleChange, ResumeRuleChangeDrains},
    },
};

pub const PURGE_EXPIRED_EVERY: Duration = Duration::from_secs(3600);
pub const COMPACT_COUNTS_EVERY: Duration = Duration::from_secs(60);
/// How often the grant sweep runs: a missed expiry or start job is caught within this.
pub const SWEEP_GRANTS_EVERY: Duration = Duration::from_secs(60);
/// How often the pollers look for rule changes and plan acts with work still owed.
pub const RESUME_DRAINS_EVERY: Duration = Duration::from_secs(30);

/// A grant job's failure: the database's is tried again (a lock wait past its bound, a deadline),
/// as is another change in progress; a refusal is the grant's answer for good.
fn grant_failure(e: ServiceError) -> JobError {
    match e {
        ServiceError::Db(d) => JobError::Db(d),
        ServiceError::ChangeInProgress => JobError::retry(e.to_string()),
        other => JobError::Permanent(other.to_string()),
    }
}

/// How often the outbox processor looks for due rows (reconcile requests, product syncs).
pub const PROCESS_OUTBOX_EVERY: Duration = Duration::from_secs(5);
/// How often the billing sweep re-reads Stripe: a lost webhook is repaired within this.
pub const SWEEP_BILLING_EVERY: Duration = Duration::from_secs(300);

/// A job's failure in a system outside (Stripe, the farm): it not answering, the database, or another change in progress
/// is tried again with backoff; anything else is the job's answer for good.
fn remote_failure(e: ServiceError) -> JobError {
    match e {
        ServiceError::Db(d) => JobError::Db(d),
        ServiceError::Remote { transient: true, .. } | ServiceError::ChangeInProgress => JobError::retry(e.to_string()),
        other => JobError::Permanent(other.to_string()),
    }
}

/// The handlers of every job, billing's included when Stripe is connected (without it no
/// billing job can do its work, and none is registered, so they wait).
pub fn handlers_with(stripe: Option<Arc<Stripe>>) -> Handlers {
    handlers_connected(stripe, None)
}

/// The handlers of every job, with billing's and the sites' when Stripe and the farm are
/// connected (a job whose system is not connected has no handler and waits).
pub fn handlers_connected(stripe: Option<Arc<Stripe>>, farm: Option<FarmJobs>) -> Handlers {
    let mut h = standard_handlers();
    if let Some(stripe) = stripe {
        h.merge(billing_handlers(stripe));
    }
    if let Some(farm) = farm {
        h.merge(farm_handlers(farm));
    }
    h
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

/// The sites' jobs: each request's workflow, safe to run again at any step; the maintenance run.
pub fn farm_handlers(jobs: FarmJobs) -> Handlers {
    let mut h = Handlers::new();
    h.job_with(jobs.farm.clone(), |ctx, f, j: RunSiteRequest| async move {
        let last = ctx.is_last_attempt();
        fedwiki::run_site_request(&ctx.db, &f, j.request_id, last).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(jobs.farm.clone(), |ctx, f, j: fedwiki::repair::ReconcileSiteStatus| async move {
        fedwiki::repair::reconcile_site_status(&ctx.db, &f, j.request_id).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(Arc::new(jobs), |ctx, j, _: fedwiki::FedwikiMaintenance| async move {
        // A run that fails is recorded as failed; the next one, on schedule, repairs.
        fedwiki::maintenance::run_maintenance(&ctx.db, &j.farm, j.retention).await.map_err(remote_failure)?;
        Ok(())
    });
    h
}

/// The sites' schedule: the maintenance run every `every` (runs never overlap: the queue keeps
/// one pending or running).
pub async fn register_farm_schedules(db: &Db, every: Duration) -> Result<(), DbError> {
    use jobs::Job;
    ensure_schedule(db, fedwiki::FedwikiMaintenance::KIND, every).await
}

/// The billing jobs: each reads Stripe before its transaction, so any may run again safely.
pub fn billing_handlers(stripe: Arc<Stripe>) -> Handlers {
    let mut h = Handlers::new();
    h.job_with(stripe.clone(), |ctx, s, j: ReconcileSubscription| async move {
        billing::reconcile_subscription(&ctx.db, &s, &j.stripe_subscription_id).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(stripe.clone(), |ctx, s, j: ConvergeInvoice| async move {
        billing::converge_invoice(&ctx.db, &s, &j.stripe_invoice_id).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(stripe.clone(), |ctx, s, _: ProcessOutbox| async move {
        billing::process_outbox(&ctx.db, &s, 100, ctx.lease).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(stripe, |ctx, s, _: SweepBilling| async move {
        billing::sweep_billing(&ctx.db, &s).await.map_err(remote_failure)?;
        Ok(())
    });
    h
}

/// The billing schedules (with Stripe connected).
pub async fn register_billing_schedules(db: &Db) -> Result<(), DbError> {
    use jobs::Job;
    ensure_schedule(db, ProcessOutbox::KIND, PROCESS_OUTBOX_EVERY).await?;
    ensure_schedule(db, SweepBilling::KIND, SWEEP_BILLING_EVERY).await
}

/// How often the relay looks for notices (a pass goes on while there are any).
pub const RELAY_EVERY: Duration = Duration::from_secs(2);
/// How often connections with read-back on are asked what they hold.
pub const READ_BACK_EVERY: Duration = Duration::from_secs(600);
/// The bound on one push, test or read-back.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The relay's jobs: the pass, each connection's dispatch, read-back. Connections live in the
/// database, so these need nothing configured beyond the client.
pub fn desired_state_handlers(relay: Arc<Relay>) -> Handlers {
    let mut h = Handlers::new();
    h.job(|ctx, _: ProcessDesiredStateOutbox| async move {
        ds::process_desired_state_outbox(&ctx.db, ds::relay::PASS_BUDGET).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(relay.clone(), |ctx, r, j: DispatchDesiredState| async move {
        ds::dispatch_connection(&ctx.db, &r, j.connection_id, ds::dispatch::DISPATCH_BUDGET)
            .await
            .map_err(remote_failure)?;
        Ok(())
    });
    h.job_with(relay, |ctx, r, j: ReadBackDesiredState| async move {
        ds::read_back_connection(&ctx.db, &r, j.connection_id).await.map_err(remote_failure)?;
        Ok(())
    });
    h.job(|ctx, _: ScheduleReadBacks| async move {
        ds::connections::schedule_read_backs(&ctx.db).await.map_err(remote_failure)?;
        Ok(())
    });
    h
}

/// The handlers of the console's own jobs, the relay's included.
pub fn standard_handlers() -> Handlers {
    let mut h = Handlers::new();
    match Relay::new(PUSH_TIMEOUT) {
        Ok(relay) => {
            h.merge(desired_state_handlers(Arc::new(relay)));
        }
        // Without a client no push can go out; the relay's jobs wait for a start that has one.
        Err(e) => tracing::error!(error = %e, "the desired-state relay is not running"),
    }
    h.job(|ctx, _: PurgeExpired| async move {
        jobs::purge_expired(&ctx.db).await?;
        Ok(())
    });
    h.job(|ctx, _: CompactCounts| async move {
        organizations::compact_counts(&ctx.db).await?;
        Ok(())
    });
    // ExpireGrantActivity: idempotent, so a repeat (two workers, a restart) changes nothing.
    h.job(|ctx, j: ExpireGrant| async move {
        grants::expire_grant(&ctx.db, j.grant_id).await.map_err(grant_failure)?;
        Ok(())
    });
    h.job(|ctx, j: StartGrant| async move {
        grants::start_waiting_grant(&ctx.db, j.grant_id).await.map_err(grant_failure)?;
        Ok(())
    });
    h.job(|ctx, _: SweepGrants| async move {
        grants::sweep_grants(&ctx.db).await.map_err(grant_failure)?;
        Ok(())
    });
    // The two drains run for as long as their work takes, far past a lease: the worker renews
    // the lease while they run, and stops them (their move tasks with them, as their JoinSet is
    // dropped) if it is ever lost, so one drain job never runs on two workers at once. Neither
    // checks the lease itself; a move or settlement in flight when a drain stops is guarded by
    // its own obligation row, so it is applied once either way.
    //
    // The drain of a rule change above the sync cap; the poller re-enqueues what is still due.
    h.job(|ctx, j: DrainRuleChange| async move {
        rc::drain_change(&ctx.db, j.change_id, rc::DEFAULT_DRAIN_PARALLELISM).await?;
        Ok(())
    });
    h.job(|ctx, _: ResumeRuleChangeDrains| async move {
        rc::resume_drains(&ctx.db).await?;
        Ok(())
    });
    // A default change's listing and moves after the request that made it; the poller resumes it.
    h.job(|ctx, j: DrainPlanAct| async move {
        pa::drain_plan_act(&ctx.db, j.plan_act_id, None).await?;
        Ok(())
    });
    h.job(|ctx, _: ResumePlanActDrains| async move {
        pa::resume_drains(&ctx.db).await?;
        Ok(())
    });
    h
}

/// Create the console's schedules, or bring their intervals up to date (idempotent; every
/// replica calls it at start-up).
pub async fn register_standard_schedules(db: &Db) -> Result<(), DbError> {
    use jobs::Job;
    ensure_schedule(db, PurgeExpired::KIND, PURGE_EXPIRED_EVERY).await?;
    ensure_schedule(db, CompactCounts::KIND, COMPACT_COUNTS_EVERY).await?;
    ensure_schedule(db, SweepGrants::KIND, SWEEP_GRANTS_EVERY).await?;
    ensure_schedule(db, ResumeRuleChangeDrains::KIND, RESUME_DRAINS_EVERY).await?;
    ensure_schedule(db, ResumePlanActDrains::KIND, RESUME_DRAINS_EVERY).await?;
    ensure_schedule(db, ProcessDesiredStateOutbox::KIND, RELAY_EVERY).await?;
    ensure_schedule(db, ScheduleReadBacks::KIND, READ_BACK_EVERY).await
}
