//! Site requests (a `Host` under the farm's domain): an active site's request goes to the `wiki`
//! server unchanged (method, path, query, body and `Host`; the cookies only as `gate` allows), and
//! its answer comes back unchanged; a parked site gets the "parked" page; an archived or unknown
//! one gets a 404 page and is never forwarded, since `wiki` would otherwise make a site of it. A
//! request that could change a site passes `gate` first; `/_farm/enter` is the farm's own.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::domain::site_host;
use crate::entry::{SESSION_COOKIE, WIKI_COOKIE};
use crate::server::AppState;
use crate::state::Status;
use crate::{gate, pages};

/// Headers that describe one connection, not the message: never forwarded either way.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    // Set again from the forwarded body.
    "content-length",
];

pub async fn serve(req: HttpRequest, body: web::Bytes, app: web::Data<AppState>) -> HttpResponse {
    let host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or_default();
    let Some(domain) = site_host(host, &app.farm.farm_domain) else {
        return pages::unknown(host);
    };
    let Some(site) = app.farm.store.get(&domain) else { return pages::unknown(&domain) };
    if site.status == Status::Archived {
        return pages::archived(&domain);
    }
    // The farm's own path on a site's host; never `wiki`'s.
    if req.uri().path() == "/_farm/enter" && req.method() == actix_web::http::Method::GET {
        return gate::enter(&req, &app, &site).await;
    }
    let session = gate::session_of(&req, &app, &site);
    let mut renewed = None;
    if gate::owner_only(req.method(), req.uri().path()) {
        match gate::allow_change(&req, &app, &site, session.clone()).await {
            Ok(cookie) => renewed = cookie,
            Err(refused) => return refused,
        }
    }
    match site.status {
        Status::Parked => pages::parked(&domain),
        Status::Archived => pages::archived(&domain),
        Status::Active => match &app.wiki_url {
            Ok(wiki_url) => {
                let mut resp = forward(&req, body, &app, wiki_url, &domain, session.is_some()).await;
                if let Some(cookie) = renewed.and_then(|c| actix_web::http::header::HeaderValue::from_str(&c).ok()) {
                    resp.headers_mut().append(actix_web::http::header::SET_COOKIE, cookie);
                }
                resp
            }
            Err(why) => pages::no_wiki(&domain, why),
        },
    }
}

/// The request's cookies for `wiki`: never the farm's own, and `wiki`'s session only with the
/// farm's edit session (so the wiki shows its edit tools only to a member the farm let in).
fn cookies_for_wiki(req: &HttpRequest, with_wiki_session: bool) -> Option<String> {
    let kept: Vec<&str> = req
        .headers()
        .get_all("cookie")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            !pair.is_empty() && name != SESSION_COOKIE && (with_wiki_session || name != WIKI_COOKIE)
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

async fn forward(
    req: &HttpRequest,
    body: web::Bytes,
    app: &AppState,
    wiki_url: &str,
    domain: &str,
    with_wiki_session: bool,
) -> HttpResponse {
    let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let Ok(method) = reqwest::Method::from_bytes(req.method().as_str().as_bytes()) else {
        return HttpResponse::MethodNotAllowed().finish();
    };
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in req.headers() {
        if HOP_BY_HOP.contains(&name.as_str()) || name.as_str() == "cookie" {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(name.as_str().as_bytes()),
            reqwest::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    if let Some(cookies) = cookies_for_wiki(req, with_wiki_session)
        && let Ok(value) = reqwest::header::HeaderValue::from_str(&cookies)
    {
        headers.insert("cookie", value);
    }
    if let Some(peer) = req.peer_addr()
        && let Ok(value) = reqwest::header::HeaderValue::from_str(&peer.ip().to_string())
    {
        headers.insert("x-forwarded-for", value);
    }
    let sent = app
        .proxy
        .request(method, format!("{wiki_url}{path}"))
        .headers(headers)
        .body(body)
        .timeout(Duration::from_secs(60))
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!(error = %e, domain, "the wiki server did not answer");
            return pages::bad_gateway(domain);
        }
    };
    let status = resp.status().as_u16();
    let resp_headers = resp.headers().clone();
    let bytes = match resp.bytes().await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(error = %e, domain, "the wiki server's answer broke off");
            return pages::bad_gateway(domain);
        }
    };
    let mut out = HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
    for (name, value) in &resp_headers {
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            actix_web::http::header::HeaderName::from_bytes(name.as_str().as_bytes()),
            actix_web::http::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append_header((name, value));
        }
    }
    out.body(bytes)
}
