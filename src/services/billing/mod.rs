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
pub use sweep::sweep_billing;

use crate::{integrations::stripe::StripeFailure, jobs::Job, services::ServiceError};

/// A Stripe failure in the refusal model: its sentence for people, and whether to try again.
pub(crate) fn remote(f: StripeFailure) -> ServiceError {
    ServiceError::Remote { transient: f.is_transient(), sentence: f.sentence() }
}

/// Reconcile one Stripe subscription (enqueued by the webhook's intake and the sweep).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileSubscription {
    pub stripe_subscription_id: String,
}

impl Job for ReconcileSubscription {
    const KIND: &'static str = "reconcile_subscription";
}

/// Converge one Stripe invoice.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvergeInvoice {
    pub stripe_invoice_id: String,
}

impl Job for ConvergeInvoice {
    const KIND: &'static str = "converge_invoice";
}

/// The outbox processor's pass (a schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessOutbox {}

impl Job for ProcessOutbox {
    const KIND: &'static str = "process_outbox";
}

/// The billing sweep (a schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SweepBilling {}

impl Job for SweepBilling {
    const KIND: &'static str = "sweep_billing";
}
