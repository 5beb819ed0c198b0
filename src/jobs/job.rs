//! A job's one home (after crates.io's `BackgroundJob`): its type is its payload, and its `impl
//! Job` says the rest, its kind, attempts, dedupe key, when it is due, what it needs to run and
//! how it runs. Every caller enqueues it with `job.enqueue(conn)`; a worker runs it once its
//! type is registered (`Handlers::register::<J>(context)`, in `crate::job_registry`).

use std::{future::Future, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::queue::{self, DEFAULT_MAX_ATTEMPTS, NewJob};
use crate::{
    db::{Db, DbError},
    ids::JobId,
};

/// A job a service defines. The type is the payload, stored as JSON (a struct with named fields;
/// one with none for a job that needs none): a worker reads it back as this type, or fails the
/// job permanently naming the payload. Kinds and payloads are persisted: never rename them.
pub trait Job: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static {
    /// The stored `kind`: which registered type runs it.
    const KIND: &'static str;
    /// Attempts before the job stays `failed`.
    const MAX_ATTEMPTS: i32 = DEFAULT_MAX_ATTEMPTS;
    /// What a run needs besides the database (which `JobContext` carries): `()`, or the client
    /// of a system outside (the farm, Stripe, the relay). Without that system connected the type
    /// is not registered, and its jobs wait.
    type Context: Clone + Send + Sync + 'static;

    /// While a job with this key is pending or running, enqueueing another is a no-op.
    fn dedupe_key(&self) -> Option<String> {
        None
    }

    /// The outside object (a Stripe subscription, an invoice) the job is about: while a job
    /// about it is pending, enqueueing another is a no-op (a webhook and a sweep asking at once
    /// queue one). It is stored in the payload as `object_key`; such a job is due now.
    fn object_key(&self) -> Option<String> {
        None
    }

    /// When the job is due; None: now.
    fn run_at(&self) -> Option<DateTime<Utc>> {
        None
    }

    /// Do the job's work. Delivery is at least once: a run must be safe to repeat.
    fn run(&self, ctx: &Self::Context, job: &JobContext) -> impl Future<Output = Result<(), JobError>> + Send;

    /// The payload as stored: the type's JSON, with its `object_key` if it has one.
    fn payload(&self) -> serde_json::Value {
        // A struct of plain fields always serializes.
        let mut payload = serde_json::to_value(self).unwrap_or_default();
        if let (Some(key), Some(map)) = (self.object_key(), payload.as_object_mut()) {
            map.insert("object_key".into(), serde_json::Value::String(key));
        }
        payload
    }

    /// Enqueue the job on the caller's connection, normally inside the transaction whose write
    /// needs it: it exists, and wakes the workers, only if that transaction commits. Returns the
    /// new job's id, or None when its dedupe or object key already has a job waiting.
    fn enqueue(&self, conn: &mut PgConnection) -> impl Future<Output = Result<Option<JobId>, DbError>> + Send {
        queue::enqueue(conn, NewJob::of(self))
    }
}

/// A typed job as the queue takes it. Here rather than in `queue`, so the queue, which the
/// worker and the schedules use too, does not import the trait that imports it.
impl NewJob<'static> {
    /// A typed job as its `impl Job` describes it: kind, payload, when due, keys and attempts.
    pub fn of<J: Job>(job: &J) -> NewJob<'static> {
        NewJob {
            kind: J::KIND,
            payload: job.payload(),
            run_at: job.run_at(),
            dedupe_key: job.dedupe_key(),
            object_key: job.object_key(),
            max_attempts: Some(J::MAX_ATTEMPTS),
        }
    }
}

/// What a run gets besides its job and the job type's context: the database, and which attempt
/// this is.
#[derive(Clone, Debug)]
pub struct JobContext {
    pub db: Db,
    pub job_id: JobId,
    pub kind: String,
    /// This attempt's number, from 1.
    pub attempt: i32,
    pub max_attempts: i32,
    /// The worker running it (the job's `locked_by`).
    pub worker_id: Arc<str>,
    /// The lease this worker's claims and renewals give: what a handler that claims rows of its
    /// own leases them for, so they come back as soon as the job would.
    pub lease: Duration,
}

impl JobContext {
    /// Whether a failure now ends the job as `failed`.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
}

/// Why a handler did not finish its job. Every variant but `Permanent` is retried with backoff
/// until the job's attempts are used up.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// A failure worth another try (a remote that did not answer, a lock not available, ...).
    #[error("{0}")]
    Retry(String),
    /// A failure no retry can fix (a payload that does not parse): the job fails at once.
    #[error("{0}")]
    Permanent(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<sqlx::Error> for JobError {
    fn from(e: sqlx::Error) -> Self {
        JobError::Db(e.into())
    }
}

impl JobError {
    pub fn retry(msg: impl Into<String>) -> Self {
        JobError::Retry(msg.into())
    }

    pub fn permanent(msg: impl Into<String>) -> Self {
        JobError::Permanent(msg.into())
    }

    /// The text kept in the job's last_error: the whole chain of causes.
    pub(super) fn describe(&self) -> String {
        match self {
            JobError::Other(e) => format!("{e:#}"),
            JobError::Db(DbError::Sql(e)) => format!("database error: {e}"),
            e => e.to_string(),
        }
    }
}
