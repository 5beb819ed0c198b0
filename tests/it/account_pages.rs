//! The account page (password, email, sessions, deletion) and the operators' accounts (list,
//! page, disable and enable, who is an operator): what a person sees and what is written, the
//! refusals in words that write nothing, and two operators demoting each other at once; each
//! path is walked lock by lock in walk_account_pages.rs.

use std::time::Duration;

use member_console::{
    demo,
    ids::AccountId,
    services::{
        ServiceError,
        account_settings::{self as settings, Mailing},
        auth::{self, AuthError, Email, NewPassword, Password},
        operator_accounts as ops,
        tokens::TokenKey,
    },
};
use reqwest::StatusCode;

use crate::common::{
    TestDb,
    pages::{Session, account_id, app_with_demo, demo_db, organization_id},
};

const NEW_PASSWORD: &str = "a much better password";

pub(crate) async fn password_hash(t: &TestDb, id: i64) -> String {
    t.one(sqlx::query_scalar("SELECT password_hash FROM core.accounts WHERE account_id = $1").bind(id)).await
}

async fn sessions_of(t: &TestDb, id: i64) -> i64 {
    t.one(sqlx::query_scalar("SELECT count(*) FROM core.web_sessions WHERE account_id = $1").bind(id)).await
}

pub(crate) async fn events_of(t: &TestDb, id: i64) -> Vec<(String, Option<i64>)> {
    t.all(
        sqlx::query_as(
            "SELECT kind, actor_account_id FROM core.account_events WHERE account_id = $1 ORDER BY event_id",
        )
        .bind(id),
    )
    .await
}

/// What the account page's forms may write: the account's row, its tokens, its events, its
/// sessions and memberships.
pub(crate) async fn written(t: &TestDb, id: i64) -> (String, String, i64, i64, i64, i64) {
    t.one(
        sqlx::query_as(
            "SELECT a.email, a.password_hash,
                    (SELECT count(*) FROM core.account_tokens WHERE account_id = $1),
                    (SELECT count(*) FROM core.account_events WHERE account_id = $1),
                    (SELECT count(*) FROM core.web_sessions WHERE account_id = $1),
                    (SELECT count(*) FROM core.organization_members WHERE account_id = $1)
             FROM core.accounts a WHERE a.account_id = $1",
        )
        .bind(id),
    )
    .await
}

/// A new account (verified), with `role` in the demo's organization when given.
pub(crate) async fn another_account(t: &TestDb, email: &str, role: Option<&str>, operator: bool) -> i64 {
    let id = auth::ensure_account(
        &t.db,
        &Email::parse(email).unwrap(),
        &NewPassword::parse("another password").unwrap(),
        operator,
    )
    .await
    .unwrap();
    if let Some(role) = role {
        let org = organization_id(t, demo::DEMO_ORGANIZATION).await;
        t.run(
            sqlx::query(
                "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, $3)",
            )
            .bind(org)
            .bind(id.0)
            .bind(role),
        )
        .await;
    }
    id.0
}

