//! The harness of the page tests: a signed-in browser-like client, and answers read whole.

use member_console::demo;
use reqwest::{Client, StatusCode, header::HeaderMap};

use super::{TestApp, TestDb, acts::id_by_name};

pub async fn demo_db() -> TestDb {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    t
}

/// The demo and a running console; nobody signed in yet.
pub async fn app_with_demo() -> (TestDb, TestApp) {
    let t = demo_db().await;
    let app = TestApp::spawn(&t).await;
    (t, app)
}

/// A client signed in as `email`, and its CSRF token.
pub async fn signed_in(app: &TestApp, email: &str, password: &str) -> (Client, String) {
    let c = app.client();
    let r = app.sign_in(&c, email, password).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "sign-in as {email}");
    let token = app.csrf(&c, "/").await;
    (c, token)
}

/// The demo, a running console and a signed-in operator's session.
pub async fn operator_session() -> (TestDb, Session) {
    let (t, app) = app_with_demo().await;
    let op = Session::sign_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    (t, op)
}

/// One signed-in person on a running console: the client that holds their cookie and the CSRF
/// token that goes with it, which every request of theirs carries.
pub struct Session {
    pub app: TestApp,
    pub client: Client,
    pub token: String,
}

impl Session {
    /// Signs `email` in on `app` (a handle to the same running console).
    pub async fn sign_in(app: &TestApp, email: &str, password: &str) -> Session {
        let (client, token) = signed_in(app, email, password).await;
        Session { app: app.clone(), client, token }
    }

    pub async fn get(&self, path: &str) -> Answer {
        get(&self.app, &self.client, path).await
    }

    /// A form post with this session's CSRF token, as htmx sends it if `htmx`.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)], htmx: bool) -> Answer {
        post(&self.app, &self.client, path, &self.token, fields, htmx).await
    }

    /// A GET as htmx sends it when it swaps `target`.
    pub async fn get_htmx(&self, path: &str, target: &str) -> Answer {
        let rb = self.client.get(self.app.url(path)).header("HX-Request", "true").header("HX-Target", target);
        answer(rb.send().await.unwrap()).await
    }

    /// Post each case to `path` plainly and with HTMX: each must be refused (`assert_refused`)
    /// and leave `written` (what the area's tables hold) as it was.
    pub async fn refuse_all<W: PartialEq + std::fmt::Debug>(
        &self,
        path: &str,
        container: &str,
        cases: &[RefusalCase<'_>],
        written: impl AsyncFn() -> W,
    ) {
        for (case, fields, status, message) in cases {
            for htmx in [false, true] {
                let before = written().await;
                let a = self.post(path, fields, htmx).await;
                let label = format!("{path} {case} (htmx: {htmx})");
                assert_refused(&a, *status, htmx, container, message, &label);
                assert_eq!(written().await, before, "{label}: nothing was written");
            }
        }
    }

    /// Post each form, plainly and then with HTMX, with a field it does not have (`misspelt`:
    /// refused naming that field) and without one it needs (`missing`: refused with that field's
    /// message): each a 422, and `written` (what the area's tables hold) as it was before.
    pub async fn refuse_misspelt_and_missing<W: PartialEq + std::fmt::Debug>(
        &self,
        misspelt: &[FieldCase<'_>],
        missing: &[FieldCase<'_>],
        written: impl AsyncFn() -> W,
    ) {
        let before = written().await;
        for htmx in [false, true] {
            for (path, fields, name) in misspelt {
                let a = self.post(path, fields, htmx).await;
                let case = format!("{path} with {name} (htmx: {htmx})");
                assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {}", a.body);
                assert!(a.body.contains(&format!("This form has no field “{name}”")), "{case}: {}", a.body);
                assert_eq!(written().await, before, "{case}: nothing was written");
            }
            for (path, fields, message) in missing {
                let a = self.post(path, fields, htmx).await;
                let case = format!("{path} without a field (htmx: {htmx})");
                assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {}", a.body);
                assert!(a.body.contains(message), "{case}: {}", a.body);
                assert_eq!(written().await, before, "{case}: nothing was written");
            }
        }
    }
}

/// A form posted with a field misspelt or left out: its path, the fields sent, and the field's
/// name (misspelt) or the message its refusal carries (missing).
pub type FieldCase<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub async fn answer(r: reqwest::Response) -> Answer {
    let status = r.status();
    let headers = r.headers().clone();
    let body = r.text().await.unwrap();
    Answer { status, headers, body }
}

pub async fn get(app: &TestApp, c: &Client, path: &str) -> Answer {
    answer(c.get(app.url(path)).send().await.unwrap()).await
}

pub async fn post(app: &TestApp, c: &Client, path: &str, token: &str, fields: &[(&str, &str)], htmx: bool) -> Answer {
    let mut form: Vec<(&str, &str)> = fields.to_vec();
    form.push(("csrf_token", token));
    let mut rb = c.post(app.url(path)).form(&form);
    if htmx {
        rb = rb.header("HX-Request", "true").header("X-CSRF-Token", token);
    }
    answer(rb.send().await.unwrap()).await
}

/// Every page and form of the operator's area, tried as a member (refused: "This page is for
/// operators.", plain and HTMX) and as a visitor (sent to sign in, a page's address kept as
/// `next`).
pub async fn assert_operators_only(app: &TestApp, pages: &[String], forms: &[(String, Vec<(&str, &str)>)]) {
    let member = Session::sign_in(app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    for path in pages {
        let a = member.get(path).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "member GET {path}");
        assert!(a.body.contains("This page is for operators."), "{path}: {}", a.body);
    }
    for (path, fields) in forms {
        for htmx in [false, true] {
            let a = member.post(path, fields, htmx).await;
            assert_eq!(a.status, StatusCode::FORBIDDEN, "member POST {path} (htmx: {htmx})");
            assert!(a.body.contains("This page is for operators."), "{path}: {}", a.body);
        }
    }

    let anonymous = app.client();
    for path in pages {
        let a = get(app, &anonymous, path).await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "anonymous GET {path}");
        let next: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
        assert_eq!(a.header("location"), Some(format!("/login?next={next}").as_str()), "{path}");
    }
    for (path, fields) in forms {
        let a = post(app, &anonymous, path, "no-session", fields, false).await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "anonymous POST {path}");
        assert_eq!(a.header("location"), Some("/login"), "{path}");
    }
}

