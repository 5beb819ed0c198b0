//! WCAG 2.1 A and AA on every page of the demo, checked by axe-core in Chromium: the pages a
//! visitor sees (sign-in, sign-up, the forgotten password, and the links mail brings), the
//! member's and the operator's, each walked from the route table with the demo's ids, so a page
//! added later is checked too (or the test says it does not know it). Needs axe-core
//! (scripts/test installs it: scripts/install-axe, `AXE_CORE_JS`); fails without it.

use member_console::{
    demo,
    ids::{EntitlementSetId, OrganizationId},
    services::{
        auth::Email,
        invitations::{self, Invite, Inviter},
        members::Role,
        signup,
    },
    web::routes::{Access, ROUTES},
};
use views::paths;

use crate::common::{
    self, TestDb,
    browser::{Browser, SIGNED_IN, WAIT},
    pages::{account_id, organization_id},
};

/// The GET routes that are no page of their own, and why; every other GET route of the table
/// (but the open ones: probes, metrics, static files) is a page this test checks.
const NOT_PAGES: &[(&str, &str)] = &[
    (paths::SITES_LIVE, "the sites page's live part, polled into /sites, which is checked"),
    (paths::PLAN_ACT_PROGRESS, "a plan act's progress, polled into its page, which is checked"),
    (paths::RULE_CHANGE_PROGRESS, "a rule change's progress, polled into its page, which is checked"),
    (paths::TIERS_PREVIEW, "a preview htmx swaps into the topology page's form"),
    (paths::ORG_TYPE_DEFAULT_PREVIEW, "a preview htmx swaps into the topology page's form"),
    (paths::TIER_REMOVE_PREVIEW, "a preview htmx swaps into the topology page's form"),
    (paths::TIER_ORDER_PREVIEW, "a preview htmx swaps into the topology page's form"),
    (paths::SITE_OPEN, "a redirect to the site's wiki on the farm"),
    (paths::BILLING_RETURN, "a redirect from Stripe's checkout back to /billing"),
];

/// Someone the browser is signed in as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Visitor,
    Member,
    Operator,
}

/// The demo, with something behind every page that takes an id: a grant, a rule change, a plan
/// act, a connection; and a live link of each kind mail brings (verification, password reset,
/// invitation), as query strings for their pages.
struct Fixture {
    t: TestDb,
    links: Vec<(&'static str, String)>,
}

async fn fixture() -> Fixture {
    // The demo as `serve --demo` loads it: with its community wikis, so the lists run over pages
    // and sign-up is open.
    let t = TestDb::new().await;
    demo::load_with_community(&t.db).await.unwrap();
    let org = OrganizationId(organization_id(&t, demo::DEMO_ORGANIZATION).await);
    let pro = common::acts::product_id(&t, "Pro").await;
    common::acts::grant(&t, org, pro).await;
    let set = EntitlementSetId(common::acts::id_by_name(&t, "entitlement_sets", "entitlement_set_id", "Pro").await);
    let rules = common::rules(&[("fedwiki.active_sites", "11")]);
    member_console::services::rule_changes::commit_rule_change_batch(&t.db, set, &rules, None, &"a11y".into(), 100)
        .await
        .unwrap();
    let business = common::acts::type_id(&t, "Business").await;
    let hosting = common::acts::ladder_id(&t, "Wiki hosting").await;
    common::acts::change(&t, business, hosting, Some(member_console::services::plan_acts::Disposition::Migrate))
        .await
        .unwrap();
    // Issue 40: a domain in each state the page draws (pending with its record and copy buttons,
    // lapsed with its confirm, lapsing) and a notice, on the member's sites and the farm page.
    let domain = |d: &str| member_console::ids::SiteDomain::from(d);
    let who = member_console::ids::AccountId(account_id(&t, demo::MEMBER_EMAIL).await);
    member_console::services::fedwiki::domains::claim_domain(&t.db, who, org, &domain("pending.example"))
        .await
        .unwrap();
    let owner = format!("workspace:org-{org}");
    for (name, missing, lapsed) in [("lapsing.example", "1 day", None), ("lapsed.example", "4 days", Some("1 day"))] {
        t.run(
            sqlx::query(
                "INSERT INTO domains.claims (name, owner, token, verified_at, checked_at, check_outcome, missing_since,
                                             lapsed_at, next_check_at)
                 VALUES ($1, $2, 'mc-0123456789abcdef0123456789abcdef', now() - interval '9 days', now(), 'missing',
                         now() - $3::interval, now() - $4::interval, now() + interval '1 hour')",
            )
            .bind(name)
            .bind(&owner)
            .bind(missing)
            .bind(lapsed),
        )
        .await;
    }
    t.run(
        sqlx::query(
            "INSERT INTO domains.claim_notices (owner, name, sentence, created_at)
             VALUES ($1, 'taken.example', 'Another organization verified taken.example first, so your claim to it was let go.', now())",
        )
        .bind(&owner),
    )
    .await;
    t.run(sqlx::query(
        "INSERT INTO core.desired_state_connections (name, url, secret)
         VALUES ('Directory', 'https://directory.example.org/hooks', 'whsec_YTExeS1zZWNyZXQtYTExeS1zZWNyZXQtYTExeQ')",
    ))
    .await;

