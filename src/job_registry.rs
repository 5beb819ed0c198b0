//! The console's jobs and schedules: which job types each worker runs, grouped by the system
//! they need, and how often each schedule fires. Each job's kind, keys, attempts and run live
//! with its type (`impl Job`, beside the service it calls); this module sits above the services
//! and the queue, and neither imports it.

use std::{sync::Arc, time::Duration};

use crate::{
    db::{Db, DbError},
    integrations::desired_state::Relay,
    integrations::stripe::Stripe,
    jobs::{Handlers, PurgeExpired, ensure_schedule_of},
    services::{
        billing::{ConvergeInvoice, ProcessOutbox, ReconcileSubscription, SweepBilling},
        desired_state::{DispatchDesiredState, ProcessDesiredStateOutbox, ReadBackDesiredState, ScheduleReadBacks},
        fedwiki::{FedwikiMaintenance, RunSiteRequest, repair::ReconcileSiteStatus},
        grants::{ExpireGrant, StartGrant, SweepGrants},
        organizations::CompactCounts,
        plan_acts::{DrainPlanAct, ResumePlanActDrains},
        rule_changes::{DrainRuleChange, ResumeRuleChangeDrains},
    },
};

/// What the sites' jobs need (defined beside them).
pub use crate::services::fedwiki::FarmJobs;

pub const PURGE_EXPIRED_EVERY: Duration = Duration::from_secs(3600);
pub const COMPACT_COUNTS_EVERY: Duration = Duration::from_secs(60);
/// How often the grant sweep runs: a missed expiry or start job is caught within this.
pub const SWEEP_GRANTS_EVERY: Duration = Duration::from_secs(60);
/// How often the pollers look for rule changes and plan acts with work still owed.
pub const RESUME_DRAINS_EVERY: Duration = Duration::from_secs(30);
/// How often the outbox processor looks for due rows (reconcile requests, product syncs).
pub const PROCESS_OUTBOX_EVERY: Duration = Duration::from_secs(5);
/// How often the billing sweep re-reads Stripe: a lost webhook is repaired within this.
pub const SWEEP_BILLING_EVERY: Duration = Duration::from_secs(300);
/// How often the relay looks for notices (a pass goes on while there are any).
pub const RELAY_EVERY: Duration = Duration::from_secs(2);
/// How often connections with read-back on are asked what they hold.
pub const READ_BACK_EVERY: Duration = Duration::from_secs(600);
/// The bound on one push, test or read-back.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The console's own jobs, which need only the database; the relay's with them.
pub fn standard_handlers() -> Handlers {
    let mut h = Handlers::new();
    match Relay::new(PUSH_TIMEOUT) {
        Ok(relay) => {
            h.merge(desired_state_handlers(Arc::new(relay)));
        }
        // Without a client no push can go out; the relay's jobs wait for a start that has one.
        Err(e) => tracing::error!(error = %e, "the desired-state relay is not running"),
    }
    h.register::<PurgeExpired>(())
        .register::<CompactCounts>(())
        .register::<ExpireGrant>(())
        .register::<StartGrant>(())
        .register::<SweepGrants>(())
        .register::<DrainRuleChange>(())
        .register::<ResumeRuleChangeDrains>(())
        .register::<DrainPlanAct>(())
        .register::<ResumePlanActDrains>(());
    h
}

/// The relay's jobs: the pass, each connection's dispatch, read-back. Connections live in the
/// database, so these need nothing configured beyond the client.
pub fn desired_state_handlers(relay: Arc<Relay>) -> Handlers {
    let mut h = Handlers::new();
    h.register::<ProcessDesiredStateOutbox>(())
        .register::<DispatchDesiredState>(relay.clone())
        .register::<ReadBackDesiredState>(relay)
        .register::<ScheduleReadBacks>(());
    h
}

/// The billing jobs (with Stripe connected).
pub fn billing_handlers(stripe: Arc<Stripe>) -> Handlers {
    let mut h = Handlers::new();
    h.register::<ReconcileSubscription>(stripe.clone())
        .register::<ConvergeInvoice>(stripe.clone())
        .register::<ProcessOutbox>(stripe.clone())
        .register::<SweepBilling>(stripe);
    h
}

