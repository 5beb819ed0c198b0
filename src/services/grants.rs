//! Grant acts, as the spec's "Grant acts" section orders their locks: issue (ConferGrantTx),
//! revoke, expire (with its job and sweep), start a waiting grant, reschedule a waiting grant
//! (ExtendWaitingGrantTx), and manage (ExtendGrantTx or ExtendWaitingGrantTx).

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{
    db::{
        Db, DbError, Tx, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
    },
    ids::{AccountId, GrantId, OrganizationId, PoolId, ProductId},
    jobs::{self, Job, JobContext, JobError},
    services::{
        entitlements::{confer_grant_tx, restore_pool_tx},
        refusal::{Problems, ServiceError},
    },
    states::{GrantKind, GrantStatus},
    store::{
        entitlements::{self as ent, NewGrant},
        grants::{self as store, Grant},
    },
};

/// Where the store names it: beside the ids, so it is no `&str` below the services.
pub use crate::ids::EmailDomain;

/// Who receives a grant: an organization, or the organization of an email domain once it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipient {
    Organization(OrganizationId),
    Domain(EmailDomain),
}

/// A grant as an operator asks for it, parsed.
#[derive(Debug, Clone)]
pub struct IssueGrant {
    pub recipient: Recipient,
    pub product_id: ProductId,
    pub quantity: i32,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub actor: Option<AccountId>,
}

pub const MAX_QUANTITY: i32 = 1000;

/// Why an operator acts: kept with the act's record, so it is required, and bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    /// The text trimmed: not empty, at most 500 characters.
    pub fn parse(s: &str) -> Result<Reason, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("Say why: a reason is kept with the grant.".into());
        }
        if s.chars().count() > 500 {
            return Err("A reason may have at most 500 characters.".into());
        }
        Ok(Reason(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// How many of a product a grant gives: a whole number from 1 to `MAX_QUANTITY`; blank is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity(i32);

impl Quantity {
    pub fn parse(s: &str) -> Result<Quantity, String> {
        match s.trim() {
            "" => Ok(Quantity(1)),
            t => t
                .parse::<i32>()
                .ok()
                .filter(|q| (1..=MAX_QUANTITY).contains(q))
                .map(Quantity)
                .ok_or_else(|| format!("A quantity is a whole number from 1 to {MAX_QUANTITY}.")),
        }
    }

    pub fn get(self) -> i32 {
        self.0
    }
}

/// A grant's start or end: a date and time as a `datetime-local` field sends it (or RFC 3339, or
/// a day, at its midnight), read as UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantTime(DateTime<Utc>);

impl GrantTime {
    pub fn parse(s: &str) -> Result<GrantTime, String> {
        let s = s.trim();
        if let Ok(t) = DateTime::parse_from_rfc3339(s) {
            return Ok(GrantTime(t.with_timezone(&Utc)));
        }
        for f in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"] {
            if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, f) {
                return Ok(GrantTime(t.and_utc()));
            }
        }
        if let Some(t) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)) {
            return Ok(GrantTime(t.and_utc()));
        }
        Err(format!("“{s}” is not a date and time (for example 2027-01-31T12:00)."))
    }

    pub fn get(self) -> DateTime<Utc> {
        self.0
    }
}

/// Check the bounds of a grant: the end after the start, and not in the past.
pub fn check_bounds(starts_at: Option<DateTime<Utc>>, ends_at: Option<DateTime<Utc>>, problems: &mut Problems) {
    let now = Utc::now();
    if let Some(end) = ends_at {
        if end <= now {
            problems.push("ends_at", "The end is in the past.");
        } else if starts_at.is_some_and(|s| end <= s) {
            problems.push("ends_at", "The end must come after the start.");
        }
    }
}

