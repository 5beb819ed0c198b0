//! The account page's and the operators' account acts (issue 38): a few stress accounts of
//! their own change their passwords and ask for new addresses while the demo operator disables,
//! enables, promotes and demotes them, and fresh accounts are deleted. Their account rows meet
//! each other's in every order the paths allow; none touches an organization the other paths
//! use, except by the owner count a disable or deletion takes under the organization's row.

use super::*;

use crate::services::{
    account_settings::{self as settings, Mailing},
    auth::{NewPassword, Password},
    operator_accounts as ops,
    tokens::TokenKey,
};

const STRESS_PASSWORD: &str = "stress-account-password";

/// One of four stress accounts, made on first use.
async fn stress_account(ctx: &Ctx, rng: &mut Rng) -> Result<(crate::ids::AccountId, String), Failure> {
    let email = format!("stress-account-{}@example.test", rng.below(4));
    let existing = {
        let mut c = ctx.db.read().await?;
        crate::store::accounts::account_by_email(c.conn(), &email).await?
    };
    let id = match existing {
        Some(a) => a.account_id,
        None => {
            let e = Email::parse(&email).map_err(Failure::Error)?;
            let p = NewPassword::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
            auth::ensure_account(&ctx.db, &e, &p, false).await?
        }
    };
    Ok((id, email))
}

async fn demo_operator(ctx: &Ctx) -> Result<crate::ids::AccountId, Failure> {
    let mut c = ctx.db.read().await?;
    let a = crate::store::accounts::account_by_email(c.conn(), demo::OPERATOR_EMAIL).await?;
    a.map(|a| a.account_id).ok_or_else(|| Failure::Error("the demo operator is gone".into()))
}

/// A refusal (a disabled account, a changed one, a lock wait past its bound) is refused; a
/// deadlock or a database failure fails the path.
fn account_outcome<T>(r: Result<T, ServiceError>) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            ServiceError::Invalid(_)
            | ServiceError::Refused(_)
            | ServiceError::NotFound(_)
            | ServiceError::Db(DbError::LockNotAvailable),
        ) => Ok(Outcome::Refused),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}

/// A stress account sets its password again (the same one: the hash changes, the password not).
pub(in crate::stress) async fn change_password(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (id, email) = stress_account(ctx, rng).await?;
    note.detail = email;
    let current = Password::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
    let new = NewPassword::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
    account_outcome(settings::change_password(&ctx.db, id, &"0".repeat(64), &current, &new, None).await)
}

/// A stress account asks to move to one of a few new addresses.
pub(in crate::stress) async fn request_email_change(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let (id, email) = stress_account(ctx, rng).await?;
    let to = Email::parse(&format!("stress-new-{}@example.test", rng.below(3))).map_err(Failure::Error)?;
    note.detail = format!("{email} to {}", to.as_str());
    let keys = TokenKey::from_session_key(&[7; 64]);
    let mailing = Mailing { host: "stress.example.test".into(), base: "https://stress.example.test".into() };
    let password = Password::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
    let address = format!("203.0.113.{}", 1 + rng.below(3));
    account_outcome(settings::request_email_change(&ctx.db, &keys, id, &to, &password, Some(&mailing), &address).await)
}

/// A fresh account is made and deleted.
pub(in crate::stress) async fn delete_account(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let email = format!("stress-gone-{}-{}@example.test", rng.below(1_000_000), random_hex(4));
    note.detail = email.clone();
    let e = Email::parse(&email).map_err(Failure::Error)?;
    let p = NewPassword::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
    let id = auth::ensure_account(&ctx.db, &e, &p, false).await?;
    let password = Password::parse(STRESS_PASSWORD).map_err(Failure::Error)?;
    account_outcome(settings::delete_account(&ctx.db, id, &password).await)
}

/// The demo operator disables a stress account.
pub(in crate::stress) async fn disable_account(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (id, email) = stress_account(ctx, rng).await?;
    note.detail = email;
    let by = demo_operator(ctx).await?;
    account_outcome(ops::disable_account(&ctx.db, by, id).await)
}

/// The demo operator enables a stress account.
pub(in crate::stress) async fn enable_account(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (id, email) = stress_account(ctx, rng).await?;
    note.detail = email;
    let by = demo_operator(ctx).await?;
    account_outcome(ops::enable_account(&ctx.db, by, id).await)
}

/// The demo operator makes a stress account an operator, or not.
pub(in crate::stress) async fn change_operator(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (id, email) = stress_account(ctx, rng).await?;
    let operator = rng.below(2) == 0;
    note.detail = format!("{email} {}", if operator { "made an operator" } else { "no longer one" });
    let by = demo_operator(ctx).await?;
    account_outcome(ops::set_operator(&ctx.db, by, id, operator).await)
}
