//! The farm's own pages for site requests it does not forward to `wiki`.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn page(status: StatusCode, title: &str, domain: &str, message: &str) -> HttpResponse {
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
         <style>body{{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}}\
         code{{background:#f3f3f3;padding:0 .2em}}</style>\n</head>\n<body>\n<h1>{title}</h1>\n\
         <p><strong>{domain}</strong></p>\n<p>{message}</p>\n</body>\n</html>\n",
        title = escape(title),
        domain = escape(domain),
        message = escape(message),
    );
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(body)
}

/// 503: the site exists but its owner parked it.
pub fn parked(domain: &str) -> HttpResponse {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "This wiki is parked",
        domain,
        "This wiki is parked: it is kept, but not served. Its owner can activate it again from the Member Console.",
    )
}

/// 404: the site was archived.
pub fn archived(domain: &str) -> HttpResponse {
    page(
        StatusCode::NOT_FOUND,
        "This wiki is archived",
        domain,
        "This wiki was archived and is not served. Its owner can restore it from the Member Console.",
    )
}

/// 404: no such site on this farm.
pub fn unknown(domain: &str) -> HttpResponse {
    page(StatusCode::NOT_FOUND, "There is no wiki here", domain, "There is no wiki at this address on this farm.")
}

/// 503: the site is active, but the farm has no `wiki` server to serve it.
pub fn no_wiki(domain: &str, why: &str) -> HttpResponse {
    page(StatusCode::SERVICE_UNAVAILABLE, "This wiki cannot be served right now", domain, why)
}

/// 502: `wiki` did not answer the forwarded request.
pub fn bad_gateway(domain: &str) -> HttpResponse {
    page(
        StatusCode::BAD_GATEWAY,
        "The wiki server did not answer",
        domain,
        "The farm's FedWiki server did not answer this request. Try again in a moment; the farm's wiki.log says more.",
    )
}

/// 403: the request would change the wiki (or is its owner's alone), and the farm does not let
/// this visitor do that; or a link to edit it was refused.
pub fn forbidden(domain: &str, title: &str, message: &str) -> HttpResponse {
    page(StatusCode::FORBIDDEN, title, domain, message)
}
