//! The static files (htmx, the console's script and the stylesheet), compiled into the binary so it runs from any
//! folder. Each is served under an address naming its content's hash (`console.<hash>.css`),
//! which pages link and caches keep for a year without asking again; the plain name still works
//! for anyone who links it, revalidated each time. Both answer with an ETag and a 304 on a match,
//! and with gzip or brotli when the browser takes them, compressed once per process on first use.
//! HTML pages are never compressed: they carry the CSRF token (BREACH, docs/operations.md).

use std::{
    io::Write,
    sync::{LazyLock, OnceLock},
};

use actix_web::{
    HttpRequest, HttpResponse,
    http::header::{self, HeaderMap},
    web,
};
use sha2::{Digest, Sha256};
use views::{
    layout::AssetLinks,
    paths::{self, fill},
};

use super::errors::AppError;

/// Under its hashed address a file never changes: a year, and no revalidation while fresh.
pub const CACHE_HASHED: &str = "public, max-age=31536000, immutable";
/// Under its plain address the file changes with an upgrade: kept, but asked about each time
/// (a 304 while it is the same).
pub const CACHE_PLAIN: &str = "public, no-cache";
/// The redirect from another version's address: never kept, since during a rolling upgrade the
/// same address can be answered by either version (docs/operations.md, "Static files").
pub const CACHE_REDIRECT: &str = "no-store";

/// Hex digits of the SHA-256 an address carries: 64 bits, plenty to tell two versions apart.
const HASH_LEN: usize = 16;

/// A file as the repository holds it.
struct Source {
    /// Its plain name, which the hashed one is made from: `console.css`.
    plain: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const SOURCES: [Source; 3] = [
    Source {
        plain: "console.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../static/console.css"),
    },
    Source {
        plain: "htmx.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../static/htmx.min.js"),
    },
    Source {
        plain: "console.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../static/console.js"),
    },
];

/// A content coding the console serves files in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Brotli,
}

impl Coding {
    /// The `Content-Encoding` value, none for identity.
    pub fn header(self) -> Option<&'static str> {
        match self {
            Coding::Identity => None,
            Coding::Gzip => Some("gzip"),
            Coding::Brotli => Some("br"),
        }
    }
}

/// One file as served.
pub struct Asset {
    source: &'static Source,
    /// The first [`HASH_LEN`] hex digits of the SHA-256 of its bytes (`sha256sum` agrees).
    hash: String,
    /// `console.<hash>.css`.
    hashed_name: String,
    /// `/static/console.<hash>.css`.
    url: String,
    gzip: OnceLock<Vec<u8>>,
    brotli: OnceLock<Vec<u8>>,
}

impl Asset {
    fn new(source: &'static Source) -> Asset {
        let digest = Sha256::digest(source.bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let hash = hex[..HASH_LEN].to_string();
        let (stem, ext) = split_name(source.plain);
        let hashed_name = format!("{stem}.{hash}.{ext}");
        let url = fill(paths::STATIC_FILE, &[&hashed_name]);
        Asset { source, hash, hashed_name, url, gzip: OnceLock::new(), brotli: OnceLock::new() }
    }

    /// The address pages link.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The strong ETag of the file in `coding`: the hash, with the coding after it when there is
    /// one (a compressed body is other bytes, so a strong validator must differ).
    pub fn etag(&self, coding: Coding) -> String {
        match coding.header() {
            None => format!("\"{}\"", self.hash),
            Some(c) => format!("\"{}-{c}\"", self.hash),
        }
    }

    /// Whether `name` is this file's name with a hash in it other than its own: what a page of
    /// another version of the console asks for.
    fn is_other_version(&self, name: &str) -> bool {
        let (stem, ext) = split_name(self.source.plain);
        name.strip_prefix(stem)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(ext))
            .and_then(|r| r.strip_suffix('.'))
            .is_some_and(|h| (8..=64).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// The bytes in `coding`, compressed now if this is the first time (slow: at most once a
    /// coding per process).
    fn body(&self, coding: Coding) -> &[u8] {
        match coding {
            Coding::Identity => self.source.bytes,
            Coding::Gzip => self.gzip.get_or_init(|| gzip(self.source.bytes)),
            Coding::Brotli => self.brotli.get_or_init(|| brotli(self.source.bytes)),
        }
    }

    fn is_ready(&self, coding: Coding) -> bool {
        match coding {
            Coding::Identity => true,
            Coding::Gzip => self.gzip.get().is_some(),
            Coding::Brotli => self.brotli.get().is_some(),
        }
    }
}

/// `htmx.min.js` → (`htmx.min`, `js`): the hash goes before the last extension.
fn split_name(plain: &str) -> (&str, &str) {
    plain.rsplit_once('.').unwrap_or((plain, ""))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).expect("writing into memory cannot fail");
    e.finish().expect("writing into memory cannot fail")
}

fn brotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    // The best quality: compressed once per process, so its slowness costs nothing per request.
    let params = brotli::enc::BrotliEncoderParams { quality: 11, lgwin: 22, ..Default::default() };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).expect("writing into memory cannot fail");
    out
}

