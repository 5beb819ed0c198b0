//! The acts: each path of `paths` as the tasks run it, by area. An act picks what to act on,
//! calls the service path, and says whether it was done, refused or skipped.

use super::*;

mod on_account_page;
mod on_billing;
mod on_desired_state;
mod on_entitlements;
mod on_grants;
mod on_members;
mod on_plan_acts;
mod on_rule_changes;
mod on_sign_in;
mod on_signup;
mod on_site_upkeep;
mod on_sites;

pub(super) use on_account_page::*;
pub(super) use on_billing::*;
pub(super) use on_desired_state::*;
pub(super) use on_entitlements::*;
pub(super) use on_grants::*;
pub(super) use on_members::*;
pub(super) use on_plan_acts::*;
pub(super) use on_rule_changes::*;
pub(super) use on_sign_in::*;
pub(super) use on_signup::*;
pub(super) use on_site_upkeep::*;
pub(super) use on_sites::*;

/// A drain's answer: what it did (said on the note) and whether that was anything. Done when it
/// was; refused when there was nothing to do (`idle` says so) or a lock wait passed its bound;
/// any other database error fails the path.
fn drain_outcome(r: Result<(String, bool), DbError>, idle: &str, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok((did, any)) => {
            note.detail.push_str(&did);
            if any {
                Ok(Outcome::Done)
            } else {
                note.detail.push_str(idle);
                Ok(Outcome::Refused)
            }
        }
        Err(DbError::LockNotAvailable) => {
            note.detail.push_str("; refused: a lock wait timed out");
            Ok(Outcome::Refused)
        }
        Err(e) => Err(e.into()),
    }
}