/// The `<tr>` of the sessions table that holds `needle`, and the handle its End form sends.
fn session_handles(html: &str) -> Vec<(bool, String)> {
    html.split("<tr>")
        .filter(|row| row.contains(r#"name="session""#))
        .map(|row| {
            let at = row.find(r#"name="session" value=""#).unwrap() + r#"name="session" value=""#.len();
            (row.contains("This session"), row[at..at + 64].to_string())
        })
        .collect()
}

#[tokio::test]
async fn the_account_page_lists_the_sessions_marks_this_one_ends_another_and_signs_out_everywhere() {
    let (t, app) = app_with_demo().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let here = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let there = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = here.get("/account").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(demo::MEMBER_EMAIL));
    let handles = session_handles(&page.body);
    assert_eq!(handles.len(), 2, "{}", page.body);
    assert_eq!(handles.iter().filter(|(current, _)| *current).count(), 1, "one is marked as this one");
    let (_, other) = handles.iter().find(|(current, _)| !current).unwrap();

    let a = here.post("/account/sessions/end", &[("session", other)], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(there.get("/").await.status, StatusCode::SEE_OTHER, "the other browser is signed out");
    assert_eq!(here.get("/account").await.status, StatusCode::OK, "this one is not");
    assert_eq!(sessions_of(&t, member).await, 1);

    let a = here.post("/account/sessions/end-all", &[], false).await;
    assert_eq!((a.status, a.header("location")), (StatusCode::SEE_OTHER, Some("/login")));
    assert_eq!(sessions_of(&t, member).await, 0, "every session ended, this one included");
    assert_eq!(here.get("/account").await.status, StatusCode::SEE_OTHER, "this browser is signed out too");
    let kinds: Vec<String> = events_of(&t, member).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["sessions_ended", "sessions_ended"]);
}

#[tokio::test]
async fn changing_the_password_needs_the_current_one_and_ends_every_other_session_but_this_one() {
    let (t, app) = app_with_demo().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let here = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let there = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let before = written(&t, member).await;
    for htmx in [false, true] {
        let a = here
            .post("/account/password", &[("current_password", "not it at all"), ("new_password", NEW_PASSWORD)], htmx)
            .await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
        assert!(a.body.contains("That is not your current password."), "{}", a.body);
        assert!(!a.body.contains("not it at all"), "a password is never sent back");
        assert_eq!(written(&t, member).await, before, "nothing was written");
    }
    let a = here
        .post("/account/password", &[("current_password", demo::MEMBER_PASSWORD), ("new_password", NEW_PASSWORD)], true)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body.contains("Your password was changed, and 1 other session was signed out."), "{}", a.body);
    assert_eq!(there.get("/").await.status, StatusCode::SEE_OTHER, "the other session ended");
    assert_eq!(here.get("/").await.status, StatusCode::OK, "this one stays");
    assert_eq!(events_of(&t, member).await, [("password_changed".to_string(), Some(member))]);
    let c = app.client();
    assert_eq!(app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(app.sign_in(&c, demo::MEMBER_EMAIL, NEW_PASSWORD).await.status(), StatusCode::SEE_OTHER);
}

/// A form posted: its path, its fields, the status and a message the answer must carry.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, StatusCode, &'a str);

#[tokio::test]
async fn bad_account_forms_are_refused_with_a_message_and_write_nothing() {
    let (t, app) = app_with_demo().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let here = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let cases: &[Case] = &[
        (
            "/account/password",
            vec![("current_password", demo::MEMBER_PASSWORD), ("new_password", "short")],
            unprocessable,
            "A password needs at least 8 characters",
        ),
        ("/account/password", vec![("new_password", NEW_PASSWORD)], unprocessable, "Enter your current password."),
        ("/account/password", vec![("current_password", "x"), ("new_pasword", "y")], unprocessable, "new_pasword"),
        (
            "/account/email",
            vec![("email", "not an address"), ("password", demo::MEMBER_PASSWORD)],
            unprocessable,
            "is not an email address",
        ),
        ("/account/email", vec![("email", "new@example.com")], unprocessable, "Enter your password."),
        (
            "/account/email",
            vec![("email", "new@example.com"), ("password", demo::MEMBER_PASSWORD)],
            StatusCode::CONFLICT,
            "Mail is off on this console",
        ),
        ("/account/delete", vec![], unprocessable, "Enter your password to confirm."),
        ("/account/delete", vec![("password", "wrong password")], unprocessable, "That is not your current password."),
        ("/account/sessions/end", vec![("session", "abc")], unprocessable, "Choose a session from the page."),
    ];
    for (path, fields, status, message) in cases {
        for htmx in [false, true] {
            let before = written(&t, member).await;
            let a = here.post(path, fields, htmx).await;
            assert_eq!(a.status, *status, "{path} {fields:?} (htmx {htmx}): {}", a.body);
            assert!(a.body.contains(message), "{path} {fields:?} (htmx {htmx}): {}", a.body);
            assert_eq!(written(&t, member).await, before, "{path} {fields:?}: nothing was written");
        }
    }
    assert_eq!(here.get("/").await.status, StatusCode::OK, "still signed in");
}

pub(crate) fn mailing() -> Mailing {
    Mailing { host: "console.example.test".into(), base: "https://console.example.test".into() }
}

/// The mail jobs' payloads, oldest first.
pub(crate) async fn mail_jobs(t: &TestDb) -> Vec<serde_json::Value> {
    t.all(sqlx::query_scalar("SELECT payload FROM integration.jobs WHERE kind = 'send_mail' ORDER BY job_id")).await
}

#[tokio::test]
async fn an_email_change_mails_a_link_to_the_new_address_or_a_notice_when_it_is_taken_and_looks_the_same() {
    let t = demo_db().await;
    let keys = TokenKey::from_session_key(&[5; 64]);
    let member = AccountId(account_id(&t, demo::MEMBER_EMAIL).await);
    let password = Password::parse(demo::MEMBER_PASSWORD).unwrap();
    let wrong = Password::parse("not the password").unwrap();
    let new = Email::parse("member.new@example.com").unwrap();
    let e = settings::request_email_change(&t.db, &keys, member, &new, &wrong, Some(&mailing()), "192.0.2.1").await;
    assert!(matches!(e, Err(ServiceError::Invalid(_))), "{e:?}");
    assert!(mail_jobs(&t).await.is_empty(), "a wrong password mails nothing");

    settings::request_email_change(&t.db, &keys, member, &new, &password, Some(&mailing()), "192.0.2.1").await.unwrap();
    let jobs = mail_jobs(&t).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["mail"]["to"], "member.new@example.com");
    assert_eq!(jobs[0]["mail"]["subject"], "Confirm your new address");
    assert_eq!(jobs[0]["link"]["prefix"], "https://console.example.test/account/verify?token=");
    let pending: Vec<(String, String)> = t
        .all(
            sqlx::query_as("SELECT purpose, email FROM core.account_tokens WHERE account_id = $1 AND used_at IS NULL")
                .bind(member.0),
        )
        .await;
    assert_eq!(pending, [("change_email".to_string(), "member.new@example.com".to_string())]);
    let email: String =
        t.one(sqlx::query_scalar("SELECT email FROM core.accounts WHERE account_id = $1").bind(member.0)).await;
    assert_eq!(email, demo::MEMBER_EMAIL, "the address changes only when the link is opened");

    // The operator's address is taken: the same answer, a notice to it, no link anywhere.
    let taken = Email::parse(demo::OPERATOR_EMAIL).unwrap();
    settings::request_email_change(&t.db, &keys, member, &taken, &password, Some(&mailing()), "192.0.2.1")
        .await
        .unwrap();
    let jobs = mail_jobs(&t).await;
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[1]["mail"]["to"], demo::OPERATOR_EMAIL);
    assert!(jobs[1].get("link").is_none(), "no link for a taken address: {}", jobs[1]);
    let o = settings::overview(&t.db, member, None).await.unwrap();
    assert_eq!(o.pending_email.map(|(e, _)| e).as_deref(), Some(demo::OPERATOR_EMAIL), "the page shows it pending");
    let live: i64 = t
        .one(sqlx::query_scalar(
            "SELECT count(*) FROM core.account_tokens WHERE account_id = $1 AND purpose = 'change_email' AND used_at IS NULL",
        ).bind(member.0))
        .await;
    assert_eq!(live, 1, "the newer request retired the earlier link");
    let kinds: Vec<String> = events_of(&t, member.0).await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["email_change_requested", "email_change_requested"]);
}

