//! Callbacks to the console: signed, one per change, retried, and `site.modified` from the
//! watcher.

use std::time::Duration;

use hmac::{Hmac, Mac};
use local_farm::verify_signature;
use reqwest::Method;
use serde_json::Value;
use sha2::Sha256;

use crate::common::{
    SECRET, Seen, control, delete_site, eventually, get_site, put_site, receiver, rfc3339, set_status, start,
};

/// The check a console writes by hand: hex HMAC-SHA256 over "<timestamp>.<body>".
fn signed_as_documented(seen: &Seen) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(format!("{}.{}", seen.timestamp, seen.body).as_bytes());
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    seen.signature == format!("v1={hex}")
}

fn assert_signed(seen: &Seen) {
    assert!(signed_as_documented(seen), "signature {} over {}", seen.signature, seen.body);
    assert!(verify_signature(SECRET, &seen.timestamp, seen.body.as_bytes(), &seen.signature));
    assert!(!verify_signature("another secret", &seen.timestamp, seen.body.as_bytes(), &seen.signature));
    let now = chrono::Utc::now().timestamp();
    let ts: i64 = seen.timestamp.parse().expect("unix seconds");
    assert!((now - ts).abs() < 60, "timestamp {ts} is now");
}

#[tokio::test]
async fn each_change_sends_one_signed_callback_carrying_the_site() {
    let (farm, _data) = start().await;
    let rx = receiver(&farm, &[]).await;
    let (_, created) = put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await; // a retry: no change, no callback
    let (_, parked) = set_status(&farm, "acme.wiki.localhost", "parked").await;
    set_status(&farm, "acme.wiki.localhost", "parked").await; // the same status: no callback
    let (_, archived) = set_status(&farm, "acme.wiki.localhost", "archived").await;
    delete_site(&farm, "acme.wiki.localhost").await;
    delete_site(&farm, "acme.wiki.localhost").await; // already gone: no callback

    let seen = rx.wait_for(4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen_now = rx.seen();
    assert_eq!(seen_now.len(), 4, "one callback per change: {:?}", rx.events());
    for s in &seen {
        assert_signed(s);
    }
    let events: Vec<Value> = seen.iter().map(Seen::event).collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().expect("type")).collect();
    assert_eq!(types, ["site.created", "site.status_changed", "site.status_changed", "site.deleted"]);
    assert_eq!(events[0]["site"], created);
    assert_eq!(events[1]["site"], parked);
    assert_eq!(events[2]["site"], archived);
    assert_eq!(events[3]["site"], archived, "a deleted site as it was last");
    let mut ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().expect("id")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "ids are unique");
    let mut last = None;
    for e in &events {
        let at = rfc3339(&e["occurred_at"]);
        assert!(last.is_none_or(|l| l <= at), "in order");
        last = Some(at);
    }
}

#[tokio::test]
async fn changes_before_a_callback_url_is_set_are_not_sent() {
    let (farm, _data) = start().await;
    put_site(&farm, "early.wiki.localhost", "org-1", "active").await;
    let rx = receiver(&farm, &[]).await;
    put_site(&farm, "late.wiki.localhost", "org-1", "active").await;
    let seen = rx.wait_for(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.seen().len(), 1);
    assert_eq!(seen[0].event()["site"]["domain"], "late.wiki.localhost");
}

/// Write a file whole (beside it, then renamed), so the watcher never sees it half written.
fn write_whole(path: &std::path::Path, body: &[u8]) {
    let tmp = path.parent().and_then(|p| p.parent()).expect("site folder").with_extension("tmp");
    std::fs::write(&tmp, body).expect("write");
    std::fs::rename(&tmp, path).expect("rename into place");
}

