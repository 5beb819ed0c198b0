//! Issue 38, members: invitations (invite, resend, revoke, accept by a new person or a signed-in
//! account) and an organization's members (roles, removal, leaving), through the services and
//! the pages; the two races the issue names (two owners demoting each other, two accepts of one
//! link), each with one side paused after its lock.

use std::time::Duration;

use member_console::{
    demo,
    ids::{AccountId, InvitationId, OrganizationId},
    services::{
        ServiceError,
        auth::{Email, hash_password},
        invitations::{
            self, ACCEPT_INVITATION_LOCKS, AcceptError, Accepted, Acceptor, Invite, InviteMail, Inviter, LinkProblem,
        },
        mail::SendMail,
        members::{self, CHANGE_MEMBERSHIP_LOCKS, MembershipChange, Role},
        tokens::{Token, TokenKey},
    },
};
use reqwest::StatusCode;

use crate::common::{
    TestApp, TestDb,
    locks::{Expect, LockWalk, RowMode, assert_waits},
    pages::{Session, account_id, demo_db, organization_id},
    wait_for_waiter,
};

/// The session key the mailing console below runs with: its links' tokens are derived under it.
pub const SESSION_KEY: [u8; 64] = [0xab; 64];

pub fn tokens() -> TokenKey {
    TokenKey::from_session_key(&SESSION_KEY)
}

pub fn mail() -> InviteMail {
    InviteMail {
        host: "console.example.test".into(),
        accept_prefix: "http://console.example.test/invitations/accept?token=".into(),
        address: "192.0.2.50".into(),
    }
}

/// A running console that sends mail (its jobs are enqueued; no worker runs here), with the
/// session key above.
pub async fn mailing_app(t: &TestDb) -> TestApp {
    let dir = std::env::temp_dir().join(format!("mc-test-{}", t.name));
    let key: String = SESSION_KEY.iter().map(|b| format!("{b:02x}")).collect();
    let config = member_console::config::Config::from_lookup(|k| match k {
        "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
        "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
        "CONSOLE_RUNTIME_DB_PASSWORD" => Some(crate::common::TEST_RUNTIME_PASSWORD.into()),
        "CONSOLE_SESSION_KEY" => Some(key.clone()),
        _ => None,
    })
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let connected = member_console::web::Connected { stripe: None, farm: None, mail: true, local_dns: None };
    let server =
        member_console::web::serve_connected(listener, t.db.clone(), std::sync::Arc::new(config), connected).unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    TestApp { base, handle }
}

/// The link in the latest invitation mail to `email`, as the mail job makes it when it sends.
pub async fn link_to(t: &TestDb, email: &str) -> String {
    let payload: serde_json::Value = t
        .one(
            sqlx::query_scalar(
                "SELECT payload FROM integration.jobs WHERE kind = 'send_mail' AND payload->'mail'->>'to' = $1
                 ORDER BY job_id DESC LIMIT 1",
            )
            .bind(email),
        )
        .await;
    let job: SendMail = serde_json::from_value(payload).unwrap();
    job.link.expect("an invitation mail carries a link").url(&tokens())
}

pub fn token_of(link: &str) -> Token {
    Token::parse(link.rsplit_once("token=").expect("a token in the link").1).unwrap()
}

async fn acme(t: &TestDb) -> OrganizationId {
    OrganizationId(organization_id(t, demo::DEMO_ORGANIZATION).await)
}

async fn owner(t: &TestDb) -> AccountId {
    AccountId(account_id(t, demo::MEMBER_EMAIL).await)
}

fn email(s: &str) -> Email {
    Email::parse(s).unwrap()
}

async fn invite(
    t: &TestDb,
    by: Inviter,
    org: OrganizationId,
    to: &str,
    role: Role,
) -> Result<InvitationId, ServiceError> {
    let i = Invite { organization_id: org, email: email(to), role };
    invitations::invite(&t.db, &tokens(), by, &i, &mail()).await.map(|i| i.invitation_id)
}

async fn new_person(password: &str) -> Acceptor<'static> {
    Acceptor::NewAccount { password_hash: hash_password(password.into()).await, address: "192.0.2.51", previous: None }
}

async fn count(t: &TestDb, sql: &str) -> i64 {
    t.one(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))).await
}

