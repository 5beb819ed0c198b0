//! From a view's markup to a response: the layout with the person's navigation, or the partial
//! an HTMX request asks for.

use actix_web::{HttpRequest, HttpResponse, http::StatusCode};
use views::{Markup, NavLink, Page, SignedIn, paths};

use super::identity::{Identity, csrf_token, identity};

const MEMBER_NAV: &[NavLink] = &[
    NavLink { href: paths::HOME, label: "Home" },
    NavLink { href: paths::SITES, label: "Sites" },
    NavLink { href: paths::BILLING, label: "Billing" },
];
const OPERATOR_NAV: &[NavLink] = &[
    NavLink { href: paths::HOME, label: "Home" },
    NavLink { href: paths::SITES, label: "Sites" },
    NavLink { href: paths::ORGANIZATIONS, label: "Organizations" },
    NavLink { href: paths::OPERATOR_ACCOUNTS, label: "Accounts" },
    NavLink { href: paths::GRANTS, label: "Grants" },
    NavLink { href: paths::CATALOG, label: "Catalog" },
    NavLink { href: paths::OPERATOR_BILLING, label: "Billing" },
    NavLink { href: paths::OPERATOR_FARM, label: "Farm" },
    NavLink { href: paths::CONNECTIONS, label: "Connections" },
    NavLink { href: paths::RULE_CHANGES, label: "Rule changes" },
    NavLink { href: paths::TOPOLOGY, label: "Topology" },
    NavLink { href: paths::PLAN_ACTS, label: "Plan acts" },
    NavLink { href: paths::OPERATOR, label: "Operations" },
];

/// A request for a partial: HTMX's, but not a history restore or a whole-body swap, which
/// need the full page.
pub fn is_htmx(req: &HttpRequest) -> bool {
    let h = req.headers();
    h.contains_key("hx-request")
        && !h.contains_key("hx-history-restore-request")
        && h.get("hx-request-type").and_then(|v| v.to_str().ok()) != Some("full")
}

fn nav(who: Option<&Identity>) -> &'static [NavLink] {
    match who {
        Some(i) if i.is_operator => OPERATOR_NAV,
        Some(_) => MEMBER_NAV,
        None => &[],
    }
}

/// The page (or the partial, for HTMX) with this title and body.
pub fn page(req: &HttpRequest, status: StatusCode, title: &str, body: Markup) -> HttpResponse {
    let html = markup(req, title, body, is_htmx(req), false);
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(html.into_string())
}

pub fn ok(req: &HttpRequest, title: &str, body: Markup) -> HttpResponse {
    page(req, StatusCode::OK, title, body)
}

/// A fragment a page polls (a progress): the markup alone, never kept by a cache, since the
/// next poll must see what changed.
pub fn polled(body: Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(body.into_string())
}

/// A page whose body carries its own heading (sign-in, errors).
pub fn bare(req: &HttpRequest, status: StatusCode, title: &str, body: Markup) -> HttpResponse {
    let html = markup(req, title, body, is_htmx(req), true);
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(html.into_string())
}

fn markup(req: &HttpRequest, title: &str, body: Markup, partial: bool, bare: bool) -> Markup {
    let who = identity(req);
    let signed_in =
        who.as_ref().map(|i| SignedIn { email: i.email.clone(), is_operator: i.is_operator, verified: i.verified });
    let csrf = csrf_token(req);
    let p = Page {
        title,
        current_path: req.path(),
        signed_in: signed_in.as_ref(),
        csrf_token: &csrf,
        nav: nav(who.as_ref()),
        assets: super::static_assets::links(),
    };
    match (partial, bare) {
        (true, _) => body,
        (false, true) => views::bare_page(&p, body),
        (false, false) => views::page(&p, body),
    }
}

/// An error as a page, or as the refusal partial an HTMX request swaps in place.
pub fn error(req: &HttpRequest, status: u16, title: &str, message: &str, request_id: &str) -> String {
    if is_htmx(req) {
        let mut s = views::refusal(title, message).into_string();
        if status >= 500 {
            s.push_str(&views::error_body(status, title, message, request_id).into_string());
        }
        s
    } else {
        markup(req, title, views::error_body(status, title, message, request_id), false, true).into_string()
    }
}

/// An error page for a request no longer at hand: no navigation, no session.
pub fn error_detached(partial: bool, status: u16, title: &str, message: &str, request_id: &str) -> String {
    let body = views::error_body(status, title, message, request_id);
    if partial {
        return views::refusal(title, message).into_string();
    }
    let p = Page {
        title,
        current_path: "",
        signed_in: None,
        csrf_token: "",
        nav: &[],
        assets: super::static_assets::links(),
    };
    views::bare_page(&p, body).into_string()
}
