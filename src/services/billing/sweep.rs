//! The billing sweep: a schedule that repairs a lost webhook within minutes. It reads Stripe's
//! events since its last pass and enqueues the jobs their objects need (deduplicated against
//! the webhooks' own), asks Stripe about checkouts no return completed, and enqueues a reconcile
//! of every subscription the console believes live, a page at a time.

use chrono::{Duration as Span, Utc};

use crate::{
    db::{Db, Tx, TxKind, tx::within},
    ids::SubscriptionId,
    ids::{StripeInvoiceId, StripeSubscriptionId},
    integrations::stripe::{CheckoutStatus, Stripe, StripeFailure},
    jobs::Job,
    services::ServiceError,
    store::billing as store,
};

use super::{ConvergeInvoice, enqueue_reconcile_on, remote};

/// What one sweep enqueued.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub events_read: usize,
    /// Every event since the cursor was read (false: a pass's pages ran out first).
    pub events_complete: bool,
    pub enqueued: usize,
}

/// Events asked of Stripe per page (Stripe's most), and pages per pass: a pass reads at most
/// 2,000 events, so one pass's Stripe calls stay bounded; a walk over more continues next pass.
const EVENT_PAGE: i64 = 100;
const EVENT_PAGES_PER_PASS: usize = 20;

#[tracing::instrument(name = "Sweep billing", skip(db, stripe))]
pub async fn sweep_billing(db: &Db, stripe: &Stripe) -> Result<Swept, ServiceError> {
    sweep_billing_with(db, stripe, EVENT_PAGES_PER_PASS).await
}

/// The sweep, reading at most `event_pages` pages of events (a test reads one).
pub async fn sweep_billing_with(db: &Db, stripe: &Stripe, event_pages: usize) -> Result<Swept, ServiceError> {
    let mut swept = Swept::default();
    let state = {
        let mut read = db.read().await?;
        store::sweep_state(read.conn()).await?
    };
    // The first pass looks back a day; later ones from the newest event seen, less a minute for
    // events Stripe stamps out of order.
    let since = state.events_seen_until.map(|t| t - Span::minutes(1)).unwrap_or_else(|| Utc::now() - Span::days(1));
    // Stripe lists newest first, so a walk over more events than a pass reads takes several
    // passes: one left unfinished continues after the oldest event it read (events that arrived
    // since are newer than the walk's newest, and the next walk reads them).
    let resume = state.resume_after.as_ref().zip(state.walk_newest);
    let read = match stripe.events_since(since, resume.map(|r| r.0), EVENT_PAGE, event_pages).await {
        // The walk's last event is gone from Stripe (it keeps events 30 days): a new walk.
        Err(StripeFailure::Api { status: 404, .. }) if resume.is_some() => {
            tracing::warn!(resume_after = ?state.resume_after, "the sweep's resume point is gone from Stripe; walking its events again from the newest");
            stripe.events_since(since, None, EVENT_PAGE, event_pages).await
        }
        r => r,
    }
    .map_err(remote)?;
    swept.events_read = read.events.len();
    swept.events_complete = read.complete;
    // The walk's newest event: the one stored when it continues, this pass's when it starts.
    let walk_newest = match (read.events.last().map(|e| e.created), resume.map(|r| r.1)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        for e in &read.events {
            let Some(object) = &e.object_id else { continue };
            let queued = if e.event_type.starts_with("customer.subscription.") {
                enqueue_reconcile_on(tx.conn(), &StripeSubscriptionId::from(object.as_str())).await?
            } else if e.event_type.starts_with("invoice.") {
                ConvergeInvoice { stripe_invoice_id: StripeInvoiceId::from(object.as_str()) }
                    .enqueue(tx.conn())
                    .await?
                    .is_some()
            } else {
                false
            };
            swept.enqueued += queued as usize;
        }
        // The cursor moves only when the walk is complete, to its newest event: until then the
        // events between the cursor and the oldest read are unseen, and the next pass continues
        // after that oldest one.
        if read.complete {
            store::set_sweep_state(tx.conn(), walk_newest, None).await?;
        } else {
            tracing::warn!(
                events = read.events.len(),
                since = %since,
                resume_after = ?read.last_id,
                "more Stripe events since the last sweep than one pass reads; the next pass continues the walk"
            );
            store::set_sweep_state(tx.conn(), None, read.last_id.as_ref().zip(walk_newest)).await?;
        }
        Ok::<_, ServiceError>(())
    })
    .await?;
    // Checkouts paid whose return and webhook were both lost.
    let open = {
        let mut read = db.read().await?;
        store::open_checkout_sessions(read.conn(), 50).await?
    };
    for id in open {
        if let Some(s) = stripe.checkout(&id).await.map_err(remote)?
            && s.status == CheckoutStatus::Complete
            && let Some(sub) = s.subscription
        {
            within(db, TxKind::Plain, async |tx: &mut Tx| {
                swept.enqueued += enqueue_reconcile_on(tx.conn(), &sub).await? as usize;
                store::complete_checkout_session(tx.conn(), &id, &sub).await?;
                Ok::<_, ServiceError>(())
            })
            .await?;
        }
    }
    // Every subscription the console believes live, so a status Stripe changed without an event
    // the console saw is read again.
    let mut after = SubscriptionId(0);
    loop {
        let last = within(db, TxKind::Plain, async |tx: &mut Tx| {
            let page = store::live_subscriptions_after(tx.conn(), after, 500).await?;
            for (_, stripe_id) in &page {
                swept.enqueued += enqueue_reconcile_on(tx.conn(), stripe_id).await? as usize;
            }
            Ok::<_, ServiceError>(page.last().map(|p| p.0))
        })
        .await?;
        let Some(last) = last else { break };
        after = last;
    }
    Ok(swept)
}
