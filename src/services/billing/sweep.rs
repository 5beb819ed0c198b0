//! The billing sweep: a schedule that repairs a lost webhook within minutes. It reads Stripe's
//! events since its last pass and enqueues the jobs their objects need (deduplicated against
//! the webhooks' own), asks Stripe about checkouts no return completed, and enqueues a reconcile
//! of every subscription the console believes live, a page at a time.

use chrono::{Duration as Span, Utc};

use crate::{
    db::{Db, TxKind, begin},
    ids::SubscriptionId,
    integrations::stripe::Stripe,
    jobs,
    services::ServiceError,
    store::billing as store,
};

use super::{ConvergeInvoice, ReconcileSubscription, remote};

/// What one sweep enqueued.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub events_read: usize,
    /// Every event since the cursor was read (false: a pass's pages ran out first).
    pub events_complete: bool,
    pub enqueued: usize,
}

/// Events asked of Stripe per page (Stripe's most), and pages per pass: a pass reads at most
/// 2,000 events, so one pass's Stripe calls stay bounded.
const EVENT_PAGE: i64 = 100;
const EVENT_PAGES_PER_PASS: usize = 20;

#[tracing::instrument(name = "Sweep billing", skip(db, stripe))]
pub async fn sweep_billing(db: &Db, stripe: &Stripe) -> Result<Swept, ServiceError> {
    let mut swept = Swept::default();
    let since = {
        let mut read = db.read().await?;
        store::sweep_cursor(read.conn()).await?
    }
    // The first pass looks back a day; later ones from the newest event seen, less a minute for
    // events Stripe stamps out of order.
    .map(|t| t - Span::minutes(1))
    .unwrap_or_else(|| Utc::now() - Span::days(1));
    let read = stripe.events_since(since, EVENT_PAGE, EVENT_PAGES_PER_PASS).await.map_err(remote)?;
    swept.events_read = read.events.len();
    swept.events_complete = read.complete;
    let mut newest = None;
    {
        let mut tx = begin(db, TxKind::Plain).await?;
        for e in &read.events {
            newest = Some(e.created);
            let Some(object) = &e.object_id else { continue };
            let queued = if e.event_type.starts_with("customer.subscription.") {
                enqueue_reconcile(tx.conn(), object).await?
            } else if e.event_type.starts_with("invoice.") {
                jobs::enqueue_for_object(
                    tx.conn(),
                    &ConvergeInvoice { stripe_invoice_id: object.clone() },
                    &format!("stripe-invoice:{object}"),
                )
                .await?
                .is_some()
            } else {
                false
            };
            swept.enqueued += queued as usize;
        }
        // The cursor moves only over what was read. Stripe lists newest first, so a read cut short
        // holds the newest events, and those between the cursor and the oldest read are unseen:
        // the cursor stays, and the next pass reads from it again (the jobs are deduplicated).
        if !read.complete {
            tracing::warn!(
                events = read.events.len(),
                since = %since,
                "more Stripe events since the last sweep than one pass reads; the sweep cursor stays where it was"
            );
        }
        store::set_sweep_cursor(tx.conn(), newest.filter(|_| read.complete)).await?;
        tx.commit().await?;
    }
    // Checkouts paid whose return and webhook were both lost.
    let open = {
        let mut read = db.read().await?;
        store::open_checkout_sessions(read.conn(), 50).await?
    };
    for id in open {
        if let Some(s) = stripe.checkout(&id).await.map_err(remote)?
            && s.status == "complete"
            && let Some(sub) = s.subscription
        {
            let mut tx = begin(db, TxKind::Plain).await?;
            swept.enqueued += enqueue_reconcile(tx.conn(), &sub).await? as usize;
            store::complete_checkout_session(tx.conn(), &id, &sub).await?;
            tx.commit().await?;
        }
    }
    // Every subscription the console believes live, so a status Stripe changed without an event
    // the console saw is read again.
    let mut after = SubscriptionId(0);
    loop {
        let mut tx = begin(db, TxKind::Plain).await?;
        let page = store::live_subscriptions_after(tx.conn(), after, 500).await?;
        let Some(last) = page.last().map(|p| p.0) else { break };
        for (_, stripe_id) in &page {
            swept.enqueued += enqueue_reconcile(tx.conn(), stripe_id).await? as usize;
        }
        tx.commit().await?;
        after = last;
    }
    Ok(swept)
}

/// Queue a reconcile of the Stripe subscription, keyed by it so that one already waiting is not
/// queued again; whether one was queued.
async fn enqueue_reconcile(conn: &mut sqlx::PgConnection, stripe_subscription_id: &str) -> Result<bool, ServiceError> {
    let job = ReconcileSubscription { stripe_subscription_id: stripe_subscription_id.to_string() };
    let key = format!("stripe-subscription:{stripe_subscription_id}");
    Ok(jobs::enqueue_for_object(conn, &job, &key).await?.is_some())
}
