//! The farm API's answers, as docs/farm-api.md promises them.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{
    TOKEN, api, delete_site, get_site, http, json_of, list, put_site, rfc3339, set_status, start, start_in,
};

fn assert_error(status: u16, body: &Value, expected: u16) {
    assert_eq!(status, expected, "{body}");
    let message = body["error"].as_str().unwrap_or_else(|| panic!("an error sentence in {body}"));
    assert!(message.len() > 10 && message.ends_with('.'), "{message:?} is not a sentence");
}

#[tokio::test]
async fn api_calls_without_the_farm_token_are_refused_with_401() {
    let (farm, _data) = start().await;
    let url = format!("{}/api/sites", farm.base_url());
    let answers = [
        http().get(&url).send().await.expect("answer"),
        http().get(&url).bearer_auth("wrong-token").send().await.expect("answer"),
        http().get(&url).basic_auth(TOKEN, Some("")).send().await.expect("answer"),
        http().get(&url).header("Authorization", TOKEN).send().await.expect("answer"),
        http()
            .put(format!("{url}/acme.wiki.localhost"))
            .header("Content-Type", "application/json")
            .body(json!({"owner": "o", "status": "active"}).to_string())
            .send()
            .await
            .expect("answer"),
    ];
    for resp in answers {
        let (status, body) = json_of(resp).await;
        assert_error(status, &body, 401);
    }
    let (status, body) = list(&farm).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sites"], json!([]), "the refused create made nothing");
}

#[tokio::test]
async fn creating_a_site_answers_201_and_the_same_owner_asking_again_gets_200_and_the_site_unchanged() {
    let (farm, _data) = start().await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let (status, site) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    assert_eq!(status, 201, "{site}");
    assert_eq!(site["domain"], "acme.wiki.localhost");
    assert_eq!(site["owner"], "org-1");
    assert_eq!(site["status"], "active");
    assert_eq!(site["storage_bytes"], 0);
    assert_eq!(site["modified_at"], Value::Null);
    let created_at = rfc3339(&site["created_at"]);
    assert!(created_at >= before && created_at <= chrono::Utc::now(), "{created_at}");
    assert!(farm.site_dir("acme.wiki.localhost").join("pages").is_dir(), "the site's data folder is seeded");

    // A retry, even one asking for another status, answers the site as it is.
    let (status, again) = put_site(&farm, "acme.wiki.localhost", "org-1", "parked").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, site);
    let (status, shown) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(status, 200);
    assert_eq!(shown, site);

    let (status, parked) = put_site(&farm, "parked.wiki.localhost", "org-1", "parked").await;
    assert_eq!(status, 201, "{parked}");
    assert_eq!(parked["status"], "parked");
}

#[tokio::test]
async fn another_owner_creating_a_taken_domain_gets_409_and_the_site_stays_its_owners() {
    let (farm, _data) = start().await;
    let (_, site) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let (status, body) = put_site(&farm, "acme.wiki.localhost", "org-2", "active").await;
    assert_error(status, &body, 409);
    let (_, shown) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(shown, site);
}

#[tokio::test]
async fn a_create_with_a_bad_domain_owner_status_or_body_is_400_and_makes_nothing() {
    let (farm, _data) = start().await;
    let long = format!("{}.wiki.localhost", "a".repeat(64));
    for domain in [
        "Acme.wiki.localhost",
        "-acme.wiki.localhost",
        "acme-.wiki.localhost",
        "ac_me.wiki.localhost",
        "a.b.wiki.localhost",
        "wiki.localhost",
        "acme.other.localhost",
        "acme.localhost",
        long.as_str(),
    ] {
        let (status, body) = put_site(&farm, domain, "org-1", "active").await;
        assert_error(status, &body, 400);
    }
    let path = "/api/sites/acme.wiki.localhost";
    for body in [
        json!({ "owner": "", "status": "active" }),
        json!({ "owner": "  ", "status": "active" }),
        json!({ "owner": "org-1", "status": "archived" }),
        json!({ "owner": "org-1", "status": "Active" }),
        json!({ "owner": "org-1" }),
        json!({ "status": "active" }),
        json!({ "owner": "org-1", "status": "active", "plan": "big" }),
        json!(["org-1"]),
    ] {
        let (status, answer) = api(&farm, Method::PUT, path, Some(body.clone())).await;
        assert_error(status, &answer, 400);
    }
    let not_json = http().put(format!("{}{path}", farm.base_url())).bearer_auth(TOKEN).body("owner=org-1").send();
    let (status, answer) = json_of(not_json.await.expect("answer")).await;
    assert_error(status, &answer, 400);

    let (_, listed) = list(&farm).await;
    assert_eq!(listed["sites"], json!([]));
    assert_eq!(std::fs::read_dir(farm.wiki_data_dir()).expect("wiki data").count(), 0, "no folder was made");
}

#[tokio::test]
async fn an_unknown_site_is_404() {
    let (farm, _data) = start().await;
    let (status, body) = get_site(&farm, "nobody.wiki.localhost").await;
    assert_error(status, &body, 404);
    let (status, body) = set_status(&farm, "nobody.wiki.localhost", "parked").await;
    assert_error(status, &body, 404);
    assert!(!farm.site_dir("nobody.wiki.localhost").exists());
}

#[tokio::test]
async fn setting_a_status_answers_the_site_with_its_new_status() {
    let (farm, _data) = start().await;
    let (_, created) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    for status in ["parked", "archived", "active", "active", "archived"] {
        let (code, site) = set_status(&farm, "acme.wiki.localhost", status).await;
        assert_eq!(code, 200, "{site}");
        assert_eq!(site["status"], status);
        assert_eq!(site["created_at"], created["created_at"]);
        assert_eq!(site["owner"], "org-1");
        let (_, shown) = get_site(&farm, "acme.wiki.localhost").await;
        assert_eq!(shown, site);
    }
    for bad in [json!({ "status": "deleted" }), json!({}), json!({ "status": "parked", "why": "x" })] {
        let (code, body) = api(&farm, Method::PUT, "/api/sites/acme.wiki.localhost/status", Some(bad)).await;
        assert_error(code, &body, 400);
    }
    let (_, shown) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(shown["status"], "archived");
}

