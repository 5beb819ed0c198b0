//! The members of an organization: their roles, their removal, and leaving. An organization
//! always keeps at least one owner whose account is neither disabled nor deleted, even when two
//! owners demote or remove each other at the same moment: every change that could take an
//! owner away is decided under the organization's row (docs/database-locks.md, "Change an
//! organization's members").

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        trace,
        tx::within_for,
    },
    ids::{AccountId, OrganizationId},
    services::ServiceError,
    store::{
        account_events::{self, AccountEventKind},
        invitations::{self, Pending},
        members::{self as store, Member},
    },
};

/// A member's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Owner,
    Member,
}

impl Role {
    pub fn parse(s: &str) -> Result<Role, String> {
        match s.trim() {
            "owner" => Ok(Role::Owner),
            "member" => Ok(Role::Member),
            _ => Err("Choose owner or member.".into()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
        }
    }
}

/// What is done to a membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipChange {
    /// An owner gives `account` this role.
    SetRole { account: AccountId, role: Role },
    /// An owner removes `account`.
    Remove { account: AccountId },
    /// The one who asks leaves.
    Leave,
}

pub static CHANGE_MEMBERSHIP_LOCKS: PathLocks = PathLocks {
    path: "Change an organization's members",
    function: "services::members::change_membership",
    kind: "Plain",
    locks: &[Lock::OrganizationRow, Lock::MembershipRows],
    why: "A role change, a removal and a leave each take the organization's row FOR NO KEY UPDATE \
          first, then read who asks and count the owners left (accounts neither disabled nor \
          deleted) under it, then update or delete the one membership row. Two owners demoting \
          each other queue on the organization's row, so the second sees the first's change and \
          is refused. NO KEY: the inserts that reference the organization (memberships, \
          invitations, sites) take FOR KEY SHARE through their foreign keys and never wait on it.",
};

/// Change a membership of `organization_id`, asked by `by`: an owner sets a role or removes a
/// member; any member leaves. Refused in words when `by` may not, or when no active owner
/// would be left. Who asks and the owners are read under the organization's row.
#[tracing::instrument(name = "Change an organization's members", skip(db), fields(organization_id = %organization_id, by = %by))]
pub async fn change_membership(
    db: &Db,
    by: AccountId,
    organization_id: OrganizationId,
    change: MembershipChange,
) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &CHANGE_MEMBERSHIP_LOCKS, async |tx: &mut Tx| {
        let Some(name) = store::lock_organization(tx.conn(), organization_id).await? else {
            return Err(ServiceError::NotFound("organization"));
        };
        trace::note(tx.conn(), Lock::OrganizationRow, organization_id, Some(organization_id.0)).await?;
        // Not a member: nothing of the organization is shown.
        let Some(by_role) = store::role_of(tx.conn(), organization_id, by).await? else {
            return Err(ServiceError::NotFound("organization"));
        };
        let target = match change {
            MembershipChange::SetRole { account, .. } | MembershipChange::Remove { account } => {
                if by_role != "owner" {
                    return Err(ServiceError::Refused(format!(
                        "Only an owner of {name} can change its members. Ask an owner to do it."
                    )));
                }
                account
            }
            MembershipChange::Leave => by,
        };
        let Some(target_role) = store::role_of(tx.conn(), organization_id, target).await? else {
            return Err(ServiceError::Refused(format!("That person is not a member of {name} (any more).")));
        };
        let loses_owner =
            target_role == "owner" && !matches!(change, MembershipChange::SetRole { role: Role::Owner, .. });
        if loses_owner && store::active_owners_besides(tx.conn(), organization_id, target).await? == 0 {
            return Err(ServiceError::Refused(last_owner_words(&name, change, target == by)));
        }
        let (kind, detail) = match change {
            MembershipChange::SetRole { role, .. } => {
                store::set_role(tx.conn(), organization_id, target, role.as_str()).await?;
                (AccountEventKind::RoleChanged, format!("{target_role} → {}", role.as_str()))
            }
            MembershipChange::Remove { .. } => {
                store::delete_membership(tx.conn(), organization_id, target).await?;
                (AccountEventKind::RemovedFromOrganization, format!("was {target_role}"))
            }
            MembershipChange::Leave => {
                store::delete_membership(tx.conn(), organization_id, target).await?;
                (AccountEventKind::LeftOrganization, format!("was {target_role}"))
            }
        };
        trace::note(tx.conn(), Lock::MembershipRows, format!("{organization_id},{target}"), None).await?;
        account_events::record(tx.conn(), target, Some(by), kind, Some(organization_id), &detail).await?;
        Ok(())
    })
    .await
}