async fn role_in(t: &TestDb, org: OrganizationId, who: &str) -> Option<String> {
    t.optional(
        sqlx::query_scalar(
            "SELECT m.role FROM core.organization_members m JOIN core.accounts a USING (account_id)
             WHERE m.organization_id = $1 AND lower(a.email) = lower($2)",
        )
        .bind(org.0)
        .bind(who.to_string()),
    )
    .await
}

/// A second owner of Acme Wikis, verified, with a password.
async fn second_owner(t: &TestDb, who: &str) -> AccountId {
    let org = acme(t).await;
    invite(t, Inviter::Owner(owner(t).await), org, who, Role::Owner).await.unwrap();
    let token = token_of(&link_to(t, who).await);
    match invitations::accept(&t.db, &token, new_person("second-owner-pw").await).await.unwrap() {
        Accepted::NewAccount { account_id, .. } => account_id,
        other => panic!("{other:?}"),
    }
}

// Invitations --------------------------------------------------------------------------------------

#[tokio::test]
async fn an_invitation_accepted_with_a_new_password_makes_a_verified_member_signed_in_and_its_link_works_once() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let by = owner(&t).await;
    invite(&t, Inviter::Owner(by), org, "Nia@Example.test", Role::Member).await.unwrap();
    let link = link_to(&t, "Nia@Example.test").await;
    assert!(link.starts_with("http://console.example.test/invitations/accept?token="), "{link}");
    let stored: i64 =
        count(&t, "SELECT count(*) FROM core.invitations WHERE token_hash IS NOT NULL AND email = 'Nia@Example.test'")
            .await;
    assert_eq!(stored, 1);
    let token = token_of(&link);

    let accepted = invitations::accept(&t.db, &token, new_person("nia-password").await).await.unwrap();
    let Accepted::NewAccount { account_id, session, organization_id } = accepted else { panic!("{accepted:?}") };
    assert_eq!(organization_id, org);
    let (verified, sessions, role, accepted_by): (bool, i64, String, Option<i64>) = t
        .one(
            sqlx::query_as(
                "SELECT a.email_verified_at IS NOT NULL,
                        (SELECT count(*) FROM core.web_sessions s WHERE s.account_id = a.account_id),
                        (SELECT role FROM core.organization_members m WHERE m.account_id = a.account_id AND m.organization_id = $2),
                        (SELECT accepted_by FROM core.invitations WHERE lower(email) = 'nia@example.test')
                 FROM core.accounts a WHERE a.account_id = $1",
            )
            .bind(account_id.0)
            .bind(org.0),
        )
        .await;
    assert!(verified, "setting a password from the mailed link proves the email");
    assert_eq!((sessions, role.as_str(), accepted_by), (1, "member", Some(account_id.0)));
    assert_eq!(session.len(), 64);
    let events: Vec<(String, Option<i64>)> =
        t.all(sqlx::query_as("SELECT kind, actor_account_id FROM core.account_events ORDER BY event_id")).await;
    assert_eq!(
        events,
        vec![("invited".to_string(), Some(by.0)), ("invitation_accepted".to_string(), Some(account_id.0))],
        "each act is recorded with who did it"
    );

    let again = invitations::accept(&t.db, &token, new_person("another-password").await).await;
    assert!(matches!(again, Err(AcceptError::Link(LinkProblem::Used))), "{again:?}");
    assert_eq!(count(&t, "SELECT count(*) FROM core.accounts WHERE lower(email) = 'nia@example.test'").await, 1);
}

#[tokio::test]
async fn inviting_someone_who_is_a_member_already_is_refused_beside_the_email_and_writes_nothing() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let e = invite(&t, Inviter::Owner(owner(&t).await), org, "MEMBER@example.com", Role::Owner).await.unwrap_err();
    match e {
        ServiceError::Invalid(p) => {
            assert_eq!(p[0].0, "email");
            assert!(p[0].1.contains("is a member of Acme Wikis already"), "{p:?}");
        }
        other => panic!("{other:?}"),
    }
    let invitations =
        count(&t, "SELECT count(*) FROM core.invitations WHERE lower(email) = 'member@example.com'").await;
    let mails = count(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'send_mail'").await;
    let events = count(&t, "SELECT count(*) FROM core.account_events").await;
    assert_eq!((invitations, mails, events), (0, 0, 0));
}

