//! Row-level walks of the account page's and the operators' account paths (issue 38): each
//! paused after each lock it takes, a probe waiting on that very row (tests/it/common/locks.rs);
//! then what the path did.

use member_console::{
    demo,
    ids::AccountId,
    services::{
        account_settings as settings,
        auth::{self, Email, NewPassword, Password},
        operator_accounts as ops,
        tokens::TokenKey,
    },
};

use crate::{
    account_pages::{another_account, events_of, mail_jobs, mailing, password_hash, written},
    common::{
        locks::{Expect, LockWalk, RowMode, Step, walk},
        pages::{account_id, demo_db, organization_id},
    },
};

const NEW_PASSWORD: &str = "a much better password";

fn account_row(id: i64) -> Expect {
    Expect::row_in("core.accounts", id, RowMode::NoKeyUpdate)
}

fn organization_row(id: i64) -> Expect {
    Expect::row_in("core.organizations", id, RowMode::NoKeyUpdate)
}

#[tokio::test]
async fn a_password_change_walked_lock_by_lock_takes_the_account_row() {
    let t = demo_db().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let out = LockWalk::run(&t, &settings::CHANGE_PASSWORD_LOCKS, &[account_row(member)], move |db| async move {
        let current = Password::parse(demo::MEMBER_PASSWORD).unwrap();
        let new = NewPassword::parse(NEW_PASSWORD).unwrap();
        settings::change_password(&db, AccountId(member), &"0".repeat(64), &current, &new, None).await
    })
    .await;
    assert_eq!(out.unwrap(), 0);
    assert!(auth::verify_password(Some(password_hash(&t, member).await), NEW_PASSWORD.into()).await);
}

#[tokio::test]
async fn an_email_change_request_walked_lock_by_lock_takes_the_account_row() {
    let t = demo_db().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let out = LockWalk::run(&t, &settings::REQUEST_EMAIL_CHANGE_LOCKS, &[account_row(member)], move |db| async move {
        let keys = TokenKey::from_session_key(&[5; 64]);
        let password = Password::parse(demo::MEMBER_PASSWORD).unwrap();
        let new = Email::parse("walked@example.com").unwrap();
        settings::request_email_change(&db, &keys, AccountId(member), &new, &password, Some(&mailing()), "192.0.2.3")
            .await
    })
    .await;
    out.unwrap();
    assert_eq!(mail_jobs(&t).await.len(), 1);
}

#[tokio::test]
async fn an_account_deletion_walked_lock_by_lock_takes_the_account_then_its_organizations_then_its_memberships() {
    let t = demo_db().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    another_account(&t, "second.owner@example.com", Some("owner"), false).await;
    let expected = [
        account_row(member),
        organization_row(acme),
        Expect::row("core.organization_members", format!("{acme},{member}")),
    ];
    let out = LockWalk::run(&t, &settings::DELETE_ACCOUNT_LOCKS, &expected, move |db| async move {
        settings::delete_account(&db, AccountId(member), &Password::parse(demo::MEMBER_PASSWORD).unwrap()).await
    })
    .await;
    out.unwrap();
    assert_eq!(written(&t, member).await.0, format!("deleted-{member}@deleted.invalid"));
}

#[tokio::test]
async fn disabling_walked_lock_by_lock_takes_the_account_then_its_organizations_and_enabling_the_account() {
    let t = demo_db().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let operator = account_id(&t, demo::OPERATOR_EMAIL).await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    another_account(&t, "second.owner@example.com", Some("owner"), false).await;
    let out = LockWalk::run(
        &t,
        &ops::DISABLE_ACCOUNT_LOCKS,
        &[account_row(member), organization_row(acme)],
        move |db| async move { ops::disable_account(&db, AccountId(operator), AccountId(member)).await },
    )
    .await;
    out.unwrap();
    let out = LockWalk::run(&t, &ops::ENABLE_ACCOUNT_LOCKS, &[account_row(member)], move |db| async move {
        ops::enable_account(&db, AccountId(operator), AccountId(member)).await
    })
    .await;
    out.unwrap();
    let kinds: Vec<String> = events_of(&t, member).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["disabled", "enabled"]);
}

#[tokio::test]
async fn a_change_of_operator_walked_lock_by_lock_takes_every_operators_row_ascending() {
    let t = demo_db().await;
    let operator = account_id(&t, demo::OPERATOR_EMAIL).await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let second = another_account(&t, "second.op@example.com", None, true).await;
    let mut rows = vec![operator, member, second];
    rows.sort();
    // One statement locks them all, ascending; the trace notes each once it has them.
    let steps = [Step::Rows(rows.into_iter().map(account_row).collect())];
    let out = walk(&t, &ops::CHANGE_OPERATOR_LOCKS, &steps, move |db| async move {
        ops::set_operator(&db, AccountId(operator), AccountId(member), true).await
    })
    .await;
    out.unwrap();
    let operators: Vec<i64> =
        t.all(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE is_operator ORDER BY account_id")).await;
    assert_eq!(operators.len(), 3);
}