#[tokio::test]
async fn deleting_the_last_owner_is_refused_naming_the_organization_and_otherwise_anonymises_the_account() {
    let (t, app) = app_with_demo().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let here = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let before = written(&t, member).await;
    let a = here.post("/account/delete", &[("password", demo::MEMBER_PASSWORD)], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("you are the last owner of the organization “Acme Wikis”"), "{}", a.body);
    assert!(a.body.contains("First make another member an owner"), "{}", a.body);
    assert_eq!(written(&t, member).await, before, "nothing was written");

    // A disabled second owner does not count; an enabled one does.
    let other = another_account(&t, "second.owner@example.com", Some("owner"), false).await;
    t.run(sqlx::query("UPDATE core.accounts SET disabled_at = now() WHERE account_id = $1").bind(other)).await;
    assert_eq!(
        here.post("/account/delete", &[("password", demo::MEMBER_PASSWORD)], false).await.status,
        StatusCode::CONFLICT
    );
    t.run(sqlx::query("UPDATE core.accounts SET disabled_at = NULL WHERE account_id = $1").bind(other)).await;

    let a = here.post("/account/delete", &[("password", demo::MEMBER_PASSWORD)], false).await;
    assert_eq!((a.status, a.header("location")), (StatusCode::SEE_OTHER, Some("/login")), "{}", a.body);
    let (email, hash, _, _, sessions, memberships) = written(&t, member).await;
    assert_eq!(email, format!("deleted-{member}@deleted.invalid"));
    assert!(!hash.starts_with("$argon2"), "no password opens it");
    assert_eq!((sessions, memberships), (0, 0));
    let deleted: bool = t
        .one(sqlx::query_scalar("SELECT deleted_at IS NOT NULL FROM core.accounts WHERE account_id = $1").bind(member))
        .await;
    assert!(deleted);
    assert_eq!(events_of(&t, member).await.last().unwrap().0, "deleted");
    let c = app.client();
    assert_eq!(app.sign_in(&c, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_last_operator_cannot_delete_themselves() {
    let t = demo_db().await;
    let op = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    let password = Password::parse(demo::OPERATOR_PASSWORD).unwrap();
    let e = settings::delete_account(&t.db, op, &password).await;
    assert!(matches!(&e, Err(ServiceError::Refused(m)) if m.contains("last operator")), "{e:?}");
    let second = another_account(&t, "second.op@example.com", None, true).await;
    settings::delete_account(&t.db, op, &password).await.unwrap();
    let operators: Vec<i64> =
        t.all(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE is_operator ORDER BY account_id")).await;
    assert_eq!(operators, [second]);
}

#[tokio::test]
async fn an_operator_lists_searches_and_pages_the_accounts_and_sees_one_with_its_history() {
    let (t, app) = app_with_demo().await;
    t.run(sqlx::query(
        "INSERT INTO core.accounts (email, password_hash) SELECT 'Bulk-' || lpad(g::text, 3, '0') || '@example.com', 'x'
         FROM generate_series(1, 120) g",
    ))
    .await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let home = op.get("/operator").await;
    assert!(home.body.contains(r#"href="/operator/accounts""#), "the operator's navigation links the accounts");
    let a = op.get("/operator/accounts?q=bulk-0").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body.contains("99 accounts"), "{}", a.body);
    assert!(a.body.contains("Bulk-001@example.com") && a.body.contains("Bulk-050@example.com"));
    assert!(!a.body.contains("Bulk-051@example.com"), "50 to a page");
    let last: i64 =
        t.one(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = 'Bulk-050@example.com'")).await;
    assert!(a.body.contains(&format!("after={last}")), "{}", a.body);
    let b = op.get(&format!("/operator/accounts?q=bulk-0&after={last}")).await;
    assert!(b.body.contains("Bulk-051@example.com") && b.body.contains("Bulk-099@example.com"), "{}", b.body);
    assert!(!b.body.contains("Bulk-050@example.com") && !b.body.contains("Bulk-100@example.com"));
    let r = op.get_htmx("/operator/accounts?q=BULK-11", "account-results").await;
    assert!(r.body.starts_with(r#"<div id="account-results">"#), "{}", r.body);
    assert!(r.body.contains("Bulk-119@example.com") && !r.body.contains("Bulk-099@example.com"));
    assert_eq!(op.get("/operator/accounts?after=nope").await.status, StatusCode::BAD_REQUEST);

    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let operator = account_id(&t, demo::OPERATOR_EMAIL).await;
    ops::set_operator(&t.db, AccountId(operator), AccountId(member), true).await.unwrap();
    let page = op.get(&format!("/operator/accounts/{member}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(demo::DEMO_ORGANIZATION) && page.body.contains("owner"), "{}", page.body);
    assert!(page.body.contains("Made an operator") && page.body.contains(demo::OPERATOR_EMAIL), "{}", page.body);
    assert_eq!(op.get("/operator/accounts/999999").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_accounts_list_reads_the_email_index_at_100000_accounts() {
    let t = demo_db().await;
    t.run(sqlx::query(
        "INSERT INTO core.accounts (email, password_hash) SELECT 'person-' || g || '@example.com', 'x'
         FROM generate_series(1, 100000) g",
    ))
    .await;
    t.run(sqlx::query("ANALYZE core.accounts")).await;
    for sql in [
        r#"SELECT account_id FROM core.accounts WHERE lower(email) COLLATE "C" LIKE 'person-4242%'
           ORDER BY lower(email) COLLATE "C", account_id LIMIT 51"#,
        r#"SELECT account_id FROM core.accounts WHERE lower(email) COLLATE "C" LIKE '%'
           AND (lower(email) COLLATE "C", account_id) > ('person-5', 1) ORDER BY lower(email) COLLATE "C", account_id LIMIT 51"#,
        r#"SELECT account_id FROM core.accounts WHERE lower(email) COLLATE "C" LIKE '%'
           ORDER BY lower(email) COLLATE "C" DESC, account_id DESC LIMIT 51"#,
    ] {
        let rows: Vec<String> = t.all(sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))).await;
        let p = rows.join("\n");
        assert!(p.contains("accounts_email_order") && !p.contains("Seq Scan"), "{sql}\n{p}");
    }
    let started = std::time::Instant::now();
    let list = ops::accounts(&t.db, "person-4242", member_console::store::paging::Seek::First).await.unwrap();
    // Byte order: "person-42420@" sorts before "person-4242@" ('0' < '@').
    let emails: Vec<&str> = list.page.rows.iter().map(|r| r.email.as_str()).collect();
    assert_eq!(emails.first().copied(), Some("person-42420@example.com"), "{emails:?}");
    assert!(emails.contains(&"person-4242@example.com"), "{emails:?}");
    assert_eq!(list.total, (11, false), "person-4242 and person-42420..42429");
    let last = ops::accounts(&t.db, "", member_console::store::paging::Seek::Last).await.unwrap();
    assert_eq!(last.page.rows.len(), 50);
    assert_eq!(last.total, (1000, true), "a large list says “at least”");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_disabled_account_cannot_sign_in_and_its_sessions_end() {
    let (t, app) = app_with_demo().await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let operator = account_id(&t, demo::OPERATOR_EMAIL).await;
    let colleague = another_account(&t, "colleague@example.com", Some("member"), false).await;
    let theirs = Session::sign_in(&app, "colleague@example.com", "another password").await;
    assert_eq!(theirs.get("/").await.status, StatusCode::OK);

    let a = op.post(&format!("/operator/accounts/{colleague}/disable"), &[], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(sessions_of(&t, colleague).await, 0);
    assert_eq!(theirs.get("/").await.status, StatusCode::SEE_OTHER, "signed out");
    let c = app.client();
    let r = app.sign_in(&c, "colleague@example.com", "another password").await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("This account is disabled."));
    assert!(
        matches!(
            auth::sign_in(&t.db, &Email::parse("colleague@example.com").unwrap(), "wrong", "192.0.2.9", None).await,
            Err(AuthError::InvalidCredentials)
        ),
        "a wrong password learns nothing of the account"
    );
    let page = op.get(&format!("/operator/accounts/{colleague}")).await;
    assert!(page.body.contains("Disabled") && page.body.contains(">Enable<"), "{}", page.body);

    let a = op.post(&format!("/operator/accounts/{colleague}/enable"), &[], true).await;
    assert_eq!(a.header("hx-redirect"), Some(format!("/operator/accounts/{colleague}").as_str()));
    assert_eq!(app.sign_in(&c, "colleague@example.com", "another password").await.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        events_of(&t, colleague).await,
        [("disabled".to_string(), Some(operator)), ("enabled".to_string(), Some(operator))]
    );

    // Refused in words, nothing written: the last owner of an organization, and oneself.
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let a = op.post(&format!("/operator/accounts/{member}/disable"), &[], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("it is the last owner not disabled of “Acme Wikis”"), "{}", a.body);
    let a = op.post(&format!("/operator/accounts/{operator}/disable"), &[], false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("You cannot disable your own account"), "{}", a.body);
    let disabled: i64 =
        t.one(sqlx::query_scalar("SELECT count(*) FROM core.accounts WHERE disabled_at IS NOT NULL")).await;
    assert_eq!(disabled, 0);
}

#[tokio::test]
async fn nobody_demotes_themselves_and_the_last_operator_stays_one() {
    let t = demo_db().await;
    let op = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    let e = ops::set_operator(&t.db, op, op, false).await;
    assert!(matches!(&e, Err(ServiceError::Refused(m)) if m.contains("your own operator role")), "{e:?}");
    let member = AccountId(account_id(&t, demo::MEMBER_EMAIL).await);
    let e = ops::set_operator(&t.db, member, op, false).await;
    assert!(matches!(&e, Err(ServiceError::Refused(m)) if m.contains("no longer an operator")), "{e:?}");
    let operators: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.accounts WHERE is_operator")).await;
    assert_eq!(operators, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_operators_demoting_each_other_at_once_leave_one_operator() {
    let t = demo_db().await;
    let first = AccountId(another_account(&t, "first.op@example.com", None, true).await);
    let second = AccountId(another_account(&t, "second.op@example.com", None, true).await);
    let demo_op = AccountId(account_id(&t, demo::OPERATOR_EMAIL).await);
    ops::set_operator(&t.db, first, demo_op, false).await.unwrap();
    // Both wait behind the lowest operator row, then run one after the other.
    let (mut hold, holder) = crate::common::hold_open(
        &t,
        &format!("SELECT 1 FROM core.accounts WHERE account_id = {} FOR NO KEY UPDATE", first.0.min(second.0)),
    )
    .await;
    let (db1, db2) = (t.db.clone(), t.db.clone());
    let a = tokio::spawn(async move { ops::set_operator(&db1, first, second, false).await });
    let b = tokio::spawn(async move { ops::set_operator(&db2, second, first, false).await });
    let start = std::time::Instant::now();
    loop {
        // The first waits on the holder, the second on the first (the row's queue).
        let waiting: i64 = t
            .one(
                sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1
                   AND cardinality(pg_blocking_pids(pid)) > 0",
                )
                .bind(holder),
            )
            .await;
        if waiting == 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "both demotions wait on the operators' rows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("COMMIT").execute(&mut *hold).await.unwrap();
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let done = [&a, &b].iter().filter(|r| r.is_ok()).count();
    assert_eq!(done, 1, "{a:?} {b:?}");
    let refused = if a.is_err() { &a } else { &b };
    assert!(matches!(refused, Err(ServiceError::Refused(m)) if m.contains("no longer an operator")), "{refused:?}");
    let operators: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.accounts WHERE is_operator")).await;
    assert_eq!(operators, 1, "one operator is left");
}

/// Operators only: a member is refused the operators' account pages and acts.
#[tokio::test]
async fn a_member_is_refused_the_operators_account_pages() {
    let (t, app) = app_with_demo().await;
    let member = account_id(&t, demo::MEMBER_EMAIL).await;
    let m = Session::sign_in(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    assert_eq!(m.get("/operator/accounts").await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        m.post(&format!("/operator/accounts/{member}/operator/grant"), &[], false).await.status,
        StatusCode::FORBIDDEN
    );
    let operators: i64 = t.one(sqlx::query_scalar("SELECT count(*) FROM core.accounts WHERE is_operator")).await;
    assert_eq!(operators, 1);
}
