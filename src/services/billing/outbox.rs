//! The outbox processor: claims due `core.outbox` rows (one statement, SKIP LOCKED, leased) and
//! does each one's work after the commit that wrote it: a `reconcile_subscription` row runs
//! ReconcileSubscription and then ApplySubscriptionCollection, a `sync_product` row
//! SyncProductToStripe. Done rows are marked, not
//! deleted; a failure is tried again with backoff and its reason kept for operators.
//!
//! A row is claimed just before its work, one at a time, for the running job's lease: a
//! processor killed mid-row leaves that row due again once the lease is over (well under a
//! minute), and no row waits claimed behind another's slow work. A row's work may outlast its
//! lease (Stripe slow to answer) and then run twice at once; both are idempotent (the reconcile
//! re-reads Stripe under its locks, the sync's calls carry the row's idempotency key), so its
//! effect is once.

use std::time::Duration;

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx::{within, within_for},
    },
    integrations::stripe::Stripe,
    jobs::Backoff,
    services::ServiceError,
    store::billing as store,
};

use super::{catalog_sync::apply_product_sync, reconcile::apply_subscription_collection};

pub static CLAIM_OUTBOX_LOCKS: PathLocks = PathLocks {
    path: "Claim outbox rows",
    function: "services::billing::outbox::process_outbox",
    kind: "Plain",
    locks: &[Lock::OutboxRows],
    why: "Due outbox rows are locked FOR UPDATE SKIP LOCKED in one statement that also leases them, so \
          processors claim disjoint rows and never wait; each row's work runs after that commit.",
};

/// After this many failed attempts a row stays failed (an operator sees it on /operator/billing).
pub const OUTBOX_MAX_ATTEMPTS: i32 = 12;

/// How many rows one pass handled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Processed {
    pub done: usize,
    pub failed: usize,
}

/// Claim and process up to `limit` due rows, each claimed for `lease` (the job's own).
#[tracing::instrument(name = "Process the outbox", skip(db, stripe))]
pub async fn process_outbox(db: &Db, stripe: &Stripe, limit: i64, lease: Duration) -> Result<Processed, ServiceError> {
    let mut out = Processed::default();
    for _ in 0..limit.max(0) {
        let claimed = within_for(db, TxKind::Plain, &CLAIM_OUTBOX_LOCKS, async |tx: &mut Tx| {
            Ok::<_, ServiceError>(store::claim_outbox(tx.conn(), 1, lease.as_secs_f64()).await?)
        })
        .await?;
        let Some(row) = claimed.into_iter().next() else { break };
        let result = match (row.kind.as_str(), &row.stripe_subscription_id, row.product_id) {
            ("reconcile_subscription", Some(s), _) => apply_subscription_collection(db, stripe, s).await.map(|_| ()),
            ("sync_product", _, Some(p)) => {
                apply_product_sync(db, stripe, p, &format!("outbox-{}", row.outbox_id)).await
            }
            (kind, _, _) => {
                Err(ServiceError::Remote { sentence: format!("outbox row of unknown kind {kind}"), transient: false })
            }
        };
        let (done, failed) = within(db, TxKind::Plain, async |tx: &mut Tx| match result {
            Ok(()) => {
                store::outbox_done(tx.conn(), row.outbox_id).await?;
                Ok::<_, ServiceError>((1, 0))
            }
            Err(e) => {
                let permanent =
                    matches!(&e, ServiceError::Remote { transient: false, .. }) || row.attempts >= OUTBOX_MAX_ATTEMPTS;
                // A permanent failure is due again only far in the future: it waits for an operator.
                let retry =
                    if permanent { Duration::from_secs(86_400 * 365) } else { Backoff::default().delay(row.attempts) };
                tracing::warn!(outbox_id = %row.outbox_id, error = %e, attempts = row.attempts, "an outbox row failed");
                store::outbox_failed(tx.conn(), row.outbox_id, &e.to_string(), retry.as_secs_f64()).await?;
                Ok((0, 1))
            }
        })
        .await?;
        out.done += done;
        out.failed += failed;
    }
    Ok(out)
}
