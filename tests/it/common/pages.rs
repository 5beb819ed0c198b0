//! The harness of the page tests: a signed-in browser-like client, and answers read whole.

use member_console::demo;
use reqwest::{Client, StatusCode, header::HeaderMap};

use super::{TestApp, TestDb};

pub async fn demo_db() -> TestDb {
    let t = TestDb::new().await;
    demo::load(&t.db).await.unwrap();
    t
}

/// A client signed in as `email`, and its CSRF token.
pub async fn signed_in(app: &TestApp, email: &str, password: &str) -> (Client, String) {
    let c = app.client();
    let r = app.sign_in(&c, email, password).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "sign-in as {email}");
    let token = app.csrf(&c, "/").await;
    (c, token)
}

/// The demo, a running console and a signed-in operator.
pub async fn operator_app() -> (TestDb, TestApp, Client, String) {
    let t = demo_db().await;
    let app = TestApp::spawn(&t).await;
    let (c, token) = signed_in(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    (t, app, c, token)
}

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
