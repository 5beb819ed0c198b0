//! Row-level walks of the sign-up part's paths (issue 38): each paused after each lock it takes,
//! a probe waiting on that very row (tests/it/common/locks.rs); then what the path did.

use member_console::{
    ids::OrgTypeId,
    services::{
        auth::{Email, NewPassword},
        signup::{self, SignedUp, UsedLink},
        tokens::{Token, TokenKey},
    },
};

use crate::{
    common::{
        locks::{Expect, RowMode, Step, walk},
        pages::demo_db,
    },
    signup::{account_of, command, count, last_token, links, mails_to, ready, signed_up},
};

#[tokio::test]
async fn a_sign_up_walked_lock_by_lock_takes_the_rendezvous_then_its_types_row_then_its_own_pool_row() {
    let t = demo_db().await;
    let ty = ready(&t).await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let steps = [
        Step::Lock(Expect::rendezvous_shared()),
        Step::Lock(Expect::row_in("core.org_types", ty.0, RowMode::KeyShare)),
        Step::Own("the new pool's row"),
    ];
    let out = walk(&t, &signup::SIGN_UP_LOCKS, &steps, move |db| async move {
        signup::sign_up(&db, &links(&key), "192.0.2.51", &command("walked@example.test", "Walked Org")).await
    })
    .await
    .unwrap();
    assert!(matches!(out, SignedUp::Created { .. }), "{out:?}");
}

#[tokio::test]
async fn a_verification_walked_lock_by_lock_takes_its_links_row_then_its_accounts_row() {
    let t = demo_db().await;
    ready(&t).await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let (account, token) = signed_up(&t, &key, "walkv@example.test").await;
    let token_id: i64 = t
        .one(sqlx::query_scalar("SELECT token_id FROM core.account_tokens WHERE account_id = $1").bind(account.0))
        .await;
    let steps = [
        Step::Lock(Expect::row("core.account_tokens", token_id)),
        Step::Lock(Expect::row_in("core.accounts", account.0, RowMode::NoKeyUpdate)),
    ];
    let out = walk(&t, &signup::USE_EMAIL_TOKEN_LOCKS, &steps, move |db| async move {
        signup::use_email_token(&db, &links(&key), &token).await
    })
    .await;
    assert_eq!(out.unwrap(), UsedLink::Verified { account_id: account });
}

#[tokio::test]
async fn a_password_reset_walked_lock_by_lock_takes_its_links_row_then_its_accounts_row() {
    let t = demo_db().await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let email = Email::parse("member@example.com").unwrap();
    signup::forgot_password(&t.db, &links(&key), &email, "192.0.2.52").await.unwrap();
    let account = account_of(&t, "member@example.com").await.0;
    let token = Token::parse(&last_token(&t, &key, "member@example.com").await).unwrap();
    let token_id: i64 = t
        .one(
            sqlx::query_scalar("SELECT token_id FROM core.account_tokens WHERE account_id = $1 AND used_at IS NULL")
                .bind(account.0),
        )
        .await;
    let steps = [
        Step::Lock(Expect::row("core.account_tokens", token_id)),
        Step::Lock(Expect::row_in("core.accounts", account.0, RowMode::NoKeyUpdate)),
    ];
    let out = walk(&t, &signup::RESET_PASSWORD_LOCKS, &steps, move |db| async move {
        let p = NewPassword::parse("a walked password").unwrap();
        signup::reset_password(&db, &links(&key), &token, &p, "192.0.2.52", None).await
    })
    .await;
    assert_eq!(out.unwrap().account.account_id, account);
}

#[tokio::test]
async fn a_new_link_walked_lock_by_lock_retires_the_accounts_unused_links_of_its_purpose_in_one_statement() {
    let t = demo_db().await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let email = Email::parse("member@example.com").unwrap();
    signup::forgot_password(&t.db, &links(&key), &email, "192.0.2.53").await.unwrap();
    let first: i64 = t.one(sqlx::query_scalar("SELECT token_id FROM core.account_tokens WHERE used_at IS NULL")).await;
    let steps = [Step::Rows(vec![Expect::row("core.account_tokens", first)])];
    walk(&t, &signup::MAIL_ACCOUNT_LINK_LOCKS, &steps, move |db| async move {
        signup::forgot_password(&db, &links(&key), &email, "192.0.2.53").await
    })
    .await
    .unwrap();
    assert_eq!(
        count(&t, "SELECT count(*) FROM core.account_tokens WHERE used_at IS NULL").await,
        1,
        "only the new one works"
    );
    assert_eq!(mails_to(&t, "member@example.com").await.len(), 2);
}

#[tokio::test]
async fn choosing_the_sign_up_type_walked_lock_by_lock_takes_the_singleton_row_then_the_chosen_types_row() {
    let t = demo_db().await;
    let community = ready(&t).await;
    let other: i64 = t
        .one(
            sqlx::query_scalar(
                "SELECT org_type_id FROM core.org_types WHERE org_type_id <> $1 ORDER BY org_type_id LIMIT 1",
            )
            .bind(community.0),
        )
        .await;
    let steps = [Step::Rows(vec![
        Expect::row_in("core.signup_org_type", "true", RowMode::NoKeyUpdate),
        Expect::row_in("core.org_types", other, RowMode::KeyShare),
    ])];
    walk(&t, &signup::CHOOSE_SIGNUP_TYPE_LOCKS, &steps, move |db| async move {
        signup::choose_signup_type(&db, OrgTypeId(other)).await
    })
    .await
    .unwrap();
    assert_eq!(signup::signup_type(&t.db).await.unwrap().map(|(t, _)| t.0), Some(other));
}