    // The links, made as the services make them for mail, under the key the console signs with.
    let key = crate::members::tokens();
    let links = crate::signup::links(&key);
    signup::sign_up(&t.db, &links, "192.0.2.70", &crate::signup::command("newcomer@example.test", "Newcomer Wikis"))
        .await
        .unwrap();
    let verify = crate::signup::last_token(&t, &key, "newcomer@example.test").await;
    signup::forgot_password(&t.db, &links, &Email::parse(demo::MEMBER_EMAIL).unwrap(), "192.0.2.71").await.unwrap();
    let reset = crate::signup::last_token(&t, &key, demo::MEMBER_EMAIL).await;
    let owner = member_console::ids::AccountId(account_id(&t, demo::MEMBER_EMAIL).await);
    let invite =
        Invite { organization_id: org, email: Email::parse("colleague@example.test").unwrap(), role: Role::Member };
    invitations::invite(&t.db, &key, Inviter::Owner(owner), &invite, &crate::members::mail()).await.unwrap();
    let invitation = crate::signup::last_token(&t, &key, "colleague@example.test").await;
    let links = vec![
        (paths::ACCOUNT_VERIFY, format!("?token={verify}")),
        (paths::PASSWORD_RESET, format!("?token={reset}")),
        (paths::INVITATION_ACCEPT, format!("?token={invitation}")),
    ];
    Fixture { t, links }
}

