//! `member-console stress`: the standing reliability tool. It makes a fresh database, fills it
//! with the demo catalog and many organizations, runs the documented paths at random from many
//! connections at once against a few shared pools for a bounded time, counts what each path did
//! or refused, and then checks the entitlement invariants. A deadlock, an unexpected error or a
//! violated invariant is a bug: the run says so, shows what led to it, and exits non-zero.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool, postgres::PgPoolOptions};
use tracing::instrument::WithSubscriber;

use crate::{
    bench::http::Http,
    config::{Config, random_hex},
    db::{Db, DbError, TxKind, begin, migrate},
    demo,
    ids::{
        ConferralId, EntitlementSetId, GrantId, LadderId, OrgTypeId, OrganizationId, PlanActId, PoolId, ProductId,
        RuleChangeId, SubscriptionId,
    },
    integrations::stripe::Stripe,
    jobs::{self, Backoff, Worker, WorkerOptions},
    scratch::ScratchDb,
    services::{
        ServiceError,
        auth::{self, AuthError, Email},
        billing::{
            self, Reconciled,
            catalog_sync::{Amount, Currency, NewPrice},
        },
        catalog as catalog_svc, entitlements as ent,
        grants::{self, EmailDomain, IssueGrant, ManageGrant, Recipient},
        organizations::{self as org_svc, OrgName},
        plan_acts::{self as pa, Disposition, ReorderTiers},
        rule_changes as rc,
        topology::{self, AddTier, RemoveTier},
    },
    states::{GrantKind, GrantStatus, SubscriptionStatus},
    store::{
        billing as billing_store, catalog as catalog_store,
        entitlements::{self as ent_store, NewGrant},
        plan_acts as pa_store,
    },
};