static ASSETS: LazyLock<Vec<Asset>> = LazyLock::new(|| SOURCES.iter().map(Asset::new).collect());

/// Every static file, hashed (cheap: the compression waits for a request that wants it).
pub fn assets() -> &'static [Asset] {
    &ASSETS
}

/// The file with this plain name.
pub fn asset(plain: &str) -> Option<&'static Asset> {
    assets().iter().find(|a| a.source.plain == plain)
}

static LINKS: LazyLock<AssetLinks> = LazyLock::new(|| AssetLinks {
    stylesheet: asset("console.css").map_or("", |a| a.url.as_str()),
    script: asset("htmx.min.js").map_or("", |a| a.url.as_str()),
    console_script: asset("console.js").map_or("", |a| a.url.as_str()),
});

/// The addresses every page links.
pub fn links() -> AssetLinks {
    *LINKS
}

/// The coding to answer in, from `Accept-Encoding`: the highest weight wins, brotli before gzip
/// before identity when weights tie; identity is acceptable unless ruled out (`identity;q=0`, or
/// `*;q=0` with no entry of its own) but, when the header does not name it, only after any coding
/// it does name; identity is also what is sent when nothing is acceptable.
pub fn negotiate(headers: &HeaderMap) -> Coding {
    let (mut br, mut gzip, mut identity, mut any) = (None, None, None, None);
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for element in value.split(',') {
            let mut parts = element.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut weight = Some(1.0);
            for p in parts {
                if let Some((k, v)) = p.split_once('=')
                    && k.trim().eq_ignore_ascii_case("q")
                {
                    weight = parse_weight(v.trim());
                }
            }
            // An element with a weight that is not one is ignored.
            let Some(weight) = weight else { continue };
            match name.as_str() {
                "br" => br = Some(weight),
                "gzip" | "x-gzip" => gzip = Some(weight),
                "identity" => identity = Some(weight),
                "*" => any = Some(weight),
                _ => {}
            }
        }
    }
    let ranked = [
        (Coding::Brotli, br.or(any).unwrap_or(0.0)),
        (Coding::Gzip, gzip.or(any).unwrap_or(0.0)),
        // Unnamed, identity is acceptable but comes after any coding named with a weight.
        (Coding::Identity, identity.or(any).unwrap_or(IMPLIED_IDENTITY)),
    ];
    let mut best = (Coding::Identity, 0.0);
    for (coding, weight) in ranked {
        if weight > best.1 {
            best = (coding, weight);
        }
    }
    best.0
}

/// Below the smallest weight a header can give (0.001).
const IMPLIED_IDENTITY: f32 = 0.0005;

/// A qvalue: 0 to 1 with at most three decimals.
fn parse_weight(v: &str) -> Option<f32> {
    let ok = !v.is_empty()
        && v.len() <= 5
        && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && (v.starts_with('0') || v.starts_with('1'));
    ok.then(|| v.parse::<f32>().ok()).flatten().filter(|w| (0.0..=1.0).contains(w))
}

/// Whether `If-None-Match` names `etag` (weakly compared, as RFC 9110 asks for this header), or
/// is `*`.
pub fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|tag| {
        let tag = tag.trim();
        tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag
    })
}

/// `GET /static/{name}`: a file by its hashed or its plain name; another version's hashed name
/// is sent to this version's.
#[tracing::instrument(name = "A static file", skip_all, fields(name = %name))]
pub async fn static_file(req: HttpRequest, name: web::Path<String>) -> Result<HttpResponse, AppError> {
    for asset in assets() {
        if *name == asset.hashed_name {
            return answer(&req, asset, CACHE_HASHED).await;
        }
        if *name == asset.source.plain {
            return answer(&req, asset, CACHE_PLAIN).await;
        }
        if asset.is_other_version(&name) {
            return Ok(HttpResponse::TemporaryRedirect()
                .insert_header((header::LOCATION, asset.url.as_str()))
                .insert_header((header::CACHE_CONTROL, CACHE_REDIRECT))
                .finish());
        }
    }
    Err(AppError::NotFound)
}