#[tokio::test]
async fn inviting_an_email_again_renews_its_pending_invitation_and_the_old_link_stops_working() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let by = Inviter::Owner(owner(&t).await);
    let first = invite(&t, by, org, "ole@example.test", Role::Member).await.unwrap();
    let old = token_of(&link_to(&t, "ole@example.test").await);
    let second = invite(&t, by, org, "OLE@example.test", Role::Owner).await.unwrap();
    assert_eq!(first, second, "one pending invitation per email, renewed");
    let new = token_of(&link_to(&t, "OLE@example.test").await);
    let stale = invitations::accept(&t.db, &old, new_person("ole-password").await).await;
    assert!(matches!(stale, Err(AcceptError::Link(LinkProblem::Unknown))), "{stale:?}");
    invitations::accept(&t.db, &new, new_person("ole-password").await).await.unwrap();
    assert_eq!(role_in(&t, org, "ole@example.test").await.as_deref(), Some("owner"), "the renewal's role");
}

#[tokio::test]
async fn resend_gives_a_new_link_and_revoke_ends_it_and_an_ended_invitation_is_refused_in_words() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let by = Inviter::Owner(owner(&t).await);
    let id = invite(&t, by, org, "rae@example.test", Role::Member).await.unwrap();
    let old = token_of(&link_to(&t, "rae@example.test").await);
    invitations::resend(&t.db, &tokens(), by, org, id, &mail()).await.unwrap();
    let new = token_of(&link_to(&t, "rae@example.test").await);
    assert!(matches!(invitations::look(&t.db, &old).await, Err(AcceptError::Link(LinkProblem::Unknown))));
    assert_eq!(invitations::look(&t.db, &new).await.unwrap().email, "rae@example.test");
    invitations::revoke(&t.db, by, org, id).await.unwrap();
    let revoked = invitations::accept(&t.db, &new, new_person("rae-password").await).await;
    assert!(matches!(revoked, Err(AcceptError::Link(LinkProblem::Revoked))), "{revoked:?}");
    let again = invitations::revoke(&t.db, by, org, id).await.unwrap_err();
    assert!(matches!(&again, ServiceError::Refused(m) if m.contains("revoked already")), "{again:?}");
    assert_eq!(count(&t, "SELECT count(*) FROM core.accounts WHERE email = 'rae@example.test'").await, 0);
}

#[tokio::test]
async fn an_expired_or_tampered_link_is_refused_and_writes_nothing() {
    let t = demo_db().await;
    let org = acme(&t).await;
    invite(&t, Inviter::Owner(owner(&t).await), org, "eve@example.test", Role::Member).await.unwrap();
    let token = token_of(&link_to(&t, "eve@example.test").await);
    // Tampered: one digit changed.
    let mut s = token.as_str().to_string();
    let last = if s.ends_with('0') { '1' } else { '0' };
    s.pop();
    s.push(last);
    let tampered = Token::parse(&s).unwrap();
    let r = invitations::accept(&t.db, &tampered, new_person("eve-password").await).await;
    assert!(matches!(r, Err(AcceptError::Link(LinkProblem::Unknown))), "{r:?}");
    // A token under another key (a foreign console's) is no token here either.
    let foreign = TokenKey::from_session_key(&[1; 64]).token(&member_console::services::tokens::Seed::new());
    let r = invitations::accept(&t.db, &foreign, new_person("eve-password").await).await;
    assert!(matches!(r, Err(AcceptError::Link(LinkProblem::Unknown))), "{r:?}");
    t.run(sqlx::query("UPDATE core.invitations SET expires_at = now() - interval '1 second'")).await;
    let r = invitations::accept(&t.db, &token, new_person("eve-password").await).await;
    assert!(matches!(r, Err(AcceptError::Link(LinkProblem::Expired))), "{r:?}");
    let written = count(
        &t,
        "SELECT (SELECT count(*) FROM core.accounts WHERE email = 'eve@example.test')
              + (SELECT count(*) FROM core.invitations WHERE accepted_at IS NOT NULL)
              + (SELECT count(*) FROM core.account_events WHERE kind = 'invitation_accepted')",
    )
    .await;
    assert_eq!(written, 0);
}

