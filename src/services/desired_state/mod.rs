//! The desired-state relay (spec "Desired-state relay", rule 7; docs/desired-state.md): the
//! operators' connections, the relay that turns notices into records under the address lock, the
//! per-connection dispatch that pushes them, signed, and writes each answer back under the address
//! lock, and read-back. The relay never takes the rendezvous and never locks a source row.

pub mod connections;
pub mod dispatch;
pub mod read_back;
pub mod relay;

use std::sync::Arc;

use crate::{
    ids::ConnectionId,
    integrations::desired_state::Relay,
    jobs::{Job, JobContext, JobError, remote_failure},
};

pub use connections::{ConnectionPage, ConnectionSummary, NewConnection};
pub use dispatch::{DISPATCH_LOCKS, Dispatched, WRITE_PUSH_ANSWER_LOCKS, dispatch_connection};
pub use read_back::{READ_BACK_ITEM_LOCKS, ReadBackRun, read_back_connection};
pub use relay::{
    Ask, CLAIM_NOTICES_LOCKS, RECOMPUTE_ADDRESS_LOCKS, RelayPass, process_desired_state_outbox, recompute_address,
};

/// The relay's pass: a schedule (the queue keeps one pending or running, so passes never overlap
/// on one database; several would still be safe, each claiming other notices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessDesiredStateOutbox {}

impl Job for ProcessDesiredStateOutbox {
    const KIND: &'static str = "process_desired_state_outbox";
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        process_desired_state_outbox(&job.db, relay::PASS_BUDGET).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// One connection's dispatch: one open per connection (its dedupe key), so a slow or dead
/// endpoint holds up only its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DispatchDesiredState {
    pub connection_id: ConnectionId,
}

impl Job for DispatchDesiredState {
    const KIND: &'static str = "dispatch_desired_state";
    type Context = Arc<Relay>;

    fn dedupe_key(&self) -> Option<String> {
        Some(format!("desired-state-dispatch:{}", self.connection_id))
    }

    async fn run(&self, relay: &Arc<Relay>, job: &JobContext) -> Result<(), JobError> {
        dispatch_connection(&job.db, relay, self.connection_id, dispatch::DISPATCH_BUDGET)
            .await
            .map_err(remote_failure)?;
        Ok(())
    }
}

/// One connection's read-back run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadBackDesiredState {
    pub connection_id: ConnectionId,
}

impl Job for ReadBackDesiredState {
    const KIND: &'static str = "read_back_desired_state";
    type Context = Arc<Relay>;

    fn dedupe_key(&self) -> Option<String> {
        Some(format!("desired-state-read-back:{}", self.connection_id))
    }

    async fn run(&self, relay: &Arc<Relay>, job: &JobContext) -> Result<(), JobError> {
        read_back_connection(&job.db, relay, self.connection_id).await.map_err(remote_failure)?;
        Ok(())
    }
}

/// The schedule that asks every connection with read-back on to check what its remote holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleReadBacks {}

impl Job for ScheduleReadBacks {
    const KIND: &'static str = "schedule_desired_state_read_backs";
    type Context = ();

    async fn run(&self, _: &(), job: &JobContext) -> Result<(), JobError> {
        connections::schedule_read_backs(&job.db).await.map_err(remote_failure)?;
        Ok(())
    }
}
