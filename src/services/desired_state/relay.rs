//! ProcessDesiredStateOutbox: claim notices (one statement, SKIP LOCKED, leased), turn them into
//! addresses (a notice about a whole connection walks its recipients a page at a time, keeping
//! its place in the notice), recompute each address in a transaction of its own, then ask the
//! dispatch of every connection with a record due.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream};

use crate::{
    db::{
        Db, DbError, TxKind,
        locks::{Lock, PathLocks},
        trace, tx,
    },
    ids::{ConnectionId, NoticeId},
    jobs::Job,
    services::ServiceError,
    store::desired_state as store,
};

use super::DispatchDesiredState;

pub static CLAIM_NOTICES_LOCKS: PathLocks = PathLocks {
    path: "ClaimDesiredStateOutbox",
    function: "services::desired_state::relay::process_desired_state_outbox",
    kind: "Plain",
    locks: &[Lock::DesiredStateNotices],
    why: "Pending notices are locked FOR UPDATE SKIP LOCKED in one statement that also leases them, so two \
          relay passes claim different notices and never wait; the relay takes no rendezvous and locks no \
          source row.",
};

pub static RECOMPUTE_ADDRESS_LOCKS: PathLocks = PathLocks {
    path: "recomputeAddress",
    function: "services::desired_state::relay::recompute_address",
    kind: "Plain",
    locks: &[Lock::DesiredStateAddress, Lock::DesiredStateRecord],
    why: "The address lock (even where the address has no record yet), then the record row, then the \
          content computed in a statement of its own, so it reflects every commit before the lock's grant; \
          a new generation only when the content changed (rule 7).",
};

/// How many notices one claim takes.
pub const NOTICE_BATCH: i64 = 256;
/// How many recipients one page of a walk covers.
pub const WALK_PAGE: i64 = 500;
/// How long a claimed notice is this pass's before another may take it back.
pub const NOTICE_LEASE: Duration = Duration::from_secs(60);
/// Recomputes run at once (each its own transaction and connection).
pub const RECOMPUTE_PARALLELISM: usize = 4;
/// How long one pass keeps claiming while notices remain (the next pass goes on).
pub const PASS_BUDGET: Duration = Duration::from_secs(20);

/// What one recompute did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recomputed {
    /// A record was created (generation 1).
    Created,
    /// The content changed: a new generation.
    Generation,
    /// Same content: nothing written.
    Unchanged,
    /// Same content, made due now (Retry).
    Due,
    /// The connection is deleted or the recipient gone: the record was deleted.
    Deleted,
    /// Nothing to hold and no record.
    None,
}

impl Recomputed {
    fn parse(s: &str) -> Recomputed {
        match s {
            "created" => Recomputed::Created,
            "generation" => Recomputed::Generation,
            "due" => Recomputed::Due,
            "deleted" => Recomputed::Deleted,
            "none" => Recomputed::None,
            _ => Recomputed::Unchanged,
        }
    }

    /// Whether a push may now be owed.
    fn owes_push(self) -> bool {
        matches!(self, Recomputed::Created | Recomputed::Generation | Recomputed::Due)
    }
}

/// Who asked for a recompute. When one pass holds several notices about an address, the
/// strongest ask wins (the order here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ask {
    /// A source or the connection's keys changed: a new generation only when the content did.
    #[default]
    Notice,
    /// Retry: a record still behind is due at once.
    Retry,
    /// The connection's URL changed: every record is due at once and unconfirmed.
    Resend,
}

impl Ask {
    fn of_reason(reason: &str) -> Ask {
        match reason {
            "retry" => Ask::Retry,
            "resend" => Ask::Resend,
            _ => Ask::Notice,
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Ask::Notice => "notice",
            Ask::Retry => "retry",
            Ask::Resend => "resend",
        }
    }
}

