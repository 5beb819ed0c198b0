//! The real FedWiki server behind the farm. These tests need `wiki` (scripts/test installs it)
//! and fail, rather than pass, without it.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::common::{browser, delete_site, eventually, get_site, put_site, receiver, set_status, start_with_wiki};

#[tokio::test]
async fn an_active_site_is_the_real_wiki_through_the_farm() {
    let (farm, _data) = start_with_wiki().await;
    let (status, _) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 201);
    let site = farm.site_url("acme.wiki.localhost");
    let client = browser(&farm, "acme.wiki.localhost");

    // `/` redirects to the home page, which is wiki's own HTML.
    let resp = client.get(&site).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.url().as_str(), format!("{site}welcome-visitors.html"), "followed wiki's redirect");
    assert!(resp.headers().get("content-type").is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/html")));
    let html = resp.text().await.expect("html");
    assert!(html.contains("<title>Welcome Visitors</title>") && html.contains("/client.js"), "{html}");

    let resp = client.get(format!("{site}welcome-visitors.json")).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some("*"));
    let page: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("a page as JSON");
    assert_eq!(page["title"], "Welcome Visitors");
    assert!(page["story"].as_array().is_some_and(|s| !s.is_empty()));

    // Query strings reach wiki, and its own statuses come back.
    let resp = client.get(format!("{site}no-such-page.json?x=1")).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 404);
}

#[tokio::test]
async fn editing_a_page_through_the_farm_changes_the_sites_storage_and_modified_time() {
    let (farm, _data) = start_with_wiki().await;
    let rx = receiver(&farm, &[]).await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let site = farm.site_url("acme.wiki.localhost");
    let client = browser(&farm, "acme.wiki.localhost");
    client.get(format!("{site}welcome-visitors.json")).send().await.expect("a first visit");
    let (_, before) = get_site(&farm, "acme.wiki.localhost").await;

    // What the wiki client sends when a member the console let in creates a page.
    let member = crate::common::enter(&farm, "acme.wiki.localhost", "org-1").await;
    let action = serde_json::json!({
        "type": "create",
        "id": "a1b2c3d4e5f60718",
        "item": { "title": "Hello Farm", "story": [{ "type": "paragraph", "id": "p1", "text": "Edited through the farm." }] },
        "date": 1_790_000_000_000u64,
    });
    let resp = client
        .put(format!("{site}page/hello-farm/action"))
        .header("Cookie", &member)
        .form(&[("action", action.to_string())])
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.text().await.expect("body"), "ok");
    assert!(farm.site_dir("acme.wiki.localhost").join("pages").join("hello-farm").is_file(), "wiki wrote the page");

    let resp = client.get(format!("{site}hello-farm.json")).send().await.expect("answer");
    let page: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
    assert_eq!(page["story"][0]["text"], "Edited through the farm.");

    let after = eventually("the farm to see the edit", async || {
        let (_, site) = get_site(&farm, "acme.wiki.localhost").await;
        (!site["modified_at"].is_null()).then_some(site)
    })
    .await;
    assert!(after["storage_bytes"].as_u64() > before["storage_bytes"].as_u64(), "{before} then {after}");
    let modified = eventually("a site.modified callback with the edit", async || {
        rx.events().into_iter().find(|e| e["type"] == "site.modified" && !e["site"]["modified_at"].is_null())
    })
    .await;
    assert_eq!(modified["site"]["domain"], "acme.wiki.localhost");
}

#[tokio::test]
async fn parked_archived_and_unknown_sites_never_reach_wiki() {
    let (farm, _data) = start_with_wiki().await;
    put_site(&farm, "parked.wiki.localhost", "org-1", "parked").await;
    put_site(&farm, "old.wiki.localhost", "org-1", "active").await;
    set_status(&farm, "old.wiki.localhost", "archived").await;
    put_site(&farm, "gone.wiki.localhost", "org-1", "active").await;
    delete_site(&farm, "gone.wiki.localhost").await;

    for (domain, expected) in [
        ("parked.wiki.localhost", 503),
        ("old.wiki.localhost", 404),
        ("gone.wiki.localhost", 404),
        ("nobody.wiki.localhost", 404),
    ] {
        let client = browser(&farm, domain);
        for path in ["", "welcome-visitors.json"] {
            let resp = client.get(format!("{}{path}", farm.site_url(domain))).send().await.expect("answer");
            assert_eq!(resp.status().as_u16(), expected, "{domain}/{path}");
            let body = resp.text().await.expect("body");
            assert!(!body.contains("Welcome Visitors"), "{domain} was served by wiki: {body}");
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!farm.site_dir("nobody.wiki.localhost").exists(), "wiki made no folder for an unknown site");
    assert!(!farm.site_dir("gone.wiki.localhost").exists(), "nor for a deleted one");
    let pages = |d: &str| std::fs::read_dir(farm.site_dir(d).join("pages")).map(|r| r.count()).unwrap_or(0);
    assert_eq!(pages("parked.wiki.localhost"), 0);
    // The farm wrote the owner file; wiki, which writes its sitemap when it opens a site, did not.
    let status: Vec<_> = std::fs::read_dir(farm.site_dir("parked.wiki.localhost").join("status"))
        .expect("the status folder")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(status, ["owner.json"], "wiki never opened the parked site");
}

#[tokio::test]
async fn stopping_the_farm_stops_the_wiki_server() {
    let (farm, _data) = start_with_wiki().await;
    let wiki = farm.wiki_url().expect("wiki's address");
    let addr = wiki.trim_start_matches("http://").to_string();
    // A connection, not a request: any Host wiki is asked for becomes a site.
    let probe = || tokio::net::TcpStream::connect(addr.clone());
    assert!(probe().await.is_ok(), "wiki listens while the farm runs");
    farm.stop().await;
    assert!(probe().await.is_err(), "wiki still listens after the farm stopped");
}

#[tokio::test]
async fn a_site_is_served_as_soon_as_it_is_made() {
    let (farm, _data) = start_with_wiki().await;
    for n in 0..3 {
        let domain = format!("quick{n}.wiki.localhost");
        let (status, _) = crate::common::api(
            &farm,
            Method::PUT,
            &format!("/api/sites/{domain}"),
            Some(serde_json::json!({"owner": "o", "status": "active"})),
        )
        .await;
        assert_eq!(status, 201);
        let resp = browser(&farm, &domain)
            .get(format!("{}welcome-visitors.json", farm.site_url(&domain)))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status().as_u16(), 200, "{domain}");
    }
}