/// Why the last owner cannot go, and what to do first.
fn last_owner_words(name: &str, change: MembershipChange, self_: bool) -> String {
    let act = match change {
        MembershipChange::SetRole { .. } if self_ => "step down to member",
        MembershipChange::SetRole { .. } => "be made a member",
        MembershipChange::Remove { .. } => "be removed",
        MembershipChange::Leave => "leave",
    };
    let (who, they) = if self_ { ("You are", "you") } else { ("This member is", "they") };
    format!(
        "{who} the last owner of {name} who can act, so {they} cannot {act}: an organization keeps at least one \
         owner. Make another member an owner first (or invite one), then try again."
    )
}

/// The members page of an organization: its members and pending invitations.
#[derive(Debug, Clone)]
pub struct MembersPage {
    pub organization_id: OrganizationId,
    pub name: String,
    pub members: Vec<Member>,
    pub pending: Vec<Pending>,
}

/// Who may see an organization's members page.
#[derive(Debug)]
pub enum MembersView {
    /// An owner: the page.
    Owner(MembersPage),
    /// A member who is not an owner: the organization's name (they may leave it).
    NotOwner { name: String },
}

/// The members page as `who` may see it: not a member is "no such organization".
#[tracing::instrument(name = "Read an organization's members", skip(db), fields(organization_id = %organization_id, who = %who))]
pub async fn members_page(
    db: &Db,
    who: AccountId,
    organization_id: OrganizationId,
) -> Result<MembersView, ServiceError> {
    let mut read = db.read().await?;
    let role =
        store::role_of(read.conn(), organization_id, who).await?.ok_or(ServiceError::NotFound("organization"))?;
    let name =
        store::organization_name(read.conn(), organization_id).await?.ok_or(ServiceError::NotFound("organization"))?;
    if role != "owner" {
        return Ok(MembersView::NotOwner { name });
    }
    Ok(MembersView::Owner(MembersPage {
        organization_id,
        name,
        members: store::members_of(read.conn(), organization_id).await?,
        pending: invitations::pending_of(read.conn(), organization_id).await?,
    }))
}

/// The members and pending invitations of any organization, for an operator's page.
#[tracing::instrument(name = "Read an organization's invitations", skip(db), fields(organization_id = %organization_id))]
pub async fn pending_invitations(db: &Db, organization_id: OrganizationId) -> Result<Vec<Pending>, ServiceError> {
    let mut read = db.read().await?;
    Ok(invitations::pending_of(read.conn(), organization_id).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_is_owner_or_member_and_nothing_else() {
        assert_eq!(Role::parse(" owner "), Ok(Role::Owner));
        assert_eq!(Role::parse("member"), Ok(Role::Member));
        assert!(Role::parse("admin").is_err());
        assert!(Role::parse("").is_err());
    }

    #[test]
    fn the_last_owners_refusal_says_what_to_do_first() {
        let w = last_owner_words("Acme", MembershipChange::Leave, true);
        assert!(
            w.contains("You are the last owner of Acme") && w.contains("Make another member an owner first"),
            "{w}"
        );
        let w = last_owner_words("Acme", MembershipChange::Remove { account: AccountId(2) }, false);
        assert!(w.contains("This member is the last owner") && w.contains("cannot be removed"), "{w}");
    }
}
