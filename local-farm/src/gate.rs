//! Who may change a site (docs/farm-api.md, "Editing a site"). The farm answers 403 to every
//! request that could change a site, or that `wiki` keeps for the site's owner, unless it carries
//! the farm's edit session for that site; such a request never reaches `wiki`. A member gets the
//! session by following the console's entry link (`/_farm/enter`), and keeps it while the console
//! confirms, at most every `confirm_every`, that they are still a member of the site's owner.

use std::time::Duration;

use actix_web::http::Method;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::callbacks::signature_header;
use crate::entry::{self, EditSession, SESSION_COOKIE};
use crate::farm::Farm;
use crate::pages;
use crate::server::AppState;
use crate::state::{Site, Status};

/// Paths `wiki` keeps for the site's owner even to read (`/proxy` fetches any address for the
/// caller, `/recycler` holds deleted pages, `/system/version.json` is the admin's) or that sign a
/// visitor in or out.
const OWNER_PATHS: &[&str] = &["/proxy", "/recycler", "/system/version.json", "/auth", "/login", "/logout"];

/// Whether a request could change the site or is its owner's alone: every method but GET, HEAD
/// and OPTIONS, and the owner's paths. The path is compared decoded and lowercased, as `wiki`'s
/// router (case-insensitive) would match it.
pub fn owner_only(method: &Method, path: &str) -> bool {
    if !(method == Method::GET || method == Method::HEAD || method == Method::OPTIONS) {
        return true;
    }
    let path = percent_decode(path).to_ascii_lowercase();
    OWNER_PATHS.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = path.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The value of the cookie `name` in the request, if it has one.
pub fn cookie<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The request's edit session for this site, if it carries a valid one.
pub fn session_of(req: &HttpRequest, app: &AppState, site: &Site) -> Option<EditSession> {
    let value = cookie(req, SESSION_COOKIE)?;
    entry::open_session(&app.keys.session_key, value, &site.domain, &site.owner, now_secs())
}

/// The 403 for a change this visitor may not make: a page for a browser, JSON for the wiki's
/// own client; `clear` also ends the visitor's farm and wiki sessions.
pub fn refuse(req: &HttpRequest, site: &Site, message: &str, clear: bool) -> HttpResponse {
    let wants_html =
        req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    let mut resp = if wants_html {
        pages::forbidden(&site.domain, "You cannot change this wiki", message)
    } else {
        HttpResponse::Forbidden()
            .insert_header(("Cache-Control", "no-store"))
            .json(serde_json::json!({ "error": message }))
    };
    if clear {
        for c in entry::clearing_cookies() {
            if let Ok(v) = HeaderValue::from_str(&c) {
                resp.headers_mut().append(header::SET_COOKIE, v);
            }
        }
    }
    resp
}

fn only_members(site: &Site) -> String {
    format!(
        "Only members of {} can change this wiki. A member opens it from the Member Console's Sites page to edit it.",
        Farm::owner_display_name(site)
    )
}

/// A write from a page of another origin (another site on this farm is the same "site" to a
/// browser, so SameSite cookies do not stop it): refused whatever cookie it carries.
fn cross_origin(req: &HttpRequest) -> bool {
    let Some(origin) = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return false };
    let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or(origin);
    !origin_host.eq_ignore_ascii_case(host)
}

/// Whether a change to `site` may go to `wiki`: `Ok` with the refreshed session cookie when the
/// console was asked again, or the 403 to answer.
pub async fn allow_change(
    req: &HttpRequest,
    app: &AppState,
    site: &Site,
    session: Option<EditSession>,
) -> Result<Option<String>, HttpResponse> {
    if site.status == Status::Parked {
        let message = "This wiki is parked: nothing in it can be changed until its owner activates it again from \
                       the Member Console.";
        return Err(refuse(req, site, message, false));
    }
    if cross_origin(req) {
        return Err(refuse(req, site, "A page of another address cannot change this wiki.", false));
    }
    let Some(session) = session else {
        let had_cookie = cookie(req, SESSION_COOKIE).is_some();
        return Err(refuse(req, site, &only_members(site), had_cookie));
    };
    let now = now_secs();
    if Duration::from_secs(now.saturating_sub(session.confirmed_at).max(0) as u64) < app.confirm_every {
        return Ok(None);
    }
    match confirm(app, &session).await {
        Ok(true) => {
            let renewed = EditSession { confirmed_at: now, ..session };
            Ok(Some(entry::session_cookie(&entry::seal_session(&app.keys.session_key, &renewed))))
        }
        Ok(false) => {
            tracing::info!(domain = %site.domain, account_id = session.account_id, "the console no longer lets this member edit the site");
            Err(refuse(req, site, &only_members(site), true))
        }
        Err(why) => {
            tracing::warn!(domain = %site.domain, account_id = session.account_id, why, "an edit session could not be confirmed");
            let message = format!(
                "The Member Console could not confirm that you may still change this wiki, so nothing was changed. \
                 Open it again from the console's Sites page. ({})",
                only_members(site)
            );
            Err(refuse(req, site, &message, true))
        }
    }
}

#[derive(Deserialize)]
struct Confirmed {
    allowed: bool,
}