#[tokio::test]
async fn deleting_answers_204_whether_or_not_the_site_existed_and_removes_its_data() {
    let (farm, _data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let folder = farm.site_dir("acme.wiki.localhost");
    std::fs::write(folder.join("pages").join("hello"), "{}").expect("a page file");

    for _ in 0..2 {
        let (status, body) = delete_site(&farm, "acme.wiki.localhost").await;
        assert_eq!(status, 204, "{body}");
        assert_eq!(body, Value::String(String::new()));
    }
    let (status, _) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(status, 404);
    assert!(!folder.exists(), "the site's data is gone");
    let (status, _) = delete_site(&farm, "never.wiki.localhost").await;
    assert_eq!(status, 204);

    // The domain is free again, for anyone, and starts empty.
    let (status, site) = put_site(&farm, "acme.wiki.localhost", "org-2", "active").await;
    assert_eq!(status, 201, "{site}");
    assert!(!folder.join("pages").join("hello").exists());
}

#[tokio::test]
async fn the_list_reads_in_pages_after_a_domain_and_says_where_the_next_one_starts() {
    let (farm, _data) = start().await;
    for name in ["e", "a", "d", "b", "c"] {
        let (status, _) = put_site(&farm, &format!("{name}.wiki.localhost"), "org-1", "active").await;
        assert_eq!(status, 201);
    }
    let mut after = String::new();
    let mut seen = vec![];
    loop {
        let (status, page) = api(&farm, Method::GET, &format!("/api/sites?after={after}&limit=2"), None).await;
        assert_eq!(status, 200, "{page}");
        assert!(page["sites"].as_array().expect("sites").len() <= 2);
        seen.extend(page["sites"].as_array().unwrap().iter().map(|s| s["domain"].as_str().unwrap().to_string()));
        match page["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => {
                assert!(page["next"].is_null(), "the last page says so: {page}");
                break;
            }
        }
    }
    let expected: Vec<String> = ["a", "b", "c", "d", "e"].iter().map(|n| format!("{n}.wiki.localhost")).collect();
    assert_eq!(seen, expected);
    for bad in ["/api/sites?after=b.wiki.localhost", "/api/sites?limit=0", "/api/sites?limit=10001"] {
        let (status, body) = api(&farm, Method::GET, bad, None).await;
        assert_error(status, &body, 400);
    }
}

#[tokio::test]
async fn the_list_is_sorted_by_domain_with_the_farms_time_taken_before_reading() {
    let (farm, _data) = start().await;
    for name in ["carol", "alice", "bob"] {
        let (status, _) = put_site(&farm, &format!("{name}.wiki.localhost"), "org-1", "active").await;
        assert_eq!(status, 201);
    }
    set_status(&farm, "bob.wiki.localhost", "parked").await;
    let before = chrono::Utc::now() - chrono::Duration::milliseconds(5);
    let (status, body) = list(&farm).await;
    let after = chrono::Utc::now() + chrono::Duration::milliseconds(5);
    assert_eq!(status, 200, "{body}");
    let listed_at = rfc3339(&body["listed_at"]);
    assert!(listed_at >= before && listed_at <= after, "{listed_at} between {before} and {after}");
    let sites = body["sites"].as_array().expect("sites");
    let domains: Vec<&str> = sites.iter().map(|s| s["domain"].as_str().expect("domain")).collect();
    assert_eq!(domains, ["alice.wiki.localhost", "bob.wiki.localhost", "carol.wiki.localhost"]);
    assert_eq!(sites[1]["status"], "parked");
    for site in sites {
        let (_, shown) = get_site(&farm, site["domain"].as_str().expect("domain")).await;
        assert_eq!(&shown, site);
    }
}

#[tokio::test]
async fn sites_survive_a_restart_on_the_same_data_folder() {
    let (farm, data) = start().await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    put_site(&farm, "beta.wiki.localhost", "org-2", "active").await;
    put_site(&farm, "gone.wiki.localhost", "org-2", "active").await;
    set_status(&farm, "beta.wiki.localhost", "archived").await;
    delete_site(&farm, "gone.wiki.localhost").await;
    let (_, before) = list(&farm).await;
    farm.stop().await;
    assert!(data.path().join("farm.json").is_file());
    assert!(!data.path().join("farm.json.tmp").exists(), "the temporary file was renamed");

    let farm = start_in(data.path(), |_| {}).await;
    let (status, after) = list(&farm).await;
    assert_eq!(status, 200);
    assert_eq!(after["sites"], before["sites"]);
    assert_eq!(after["sites"].as_array().map(Vec::len), Some(2));
    // And it still knows who owns what.
    let (status, _) = put_site(&farm, "acme.wiki.localhost", "org-2", "active").await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json_errors() {
    let (farm, _data) = start().await;
    let (status, body) = api(&farm, Method::GET, "/api/nothing", None).await;
    assert_error(status, &body, 404);
    let (status, body) = api(&farm, Method::POST, "/api/sites", Some(json!({}))).await;
    assert_error(status, &body, 405);
    let (status, body) = api(&farm, Method::POST, "/api/sites/acme.wiki.localhost", Some(json!({}))).await;
    assert_error(status, &body, 405);
    let (status, body) = api(&farm, Method::GET, "/", None).await;
    assert_error(status, &body, 404);
}
