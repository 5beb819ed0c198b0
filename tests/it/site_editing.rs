//! Who may change a site on the farm, through the console: a member opens an active site from
//! `/sites` and the farm lets them edit it; a stranger and another organization's member change
//! nothing; a member removed from the organization is refused within the farm's confirm
//! interval; a parked site refuses writes and an archived one everything; the confirm call
//! answers only the farm's signed questions. Against the local farm running the real `wiki`.

use crate::common;

use std::{net::SocketAddr, time::Duration};

use common::{TestApp, TestDb, farm::FarmFixture, pages::demo_db};
use member_console::{
    config::FarmSettings,
    demo,
    ids::{AccountId, OrganizationId, SiteDomain, SiteId},
    integrations::farm::signature,
    services::{
        fedwiki::{self, Ran, names::SiteName},
        organizations::{self, OrgName},
    },
    states::RequestKind,
};

struct Setup {
    t: TestDb,
    f: FarmFixture,
    app: TestApp,
    settings: FarmSettings,
    member: AccountId,
    org: OrganizationId,
}

async fn account(t: &TestDb, email: &str) -> AccountId {
    AccountId(t.one(sqlx::query_scalar("SELECT account_id FROM core.accounts WHERE email = $1").bind(email)).await)
}

/// The demo's member with Basic, a farm running `wiki` whose edit sessions stand `confirm_every`,
/// and a console it reports to.
async fn setup(confirm_every: Duration) -> Setup {
    let t = demo_db().await;
    let org =
        OrganizationId(common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await);
    common::acts::grant(&t, org, common::acts::product_id(&t, "Basic").await).await;
    let f = FarmFixture::start_tuned(local_farm::WikiMode::Auto, Duration::from_secs(30), |c| {
        c.edit_confirm_every = confirm_every;
    })
    .await;
    assert!(f.local.wiki_running(), "the real FedWiki server must run for this test: {}", local_farm::install_hint());
    let app = TestApp::spawn_connected(&t, None, Some(f.farm.clone())).await;
    f.report_to(&app);
    let member = account(&t, demo::MEMBER_EMAIL).await;
    Setup { t, f, app, settings: FarmSettings::default(), member, org }
}

impl Setup {
    /// A site made through the console and carried to the farm; its id.
    async fn site(&self, who: AccountId, org: OrganizationId, name: &str) -> SiteId {
        let id =
            fedwiki::create_site(&self.t.db, &self.settings, who, org, &SiteName::parse(name).unwrap()).await.unwrap();
        assert!(matches!(
            fedwiki::run_site_request(&self.t.db, &self.f.farm, id, false).await.unwrap(),
            Ran::Recorded(_)
        ));
        common::farm::site_id(&self.t, name).await
    }

    async fn set_status(&self, site_id: &SiteId, kind: RequestKind) {
        let id = fedwiki::change_status(&self.t.db, &self.settings, self.member, site_id, kind).await.unwrap();
        fedwiki::run_site_request(&self.t.db, &self.f.farm, id, false).await.unwrap();
    }

    /// A console client signed in as `email`.
    async fn signed_in(&self, email: &str, password: &str) -> reqwest::Client {
        let client = self.app.client();
        let resp = self.app.sign_in(&client, email, password).await;
        assert_eq!(resp.status().as_u16(), 303, "signed in");
        client
    }

    /// A client of the farm's sites, as a browser finds `*.localhost`, following no redirect.
    fn site_client(&self, domain: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(domain, SocketAddr::from(([127, 0, 0, 1], self.f.local.port())))
            .build()
            .unwrap()
    }

    /// Open the site from `/sites` as the signed-in `console` client, and follow the console's
    /// redirect to the farm's entry: the cookies the browser then holds for the site.
    async fn open(&self, console: &reqwest::Client, site_id: &SiteId, domain: &str) -> String {
        let resp = console.get(self.app.url(&format!("/sites/{site_id}/open"))).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 303, "{:?}", resp.text().await);
        let to = resp.headers()["location"].to_str().unwrap().to_string();
        assert!(to.starts_with(&format!("{}_farm/enter?c=", self.f.farm.site_url(&SiteDomain::from(domain)))), "{to}");
        let entered = self.site_client(domain).get(&to).send().await.unwrap();
        assert_eq!(entered.status().as_u16(), 303, "{:?}", entered.text().await);
        let cookies: Vec<String> = entered
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_string))
            .collect();
        assert_eq!(cookies.len(), 2, "the farm's session and wiki's: {cookies:?}");
        cookies.join("; ")
    }

    /// `PUT /page/{slug}/action` creating a page, as the wiki client sends it.
    async fn write(&self, domain: &str, slug: &str, cookies: Option<&str>) -> reqwest::Response {
        let action = serde_json::json!({
            "type": "create",
            "id": "a1b2c3d4e5f60718",
            "item": { "title": slug, "story": [{ "type": "paragraph", "id": "p1", "text": "Written." }] },
            "date": 1_790_000_000_000u64,
        });
        let mut req = self
            .site_client(domain)
            .put(format!("{}page/{slug}/action", self.f.farm.site_url(&SiteDomain::from(domain))))
            .form(&[("action", action.to_string())]);
        if let Some(c) = cookies {
            req = req.header("Cookie", c);
        }
        req.send().await.unwrap()
    }

    fn page_on_disk(&self, domain: &str, slug: &str) -> bool {
        self.f.local.site_dir(domain).join("pages").join(slug).exists()
    }

    /// Every page file of the site and its bytes.
    fn pages(&self, domain: &str) -> Vec<(String, Vec<u8>)> {
        let mut pages: Vec<_> = std::fs::read_dir(self.f.local.site_dir(domain).join("pages"))
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
            .collect();
        pages.sort();
        pages
    }
}

