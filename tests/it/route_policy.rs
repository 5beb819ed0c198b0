//! The route policy: every protected route tried as each kind of visitor, in every spelling of
//! its path a check on the raw path could miss, and nothing written by a refused request.

use crate::common;

use std::time::Duration;

use common::{TestApp, TestDb, csrf_from, pages::demo_db};
use member_console::{
    demo,
    ids::{EntitlementSetId, OrganizationId},
};
use reqwest::StatusCode;

/// One HTTP/1.1 request written by hand, so the path goes out exactly as given (a client library
/// would normalize dot segments and encodings). The status and the Location header.
async fn raw(
    app: &TestApp,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = app.base.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
    let body = form.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(c) = cookie {
        req.push_str(&format!("Cookie: {c}\r\n"));
    }
    if form.is_some() {
        req.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    // Read the head, then the body by its length: a server that answers without reading a body
    // (a redirect to sign in) lingers before closing, which is not what this test measures.
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 8192];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            out.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&out);
            if n == 0 {
                break;
            }
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                    .and_then(|(_, v)| v.trim().parse::<usize>().ok());
                if length.is_some_and(|len| out.len() >= end + 4 + len) {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} {path} within 10 s"));
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let location = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("location")).map(|(_, v)| v.trim()))
        .unwrap_or("")
        .to_string();
    (status, location, rest.to_string())
}

/// Sign in by hand; the session cookie (as a Cookie header) and the session's CSRF token.
async fn raw_session(app: &TestApp, email: &str, password: &str) -> (String, String) {
    let c = app.client();
    let r = app.sign_in(&c, email, password).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let (status, _, page) = raw(app, "GET", "/", Some(&cookie), None).await;
    assert_eq!(status, 200);
    (cookie, csrf_from(&page).unwrap())
}

/// A site of the first organization (its workspace made on the way), for the sites' routes.
async fn sample_site(t: &TestDb) -> String {
    t.run(sqlx::query(
        "INSERT INTO fedwiki.workspaces (workspace_id, organization_id)
         SELECT 'org-' || min(organization_id), min(organization_id) FROM core.organizations ON CONFLICT DO NOTHING",
    ))
    .await;
    t.run(sqlx::query(
        "INSERT INTO fedwiki.sites (site_id, workspace_id, domain, status)
         SELECT 's-sample', 'org-' || min(organization_id), 'sample.wiki.localhost', 'parked' FROM core.organizations
         ON CONFLICT DO NOTHING",
    ))
    .await;
    "s-sample".to_string()
}

/// A live connection's id, one made here when none exists (the demo's own is added by `serve`).
async fn sample_connection(t: &TestDb) -> String {
    t.run(sqlx::query(
        "INSERT INTO core.desired_state_connections (name, url, secret)
         SELECT 'Sample', 'https://sample.example.org/hooks', 'whsec_c2FtcGxlLXNlY3JldC1zYW1wbGUtc2VjcmV0'
          WHERE NOT EXISTS (SELECT 1 FROM core.desired_state_connections WHERE deleted_at IS NULL)",
    ))
    .await;
    let id: i64 = t
        .one(sqlx::query_scalar(
            "SELECT min(connection_id) FROM core.desired_state_connections WHERE deleted_at IS NULL",
        ))
        .await;
    id.to_string()
}

/// A route's path with real ids in it, so a request that got through would find something.
async fn sample_path(t: &TestDb, pattern: &str) -> String {
    let mut out = String::new();
    let mut previous = "";
    for seg in pattern.split('/') {
        if !out.is_empty() || seg.is_empty() {
            out.push('/');
        }
        let value = match seg {
            "{rank}" => "0".to_string(),
            "{key}" => "fedwiki.active_sites".to_string(),
            // A site's id is text: a site of the first organization's, made here when none exists.
            "{id}" if previous == "sites" => sample_site(t).await,
            "{id}" if previous == "connections" => sample_connection(t).await,
            // A member of an organization and an invitation to one: the demo has both.
            "{account}" | "{invitation}" => {
                let (table, column) = match seg {
                    "{account}" => ("core.organization_members", "account_id"),
                    _ => ("core.invitations", "invitation_id"),
                };
                let id: i64 = t
                    .one(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT coalesce(min({column}), 1) FROM {table}"
                    ))))
                    .await;
                id.to_string()
            }
            "{id}" => {
                let (table, column) = match previous {
                    "grants" => ("core.grants", "grant_id"),
                    "rule-changes" => ("core.entitlement_set_changes", "change_id"),
                    "plan-acts" => ("core.plan_acts", "plan_act_id"),
                    "organizations" => ("core.organizations", "organization_id"),
                    "sets" => ("core.entitlement_sets", "entitlement_set_id"),
                    "products" => ("core.products", "product_id"),
                    "ladders" => ("core.plan_ladders", "plan_ladder_id"),
                    "org-types" => ("core.org_types", "org_type_id"),
                    "prices" => ("billing.prices", "price_id"),
                    "requests" => ("fedwiki.lifecycle_requests", "request_id"),
                    "accounts" => ("core.accounts", "account_id"),
                    other => panic!("no sample id for a segment after {other:?} in {pattern}: add one here"),
                };
                let id: i64 = t
                    .one(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT coalesce(min({column}), 1) FROM {table}"
                    ))))
                    .await;
                id.to_string()
            }
            s if s.starts_with('{') => panic!("no sample for the segment {s} in {pattern}: add one here"),
            s => s.to_string(),
        };
        out.push_str(&value);
        previous = seg;
    }
    out.replace("//", "/")
}