/// Enqueue the jobs a grant's dates need, keyed by grant and time: a job whose time is no longer
/// the grant's finds nothing to do.
async fn schedule_grant_jobs(tx: &mut Tx, g: &Grant) -> Result<(), DbError> {
    if let Some(end) = g.ends_at {
        ExpireGrant { grant_id: g.grant_id, at: Some(end) }.enqueue(tx.conn()).await?;
    }
    if g.status == GrantStatus::Waiting && g.organization_id.is_some() && g.starts_at > Utc::now() {
        StartGrant { grant_id: g.grant_id, at: Some(g.starts_at) }.enqueue(tx.conn()).await?;
    }
    Ok(())
}

pub const EXPIRE_GRANT: &str = "expire_grant";
pub const START_GRANT: &str = "start_grant";
pub const SWEEP_GRANTS: &str = "sweep_grants";

/// ExpireGrantActivity: the grant's end has come (a job that finds another end does nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExpireGrant {
    pub grant_id: GrantId,
    /// The end it is queued for: when it runs, and part of its key. Not stored: the run reads
    /// the grant's end as it is by then.
    #[serde(skip)]
    pub at: Option<DateTime<Utc>>,
}

impl Job for ExpireGrant {
    const KIND: &'static str = EXPIRE_GRANT;
    type Context = ();

    fn dedupe_key(&self) -> Option<String> {
        self.at.map(|t| format!("{EXPIRE_GRANT}:{}:{}", self.grant_id, t.timestamp_micros()))
    }

    fn run_at(&self) -> Option<DateTime<Utc>> {
        self.at
    }

    /// Idempotent, so a repeat (two workers, a restart) changes nothing.
    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        expire_grant(&job.db, self.grant_id).await.map_err(jobs::grant_failure)?;
        Ok(())
    }
}

/// StartGrantActivity: a waiting grant's start has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartGrant {
    pub grant_id: GrantId,
    /// The start it is queued for: when it runs, and part of its key. Not stored: the run reads
    /// the grant as it is by then.
    #[serde(skip)]
    pub at: Option<DateTime<Utc>>,
}

impl Job for StartGrant {
    const KIND: &'static str = START_GRANT;
    type Context = ();

    fn dedupe_key(&self) -> Option<String> {
        self.at.map(|t| format!("{START_GRANT}:{}:{}", self.grant_id, t.timestamp_micros()))
    }

    fn run_at(&self) -> Option<DateTime<Utc>> {
        self.at
    }

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        start_waiting_grant(&job.db, self.grant_id).await.map_err(jobs::grant_failure)?;
        Ok(())
    }
}

/// The schedule that catches an expiry or a start whose job was missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SweepGrants {}

impl Job for SweepGrants {
    const KIND: &'static str = SWEEP_GRANTS;
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        sweep_grants(&job.db).await.map_err(jobs::grant_failure)?;
        Ok(())
    }
}

pub static ISSUE_GRANT_LOCKS: PathLocks = PathLocks {
    path: "IssueGrant",
    function: "services::grants::issue_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::ProvisionDomain, Lock::PoolRow],
    why: "The rendezvous; for a grant to an email domain, the domain's lock; the grant insert, then the pool \
          row inside core.confer (ConferGrantTx), then materialization; the reconcile requests and the grant's \
          jobs are inserts after it.",
};

