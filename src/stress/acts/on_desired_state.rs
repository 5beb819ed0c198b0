//! The desired-state relay's paths, as acts, beside the workers' own passes and dispatches: a
//! relay pass, a recompute of one shared organization's address, a connection's dispatch, a
//! read-back, and an operator's edit (the keys changed, Retry, Send a test). The run's two
//! connections go to receivers of its own; one answers slowly. No act fails on purpose: a push
//! that fails is kept on its record (the invariants check the end state), a database error is a
//! failure.

use super::*;

use crate::services::desired_state::{self as ds, connections};

/// The relay's refusals are none (a missing connection is a bug here): anything but the
/// database's lock bound is a failure.
fn relay_outcome<T: std::fmt::Debug>(r: Result<T, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(v) => {
            note.detail.push_str(&format!("; {v:?}"));
            Ok(Outcome::Done)
        }
        Err(ServiceError::Db(DbError::LockNotAvailable)) => Ok(Outcome::Refused),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}

fn some_connection(ctx: &Ctx, rng: &mut Rng) -> crate::ids::ConnectionId {
    ctx.connections[rng.below(ctx.connections.len())]
}

/// ProcessDesiredStateOutbox for a second at most.
pub(in crate::stress) async fn relay_pass(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    note.detail = "a relay pass".into();
    let r = ds::process_desired_state_outbox(&ctx.db, Duration::from_secs(1)).await;
    relay_outcome(r, note)
}

/// recomputeAddress of a shared organization at one connection (sometimes as Retry or a new URL
/// asks).
pub(in crate::stress) async fn recompute_address(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let (org, pool) = ctx.fx.hot[rng.below(ctx.fx.hot.len())];
    let c = some_connection(ctx, rng);
    let ask = match rng.below(8) {
        0 | 1 => ds::Ask::Retry,
        2 => ds::Ask::Resend,
        _ => ds::Ask::Notice,
    };
    note.pool = Some(pool.0);
    note.detail = format!("recompute organization {org} at connection {c} (asked as {ask:?})");
    let r = ds::recompute_address(&ctx.db, c, org.0, ask).await.map_err(ServiceError::from);
    relay_outcome(r, note)
}

/// StampDesiredStateRecordsDispatched, the pushes and writePushAnswer, for a second at most.
pub(in crate::stress) async fn dispatch(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let c = some_connection(ctx, rng);
    note.detail = format!("dispatch connection {c}");
    let r = ds::dispatch_connection(&ctx.db, &ctx.relay, c, Duration::from_secs(1)).await;
    relay_outcome(r, note)
}

/// readBackItem over a connection's confirmed records.
pub(in crate::stress) async fn read_back(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let c = some_connection(ctx, rng);
    note.detail = format!("read back connection {c}");
    let r = ds::read_back_connection(&ctx.db, &ctx.relay, c).await;
    relay_outcome(r, note)
}

/// An operator's act on a connection: its keys changed (custom domains in or out), Retry, or
/// Send a test.
pub(in crate::stress) async fn edit_connection(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let c = some_connection(ctx, rng);
    let r = match rng.below(3) {
        0 => {
            let row = crate::store::desired_state::connection(&ctx.db.pool, c)
                .await
                .map_err(|e| Failure::Error(format!("reading connection {c}: {e}")))?
                .ok_or_else(|| Failure::Error(format!("connection {c} is gone")))?;
            let mut keys = row.resource_keys.clone();
            if let Some(i) = keys.iter().position(|k| k == "fedwiki.custom_domain") {
                keys.remove(i);
            } else {
                keys.push("fedwiki.custom_domain".into());
            }
            note.detail = format!("connection {c}: keys {}", keys.join(", "));
            match connections::NewConnection::parse(&row.name, &row.url, &keys.join(", "), row.read_back) {
                Ok(form) => connections::update_connection(&ctx.db, c, &form).await,
                Err(e) => Err(e),
            }
        }
        1 => {
            note.detail = format!("connection {c}: Retry");
            connections::retry_connection(&ctx.db, c).await
        }
        _ => {
            note.detail = format!("connection {c}: Send a test");
            connections::send_test(&ctx.db, c).await
        }
    };
    relay_outcome(r, note)
}
