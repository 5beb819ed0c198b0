//! Who may change a site: the console's entry credential, the farm's edit session, the gate in
//! front of `wiki` and the console's confirmation; and where the farm finds `wiki`'s client. The
//! tests with the real `wiki` fail, rather than pass, without it.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::common::{
    TempDir, confirming_console, cookies_cleared, cookies_set, create_page, credential, enter, eventually, put_site,
    set_status, site_client, snapshot, start, start_with_wiki, start_with_wiki_and,
};

const ACME: &str = "acme.wiki.localhost";

fn touch(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("folders");
    std::fs::write(path, text).expect("a file");
}

/// npm's layout: `<prefix>/node_modules/.bin/wiki` → `../wiki/cli.js`, and `wiki-client` either
/// beside `wiki` (hoisted) or in `wiki/node_modules` (nested).
fn fake_install(root: &Path, nested: bool) -> std::path::PathBuf {
    let modules = root.join("node_modules");
    touch(&modules.join("wiki/package.json"), r#"{"name": "wiki"}"#);
    touch(&modules.join("wiki/cli.js"), "");
    let packages = if nested { modules.join("wiki/node_modules") } else { modules.clone() };
    touch(&packages.join("wiki-client/package.json"), r#"{"name": "wiki-client"}"#);
    std::fs::create_dir_all(modules.join(".bin")).expect(".bin");
    let bin = modules.join(".bin/wiki");
    std::os::unix::fs::symlink("../wiki/cli.js", &bin).expect("the .bin link");
    bin
}

#[test]
fn the_client_is_found_beside_the_wiki_package_when_hoisted_and_under_it_when_nested() {
    let dir = TempDir::new();
    let hoisted = fake_install(&dir.path().join("hoisted"), false);
    let found = local_farm::package_dir(&hoisted).expect("found");
    assert_eq!(found, std::fs::canonicalize(dir.path().join("hoisted/node_modules")).expect("canonical"));

    let nested = fake_install(&dir.path().join("nested"), true);
    let found = local_farm::package_dir(&nested).expect("found");
    assert_eq!(found, std::fs::canonicalize(dir.path().join("nested/node_modules/wiki/node_modules")).expect("c"));

    let bare = dir.path().join("bare/node_modules");
    touch(&bare.join("wiki/package.json"), "{}");
    touch(&bare.join("wiki/cli.js"), "");
    assert_eq!(local_farm::package_dir(&bare.join("wiki/cli.js")), None, "no wiki-client anywhere");
}

#[test]
fn the_installed_wiki_has_its_client_and_the_friends_security_where_the_farm_looks() {
    let bin = std::env::var_os("FARM_WIKI_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| local_farm::install_prefix().join("node_modules/.bin/wiki"));
    let packages = local_farm::package_dir(&bin)
        .unwrap_or_else(|| panic!("no wiki-client for {}: {}", bin.display(), local_farm::install_hint()));
    assert!(packages.join("wiki-client/client/client.js").is_file(), "{}", packages.display());
    assert!(packages.join("wiki-security-friends/client/security.js").is_file(), "{}", packages.display());
}

#[tokio::test]
async fn the_wiki_page_loads_its_client_styles_scripts_and_security_module() {
    let (farm, _data) = start_with_wiki().await;
    put_site(&farm, ACME, "org-1", "active").await;
    let client = site_client(&farm, ACME);
    let html = client.get(format!("{}welcome-visitors.html", farm.site_url(ACME))).send().await.expect("answer");
    assert_eq!(html.status().as_u16(), 200);
    let html = html.text().await.expect("html");
    // Every script and style the page names, and the security module the client loads.
    let mut assets: Vec<String> = html
        .split(['\'', '"'])
        .filter(|s| s.starts_with('/') && (s.ends_with(".js") || s.ends_with(".css")))
        .map(str::to_string)
        .collect();
    assert!(assets.iter().any(|a| a == "/client.js"), "{html}");
    assets.extend(["/security/security.js".to_string(), "/plugins/activity/activity.js".to_string()]);
    for asset in assets {
        let resp = client.get(format!("{}{}", farm.site_url(ACME), &asset[1..])).send().await.expect("answer");
        assert_eq!(resp.status().as_u16(), 200, "{asset}");
    }
    assert!(html.contains("Wiki by: <span id='site-owner'>acme</span>"), "the site's name as its owner: {html}");
    assert!(html.contains("var isOwner = ('false'"), "a stranger is not the owner: {html}");
}

#[tokio::test]
async fn a_member_let_in_by_the_consoles_credential_is_the_wikis_owner_and_edits() {
    let (farm, _data) = start_with_wiki().await;
    let (status, site) = crate::common::api(
        &farm,
        Method::PUT,
        &format!("/api/sites/{ACME}"),
        Some(serde_json::json!({"owner": "org-1", "owner_name": "Acme Wikis", "status": "active"})),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(site["owner_name"], "Acme Wikis");
    let cookies = enter(&farm, ACME, "org-1").await;

    let page = |cookies: Option<String>| {
        let client = site_client(&farm, ACME);
        let url = format!("{}welcome-visitors.html", farm.site_url(ACME));
        async move {
            let mut req = client.get(url);
            if let Some(c) = cookies {
                req = req.header("Cookie", c);
            }
            req.send().await.expect("answer").text().await.expect("html")
        }
    };
    let html = page(Some(cookies.clone())).await;
    assert!(html.contains("var isOwner = ('true'"), "the member is the owner: {html}");
    assert!(html.contains("Wiki by: <span id='site-owner'>Acme Wikis</span>"), "{html}");
    assert!(page(None).await.contains("var isOwner = ('false'"));
    // wiki's own cookie without the farm's session is not enough: the farm does not pass it on.
    let wiki_only: String = cookies.split("; ").filter(|c| c.starts_with("wikiSession=")).collect();
    assert!(page(Some(wiki_only.clone())).await.contains("var isOwner = ('false'"));

    let resp = create_page(&farm, ACME, "hello-farm", "Edited by a member.", Some(&cookies)).await;
    assert_eq!(resp.status().as_u16(), 200);
    let page_file = farm.site_dir(ACME).join("pages/hello-farm");
    assert!(std::fs::read_to_string(&page_file).expect("wiki wrote the page").contains("Edited by a member."));
    let resp = create_page(&farm, ACME, "second", "x", Some(&wiki_only)).await;
    assert_eq!(resp.status().as_u16(), 403, "wiki's cookie alone writes nothing");
    assert!(!farm.site_dir(ACME).join("pages/second").exists());
}

#[tokio::test]
async fn a_forged_expired_reused_foreign_or_another_owners_credential_sets_nothing() {
    let (farm, _data) = start_with_wiki().await;
    put_site(&farm, ACME, "org-1", "active").await;
    put_site(&farm, "other.wiki.localhost", "org-2", "active").await;
    let client = site_client(&farm, ACME);
    let reused = credential(ACME, "org-1", 60);
    let first = client.get(format!("{}_farm/enter?c={reused}", farm.site_url(ACME))).send().await.expect("answer");
    assert_eq!(first.status().as_u16(), 303);
    let forged = {
        let (body, _) =
            credential(ACME, "org-1", 60).split_once('.').map(|(b, t)| (b.to_string(), t.to_string())).unwrap();
        format!("{body}.{}", "ab".repeat(32))
    };
    for (what, c) in [
        ("forged", forged),
        ("expired", credential(ACME, "org-1", -5)),
        ("reused", reused),
        ("for another site", credential("other.wiki.localhost", "org-2", 60)),
        ("for another owner", credential(ACME, "org-2", 60)),
        ("empty", String::new()),
    ] {
        let resp = client.get(format!("{}_farm/enter?c={c}", farm.site_url(ACME))).send().await.expect("answer");
        assert_eq!(resp.status().as_u16(), 403, "{what}");
        assert!(cookies_set(&resp).is_empty(), "{what}: {:?}", cookies_set(&resp));
        let page = resp.text().await.expect("page");
        assert!(page.contains("This link cannot open the wiki for editing"), "{what}: {page}");
    }
}

/// Each write a stranger might try: an action, an upload, a favicon, a delete, the owner's claim.
async fn try_every_write(farm: &local_farm::LocalFarm, cookies: Option<&str>) -> Vec<(String, u16, Value)> {
    let client = site_client(farm, ACME);
    let site = farm.site_url(ACME);
    let mut answers = Vec::new();
    let resp = create_page(farm, ACME, "stranger-was-here", "Hello", cookies).await;
    answers.push(("PUT action".to_string(), resp));
    let with = |r: reqwest::RequestBuilder| match cookies {
        Some(c) => r.header("Cookie", c),
        None => r,
    };
    for (what, req) in [
        ("POST upload", client.post(format!("{site}plugin/assets/upload")).body("file")),
        ("POST favicon", client.post(format!("{site}favicon.png")).form(&[("image", "data:image/png;base64,AAAA")])),
        ("DELETE page", client.delete(format!("{site}hello.json"))),
        ("POST login", client.post(format!("{site}login"))),
        ("POST reclaim", client.post(format!("{site}auth/reclaim/")).header("Content-Type", "text/plain").body("x")),
        ("GET recycler", client.get(format!("{site}recycler/system/slugs.json"))),
        ("GET proxy", client.get(format!("{site}proxy/example.com/x.json"))),
    ] {
        answers.push((what.to_string(), with(req).send().await.expect("answer")));
    }
    let mut out = Vec::new();
    for (what, resp) in answers {
        let status = resp.status().as_u16();
        let body = resp.text().await.expect("body");
        out.push((what, status, serde_json::from_str(&body).unwrap_or(Value::String(body))));
    }
    out
}

#[tokio::test]
async fn a_stranger_and_another_organizations_member_change_nothing() {
    let (farm, _data) = start_with_wiki().await;
    put_site(&farm, ACME, "org-1", "active").await;
    put_site(&farm, "other.wiki.localhost", "org-2", "active").await;
    // A page of the site's own, made by its member, for the deletes to aim at.
    let member = enter(&farm, ACME, "org-1").await;
    assert_eq!(create_page(&farm, ACME, "hello", "Mine.", Some(&member)).await.status().as_u16(), 200);
    // wiki writes its sitemap and search index in the background when it opens a site.
    let status = farm.site_dir(ACME).join("status");
    eventually("wiki's indexes", async || {
        ["sitemap.json", "sitemap.xml", "site-index.json"].iter().all(|f| status.join(f).is_file()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = snapshot(&farm.site_dir(ACME));

    // A member of another organization, entered into their own site, with its cookies.
    let theirs = enter(&farm, "other.wiki.localhost", "org-2").await;
    for (who, cookies) in [("a stranger", None), ("another organization's member", Some(theirs.as_str()))] {
        for (what, status, body) in try_every_write(&farm, cookies).await {
            assert_eq!(status, 403, "{who}: {what}: {body}");
            assert_eq!(
                body["error"],
                "Only members of acme can change this wiki. A member opens it from the Member Console's Sites page \
                 to edit it.",
                "{who}: {what}"
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // No file was made or removed, and no page or the owner file changed (wiki may still be
    // rewriting its own indexes for the member's page).
    let after = snapshot(&farm.site_dir(ACME));
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "the same files");
    for (path, bytes) in &before {
        if path.starts_with(farm.site_dir(ACME).join("pages")) || path.ends_with("status/owner.json") {
            assert_eq!(&after[path], bytes, "{} changed", path.display());
        }
    }
    assert!(!farm.site_dir(ACME).join("pages/stranger-was-here").exists());
}

#[tokio::test]
async fn a_write_from_another_sites_page_is_refused_even_with_the_members_session() {
    let (farm, _data) = start_with_wiki().await;
    put_site(&farm, ACME, "org-1", "active").await;
    let member = enter(&farm, ACME, "org-1").await;
    let resp = site_client(&farm, ACME)
        .delete(format!("{}hello.json", farm.site_url(ACME)))
        .header("Cookie", &member)
        .header("Origin", format!("http://evil.wiki.localhost:{}", farm.port()))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 403);
    let same_origin = create_page(&farm, ACME, "fine", "ok", Some(&member)).await;
    assert_eq!(same_origin.status().as_u16(), 200, "the gate itself lets the member through");
}

#[tokio::test]
async fn a_session_past_its_interval_is_confirmed_with_the_console_and_ends_when_the_console_says_no() {
    let (farm, _data) = start_with_wiki_and(|c| c.edit_confirm_every = Duration::ZERO).await;
    put_site(&farm, ACME, "org-1", "active").await;
    let console = confirming_console(&farm, true).await;
    let member = enter(&farm, ACME, "org-1").await;

    let resp = create_page(&farm, ACME, "first", "While a member.", Some(&member)).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(cookies_set(&resp).iter().any(|c| c.starts_with("farmEdit=")), "the session was renewed");
    let asked = console.asked.lock().expect("lock").clone();
    assert_eq!(asked, [serde_json::json!({"domain": ACME, "account_id": 7, "owner": "org-1"})]);

    // Removed from the organization: the console says no.
    console.allow.store(false, std::sync::atomic::Ordering::SeqCst);
    let resp = create_page(&farm, ACME, "second", "After removal.", Some(&member)).await;
    assert_eq!(resp.status().as_u16(), 403);
    let cleared = cookies_cleared(&resp);
    assert!(cleared.contains(&"farmEdit".to_string()) && cleared.contains(&"wikiSession".to_string()), "{cleared:?}");
    assert!(!farm.site_dir(ACME).join("pages/second").exists());

    // A console that does not answer is a no too.
    console.allow.store(true, std::sync::atomic::Ordering::SeqCst);
    farm.set_confirm_url("http://127.0.0.1:9/farm/edit-sessions/confirm".into());
    let resp = create_page(&farm, ACME, "third", "Console away.", Some(&member)).await;
    assert_eq!(resp.status().as_u16(), 403);
    assert!(!farm.site_dir(ACME).join("pages/third").exists());
}

#[tokio::test]
async fn within_the_interval_a_session_needs_no_confirmation() {
    let (farm, _data) = start_with_wiki_and(|c| c.edit_confirm_every = Duration::from_secs(600)).await;
    put_site(&farm, ACME, "org-1", "active").await;
    let console = confirming_console(&farm, false).await;
    let member = enter(&farm, ACME, "org-1").await;
    assert_eq!(create_page(&farm, ACME, "first", "x", Some(&member)).await.status().as_u16(), 200);
    assert!(console.asked.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_parked_site_refuses_writes_and_entries_and_an_archived_one_answers_404_to_everything() {
    let (farm, _data) = start().await;
    put_site(&farm, "parked.wiki.localhost", "org-1", "parked").await;
    put_site(&farm, "old.wiki.localhost", "org-1", "active").await;
    set_status(&farm, "old.wiki.localhost", "archived").await;

    let parked = "parked.wiki.localhost";
    let client = site_client(&farm, parked);
    let resp = create_page(&farm, parked, "x", "x", None).await;
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
    assert!(body["error"].as_str().is_some_and(|e| e.starts_with("This wiki is parked")), "{body}");
    let c = credential(parked, "org-1", 60);
    let resp = client.get(format!("{}_farm/enter?c={c}", farm.site_url(parked))).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 403);
    assert!(cookies_set(&resp).is_empty());
    let resp = client.get(farm.site_url(parked)).send().await.expect("answer");
    assert_eq!(resp.status().as_u16(), 503, "reads keep the parked page");

    let old = "old.wiki.localhost";
    let client = site_client(&farm, old);
    let c = credential(old, "org-1", 60);
    for req in [
        client.get(farm.site_url(old)),
        client.get(format!("{}_farm/enter?c={c}", farm.site_url(old))),
        client.delete(format!("{}x.json", farm.site_url(old))),
        client.post(format!("{}favicon.png", farm.site_url(old))),
    ] {
        let resp = req.send().await.expect("answer");
        assert_eq!(resp.status().as_u16(), 404);
        assert!(cookies_set(&resp).is_empty());
    }
}

#[tokio::test]
async fn sites_made_before_the_farm_wrote_owner_files_get_theirs_at_start() {
    let data = TempDir::new();
    let farm = crate::common::start_in(data.path(), |_| {}).await;
    put_site(&farm, ACME, "org-1", "active").await;
    let owner_file = farm.site_dir(ACME).join("status/owner.json");
    let first: Value = serde_json::from_slice(&std::fs::read(&owner_file).expect("written at create")).expect("JSON");
    assert_eq!(first["name"], "acme");
    assert_eq!(first["friend"]["secret"].as_str().map(str::len), Some(64));
    farm.stop().await;

    std::fs::remove_file(&owner_file).expect("removed, as on a farm from before");
    let farm = crate::common::start_in(data.path(), |_| {}).await;
    let again: Value = serde_json::from_slice(&std::fs::read(&owner_file).expect("written at start")).expect("JSON");
    assert_eq!(again, first, "the same secret: wiki may hold the site's owner in memory");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&owner_file).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let secrets = std::fs::metadata(data.path().join("site-secrets.json")).expect("meta").permissions().mode() & 0o777;
    assert_eq!(secrets, 0o600);
    farm.stop().await;
}