/// IssueGrant: an operator's grant, conferred now, or waiting for its start or its organization.
#[tracing::instrument(name = "Issue a grant", skip(db, g), fields(product_id = g.product_id.0))]
pub async fn issue_grant(db: &Db, g: &IssueGrant) -> Result<GrantId, ServiceError> {
    crate::db::tx::within_for(db, TxKind::Materializing, &ISSUE_GRANT_LOCKS, async |tx: &mut Tx| {
        match store::product_is_published(tx.conn(), g.product_id).await? {
            None => return Err(ServiceError::invalid("product_id", "That product does not exist.")),
            Some(false) => {
                return Err(ServiceError::invalid(
                    "product_id",
                    "That product is not published, so it cannot be granted.",
                ));
            }
            Some(true) => {}
        }
        let (organization_id, domain) = match &g.recipient {
            Recipient::Organization(id) => {
                if !store::organization_exists(tx.conn(), *id).await? {
                    return Err(ServiceError::invalid("organization_id", format!("There is no organization #{id}.")));
                }
                (Some(*id), None)
            }
            // A domain whose organization exists already provisions it now. The domain's lock makes
            // an organization being created with it either visible here or see this grant.
            Recipient::Domain(d) => {
                tx.lock(&AdvisoryKey::ProvisionDomain(d.as_str().to_string())).await?;
                (store::organization_by_domain(tx.conn(), d).await?, Some(d.as_str().to_string()))
            }
        };
        let waits = organization_id.is_none() || g.starts_at.is_some_and(|s| s > Utc::now());
        let new = NewGrant {
            organization_id,
            product_id: g.product_id,
            quantity: g.quantity,
            kind: if domain.is_some() { GrantKind::Provisioning } else { GrantKind::Operator },
            status: if waits { GrantStatus::Waiting } else { GrantStatus::Active },
            starts_at: g.starts_at,
            ends_at: g.ends_at,
            reason: g.reason.clone(),
            created_by: g.actor,
            plan_act_id: None,
            provision_domain: domain.clone(),
        };
        let grant_id =
            if waits { ent::insert_grant(tx.conn(), &new).await? } else { confer_grant_tx(tx, &new).await? };
        if let (Some(org), false) = (organization_id, waits) {
            store::request_pool_subscription_reconciles(tx.conn(), org, "grant issued").await?;
        }
        store::record_event(tx.conn(), grant_id, organization_id, "issued", g.actor, &g.reason, json!({})).await?;
        let created = store::grant(tx.conn(), grant_id).await?.ok_or(ServiceError::NotFound("grant"))?;
        schedule_grant_jobs(tx, &created).await?;
        Ok(grant_id)
    })
    .await
}

/// The pool of the grant's organization, locked (LockPoolOfGrant / LockPools); None for a
/// grant that names no organization yet.
async fn lock_pool_of(tx: &mut Tx, g: &Grant) -> Result<Option<PoolId>, DbError> {
    let Some(org) = g.organization_id else { return Ok(None) };
    let pool = ent::default_pool_of(tx.conn(), org).await?;
    if let Some(p) = pool {
        ent::lock_pools(tx.conn(), &[p]).await?;
    }
    Ok(pool)
}

/// Open the act's transaction and take the grant's pool row, then `lock` the grant (its lineage
/// head, or its own row): the order every grant act takes them in. A grant that named no
/// organization when first read may have been provisioned before the second lock was granted;
/// then its pool was not locked first, so the transaction starts over (at most three times).
async fn pool_then<F>(
    db: &Db,
    decl: &'static PathLocks,
    grant_id: GrantId,
    lock: F,
) -> Result<(Tx, Option<PoolId>, Grant), ServiceError>
where
    F: for<'a> Fn(&'a mut Tx, &'a Grant) -> futures_util::future::BoxFuture<'a, Result<Option<Grant>, DbError>>,
{
    for _ in 0..3 {
        let mut tx = crate::db::begin_for(db, TxKind::Materializing, decl).await?;
        let found = async {
            let g = store::grant(tx.conn(), grant_id).await?.ok_or(ServiceError::NotFound("grant"))?;
            let pool = lock_pool_of(&mut tx, &g).await?;
            let locked = lock(&mut tx, &g).await?.ok_or(ServiceError::NotFound("grant"))?;
            Ok::<_, ServiceError>((g.organization_id, pool, locked))
        }
        .await;
        match found {
            Ok((first_read, pool, locked)) if locked.organization_id == first_read => return Ok((tx, pool, locked)),
            Ok(_) => tx.rollback().await?,
            // Not found, or a lock that failed: rolled back before it is answered.
            Err(e) => return tx.end(Err(e)).await,
        }
    }
    Err(ServiceError::Refused("The grant changed while this was being done; try again.".into()))
}