#[tokio::test]
async fn an_existing_account_accepts_signed_in_as_the_invited_email_and_another_account_is_refused_in_words() {
    let t = demo_db().await;
    let org = OrganizationId(organization_id(&t, "Initech").await);
    let operator = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    invite(&t, Inviter::Operator(operator), org, demo::MEMBER_EMAIL, Role::Member).await.unwrap();
    let token = token_of(&link_to(&t, demo::MEMBER_EMAIL).await);
    assert!(invitations::look(&t.db, &token).await.unwrap().account_exists);
    let wrong = Acceptor::SignedIn { account_id: operator };
    let r = invitations::accept(&t.db, &token, wrong).await;
    assert!(
        matches!(&r, Err(AcceptError::Service(ServiceError::Refused(m))) if m.contains("This invitation is for member@example.com") && m.contains("Sign out")),
        "{r:?}"
    );
    assert_eq!(role_in(&t, org, demo::OPERATOR_EMAIL).await, None);
    let right = Acceptor::SignedIn { account_id: owner(&t).await };
    assert_eq!(invitations::accept(&t.db, &token, right).await.unwrap(), Accepted::Joined { organization_id: org });
    assert_eq!(role_in(&t, org, demo::MEMBER_EMAIL).await.as_deref(), Some("member"));
}

#[tokio::test]
async fn an_unverified_account_accepting_its_invitation_is_verified_by_the_link_and_the_row_decides_the_email() {
    let t = demo_db().await;
    let org = OrganizationId(organization_id(&t, "Initech").await);
    let operator = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    let hash = hash_password("unverified-password".into()).await;
    let ana: i64 = t
        .one(
            sqlx::query_scalar(
                "INSERT INTO core.accounts (email, password_hash) VALUES ('ana@example.test', $1) RETURNING account_id",
            )
            .bind(&hash),
        )
        .await;
    invite(&t, Inviter::Operator(operator), org, "ana@example.test", Role::Member).await.unwrap();
    let token = token_of(&link_to(&t, "ana@example.test").await);
    // The account was invited at its old email and has moved on since: its row decides.
    t.run(sqlx::query("UPDATE core.accounts SET email = 'ana2@example.test' WHERE account_id = $1").bind(ana)).await;
    let stale = Acceptor::SignedIn { account_id: AccountId(ana) };
    let r = invitations::accept(&t.db, &token, stale).await;
    assert!(
        matches!(&r, Err(AcceptError::Service(ServiceError::Refused(m))) if m.contains("signed in as ana2@example.test")),
        "{r:?}"
    );
    t.run(sqlx::query("UPDATE core.accounts SET email = 'ana@example.test' WHERE account_id = $1").bind(ana)).await;
    let verified = async || -> bool {
        t.one(
            sqlx::query_scalar("SELECT email_verified_at IS NOT NULL FROM core.accounts WHERE account_id = $1")
                .bind(ana),
        )
        .await
    };
    assert!(!verified().await);
    let who = Acceptor::SignedIn { account_id: AccountId(ana) };
    assert_eq!(invitations::accept(&t.db, &token, who).await.unwrap(), Accepted::Joined { organization_id: org });
    assert!(verified().await, "the invitation's link, mailed to the address, proves it");
    let events: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT count(*) FROM core.account_events WHERE account_id = $1 AND kind = 'email_verified'",
            )
            .bind(ana),
        )
        .await;
    assert_eq!(events, 1);
}

#[tokio::test]
async fn only_a_verified_owner_invites_and_only_an_owner_changes_roles() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let colleague = second_owner(&t, "col@example.test").await;
    members::change_membership(
        &t.db,
        owner(&t).await,
        org,
        MembershipChange::SetRole { account: colleague, role: Role::Member },
    )
    .await
    .unwrap();
    let e = invite(&t, Inviter::Owner(colleague), org, "x@example.test", Role::Member).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("Only an owner of Acme Wikis")), "{e:?}");
    let e = members::change_membership(&t.db, colleague, org, MembershipChange::Remove { account: owner(&t).await })
        .await
        .unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("Only an owner of Acme Wikis")), "{e:?}");
    // Another organization is nothing at all to them.
    let initech = OrganizationId(organization_id(&t, "Initech").await);
    let e = invite(&t, Inviter::Owner(colleague), initech, "x@example.test", Role::Member).await.unwrap_err();
    assert!(matches!(e, ServiceError::NotFound(_)), "{e:?}");
    // An owner who has not verified the email may not invite.
    t.run(sqlx::query("UPDATE core.accounts SET email_verified_at = NULL WHERE email = $1").bind(demo::MEMBER_EMAIL))
        .await;
    let e = invite(&t, Inviter::Owner(owner(&t).await), org, "x@example.test", Role::Member).await.unwrap_err();
    assert!(
        matches!(&e, ServiceError::Refused(m) if m.starts_with("Verify your email address first to invite people")),
        "{e:?}"
    );
    assert_eq!(count(&t, "SELECT count(*) FROM core.invitations WHERE email = 'x@example.test'").await, 0);
}

