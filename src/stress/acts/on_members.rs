//! Issue 38, members: owners of one organization change each other's roles, remove each other
//! and leave, on the organization's row (FOR NO KEY UPDATE), while others join it by accepting
//! an invitation (its row, then the membership's insert, which never waits on the organization's
//! row). The organization must keep an owner throughout: the fixture's invariant checks it.

use super::*;
use crate::ids::AccountId;
use crate::services::{
    invitations::{self, AcceptError, Acceptor},
    members::{self, MembershipChange, Role},
    tokens::{Seed, TokenKey},
};

/// The members fixture's organization's name, and its people.
pub(in crate::stress) const MEMBERS_ORG: &str = "Stress members";
pub(in crate::stress) const MEMBERS: usize = 4;

fn member_email(n: usize) -> String {
    format!("stress-member-{n}@example.test")
}

/// The organization the members acts share and its four accounts: the first two its owners at
/// the start, the other two to join by invitation.
pub(in crate::stress) async fn members_fixture(
    db: &Db,
) -> anyhow::Result<(OrganizationId, Vec<crate::ids::AccountId>)> {
    let name = crate::services::organizations::OrgName::parse(MEMBERS_ORG).map_err(anyhow::Error::msg)?;
    let org = org_svc::create_organization(db, &name, None).await?.organization_id;
    let mut conn = db.pool.acquire().await?;
    let mut people = vec![];
    for n in 0..MEMBERS {
        // Nobody signs in as them: a hash that matches no password.
        let id = crate::store::accounts::upsert_account(&mut conn, &member_email(n), "!", false).await?;
        if n < 2 {
            crate::store::accounts::ensure_membership(&mut conn, org, id, "owner").await?;
        }
        people.push(id);
    }
    Ok((org, people))
}

/// One member acts on another (or on themself): a role given, a removal, or leaving. Refused
/// when the actor is no owner (any more), the target no member, or no active owner would be left.
pub(in crate::stress) async fn change_members(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let (org, people) = &ctx.members;
    // Mostly an owner acting on a member, as the pages offer; now and then anyone on anyone.
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT account_id, role FROM core.organization_members WHERE organization_id = $1")
            .bind(org.0)
            .fetch_all(&ctx.admin)
            .await?;
    let owners: Vec<AccountId> = rows.iter().filter(|(_, r)| r == "owner").map(|(a, _)| AccountId(*a)).collect();
    let inside: Vec<AccountId> = rows.iter().map(|(a, _)| AccountId(*a)).collect();
    let any = |rng: &mut Rng| people[rng.below(people.len())];
    let by = if owners.is_empty() || rng.below(5) == 0 { any(rng) } else { owners[rng.below(owners.len())] };
    let target = if inside.is_empty() || rng.below(5) == 0 { any(rng) } else { inside[rng.below(inside.len())] };
    let change = match rng.below(3) {
        0 => {
            let role = if rng.below(2) == 0 { Role::Owner } else { Role::Member };
            MembershipChange::SetRole { account: target, role }
        }
        1 => MembershipChange::Remove { account: target },
        _ => MembershipChange::Leave,
    };
    note.detail = format!("{by} in organization {org}: {change:?}");
    grant_outcome(members::change_membership(&ctx.db, by, *org, change).await, note)
}

/// One of the people joins again: an invitation is put in place for them (as the invite path
/// renews one, but without its mail), and accepted signed in as them, at times twice at once.
pub(in crate::stress) async fn accept_invitation(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let (org, people) = &ctx.members;
    // One who is not a member now, when there is one (a member's accept is refused).
    let members: Vec<i64> =
        sqlx::query_scalar("SELECT account_id FROM core.organization_members WHERE organization_id = $1")
            .bind(org.0)
            .fetch_all(&ctx.admin)
            .await?;
    let outside: Vec<usize> = (0..people.len()).filter(|n| !members.contains(&people[*n].0)).collect();
    let n = if outside.is_empty() { rng.below(people.len()) } else { outside[rng.below(outside.len())] };
    let (account_id, email) = (people[n], member_email(n));
    let role = if rng.below(2) == 0 { Role::Owner } else { Role::Member };
    let key = TokenKey::from_session_key(b"stress: invitations");
    let seed = Seed::new();
    let token = key.token(&seed);
    {
        let mut conn = ctx.db.pool.acquire().await.map_err(DbError::from)?;
        crate::store::invitations::upsert_pending(
            &mut conn,
            *org,
            &email,
            role.as_str(),
            None,
            &token.hash(),
            invitations::VALID_FOR,
        )
        .await?;
    }
    note.detail = format!("{email} into organization {org} as {}", role.as_str());
    let twice = rng.below(4) == 0;
    let accept = || invitations::accept(&ctx.db, &token, Acceptor::SignedIn { account_id });
    let outcomes = if twice {
        let (a, b) = tokio::join!(accept(), accept());
        vec![a, b]
    } else {
        vec![accept().await]
    };
    let mut done = false;
    for r in outcomes {
        match r {
            Ok(_) => done = true,
            Err(AcceptError::Link(p)) => note.detail.push_str(&format!("; refused: {}", p.words())),
            Err(AcceptError::Service(e)) => {
                if let Outcome::Done = grant_outcome(Err::<(), _>(e), note)? {
                    done = true;
                }
            }
        }
    }
    Ok(if done { Outcome::Done } else { Outcome::Refused })
}