const ACME: &str = "acme-notes.wiki.localhost";

#[tokio::test]
async fn a_member_opens_an_active_site_from_sites_and_the_farm_lets_them_edit_it() {
    let s = setup(Duration::from_secs(30)).await;
    let site = s.site(s.member, s.org, "acme-notes").await;
    let console = s.signed_in(demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let page = console.get(s.app.url("/sites")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(&format!("href=\"/sites/{site}/open\"")), "an Edit link on /sites: {page}");

    let cookies = s.open(&console, &site, ACME).await;
    let html = s
        .site_client(ACME)
        .get(format!("{}welcome-visitors.html", s.f.farm.site_url(&SiteDomain::from(ACME))))
        .header("Cookie", &cookies)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("var isOwner = ('true'"), "the wiki shows the member as its owner: {html}");
    assert!(html.contains(&format!("<span id='site-owner'>{}</span>", demo::DEMO_ORGANIZATION)), "{html}");
    assert_eq!(s.write(ACME, "from-the-member", Some(&cookies)).await.status().as_u16(), 200);
    assert!(s.page_on_disk(ACME, "from-the-member"));
}

#[tokio::test]
async fn a_stranger_and_another_organizations_member_cannot_open_or_change_the_site() {
    let s = setup(Duration::from_secs(30)).await;
    let site = s.site(s.member, s.org, "acme-notes").await;
    // The operator, a member of another organization with a site of its own.
    let operator = account(&s.t, demo::OPERATOR_EMAIL).await;
    let other = organizations::create_organization(&s.t.db, &OrgName::parse("Other Wikis").unwrap(), None)
        .await
        .unwrap()
        .organization_id;
    s.t.run(
        sqlx::query(
            "INSERT INTO core.organization_members (organization_id, account_id, role) VALUES ($1, $2, 'owner')",
        )
        .bind(other.0)
        .bind(operator.0),
    )
    .await;
    common::acts::grant(&s.t, other, common::acts::product_id(&s.t, "Basic").await).await;
    let theirs = s.site(operator, other, "other-notes").await;
    let console = s.signed_in(demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD).await;

    // The console does not open another organization's site for them.
    let resp = console.get(s.app.url(&format!("/sites/{site}/open"))).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // A stranger is sent to sign in, not to the farm.
    let resp = s.app.client().get(s.app.url(&format!("/sites/{site}/open"))).send().await.unwrap();
    let to = resp.headers().get("location").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    assert!(!to.contains("_farm/enter"), "{} {to}", resp.status());

    // Entered into their own site, their cookies change nothing on this one; nor do none.
    let their_cookies = s.open(&console, &theirs, "other-notes.wiki.localhost").await;
    assert_eq!(s.write("other-notes.wiki.localhost", "ours", Some(&their_cookies)).await.status().as_u16(), 200);
    let before = s.pages(ACME);
    let site_url = s.f.farm.site_url(&SiteDomain::from(ACME));
    for (who, cookies) in [("a stranger", None), ("another organization's member", Some(their_cookies.as_str()))] {
        let put = s.write(ACME, "stranger-was-here", cookies).await;
        let with = |r: reqwest::RequestBuilder| match cookies {
            Some(c) => r.header("Cookie", c),
            None => r,
        };
        let client = s.site_client(ACME);
        let upload = with(client.post(format!("{site_url}plugin/assets/upload")).body("a file")).send().await.unwrap();
        let delete = with(client.delete(format!("{site_url}welcome-visitors.json"))).send().await.unwrap();
        for (what, resp) in [("PUT action", put), ("POST upload", upload), ("DELETE page", delete)] {
            assert_eq!(resp.status().as_u16(), 403, "{who}: {what}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(
                body["error"],
                format!(
                    "Only members of {} can change this wiki. A member opens it from the Member Console's Sites page \
                     to edit it.",
                    demo::DEMO_ORGANIZATION
                ),
                "{who}: {what}"
            );
        }
    }
    // Their entry credential does not open this site either.
    let resp = console.get(s.app.url(&format!("/sites/{theirs}/open"))).send().await.unwrap();
    let theirs_to = resp.headers()["location"].to_str().unwrap().to_string();
    let c = theirs_to.split("c=").nth(1).unwrap();
    let resp = s.site_client(ACME).get(format!("{site_url}_farm/enter?c={c}")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(resp.headers().get("set-cookie").is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.pages(ACME), before, "nothing changed on disk");
    assert!(!s.page_on_disk(ACME, "stranger-was-here"));
}

#[tokio::test]
async fn a_member_removed_from_the_organization_is_refused_within_the_farms_confirm_interval() {
    let s = setup(Duration::from_secs(1)).await;
    let site = s.site(s.member, s.org, "acme-notes").await;
    let console = s.signed_in(demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let cookies = s.open(&console, &site, ACME).await;
    assert_eq!(s.write(ACME, "first", Some(&cookies)).await.status().as_u16(), 200);
    // Past the interval the farm asks the console, which says yes while they are a member.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resp = s.write(ACME, "second", Some(&cookies)).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get_all("set-cookie").iter().any(|c| c.to_str().unwrap().starts_with("farmEdit=")));

    s.t.run(
        sqlx::query("DELETE FROM core.organization_members WHERE organization_id = $1 AND account_id = $2")
            .bind(s.org.0)
            .bind(s.member.0),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resp = s.write(ACME, "after-removal", Some(&cookies)).await;
    assert_eq!(resp.status().as_u16(), 403);
    let cleared: Vec<String> = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .filter(|c| c.contains("Max-Age=0"))
        .collect();
    assert_eq!(cleared.len(), 2, "both sessions end: {cleared:?}");
    assert!(!s.page_on_disk(ACME, "after-removal"));
    // And the console no longer opens the site for them.
    let resp = console.get(s.app.url(&format!("/sites/{site}/open"))).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
}

#[tokio::test]
async fn a_parked_site_refuses_writes_and_is_not_opened_and_an_archived_one_answers_404_to_everything() {
    let s = setup(Duration::from_secs(30)).await;
    let site = s.site(s.member, s.org, "acme-notes").await;
    let console = s.signed_in(demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
    let cookies = s.open(&console, &site, ACME).await;

    s.set_status(&site, RequestKind::Park).await;
    let resp = s.write(ACME, "while-parked", Some(&cookies)).await;
    assert_eq!(resp.status().as_u16(), 403);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().starts_with("This wiki is parked"), "{body}");
    let resp = console.get(s.app.url(&format!("/sites/{site}/open"))).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let page = resp.text().await.unwrap();
    assert!(page.contains("only an active site can be opened"), "{page}");

    s.set_status(&site, RequestKind::Archive).await;
    let client = s.site_client(ACME);
    let site_url = s.f.farm.site_url(&SiteDomain::from(ACME));
    let put = s.write(ACME, "while-archived", Some(&cookies)).await;
    let read = client.get(format!("{site_url}welcome-visitors.json")).header("Cookie", &cookies).send().await.unwrap();
    let delete = client.delete(format!("{site_url}welcome-visitors.json")).header("Cookie", &cookies).send().await;
    for resp in [put, read, delete.unwrap()] {
        assert_eq!(resp.status().as_u16(), 404);
    }
    assert!(!s.page_on_disk(ACME, "while-parked") && !s.page_on_disk(ACME, "while-archived"));
}

#[tokio::test]
async fn the_confirm_call_answers_only_the_farms_signed_questions() {
    let s = setup(Duration::from_secs(30)).await;
    let site = s.site(s.member, s.org, "acme-notes").await;
    let owner: String =
        s.t.one(sqlx::query_scalar("SELECT workspace_id FROM fedwiki.sites WHERE site_id = $1").bind(&site)).await;
    let url = s.app.url("/farm/edit-sessions/confirm");
    let ask = async |body: serde_json::Value, secret: &str| {
        let body = body.to_string();
        let t = chrono::Utc::now().timestamp();
        let resp = reqwest::Client::new()
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Farm-Timestamp", t.to_string())
            .header("Farm-Signature", signature::sign(secret, t, body.as_bytes()))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    };
    let q = |domain: &str, account: i64, owner: &str| serde_json::json!({ "domain": domain, "account_id": account, "owner": owner });
    let secret = common::farm::CALLBACK_SECRET;
    assert_eq!(ask(q(ACME, s.member.0, &owner), secret).await, (200, r#"{"allowed":true}"#.to_string()));
    let operator = account(&s.t, demo::OPERATOR_EMAIL).await;
    assert_eq!(ask(q(ACME, operator.0, &owner), secret).await.1, r#"{"allowed":false}"#);
    assert_eq!(ask(q(ACME, s.member.0, "someone-else"), secret).await.1, r#"{"allowed":false}"#);
    assert_eq!(ask(q("nobody.wiki.localhost", s.member.0, &owner), secret).await.1, r#"{"allowed":false}"#);
    let (status, said) = ask(q(ACME, s.member.0, &owner), "a-secret-the-farm-does-not-use").await;
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("signature refused"), "{said}");
    let mut extra = q(ACME, s.member.0, &owner);
    extra["role"] = "owner".into();
    assert_eq!(ask(extra, secret).await.0, 400);
    let unsigned = reqwest::Client::new().post(&url).body(q(ACME, s.member.0, &owner).to_string()).send().await;
    assert_eq!(unsigned.unwrap().status().as_u16(), 400);
}
