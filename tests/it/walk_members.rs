//! Row-level walks (issue 36's rule) of issue 38's members paths: changing an organization's
//! members (the organization's row FOR NO KEY UPDATE, then the membership row), and the
//! invitation's own row for a renewal, a resend, a revoke and an accept. Each runs the service
//! function paused after each lock it takes, asserts what it holds and that a probe waits on it
//! for that very row; the members path's walk also shows that an invitation's insert and an
//! accept's membership insert (FOR KEY SHARE through their foreign keys) do not wait on the
//! organization's row, while a second role change does.

use std::time::Duration;

use member_console::{
    demo,
    ids::{AccountId, OrganizationId},
    services::{
        invitations::{
            self, ACCEPT_INVITATION_LOCKS, Acceptor, INVITE_LOCKS, Invite, Inviter, RESEND_INVITATION_LOCKS,
            REVOKE_INVITATION_LOCKS,
        },
        members::{self, CHANGE_MEMBERSHIP_LOCKS, MembershipChange, Role},
    },
};

use crate::common::{
    TestDb,
    locks::{Expect, LockWalk, RowMode, assert_waits},
    pages::{account_id, demo_db, organization_id},
    wait_for_waiter,
};
use crate::members::{link_to, mail, token_of, tokens};

async fn acme(t: &TestDb) -> OrganizationId {
    OrganizationId(organization_id(t, demo::DEMO_ORGANIZATION).await)
}

async fn owner(t: &TestDb) -> AccountId {
    AccountId(account_id(t, demo::MEMBER_EMAIL).await)
}

fn org_row(org: OrganizationId) -> Expect {
    Expect::row_in("core.organizations", org, RowMode::NoKeyUpdate)
}

fn membership(org: OrganizationId, account: AccountId, mode: RowMode) -> Expect {
    Expect::row_in("core.organization_members", format!("{org},{account}"), mode)
}

/// A second owner of Acme Wikis (an invitation accepted with a new password).
async fn second_owner(t: &TestDb, who: &str) -> AccountId {
    let org = acme(t).await;
    let i = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse(who).unwrap(),
        role: Role::Owner,
    };
    invitations::invite(&t.db, &tokens(), Inviter::Owner(owner(t).await), &i, &mail()).await.unwrap();
    let hash = member_console::services::auth::hash_password("walk-password".into()).await;
    let who = Acceptor::NewAccount { password_hash: hash, address: "192.0.2.60", previous: None };
    match invitations::accept(&t.db, &token_of(&link_to(t, i.email.as_str()).await), who).await.unwrap() {
        invitations::Accepted::NewAccount { account_id, .. } => account_id,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_role_change_walked_lock_by_lock_takes_the_organization_row_then_the_membership_row() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let other = second_owner(&t, "walk@example.test").await;
    let out = LockWalk::run(
        &t,
        &CHANGE_MEMBERSHIP_LOCKS,
        // A role is no key column: the membership row's UPDATE is FOR NO KEY UPDATE.
        &[org_row(org), membership(org, other, RowMode::NoKeyUpdate)],
        move |db| async move {
            members::change_membership(&db, me, org, MembershipChange::SetRole { account: other, role: Role::Member })
                .await
        },
    )
    .await;
    assert!(out.is_ok(), "{out:?}");
    let role: String = t
        .one(sqlx::query_scalar("SELECT role FROM core.organization_members WHERE account_id = $1").bind(other.0))
        .await;
    assert_eq!(role, "member");
}

#[tokio::test]
async fn a_removal_walked_lock_by_lock_takes_the_organization_row_then_deletes_the_membership_row() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let other = second_owner(&t, "gone@example.test").await;
    let out =
        LockWalk::run(
            &t,
            &CHANGE_MEMBERSHIP_LOCKS,
            &[org_row(org), membership(org, other, RowMode::Update)],
            move |db| async move {
                members::change_membership(&db, me, org, MembershipChange::Remove { account: other }).await
            },
        )
        .await;
    assert!(out.is_ok(), "{out:?}");
    let left: i64 = t
        .one(sqlx::query_scalar("SELECT count(*) FROM core.organization_members WHERE account_id = $1").bind(other.0))
        .await;
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_the_organization_row_an_invitation_and_an_accept_go_on_while_a_second_role_change_waits_on_that_row() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let other = second_owner(&t, "hold@example.test").await;
    // A pending invitation to accept while the row is held.
    let i = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse("late@example.test").unwrap(),
        role: Role::Member,
    };
    invitations::invite(&t.db, &tokens(), Inviter::Owner(me), &i, &mail()).await.unwrap();
    let late = token_of(&link_to(&t, "late@example.test").await);

    let mut walk = LockWalk::start(&t, &CHANGE_MEMBERSHIP_LOCKS, 2, move |db| async move {
        members::change_membership(&db, me, org, MembershipChange::SetRole { account: other, role: Role::Member }).await
    })
    .await;
    walk.assert_holds_exactly(&[org_row(org)]).await;

    // An invitation's insert references the organization: FOR KEY SHARE, no wait.
    let j = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse("new@example.test").unwrap(),
        role: Role::Member,
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        invitations::invite(&t.db, &tokens(), Inviter::Owner(me), &j, &mail()),
    )
    .await
    .expect("an invitation does not wait on the organization's row")
    .unwrap();
    // An accept inserts a membership of the organization: no wait either.
    let hash = member_console::services::auth::hash_password("late-password".into()).await;
    let who = Acceptor::NewAccount { password_hash: hash, address: "192.0.2.61", previous: None };
    tokio::time::timeout(Duration::from_secs(10), invitations::accept(&t.db, &late, who))
        .await
        .expect("an accept does not wait on the organization's row")
        .unwrap();

    // A second role change in the same organization waits on that very row.
    let db = t.db.clone();
    let second = tokio::spawn(async move {
        members::change_membership(&db, me, org, MembershipChange::SetRole { account: other, role: Role::Owner }).await
    });
    let waiter = wait_for_waiter(&t.admin, &t.name, walk.paused_pid()).await;
    assert_waits(&t.admin, waiter, walk.paused_pid(), &org_row(org)).await;
    assert!(walk.finish().await.is_ok());
    tokio::time::timeout(Duration::from_secs(30), second).await.unwrap().unwrap().unwrap();
    let role: String = t
        .one(sqlx::query_scalar("SELECT role FROM core.organization_members WHERE account_id = $1").bind(other.0))
        .await;
    assert_eq!(role, "owner", "the second change ran after the first, on what it left");
}

