//! Sign-in, the organization counts' compaction and the overview's samples: paths on rows of
//! their own, as acts.

use super::*;

/// The demo member signs in, with the right password one time in two, from one of four
/// addresses: a failure is a refusal, a throttled attempt too.
pub(in crate::stress) async fn sign_in(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let email = Email::parse(demo::MEMBER_EMAIL).map_err(|e| Failure::Error(e.to_string()))?;
    let right = rng.below(2) == 0;
    let address = format!("192.0.2.{}", 1 + rng.below(4));
    note.detail = format!("from {address}, {} password", if right { "the right" } else { "a wrong" });
    let password = if right { demo::MEMBER_PASSWORD } else { "not the password" };
    match auth::sign_in(&ctx.db, &email, password, &address, None).await {
        Ok(_) => Ok(Outcome::Done),
        Err(AuthError::InvalidCredentials | AuthError::Throttled { .. } | AuthError::Disabled) => Ok(Outcome::Refused),
        Err(AuthError::Db(e)) => Err(e.into()),
    }
}

/// A mail send reserved for one of three emails from one of three addresses: the address's and
/// the email's rows, taken by one upsert in key order, meet other reservations' in both orders of
/// their keys. Over a limit is a refusal.
pub(in crate::stress) async fn reserve_mail_send(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let address = format!("198.51.100.{}", 1 + rng.below(3));
    let email = format!("stress-{}@example.test", rng.below(3));
    note.detail = format!("{email} from {address}");
    match crate::services::mail_limits::reserve_send(&ctx.db, &address, &email).await? {
        true => Ok(Outcome::Done),
        false => Ok(Outcome::Refused),
    }
}

pub(in crate::stress) async fn compact_counts(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let folded = org_svc::compact_counts(&ctx.db).await?;
    note.detail = format!("{folded} rows folded");
    Ok(Outcome::Done)
}

/// One of three servers samples one of the last three minutes (their shared rows meet).
pub(in crate::stress) async fn sample_minute(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let source = format!("stress-server-{}", rng.below(3));
    let at = chrono::Utc::now() - chrono::TimeDelta::minutes(rng.below(3) as i64);
    let requests = rng.below(100);
    note.detail = format!("{source}, {requests} requests at {}", at.format("%H:%M"));
    crate::services::observability::sample_minute(&ctx.db, &source, requests as u64, at).await?;
    Ok(Outcome::Done)
}