/// The sites' jobs (with the farm connected).
/// The mail's job, when mail is on (`SMTP_URL`, or the demo's catcher); without it the mail
/// waits, as a job whose system is not connected does.
pub fn mail_handlers(
    mailer: Arc<crate::integrations::mail::Mailer>,
    tokens: crate::services::tokens::TokenKey,
) -> Handlers {
    let mut h = Handlers::new();
    h.register::<crate::services::mail::SendMail>(crate::services::mail::MailContext { mailer, tokens });
    h
}

pub fn farm_handlers(jobs: FarmJobs) -> Handlers {
    let mut h = Handlers::new();
    h.register::<RunSiteRequest>(jobs.clone())
        .register::<ReconcileSiteStatus>(jobs.clone())
        .register::<FedwikiMaintenance>(jobs);
    h
}

/// The domains' checks (DNS, `DNS_RESOLVER` or the system's resolver): every worker runs them,
/// whether or not the farm is connected, so a claim made while it was away is still checked.
pub fn domain_handlers(dns: Arc<crate::integrations::dns::Resolver>) -> Handlers {
    let mut h = Handlers::new();
    h.register::<crate::services::fedwiki::verification::CheckDomainClaims>(dns);
    h
}

/// The domains' checks' schedule.
pub async fn register_domain_schedules(db: &Db) -> Result<(), DbError> {
    use crate::services::fedwiki::verification::{CHECK_DOMAIN_CLAIMS_EVERY, CheckDomainClaims};
    ensure_schedule_of::<CheckDomainClaims>(db, CHECK_DOMAIN_CLAIMS_EVERY).await
}

/// Create the console's schedules, or bring their intervals up to date (idempotent; every
/// replica calls it at start-up).
pub async fn register_standard_schedules(db: &Db) -> Result<(), DbError> {
    ensure_schedule_of::<PurgeExpired>(db, PURGE_EXPIRED_EVERY).await?;
    ensure_schedule_of::<CompactCounts>(db, COMPACT_COUNTS_EVERY).await?;
    ensure_schedule_of::<SweepGrants>(db, SWEEP_GRANTS_EVERY).await?;
    ensure_schedule_of::<ResumeRuleChangeDrains>(db, RESUME_DRAINS_EVERY).await?;
    ensure_schedule_of::<ResumePlanActDrains>(db, RESUME_DRAINS_EVERY).await?;
    ensure_schedule_of::<ProcessDesiredStateOutbox>(db, RELAY_EVERY).await?;
    ensure_schedule_of::<ScheduleReadBacks>(db, READ_BACK_EVERY).await
}

/// The billing schedules (with Stripe connected).
pub async fn register_billing_schedules(db: &Db) -> Result<(), DbError> {
    ensure_schedule_of::<ProcessOutbox>(db, PROCESS_OUTBOX_EVERY).await?;
    ensure_schedule_of::<SweepBilling>(db, SWEEP_BILLING_EVERY).await
}

/// The sites' schedule: the maintenance run every `every` (runs never overlap: the queue keeps
/// one pending or running).
pub async fn register_farm_schedules(db: &Db, every: Duration) -> Result<(), DbError> {
    ensure_schedule_of::<FedwikiMaintenance>(db, every).await
}

#[cfg(test)]
mod tests {
    //! Kinds, payloads, keys and attempts are stored in job rows: these pin them as they were
    //! written before each job had its one home, so rows already queued still run and dedupe.

    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::{
        ids::{ConnectionId, GrantId, PlanActId, RequestId, RuleChangeId},
        jobs::{DEFAULT_MAX_ATTEMPTS, Job, NewJob},
    };

    /// (kind, payload, due, dedupe key, object key, attempts) as the queue would store them.
    type Stored = (String, serde_json::Value, Option<chrono::DateTime<Utc>>, Option<String>, Option<String>, i32);

    fn stored<J: Job>(job: &J) -> Stored {
        let n = NewJob::of(job);
        (n.kind.to_string(), n.payload, n.run_at, n.dedupe_key, n.object_key, n.max_attempts.unwrap_or(0))
    }

    fn plain(kind: &str, payload: serde_json::Value, dedupe: Option<&str>, attempts: i32) -> Stored {
        (kind.into(), payload, None, dedupe.map(String::from), None, attempts)
    }