/// Every way a path under /operator might be written to slip past a check on the raw path.
fn spellings(path: &str) -> Vec<String> {
    let rest = path.strip_prefix("/operator").unwrap();
    let mut v = vec![
        path.to_string(),
        format!("/%6Fperator{rest}"),
        format!("/%6fperator{rest}"),
        format!("/%6F%70%65%72%61%74%6F%72{rest}"),
        format!("/o%70erator{rest}"),
        format!("//operator{rest}"),
        format!("///operator{rest}"),
        format!("/./operator{rest}"),
        format!("/x/../operator{rest}"),
        format!("/%2e/operator{rest}"),
        format!("/%2E%2E/operator{rest}"),
        format!("/Operator{rest}"),
        format!("/OPERATOR{}", rest.to_uppercase()),
        format!("/%2Foperator{rest}"),
        format!("/operator;x{rest}"),
        format!("{path}/"),
        format!("{path}?x=1"),
        format!("{path}%00"),
    ];
    if !rest.is_empty() {
        v.push(format!("/operator{}", rest.replace('/', "%2F")));
        v.push(format!("/operator%2F{}", &rest[1..]));
        v.push(format!("/operator/{rest}"));
        v.push(format!("/operator/.{rest}"));
        v.push(format!("/operator/x/..{rest}"));
        // The first letter of the next segment encoded too.
        let mut chars = rest[1..].chars();
        if let Some(first) = chars.next().filter(|c| c.is_ascii_alphabetic()) {
            v.push(format!("/%6Fperator/%{:02X}{}", first as u32, chars.as_str()));
        }
    }
    v
}

/// Every row of the console's own tables but the sessions and sign-in counters, as a digest.
pub(crate) async fn fingerprint(t: &TestDb) -> Vec<(String, String)> {
    let tables: Vec<String> = t
        .all(sqlx::query_scalar(
            "SELECT schemaname || '.' || relname FROM pg_stat_user_tables
         WHERE schemaname IN ('core', 'billing', 'fedwiki', 'domains', 'integration')
           AND relname NOT IN ('web_sessions', 'sign_in_throttle', 'sign_in_addresses')
         ORDER BY 1",
        ))
        .await;
    let mut out = vec![];
    for table in tables {
        let sql =
            format!("SELECT count(*)::text || ':' || coalesce(sum(hashtext(x::text)::bigint), 0)::text FROM {table} x");
        let digest: String = t.one(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))).await;
        out.push((table, digest));
    }
    out
}

