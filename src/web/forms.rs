//! What every form handler shares: the submitted fields, where a successful post goes, and the
//! partial a refused HTMX post gets back.

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};

use super::render;

/// A urlencoded form as its (name, value) pairs, so a handler reads what it needs and answers a
/// missing or bad field in its own words (not a deserializer's 400).
pub type Fields = web::Form<Vec<(String, String)>>;

/// The value of a field, or "" when it was not sent.
pub fn value<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

/// After a successful post: to `to` (HTMX follows `HX-Redirect`; a plain form a 303).
pub fn after_post(req: &HttpRequest, to: &str) -> HttpResponse {
    if render::is_htmx(req) {
        HttpResponse::Ok().insert_header(("HX-Redirect", to.to_string())).finish()
    } else {
        HttpResponse::SeeOther().insert_header(("Location", to.to_string())).finish()
    }
}

/// A piece of a page, as an HTMX request swaps it in.
pub fn partial(status: StatusCode, m: views::Markup) -> HttpResponse {
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(m.into_string())
}