#[tokio::test]
async fn an_invitation_renewed_walked_lock_by_lock_takes_its_row_once() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let i = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse("again@example.test").unwrap(),
        role: Role::Member,
    };
    let first = invitations::invite(&t.db, &tokens(), Inviter::Owner(me), &i, &mail()).await.unwrap();
    let out = LockWalk::run(
        &t,
        &INVITE_LOCKS,
        &[Expect::row("core.invitations", first.invitation_id)],
        move |db| async move { invitations::invite(&db, &tokens(), Inviter::Owner(me), &i, &mail()).await },
    )
    .await;
    assert_eq!(out.unwrap(), invitations::Invited { invitation_id: first.invitation_id, renewed: true });
}

#[tokio::test]
async fn a_resend_a_revoke_and_an_accept_walked_lock_by_lock_each_take_the_invitations_row() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let i = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse("walked@example.test").unwrap(),
        role: Role::Member,
    };
    let id = invitations::invite(&t.db, &tokens(), Inviter::Owner(me), &i, &mail()).await.unwrap().invitation_id;
    let row = Expect::row("core.invitations", id);
    let out = LockWalk::run(&t, &RESEND_INVITATION_LOCKS, std::slice::from_ref(&row), move |db| async move {
        invitations::resend(&db, &tokens(), Inviter::Owner(me), org, id, &mail()).await
    })
    .await;
    assert!(out.is_ok(), "{out:?}");
    let token = token_of(&link_to(&t, "walked@example.test").await);
    let hash = member_console::services::auth::hash_password("walked-password".into()).await;
    let out = LockWalk::run(&t, &ACCEPT_INVITATION_LOCKS, std::slice::from_ref(&row), move |db| async move {
        let who = Acceptor::NewAccount { password_hash: hash, address: "192.0.2.62", previous: None };
        invitations::accept(&db, &token, who).await
    })
    .await;
    assert!(out.is_ok(), "{out:?}");

    // A signed-in account accepts: its row next, FOR NO KEY UPDATE (its email read as it stands,
    // and marked verified).
    let colleague = second_owner(&t, "signed-in@example.test").await;
    let k = Invite {
        organization_id: OrganizationId(organization_id(&t, "Initech").await),
        email: member_console::services::auth::Email::parse("signed-in@example.test").unwrap(),
        role: Role::Member,
    };
    let operator = Inviter::Operator(AccountId(account_id(&t, demo::OPERATOR_EMAIL).await));
    let id = invitations::invite(&t.db, &tokens(), operator, &k, &mail()).await.unwrap().invitation_id;
    let token = token_of(&link_to(&t, "signed-in@example.test").await);
    let expected =
        [Expect::row("core.invitations", id), Expect::row_in("core.accounts", colleague.0, RowMode::NoKeyUpdate)];
    let out = LockWalk::run(&t, &ACCEPT_INVITATION_LOCKS, &expected, move |db| async move {
        invitations::accept(&db, &token, Acceptor::SignedIn { account_id: colleague }).await
    })
    .await;
    assert!(out.is_ok(), "{out:?}");

    let j = Invite {
        organization_id: org,
        email: member_console::services::auth::Email::parse("revoked@example.test").unwrap(),
        role: Role::Owner,
    };
    let id = invitations::invite(&t.db, &tokens(), Inviter::Owner(me), &j, &mail()).await.unwrap().invitation_id;
    let out =
        LockWalk::run(&t, &REVOKE_INVITATION_LOCKS, &[Expect::row("core.invitations", id)], move |db| async move {
            invitations::revoke(&db, Inviter::Owner(me), org, id).await
        })
        .await;
    assert!(out.is_ok(), "{out:?}");
    let revoked: bool = t
        .one(
            sqlx::query_scalar("SELECT revoked_at IS NOT NULL FROM core.invitations WHERE invitation_id = $1")
                .bind(id.0),
        )
        .await;
    assert!(revoked);
}
