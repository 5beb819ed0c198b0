//! The operators' connection pages over HTTP: adding a connection and landing on its page, the
//! refusals of bad input (nothing written), editing, rotating the secret, Retry, Send a test,
//! Check now, deleting, the recipients' table with its filters and pages, and who may see them.

use std::time::Duration;

use member_console::{demo, services::desired_state as ds};
use reqwest::StatusCode;

use crate::common::{
    TestDb,
    acts::scalar,
    pages::{
        Session, assert_operators_only, assert_refused, assert_sent_to, many_organizations, operator_session, row_with,
    },
};

const URL: &str = "https://chat.example.org/hooks";
const KEYS: &str = "fedwiki.active_sites, support.priority";

async fn connections(t: &TestDb) -> i64 {
    scalar(t, "SELECT count(*) FROM core.desired_state_connections").await
}

async fn connection_id(t: &TestDb, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT connection_id FROM core.desired_state_connections WHERE name = $1 AND deleted_at IS NULL",
    )
    .bind(name)
    .fetch_one(&t.admin)
    .await
    .unwrap_or_else(|e| panic!("no connection named {name}: {e}"))
}

async fn notices(t: &TestDb, id: i64, reason: &str) -> i64 {
    t.one(
        sqlx::query_scalar("SELECT count(*) FROM core.desired_state_outbox WHERE connection_id = $1 AND reason = $2")
            .bind(id)
            .bind(reason),
    )
    .await
}

async fn read_backs(t: &TestDb, id: i64) -> i64 {
    t.one(
        sqlx::query_scalar(
            "SELECT count(*) FROM integration.jobs
          WHERE kind = 'read_back_desired_state' AND (payload->>'connection_id')::bigint = $1",
        )
        .bind(id),
    )
    .await
}

/// What a connection route can write: (live connections, outbox rows, jobs).
async fn written(t: &TestDb) -> (i64, i64, i64) {
    t.one(sqlx::query_as(
        "SELECT (SELECT count(*) FROM core.desired_state_connections WHERE deleted_at IS NULL),
                (SELECT count(*) FROM core.desired_state_outbox),
                (SELECT count(*) FROM integration.jobs)",
    ))
    .await
}

/// Add a connection through the list's form; its id.
async fn add(t: &TestDb, op: &Session, name: &str, read_back: bool) -> i64 {
    let mut fields = vec![("name", name), ("url", URL), ("keys", KEYS)];
    if read_back {
        fields.push(("read_back", "on"));
    }
    let a = op.post("/operator/connections", &fields, false).await;
    let id = connection_id(t, name).await;
    assert_sent_to(&a, false, &format!("/operator/connections/{id}?done=added"));
    id
}