pub const DEFAULT_ORGS: usize = 200;
pub const DEFAULT_CONNECTIONS: usize = 8;
/// How many organizations the tasks share: few, so that they meet on the same pool rows.
const HOT_ORGS: usize = 6;
/// Subscriptions (one item each) among the shared organizations, for suspension to act on.
const SUBSCRIPTIONS: usize = 4;
/// The farm client's bound on a call.
const FARM_TIMEOUT: Duration = Duration::from_secs(10);
/// The retention the run's purges use: an archived site is deleted a couple of seconds on (the
/// invariants' "no archived site past retention" reads the same figure).
const SITE_RETENTION: Duration = Duration::from_secs(2);
/// The stand-in's secret key (it takes any sk_test_ key), and the Stripe client's timeout.
const STRIPE_KEY: &str = "sk_test_stress";
const STRIPE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many rows a Claim outbox act takes (the workers' pass takes 100).
const OUTBOX_CLAIM: i64 = 10;
/// After the run, the passes that reconcile every subscription until one changes nothing (a
/// reconcile that ends a provision asks for its organization's other subscriptions again).
const FINAL_RECONCILE_PASSES: usize = 4;
/// Errors and deadlocks printed as they happen; the rest are only counted.
const PRINTED_ERRORS: usize = 10;
/// Violations and sequences printed after the check.
const PRINTED_VIOLATIONS: usize = 20;
const PRINTED_SEQUENCES: usize = 3;
/// Acts kept for showing the sequence behind a deadlock or a violation.
const MAX_EVENTS: usize = 500_000;
/// The job workers that run inside the run (expiry, start, sweep), each running this many jobs at
/// once and looking for due jobs at least this often.
const JOB_WORKERS: usize = 2;
const JOB_CONCURRENCY: usize = 2;
const JOB_POLL: Duration = Duration::from_millis(200);
/// How far ahead a grant's start or end is set: a start a few hundred ms ahead (so that starting
/// has work), an end 0.5-3 s ahead (so that expiry has work).
const START_AHEAD_MS: (u64, u64) = (200, 700);
const END_AHEAD_MS: (u64, u64) = (500, 3000);
/// The expiry and start paths act on grants due within this (sleeping until they are due), so
/// a short run meets some: at 400 ms a 5 s run often found none due and the two paths went
/// undone, the workers' jobs having taken every grant as it came due.
const DUE_WITHIN_MS: u64 = 1500;
/// After the tasks, how long the drains get to settle every rule change (the workers run them;
/// the run enqueues what is due as the poller would, without waiting for its 30 s schedule). A
/// change still draining after it is a violation. Long enough for a failed pool's backoff (2 s,
/// 4 s, 8 s) to come round a few times.
const DRAIN_WAIT: Duration = Duration::from_secs(30);
/// The error the Retry path records against a pool before retrying, as the drain records a
/// pool's settlement that rolled back (nothing fails on its own in a healthy run).
const SIMULATED_FAILURE: &str = "stress: a simulated failure of this pool's settlement";
/// The error a move of a fragile pool raises on its first attempt (a trigger of the stress
/// database, see `make_moves_fragile`): the drain records it (`Record a failed move`) and
/// RetryPlanAct (the tasks', or the settle's as an operator's) makes the move pending again.
const MOVE_FAILURE: &str = "stress: a simulated failure of the move of this organization";
/// How many organizations of the stress type have fragile moves: one shared, one not.
const FRAGILE_POOLS: usize = 2;
/// The bound a plan act's request gives its in-request listing and moves: 1-2 s, so that they
/// run for part of it and the drain job finishes the rest.
const IN_REQUEST_MS: (u64, u64) = (1000, 2000);

/// What `member-console stress` was asked for.
#[derive(Debug, Clone)]
pub struct StressOptions {
    pub seconds: u64,
    pub orgs: usize,
    pub connections: usize,
    /// The seed of the tasks' choices; random when not given (the run prints it).
    pub seed: Option<u64>,
    /// Leave the database in place for inspection.
    pub keep: bool,
    /// What the scratch database's `default_transaction_isolation` is set to (the server's when
    /// None): every path must run at READ COMMITTED whatever the database says.
    pub default_isolation: Option<DefaultIsolation>,
    /// Fail the run when one of the spec's 63 paths was never observed in the lock trace (the
    /// command's runs; a short test run cannot be sure to meet every branch).
    pub require_every_spec_path: bool,
}

impl StressOptions {
    pub fn new(seconds: u64) -> StressOptions {
        StressOptions {
            seconds,
            orgs: DEFAULT_ORGS,
            connections: DEFAULT_CONNECTIONS,
            seed: None,
            keep: false,
            default_isolation: None,
            require_every_spec_path: true,
        }
    }
}

/// An isolation level a database can default to (`stress --default-isolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultIsolation {
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

impl DefaultIsolation {
    /// "read-committed", "repeatable-read" or "serializable" (spaces are taken for dashes).
    pub fn parse(s: &str) -> Result<DefaultIsolation, String> {
        match s.trim().to_ascii_lowercase().replace(' ', "-").as_str() {
            "read-committed" => Ok(DefaultIsolation::ReadCommitted),
            "repeatable-read" => Ok(DefaultIsolation::RepeatableRead),
            "serializable" => Ok(DefaultIsolation::Serializable),
            _ => Err(format!("{s} is not read-committed, repeatable-read or serializable")),
        }
    }

    /// As PostgreSQL spells it.
    pub fn sql(self) -> &'static str {
        match self {
            DefaultIsolation::ReadCommitted => "read committed",
            DefaultIsolation::RepeatableRead => "repeatable read",
            DefaultIsolation::Serializable => "serializable",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PathCount {
    pub done: u64,
    pub refused: u64,
}

/// The outcome of a run; serializes to the one JSON line the command prints.
#[derive(Debug, Clone, Serialize)]
pub struct StressReport {
    pub seconds: u64,
    pub orgs: usize,
    pub connections: usize,
    pub paths: BTreeMap<String, PathCount>,
    pub deadlocks: u64,
    pub errors: u64,
    pub violations: u64,
    #[serde(skip)]
    pub seed: u64,
    #[serde(skip)]
    pub database: String,
    /// The first deadlocks and errors, as printed.
    #[serde(skip)]
    pub first_errors: Vec<String>,
    /// The first violated invariants, as printed.
    #[serde(skip)]
    pub first_violations: Vec<String>,
    /// The lock trace's graph (`observed`): every edge the transactions took, with its count.
    pub observed_edges: Vec<observed::ObservedEdge>,
    /// Edges no declaration of the transaction's paths has; must be empty.
    pub undeclared_edges: Vec<observed::ObservedEdge>,
    /// A cycle in the observed graph; must be none.
    pub lock_cycle: Option<Vec<String>>,
    /// Two locks of one table out of the spec's key order; must be empty.
    pub same_table_order_violations: Vec<observed::OrderViolation>,
    /// The spec's paths (numbers) the trace shows, and the ones it does not.
    pub paths_observed: Vec<u8>,
    pub paths_unobserved: Vec<String>,
    #[serde(skip)]
    pub require_every_spec_path: bool,
}

impl StressReport {
    pub fn is_clean(&self) -> bool {
        self.deadlocks == 0 && self.errors == 0 && self.violations == 0 && self.lock_order_is_clean()
    }

    /// The observed lock order: no undeclared edge, no cycle, no key out of order, and (when the
    /// run requires it) every spec path observed.
    pub fn lock_order_is_clean(&self) -> bool {
        self.undeclared_edges.is_empty()
            && self.lock_cycle.is_none()
            && self.same_table_order_violations.is_empty()
            && (!self.require_every_spec_path || self.paths_unobserved.is_empty())
    }

    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

/// The command: run, print the JSON line on stdout, and say whether the run was clean.
pub async fn command(opts: StressOptions) -> anyhow::Result<bool> {
    let config = Config::from_env()?;
    eprintln!("member-console configuration:\n{config}");
    let report = run(&config, opts).await?;
    println!("{}", report.json_line());
    Ok(report.is_clean())
}

mod acts;
mod fixture;
mod invariants;
pub mod observed;
mod paths;
mod relay;
mod runner;
mod tasks;

use acts::*;
use fixture::*;
pub use invariants::*;
pub use paths::*;
pub use runner::*;
use tasks::*;
