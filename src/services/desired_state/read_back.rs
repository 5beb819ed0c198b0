//! Read-back: for a connection that supports it, ask the remote what it holds for each record it
//! confirmed, and write what it said (the projection) under the address lock (readBackItem). A
//! remote that holds another content or generation is drift: the record is pushed again.

use futures_util::{StreamExt, stream};

use crate::{
    db::{
        Db, TxKind,
        locks::{Lock, PathLocks},
        trace, tx,
    },
    ids::{ConnectionId, RecordId},
    integrations::desired_state::{Held, Relay},
    services::ServiceError,
    store::desired_state as store,
};

use super::dispatch::signing_secrets;

pub static READ_BACK_ITEM_LOCKS: PathLocks = PathLocks {
    path: "readBackItem",
    function: "services::desired_state::read_back::read_back_connection",
    kind: "Plain",
    locks: &[Lock::DesiredStateAddress, Lock::DesiredStateRecord],
    why: "The address lock, then the record row, then the projection, as a recompute does (rule 7), so a \
          read-back's verdict is about the content the record holds when it is written.",
};

/// Records one page reads back.
const PAGE: i64 = 100;
/// Reads in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// What one run found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadBackRun {
    pub checked: usize,
    pub drifted: usize,
    /// Why the run stopped early: the remote could not be asked.
    pub stopped: Option<String>,
}

/// Read back every record of `connection` the remote confirmed, stopping at the first remote that
/// cannot be asked; the run's summary is kept on the connection.
#[tracing::instrument(name = "Read back a connection", skip(db, relay), fields(connection_id = %connection))]
pub async fn read_back_connection(
    db: &Db,
    relay: &Relay,
    connection: ConnectionId,
) -> Result<ReadBackRun, ServiceError> {
    let mut run = ReadBackRun::default();
    let Some(c) = store::connection(&db.pool, connection).await? else { return Ok(run) };
    if c.deleted_at.is_some() || !c.read_back {
        return Ok(run);
    }
    let secrets = signing_secrets(&c);
    let mut after = RecordId(0);
    'pages: loop {
        let page = store::confirmed_records_after(&db.pool, connection, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.record_id;
        let held: Vec<(store::ConfirmedRecord, Held)> = stream::iter(page)
            .map(|r| {
                let secrets = &secrets;
                let url = &c.url;
                async move {
                    let id = format!("rb_{}_{}", r.record_id, crate::config::random_hex(8));
                    let h = relay.read_back(url, secrets, &id, &r.recipient_kind, r.recipient_id).await;
                    (r, h)
                }
            })
            .buffer_unordered(READS_IN_FLIGHT)
            .collect()
            .await;
        for (r, h) in held {
            let drifted = match h {
                Held::Content { generation, content } => {
                    read_back_item(db, r.record_id, true, Some(generation), Some(&content)).await?
                }
                Held::Nothing => read_back_item(db, r.record_id, false, None, None).await?,
                Held::Unknown(why) => {
                    run.stopped = Some(why);
                    break 'pages;
                }
            };
            run.checked += 1;
            run.drifted += drifted as usize;
        }
    }
    let words = match &run.stopped {
        Some(why) => format!("stopped after {} checked: {why}", run.checked),
        None => format!("{} checked, {} drifted", run.checked, run.drifted),
    };
    store::write_read_back_run(&db.pool, connection, &words).await?;
    if run.drifted > 0 {
        super::relay::ask_dispatch(db, connection).await?;
    }
    Ok(run)
}

/// readBackItem: what the remote said of one record, written through
/// `core.write_desired_state_read_back` (the address lock, then the record row, then the
/// projection), one statement that commits on its own; traced, in a transaction that names its
/// path first. True when the record drifted.
#[tracing::instrument(name = "readBackItem", skip(db, content), fields(record_id = %record))]
pub async fn read_back_item(
    db: &Db,
    record: RecordId,
    found: bool,
    generation: Option<i64>,
    content: Option<&serde_json::Value>,
) -> Result<bool, ServiceError> {
    if !trace::is_on() {
        return Ok(store::write_read_back(&db.pool, record, found, generation, content).await?);
    }
    tx::within_for(db, TxKind::Plain, &READ_BACK_ITEM_LOCKS, async |t: &mut tx::Tx| {
        Ok(store::write_read_back(t.conn(), record, found, generation, content).await?)
    })
    .await
}