// Members ------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_last_owner_cannot_leave_step_down_or_be_removed_until_another_owner_can_act() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    for change in [MembershipChange::Leave, MembershipChange::SetRole { account: me, role: Role::Member }] {
        let e = members::change_membership(&t.db, me, org, change).await.unwrap_err();
        assert!(
            matches!(&e, ServiceError::Refused(m) if m.contains("You are the last owner of Acme Wikis") && m.contains("Make another member an owner first")),
            "{e:?}"
        );
    }
    // A second owner who is disabled does not count.
    let other = second_owner(&t, "dis@example.test").await;
    t.run(sqlx::query("UPDATE core.accounts SET disabled_at = now() WHERE account_id = $1").bind(other.0)).await;
    let e = members::change_membership(&t.db, me, org, MembershipChange::Leave).await.unwrap_err();
    assert!(matches!(e, ServiceError::Refused(_)), "{e:?}");
    t.run(sqlx::query("UPDATE core.accounts SET disabled_at = NULL WHERE account_id = $1").bind(other.0)).await;
    members::change_membership(&t.db, me, org, MembershipChange::Leave).await.unwrap();
    assert_eq!(role_in(&t, org, demo::MEMBER_EMAIL).await, None);
    let kinds: Vec<(String, i64, Option<i64>)> = t
        .all(sqlx::query_as(
            "SELECT kind, account_id, actor_account_id FROM core.account_events WHERE kind = 'left_organization'",
        ))
        .await;
    assert_eq!(kinds, vec![("left_organization".to_string(), me.0, Some(me.0))]);
    let e =
        members::change_membership(&t.db, other, org, MembershipChange::Remove { account: other }).await.unwrap_err();
    assert!(matches!(&e, ServiceError::Refused(m) if m.contains("last owner")), "{e:?}");
}

