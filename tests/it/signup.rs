//! Sign-up, email verification and password reset (issue 38, part "signup"): the pages as a
//! person meets them, the links read from the mail jobs' payloads (seed + the server's key),
//! bad input refused with nothing written, and the concurrency of a link's single use; the
//! row-level walks of the paths are in walk_signup.rs.

use member_console::{
    config::{Config, SignupMode},
    db::Db,
    ids::{AccountId, OrgTypeId},
    services::{
        auth::{Email, NewPassword},
        mail::SendMail,
        organizations::OrgName,
        signup::{self, Links, SignUp, SignedUp, UsedLink},
        tokens::{Seed, Token, TokenKey},
    },
    store::account_tokens::{self, TokenPurpose},
};
use reqwest::{Client, StatusCode};

use crate::common::{TEST_RUNTIME_PASSWORD, TestDb, locks::LockWalk, pages::demo_db};

// Helpers ------------------------------------------------------------------------------------------------

/// A console with mail on and sign-up as `mode`, and the key its links are made under.
struct App {
    base: String,
    key: TokenKey,
}

impl App {
    async fn spawn(t: &TestDb, mode: SignupMode) -> App {
        let dir = std::env::temp_dir().join(format!("mc-test-{}", t.name));
        let mut config = Config::from_lookup(|k| match k {
            "CONSOLE_DATA_DIR" => Some(dir.display().to_string()),
            "CONSOLE_BIND" => Some("127.0.0.1:0".into()),
            "CONSOLE_RUNTIME_DB_PASSWORD" => Some(TEST_RUNTIME_PASSWORD.into()),
            _ => None,
        })
        .unwrap();
        config.signup = Some(mode);
        let key = TokenKey::from_session_key(&config.session_key);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let connected = member_console::web::Connected { stripe: None, farm: None, mail: true, local_dns: None };
        let server =
            member_console::web::serve_connected(listener, t.db.clone(), std::sync::Arc::new(config), connected)
                .unwrap();
        tokio::spawn(server);
        App { base, key }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn client(&self) -> Client {
        Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap()
    }

    async fn csrf(&self, c: &Client, path: &str) -> String {
        let html = c.get(self.url(path)).send().await.unwrap().text().await.unwrap();
        crate::common::csrf_from(&html).unwrap_or_else(|| panic!("no csrf token on {path}: {html}"))
    }

    async fn post(&self, c: &Client, path: &str, csrf_from: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
        let token = self.csrf(c, csrf_from).await;
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        f.push(("csrf_token", &token));
        let r = c.post(self.url(path)).form(&f).send().await.unwrap();
        let status = r.status();
        let location = r.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("").to_string();
        let body = r.text().await.unwrap();
        (status, if body.is_empty() { location } else { body })
    }

    async fn sign_in(&self, c: &Client, email: &str, password: &str) -> StatusCode {
        self.post(c, "/login", "/login", &[("email", email), ("password", password)]).await.0
    }
}

/// The links the services make in these tests (only the tokens matter).
pub(crate) fn links(key: &TokenKey) -> Links {
    Links {
        key: key.clone(),
        host: "console.example.test".into(),
        verify: "http://console.example.test/account/verify?token=".into(),
        reset: "http://console.example.test/password/reset?token=".into(),
        sign_in: "http://console.example.test/login".into(),
        forgot: "http://console.example.test/password/forgot".into(),
    }
}

/// The mail jobs to `to`, oldest first.
pub(crate) async fn mails_to(t: &TestDb, to: &str) -> Vec<SendMail> {
    let payloads: Vec<serde_json::Value> = t
        .all(
            sqlx::query_scalar(
                "SELECT payload FROM integration.jobs WHERE kind = 'send_mail' AND lower(payload->'mail'->>'to') = lower($1)
                 ORDER BY job_id",
            )
            .bind(to.to_string()),
        )
        .await;
    payloads.into_iter().map(|p| serde_json::from_value(p).unwrap()).collect()
}

/// The token of the newest mail to `to` that holds a link.
pub(crate) async fn last_token(t: &TestDb, key: &TokenKey, to: &str) -> String {
    let m = mails_to(t, to).await.into_iter().rev().find(|m| m.link.is_some()).expect("a mail with a link");
    let url = m.link.unwrap().url(key);
    url.rsplit("token=").next().unwrap().to_string()
}

async fn community(t: &TestDb) -> OrgTypeId {
    OrgTypeId(t.one(sqlx::query_scalar("SELECT org_type_id FROM core.org_types WHERE name = 'Community'")).await)
}

pub(crate) async fn ready(t: &TestDb) -> OrgTypeId {
    let ty = community(t).await;
    signup::choose_signup_type(&t.db, ty).await.unwrap();
    ty
}

pub(crate) async fn count(t: &TestDb, sql: &str) -> i64 {
    crate::common::acts::scalar(t, sql).await
}

pub(crate) fn command(email: &str, org: &str) -> SignUp {
    SignUp {
        email: Email::parse(email).unwrap(),
        password: NewPassword::parse("a long password").unwrap(),
        organization: OrgName::parse(org).unwrap(),
    }
}

pub(crate) async fn account_of(t: &TestDb, email: &str) -> (AccountId, bool) {
    let (id, verified): (i64, bool) = t
        .one(
            sqlx::query_as(
                "SELECT account_id, email_verified_at IS NOT NULL FROM core.accounts WHERE lower(email) = lower($1)",
            )
            .bind(email.to_string()),
        )
        .await;
    (AccountId(id), verified)
}

// Sign-up and verification through the pages ------------------------------------------------------------

#[tokio::test]
async fn a_sign_up_makes_an_unverified_owner_of_a_new_organization_of_the_sign_up_type_and_an_existing_email_gets_the_same_answer_and_a_notice()
 {
    let t = demo_db().await;
    let ty = ready(&t).await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let c = app.client();
    let form = c.get(app.url("/signup")).send().await.unwrap().text().await.unwrap();
    assert!(form.contains(r#"<form method="post" action="/signup">"#), "{form}");

    let fields = [("email", "new@example.test"), ("password", "a long password"), ("organization", "New Wikis")];
    let (status, new) = app.post(&c, "/signup", "/signup", &fields).await;
    assert_eq!(status, StatusCode::OK);
    assert!(new.contains("Check your email: we sent a link to new@example.test."), "{new}");
    let (account, verified) = account_of(&t, "new@example.test").await;
    assert!(!verified, "a new account is unverified");
    let (org_type, role): (Option<i64>, String) = t
        .one(
            sqlx::query_as(
                "SELECT o.org_type_id, m.role FROM core.organization_members m JOIN core.organizations o USING (organization_id)
                 WHERE m.account_id = $1 AND o.name = 'New Wikis'",
            )
            .bind(account.0),
        )
        .await;
    assert_eq!((org_type, role.as_str()), (Some(ty.0), "owner"));
    assert_eq!(
        count(&t, "SELECT count(*) FROM core.account_events WHERE kind = 'signed_up'").await,
        1,
        "the sign-up is recorded"
    );
    assert_eq!(mails_to(&t, "new@example.test").await.len(), 1);
    assert!(c.get(app.url("/")).send().await.unwrap().status().is_redirection(), "nobody was signed in");

    // The same email again, in another case, from another browser: the same answer.
    let other = app.client();
    let again = [("email", "NEW@example.test"), ("password", "another password"), ("organization", "Other")];
    let (status2, existing) = app.post(&other, "/signup", "/signup", &again).await;
    assert_eq!(status2, status);
    assert_eq!(existing.replace("NEW@", "new@"), new.replace(&csrf_in(&new), &csrf_in(&existing)));
    assert_eq!(count(&t, "SELECT count(*) FROM core.accounts WHERE lower(email) = 'new@example.test'").await, 1);
    assert_eq!(count(&t, "SELECT count(*) FROM core.organizations WHERE name = 'Other'").await, 0);
    let mails = mails_to(&t, "new@example.test").await;
    assert_eq!(mails.len(), 2);
    assert!(mails[1].mail.subject.contains("Someone tried to sign up") && mails[1].link.is_none());
    assert!(mails[1].mail.text.contains("/password/forgot"), "{}", mails[1].mail.text);
}

fn csrf_in(html: &str) -> String {
    crate::common::csrf_from(html).unwrap_or_default()
}

#[tokio::test]
async fn an_unverified_account_signs_in_sees_the_banner_is_refused_buying_and_creating_sites_in_words_then_verifies_by_the_links_button()
 {
    let t = demo_db().await;
    ready(&t).await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let c = app.client();
    let fields = [("email", "ver@example.test"), ("password", "a long password"), ("organization", "Ver Org")];
    app.post(&c, "/signup", "/signup", &fields).await;
    assert_eq!(app.sign_in(&c, "ver@example.test", "a long password").await, StatusCode::SEE_OTHER);
    let home = c.get(app.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(home.contains("Verify your email address: we sent a link to") && home.contains("Send the link again"));

    let org: i64 =
        t.one(sqlx::query_scalar("SELECT organization_id FROM core.organizations WHERE name = 'Ver Org'")).await;
    let org = org.to_string();
    let sessions_before = count(&t, "SELECT count(*) FROM core.outbox").await;
    let (status, said) = app
        .post(&c, "/billing/checkout", "/", &[("organization_id", &org), ("price_id", "1"), ("quantity", "1")])
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{said}");
    assert!(said.contains("Verify your email address first to buy a plan"), "{said}");
    assert_eq!(count(&t, "SELECT count(*) FROM core.outbox").await, sessions_before);
    let (status, said) = app.post(&c, "/sites", "/", &[("organization_id", &org), ("name", "mine")]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{said}");
    assert!(said.contains("Verify your email address first to create a site"), "{said}");
    assert_eq!(count(&t, "SELECT count(*) FROM fedwiki.lifecycle_requests").await, 0, "nothing was asked of the farm");

    // The link: its GET shows a button and uses nothing; the POST verifies and goes home.
    let token = last_token(&t, &app.key, "ver@example.test").await;
    let page = c.get(app.url(&format!("/account/verify?token={token}"))).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("Verify my email address"));
    assert_eq!(count(&t, "SELECT count(*) FROM core.account_tokens WHERE used_at IS NOT NULL").await, 0);
    let (status, to) = app.post(&c, "/account/verify", "/", &[("token", &token)]).await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/"));
    assert!(account_of(&t, "ver@example.test").await.1);
    let home = c.get(app.url("/")).send().await.unwrap().text().await.unwrap();
    assert!(!home.contains("Send the link again"), "the banner is gone");
    // Used once: again, it is gone (410) and says so.
    let (status, said) = app.post(&app.client(), "/account/verify", "/login", &[("token", &token)]).await;
    assert_eq!(status, StatusCode::GONE);
    assert!(said.contains("was used already"), "{said}");
}

#[tokio::test]
async fn a_verification_from_a_browser_not_signed_in_lands_on_sign_in_and_resend_retires_the_old_link() {
    let t = demo_db().await;
    ready(&t).await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let c = app.client();
    let fields = [("email", "re@example.test"), ("password", "a long password"), ("organization", "Re Org")];
    app.post(&c, "/signup", "/signup", &fields).await;
    let first = last_token(&t, &app.key, "re@example.test").await;
    app.sign_in(&c, "re@example.test", "a long password").await;
    let (status, said) = app.post(&c, "/account/verify/resend", "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(said.contains("We sent a new link to re@example.test"), "{said}");
    let second = last_token(&t, &app.key, "re@example.test").await;
    assert_ne!(first, second);
    let stranger = app.client();
    let (status, _) = app.post(&stranger, "/account/verify", "/login", &[("token", &first)]).await;
    assert_eq!(status, StatusCode::GONE, "the older link was retired");
    let (status, to) = app.post(&stranger, "/account/verify", "/login", &[("token", &second)]).await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/login?verified=1"));
    let login = stranger.get(app.url(&to)).send().await.unwrap().text().await.unwrap();
    assert!(login.contains("Your email is verified; sign in."), "{login}");
    assert!(account_of(&t, "re@example.test").await.1);
}

#[tokio::test]
async fn sign_up_by_invitation_says_so_closed_has_no_page_and_no_link_and_open_without_a_type_says_it_is_not_ready() {
    let t = demo_db().await;
    let invite = App::spawn(&t, SignupMode::Invite).await;
    let page = invite.client().get(invite.url("/signup")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("Sign-up here is by invitation"), "{page}");
    let (status, _) = invite
        .post(
            &invite.client(),
            "/signup",
            "/login",
            &[("email", "a@example.test"), ("password", "a long password"), ("organization", "A")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let login = invite.client().get(invite.url("/login")).send().await.unwrap().text().await.unwrap();
    assert!(login.contains("/password/forgot") && !login.contains(r#"href="/signup""#));

    let closed = App::spawn(&t, SignupMode::Closed).await;
    assert_eq!(closed.client().get(closed.url("/signup")).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let login = closed.client().get(closed.url("/login")).send().await.unwrap().text().await.unwrap();
    assert!(!login.contains(r#"href="/signup""#));

    let open = App::spawn(&t, SignupMode::Open).await;
    let login = open.client().get(open.url("/login")).send().await.unwrap().text().await.unwrap();
    assert!(login.contains(r#"href="/signup""#), "an open console offers sign-up");
    let page = open.client().get(open.url("/signup")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("Sign-up is not ready yet"), "{page}");
    let (status, _) = open
        .post(
            &open.client(),
            "/signup",
            "/login",
            &[("email", "a@example.test"), ("password", "a long password"), ("organization", "A")],
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(count(&t, "SELECT count(*) FROM core.accounts WHERE email = 'a@example.test'").await, 0);
}

// Bad input --------------------------------------------------------------------------------------------------

#[tokio::test]
async fn bad_input_is_refused_with_a_clear_4xx_and_nothing_written() {
    let t = demo_db().await;
    ready(&t).await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let c = app.client();
    let jobs = count(&t, "SELECT count(*) FROM integration.jobs").await;
    let accounts = count(&t, "SELECT count(*) FROM core.accounts").await;

    let (status, said) = app
        .post(&c, "/signup", "/signup", &[("email", "not-an-email"), ("password", "short"), ("organization", "")])
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        said.contains("is not an email address")
            && said.contains("at least 8 characters")
            && said.contains("needs a name"),
        "{said}"
    );
    let (status, said) = app.post(&c, "/password/forgot", "/password/forgot", &[("email", "nobody")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(said.contains("is not an email address"), "{said}");

    // A link: malformed, tampered (one digit changed), expired, and of another purpose.
    let (status, said) = app.post(&c, "/account/verify", "/login", &[("token", "abc")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(said.contains("This link is not complete"), "{said}");
    let account = account_of(&t, "member@example.com").await.0;
    let key = app.key.clone();
    let make = async |purpose, valid_ms: u64| {
        let token = key.token(&Seed::new());
        let mut c = t.db.pool.acquire().await.unwrap();
        account_tokens::insert(
            &mut c,
            account,
            purpose,
            "member@example.com",
            &token.hash(),
            std::time::Duration::from_millis(valid_ms),
        )
        .await
        .unwrap();
        token.as_str().to_string()
    };
    let good = make(TokenPurpose::VerifyEmail, 3_600_000).await;
    let flip = if good.ends_with('0') { '1' } else { '0' };
    let tampered = format!("{}{flip}", &good[..63]);
    let expired = make(TokenPurpose::VerifyEmail, 1).await;
    let reset = make(TokenPurpose::ResetPassword, 3_600_000).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let jobs_now = count(&t, "SELECT count(*) FROM integration.jobs").await;
    for (token, want, words) in [
        (tampered.as_str(), StatusCode::NOT_FOUND, "not one we sent"),
        (expired.as_str(), StatusCode::GONE, "has expired"),
        (reset.as_str(), StatusCode::NOT_FOUND, "not one we sent"),
    ] {
        let got = c.get(app.url(&format!("/account/verify?token={token}"))).send().await.unwrap();
        assert_eq!(got.status(), want, "GET {token}");
        let (status, said) = app.post(&c, "/account/verify", "/login", &[("token", token)]).await;
        assert_eq!(status, want, "POST {token}");
        assert!(said.contains(words), "{said}");
    }
    let (status, _) =
        app.post(&c, "/password/reset", "/login", &[("token", &good), ("password", "a new long password")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a verification link does not reset a password");
    assert_eq!(count(&t, "SELECT count(*) FROM core.account_tokens WHERE used_at IS NOT NULL").await, 0);
    assert_eq!(count(&t, "SELECT count(*) FROM core.accounts").await, accounts);
    assert_eq!(count(&t, "SELECT count(*) FROM integration.jobs").await, jobs_now);
    assert_eq!(jobs_now, jobs, "no mail either");
}

// Forgot and reset -------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_sixth_forgot_for_one_email_in_an_hour_sends_nothing_and_answers_the_same_as_an_unknown_email() {
    let t = demo_db().await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let c = app.client();
    let mut answers = vec![];
    for _ in 0..6 {
        let (status, said) =
            app.post(&c, "/password/forgot", "/password/forgot", &[("email", "member@example.com")]).await;
        answers.push((status, said.replace(&csrf_in(&said), "")));
    }
    assert_eq!(mails_to(&t, "member@example.com").await.len(), 5, "the sixth sent nothing");
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "every answer is the same");
    assert!(answers[0].1.contains("If an account has the address member@example.com, we sent it a link"));
    let (status, unknown) =
        app.post(&c, "/password/forgot", "/password/forgot", &[("email", "nobody@example.test")]).await;
    assert_eq!(
        (status, unknown.replace(&csrf_in(&unknown), "").replace("nobody@example.test", "member@example.com")),
        answers[0]
    );
    assert!(mails_to(&t, "nobody@example.test").await.is_empty());
}

#[tokio::test]
async fn a_reset_sets_the_password_ends_every_session_signs_this_browser_in_and_works_once() {
    let t = demo_db().await;
    let app = App::spawn(&t, SignupMode::Open).await;
    let old = app.client();
    assert_eq!(app.sign_in(&old, "member@example.com", "demo-member").await, StatusCode::SEE_OTHER);
    assert_eq!(old.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK);
    let browser = app.client();
    app.post(&browser, "/password/forgot", "/password/forgot", &[("email", "member@example.com")]).await;
    let token = last_token(&t, &app.key, "member@example.com").await;
    let page = browser.get(app.url(&format!("/password/reset?token={token}"))).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains(r#"name="password" type="password""#));
    let (status, said) =
        app.post(&browser, "/password/reset", "/login", &[("token", &token), ("password", "short")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(said.contains("at least 8 characters"), "{said}");
    let (status, to) = app
        .post(&browser, "/password/reset", "/login", &[("token", &token), ("password", "a brand new password")])
        .await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/"));
    assert_eq!(browser.get(app.url("/")).send().await.unwrap().status(), StatusCode::OK, "this browser is signed in");
    assert!(old.get(app.url("/")).send().await.unwrap().status().is_redirection(), "the old session ended");
    assert_eq!(count(&t, "SELECT count(*) FROM core.web_sessions w JOIN core.accounts a USING (account_id) WHERE a.email = 'member@example.com'").await, 1);
    assert_eq!(app.sign_in(&app.client(), "member@example.com", "demo-member").await, StatusCode::UNAUTHORIZED);
    assert_eq!(app.sign_in(&app.client(), "member@example.com", "a brand new password").await, StatusCode::SEE_OTHER);
    let notice = mails_to(&t, "member@example.com").await.pop().unwrap();
    assert_eq!(notice.mail.subject, "Your password was reset");
    assert_eq!(count(&t, "SELECT count(*) FROM core.account_events WHERE kind = 'password_reset'").await, 1);
    let (status, _) = app
        .post(&app.client(), "/password/reset", "/login", &[("token", &token), ("password", "yet another password")])
        .await;
    assert_eq!(status, StatusCode::GONE, "a reset link works once");
}

// Concurrency -------------------------------------------------------------------------------------------------

pub(crate) async fn signed_up(t: &TestDb, key: &TokenKey, email: &str) -> (AccountId, Token) {
    let out =
        signup::sign_up(&t.db, &links(key), "192.0.2.50", &command(email, &format!("Org of {email}"))).await.unwrap();
    let SignedUp::Created { account_id, .. } = out else { panic!("{out:?}") };
    (account_id, Token::parse(&last_token(t, key, email).await).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_uses_of_one_verification_link_at_once_verify_once_and_the_other_is_told_it_was_used() {
    let t = demo_db().await;
    ready(&t).await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let (_, token) = signed_up(&t, &key, "twice@example.test").await;
    let l = links(&key);
    let (a, b) = tokio::join!(signup::use_email_token(&t.db, &l, &token), signup::use_email_token(&t.db, &l, &token));
    let oks = [&a, &b].iter().filter(|r| r.is_ok()).count();
    assert_eq!(oks, 1, "{a:?} {b:?}");
    let refused = if a.is_ok() { b } else { a };
    assert!(refused.unwrap_err().to_string().contains("used already"));
    assert_eq!(count(&t, "SELECT count(*) FROM core.account_events WHERE kind = 'email_verified'").await, 1);
}

/// A change_email link, as the account part makes one.
async fn change_link(t: &TestDb, key: &TokenKey, account: AccountId, to: &str) -> Token {
    let token = key.token(&Seed::new());
    let mut c = t.db.pool.acquire().await.unwrap();
    account_tokens::insert(
        &mut c,
        account,
        TokenPurpose::ChangeEmail,
        to,
        &token.hash(),
        std::time::Duration::from_secs(3600),
    )
    .await
    .unwrap();
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verification_paused_on_its_link_while_the_email_changes_is_refused_in_words_and_the_new_address_is_the_verified_one()
 {
    let t = demo_db().await;
    ready(&t).await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let (account, verify) = signed_up(&t, &key, "old@example.test").await;
    let change = change_link(&t, &key, account, "new-address@example.test").await;
    let l = links(&key);
    // The verification holds its link's row and is about to take the account's.
    let l2 = l.clone();
    let w = LockWalk::start(&t, &signup::USE_EMAIL_TOKEN_LOCKS, 2, move |db: Db| async move {
        signup::use_email_token(&db, &l2, &verify).await
    })
    .await;
    // Meanwhile the email change (another link, another row) goes through whole.
    let changed = signup::use_email_token(&t.db, &l, &change).await.unwrap();
    assert_eq!(changed, UsedLink::EmailChanged { account_id: account, email: "new-address@example.test".into() });
    let verified = w.finish().await;
    let e = verified.unwrap_err().to_string();
    assert!(e.contains("verifies old@example.test, which is no longer the account's address"), "{e}");
    let (email, ok): (String, bool) = t
        .one(
            sqlx::query_as("SELECT email, email_verified_at IS NOT NULL FROM core.accounts WHERE account_id = $1")
                .bind(account.0),
        )
        .await;
    assert_eq!((email.as_str(), ok), ("new-address@example.test", true));
    let notice = mails_to(&t, "old@example.test").await.pop().unwrap();
    assert_eq!(notice.mail.subject, "Your email address changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verification_holding_the_account_row_makes_the_email_change_wait_and_both_leave_the_new_address_verified() {
    let t = demo_db().await;
    ready(&t).await;
    let key = TokenKey::from_session_key(&[5; 64]);
    let (account, verify) = signed_up(&t, &key, "first@example.test").await;
    let change = change_link(&t, &key, account, "second@example.test").await;
    let l = links(&key);
    let l2 = l.clone();
    let mut w = LockWalk::start(&t, &signup::USE_EMAIL_TOKEN_LOCKS, 2, move |db: Db| async move {
        signup::use_email_token(&db, &l2, &verify).await
    })
    .await;
    assert!(w.step().await, "paused after the account's row");
    let db = t.db.clone();
    let racing = tokio::spawn(async move { signup::use_email_token(&db, &l, &change).await });
    // The change waits on the account row the verification holds.
    crate::common::wait_for_waiter(&t.admin, &t.name, w.paused_pid()).await;
    assert!(w.finish().await.is_ok(), "the verification of the old address went first");
    assert!(racing.await.unwrap().is_ok());
    let (email, ok): (String, bool) = t
        .one(
            sqlx::query_as("SELECT email, email_verified_at IS NOT NULL FROM core.accounts WHERE account_id = $1")
                .bind(account.0),
        )
        .await;
    assert_eq!((email.as_str(), ok), ("second@example.test", true));
}

#[path = "browser_signup.rs"]
mod browser_signup;