fn head_of<'a>(tx: &'a mut Tx, g: &'a Grant) -> futures_util::future::BoxFuture<'a, Result<Option<Grant>, DbError>> {
    Box::pin(async move { Ok(store::lineage_head_for_update(tx.conn(), g.lineage_id).await?) })
}

fn row_of<'a>(tx: &'a mut Tx, g: &'a Grant) -> futures_util::future::BoxFuture<'a, Result<Option<Grant>, DbError>> {
    Box::pin(async move { Ok(store::lock_grant(tx.conn(), g.grant_id).await?) })
}

pub static REVOKE_GRANT_LOCKS: PathLocks = PathLocks {
    path: "RevokeGrantTx",
    function: "services::grants::revoke_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantLineageHead],
    why: "The rendezvous, the organization's default pool row (LockPools), the lineage head row (spec rule 4: \
          after the pool row), then core.end_conferral, resumption, delivery, the floor and materialization \
          under the pool row.",
};

/// RevokeGrantTx: end the lineage's live grant now; what it displaced comes back, else the floor.
#[tracing::instrument(name = "Revoke a grant", skip(db), fields(grant_id))]
pub async fn revoke_grant(
    db: &Db,
    grant_id: GrantId,
    actor: Option<AccountId>,
    reason: &Reason,
) -> Result<GrantId, ServiceError> {
    let (mut tx, pool, head) = pool_then(db, &REVOKE_GRANT_LOCKS, grant_id, head_of).await?;
    let answer: Result<_, ServiceError> = async {
        if !head.status.is_live() {
            return Err(ServiceError::Refused(format!(
                "Grant #{} is {} already; there is nothing to revoke.",
                head.grant_id, head.status
            )));
        }
        if head.kind == GrantKind::Floor {
            return Err(ServiceError::Refused(
                "A floor comes with the organization's type and cannot be revoked; grant another plan over it instead."
                    .into(),
            ));
        }
        store::set_status(tx.conn(), head.grant_id, GrantStatus::Revoked).await?;
        let mut ended = false;
        if let Some(c) = store::holding_conferral_of(tx.conn(), head.grant_id).await? {
            ended = ent::end_conferral(tx.conn(), c, "revoked").await?;
        }
        if let (Some(p), Some(org)) = (pool, head.organization_id) {
            restore_pool_tx(&mut tx, p, ended, None).await?;
            store::request_pool_subscription_reconciles(tx.conn(), org, "grant revoked").await?;
        }
        store::record_event(
            tx.conn(),
            head.grant_id,
            head.organization_id,
            "revoked",
            actor,
            reason.as_str(),
            json!({}),
        )
        .await?;
        Ok(head.grant_id)
    }
    .await;
    tx.end(answer).await
}

pub static EXPIRE_GRANT_LOCKS: PathLocks = PathLocks {
    path: "ExpireGrantTx",
    function: "services::grants::expire_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantRow],
    why: "The rendezvous, the pool row (LockPoolOfGrant), then the grant's update; it does not take the \
          lineage head row. A grant that names no organization has no pool: the lock, resumption and \
          materialization are skipped.",
};

