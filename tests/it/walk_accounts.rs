//! Row-level walks (issue 36's rule) of the accounts' own paths (issue 38): the mail send
//! reservation here; the account lifecycle's paths beside it. Each runs the service function,
//! paused after each lock it takes, and asserts what it holds and that a probe waits on it for
//! that very row; then what the path did.

use crate::common;

use common::{
    TestDb,
    locks::{Expect, RowMode, Step, walk},
};
use member_console::services::mail_limits::{self, PER_ADDRESS, PER_EMAIL, RESERVE_MAIL_SEND_LOCKS, reserve_send};

// Reserve a mail send ---------------------------------------------------------------------------------

const ADDRESS: &str = "192.0.2.9";

async fn sends(t: &TestDb, key: &str) -> i32 {
    t.one(sqlx::query_scalar("SELECT sends FROM core.mail_send_limits WHERE limit_key = $1").bind(key.to_string()))
        .await
}

#[tokio::test]
async fn a_mail_send_reserved_walked_lock_by_lock_takes_the_address_row_and_the_email_row_in_key_order_in_one_statement()
 {
    let t = TestDb::new().await;
    // A send before: both rows exist, so the walked one updates (and locks) them.
    assert!(reserve_send(&t.db, ADDRESS, "ana@example.test").await.unwrap());
    let [address_key, email_key] = mail_limits::limit_keys(ADDRESS, "ana@example.test");
    // "address:…" sorts before "email:…": the statement takes them in that order.
    // An upsert's update of no key column: FOR NO KEY UPDATE.
    let row = |key: &str| Expect::row_in("core.mail_send_limits", key, RowMode::NoKeyUpdate);
    let rows = vec![row(&address_key), row(&email_key)];
    let allowed = walk(&t, &RESERVE_MAIL_SEND_LOCKS, &[Step::Rows(rows)], |db| async move {
        reserve_send(&db, ADDRESS, "Ana@Example.test").await
    })
    .await
    .unwrap();
    assert!(allowed);
    assert_eq!(
        (sends(&t, &address_key).await, sends(&t, &email_key).await),
        (2, 2),
        "one key per email, whatever its case"
    );
}

#[tokio::test]
async fn sends_past_an_emails_limit_are_refused_and_still_counted_while_other_emails_go_on() {
    let t = TestDb::new().await;
    for n in 1..=PER_EMAIL {
        assert!(reserve_send(&t.db, ADDRESS, "bo@example.test").await.unwrap(), "send {n} is within the limit");
    }
    assert!(!reserve_send(&t.db, ADDRESS, "BO@example.test").await.unwrap(), "one more to the same email is refused");
    assert!(!reserve_send(&t.db, "192.0.2.10", "bo@example.test").await.unwrap(), "from another address too");
    assert_eq!(sends(&t, "email:bo@example.test").await, PER_EMAIL + 2, "the refused sends count");
    assert!(reserve_send(&t.db, ADDRESS, "cy@example.test").await.unwrap(), "another email from the address goes on");
    // The window ends: the email may be sent to again.
    t.run(sqlx::query("UPDATE core.mail_send_limits SET window_started_at = now() - interval '61 minutes'")).await;
    assert!(reserve_send(&t.db, ADDRESS, "bo@example.test").await.unwrap());
    assert_eq!(sends(&t, "email:bo@example.test").await, 1, "a new window starts at one");
}

#[tokio::test]
async fn sends_past_an_addresss_limit_are_refused_whatever_the_email() {
    let t = TestDb::new().await;
    for n in 0..PER_ADDRESS {
        assert!(reserve_send(&t.db, ADDRESS, &format!("p{n}@example.test")).await.unwrap(), "send {n}");
    }
    assert!(!reserve_send(&t.db, ADDRESS, "fresh@example.test").await.unwrap());
    assert!(reserve_send(&t.db, "192.0.2.11", "fresh2@example.test").await.unwrap(), "another address goes on");
}