/// recomputeAddress for (connection, organization): one READ COMMITTED transaction, one round
/// trip (`core.recompute_desired_state_address` takes the address lock, then the record row, then
/// computes the content in a statement of its own).
#[tracing::instrument(name = "recomputeAddress", skip(db), fields(connection_id = %connection, recipient_id))]
pub async fn recompute_address(
    db: &Db,
    connection: ConnectionId,
    recipient_id: i64,
    ask: Ask,
) -> Result<Recomputed, DbError> {
    // Numbers and a constant of this module's: the simple protocol carries no parameters.
    let sql = format!(
        "SELECT core.recompute_desired_state_address({}, 'organization', {recipient_id}, '{}')",
        connection.0,
        ask.sql()
    );
    let rows = tx::once_for(db, TxKind::Plain, &RECOMPUTE_ADDRESS_LOCKS, sql).await?;
    use sqlx::Row;
    let outcome: String = rows.first().map(|r| r.try_get(0)).transpose()?.unwrap_or_default();
    Ok(Recomputed::parse(&outcome))
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RelayPass {
    pub notices: usize,
    pub recomputed: usize,
    pub new_generations: usize,
    pub deleted: usize,
    pub failed: usize,
    pub dispatches: usize,
}

/// One notice's share of the pass.
struct Claimed {
    id: NoticeId,
    addresses: Vec<(ConnectionId, i64)>,
    /// A walk that has more pages: where it goes on from.
    next_page_after: Option<i64>,
}

/// The addresses one notice names (a walk: its next page).
async fn addresses_of(
    db: &Db,
    n: &store::NoticeRow,
    live: &[ConnectionId],
    tests: &mut BTreeSet<ConnectionId>,
) -> Result<Claimed, ServiceError> {
    let mut c = Claimed { id: n.notice_id, addresses: vec![], next_page_after: None };
    match (n.connection_id, n.recipient_id, n.reason.as_str()) {
        (Some(conn), _, "test") => {
            tests.insert(conn);
        }
        (None, Some(r), _) => c.addresses.extend(live.iter().map(|conn| (*conn, r.0))),
        (Some(conn), Some(r), _) => c.addresses.push((conn, r.0)),
        (Some(conn), None, reason) => {
            let page = match reason {
                "deleted" => store::recipients_after(&db.pool, conn, false, n.after_recipient_id, WALK_PAGE).await?,
                "retry" => store::recipients_after(&db.pool, conn, true, n.after_recipient_id, WALK_PAGE).await?,
                // Only the addresses that have a record: the others are created by their notices.
                "resend" => store::recipients_after(&db.pool, conn, false, n.after_recipient_id, WALK_PAGE).await?,
                _ => store::organizations_after(&db.pool, n.after_recipient_id, WALK_PAGE).await?,
            };
            if page.len() as i64 == WALK_PAGE {
                c.next_page_after = page.last().copied();
            }
            c.addresses.extend(page.into_iter().map(|r| (conn, r)));
        }
        (None, None, _) => {}
    }
    Ok(c)
}

/// ProcessDesiredStateOutbox: claim, recompute, and ask for dispatch, until the outbox is empty
/// or `budget` has passed. A notice whose recomputes all succeeded is deleted (a walk moves to its
/// next page instead); one with a failure stays, due again shortly, with the reason.
#[tracing::instrument(name = "ProcessDesiredStateOutbox", skip(db))]
pub async fn process_desired_state_outbox(db: &Db, budget: Duration) -> Result<RelayPass, ServiceError> {
    let started = Instant::now();
    let mut pass = RelayPass::default();
    let mut owed: BTreeSet<ConnectionId> = BTreeSet::new();
    loop {
        let notices = tx::within_for(db, TxKind::Plain, &CLAIM_NOTICES_LOCKS, async |t: &mut tx::Tx| {
            let claimed = store::claim_notices(t.conn(), NOTICE_BATCH, NOTICE_LEASE.as_secs_f64()).await?;
            // The rows the one statement locked (SKIP LOCKED), in notice order, as the trace shows them.
            let rows: Vec<(i64, Option<i64>)> = claimed.iter().map(|n| (n.notice_id.0, Some(n.notice_id.0))).collect();
            trace::note_rows(t.conn(), Lock::DesiredStateNotices, rows).await?;
            Ok::<_, ServiceError>(claimed)
        })
        .await?;
        if notices.is_empty() {
            break;
        }
        pass.notices += notices.len();
        let live = store::live_connection_ids(&db.pool).await?;
        let mut tests = BTreeSet::new();
        let mut claimed = vec![];
        for n in &notices {
            claimed.push(addresses_of(db, n, &live, &mut tests).await?);
        }
        for conn in &tests {
            store::request_test(&db.pool, *conn).await?;
            owed.insert(*conn);
        }
        // Each address once, the strongest ask winning; in address order, so two passes meet in
        // one order.
        let mut addresses: BTreeMap<(ConnectionId, i64), Ask> = BTreeMap::new();
        for (c, n) in claimed.iter().zip(&notices) {
            for a in &c.addresses {
                let ask = addresses.entry(*a).or_default();
                *ask = (*ask).max(Ask::of_reason(&n.reason));
            }
        }
        let results: Vec<((ConnectionId, i64), Result<Recomputed, DbError>)> = stream::iter(addresses.into_iter())
            .map(|((conn, r), ask)| async move { ((conn, r), recompute_address(db, conn, r, ask).await) })
            .buffer_unordered(RECOMPUTE_PARALLELISM)
            .collect()
            .await;
        let mut failed: BTreeMap<(ConnectionId, i64), String> = BTreeMap::new();
        for (a, r) in results {
            pass.recomputed += 1;
            match r {
                Ok(done) => {
                    if done.owes_push() {
                        owed.insert(a.0);
                    }
                    pass.new_generations += matches!(done, Recomputed::Created | Recomputed::Generation) as usize;
                    pass.deleted += (done == Recomputed::Deleted) as usize;
                }
                Err(e) => {
                    tracing::warn!(connection_id = %a.0, recipient_id = a.1, error = %e, "a recompute failed");
                    pass.failed += 1;
                    failed.insert(a, e.to_string());
                }
            }
        }
        let mut done = vec![];
        for c in &claimed {
            if let Some(why) = c.addresses.iter().find_map(|a| failed.get(a)) {
                store::release_notice(&db.pool, c.id, why, 5.0).await?;
            } else if let Some(after) = c.next_page_after {
                store::advance_notice(&db.pool, c.id, after).await?;
            } else {
                done.push(c.id.0);
            }
        }
        store::delete_notices(&db.pool, &done).await?;
        // Dispatch starts while the pass goes on (a rule change's notices take many batches);
        // asking is a no-op while the connection's dispatch is open, and the pass's end asks
        // again for whatever is still due.
        for conn in std::mem::take(&mut owed) {
            ask_dispatch(db, conn).await?;
            pass.dispatches += 1;
        }
        if started.elapsed() >= budget {
            break;
        }
    }
    // Records due again after a backoff, or left by a dispatcher that stopped, are found here too.
    owed.extend(store::connections_with_due_records(&db.pool).await?);
    for conn in owed {
        ask_dispatch(db, conn).await?;
        pass.dispatches += 1;
    }
    Ok(pass)
}

/// Enqueue a connection's dispatch, a no-op while one is open for it.
pub async fn ask_dispatch(db: &Db, connection: ConnectionId) -> Result<(), DbError> {
    let mut conn = db.pool.acquire().await?;
    DispatchDesiredState { connection_id: connection }.enqueue(&mut conn).await?;
    Ok(())
}
