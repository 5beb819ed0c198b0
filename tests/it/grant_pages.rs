//! The operator's grant pages over HTTP: the list and its filters, issuing (to an organization,
//! from a date, to an email domain), a grant's page, managing (reschedule in place, extend in
//! the lineage), revoking, organizations created with an email domain, and who may do any of it.
//!
//! Every act is checked on what the operator is told (status, page, message) and on the
//! database: row counts and a snapshot of the grant rows before and after prove a refusal wrote
//! nothing.

use crate::common;

use chrono::{TimeDelta, Utc};
use common::{
    TestDb,
    pages::{
        account_id, active_grant, app_with_demo, assert_operators_only, assert_refused, assert_sent_to,
        operator_session, org_type_id, organization_id, product_id, row, row_with, set_id,
    },
};
use member_console::demo;
use reqwest::StatusCode;

// ---------- Harness ----------

async fn newest_grant(t: &TestDb) -> i64 {
    t.one(sqlx::query_scalar("SELECT max(grant_id) FROM core.grants")).await
}

async fn grant_status(t: &TestDb, grant: i64) -> String {
    common::acts::grant_status(t, member_console::ids::GrantId(grant)).await
}

/// Row counts: grants, grant events, conferrals, organizations, pools, jobs.
async fn counts(t: &TestDb) -> [i64; 6] {
    let n = |table: &'static str| async move {
        t.one(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))).await
    };
    [
        n("core.grants").await,
        n("core.grant_events").await,
        n("core.conferrals").await,
        n("core.organizations").await,
        n("core.resource_pools").await,
        n("integration.jobs").await,
    ]
}

/// Every grant's and conferral's state, to prove a refusal changed nothing in place either.
async fn grants_snapshot(t: &TestDb) -> String {
    t.one(sqlx::query_scalar(
        "SELECT concat_ws(E'\\n',
            (SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', grant_id, organization_id, provision_domain,
                                      product_id, quantity, status, starts_at, ends_at, extends_grant_id), ';'
                               ORDER BY grant_id) FROM core.grants),
            (SELECT string_agg(format('%s|%s|%s', conferral_id, grant_id, state), ';' ORDER BY conferral_id)
               FROM core.conferrals),
            (SELECT string_agg(format('%s|%s|%s', organization_id, name, email_domain), ';' ORDER BY organization_id)
               FROM core.organizations))",
    ))
    .await
}

/// Counts and snapshot together: what "nothing was written" compares.
async fn state(t: &TestDb) -> ([i64; 6], String) {
    (counts(t).await, grants_snapshot(t).await)
}

/// A `datetime-local` value `days` from now (minutes, UTC), as the form sends it.
fn local_in(days: i64) -> String {
    (Utc::now() + TimeDelta::days(days)).format("%Y-%m-%dT%H:%M").to_string()
}

/// The same instant as the pages show it.
fn shown(local: &str) -> String {
    format!("{} UTC", local.replace('T', " "))
}