/// ExpireGrantTx: a live grant whose end has come expires. Idempotent: false when the grant is
/// not live or not due (a second run, or a job for a time the grant no longer has).
#[tracing::instrument(name = "Expire a grant", skip(db), fields(grant_id))]
pub async fn expire_grant(db: &Db, grant_id: GrantId) -> Result<bool, ServiceError> {
    let (mut tx, pool, g) = match pool_then(db, &EXPIRE_GRANT_LOCKS, grant_id, row_of).await {
        Ok(t) => t,
        Err(ServiceError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let answer: Result<_, ServiceError> = async {
        if !store::expire_if_due(tx.conn(), grant_id).await? {
            return Ok(false);
        }
        let mut ended = false;
        if let Some(c) = store::holding_conferral_of(tx.conn(), grant_id).await? {
            ended = ent::end_conferral(tx.conn(), c, "expired").await?;
        }
        if let (Some(p), Some(org)) = (pool, g.organization_id) {
            restore_pool_tx(&mut tx, p, ended, None).await?;
            store::request_pool_subscription_reconciles(tx.conn(), org, "grant expired").await?;
        }
        store::record_event(tx.conn(), grant_id, g.organization_id, "expired", None, "its end came", json!({})).await?;
        Ok(true)
    }
    .await;
    tx.end(answer).await
}

pub static START_GRANT_LOCKS: PathLocks = PathLocks {
    path: "Start a waiting grant",
    function: "services::grants::start_waiting_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantRow],
    why: "The pool row, then the grant's own row (FOR UPDATE) to check it still waits, then core.confer under \
          the pool row it holds and materialization.",
};

/// A waiting grant whose start has come confers (ConferGrantTx's confer). False when it no
/// longer waits, or its start has not come.
#[tracing::instrument(name = "Start a waiting grant", skip(db), fields(grant_id))]
pub async fn start_waiting_grant(db: &Db, grant_id: GrantId) -> Result<bool, ServiceError> {
    let (mut tx, pool, g) = match pool_then(db, &START_GRANT_LOCKS, grant_id, row_of).await {
        Ok(t) => t,
        Err(ServiceError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let answer: Result<_, ServiceError> = async {
        let (Some(pool), Some(org)) = (pool, g.organization_id) else { return Ok(false) };
        let due =
            g.status == GrantStatus::Waiting && g.starts_at <= Utc::now() && g.ends_at.is_none_or(|e| e > Utc::now());
        if !due {
            return Ok(false);
        }
        ent::confer_grant(tx.conn(), grant_id).await?;
        ent::materialize_pool(tx.conn(), pool).await?;
        store::request_pool_subscription_reconciles(tx.conn(), org, "grant started").await?;
        store::record_event(tx.conn(), grant_id, Some(org), "started", None, "its start came", json!({})).await?;
        Ok(true)
    }
    .await;
    tx.end(answer).await
}

/// What an operator changes of a grant (ManageGrantTx).
#[derive(Debug, Clone)]
pub struct ManageGrant {
    /// Only for a waiting grant.
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub quantity: i32,
    pub reason: String,
    pub actor: Option<AccountId>,
}

pub static MANAGE_GRANT_LOCKS: PathLocks = PathLocks {
    path: "ManageGrantTx",
    function: "services::grants::manage_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantLineageHead],
    why: "The rendezvous, the pool row (LockPools), the lineage head row, then ExtendGrantTx (core.end_conferral \
          and core.confer under the pool row it holds) or ExtendWaitingGrantTx (the same pool row again).",
};

pub static EXTEND_WAITING_GRANT_LOCKS: PathLocks = PathLocks {
    path: "ExtendWaitingGrantTx",
    function: "services::grants::manage_grant",
    kind: "Materializing",
    locks: &[Lock::RendezvousShared, Lock::PoolRow, Lock::GrantLineageHead],
    why: "The rendezvous, the pool row (LockPoolOfGrant), the lineage head row; the waiting grant's dates and \
          quantity change in place.",
};

/// The path a manage names in the lock trace: ExtendWaitingGrantTx when the grant's lineage head
/// waits, ManageGrantTx otherwise. The pause hook and the checker know a transaction by the path
/// named in its opening batch, before any lock, so the head is looked at first, without a lock,
/// and only while tracing (the branch itself is decided under the lock, as before).
async fn manage_path(db: &Db, grant_id: GrantId) -> Result<&'static PathLocks, ServiceError> {
    if !crate::db::trace::is_on() {
        return Ok(&MANAGE_GRANT_LOCKS);
    }
    let mut c = db.read().await?;
    let waiting = match store::grant(&mut c, grant_id).await? {
        Some(g) => {
            let lineage = store::lineage(&mut c, g.lineage_id).await?;
            // The head: the grant no other in the lineage extends.
            lineage
                .iter()
                .find(|x| !lineage.iter().any(|y| y.extends_grant_id == Some(x.grant_id)))
                .is_some_and(|h| h.status == GrantStatus::Waiting)
        }
        None => false,
    };
    Ok(if waiting { &EXTEND_WAITING_GRANT_LOCKS } else { &MANAGE_GRANT_LOCKS })
}

/// ManageGrantTx: a live grant is extended as a new grant in its lineage (ExtendGrantTx); a
/// waiting one is rescheduled in place (ExtendWaitingGrantTx). Returns the lineage's head after.
#[tracing::instrument(name = "Manage a grant", skip(db, m), fields(grant_id))]
pub async fn manage_grant(db: &Db, grant_id: GrantId, m: &ManageGrant) -> Result<GrantId, ServiceError> {
    let named = manage_path(db, grant_id).await?;
    let (mut tx, pool, head) = pool_then(db, named, grant_id, head_of).await?;
    let answer: Result<_, ServiceError> = async {
        if !head.status.is_live() {
            return Err(ServiceError::Refused(format!(
                "Grant #{} is {}; only a live grant can be changed.",
                head.grant_id, head.status
            )));
        }
        if head.kind == GrantKind::Floor {
            return Err(ServiceError::Refused(
                "A floor follows the organization's type and is not managed by hand.".into(),
            ));
        }
        let branch =
            if head.status == GrantStatus::Waiting { &EXTEND_WAITING_GRANT_LOCKS } else { &MANAGE_GRANT_LOCKS };
        if !std::ptr::eq(branch, named) {
            // The head started (or was extended) between the trace's look and its lock: the branch
            // it runs is recorded as observed inside the transaction named for the other.
            crate::db::trace::path(tx.conn(), branch).await?;
        }
        let result = if head.status == GrantStatus::Waiting {
            // ExtendWaitingGrantTx: in place.
            let starts = m.starts_at.unwrap_or(head.starts_at);
            if m.ends_at.is_some_and(|e| e <= starts) {
                return Err(ServiceError::invalid("ends_at", "The end must come after the start."));
            }
            store::reschedule(tx.conn(), head.grant_id, starts, m.ends_at, m.quantity).await?;
            store::record_event(
                tx.conn(),
                head.grant_id,
                head.organization_id,
                "rescheduled",
                m.actor,
                &m.reason,
                json!({ "starts_at": starts, "ends_at": m.ends_at, "quantity": m.quantity }),
            )
            .await?;
            let after = store::grant(tx.conn(), head.grant_id).await?.ok_or(ServiceError::NotFound("grant"))?;
            schedule_grant_jobs(&mut tx, &after).await?;
            head.grant_id
        } else {
            if m.starts_at.is_some() {
                return Err(ServiceError::invalid(
                    "starts_at",
                    "A grant that has started keeps its start; change its end or quantity.",
                ));
            }
            // ExtendGrantTx: the new grant takes over from the head in one step under the pool row.
            let holding = store::holding_conferral_of(tx.conn(), head.grant_id).await?;
            let status = if holding.is_some() { GrantStatus::Active } else { GrantStatus::Replaced };
            if let Some(c) = holding {
                ent::end_conferral(tx.conn(), c, "extended").await?;
            }
            store::set_status(tx.conn(), head.grant_id, GrantStatus::Ended).await?;
            let new_id =
                store::insert_extension(tx.conn(), &head, status, m.quantity, m.ends_at, &m.reason, m.actor).await?;
            if let (Some(p), true) = (pool, holding.is_some()) {
                ent::confer_grant(tx.conn(), new_id).await?;
                ent::materialize_pool(tx.conn(), p).await?;
            }
            if let Some(org) = head.organization_id {
                store::request_pool_subscription_reconciles(tx.conn(), org, "grant extended").await?;
            }
            let detail = json!({ "extended_by": new_id, "ends_at": m.ends_at, "quantity": m.quantity });
            store::record_event(tx.conn(), head.grant_id, head.organization_id, "extended", m.actor, &m.reason, detail)
                .await?;
            store::record_event(
                tx.conn(),
                new_id,
                head.organization_id,
                "issued",
                m.actor,
                &m.reason,
                json!({ "extends": head.grant_id }),
            )
            .await?;
            let after = store::grant(tx.conn(), new_id).await?.ok_or(ServiceError::NotFound("grant"))?;
            schedule_grant_jobs(&mut tx, &after).await?;
            new_id
        };
        Ok(result)
    }
    .await;
    tx.end(answer).await
}

/// Provisioning: an organization created with an email domain receives the grants waiting for
/// it, inside the caller's transaction (the organization's pool row is held). Those whose start
/// has come confer now; the others wait for their start job.
pub async fn provision_domain_grants_tx(
    tx: &mut Tx,
    organization_id: OrganizationId,
    pool_id: PoolId,
    domain: &EmailDomain,
) -> Result<usize, ServiceError> {
    let attached = store::attach_domain_grants(tx.conn(), domain, organization_id).await?;
    // The UPDATE took them all, in grant order; noted one by one after it.
    crate::db::trace::note_rows(tx.conn(), Lock::GrantRow, attached.iter().map(|g| (g.grant_id.0, None))).await?;
    let mut conferred = 0;
    for g in &attached {
        let due = g.starts_at <= Utc::now() && g.ends_at.is_none_or(|e| e > Utc::now());
        if due {
            ent::confer_grant(tx.conn(), g.grant_id).await?;
            conferred += 1;
        }
        store::record_event(
            tx.conn(),
            g.grant_id,
            Some(organization_id),
            "provisioned",
            None,
            &format!("an organization of {} was created", domain.as_str()),
            json!({}),
        )
        .await?;
        schedule_grant_jobs(tx, g).await?;
    }
    if conferred > 0 {
        ent::materialize_pool(tx.conn(), pool_id).await?;
    }
    Ok(attached.len())
}

/// The sweep: every grant past its end expires and every waiting grant past its start starts,
/// whatever became of their jobs. Returns (expired, started).
#[tracing::instrument(name = "Sweep grants", skip(db))]
pub async fn sweep_grants(db: &Db) -> Result<(usize, usize), ServiceError> {
    let (mut expired, mut started) = (0, 0);
    loop {
        let due = {
            let mut c = db.read().await?;
            store::due_for_expiry(&mut c, 100).await?
        };
        let n = due.len();
        for id in due {
            if expire_grant(db, id).await? {
                expired += 1;
            }
        }
        if n < 100 {
            break;
        }
    }
    let due = {
        let mut c = db.read().await?;
        store::due_to_start(&mut c, 1000).await?
    };
    for id in due {
        if start_waiting_grant(db, id).await? {
            started += 1;
        }
    }
    Ok((expired, started))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grants_fields_are_parsed_in_the_words_of_its_form() {
        assert_eq!(Quantity::parse("").map(Quantity::get), Ok(1));
        assert_eq!(Quantity::parse(" 7 ").map(Quantity::get), Ok(7));
        for bad in ["0", "1001", "abc"] {
            assert_eq!(Quantity::parse(bad), Err("A quantity is a whole number from 1 to 1000.".into()));
        }
        assert_eq!(Reason::parse("  why ").map(Reason::into_string), Ok("why".into()));
        assert!(Reason::parse("   ").is_err() && Reason::parse(&"r".repeat(501)).is_err());
        assert!(GrantTime::parse("2027-01-31T12:00").is_ok() && GrantTime::parse("2027-01-31").is_ok());
        assert!(GrantTime::parse("2027-02-30").is_err() && GrantTime::parse("soon").is_err());
    }

    #[test]
    fn domains_are_parsed() {
        assert!(EmailDomain::parse("uni.example.edu").is_ok());
        for bad in ["", "localhost", "a..b", "-a.org", "a b.org", "a_b.org"] {
            assert!(EmailDomain::parse(bad).is_err(), "{bad:?}");
        }
    }
}
