//! A member edits their wiki in FedWiki's own interface, in Chromium: the site opened from
//! `/sites`, the story rendered by the FedWiki client, a paragraph changed by a double-click and
//! saved, the change there after a reload and in the page's JSON, and `/sites` showing the new
//! "Last modified" (from the farm's callback). Screenshots of each step under
//! `target/browser-screenshots/<test>/`.

use crate::common;

use std::time::Duration;

use common::{
    browser::{Browser, SIGNED_IN, Until},
    pages::demo_db,
};
use member_console::demo;

use crate::browser::{create_active_sites, open_on_the_farm, site_row, site_worker, wiki_rendered};

const STEP: Duration = Duration::from_secs(30);

/// The page's JSON as anyone reads it, straight from the farm.
async fn page_json(f: &common::farm::FarmFixture, domain: &str, slug: &str) -> serde_json::Value {
    let client = reqwest::Client::builder()
        .no_proxy()
        .resolve(domain, std::net::SocketAddr::from(([127, 0, 0, 1], f.local.port())))
        .build()
        .unwrap();
    let url = format!("{}{slug}.json", f.farm.site_url(&member_console::ids::SiteDomain::from(domain)));
    let resp = client.get(url).send().await.expect("the farm answers");
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.expect("a page as JSON")
}

#[tokio::test]
async fn a_member_opens_their_new_wiki_from_sites_edits_a_paragraph_and_sees_it_saved_everywhere() {
    let t = demo_db().await;
    let org = common::acts::id_by_name(&t, "organizations", "organization_id", demo::DEMO_ORGANIZATION).await;
    common::acts::grant(&t, member_console::ids::OrganizationId(org), common::acts::product_id(&t, "Basic").await)
        .await;
    let f = common::farm::FarmFixture::start_with(local_farm::WikiMode::Auto, Duration::from_secs(30)).await;
    assert!(f.local.wiki_running(), "the real FedWiki server must run for this test: {}", local_farm::install_hint());
    let app = common::TestApp::spawn_connected(&t, None, Some(f.farm.clone())).await;
    f.report_to(&app);
    let _worker = site_worker(&t, f.farm.clone());
    let domain = "notebook.wiki.localhost";
    let changed = "Our notebook, changed in the wiki itself.";
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/sites"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, SIGNED_IN).await;
            create_active_sites(b, &["notebook"], STEP).await;
            let row = b.text_of(&site_row("notebook")).await;
            assert!(row.contains("active") && row.contains("—"), "not modified yet: {row}");
            b.keep_step(1, "created").await;

            // Opened from /sites: the FedWiki client renders the story, with the owner's tools.
            open_on_the_farm(b, "notebook", STEP).await;
            // The client took over the address, as FedWiki's lineup does.
            assert_eq!(b.path().await, "/view/welcome-visitors");
            let owner = b.text_of("footer #site-owner").await;
            assert!(owner.contains(demo::DEMO_ORGANIZATION), "the wiki names its owner: {owner}");
            b.keep_step(2, "the-wiki-rendered").await;

            // Double-click the first paragraph, change it, save (FedWiki saves when the editor
            // loses focus; Ctrl-S makes it).
            b.execute(
                "document.querySelector('.page .story .item.paragraph')
                   .dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));",
                vec![],
            )
            .await;
            let editor = b.find(".page .story textarea").await;
            b.keep_step(3, "editing").await;
            // Select the old text and type over it, as a person does (WebDriver's clear would
            // blur the editor, which saves).
            editor.send_keys("\u{E009}a\u{E000}").await.unwrap();
            editor.send_keys(changed).await.unwrap();
            editor.send_keys("\u{E009}s").await.unwrap();
            b.wait_for(Until::Css(".page .story .item.paragraph:not(.textEditing)"), STEP).await;
            b.keep_step(4, "saved").await;

            // The farm has it: the page's JSON, read as anyone reads it.
            let mut page = None;
            for _ in 0..100 {
                let p = page_json(&f, domain, "welcome-visitors").await;
                if p["story"][0]["text"] == changed {
                    page = Some(p);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let page = page.expect("the edit reached the farm");
            let last = page["journal"].as_array().and_then(|j| j.last()).map(|a| a["type"].clone());
            assert_eq!(last, Some("edit".into()), "{page}");
            assert!(f.local.site_dir(domain).join("pages/welcome-visitors").is_file(), "wiki wrote the page");

            // A reload shows the change, rendered by the client.
            let here = b.execute("return location.href;", vec![]).await;
            b.page_problems().await;
            b.goto(here.as_str().expect("the address")).await;
            wiki_rendered(b, changed, STEP).await;
            b.keep_step(5, "after-a-reload").await;
            // The page's JSON in the browser says the same.
            b.goto(&format!(
                "{}welcome-visitors.json",
                f.farm.site_url(&member_console::ids::SiteDomain::from(domain))
            ))
            .await;
            assert!(b.text_of("body").await.contains(changed));

            // A stranger reads the change, with no edit tools.
            b.forget_cookies().await;
            b.goto(&f.farm.site_url(&member_console::ids::SiteDomain::from(domain))).await;
            b.wait_for(Until::Css(".page .story .item.paragraph"), STEP).await;
            let paragraphs = b.texts_of(".page .story .item.paragraph").await;
            assert!(paragraphs.iter().any(|p| p.contains(changed)), "{paragraphs:?}");
            assert!(b.find_all(".page .journal").await.is_empty(), "no journal, no edit tools for a stranger");
            b.keep_step(6, "a-stranger-reads-it").await;

            // /sites shows the new "Last modified" (the farm's callback), and the storage.
            let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
            for _ in 0..60 {
                b.goto(&app.url("/sites")).await;
                if b.text_of(&site_row("notebook")).await.contains(&today) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let row = b.text_of(&site_row("notebook")).await;
            assert!(row.contains(&today), "Last modified is today: {row}");
            b.keep_step(7, "sites-last-modified").await;
        })
        .await;
    let (modified, storage): (Option<chrono::DateTime<chrono::Utc>>, Option<i64>) = t
        .one(
            sqlx::query_as("SELECT modified_at, storage_bytes FROM fedwiki.sites WHERE domain = $1")
                .bind("notebook.wiki.localhost"),
        )
        .await;
    assert!(modified.is_some(), "the console holds the edit's time");
    assert!(storage.is_some_and(|s| s > 0), "and the storage it takes: {storage:?}");
}
