//! Static files: the address a page links carries the file's hash, is kept for a year, answers
//! 304 on its ETag, and comes gzip- or brotli-compressed when asked; pages never are.

use crate::common;

use std::io::Read;

use common::{TestApp, TestDb};
use reqwest::{StatusCode, header};
use sha2::{Digest, Sha256};

/// The file as the repository holds it, and the first 16 hex digits of its SHA-256.
fn file(plain: &str) -> (Vec<u8>, String) {
    let bytes = std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("static").join(plain)).unwrap();
    let hex: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    (bytes, hex[..16].to_string())
}

/// The value of `attr="…"` after `marker` in `html`.
fn attribute_after<'a>(html: &'a str, marker: &str, attr: &str) -> &'a str {
    let from = html.find(marker).unwrap_or_else(|| panic!("no {marker} in {html}"));
    let rest = &html[from..];
    let start = rest.find(&format!("{attr}=\"")).unwrap() + attr.len() + 2;
    let len = rest[start..].find('"').unwrap();
    &rest[start..start + len]
}

async fn app() -> (TestDb, TestApp) {
    let t = TestDb::new().await;
    let app = TestApp::spawn(&t).await;
    (t, app)
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
    out
}

fn unbrotli(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(body, 4096).read_to_end(&mut out).unwrap();
    out
}

#[tokio::test]
async fn a_page_links_each_file_by_its_hash_and_that_address_is_kept_a_year_with_an_etag() {
    let (_t, app) = app().await;
    let c = app.client();
    let r = c.get(app.url("/login")).header(header::ACCEPT_ENCODING, "gzip, deflate, br").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The page itself is never compressed: it carries the CSRF token (BREACH).
    assert!(r.headers().get(header::CONTENT_ENCODING).is_none(), "{:?}", r.headers());
    let html = r.text().await.unwrap();
    let links = [
        ("console.css", attribute_after(&html, "<link rel=\"stylesheet\"", "href").to_string(), "text/css"),
        ("htmx.min.js", attribute_after(&html, "<script", "src").to_string(), "text/javascript"),
        ("console.js", attribute_after(&html, "<script src=\"/static/console.", "src").to_string(), "text/javascript"),
    ];
    for (plain, url, kind) in links {
        let (bytes, hash) = file(plain);
        let (stem, ext) = plain.rsplit_once('.').unwrap();
        assert_eq!(url, format!("/static/{stem}.{hash}.{ext}"), "the page links {plain} by its hash");
        assert!(!html.contains(&format!("/static/{plain}")), "no page links the plain name");

        let r = c.get(app.url(&url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{url}");
        let h = r.headers().clone();
        assert_eq!(h[header::CACHE_CONTROL], "public, max-age=31536000, immutable", "{url}");
        assert_eq!(h[header::ETAG], format!("\"{hash}\"").as_str(), "{url}");
        assert_eq!(h[header::VARY], "Accept-Encoding", "{url}");
        assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind), "{url}: {h:?}");
        assert!(h.get(header::CONTENT_ENCODING).is_none(), "asked for no coding: identity; {url}");
        assert_eq!(r.bytes().await.unwrap(), bytes, "{url}");

        // Revalidation: the tag alone, in a list, weak, and the wildcard.
        let etag = format!("\"{hash}\"");
        for inm in [etag.clone(), format!("\"other\", W/{etag}"), "*".to_string()] {
            let r = c.get(app.url(&url)).header(header::IF_NONE_MATCH, &inm).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{url} If-None-Match: {inm}");
            assert_eq!(r.headers()[header::ETAG], etag.as_str());
            assert_eq!(r.headers()[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
            assert!(r.bytes().await.unwrap().is_empty(), "a 304 has no body");
        }
        let r = c.get(app.url(&url)).header(header::IF_NONE_MATCH, "\"0000000000000000\"").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "another tag: the file again");

        // HEAD: the same answer, no body.
        let r = c.head(app.url(&url)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::ETAG], etag.as_str());
        assert!(r.bytes().await.unwrap().is_empty(), "a HEAD's answer has no body");
    }
}

#[tokio::test]
async fn a_file_comes_gzip_or_brotli_as_accept_encoding_asks_and_decodes_to_the_same_bytes() {
    let (_t, app) = app().await;
    let c = app.client();
    for plain in ["console.css", "htmx.min.js", "console.js"] {
        let (bytes, hash) = file(plain);
        let (stem, ext) = plain.rsplit_once('.').unwrap();
        let url = app.url(&format!("/static/{stem}.{hash}.{ext}"));
        for (accept, coding) in [
            ("gzip", Some("gzip")),
            ("br", Some("br")),
            ("gzip, deflate, br", Some("br")),
            ("gzip;q=0.9, br;q=0.5", Some("gzip")),
            ("br;q=0, gzip", Some("gzip")),
            ("deflate", None),
            ("identity", None),
        ] {
            let case = format!("{plain} Accept-Encoding: {accept}");
            let r = c.get(&url).header(header::ACCEPT_ENCODING, accept).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{case}");
            let h = r.headers().clone();
            assert_eq!(h[header::VARY], "Accept-Encoding", "{case}");
            assert_eq!(h.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap()), coding, "{case}");
            let etag = match coding {
                Some(c) => format!("\"{hash}-{c}\""),
                None => format!("\"{hash}\""),
            };
            assert_eq!(h[header::ETAG], etag.as_str(), "{case}");
            let body = r.bytes().await.unwrap();
            let decoded = match coding {
                Some("gzip") => gunzip(&body),
                Some(_) => unbrotli(&body),
                None => body.to_vec(),
            };
            if coding.is_some() {
                assert!(body.len() < bytes.len() / 2, "{case}: {} of {} bytes", body.len(), bytes.len());
            }
            assert!(decoded == bytes, "{case}: decodes to the file");
            // The compressed answer's own tag revalidates it.
            let r = c
                .get(&url)
                .header(header::ACCEPT_ENCODING, accept)
                .header(header::IF_NONE_MATCH, &etag)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{case}");
            assert!(r.bytes().await.unwrap().is_empty(), "{case}");
        }
    }
}

#[tokio::test]
async fn the_plain_name_still_answers_but_is_asked_about_each_time() {
    let (_t, app) = app().await;
    let c = app.client();
    let (bytes, hash) = file("console.css");
    let r = c.get(app.url("/static/console.css")).header(header::ACCEPT_ENCODING, "gzip").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::CACHE_CONTROL], "public, no-cache");
    assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
    let etag = r.headers()[header::ETAG].to_str().unwrap().to_string();
    assert_eq!(etag, format!("\"{hash}-gzip\""));
    assert_eq!(gunzip(&r.bytes().await.unwrap()), bytes);
    let r = c
        .get(app.url("/static/console.css"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .header(header::IF_NONE_MATCH, &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn another_versions_address_is_sent_to_this_ones_and_the_redirect_is_not_kept() {
    let (_t, app) = app().await;
    let c = app.client();
    let (_, hash) = file("htmx.min.js");
    // What a page of an older (or newer) console asks this one for during a rolling upgrade.
    let r = c.get(app.url("/static/htmx.min.0123456789abcdef.js")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(r.headers()[header::LOCATION], format!("/static/htmx.min.{hash}.js").as_str());
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    for missing in ["/static/other.css", "/static/console.not-a-hash.css", "/static/console.0123.css"] {
        let r = c.get(app.url(missing)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{missing}");
        assert!(r.headers().get(header::CONTENT_ENCODING).is_none(), "{missing}: an HTML page, not compressed");
    }
}
