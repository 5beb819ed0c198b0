//! invoiceReconcile.converge (spec: "Invoice reconcile"): read the invoice from Stripe with no
//! transaction open, then a plain transaction under the invoice's advisory lock that writes the
//! invoice, its lines and its payments. It touches no pool and takes no rendezvous.

use crate::{
    db::{
        Db, Tx, TxKind,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
        tx::within_for,
    },
    ids::StripeInvoiceId,
    integrations::stripe::Stripe,
    services::ServiceError,
    store::billing::{self as store, InvoiceWrite},
};

use super::remote;
use crate::services::clock::now;

pub static CONVERGE_INVOICE_LOCKS: PathLocks = PathLocks {
    path: "invoiceReconcile.converge",
    function: "services::billing::converge_invoice",
    kind: "Plain",
    locks: &[Lock::InvoiceAdvisory],
    why: "The invoice's advisory lock, then the invoice, line and payment rows: two converges of one invoice \
          write one after the other, and the later read wins. No pool, no rendezvous.",
};

/// What a converge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converged {
    Written,
    /// A newer read of the invoice was already written.
    Stale,
    /// Stripe has no such invoice.
    Unknown,
}

#[tracing::instrument(name = "Converge an invoice", skip(db, stripe))]
pub async fn converge_invoice(
    db: &Db,
    stripe: &Stripe,
    stripe_invoice_id: &StripeInvoiceId,
) -> Result<Converged, ServiceError> {
    let observed_at = now(db).await?;
    let Some(inv) = stripe.invoice(stripe_invoice_id).await.map_err(remote)? else {
        return Ok(Converged::Unknown);
    };
    let status = inv.status;
    within_for(db, TxKind::Plain, &CONVERGE_INVOICE_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::Invoice(stripe_invoice_id.to_string())).await?;
        if store::invoice_observed_at(tx.conn(), stripe_invoice_id).await?.is_some_and(|t| t > observed_at) {
            return Ok(Converged::Stale);
        }
        let organization_id = match store::organization_of_customer(tx.conn(), &inv.customer).await? {
            Some(o) => Some(o),
            None => match &inv.subscription {
                Some(s) => store::organization_of_subscription(tx.conn(), s).await?,
                None => None,
            },
        };
        store::put_invoice(
            tx.conn(),
            &InvoiceWrite {
                stripe_invoice_id,
                organization_id,
                stripe_subscription_id: inv.subscription.as_ref(),
                stripe_customer_id: &inv.customer,
                number: inv.number.as_deref(),
                status,
                currency: &inv.currency,
                amount_due: inv.amount_due,
                amount_paid: inv.amount_paid,
                amount_remaining: inv.amount_remaining,
                hosted_invoice_url: inv.hosted_invoice_url.as_deref(),
                period_start: inv.period_start,
                period_end: inv.period_end,
                stripe_created: inv.created,
                observed_at,
            },
        )
        .await?;
        store::clear_invoice_details(tx.conn(), stripe_invoice_id).await?;
        for l in &inv.lines {
            store::insert_invoice_line(
                tx.conn(),
                stripe_invoice_id,
                &l.id,
                l.description.as_deref(),
                l.amount,
                l.quantity,
                l.price.as_ref(),
                (l.period_start, l.period_end),
            )
            .await?;
        }
        for p in &inv.payments {
            store::insert_invoice_payment(tx.conn(), stripe_invoice_id, &p.id, p.status, p.amount, p.paid_at).await?;
        }
        Ok(Converged::Written)
    })
    .await
}
