//! A job's one home (after crates.io's `BackgroundJob`): its type is its payload, and its `impl
//! Job` says the rest, its kind, attempts, dedupe key, when it is due, what it needs to run and
//! how it runs. Every caller enqueues it with `job.enqueue(conn)`; a worker runs it once its
//! type is registered (`Handlers::register::<J>(context)`, in `crate::job_registry`).

use std::future::Future;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{
    queue::{self, DEFAULT_MAX_ATTEMPTS, NewJob},
    worker::{JobContext, JobError},
};
use crate::{db::DbError, ids::JobId};

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