    #[test]
    fn a_grants_jobs_are_due_at_its_dates_and_keyed_by_grant_and_time() {
        let end = Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let key = format!("expire_grant:7:{}", end.timestamp_micros());
        assert_eq!(
            stored(&ExpireGrant { grant_id: GrantId(7), at: Some(end) }),
            ("expire_grant".into(), json!({ "grant_id": 7 }), Some(end), Some(key), None, DEFAULT_MAX_ATTEMPTS)
        );
        let key = format!("start_grant:7:{}", end.timestamp_micros());
        assert_eq!(
            stored(&StartGrant { grant_id: GrantId(7), at: Some(end) }),
            ("start_grant".into(), json!({ "grant_id": 7 }), Some(end), Some(key), None, DEFAULT_MAX_ATTEMPTS)
        );
        // A stored payload reads back (the time it was queued for is not part of it).
        let read: ExpireGrant = serde_json::from_value(json!({ "grant_id": 7 })).unwrap();
        assert_eq!(read, ExpireGrant { grant_id: GrantId(7), at: None });
    }

    #[test]
    fn the_keyed_jobs_keep_their_kinds_payloads_keys_and_attempts() {
        let cases = [
            (
                stored(&RunSiteRequest { request_id: RequestId(3) }),
                plain("fedwiki_request", json!({ "request_id": 3 }), Some("fedwiki_request:3"), 6),
            ),
            (
                stored(&ReconcileSiteStatus { request_id: RequestId(3) }),
                plain(
                    "fedwiki_status_reconcile",
                    json!({ "request_id": 3 }),
                    Some("fedwiki_status_reconcile:3"),
                    DEFAULT_MAX_ATTEMPTS,
                ),
            ),
            (
                stored(&DrainRuleChange { change_id: RuleChangeId(5) }),
                plain(
                    "drain_rule_change",
                    json!({ "change_id": 5 }),
                    Some("drain_rule_change:5"),
                    DEFAULT_MAX_ATTEMPTS,
                ),
            ),
            (
                stored(&DrainPlanAct { plan_act_id: PlanActId(5) }),
                plain("drain_plan_act", json!({ "plan_act_id": 5 }), Some("drain_plan_act:5"), DEFAULT_MAX_ATTEMPTS),
            ),
            (
                stored(&DispatchDesiredState { connection_id: ConnectionId(2) }),
                plain(
                    "dispatch_desired_state",
                    json!({ "connection_id": 2 }),
                    Some("desired-state-dispatch:2"),
                    DEFAULT_MAX_ATTEMPTS,
                ),
            ),
            (
                stored(&ReadBackDesiredState { connection_id: ConnectionId(2) }),
                plain(
                    "read_back_desired_state",
                    json!({ "connection_id": 2 }),
                    Some("desired-state-read-back:2"),
                    DEFAULT_MAX_ATTEMPTS,
                ),
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_stripe_objects_job_carries_its_object_key_in_its_payload() {
        let sub = ReconcileSubscription { stripe_subscription_id: "sub_1".into() };
        let key = "stripe-subscription:sub_1";
        assert_eq!(
            stored(&sub),
            (
                "reconcile_subscription".into(),
                json!({ "stripe_subscription_id": "sub_1", "object_key": key }),
                None,
                None,
                Some(key.into()),
                DEFAULT_MAX_ATTEMPTS
            )
        );
        let inv = ConvergeInvoice { stripe_invoice_id: "in_1".into() };
        assert_eq!(inv.payload(), json!({ "stripe_invoice_id": "in_1", "object_key": "stripe-invoice:in_1" }));
        assert_eq!(inv.object_key().as_deref(), Some("stripe-invoice:in_1"));
        // The stored payload, key and all, reads back as the job.
        let read: ReconcileSubscription = serde_json::from_value(sub.payload()).unwrap();
        assert_eq!(read, sub);
    }

    #[test]
    fn the_standard_handlers_run_the_consoles_own_kinds_and_the_relays() {
        assert_eq!(
            standard_handlers().kinds(),
            vec![
                "compact_organization_counts",
                "dispatch_desired_state",
                "drain_plan_act",
                "drain_rule_change",
                "expire_grant",
                "process_desired_state_outbox",
                "purge_expired",
                "read_back_desired_state",
                "resume_plan_act_drains",
                "resume_rule_change_drains",
                "schedule_desired_state_read_backs",
                "start_grant",
                "sweep_grants",
            ]
        );
    }
}