#[tokio::test]
async fn writing_into_an_active_sites_folder_sends_site_modified() {
    let (farm, _data) = start().await;
    let rx = receiver(&farm, &[]).await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    rx.wait_for(1).await;

    let page = farm.site_dir("acme.wiki.localhost").join("pages").join("hello-world");
    let body = br#"{"title":"Hello World","story":[]}"#;
    write_whole(&page, body);
    let mtime =
        chrono::DateTime::<chrono::Utc>::from(std::fs::metadata(&page).expect("meta").modified().expect("mtime"));
    let seen = rx.wait_for(2).await;
    assert_signed(&seen[1]);
    let event = seen[1].event();
    assert_eq!(event["type"], "site.modified");
    assert_eq!(event["site"]["storage_bytes"], body.len());
    let modified_at = rfc3339(&event["site"]["modified_at"]);
    assert!((modified_at - mtime).num_milliseconds().abs() < 2, "{modified_at} is the page's mtime {mtime}");
    let (_, site) = get_site(&farm, "acme.wiki.localhost").await;
    assert_eq!(site, event["site"], "the API reports what the callback said");

    // Files outside `pages` count toward storage, but not toward the modification time.
    std::fs::create_dir_all(farm.site_dir("acme.wiki.localhost").join("status")).expect("status folder");
    write_whole(&farm.site_dir("acme.wiki.localhost").join("status").join("sitemap.json"), b"[]");
    let seen = rx.wait_for(3).await;
    let event = seen[2].event();
    assert_eq!(event["type"], "site.modified");
    assert_eq!(event["site"]["storage_bytes"], body.len() + 2);
    assert_eq!(rfc3339(&event["site"]["modified_at"]), modified_at);

    // Nothing changes: nothing is sent. A parked site is not watched.
    set_status(&farm, "acme.wiki.localhost", "parked").await;
    rx.wait_for(4).await;
    std::fs::write(&page, b"{}").expect("write");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.seen().len(), 4, "{:?}", rx.events());
}

#[tokio::test]
async fn a_refused_callback_is_retried_with_the_same_body_and_a_fresh_signature() {
    let (farm, _data) = start().await;
    let rx = receiver(&farm, &[500]).await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    put_site(&farm, "beta.wiki.localhost", "org-1", "active").await;
    let seen = rx.wait_for(3).await;
    assert_eq!(seen[0].body, seen[1].body, "the retry resends the same event");
    assert_eq!(seen[1].event()["site"]["domain"], "acme.wiki.localhost");
    assert_eq!(seen[2].event()["site"]["domain"], "beta.wiki.localhost", "a retrying event holds back later ones");
    for s in &seen {
        assert_signed(s);
    }

    let log = eventually("both deliveries recorded", async || {
        let (_, body) = control(&farm, Method::GET, "/_farm/callbacks", None).await;
        let log = body["callbacks"].as_array().cloned().unwrap_or_default();
        (log.len() == 2 && log.iter().all(|r| r["outcome"] == "delivered")).then_some(log)
    })
    .await;
    assert_eq!(log[0]["id"], seen[0].event()["id"]);
    assert_eq!(log[0]["type"], "site.created");
    assert_eq!(log[0]["domain"], "acme.wiki.localhost");
    assert_eq!(log[0]["attempts"], 2);
    assert_eq!(log[0]["last_status"], 200);
    assert_eq!(log[1]["attempts"], 1);
}

#[tokio::test]
async fn a_callback_refused_every_time_is_given_up_after_the_schedule() {
    let (farm, _data) = start().await;
    let rx = receiver(&farm, &[503, 500, 502, 500]).await;
    put_site(&farm, "acme.wiki.localhost", "org-1", "active").await;
    let log = eventually("the delivery to fail", async || {
        let (_, body) = control(&farm, Method::GET, "/_farm/callbacks", None).await;
        let log = body["callbacks"].as_array().cloned().unwrap_or_default();
        (log.first().is_some_and(|r| r["outcome"] == "failed")).then_some(log)
    })
    .await;
    assert_eq!(log[0]["attempts"], 3, "the first attempt and one per wait in the schedule");
    assert_eq!(log[0]["last_status"], 502);
    assert_eq!(rx.seen().len(), 3);
}
