//! Billing through Stripe (design: billing.md; spec: "Subscription reconcile", "Invoice
//! reconcile", "Product sync"): the reconcile of a subscription and of an invoice, the
//! webhook's intake, checkout, prices and the catalog's sync, the outbox processor and the sweep.
//! Each reads Stripe with no transaction open and writes in the transaction kind the spec names.

pub mod catalog_sync;
pub mod checkout;
pub mod events;
pub mod invoices;
pub mod outbox;
pub mod plan_changes;
pub mod reads;
pub mod reconcile;
pub mod resume;
pub mod sweep;

pub use catalog_sync::{apply_product_sync, archive_price, set_price, sync_product};
pub use checkout::{finish_checkout, start_checkout};
pub use events::receive_event;
pub use invoices::converge_invoice;
pub use outbox::process_outbox;
pub use reconcile::{Reconciled, reconcile_subscription};
pub use sweep::{sweep_billing, sweep_billing_with};

use std::sync::Arc;

use crate::{
    ids::{StripeInvoiceId, StripeSubscriptionId},
    integrations::stripe::{Stripe, StripeFailure},
    jobs::{Job, JobContext, JobError, remote_failure},
    services::ServiceError,
};

/// A Stripe failure in the refusal model: its sentence for people, and whether to try again.
pub(crate) fn remote(f: StripeFailure) -> ServiceError {
    ServiceError::Remote { transient: f.is_transient(), sentence: f.sentence() }
}

/// A failed Stripe call that changes something, in the refusal model: when Stripe gave no answer
/// (or one the console could not read) the change may have been made, and the sentence says so
/// instead of promising nothing was charged.
pub(crate) fn remote_write(f: StripeFailure) -> ServiceError {
    let unconfirmed = f.refusal() == crate::integrations::stripe::Refusal::Unconfirmed;
    ServiceError::Remote { transient: f.is_transient() || unconfirmed, sentence: f.write_sentence() }
}

/// Queue a reconcile of the Stripe subscription, keyed as the webhooks' and the sweep's own so
/// that one already waiting is not queued twice: one insert on the handle, no lock. Used where a
/// change's outcome in Stripe is unknown or the reconcile at once failed, so the console still
/// converges on what Stripe holds.
pub(crate) async fn enqueue_reconcile(
    db: &crate::db::Db,
    stripe_subscription_id: &StripeSubscriptionId,
) -> Result<(), ServiceError> {
    let mut conn = db.pool.acquire().await.map_err(crate::db::DbError::from)?;
    enqueue_reconcile_on(&mut conn, stripe_subscription_id).await?;
    Ok(())
}

/// The same on a connection (the sweep's transaction); whether one was queued.
pub(crate) async fn enqueue_reconcile_on(
    conn: &mut sqlx::PgConnection,
    stripe_subscription_id: &StripeSubscriptionId,
) -> Result<bool, ServiceError> {
    let job = ReconcileSubscription { stripe_subscription_id: stripe_subscription_id.clone() };
    Ok(job.enqueue(conn).await?.is_some())
}

/// Reconcile one Stripe subscription (enqueued by the webhook's intake and the sweep).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileSubscription {
    pub stripe_subscription_id: StripeSubscriptionId,
}

impl Job for ReconcileSubscription {
    const KIND: &'static str = "reconcile_subscription";
    type Context = Arc<Stripe>;

    /// The key every enqueuer uses, so one reconcile waits per subscription.
    fn object_key(&self) -> Option<String> {
        Some(format!("stripe-subscription:{}", self.stripe_subscription_id))
    }

    /// It reads Stripe before its transaction, so it may run again safely.
    async fn run(&self, stripe: &Arc<Stripe>, job: &JobContext) -> Result<(), JobError> {
        reconcile_subscription(&job.db, stripe, &self.stripe_subscription_id).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// Converge one Stripe invoice.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvergeInvoice {
    pub stripe_invoice_id: StripeInvoiceId,
}

impl Job for ConvergeInvoice {
    const KIND: &'static str = "converge_invoice";
    type Context = Arc<Stripe>;

    /// The key every enqueuer uses, so one converge waits per invoice.
    fn object_key(&self) -> Option<String> {
        Some(format!("stripe-invoice:{}", self.stripe_invoice_id))
    }

    async fn run(&self, stripe: &Arc<Stripe>, job: &JobContext) -> Result<(), JobError> {
        converge_invoice(&job.db, stripe, &self.stripe_invoice_id).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// The outbox processor's pass (a schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessOutbox {}

impl Job for ProcessOutbox {
    const KIND: &'static str = "process_outbox";
    type Context = Arc<Stripe>;

    /// Up to 100 rows a pass, each claimed for the worker's lease, so a row comes back when the
    /// job would.
    async fn run(&self, stripe: &Arc<Stripe>, job: &JobContext) -> Result<(), JobError> {
        process_outbox(&job.db, stripe, 100, job.lease).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// The billing sweep (a schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SweepBilling {}

impl Job for SweepBilling {
    const KIND: &'static str = "sweep_billing";
    type Context = Arc<Stripe>;

    async fn run(&self, stripe: &Arc<Stripe>, job: &JobContext) -> Result<(), JobError> {
        sweep_billing(&job.db, stripe).await.map_err(remote_failure)?;
        Ok(())
    }
}