/// A route's path with the demo's ids in it: the demo organization and its member, the Pro set
/// and product, and the first of the rest.
async fn demo_path(t: &TestDb, pattern: &str) -> String {
    let mut out = Vec::new();
    let mut previous = "";
    for seg in pattern.split('/') {
        let value = match (previous, seg) {
            (_, "{rank}") => "0".to_string(),
            ("organizations", "{id}") => organization_id(t, demo::DEMO_ORGANIZATION).await.to_string(),
            ("accounts", "{id}") => account_id(t, demo::MEMBER_EMAIL).await.to_string(),
            ("sets", "{id}") => {
                common::acts::id_by_name(t, "entitlement_sets", "entitlement_set_id", "Pro").await.to_string()
            }
            ("products", "{id}") => common::acts::product_id(t, "Pro").await.0.to_string(),
            (_, "{id}") => {
                let (table, column) = match previous {
                    "grants" => ("core.grants", "grant_id"),
                    "rule-changes" => ("core.entitlement_set_changes", "change_id"),
                    "plan-acts" => ("core.plan_acts", "plan_act_id"),
                    "connections" => ("core.desired_state_connections", "connection_id"),
                    other => panic!("no demo id for a segment after {other:?} in {pattern}: add one here"),
                };
                let id: Option<i64> =
                    t.one(sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT min({column}) FROM {table}")))).await;
                id.unwrap_or_else(|| panic!("the fixture made no row of {table} for {pattern}")).to_string()
            }
            (_, s) if s.starts_with('{') => panic!("no demo value for {s} in {pattern}: add one here"),
            (_, s) => s.to_string(),
        };
        out.push(value);
        previous = seg;
    }
    out.join("/")
}

/// Every page of the table, with who sees it and its address, visitors' first.
async fn pages(f: &Fixture) -> Vec<(Who, String)> {
    for (not_page, _) in NOT_PAGES {
        assert!(
            ROUTES.iter().any(|r| r.method == "GET" && r.path == *not_page),
            "{not_page} is listed as no page but is no GET route"
        );
    }
    let mut pages = vec![];
    for r in ROUTES.iter().filter(|r| r.method == "GET" && r.access != Access::Open) {
        if NOT_PAGES.iter().any(|(p, _)| *p == r.path) {
            continue;
        }
        let who = match r.access {
            Access::Operator => Who::Operator,
            Access::Member | Access::MemberPage => Who::Member,
            Access::Public | Access::Open => Who::Visitor,
        };
        let query = f.links.iter().find(|(p, _)| *p == r.path).map(|(_, q)| q.as_str()).unwrap_or("");
        pages.push((who, format!("{}{query}", demo_path(&f.t, r.path).await)));
    }
    pages.sort();
    pages
}

#[tokio::test]
async fn every_page_of_the_demo_passes_wcag_2_1_aa_for_visitors_members_and_operators() {
    let f = fixture().await;
    let app = crate::members::mailing_app(&f.t).await;
    let pages = pages(&f).await;
    for (who, page) in [(Who::Visitor, "/login"), (Who::Member, "/"), (Who::Operator, "/operator/organizations")] {
        assert!(pages.contains(&(who, page.to_string())), "{page} is walked: {pages:?}");
    }
    assert!(pages.len() > 25, "the table's pages: {pages:?}");

    Browser::start()
        .await
        .run(async |b| {
            // The check finds what it is there to find: a faint line put on a page.
            b.goto(&app.url("/login")).await;
            b.execute(
                "const p = document.createElement('p'); p.textContent = 'Faint';
                 p.style.color = '#c8c8c8'; p.style.background = '#ffffff';
                 document.querySelector('main').append(p);",
                vec![],
            )
            .await;
            let planted = b.wcag_violations().await;
            assert!(planted.iter().any(|v| v.starts_with("color-contrast (serious)")), "{planted:?}");
            b.forget_cookies().await;

            let mut failures = vec![];
            let mut signed_in = Who::Visitor;
            for (who, page) in &pages {
                if *who != signed_in {
                    b.forget_cookies().await;
                    let (email, password) = match who {
                        Who::Member => (demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD),
                        _ => (demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD),
                    };
                    b.sign_in_at(&app.url("/login"), email, password, SIGNED_IN).await;
                    signed_in = *who;
                }
                b.goto(&app.url(page)).await;
                // A page, as its person sees it: its heading, and nothing that failed to load
                // (but the icon Chromium asks for on its own, which the console does not serve).
                b.wait_for(common::browser::Until::Css("main h1"), WAIT).await;
                let mut problems = b.page_problems().await;
                problems.retain(|p| !p.contains("/favicon.ico"));
                assert!(problems.is_empty(), "{who:?} at {page}: {problems:?}");
                let violations = b.wcag_violations().await;
                if !violations.is_empty() {
                    failures.push(format!("{who:?} at {page}:\n  {}", violations.join("\n  ")));
                }
            }
            assert!(failures.is_empty(), "WCAG 2.1 AA violations:\n{}", failures.join("\n"));
        })
        .await;
}