/// A grant's dates as the form would write them, minute precision, UTC.
async fn grant_dates(t: &TestDb, grant: i64) -> (String, Option<String>, i32) {
    t.one(
        sqlx::query_as(
            "SELECT to_char(starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI'),
                to_char(ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI'), quantity
         FROM core.grants WHERE grant_id = $1",
        )
        .bind(grant),
    )
    .await
}

fn grant_link(id: i64) -> String {
    format!("<a href=\"/operator/grants/{id}\">#{id}</a>")
}

/// The ids of the grants the list's table links, in order (each row's first cell).
fn listed_grants(html: &str) -> Vec<i64> {
    html.split("<tr><td><a href=\"/operator/grants/")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
        .collect()
}

// ---------- 1. The list ----------

#[tokio::test]
async fn the_list_shows_the_demo_grants_newest_first_and_filters_by_status_and_organization() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let all: Vec<i64> = t.all(sqlx::query_scalar("SELECT grant_id FROM core.grants ORDER BY grant_id DESC")).await;
    assert_eq!(all.len(), 5, "the demo's four floors and Initech's Pro");

    let a = op.get("/operator/grants").await;
    assert_eq!(a.status, StatusCode::OK);
    let html = &a.body;
    assert!(html.contains("<html"), "a page");
    assert_eq!(listed_grants(html), all, "newest first");
    assert!(html.contains("5 grants"), "{html}");
    let p = row(html, &grant_link(pro));
    assert!(
        p.contains(&format!(
            "<td><a href=\"/operator/organizations/{initech}\">Initech</a></td><td>Pro</td><td class=\"num\">1</td>\
             <td>operator</td><td><span class=\"badge badge-ok\">active</span></td>"
        )),
        "{p}"
    );
    assert!(p.contains("<span class=\"muted\">open-ended</span>") && p.contains("complimentary plan"), "{p}");
    // The floors: Free on the wiki ladder, Community support for the Business type; Initech's ended.
    for (org, product, status) in [
        ("Acme Wikis", "Free", "active"),
        ("Globex", "Community support", "active"),
        ("Umbrella Wikis", "Free", "active"),
        ("Initech", "Free", "ended"),
    ] {
        let id = organization_id(&t, org).await;
        let floor: i64 = t
            .one(
                sqlx::query_scalar("SELECT grant_id FROM core.grants WHERE organization_id = $1 AND kind = 'floor'")
                    .bind(id),
            )
            .await;
        let r = row(html, &grant_link(floor));
        assert!(r.contains(&format!(">{org}</a></td><td>{product}</td>")), "{org}: {r}");
        assert!(r.contains(&"<td>floor</td><td><span class=\"badge badge-".to_string()), "{org}: {r}");
        assert!(r.contains(&format!("\">{status}</span>")), "{org}: {r}");
    }
    assert!(html.contains(r#"href="/operator/grants/new">Issue a grant</a>"#), "{html}");

    // By status.
    let a = op.get("/operator/grants?status=ended").await;
    assert_eq!(a.status, StatusCode::OK);
    let initech_floor: i64 = t
        .one(
            sqlx::query_scalar("SELECT grant_id FROM core.grants WHERE organization_id = $1 AND kind = 'floor'")
                .bind(initech),
        )
        .await;
    assert_eq!(listed_grants(&a.body), vec![initech_floor]);
    assert!(a.body.contains(r#"<option value="ended" selected>Ended</option>"#), "{}", a.body);
    let a = op.get("/operator/grants?status=active").await;
    assert_eq!(listed_grants(&a.body), all.iter().copied().filter(|g| *g != initech_floor).collect::<Vec<_>>());
    let a = op.get("/operator/grants?status=revoked").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("No grants match these filters."), "{}", a.body);

    // By organization, named above the table, with "Issue a grant" for it.
    let a = op.get(&format!("/operator/grants?organization_id={initech}")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(listed_grants(&a.body), vec![pro, initech_floor]);
    assert!(
        a.body.contains(&format!("Grants of <a href=\"/operator/organizations/{initech}\">Initech</a>")),
        "{}",
        a.body
    );
    assert!(a.body.contains(&format!("href=\"/operator/grants/new?organization_id={initech}\"")), "{}", a.body);
    // Both.
    let a = op.get(&format!("/operator/grants?status=active&organization_id={initech}")).await;
    assert_eq!(listed_grants(&a.body), vec![pro]);
    assert!(a.body.contains(&format!("name=\"organization_id\" value=\"{initech}\"")), "{}", a.body);
    // An organization that does not exist matches nothing.
    let a = op.get("/operator/grants?organization_id=987654").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(listed_grants(&a.body).is_empty() && a.body.contains("No grants match these filters."));
}

/// `n` grants of Priority support waiting for their start at the organization (written here, as
/// a seed: the list is what is under test).
async fn seed_waiting_grants(t: &TestDb, organization: i64, n: i32) {
    let priority = product_id(t, "Priority support").await;
    t.run(
        sqlx::query(
            "INSERT INTO core.grants (organization_id, product_id, kind, status, starts_at, reason)
         SELECT $1, $2, 'operator', 'waiting', now() + interval '1 day', 'bulk ' || g FROM generate_series(1, $3) g",
        )
        .bind(organization)
        .bind(priority)
        .bind(n),
    )
    .await;
}

#[tokio::test]
async fn the_list_paginates_fifty_to_a_page_and_keeps_its_filters() {
    let (t, op) = operator_session().await;
    let globex = organization_id(&t, "Globex").await;
    seed_waiting_grants(&t, globex, 51).await;
    let waiting: Vec<i64> = t.all(sqlx::query_scalar(
        "SELECT grant_id FROM core.grants WHERE organization_id = $1 AND status = 'waiting' ORDER BY grant_id DESC",
    )
    .bind(globex)).await;
    assert_eq!(waiting.len(), 51);

    let filter = format!("status=waiting&organization_id={globex}");
    let one = op.get(&format!("/operator/grants?{filter}")).await;
    assert_eq!(one.status, StatusCode::OK);
    assert!(one.body.contains("51 grants"), "{}", one.body);
    assert_eq!(listed_grants(&one.body), waiting[..50].to_vec());
    let next =
        format!("href=\"/operator/grants?status=waiting&amp;organization_id={globex}&amp;after={}\"", waiting[49]);
    assert!(one.body.contains(&next), "the next page keeps both filters: {}", one.body);
    let last = format!("href=\"/operator/grants?status=waiting&amp;organization_id={globex}&amp;at=last\"");
    assert!(one.body.contains(&last), "{}", one.body);

    let two = op.get(&format!("/operator/grants?{filter}&after={}", waiting[49])).await;
    assert_eq!(two.status, StatusCode::OK);
    assert_eq!(listed_grants(&two.body), waiting[50..].to_vec());
    let prev =
        format!("href=\"/operator/grants?status=waiting&amp;organization_id={globex}&amp;before={}\"", waiting[50]);
    assert!(two.body.contains(&prev), "{}", two.body);
    assert!(two.body.contains(r#"<option value="waiting" selected>Waiting</option>"#), "{}", two.body);
    assert!(two.body.contains(&format!("name=\"organization_id\" value=\"{globex}\"")), "{}", two.body);
    assert!(two.body.contains("Grants of"), "{}", two.body);
    // Back from the second page is the first; the last page is the oldest fifty, a full page.
    let back = op.get(&format!("/operator/grants?{filter}&before={}", waiting[50])).await;
    assert_eq!(listed_grants(&back.body), waiting[..50].to_vec());
    let at_last = op.get(&format!("/operator/grants?{filter}&at=last")).await;
    assert_eq!(listed_grants(&at_last.body), waiting[1..].to_vec());
    assert!(at_last.body.contains(&format!("before={}", waiting[1])), "{}", at_last.body);

    // Unfiltered, the 56 grants newest first: the last page holds the oldest fifty; past the
    // oldest there is nothing.
    let all_ids: Vec<i64> = t.all(sqlx::query_scalar("SELECT grant_id FROM core.grants ORDER BY grant_id DESC")).await;
    let all = op.get("/operator/grants?at=last").await;
    assert!(all.body.contains("56 grants"), "{}", all.body);
    assert_eq!(listed_grants(&all.body), all_ids[6..].to_vec());
    let past = op.get(&format!("/operator/grants?after={}", all_ids[55])).await;
    assert_eq!(past.status, StatusCode::OK);
    assert!(listed_grants(&past.body).is_empty());
}

#[tokio::test]
async fn a_list_of_very_many_grants_counts_to_a_cap() {
    let (t, op) = operator_session().await;
    let globex = organization_id(&t, "Globex").await;
    seed_waiting_grants(&t, globex, 1001).await;
    let a = op.get("/operator/grants").await;
    assert!(a.body.contains("More than 1,000 grants"), "{}", a.body);
    let a = op.get("/operator/grants?status=active").await;
    assert!(!a.body.contains("More than"), "the active ones are few: {}", a.body);
}

#[tokio::test]
async fn bad_list_filters_are_a_400_with_a_message() {
    let (_t, op) = operator_session().await;
    for (query, message) in [
        ("status=bogus", "“bogus” is not a grant status."),
        ("status=ACTIVE", "“ACTIVE” is not a grant status."),
        ("organization_id=abc", "“abc” is not an organization number."),
        ("organization_id=1.5", "“1.5” is not an organization number."),
        ("after=0", "“0” is not a grant id."),
        ("before=-1", "“-1” is not a grant id."),
        ("after=abc", "“abc” is not a grant id."),
        ("status=active&after=1&before=2", "Ask for one page"),
        ("at=middle", "Ask for one page"),
    ] {
        let a = op.get(&format!("/operator/grants?{query}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{query}: {}", a.body);
        assert!(a.body.contains(message), "{query}: {}", a.body);
        assert!(a.body.contains("<html"), "{query}: a page");
    }
}

// ---------- 2. Issuing ----------

#[tokio::test]
async fn issuing_now_lands_on_the_active_grant_and_the_organization_shows_it() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let basic = product_id(&t, "Basic").await;
    let operator = account_id(&t, demo::OPERATOR_EMAIL).await;

    // The form, pre-filled from the organization.
    let a = op.get(&format!("/operator/grants/new?organization_id={acme}")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.contains("<html") && a.body.contains("id=\"issue-grant\""), "{}", a.body);
    assert!(
        a.body.contains(&format!(
            "<input id=\"organization_id\" name=\"organization_id\" type=\"number\" value=\"{acme}\""
        )),
        "{}",
        a.body
    );
    assert!(a.body.contains(r#"name="quantity" type="number" value="1""#), "{}", a.body);
    assert!(a.body.contains(&format!("<option value=\"{basic}\">Basic</option>")), "{}", a.body);
    assert!(a.body.contains(r#"action="/operator/grants""#), "{}", a.body);
    let empty = op.get("/operator/grants/new").await;
    assert!(empty.body.contains(r#"name="organization_id" type="number" value="""#), "{}", empty.body);

    let (before, _) = state(&t).await;
    let b = basic.to_string();
    let o = acme.to_string();
    let a = op
        .post(
            "/operator/grants",
            &[
                ("organization_id", &o),
                ("provision_domain", ""),
                ("product_id", &b),
                ("quantity", "1"),
                ("starts_at", ""),
                ("ends_at", ""),
                ("reason", "Pilot partner"),
            ],
            false,
        )
        .await;
    let g = newest_grant(&t).await;
    assert_sent_to(&a, false, &format!("/operator/grants/{g}"));
    let after = counts(&t).await;
    assert_eq!(after[0], before[0] + 1, "one grant");
    assert_eq!(after[1], before[1] + 1, "one event");
    let (org, kind, status, reason, by): (i64, String, String, String, i64) = t
        .one(
            sqlx::query_as(
                "SELECT organization_id, kind, status, reason, created_by FROM core.grants WHERE grant_id = $1",
            )
            .bind(g),
        )
        .await;
    assert_eq!(
        (org, kind.as_str(), status.as_str(), reason.as_str(), by),
        (acme, "operator", "active", "Pilot partner", operator)
    );
    let (act, actor): (String, Option<i64>) =
        t.one(sqlx::query_as("SELECT act, actor_account_id FROM core.grant_events WHERE grant_id = $1").bind(g)).await;
    assert_eq!((act.as_str(), actor), ("issued", Some(operator)));

    // The grant's page.
    let page = op.get(&format!("/operator/grants/{g}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let html = &page.body;
    assert!(html.contains(&format!("<dt>Grant</dt><dd>#{g}</dd>")), "{html}");
    assert!(html.contains(&format!("<dd><a href=\"/operator/organizations/{acme}\">Acme Wikis</a></dd>")), "{html}");
    assert!(html.contains("<dt>Product</dt><dd>Basic</dd>"), "{html}");
    assert!(html.contains("<dt>Kind</dt><dd>operator</dd>"), "{html}");
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-ok">active</span></dd>"#), "{html}");
    assert!(html.contains(r#"<dt>Ends</dt><dd><span class="muted">open-ended</span></dd>"#), "{html}");
    assert!(html.contains("<dt>Reason</dt><dd>Pilot partner</dd>"), "{html}");
    assert!(!html.contains("was extended"), "{html}");
    assert!(html.contains(&format!("action=\"/operator/grants/{g}/revoke\"")), "{html}");
    assert!(html.contains(&format!("action=\"/operator/grants/{g}/manage\"")), "{html}");
    let issued = row_with(html, "<td>issued</td>");
    assert!(
        issued.contains(&format!(
            "<td>issued</td><td>{}</td><td>{}</td><td>Pilot partner</td>",
            demo::OPERATOR_EMAIL,
            grant_link(g)
        )),
        "{issued}"
    );

    // The organization's page: the new plan, its grant, and the audit trail.
    let html = op.get(&format!("/operator/organizations/{acme}")).await.body;
    let plan = row(&html, "Wiki hosting");
    assert!(plan.contains("<td>Basic</td>") && plan.contains(&format!("<td>operator grant #{g}</td>")), "{plan}");
    assert!(
        html.contains(r#"<tr><td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>3</td></tr>"#),
        "{html}"
    );
    assert!(row(&html, &grant_link(g)).contains("<span class=\"badge badge-ok\">active</span>"), "{html}");
    let audit = &html[html.find("audit-heading").unwrap()..];
    assert!(
        audit.contains(&format!(
            "<td>issued</td><td>{}</td><td>{}</td><td>Pilot partner</td>",
            demo::OPERATOR_EMAIL,
            grant_link(g)
        )),
        "{audit}"
    );

    // With HTMX: 200 and HX-Redirect.
    let globex = organization_id(&t, "Globex").await.to_string();
    let priority = product_id(&t, "Priority support").await.to_string();
    let a = op
        .post(
            "/operator/grants",
            &[("organization_id", &globex), ("product_id", &priority), ("quantity", "2"), ("reason", "Support trial")],
            true,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let g2 = newest_grant(&t).await;
    assert!(g2 > g);
    assert_eq!(a.header("hx-redirect"), Some(format!("/operator/grants/{g2}").as_str()));
    assert!(a.header("location").is_none());
    assert_eq!(grant_status(&t, g2).await, "active");
    let html = op.get(&format!("/operator/grants/{g2}")).await.body;
    assert!(html.contains("<dt>Quantity</dt><dd>2</dd>"), "{html}");
}

// ---------- 3. Issue refusals ----------

#[tokio::test]
async fn bad_issue_input_is_refused_with_its_message_and_writes_nothing() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await.to_string();
    let basic = product_id(&t, "Basic").await.to_string();
    let pro_set = set_id(&t, "Pro").await;
    let hidden: i64 = t.one(sqlx::query_scalar(
        "INSERT INTO core.products (name, entitlement_set_id, published) VALUES ('Hidden', $1, false) RETURNING product_id",
    )
    .bind(pro_set)).await;
    let hidden = hidden.to_string();
    let tomorrow = local_in(1);
    let in_two_days = local_in(2);

    let ok = |changes: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        let mut f: Vec<(&'static str, String)> = vec![
            ("organization_id", acme.clone()),
            ("provision_domain", String::new()),
            ("product_id", basic.clone()),
            ("quantity", "1".into()),
            ("starts_at", String::new()),
            ("ends_at", String::new()),
            ("reason", "A reason".into()),
        ];
        for (k, v) in changes {
            f.iter_mut().find(|(n, _)| n == k).unwrap().1 = v.to_string();
        }
        f
    };
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    type Case<'a> = (&'a str, Vec<(&'static str, String)>, &'a str);
    let cases: Vec<Case> = vec![
        ("no recipient", ok(&[("organization_id", "")]), "Name an organization, or an email domain to wait for."),
        (
            "both recipients",
            ok(&[("provision_domain", "newco.example.org")]),
            "Name an organization or an email domain, not both.",
        ),
        ("unknown organization", ok(&[("organization_id", "987654")]), "There is no organization #987654."),
        ("organization not a number", ok(&[("organization_id", "acme")]), "“acme” is not an organization number."),
        (
            "bad domain",
            ok(&[("organization_id", ""), ("provision_domain", "not a domain")]),
            "“not a domain” is not an email domain such as example.org.",
        ),
        ("bare domain", ok(&[("organization_id", ""), ("provision_domain", "localhost")]), "is not an email domain"),
        ("no product", ok(&[("product_id", "")]), "Choose a product."),
        ("unknown product", ok(&[("product_id", "987654")]), "That product does not exist."),
        (
            "unpublished product",
            ok(&[("product_id", &hidden)]),
            "That product is not published, so it cannot be granted.",
        ),
        ("quantity 0", ok(&[("quantity", "0")]), "A quantity is a whole number from 1 to 1000."),
        ("quantity 1001", ok(&[("quantity", "1001")]), "A quantity is a whole number from 1 to 1000."),
        ("quantity abc", ok(&[("quantity", "abc")]), "A quantity is a whole number from 1 to 1000."),
        (
            "end before start",
            ok(&[("starts_at", &in_two_days), ("ends_at", &tomorrow)]),
            "The end must come after the start.",
        ),
        (
            "end at the start",
            ok(&[("starts_at", &tomorrow), ("ends_at", &tomorrow)]),
            "The end must come after the start.",
        ),
        (
            "end in the past after a past start",
            ok(&[("starts_at", "2000-01-01T00:00"), ("ends_at", "2001-01-01T00:00")]),
            "The end is in the past.",
        ),
        (
            "start not a date",
            ok(&[("starts_at", "soon")]),
            "“soon” is not a date and time (for example 2027-01-31T12:00).",
        ),
        ("start not a day", ok(&[("starts_at", "2027-02-30")]), "“2027-02-30” is not a date and time"),
        ("end not a date", ok(&[("ends_at", "tomorrow")]), "“tomorrow” is not a date and time"),
        ("empty reason", ok(&[("reason", "   ")]), "Say why: a reason is kept with the grant."),
        ("long reason", ok(&[("reason", &"r".repeat(501))]), "A reason may have at most 500 characters."),
    ];

    let before = state(&t).await;
    for (case, fields, message) in &cases {
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for htmx in [false, true] {
            let a = op.post("/operator/grants", &fields, htmx).await;
            let case = format!("{case} (htmx: {htmx})");
            assert_refused(&a, unprocessable, htmx, "issue-grant", message, &case);
            assert!(
                a.body.contains("Nothing was changed: correct the fields marked below."),
                "{case}: the banner: {}",
                a.body
            );
            // The operator's input comes back.
            if fields[6].1 == "A reason" {
                assert!(a.body.contains(r#"value="A reason""#), "{case}: the reason is kept: {}", a.body);
            }
            assert_eq!(state(&t).await, before, "{case}: nothing was written");
        }
    }
    // Several problems at once are all told.
    let a = op
        .post(
            "/operator/grants",
            &[("organization_id", ""), ("product_id", ""), ("quantity", "0"), ("reason", "")],
            true,
        )
        .await;
    assert_eq!(a.status, unprocessable);
    for m in [
        "Name an organization, or an email domain to wait for.",
        "Choose a product.",
        "A quantity is a whole number from 1 to 1000.",
        "Say why: a reason is kept with the grant.",
    ] {
        assert!(a.body.contains(m), "{m}: {}", a.body);
    }
    assert_eq!(state(&t).await, before, "nothing was written");
}

/// An end in the past with the start left empty (now) is the common mistake; the form should
/// say the end is in the past, as it does when a past start is given.
#[tokio::test]
async fn an_end_in_the_past_with_no_start_is_refused_as_in_the_past() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await.to_string();
    let basic = product_id(&t, "Basic").await.to_string();
    let before = state(&t).await;
    for htmx in [false, true] {
        let a = op
            .post(
                "/operator/grants",
                &[("organization_id", &acme), ("product_id", &basic), ("ends_at", "2001-01-01T00:00"), ("reason", "r")],
                htmx,
            )
            .await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
        assert_eq!(state(&t).await, before, "nothing was written");
        assert!(a.body.contains("The end is in the past."), "htmx {htmx}: {}", a.body);
    }
}

// ---------- 4. Waiting grants and managing ----------

#[tokio::test]
async fn a_waiting_grant_is_rescheduled_in_place() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let basic = product_id(&t, "Basic").await.to_string();
    let tomorrow = local_in(1);
    let a = op
        .post(
            "/operator/grants",
            &[
                ("organization_id", &acme.to_string()),
                ("product_id", &basic),
                ("starts_at", &tomorrow),
                ("reason", "From tomorrow"),
            ],
            false,
        )
        .await;
    let g = newest_grant(&t).await;
    assert_sent_to(&a, false, &format!("/operator/grants/{g}"));
    assert_eq!(grant_status(&t, g).await, "waiting");
    let conferrals: i64 =
        t.one(sqlx::query_scalar("SELECT count(*) FROM core.conferrals WHERE grant_id = $1").bind(g)).await;
    assert_eq!(conferrals, 0, "a waiting grant confers nothing yet");

    let html = op.get(&format!("/operator/grants/{g}")).await.body;
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-muted">waiting</span></dd>"#), "{html}");
    assert!(html.contains(&format!("<dt>Starts</dt><dd>{}</dd>", shown(&tomorrow))), "{html}");
    assert!(html.contains("This grant has not started: saving reschedules it in place."), "{html}");
    assert!(html.contains(r#"<input id="manage-starts_at" name="starts_at" type="datetime-local""#), "{html}");
    assert!(html.contains(&format!("action=\"/operator/grants/{g}/revoke\"")), "a waiting grant can be revoked");
    // The organization keeps its floor meanwhile.
    let org = op.get(&format!("/operator/organizations/{acme}")).await.body;
    assert!(row(&org, "Wiki hosting").contains("<td>Free</td>"), "{org}");
    assert!(row(&org, &grant_link(g)).contains("badge-muted\">waiting</span>"), "{org}");

    // Reschedule: new start, an end, quantity 2; the same grant.
    let (before, _) = state(&t).await;
    let (start, end) = (local_in(2), local_in(30));
    let a = op
        .post(
            &format!("/operator/grants/{g}/manage"),
            &[("starts_at", &start), ("ends_at", &end), ("quantity", "2"), ("reason", "Moved a day")],
            false,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(a.header("location"), Some(format!("/operator/grants/{g}").as_str()), "the same grant");
    let after = counts(&t).await;
    assert_eq!(after[0], before[0], "no new grant");
    assert_eq!(after[1], before[1] + 1, "one event");
    assert_eq!(grant_dates(&t, g).await, (start.clone(), Some(end.clone()), 2));
    assert_eq!(grant_status(&t, g).await, "waiting");
    let html = op.get(&format!("/operator/grants/{g}")).await.body;
    assert!(html.contains(&format!("<dt>Starts</dt><dd>{}</dd>", shown(&start))), "{html}");
    assert!(html.contains(&format!("<dt>Ends</dt><dd>{}</dd>", shown(&end))), "{html}");
    assert!(html.contains("<dt>Quantity</dt><dd>2</dd>"), "{html}");
    assert!(
        row_with(&html, "<td>rescheduled</td>").contains(&format!(
            "<td>rescheduled</td><td>{}</td><td>{}</td><td>Moved a day</td>",
            demo::OPERATOR_EMAIL,
            grant_link(g)
        )),
        "{html}"
    );

    // With HTMX, and only the end (the start stays).
    let end2 = local_in(40);
    let a = op
        .post(
            &format!("/operator/grants/{g}/manage"),
            &[("ends_at", &end2), ("quantity", "2"), ("reason", "Longer")],
            true,
        )
        .await;
    assert_sent_to(&a, true, &format!("/operator/grants/{g}"));
    assert_eq!(grant_dates(&t, g).await, (start, Some(end2), 2));
}

/// A waiting grant given only a new end that comes before its (kept) start must be refused as
/// bad input, not reach the database's CHECK.
#[tokio::test]
async fn rescheduling_a_waiting_grant_to_end_before_its_start_is_refused() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await.to_string();
    let basic = product_id(&t, "Basic").await.to_string();
    let start = local_in(5);
    let a = op
        .post(
            "/operator/grants",
            &[("organization_id", &acme), ("product_id", &basic), ("starts_at", &start), ("reason", "Later")],
            false,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let g = newest_grant(&t).await;
    let end = local_in(1);
    op.refuse_all(
        &format!("/operator/grants/{g}/manage"),
        "manage-grant",
        &[(
            "end before the kept start",
            vec![("ends_at", &end), ("quantity", "1"), ("reason", "Shorter")],
            StatusCode::UNPROCESSABLE_ENTITY,
            "The end must come after the start.",
        )],
        async || state(&t).await,
    )
    .await;
}

#[tokio::test]
async fn managing_an_active_grant_extends_it_as_a_new_grant_in_its_lineage() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let html = op.get(&format!("/operator/grants/{pro}")).await.body;
    assert!(html.contains("An active grant is extended as a new grant in its lineage"), "{html}");
    assert!(!html.contains(r#"name="starts_at""#), "an active grant keeps its start: {html}");

    let (before, _) = state(&t).await;
    let end = local_in(60);
    let a = op
        .post(
            &format!("/operator/grants/{pro}/manage"),
            &[("ends_at", &end), ("quantity", "2"), ("reason", "Renewed for two months")],
            false,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let new = newest_grant(&t).await;
    assert_ne!(new, pro);
    assert_eq!(a.header("location"), Some(format!("/operator/grants/{new}").as_str()), "lands on the new grant");
    let after = counts(&t).await;
    assert_eq!(after[0], before[0] + 1, "one new grant");
    assert_eq!(after[1], before[1] + 2, "extended and issued");
    let (extends, same_lineage, status): (Option<i64>, bool, String) = t
        .one(
            sqlx::query_as(
                "SELECT n.extends_grant_id, n.lineage_id = o.lineage_id, n.status
         FROM core.grants n, core.grants o WHERE n.grant_id = $1 AND o.grant_id = $2",
            )
            .bind(new)
            .bind(pro),
        )
        .await;
    assert_eq!((extends, same_lineage, status.as_str()), (Some(pro), true, "active"));
    assert_eq!(grant_status(&t, pro).await, "ended");
    assert_eq!(grant_dates(&t, new).await.1, Some(end.clone()));
    assert_eq!(grant_dates(&t, new).await.2, 2);

    // The new grant's page: active, its lineage with the old one linked.
    let html = op.get(&format!("/operator/grants/{new}")).await.body;
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-ok">active</span></dd>"#), "{html}");
    assert!(html.contains(&format!("<dt>Ends</dt><dd>{}</dd>", shown(&end))), "{html}");
    assert!(!html.contains("was extended"), "{html}");
    let lineage = &html[html.find("lineage-heading").unwrap()..html.find("history-heading").unwrap()];
    assert!(
        lineage.contains(&format!("<td>{}</td><td><span class=\"badge badge-bad\">ended</span>", grant_link(pro))),
        "{lineage}"
    );
    assert!(lineage.contains(&format!("<strong aria-current=\"true\">#{new}</strong>")), "{lineage}");
    assert!(html.contains(&format!("action=\"/operator/grants/{new}/manage\"")), "{html}");
    let history = &html[html.find("history-heading").unwrap()..];
    assert!(history.contains("<td>extended</td>") && history.contains("<td>issued</td>"), "{history}");

    // The old page says it was extended and links the head; its acts go to the head.
    let html = op.get(&format!("/operator/grants/{pro}")).await.body;
    assert!(
        html.contains(&format!(
            "This grant was extended: acts apply to grant <a href=\"/operator/grants/{new}\">#{new}</a>."
        )),
        "{html}"
    );
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-bad">ended</span></dd>"#), "{html}");
    assert!(html.contains(&format!("action=\"/operator/grants/{new}/revoke\"")), "{html}");
    assert!(!html.contains(&format!("/operator/grants/{pro}/revoke")), "{html}");

    // The organization still holds Pro, now by the new grant.
    let html = op.get(&format!("/operator/organizations/{initech}")).await.body;
    let plan = row(&html, "Wiki hosting");
    assert!(plan.contains("<td>Pro × 2</td>") || plan.contains("<td>Pro</td>"), "{plan}");
    assert!(plan.contains(&format!("<td>operator grant #{new}</td>")), "{plan}");
}

#[tokio::test]
async fn bad_manage_input_is_refused_and_writes_nothing() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let path = format!("/operator/grants/{pro}/manage");
    let future = local_in(10);
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let before = state(&t).await;
    op.refuse_all(
        &path,
        "manage-grant",
        &[
            (
                "end in the past",
                vec![
                    ("starts_at", "2000-01-01T00:00"),
                    ("ends_at", "2001-01-01T00:00"),
                    ("quantity", "1"),
                    ("reason", "r"),
                ],
                unprocessable,
                "The end is in the past.",
            ),
            (
                "quantity 0",
                vec![("ends_at", &future), ("quantity", "0"), ("reason", "r")],
                unprocessable,
                "A quantity is a whole number from 1 to 1000.",
            ),
            (
                "quantity abc",
                vec![("quantity", "abc"), ("reason", "r")],
                unprocessable,
                "A quantity is a whole number from 1 to 1000.",
            ),
            (
                "empty reason",
                vec![("ends_at", &future), ("quantity", "1"), ("reason", "")],
                unprocessable,
                "Say why: a reason is kept with the grant.",
            ),
            (
                "end not a date",
                vec![("ends_at", "someday"), ("quantity", "1"), ("reason", "r")],
                unprocessable,
                "“someday” is not a date and time",
            ),
        ],
        async || state(&t).await,
    )
    .await;
    // An unknown grant is a 404.
    let a = op.post("/operator/grants/987654/manage", &[("quantity", "1"), ("reason", "r")], false).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    // A start for a grant that has started: refused, nothing written (its message: see
    // `a_start_for_an_active_grant_is_refused_with_its_message`).
    for htmx in [false, true] {
        let fields = [("starts_at", future.as_str()), ("quantity", "1"), ("reason", "r")];
        let a = op.post(&path, &fields, htmx).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "a start (htmx: {htmx}): {}", a.body);
        assert!(a.body.contains("id=\"manage-grant\""), "{}", a.body);
        assert_eq!(state(&t).await, before, "a start (htmx: {htmx}): nothing was written");
    }
    // A floor is not managed by hand.
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let floor = active_grant(&t, acme, "floor").await;
    let a = op.post(&format!("/operator/grants/{floor}/manage"), &[("quantity", "2"), ("reason", "r")], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("is not managed by hand"), "{}", a.body);
    assert_eq!(state(&t).await, before, "nothing was written");
}

/// The manage form of an active grant has no start field, so the refusal of a start must be
/// shown where the operator sees it, not as the error of a field the form does not have.
#[tokio::test]
async fn a_start_for_an_active_grant_is_refused_with_its_message() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let start = local_in(3);
    op.refuse_all(
        &format!("/operator/grants/{pro}/manage"),
        "manage-grant",
        &[(
            "a start for an active grant",
            vec![("starts_at", &start), ("quantity", "1"), ("reason", "r")],
            StatusCode::UNPROCESSABLE_ENTITY,
            "A grant that has started keeps its start; change its end or quantity.",
        )],
        async || state(&t).await,
    )
    .await;
}

// ---------- 5. Revoking ----------

#[tokio::test]
async fn revoking_from_the_grant_page_falls_back_to_the_floor() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let path = format!("/operator/grants/{pro}/revoke");
    let html = op.get(&format!("/operator/grants/{pro}")).await.body;
    assert!(html.contains(&format!("action=\"{path}\"")) && html.contains("id=\"revoke-grant\""), "{html}");

    let (before, _) = state(&t).await;
    let a = op.post(&path, &[("reason", "Partnership ended")], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(a.header("location"), Some(format!("/operator/grants/{pro}").as_str()), "back to the grant");
    assert_eq!(grant_status(&t, pro).await, "revoked");
    let after = counts(&t).await;
    assert_eq!(after[1], before[1] + 1, "one event");
    let revoked: (String, Option<String>) = t.one(sqlx::query_as(
        "SELECT e.act, a.email FROM core.grant_events e LEFT JOIN core.accounts a ON a.account_id = e.actor_account_id
         WHERE e.grant_id = $1 ORDER BY e.event_id DESC LIMIT 1",
    )
    .bind(pro)).await;
    assert_eq!(revoked, ("revoked".into(), Some(demo::OPERATOR_EMAIL.into())));

    let html = op.get(&format!("/operator/grants/{pro}")).await.body;
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-bad">revoked</span></dd>"#), "{html}");
    assert!(!html.contains("id=\"revoke-grant\"") && !html.contains("id=\"manage-grant\""), "no acts left: {html}");
    assert!(
        row_with(&html, "<td>revoked</td>").contains(&format!("<td>revoked</td><td>{}</td>", demo::OPERATOR_EMAIL)),
        "{html}"
    );

    // Initech holds its floor again.
    let floor = active_grant(&t, initech, "floor").await;
    let html = op.get(&format!("/operator/organizations/{initech}")).await.body;
    let plan = row(&html, "Wiki hosting");
    assert!(plan.contains("<td>Free</td>") && plan.contains(&format!("<td>floor grant #{floor}</td>")), "{plan}");
    assert!(
        html.contains(r#"<tr><td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>1</td></tr>"#),
        "{html}"
    );
    let audit = &html[html.find("audit-heading").unwrap()..];
    assert!(
        audit.contains(&format!(
            "<td>revoked</td><td>{}</td><td>{}</td><td>Partnership ended</td>",
            demo::OPERATOR_EMAIL,
            grant_link(pro)
        )),
        "{audit}"
    );

    // Revoking again: 409, nothing written. HTMX gets the form with the message.
    let before = state(&t).await;
    let a = op.post(&path, &[("reason", "Again")], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains(&format!("Grant #{pro} is revoked already; there is nothing to revoke.")), "{}", a.body);
    assert!(!a.body.contains("<html"), "{}", a.body);
    assert_eq!(state(&t).await, before, "nothing was written");
    // A plain post: the page, with the message.
    let a = op.post(&path, &[("reason", "Again")], false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("<html"), "{}", a.body);
    assert_eq!(state(&t).await, before, "nothing was written");
    // (That the plain page also says why: `a_refused_act_from_a_plain_form_says_why_on_the_page`.)
}

#[tokio::test]
async fn a_floor_cannot_be_revoked_and_a_reason_is_required() {
    let (t, op) = operator_session().await;
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let floor = active_grant(&t, acme, "floor").await;
    let html = op.get(&format!("/operator/grants/{floor}")).await.body;
    assert!(html.contains("<dt>Kind</dt><dd>floor</dd>"), "{html}");
    assert!(!html.contains("id=\"revoke-grant\"") && !html.contains("/revoke\""), "no revoke form on a floor: {html}");
    assert!(!html.contains("id=\"manage-grant\""), "no manage form on a floor: {html}");

    let before = state(&t).await;
    let path = format!("/operator/grants/{floor}/revoke");
    let a = op.post(&path, &[("reason", "Sneaky")], true).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(a.body.contains("cannot be revoked"), "{}", a.body);
    assert_eq!(state(&t).await, before, "nothing was written");
    let a = op.post(&path, &[("reason", "Sneaky")], false).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert_eq!(state(&t).await, before, "nothing was written");

    // An empty reason: 422, the form again, nothing written.
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let path = format!("/operator/grants/{pro}/revoke");
    for htmx in [false, true] {
        for reason in ["", "   "] {
            let a = op.post(&path, &[("reason", reason)], htmx).await;
            let case = format!("reason {reason:?} (htmx: {htmx})");
            assert_refused(
                &a,
                StatusCode::UNPROCESSABLE_ENTITY,
                htmx,
                "revoke-grant",
                "Say why: a reason is kept with the grant.",
                &case,
            );
            assert_eq!(state(&t).await, before, "{case}: nothing was written");
        }
    }
    assert_eq!(grant_status(&t, pro).await, "active");
    // An unknown grant is a 404.
    let a = op.post("/operator/grants/987654/revoke", &[("reason", "r")], false).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = op.get("/operator/grants/987654").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.body.contains("There is nothing at this address"), "{}", a.body);
}

/// A refused act (409) posted without HTMX answers with the grant's page; that page must say
/// why nothing happened, even though the grant no longer offers the form the message belongs to.
#[tokio::test]
async fn a_refused_act_from_a_plain_form_says_why_on_the_page() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let a = op.post(&format!("/operator/grants/{pro}/revoke"), &[("reason", "Ended")], false).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let floor = active_grant(&t, acme, "floor").await;
    let before = state(&t).await;
    let mut missing = vec![];
    for (case, path, fields, message) in [
        (
            "revoke a revoked grant",
            format!("/operator/grants/{pro}/revoke"),
            vec![("reason", "Again")],
            format!("Grant #{pro} is revoked already; there is nothing to revoke."),
        ),
        (
            "manage a revoked grant",
            format!("/operator/grants/{pro}/manage"),
            vec![("quantity", "1"), ("reason", "Again")],
            format!("Grant #{pro} is revoked; only a live grant can be changed."),
        ),
        (
            "revoke a floor",
            format!("/operator/grants/{floor}/revoke"),
            vec![("reason", "Sneaky")],
            "cannot be revoked; grant another plan over it instead.".to_string(),
        ),
        (
            "manage a floor",
            format!("/operator/grants/{floor}/manage"),
            vec![("quantity", "2"), ("reason", "Sneaky")],
            "A floor follows the organization".to_string(),
        ),
    ] {
        let a = op.post(&path, &fields, false).await;
        assert_eq!(a.status, StatusCode::CONFLICT, "{case}: {}", a.body);
        assert!(a.body.contains("<html"), "{case}: a page");
        assert_eq!(state(&t).await, before, "{case}: nothing was written");
        if !a.body.contains(&message) {
            missing.push(case);
        }
    }
    assert!(missing.is_empty(), "these plain 409 pages do not say why nothing happened: {missing:?}");
}

// ---------- 6. Grants to an email domain ----------

#[tokio::test]
async fn a_domain_grant_waits_for_its_organization_and_confers_when_it_is_created() {
    let (t, op) = operator_session().await;
    let basic = product_id(&t, "Basic").await.to_string();
    let community = org_type_id(&t, "Community").await.to_string();

    let a = op
        .post(
            "/operator/grants",
            &[
                ("organization_id", ""),
                ("provision_domain", "NewCo.Example.org"),
                ("product_id", &basic),
                ("reason", "Launch offer"),
            ],
            false,
        )
        .await;
    let g = newest_grant(&t).await;
    assert_sent_to(&a, false, &format!("/operator/grants/{g}"));
    let (org, domain, kind, status): (Option<i64>, Option<String>, String, String) = t
        .one(
            sqlx::query_as(
                "SELECT organization_id, provision_domain, kind, status FROM core.grants WHERE grant_id = $1",
            )
            .bind(g),
        )
        .await;
    assert_eq!(
        (org, domain.as_deref(), kind.as_str(), status.as_str()),
        (None, Some("newco.example.org"), "provisioning", "waiting")
    );
    let html = op.get(&format!("/operator/grants/{g}")).await.body;
    assert!(html.contains("waits for an organization of </span><code>newco.example.org</code>"), "{html}");
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-muted">waiting</span></dd>"#), "{html}");
    assert!(html.contains("<dt>Kind</dt><dd>provisioning</dd>"), "{html}");
    let list = op.get("/operator/grants?status=waiting").await.body;
    assert!(row(&list, &grant_link(g)).contains("<code>newco.example.org</code>"), "{list}");

    // Creating the organization with that domain confers it.
    let (before, _) = state(&t).await;
    let a = op
        .post(
            "/operator/organizations",
            &[("name", "NewCo"), ("org_type_id", &community), ("email_domain", "newco.example.org")],
            false,
        )
        .await;
    let newco = organization_id(&t, "NewCo").await;
    assert_sent_to(&a, false, &format!("/operator/organizations/{newco}"));
    let after = counts(&t).await;
    assert_eq!(after[3], before[3] + 1, "one organization");
    assert_eq!(grant_status(&t, g).await, "active");
    let html = op.get(&format!("/operator/organizations/{newco}")).await.body;
    assert!(html.contains("<dd>Community</dd>"), "{html}");
    let plan = row(&html, "Wiki hosting");
    assert!(plan.contains("<td>Basic</td>") && plan.contains(&format!("<td>provisioning grant #{g}</td>")), "{plan}");
    assert!(plan.contains(r#"<span class="badge badge-ok">active</span>"#), "{plan}");
    assert!(
        html.contains(r#"<tr><td>Active sites <code class="muted">fedwiki.active_sites</code></td><td>3</td></tr>"#),
        "{html}"
    );
    assert!(row(&html, &grant_link(g)).contains(r#"<span class="badge badge-ok">active</span>"#), "{html}");
    let audit = &html[html.find("audit-heading").unwrap()..];
    assert!(audit.contains(&format!("<td>provisioned</td><td>the console</td><td>{}</td>", grant_link(g))), "{audit}");
    let html = op.get(&format!("/operator/grants/{g}")).await.body;
    assert!(html.contains(&format!("<a href=\"/operator/organizations/{newco}\">NewCo</a>")), "{html}");
    assert!(html.contains(r#"<dt>Status</dt><dd><span class="badge badge-ok">active</span></dd>"#), "{html}");

    // A second organization with the same domain: 422 and nothing written, plain and HTMX.
    let before = state(&t).await;
    for (htmx, domain) in [(false, "newco.example.org"), (true, "NEWCO.example.org")] {
        let a = op
            .post(
                "/operator/organizations",
                &[("name", "NewCo Two"), ("org_type_id", &community), ("email_domain", domain)],
                htmx,
            )
            .await;
        assert_refused(
            &a,
            StatusCode::UNPROCESSABLE_ENTITY,
            htmx,
            "create-organization",
            "Another organization has the email domain newco.example.org already.",
            &format!("duplicate domain (htmx: {htmx})"),
        );
        assert_eq!(state(&t).await, before, "nothing was written");
    }
}

#[tokio::test]
async fn bad_organization_input_is_refused_and_writes_nothing() {
    let (t, op) = operator_session().await;
    let community = org_type_id(&t, "Community").await.to_string();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "empty name",
            vec![("name", "  "), ("org_type_id", &community), ("email_domain", "")],
            "An organization needs a name.",
        ),
        (
            "unknown type",
            vec![("name", "Typo Inc"), ("org_type_id", "987654"), ("email_domain", "")],
            "Choose an organization type from the list.",
        ),
        (
            "type not a number",
            vec![("name", "Typo Inc"), ("org_type_id", "abc")],
            "Choose an organization type from the list.",
        ),
        (
            "bad domain",
            vec![("name", "Typo Inc"), ("org_type_id", &community), ("email_domain", "not a domain")],
            "“not a domain” is not an email domain such as example.org.",
        ),
        ("bare domain", vec![("name", "Typo Inc"), ("email_domain", "localhost")], "is not an email domain"),
    ];
    let before = state(&t).await;
    for (case, fields, message) in &cases {
        for htmx in [false, true] {
            let a = op.post("/operator/organizations", fields, htmx).await;
            let case = format!("{case} (htmx: {htmx})");
            assert_refused(&a, StatusCode::UNPROCESSABLE_ENTITY, htmx, "create-organization", message, &case);
            assert!(a.body.contains("Nothing was created: correct the fields marked below."), "{case}: {}", a.body);
            assert_eq!(state(&t).await, before, "{case}: nothing was written");
        }
    }
}

// ---------- 7. Who may ----------

#[tokio::test]
async fn members_are_refused_and_anonymous_visitors_sent_to_sign_in_on_every_grant_page() {
    let (t, app) = app_with_demo().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let basic = product_id(&t, "Basic").await.to_string();
    let org = initech.to_string();
    let pages = [
        "/operator/grants".to_string(),
        "/operator/grants?status=active".to_string(),
        format!("/operator/grants?organization_id={initech}"),
        "/operator/grants/new".to_string(),
        format!("/operator/grants/new?organization_id={initech}"),
        format!("/operator/grants/{pro}"),
    ];
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/operator/grants".into(), vec![("organization_id", &org), ("product_id", &basic), ("reason", "Sneaky")]),
        (format!("/operator/grants/{pro}/revoke"), vec![("reason", "Sneaky")]),
        (format!("/operator/grants/{pro}/manage"), vec![("quantity", "5"), ("reason", "Sneaky")]),
        ("/operator/organizations".into(), vec![("name", "Sneaky"), ("email_domain", "sneaky.example.org")]),
    ];
    let before = state(&t).await;

    assert_operators_only(&app, &pages, &forms).await;
    assert_eq!(state(&t).await, before, "no refused request wrote anything");
}

// ---------- 8. A form with a field it does not have, or without one ----------

/// A field the form does not have (a misspelling, a page older than the console) is refused
/// naming it, and a field not sent at all gets that field's own message, as an empty one does:
/// each a 4xx, and nothing written.
#[tokio::test]
async fn a_misspelt_or_missing_field_on_a_grant_or_organization_form_is_refused_by_name() {
    let (t, op) = operator_session().await;
    let initech = organization_id(&t, "Initech").await;
    let pro = active_grant(&t, initech, "operator").await;
    let basic = product_id(&t, "Basic").await.to_string();
    let org = initech.to_string();
    let (revoke, manage) = (format!("/operator/grants/{pro}/revoke"), format!("/operator/grants/{pro}/manage"));
    let misspelt = [
        (
            "/operator/grants",
            &[("organization_id", org.as_str()), ("product_id", basic.as_str()), ("reasn", "typo")][..],
            "reasn",
        ),
        (revoke.as_str(), &[("reasn", "typo")][..], "reasn"),
        (manage.as_str(), &[("quantity", "2"), ("reason", "r"), ("ends", "2999-01-01T00:00")][..], "ends"),
        ("/operator/organizations", &[("name", "Typo Inc"), ("emial_domain", "typo.example.org")][..], "emial_domain"),
    ];
    let missing = [
        (
            "/operator/grants",
            &[("organization_id", org.as_str()), ("product_id", basic.as_str())][..],
            "Say why: a reason",
        ),
        (revoke.as_str(), &[][..], "Say why: a reason is kept with the grant."),
        (manage.as_str(), &[("quantity", "2")][..], "Say why: a reason is kept with the grant."),
        ("/operator/organizations", &[("org_type_id", "")][..], "An organization needs a name."),
    ];
    op.refuse_misspelt_and_missing(&misspelt, &missing, async || state(&t).await).await;
    assert_eq!(grant_status(&t, pro).await, "active");
}
