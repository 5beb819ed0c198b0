//! Sign-up, verification and password reset (issue 38) as acts: a pool of stress emails signs up
//! (new, then existing), their links are used and replaced while others use them, and the
//! sign-up type changes under the sign-ups.

use super::*;
use crate::services::{
    auth::NewPassword,
    organizations::OrgName,
    signup::{self, Links, SignUp},
    tokens::{Seed, TokenKey},
};
use crate::store::account_tokens::{self, TokenPurpose};

/// How many stress emails sign up: few enough that links of one account meet.
const EMAILS: usize = 40;

fn links() -> Links {
    Links {
        key: TokenKey::from_session_key(&[7; 64]),
        host: "stress.example.test".into(),
        verify: "http://stress.example.test/account/verify?token=".into(),
        reset: "http://stress.example.test/password/reset?token=".into(),
        sign_in: "http://stress.example.test/login".into(),
        forgot: "http://stress.example.test/password/forgot".into(),
    }
}

fn email(rng: &mut Rng) -> String {
    format!("stress-signup-{}@example.test", rng.below(EMAILS))
}

/// A client address of its own each time, so the per-address limit does not stop the run.
fn address(rng: &mut Rng) -> String {
    format!("198.18.{}.{}", rng.below(250), 1 + rng.below(250))
}

/// An operator marks one of the org types (of the first few) for sign-up.
pub(in crate::stress) async fn choose_signup_type(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let types = {
        let mut tx = ctx.db.read().await?;
        let t = crate::store::catalog::org_types(tx.conn()).await;
        tx.end(t.map_err(DbError::from)).await?
    };
    if types.is_empty() {
        return Ok(Outcome::Skipped);
    }
    let t = &types[rng.below(types.len().min(3))];
    note.detail = format!("type {}", t.org_type_id.0);
    grant_outcome(signup::choose_signup_type(&ctx.db, t.org_type_id).await, note)
}

/// One of the stress emails signs up: new the first time, existing (a notice) after.
pub(in crate::stress) async fn sign_up(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let e = email(rng);
    note.detail = e.clone();
    let s = SignUp {
        email: Email::parse(&e).map_err(Failure::Error)?,
        password: NewPassword::parse("stress password").map_err(Failure::Error)?,
        organization: OrgName::parse(&format!("Signed up {e}")).map_err(Failure::Error)?,
    };
    grant_outcome(signup::sign_up(&ctx.db, &links(), &address(rng), &s).await, note)
}

/// A stress account's id and address, when it signed up.
async fn account(ctx: &Ctx, e: &str) -> Result<Option<(crate::ids::AccountId, String)>, Failure> {
    let mut tx = ctx.db.read().await?;
    let a = crate::store::accounts::account_by_email(tx.conn(), e).await;
    Ok(tx.end(a.map_err(DbError::from)).await?.map(|a| (a.account_id, a.email)))
}

/// A new link of `purpose` for one of the stress accounts (as its mail would carry), kept.
async fn new_link(
    ctx: &Ctx,
    rng: &mut Rng,
    purpose: TokenPurpose,
    note: &mut Note,
) -> Result<Option<crate::services::tokens::Token>, Failure> {
    let e = email(rng);
    note.detail = e.clone();
    // An email that has not signed up yet signs up first, as its person would (refused while
    // no sign-up type is chosen: then there is no link to use).
    if account(ctx, &e).await?.is_none() {
        let s = SignUp {
            email: Email::parse(&e).map_err(Failure::Error)?,
            password: NewPassword::parse("stress password").map_err(Failure::Error)?,
            organization: OrgName::parse(&format!("Signed up {e}")).map_err(Failure::Error)?,
        };
        let mut first = Note { pool: None, detail: String::new(), taken: None };
        if let Outcome::Refused =
            grant_outcome(signup::sign_up(&ctx.db, &links(), &address(rng), &s).await, &mut first)?
        {
            note.detail.push_str(&format!("; its sign-up{}", first.detail));
        }
    }
    let Some((id, address)) = account(ctx, &e).await? else { return Ok(None) };
    let token = links().key.token(&Seed::new());
    let mut conn = ctx.db.pool.acquire().await.map_err(DbError::from)?;
    account_tokens::insert(&mut conn, id, purpose, &address, &token.hash(), std::time::Duration::from_secs(600))
        .await
        .map_err(DbError::from)?;
    Ok(Some(token))
}

/// A verification link of a stress account used, while others are used or replaced.
pub(in crate::stress) async fn use_email_token(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some(token) = new_link(ctx, rng, TokenPurpose::VerifyEmail, note).await? else { return Ok(Outcome::Skipped) };
    grant_outcome(signup::use_email_token(&ctx.db, &links(), &token).await, note)
}

/// A reset link of a stress account used: its sessions end, one starts.
pub(in crate::stress) async fn reset_password(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some(token) = new_link(ctx, rng, TokenPurpose::ResetPassword, note).await? else { return Ok(Outcome::Skipped) };
    let p = NewPassword::parse("stress password again").map_err(Failure::Error)?;
    grant_outcome(signup::reset_password(&ctx.db, &links(), &token, &p, &address(rng), None).await, note)
}

/// Forgot password for a stress email: the account's unused reset links retired, a new one.
pub(in crate::stress) async fn mail_account_link(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let e = email(rng);
    note.detail = e.clone();
    let parsed = Email::parse(&e).map_err(Failure::Error)?;
    grant_outcome(signup::forgot_password(&ctx.db, &links(), &parsed, &address(rng)).await, note)
}