#[tokio::test]
async fn no_operator_route_answers_a_visitor_or_a_member_however_the_path_is_spelled() {
    use member_console::web::routes::{Access, ROUTES};
    let t = demo_db().await;
    // Something behind every id-taking page: a grant, a rule change, a plan act.
    let org =
        OrganizationId(common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    let pro = common::acts::product_id(&t, "Pro").await;
    common::acts::grant(&t, org, pro).await;
    let set = EntitlementSetId(common::acts::id_by_name(&t, "entitlement_sets", "entitlement_set_id", "Pro").await);
    let rules = crate::common::rules(&[("fedwiki.active_sites", "11")]);
    member_console::services::rule_changes::commit_rule_change_batch(&t.db, set, &rules, None, &"walk".into(), 100)
        .await
        .unwrap();
    let business = common::acts::type_id(&t, "Business").await;
    let hosting = common::acts::ladder_id(&t, "Wiki hosting").await;
    common::acts::change(&t, business, hosting, Some(member_console::services::plan_acts::Disposition::Migrate))
        .await
        .unwrap();
    // A price, behind the price pages.
    let price = crate::common::stripe::new_price("month", "12", "eur").unwrap();
    member_console::services::billing::set_price(&t.db, pro, &price).await.unwrap();
    // A connection, behind the connection pages.
    sample_connection(&t).await;
    let app = TestApp::spawn(&t).await;
    let (member, member_csrf) = raw_session(&app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let (operator, _) = raw_session(&app, demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;
    let before = fingerprint(&t).await;

    let operator_routes: Vec<_> = ROUTES.iter().filter(|r| r.access == Access::Operator).collect();
    assert!(operator_routes.len() > 30, "the table lists the operator routes");
    let mut tried = 0;
    for route in operator_routes {
        let path = sample_path(&t, route.path).await;
        let spelled = spellings(&path);
        if route.method == "GET" {
            // The operator reaches the page both plainly and through an encoded letter, so the
            // refusals below come from the check, not from a path that routes nowhere.
            for p in &spelled[..2] {
                let (status, _, body) = raw(&app, "GET", p, Some(&operator), None).await;
                assert_eq!(status, 200, "the operator's GET {p}: {body}");
            }
        }
        for p in &spelled {
            for (who, cookie) in [("a visitor", None), ("a member", Some(member.as_str()))] {
                for method in ["GET", "POST"] {
                    let form = format!("csrf_token={member_csrf}&name=Walked&reason=walk&quantity=1");
                    let (status, location, _) =
                        raw(&app, method, p, cookie, (method == "POST").then_some(form.as_str())).await;
                    tried += 1;
                    let refused = matches!(status, 400 | 401 | 403 | 404 | 405)
                        || (status == 303 && location.starts_with("/login"));
                    assert!(
                        refused,
                        "{who}: {method} {p} ({} {}) answered {status} {location}",
                        route.method, route.path
                    );
                }
            }
        }
    }
    assert!(tried > 1000);
    assert_eq!(fingerprint(&t).await, before, "a refused request wrote something");
}

/// A member route's path spelled as the router may still match it: plainly, with its first
/// letter percent-encoded, with a trailing slash, a doubled slash, a dot segment, a query.
fn member_spellings(path: &str) -> Vec<String> {
    let mut v = vec![path.to_string(), format!("/{}", path.trim_start_matches('/')) + "?x=1"];
    if path.len() > 1 {
        let rest = &path[1..];
        let mut chars = rest.chars();
        if let Some(first) = chars.next() {
            v.push(format!("/%{:02X}{}", first as u32, chars.as_str()));
        }
        v.push(format!("{path}/"));
        v.push(format!("/{path}"));
        v.push(format!("/./{rest}"));
        v.push(format!("/x/..{path}"));
    }
    v
}

#[tokio::test]
async fn no_member_route_answers_a_visitor_however_the_path_is_spelled_and_none_writes() {
    use member_console::web::routes::ROUTES;
    let t = demo_db().await;
    let pro = common::acts::product_id(&t, "Pro").await;
    let price = crate::common::stripe::new_price("month", "30", "eur").unwrap();
    let price = member_console::services::billing::set_price(&t.db, pro, &price).await.unwrap();
    let org = common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await;
    let app = TestApp::spawn(&t).await;
    sample_site(&t).await;
    let before = fingerprint(&t).await;
    let member_routes: Vec<_> = ROUTES.iter().filter(|r| r.access.is_member()).collect();
    assert!(member_routes.len() >= 4, "the table lists the member routes: {member_routes:?}");
    for route in member_routes {
        let path = sample_path(&t, route.path).await;
        for p in member_spellings(&path) {
            for method in ["GET", "POST"] {
                let form = format!(
                    "organization_id={org}&price_id={}&session_id=cs_x&name=visitor&to=park&keep=1&activate=s-sample&park=s-sample",
                    price.0
                );
                let (status, location, body) =
                    raw(&app, method, &p, None, (method == "POST").then_some(form.as_str())).await;
                let refused =
                    matches!(status, 400 | 401 | 403 | 404 | 405) || (status == 303 && location.starts_with("/login"));
                assert!(
                    refused,
                    "a visitor: {method} {p} ({} {}) answered {status} {location}: {body}",
                    route.method, route.path
                );
            }
        }
    }
    assert_eq!(fingerprint(&t).await, before, "a refused request wrote something");
}