#[tokio::test]
async fn an_operator_adds_a_connection_and_lands_on_its_page_which_the_list_shows_with_its_keys() {
    let (t, op) = operator_session().await;
    let list = op.get("/operator/connections").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.body.contains(r#"aria-current="page">Connections</a>"#), "the nav links the page: {}", list.body);
    assert!(list.body.contains("No connection yet"), "{}", list.body);
    assert!(list.body.contains("Available: fedwiki.active_sites, fedwiki.custom_domain"), "the keys are hinted");

    let id = add(&t, &op, "Chat seats", true).await;
    let page = op.get(&format!("/operator/connections/{id}?done=added")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Connection: Chat seats"), "{}", page.body);
    assert!(page.body.contains("The connection was added"), "{}", page.body);
    assert!(page.body.contains(&format!("<code>{URL}</code>")), "{}", page.body);
    assert!(page.body.contains("<code>fedwiki.active_sites</code>, <code>support.priority</code>"), "{}", page.body);
    let secret: String = t
        .one(sqlx::query_scalar("SELECT secret FROM core.desired_state_connections WHERE connection_id = $1").bind(id))
        .await;
    assert!(secret.starts_with("whsec_"));
    let details = &page.body[page.body.find("<details").expect("the secret is folded")..];
    assert!(details.starts_with(r#"<details id="signing-secret"><summary>Show the signing secret</summary>"#));
    assert!(details.contains(&secret), "the current secret is inside the details");
    assert!(page.body.contains(&format!(r#"action="/operator/connections/{id}/check""#)), "read-back is on");
    // The edit form opens with the connection as it is.
    assert!(page.body.contains(r#"name="keys" type="text" value="fedwiki.active_sites, support.priority""#));

    let list = op.get("/operator/connections").await;
    let r = row_with(&list.body, &format!(r#"href="/operator/connections/{id}">Chat seats</a>"#));
    assert!(r.contains("<code>fedwiki.active_sites</code>, <code>support.priority</code>"), "{r}");
    assert!(r.contains(&format!("<code>{URL}</code>")), "{r}");
    assert!(r.contains(r#"<span class="badge badge-ok">on</span>"#), "{r}");
    assert!(r.contains(r#"<td class="num">—</td>"#), "no lag before any record: {r}");
    assert!(r.contains("never"), "never tested: {r}");
    // The insert's notice waits for the relay.
    assert!(list.body.contains("1 notice pending"), "{}", list.body);

    // Through htmx, the same form sends the browser on with HX-Redirect.
    let a =
        op.post("/operator/connections", &[("name", "SSO"), ("url", URL), ("keys", "support.priority")], true).await;
    let sso = connection_id(&t, "SSO").await;
    assert_sent_to(&a, true, &format!("/operator/connections/{sso}?done=added"));
    assert_eq!(connections(&t).await, 2);
}

#[tokio::test]
async fn bad_input_is_refused_with_422_and_its_messages_and_writes_nothing() {
    let (t, op) = operator_session().await;
    type Case<'a> = (&'a str, [(&'a str, &'a str); 3], &'a str);
    let cases: [Case; 3] = [
        ("an empty name", [("name", "  "), ("url", URL), ("keys", KEYS)], "Give the connection a name."),
        (
            "a URL that is not http(s)",
            [("name", "Chat"), ("url", "ftp://chat.example.org/x"), ("keys", KEYS)],
            "The address must start with https:// (or http://).",
        ),
        (
            "an unknown key",
            [("name", "Chat"), ("url", URL), ("keys", "fedwiki.active_sites chat.nothing")],
            "No resource key is called chat.nothing.",
        ),
    ];
    for (case, fields, message) in cases {
        for htmx in [false, true] {
            let a = op.post("/operator/connections", &fields, htmx).await;
            let case = format!("{case} (htmx: {htmx})");
            assert_refused(&a, StatusCode::UNPROCESSABLE_ENTITY, htmx, "add-connection", message, &case);
            assert!(a.body.contains("Nothing was saved: correct the fields marked below."), "{case}: {}", a.body);
            // What was typed comes back.
            for (name, value) in fields.iter().filter(|(_, v)| !v.trim().is_empty()) {
                assert!(a.body.contains(&format!(r#"name="{name}" type="#)), "{case}: {name}");
                assert!(a.body.contains(&format!(r#"value="{value}""#)), "{case}: {value} comes back: {}", a.body);
            }
        }
    }
    // A misspelt field is refused by name.
    let a = op.post("/operator/connections", &[("nmae", "Chat"), ("url", URL), ("keys", KEYS)], false).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert!(a.body.contains("This form has no field “nmae”"), "{}", a.body);
    assert_eq!(connections(&t).await, 0, "a refused form wrote nothing");
}

/// A form with a bad field and an unknown key says both at once: the key is looked up even
/// though the form will not be saved.
#[tokio::test]
async fn an_empty_name_and_an_unknown_key_are_told_together() {
    let (t, op) = operator_session().await;
    let fields = [("name", ""), ("url", URL), ("keys", "fedwiki.active_sites chat.nothing")];
    let a = op.post("/operator/connections", &fields, false).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert!(a.body.contains("Give the connection a name."), "{}", a.body);
    assert!(a.body.contains("No resource key is called chat.nothing."), "{}", a.body);
    assert_eq!(connections(&t).await, 0, "a refused form wrote nothing");
}

#[tokio::test]
async fn a_second_connection_with_the_same_name_is_refused() {
    let (t, op) = operator_session().await;
    add(&t, &op, "Chat", false).await;
    for htmx in [false, true] {
        let a = op.post("/operator/connections", &[("name", "chat"), ("url", URL), ("keys", KEYS)], htmx).await;
        let case = format!("the same name in other letters (htmx: {htmx})");
        assert_refused(
            &a,
            StatusCode::UNPROCESSABLE_ENTITY,
            htmx,
            "add-connection",
            "Another connection has this name; choose another.",
            &case,
        );
    }
    assert_eq!(connections(&t).await, 1);
}

#[tokio::test]
async fn editing_a_connection_changes_its_keys_and_a_bad_edit_changes_nothing() {
    let (t, op) = operator_session().await;
    let id = add(&t, &op, "Chat", false).await;
    let path = format!("/operator/connections/{id}");
    let keys = || async {
        t.one(
            sqlx::query_scalar::<_, Vec<String>>(
                "SELECT resource_keys FROM core.desired_state_connections WHERE connection_id = $1",
            )
            .bind(id),
        )
        .await
    };

    let edit = [("name", "Chat"), ("url", URL), ("keys", "fedwiki.custom_domain"), ("read_back", "on")];
    let a = op.post(&path, &edit, false).await;
    assert_sent_to(&a, false, &format!("{path}?done=saved"));
    assert_eq!(keys().await, ["fedwiki.custom_domain"]);
    let page = op.get(&format!("{path}?done=saved")).await;
    assert!(page.body.contains("The connection was saved."), "{}", page.body);
    assert!(page.body.contains("<dd><code>fedwiki.custom_domain</code></dd>"), "{}", page.body);
    assert!(page.body.contains(r#"<span class="badge badge-ok">on</span>"#), "read-back turned on");
    assert_eq!(notices(&t, id, "connection").await, 2, "the insert and the change of keys each ask the relay");

    for htmx in [false, true] {
        let bad = [("name", "Chat"), ("url", URL), ("keys", "chat.nothing")];
        let a = op.post(&path, &bad, htmx).await;
        let case = format!("an unknown key (htmx: {htmx})");
        assert_refused(
            &a,
            StatusCode::UNPROCESSABLE_ENTITY,
            htmx,
            "edit-connection",
            "No resource key is called chat.nothing.",
            &case,
        );
        assert!(a.body.contains(r#"value="chat.nothing""#), "{case}: what was typed comes back");
    }
    assert_eq!(keys().await, ["fedwiki.custom_domain"]);
}

#[tokio::test]
async fn rotating_the_secret_shows_the_previous_one_with_its_end() {
    let (t, op) = operator_session().await;
    let id = add(&t, &op, "Chat", false).await;
    let path = format!("/operator/connections/{id}");
    let secrets = || async {
        t.one(
            sqlx::query_as::<_, (String, Option<String>, Option<String>)>(
                "SELECT secret, previous_secret,
                    to_char(previous_secret_until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
               FROM core.desired_state_connections WHERE connection_id = $1",
            )
            .bind(id),
        )
        .await
    };
    let (first, none, _) = secrets().await;
    assert!(none.is_none());

    // A bad overlap is refused in place; nothing rotates.
    for htmx in [false, true] {
        let a = op.post(&format!("{path}/rotate"), &[("overlap_hours", "500")], htmx).await;
        let case = format!("500 hours (htmx: {htmx})");
        let m = "The overlap is a number of hours from 0 to 168.";
        assert_refused(&a, StatusCode::UNPROCESSABLE_ENTITY, htmx, "rotate-secret", m, &case);
    }
    assert_eq!(secrets().await.0, first);

    let a = op.post(&format!("{path}/rotate"), &[("overlap_hours", "24")], false).await;
    assert_sent_to(&a, false, &format!("{path}?done=rotate"));
    let (current, previous, until) = secrets().await;
    assert_ne!(current, first);
    assert_eq!(previous.as_deref(), Some(first.as_str()));
    let until = until.unwrap();
    let hours: f64 = t
        .one(
            sqlx::query_scalar(
                "SELECT extract(epoch FROM previous_secret_until - now())::float8 / 3600
           FROM core.desired_state_connections WHERE connection_id = $1",
            )
            .bind(id),
        )
        .await;
    assert!((23.9..=24.0).contains(&hours), "the previous secret signs for a day: {hours}");

    let page = op.get(&format!("{path}?done=rotate")).await;
    assert!(
        page.body.contains(&format!("The secret was rotated; the previous one signs too until {until}.")),
        "{}",
        page.body
    );
    assert!(page.body.contains(&format!("Current: <code>{current}</code>")), "{}", page.body);
    assert!(page.body.contains(&format!("Previous, signing too until {until}: <code>{first}</code>")), "{}", page.body);

    // With no overlap the previous one stops at once, and the page no longer shows it.
    let a = op.post(&format!("{path}/rotate"), &[("overlap_hours", "0")], false).await;
    assert_sent_to(&a, false, &format!("{path}?done=rotate"));
    let page = op.get(&format!("{path}?done=rotate")).await;
    assert!(page.body.contains("The secret was rotated; the previous one no longer signs."), "{}", page.body);
    assert!(!page.body.contains("Previous, signing too"), "{}", page.body);
    assert!(!page.body.contains(&current), "the secret before no longer shows");
}

#[tokio::test]
async fn retry_and_send_a_test_each_write_one_notice_with_their_reason() {
    let (t, op) = operator_session().await;
    let id = add(&t, &op, "Chat", false).await;
    let path = format!("/operator/connections/{id}");
    for (act, reason, sentence) in [
        ("retry", "retry", "Retry asked: failing recipients are pushed again within a few seconds."),
        ("test", "test", "A test is on its way; its answer shows below when it comes."),
    ] {
        assert_eq!(notices(&t, id, reason).await, 0);
        let a = op.post(&format!("{path}/{act}"), &[], false).await;
        assert_sent_to(&a, false, &format!("{path}?done={act}"));
        assert_eq!(notices(&t, id, reason).await, 1, "{act} wrote one notice");
        let page = op.get(&format!("{path}?done={act}")).await;
        assert!(page.body.contains(sentence), "{act}: {}", page.body);
    }
    // A button takes no field.
    let a = op.post(&format!("{path}/retry"), &[("reason", "x")], false).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert_eq!(notices(&t, id, "retry").await, 1);
}

#[tokio::test]
async fn check_now_is_refused_without_read_back_and_asks_for_a_read_back_run_with_it() {
    let (t, op) = operator_session().await;
    let off = add(&t, &op, "No read-back", false).await;
    let a = op.post(&format!("/operator/connections/{off}/check"), &[], false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("This connection does not support read-back"), "{}", a.body);
    assert!(a.body.contains("Connection: No read-back"), "the page comes back with the refusal");
    assert!(
        !a.body.contains(&format!(r#"action="/operator/connections/{off}/check""#)),
        "no Check now without read-back"
    );
    assert_eq!(read_backs(&t, off).await, 0);

    let on = add(&t, &op, "With read-back", true).await;
    let a = op.post(&format!("/operator/connections/{on}/check"), &[], false).await;
    assert_sent_to(&a, false, &format!("/operator/connections/{on}?done=check"));
    assert_eq!(read_backs(&t, on).await, 1);
    let page = op.get(&format!("/operator/connections/{on}?done=check")).await;
    assert!(page.body.contains("Read-back asked:"), "{}", page.body);
}

#[tokio::test]
async fn deleting_needs_the_confirmation_and_then_the_connection_leaves_the_list_and_its_page_is_not_found() {
    let (t, op) = operator_session().await;
    let id = add(&t, &op, "Chat", false).await;
    let path = format!("/operator/connections/{id}");
    let deleted = || async {
        t.one(
            sqlx::query_scalar::<_, bool>(
                "SELECT deleted_at IS NOT NULL FROM core.desired_state_connections WHERE connection_id = $1",
            )
            .bind(id),
        )
        .await
    };
    for htmx in [false, true] {
        let a = op.post(&format!("{path}/delete"), &[], htmx).await;
        let case = format!("no confirmation (htmx: {htmx})");
        let m = "Tick the box to confirm: deleting stops every push to this system.";
        assert_refused(&a, StatusCode::UNPROCESSABLE_ENTITY, htmx, "delete-connection", m, &case);
        assert!(a.body.contains("Nothing was deleted"), "{case}: {}", a.body);
    }
    assert!(!deleted().await);

    let a = op.post(&format!("{path}/delete"), &[("confirm", "yes")], false).await;
    assert_sent_to(&a, false, "/operator/connections?deleted=1");
    assert!(deleted().await);
    let list = op.get("/operator/connections?deleted=1").await;
    assert!(list.body.contains("The connection was deleted: nothing more is sent to it."), "{}", list.body);
    assert!(!list.body.contains(&format!(r#"href="{path}""#)), "{}", list.body);
    assert_eq!(op.get(&path).await.status, StatusCode::NOT_FOUND);
    for act in ["retry", "test", "delete"] {
        let a = op.post(&format!("{path}/{act}"), &[("confirm", "yes")][..(act == "delete") as usize], false).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{act} on a deleted connection");
    }
    let a = op.post(&path, &[("name", "Chat"), ("url", URL), ("keys", KEYS)], false).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "editing a deleted connection");
    // Its name is free again.
    add(&t, &op, "Chat", false).await;
}

#[tokio::test]
async fn an_unknown_or_non_numeric_id_is_not_found() {
    let (_t, op) = operator_session().await;
    for path in ["/operator/connections/987654", "/operator/connections/chat"] {
        let a = op.get(path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "GET {path}");
        assert!(a.body.contains("There is nothing at this address."), "{path}: {}", a.body);
        for act in ["retry", "test", "check"] {
            let a = op.post(&format!("{path}/{act}"), &[], false).await;
            assert_eq!(a.status, StatusCode::NOT_FOUND, "POST {path}/{act}");
        }
    }
    let a = op.get("/operator/connections/1?after=x").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.body);
}

#[tokio::test]
async fn the_page_lists_every_organization_as_a_recipient_behind_until_confirmed_with_filters_and_pages() {
    let (t, op) = operator_session().await;
    // More organizations than a page holds.
    many_organizations(&t, 60, 3).await;
    let id = add(&t, &op, "Chat", false).await;
    ds::process_desired_state_outbox(&t.db, Duration::from_secs(30)).await.unwrap();
    let orgs = scalar(&t, "SELECT count(*) FROM core.organizations").await;
    assert!(orgs > 50, "more organizations than a page");
    let path = format!("/operator/connections/{id}");

    let page = op.get(&path).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(&format!("<dt>Recipients</dt><dd>{orgs}</dd>")), "{}", page.body);
    assert!(page.body.contains(&format!("<dt>Behind</dt><dd>{orgs}</dd>")), "nothing is pushed yet");
    let lag = &page.body[page.body.find("<dt>Lag</dt><dd>").unwrap() + "<dt>Lag</dt><dd>".len()..];
    assert!(lag.starts_with(|c: char| c.is_ascii_digit()) && lag[..12].contains(" s"), "a lag in seconds: {lag:.40}");
    assert!(page.body.contains(&format!(r#"<a href="{path}?filter=behind">Behind ({orgs})</a>"#)), "{}", page.body);
    assert!(page.body.contains(r#"<strong aria-current="page">All</strong>"#));

    // The first page: the first 50 organizations by id, each linked, generation 1 and unconfirmed.
    let ids: Vec<(i64, String)> =
        t.all(sqlx::query_as("SELECT organization_id, name FROM core.organizations ORDER BY organization_id")).await;
    let (first, first_name) = &ids[0];
    let r = row_with(&page.body, &format!(r#"<a href="/operator/organizations/{first}">{first_name}</a>"#));
    assert!(r.contains(r#"<td class="num">1</td><td class="num">0</td><td class="num">0</td>"#), "{r}");
    assert!(page.body.contains(&format!(r#"href="/operator/organizations/{}""#, ids[49].0)));
    assert!(!page.body.contains(&format!(r#"href="/operator/organizations/{}""#, ids[50].0)));
    let next = format!("{path}?after={}", ids[49].0);
    assert!(page.body.contains(&format!(r#"<a rel="next" href="{next}">Next page →</a>"#)), "{}", page.body);

    let second = op.get(&next).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(second.body.contains(&format!(r#"href="/operator/organizations/{}""#, ids[50].0)));
    assert!(!second.body.contains(&format!(r#"href="/operator/organizations/{first}""#)));

    // The behind filter keeps to its pages; the failing one has nobody yet.
    let behind = op.get(&format!("{path}?filter=behind")).await;
    assert!(
        behind.body.contains(&format!(r#"href="{path}?filter=behind&amp;after={}""#, ids[49].0)),
        "{}",
        behind.body
    );
    let failing = op.get(&format!("{path}?filter=failing")).await;
    assert!(failing.body.contains("No recipient here."), "{}", failing.body);
    let list = op.get("/operator/connections").await;
    let r = row_with(&list.body, &format!(r#"href="{path}">Chat</a>"#));
    assert!(
        r.contains(&format!(r#"<td class="num">{orgs}</td><td class="num">{orgs}</td><td class="num">0</td>"#)),
        "{r}"
    );
}

#[tokio::test]
async fn a_member_gets_no_200_on_any_connection_route() {
    let (t, op) = operator_session().await;
    let id = add(&t, &op, "Chat", true).await;
    let before = written(&t).await;
    let page = format!("/operator/connections/{id}");
    let fields = vec![("name", "Mine"), ("url", URL), ("keys", KEYS), ("read_back", "on")];
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/operator/connections".into(), fields.clone()),
        (page.clone(), fields),
        (format!("{page}/rotate"), vec![("overlap_hours", "1")]),
        (format!("{page}/retry"), vec![]),
        (format!("{page}/test"), vec![]),
        (format!("{page}/check"), vec![]),
        (format!("{page}/delete"), vec![("confirm", "yes")]),
    ];
    assert_operators_only(&op.app, &["/operator/connections".into(), page.clone()], &forms).await;
    // Every route, either method, as a member: never a 200.
    let member = Session::sign_in(&op.app, demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    for (path, fields) in &forms {
        assert_ne!(member.get(path).await.status, StatusCode::OK, "member GET {path}");
        let a = member.post(path, fields, false).await;
        assert_ne!(a.status, StatusCode::OK, "member POST {path}");
        assert!(a.header("location").is_none_or(|l| !l.starts_with("/operator")), "member POST {path} went through");
    }
    let after = written(&t).await;
    assert_eq!(after, before, "a member's requests wrote nothing");
}