async fn answer(req: &HttpRequest, asset: &'static Asset, cache: &'static str) -> Result<HttpResponse, AppError> {
    let coding = negotiate(req.headers());
    let etag = asset.etag(coding);
    let not_modified = not_modified(req.headers(), &etag);
    let mut res = if not_modified { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    res.insert_header((header::CACHE_CONTROL, cache))
        .insert_header((header::ETAG, etag))
        .insert_header((header::VARY, "Accept-Encoding"));
    if not_modified {
        return Ok(res.finish());
    }
    let body = if asset.is_ready(coding) {
        asset.body(coding)
    } else {
        // The first compression of a file takes a while: off the server's threads.
        web::block(move || asset.body(coding)).await.map_err(|e| AppError::Unexpected(e.into()))?
    };
    res.content_type(asset.source.content_type);
    if let Some(c) = coding.header() {
        res.insert_header((header::CONTENT_ENCODING, c));
    }
    Ok(res.body(web::Bytes::from_static(body)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

    fn accept(values: &[&str]) -> Coding {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        negotiate(&h)
    }

    #[test]
    fn brotli_wins_a_tie_and_weights_decide_otherwise() {
        assert_eq!(accept(&[]), Coding::Identity);
        assert_eq!(accept(&["gzip, deflate, br"]), Coding::Brotli);
        assert_eq!(accept(&["gzip"]), Coding::Gzip);
        assert_eq!(accept(&["br;q=0.5, gzip;q=0.8"]), Coding::Gzip);
        assert_eq!(accept(&["br;q=0, gzip"]), Coding::Gzip);
        assert_eq!(accept(&["gzip;q=0, br;q=0"]), Coding::Identity);
        assert_eq!(accept(&["GZip ; Q=1.0"]), Coding::Gzip);
        assert_eq!(accept(&["x-gzip"]), Coding::Gzip);
        assert_eq!(accept(&["gzip;q=0.5", "br;q=0.4"]), Coding::Gzip, "two headers read as one list");
    }

    #[test]
    fn the_wildcard_and_identity_are_read_as_rfc_9110_says() {
        assert_eq!(accept(&["*"]), Coding::Brotli);
        assert_eq!(accept(&["*;q=0.5, br;q=0.1"]), Coding::Gzip);
        assert_eq!(accept(&["identity"]), Coding::Identity);
        assert_eq!(accept(&["identity, gzip;q=0.5"]), Coding::Identity);
        assert_eq!(accept(&["deflate"]), Coding::Identity, "nothing we have: identity");
        // Nothing acceptable at all: identity all the same.
        assert_eq!(accept(&["identity;q=0, *;q=0"]), Coding::Identity);
    }

    #[test]
    fn a_malformed_weight_drops_its_element() {
        assert_eq!(accept(&["br;q=2, gzip"]), Coding::Gzip);
        assert_eq!(accept(&["br;q=high, gzip;q=0.1"]), Coding::Gzip);
        assert_eq!(accept(&["br;q=-1"]), Coding::Identity);
        assert_eq!(accept(&["gzip;q=0.001"]), Coding::Gzip, "a coding named, however low, before identity unnamed");
        assert_eq!(parse_weight("0.001"), Some(0.001));
        assert_eq!(parse_weight("1.000"), Some(1.0));
        assert_eq!(parse_weight("1.5"), None);
        assert_eq!(parse_weight("0.0001"), None);
    }

    fn inm(values: &[&str], etag: &str) -> bool {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::IF_NONE_MATCH, HeaderValue::from_str(v).unwrap());
        }
        not_modified(&h, etag)
    }

    #[test]
    fn if_none_match_takes_a_list_a_weak_tag_and_the_wildcard() {
        assert!(inm(&["\"abc\""], "\"abc\""));
        assert!(inm(&["\"x\", \"abc\""], "\"abc\""));
        assert!(inm(&["W/\"abc\""], "\"abc\""));
        assert!(inm(&["*"], "\"abc\""));
        assert!(inm(&["\"x\"", "\"abc\""], "\"abc\""));
        assert!(!inm(&["\"abcd\""], "\"abc\""));
        assert!(!inm(&[], "\"abc\""));
    }

    #[test]
    fn a_hashed_name_is_the_sha256_prefix_before_the_extension() {
        let htmx = asset("htmx.min.js").unwrap();
        let hex: String = Sha256::digest(SOURCES[1].bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(htmx.url(), format!("/static/htmx.min.{}.js", &hex[..HASH_LEN]));
        assert_eq!(htmx.etag(Coding::Identity), format!("\"{}\"", &hex[..HASH_LEN]));
        assert_eq!(htmx.etag(Coding::Brotli), format!("\"{}-br\"", &hex[..HASH_LEN]));
        assert!(htmx.is_other_version("htmx.min.0123456789abcdef.js"));
        assert!(!htmx.is_other_version("htmx.min.js"));
        assert!(!htmx.is_other_version("htmx.min.0123.js"), "too short to be a hash");
        assert!(!htmx.is_other_version("htmx.min.0123456789abcdeg.js"));
        assert!(!htmx.is_other_version("console.0123456789abcdef.css"));
        assert_eq!(links().stylesheet, asset("console.css").unwrap().url());
    }

    #[test]
    fn the_pages_link_the_console_script_by_its_hash_apart_from_htmx() {
        let js = asset("console.js").unwrap();
        let hex: String = Sha256::digest(SOURCES[2].bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(js.url(), format!("/static/console.{}.js", &hex[..HASH_LEN]));
        assert_eq!(links().console_script, js.url());
        assert_eq!(links().script, asset("htmx.min.js").unwrap().url());
        // `console.<hash>.css` is the stylesheet's, not another version of the script.
        assert!(js.is_other_version("console.0123456789abcdef.js"));
        assert!(!js.is_other_version("console.0123456789abcdef.css"));
        assert_eq!(js.source.content_type, "text/javascript; charset=utf-8");
    }
}