/// Ask the console whether the session's account may still change the site: a signed POST to its
/// confirm URL (docs/farm-api.md). Anything but a `200` with `allowed` is an error.
async fn confirm(app: &AppState, s: &EditSession) -> Result<bool, String> {
    let url = app.farm.confirm_url.read().unwrap_or_else(|p| p.into_inner()).clone();
    let Some(url) = url else { return Err("no confirm URL is configured".into()) };
    let Some(secret) = app.farm.callbacks.secret() else { return Err("no callback secret is configured".into()) };
    let body = serde_json::json!({ "domain": s.domain, "account_id": s.account_id, "owner": s.owner }).to_string();
    let timestamp = now_secs().to_string();
    let sent = app
        .proxy
        .post(&url)
        .header("Content-Type", "application/json")
        .header("Farm-Timestamp", &timestamp)
        .header("Farm-Signature", signature_header(&secret, &timestamp, body.as_bytes()))
        .body(body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("the console did not answer: {e}"))?;
    let status = sent.status().as_u16();
    if status != 200 {
        return Err(format!("the console answered {status}"));
    }
    let bytes = sent.bytes().await.map_err(|e| format!("the console's answer broke off: {e}"))?;
    let answer: Confirmed =
        serde_json::from_slice(&bytes).map_err(|e| format!("the console's answer could not be read: {e}"))?;
    Ok(answer.allowed)
}

#[derive(Deserialize)]
struct EnterQuery {
    c: String,
}

/// `GET /_farm/enter?c=<credential>` on a site's host: check the console's credential, set the
/// farm's edit session, claim a `wiki` session for the site's owner, and send the member to the
/// wiki; a refused credential gets a 403 page and nothing set.
pub async fn enter(req: &HttpRequest, app: &AppState, site: &Site) -> HttpResponse {
    let refused = |message: &str| pages::forbidden(&site.domain, "This link cannot open the wiki for editing", message);
    if site.status == Status::Parked {
        return refused("This wiki is parked: its owner can activate it again from the Member Console.");
    }
    let Ok(q) = web::Query::<EnterQuery>::from_query(req.query_string()) else {
        return refused("This link to edit the wiki is incomplete. Open the wiki again from the Member Console.");
    };
    let now = now_secs();
    let claims = match entry::verify_entry(&app.token, &q.c, &site.domain, now, &app.nonces) {
        Ok(c) => c,
        Err(why) => {
            tracing::info!(domain = %site.domain, ?why, "an entry credential was refused");
            return refused(why.sentence());
        }
    };
    if claims.owner != site.owner {
        return refused("This link to edit the wiki was made for another owner of this address.");
    }
    let wiki_url = match &app.wiki_url {
        Ok(url) => url,
        Err(why) => return pages::no_wiki(&site.domain, why),
    };
    let secret = match app.farm.site_secret(&site.domain) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, domain = %site.domain, "the site's secret could not be read");
            return pages::bad_gateway(&site.domain);
        }
    };
    // wiki-security-friends reads the raw body itself, so it must not be a type a body parser
    // takes first.
    let claimed = app
        .proxy
        .post(format!("{wiki_url}/auth/reclaim/"))
        .header("Host", site.domain.as_str())
        .header("Content-Type", "text/plain")
        .body(secret)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let wiki_cookies: Vec<HeaderValue> = match claimed {
        Ok(resp) if resp.status().is_success() => resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
            .collect(),
        Ok(resp) => {
            tracing::error!(status = resp.status().as_u16(), domain = %site.domain, "wiki refused the site's own secret");
            return pages::bad_gateway(&site.domain);
        }
        Err(e) => {
            tracing::warn!(error = %e, domain = %site.domain, "the wiki server did not answer the claim");
            return pages::bad_gateway(&site.domain);
        }
    };
    let session = EditSession {
        domain: site.domain.clone(),
        account_id: claims.account_id,
        owner: claims.owner,
        confirmed_at: now,
        issued_at: now,
    };
    tracing::info!(domain = %site.domain, account_id = claims.account_id, member = %claims.name, "a member entered to edit");
    let mut resp = HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/"))
        .insert_header(("Cache-Control", "no-store"))
        // The credential is in this address: no page it leads to names it.
        .insert_header(("Referrer-Policy", "no-referrer"))
        .finish();
    if let Ok(v) = HeaderValue::from_str(&entry::session_cookie(&entry::seal_session(&app.keys.session_key, &session)))
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    for v in wiki_cookies {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_the_owners_paths_are_owner_only_and_reads_are_not() {
        for (m, p) in [
            (Method::PUT, "/page/x/action"),
            (Method::POST, "/favicon.png"),
            (Method::DELETE, "/x.json"),
            (Method::POST, "/plugin/assets/upload"),
            (Method::PATCH, "/anything"),
            (Method::GET, "/proxy/example.com/x.json"),
            (Method::GET, "/PROXY/example.com/x.json"),
            (Method::GET, "/%70roxy/example.com/x.json"),
            (Method::GET, "/recycler/system/slugs.json"),
            (Method::GET, "/system/version.json"),
            (Method::GET, "/logout"),
            (Method::GET, "/auth/x"),
            (Method::HEAD, "/recycler/x.json"),
        ] {
            assert!(owner_only(&m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/"),
            (Method::GET, "/welcome-visitors.html"),
            (Method::GET, "/welcome-visitors.json"),
            (Method::GET, "/system/sitemap.json"),
            (Method::GET, "/proxyless.json"),
            (Method::HEAD, "/client.js"),
            (Method::OPTIONS, "/page/x/action"),
        ] {
            assert!(!owner_only(&m, p), "{m} {p}");
        }
    }
}
