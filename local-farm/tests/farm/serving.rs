//! Site requests without the real `wiki`: routing by `Host`, the parked and 404 pages, and the
//! 503 that says how to install `wiki`.

use local_farm::WikiMode;
use reqwest::Method;

use crate::common::{TOKEN, TempDir, api, browser, get_site, put_site, set_status, start, start_in};

async fn visit(farm: &local_farm::LocalFarm, domain: &str, path: &str) -> (u16, String, String) {
    let resp = browser(farm, domain).get(format!("{}{path}", farm.site_url(domain))).send().await.expect("answer");
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (status, content_type, resp.text().await.expect("body"))
}

#[tokio::test]
async fn a_parked_site_answers_503_with_a_page_saying_so() {
    let (farm, _data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "parked").await;
    for path in ["", "welcome-visitors.json", "view/welcome-visitors?x=1"] {
        let (status, content_type, page) = visit(&farm, "acme.wiki.localhost", path).await;
        assert_eq!(status, 503, "{page}");
        assert!(content_type.starts_with("text/html"), "{content_type}");
        assert!(page.contains("This wiki is parked"), "{page}");
        assert!(page.contains("activate it again from the Member Console"), "{page}");
    }
}

#[tokio::test]
async fn archived_and_unknown_sites_answer_404_and_no_folder_is_made() {
    let (farm, _data) = start().await;
    put_site(&farm, "old.wiki.localhost", "org-1", "active").await;
    set_status(&farm, "old.wiki.localhost", "archived").await;
    let (status, _, page) = visit(&farm, "old.wiki.localhost", "").await;
    assert_eq!(status, 404);
    assert!(page.contains("This wiki is archived"), "{page}");
    for domain in ["nobody.wiki.localhost", "a.b.wiki.localhost", "www.old.wiki.localhost"] {
        let (status, content_type, page) = visit(&farm, domain, "").await;
        assert_eq!(status, 404, "{domain}: {page}");
        assert!(content_type.starts_with("text/html"));
        assert!(page.contains("There is no wiki here"), "{page}");
    }
    let folders: Vec<_> =
        std::fs::read_dir(farm.wiki_data_dir()).expect("wiki data").flatten().map(|e| e.file_name()).collect();
    assert_eq!(folders, ["old.wiki.localhost"], "only the archived site's own folder");
}

/// GET `path` from the farm's address with the token, naming `host` (and the port) as the Host.
async fn api_as_host(farm: &local_farm::LocalFarm, path: &str, host: &str) -> reqwest::Response {
    crate::common::http()
        .get(format!("{}{path}", farm.base_url()))
        .header("Host", format!("{host}:{}", farm.port()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer")
}

#[tokio::test]
async fn the_api_answers_on_the_farms_own_host_and_never_on_a_site_host() {
    let (farm, _data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "parked").await;
    // A site host: the path /api/... is the site's, not the API.
    let resp = browser(&farm, "acme.wiki.localhost")
        .get(format!("{}api/sites", farm.site_url("acme.wiki.localhost")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.text().await.expect("body").contains("This wiki is parked"));
    // Upper case and a port make no difference to which site it is.
    let resp = api_as_host(&farm, "/api/sites", "ACME.Wiki.Localhost").await;
    assert_eq!(resp.status().as_u16(), 503);
    // The farm domain itself, localhost and the loopback address are the API.
    for host in ["wiki.localhost", "localhost", "127.0.0.1"] {
        let resp = api_as_host(&farm, "/api/sites/acme.wiki.localhost", host).await;
        assert_eq!(resp.status().as_u16(), 200, "{host}");
        let site: serde_json::Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
        assert_eq!(site["status"], "parked");
    }
    // The test controls are not on site hosts either.
    let resp = browser(&farm, "acme.wiki.localhost")
        .get(format!("{}_farm/callbacks", farm.site_url("acme.wiki.localhost")))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 503);
}

#[tokio::test]
async fn without_wiki_on_the_machine_an_active_site_answers_503_saying_how_to_install_it() {
    let data = TempDir::new();
    let farm = start_in(data.path(), |c| c.wiki = WikiMode::Bin("/nonexistent/bin/wiki".into())).await;
    assert!(!farm.wiki_running());
    assert_eq!(farm.wiki_url(), None);
    let (status, site) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 201, "the API works without wiki: {site}");
    let (status, _, page) = visit(&farm, "acme.wiki.localhost", "").await;
    assert_eq!(status, 503, "{page}");
    assert!(page.contains("scripts/install-wiki"), "{page}");
    assert!(local_farm::install_hint().contains(&format!("{}", local_farm::install_prefix().display())));
}

#[tokio::test]
async fn with_wiki_off_an_active_site_answers_503_and_the_api_still_works() {
    let (farm, _data) = start().await;
    assert!(!farm.wiki_running());
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let (status, _, page) = visit(&farm, "acme.wiki.localhost", "welcome-visitors.json").await;
    assert_eq!(status, 503);
    assert!(page.contains("without the FedWiki server"), "{page}");
    let (status, _) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(status, 200);
    let (status, _) = api(&farm, Method::DELETE, "/api/sites/acme.wiki.localhost", None).await;
    assert_eq!(status, 204);
}