// ---------- Names to the raw ids the forms post ----------

pub async fn product_id(t: &TestDb, name: &str) -> i64 {
    id_by_name(t, "products", "product_id", name).await
}

pub async fn organization_id(t: &TestDb, name: &str) -> i64 {
    id_by_name(t, "organizations", "organization_id", name).await
}

pub async fn org_type_id(t: &TestDb, name: &str) -> i64 {
    id_by_name(t, "org_types", "org_type_id", name).await
}

pub async fn set_id(t: &TestDb, name: &str) -> i64 {
    id_by_name(t, "entitlement_sets", "entitlement_set_id", name).await
}

pub async fn account_id(t: &TestDb, email: &str) -> i64 {
    t.one(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = $1").bind(email)).await
}

/// The grant of `kind` an organization holds now.
pub async fn active_grant(t: &TestDb, organization: i64, kind: &str) -> i64 {
    t.one(
        sqlx::query_scalar(
            "SELECT grant_id FROM core.grants WHERE organization_id = $1 AND kind = $2 AND status = 'active'",
        )
        .bind(organization)
        .bind(kind),
    )
    .await
}

/// `n` organizations more, "Many 001" and on (the number padded to `digits`), for lists longer
/// than a page.
pub async fn many_organizations(t: &TestDb, n: i32, digits: i32) {
    t.run(
        sqlx::query(
            "INSERT INTO core.organizations (name) SELECT 'Many ' || lpad(g::text, $2, '0') FROM generate_series(1, $1) g",
        )
        .bind(n)
        .bind(digits),
    )
    .await;
}

// ---------- Reading what a page says ----------

/// The table row that contains `needle` (its markup from `<tr>` to `</tr>`).
pub fn row_with<'a>(html: &'a str, needle: &str) -> &'a str {
    let at = html.find(needle).unwrap_or_else(|| panic!("no row with {needle}: {html}"));
    let start = html[..at].rfind("<tr>").unwrap_or_else(|| panic!("{needle} is in no row: {html}"));
    let end = html[at..].find("</tr>").unwrap() + at;
    &html[start..end]
}

/// The table row whose first cell is exactly `first_cell`.
pub fn row<'a>(html: &'a str, first_cell: &str) -> &'a str {
    row_with(html, &format!("<tr><td>{first_cell}</td>"))
}

/// A refusal case: what it is, the fields posted, the status and the message expected.
pub type RefusalCase<'a> = (&'a str, Vec<(&'a str, &'a str)>, StatusCode, &'a str);

/// A successful post sends the browser on to `to`: a plain form by a 303 to it, HTMX (which
/// would follow a redirect itself) by `HX-Redirect` on a 200.
pub fn assert_sent_to(a: &Answer, htmx: bool, to: &str) {
    if htmx {
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert_eq!(a.header("hx-redirect"), Some(to));
        assert!(a.header("location").is_none());
    } else {
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
        assert_eq!(a.header("location"), Some(to));
    }
}

/// A refusal: the status, the message, and the form again, as a partial for HTMX (no layout,
/// the form's own container first) or within the whole page for a plain post.
pub fn assert_refused(a: &Answer, status: StatusCode, htmx: bool, container: &str, message: &str, case: &str) {
    assert_eq!(a.status, status, "{case}: {}", a.body);
    assert!(a.body.contains(message), "{case}: the answer says {message:?}: {}", a.body);
    assert!(a.body.contains(&format!("id=\"{container}\"")), "{case}: the form #{container} comes back: {}", a.body);
    assert!(a.header("hx-redirect").is_none() && a.header("location").is_none(), "{case}: no redirect");
    if htmx {
        assert!(!a.body.contains("<html"), "{case}: HTMX gets the partial alone: {}", a.body);
        let first_tag = &a.body[..a.body.find('>').unwrap_or(0)];
        assert!(
            first_tag.starts_with("<div") && first_tag.contains(&format!("id=\"{container}\"")),
            "{case}: the partial is the form's container: {}",
            a.body
        );
    } else {
        assert!(a.body.contains("<html"), "{case}: a plain post gets the whole page: {}", a.body);
    }
}