#[tokio::test]
async fn an_owner_changes_a_role_and_removes_a_member_and_each_is_recorded_with_who_did_it() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let me = owner(&t).await;
    let other = second_owner(&t, "rob@example.test").await;
    members::change_membership(&t.db, me, org, MembershipChange::SetRole { account: other, role: Role::Member })
        .await
        .unwrap();
    assert_eq!(role_in(&t, org, "rob@example.test").await.as_deref(), Some("member"));
    members::change_membership(&t.db, me, org, MembershipChange::Remove { account: other }).await.unwrap();
    assert_eq!(role_in(&t, org, "rob@example.test").await, None);
    let events: Vec<(String, i64, Option<i64>, String)> = t
        .all(sqlx::query_as(
            "SELECT kind, account_id, actor_account_id, detail FROM core.account_events
             WHERE kind IN ('role_changed', 'removed_from_organization') ORDER BY event_id",
        ))
        .await;
    assert_eq!(
        events,
        vec![
            ("role_changed".into(), other.0, Some(me.0), "owner → member".into()),
            ("removed_from_organization".into(), other.0, Some(me.0), "was member".into()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_owners_demoting_each_other_at_once_leave_one_owner_and_the_other_is_refused_in_words() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let a = owner(&t).await;
    let b = second_owner(&t, "bea@example.test").await;
    // A demotes B, paused after it took the organization's row.
    let mut walk = LockWalk::start(&t, &CHANGE_MEMBERSHIP_LOCKS, 2, move |db| async move {
        members::change_membership(&db, a, org, MembershipChange::SetRole { account: b, role: Role::Member }).await
    })
    .await;
    let org_row = Expect::row_in("core.organizations", org, RowMode::NoKeyUpdate);
    walk.assert_holds_exactly(std::slice::from_ref(&org_row)).await;
    // B demotes A meanwhile: it waits on that very row.
    let db = t.db.clone();
    let other = tokio::spawn(async move {
        members::change_membership(&db, b, org, MembershipChange::SetRole { account: a, role: Role::Member }).await
    });
    let waiter = wait_for_waiter(&t.admin, &t.name, walk.paused_pid()).await;
    assert_waits(&t.admin, waiter, walk.paused_pid(), &org_row).await;
    let first = walk.finish().await;
    let second = tokio::time::timeout(Duration::from_secs(30), other).await.unwrap().unwrap();
    assert!(first.is_ok(), "{first:?}");
    assert!(
        matches!(&second, Err(ServiceError::Refused(m)) if m.contains("Only an owner of Acme Wikis")),
        "the second sees the first's change: {second:?}"
    );
    let owners: Vec<String> = t
        .all(
            sqlx::query_scalar(
                "SELECT a.email FROM core.organization_members m JOIN core.accounts a USING (account_id)
             WHERE m.organization_id = $1 AND m.role = 'owner'",
            )
            .bind(org.0),
        )
        .await;
    assert_eq!(owners, vec![demo::MEMBER_EMAIL.to_string()], "exactly one owner remains");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_owners_removing_each_other_at_once_leave_one_owner() {
    let t = demo_db().await;
    let org = acme(&t).await;
    let a = owner(&t).await;
    let b = second_owner(&t, "bo@example.test").await;
    let mut walk = LockWalk::start(&t, &CHANGE_MEMBERSHIP_LOCKS, 2, move |db| async move {
        members::change_membership(&db, b, org, MembershipChange::Remove { account: a }).await
    })
    .await;
    let db = t.db.clone();
    let other =
        tokio::spawn(
            async move { members::change_membership(&db, a, org, MembershipChange::Remove { account: b }).await },
        );
    let waiter = wait_for_waiter(&t.admin, &t.name, walk.paused_pid()).await;
    assert_waits(&t.admin, waiter, walk.paused_pid(), &Expect::row_in("core.organizations", org, RowMode::NoKeyUpdate))
        .await;
    let _ = walk.step().await;
    assert!(walk.finish().await.is_ok());
    let second = tokio::time::timeout(Duration::from_secs(30), other).await.unwrap().unwrap();
    assert!(matches!(second, Err(ServiceError::NotFound(_))), "A is no member any more: {second:?}");
    assert_eq!(role_in(&t, org, "bo@example.test").await.as_deref(), Some("owner"));
    assert_eq!(
        count(
            &t,
            &format!(
                "SELECT count(*) FROM core.organization_members WHERE organization_id = {} AND role = 'owner'",
                org.0
            )
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_accepts_of_one_invitation_make_one_membership() {
    let t = demo_db().await;
    let org = OrganizationId(organization_id(&t, "Initech").await);
    let operator = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    invite(&t, Inviter::Operator(operator), org, demo::MEMBER_EMAIL, Role::Owner).await.unwrap();
    let token = token_of(&link_to(&t, demo::MEMBER_EMAIL).await);
    let member = owner(&t).await;
    let first_token = token.clone();
    let mut walk = LockWalk::start(&t, &ACCEPT_INVITATION_LOCKS, 1, move |db| async move {
        let who = Acceptor::SignedIn { account_id: member };
        invitations::accept(&db, &first_token, who).await
    })
    .await;
    let id: i64 = t
        .one(sqlx::query_scalar("SELECT invitation_id FROM core.invitations WHERE organization_id = $1").bind(org.0))
        .await;
    let row = Expect::row("core.invitations", id);
    walk.assert_holds_exactly(std::slice::from_ref(&row)).await;
    let db = t.db.clone();
    let second = tokio::spawn(async move {
        let who = Acceptor::SignedIn { account_id: member };
        invitations::accept(&db, &token, who).await
    });
    let waiter = wait_for_waiter(&t.admin, &t.name, walk.paused_pid()).await;
    assert_waits(&t.admin, waiter, walk.paused_pid(), &row).await;
    let first = walk.finish().await;
    let second = tokio::time::timeout(Duration::from_secs(30), second).await.unwrap().unwrap();
    assert_eq!(first.unwrap(), Accepted::Joined { organization_id: org });
    assert!(matches!(second, Err(AcceptError::Link(LinkProblem::Used))), "{second:?}");
    let memberships =
        count(&t, &format!("SELECT count(*) FROM core.organization_members WHERE organization_id = {}", org.0)).await;
    assert_eq!(memberships, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM core.account_events WHERE kind = 'invitation_accepted'").await, 1);
}

// Pages --------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_owner_sees_members_and_the_demos_pending_invitation_and_invites_from_the_page() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let org = acme(&t).await;
    let owner = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let path = format!("/organizations/{}/members", org.0);
    let home = owner.get("/").await;
    assert!(home.body.contains(&format!("href=\"{path}\"")), "the home links to the members page");
    let page = owner.get(&path).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Members of Acme Wikis") && page.body.contains(demo::MEMBER_EMAIL), "{}", page.body);
    assert!(page.body.contains(demo::DEMO_INVITEE), "the demo's pending invitation is listed");

    let bad = owner
        .post(&format!("/organizations/{}/invitations", org.0), &[("email", "not an email"), ("role", "member")], false)
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.contains("is not an email address"), "{}", bad.body);
    let member_again = owner
        .post(
            &format!("/organizations/{}/invitations", org.0),
            &[("email", demo::MEMBER_EMAIL), ("role", "member")],
            false,
        )
        .await;
    assert_eq!(member_again.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(member_again.body.contains("is a member of Acme Wikis already"));
    assert_eq!(
        count(&t, "SELECT count(*) FROM integration.jobs WHERE kind = 'send_mail'").await,
        0,
        "nothing was sent"
    );

    let sent = owner
        .post(
            &format!("/organizations/{}/invitations", org.0),
            &[("email", "kai@example.test"), ("role", "owner")],
            false,
        )
        .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    let page = owner.get(sent.header("location").unwrap()).await;
    assert!(page.body.contains("Invitation sent.") && page.body.contains("kai@example.test"), "{}", page.body);
    let link = link_to(&t, "kai@example.test").await;
    assert!(link.contains("/invitations/accept?token="), "the mail's link points at the accept page: {link}");
}

#[tokio::test]
async fn the_members_page_is_refused_in_words_to_a_member_who_is_not_an_owner_and_is_nothing_to_others() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let org = acme(&t).await;
    second_owner(&t, "mo@example.test").await;
    let me = owner(&t).await;
    let mo = AccountId(account_id(&t, "mo@example.test").await);
    members::change_membership(&t.db, me, org, MembershipChange::SetRole { account: mo, role: Role::Member })
        .await
        .unwrap();
    let s = Session::sign_in(&app, "mo@example.test", "second-owner-pw").await;
    let page = s.get(&format!("/organizations/{}/members", org.0)).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains("not an owner") && page.body.contains("Leave Acme Wikis"), "{}", page.body);
    let other = organization_id(&t, "Initech").await;
    assert_eq!(s.get(&format!("/organizations/{other}/members")).await.status, StatusCode::NOT_FOUND);
    let visitor = app.client().get(app.url(&format!("/organizations/{}/members", org.0))).send().await.unwrap();
    assert_eq!(visitor.status(), StatusCode::SEE_OTHER, "a visitor is sent to sign in");
    // They leave.
    let left = s.post(&format!("/organizations/{}/leave", org.0), &[], false).await;
    assert_eq!(left.status, StatusCode::SEE_OTHER);
    assert_eq!(role_in(&t, org, "mo@example.test").await, None);
    // The last owner is refused in words.
    let o = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let refused = o.post(&format!("/organizations/{}/leave", org.0), &[], false).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.body.contains("last owner of Acme Wikis"), "{}", refused.body);
}

#[tokio::test]
async fn the_link_opened_by_a_visitor_shows_the_invitation_without_using_it_and_its_post_signs_the_new_member_in() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let org = acme(&t).await;
    invite(&t, Inviter::Owner(owner(&t).await), org, "lee@example.test", Role::Member).await.unwrap();
    let link = link_to(&t, "lee@example.test").await;
    let path = &link[link.find("/invitations").unwrap()..];
    let c = app.client();
    for _ in 0..2 {
        let page = crate::common::pages::get(&app, &c, path).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("Join Acme Wikis") && page.body.contains("New password"), "{}", page.body);
    }
    let token = token_of(&link);
    let csrf = app.csrf(&c, path).await;
    let short = crate::common::pages::post(
        &app,
        &c,
        "/invitations/accept",
        &csrf,
        &[("token", token.as_str()), ("password", "short")],
        false,
    )
    .await;
    assert_eq!(short.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(short.body.contains("at least 8 characters"), "{}", short.body);
    let ok = crate::common::pages::post(
        &app,
        &c,
        "/invitations/accept",
        &csrf,
        &[("token", token.as_str()), ("password", "lee-password")],
        false,
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    let home = crate::common::pages::get(&app, &c, "/").await;
    assert!(home.body.contains("Acme Wikis") && home.body.contains("Welcome, lee@example.test"), "{}", home.body);
    // Used: a clear 410, and a tampered link a 404.
    let used = app.client().get(app.url(path)).send().await.unwrap();
    assert_eq!(used.status(), StatusCode::GONE);
    assert!(used.text().await.unwrap().contains("accepted already"));
    let cut = app.client().get(app.url(&path[..path.len() - 1])).send().await.unwrap();
    assert_eq!(cut.status(), StatusCode::NOT_FOUND);
    assert!(cut.text().await.unwrap().contains("This link is not complete"));
}

#[tokio::test]
async fn the_link_asks_an_existing_account_to_sign_in_and_refuses_another_signed_in_account_with_a_sign_out() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let org = OrganizationId(organization_id(&t, "Initech").await);
    let operator = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    invite(&t, Inviter::Operator(operator), org, demo::MEMBER_EMAIL, Role::Member).await.unwrap();
    let link = link_to(&t, demo::MEMBER_EMAIL).await;
    let path = &link[link.find("/invitations").unwrap()..];
    let visitor = crate::common::pages::get(&app, &app.client(), path).await;
    assert!(visitor.body.contains("Sign in to accept") && visitor.body.contains("/login?next="), "{}", visitor.body);
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let wrong = op.get(path).await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert!(
        wrong.body.contains("This invitation is for member@example.com") && wrong.body.contains("action=\"/logout\"")
    );
    let refused = op.post("/invitations/accept", &[("token", token_of(&link).as_str())], false).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(role_in(&t, org, demo::OPERATOR_EMAIL).await, None);
    let m = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let ok = m.post("/invitations/accept", &[("token", token_of(&link).as_str())], false).await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(role_in(&t, org, demo::MEMBER_EMAIL).await.as_deref(), Some("member"));
}

#[tokio::test]
async fn an_operator_invites_a_person_to_any_organization_from_its_page_and_without_mail_the_page_says_so() {
    let t = demo_db().await;
    let app = mailing_app(&t).await;
    let org = organization_id(&t, "Initech").await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let page = op.get(&format!("/operator/organizations/{org}")).await;
    assert!(page.body.contains("Invite a person"), "{}", page.body);
    let sent = op
        .post(
            &format!("/operator/organizations/{org}/invitations"),
            &[("email", "pat@example.test"), ("role", "owner")],
            false,
        )
        .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    let page = op.get(&format!("/operator/organizations/{org}")).await;
    assert!(page.body.contains("pat@example.test"));
    let actor: Option<i64> =
        t.one(sqlx::query_scalar("SELECT actor_account_id FROM core.account_events WHERE kind = 'invited'")).await;
    assert_eq!(actor, Some(account_id(&t, demo::OPERATOR_EMAIL).await));

    // A console without mail: the form says so, and a post is refused in words, nothing written.
    let quiet = TestApp::spawn(&t).await;
    let op = Session::sign_in(&quiet, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    assert!(op.get(&format!("/operator/organizations/{org}")).await.body.contains("Mail is off on this console"));
    let refused = op
        .post(
            &format!("/operator/organizations/{org}/invitations"),
            &[("email", "q@example.test"), ("role", "member")],
            false,
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(refused.body.contains("Mail is off"), "{}", refused.body);
    assert_eq!(count(&t, "SELECT count(*) FROM core.invitations WHERE email = 'q@example.test'").await, 0);
}
