//! Security headers on every answer, error pages and redirects included.
//!
//! The Content-Security-Policy allows only the console's own script and stylesheet: the pages
//! carry no inline script, style or event handler. htmx 4 needs no more than that here: it reads
//! its settings from attributes (`hx-headers` is parsed as JSON, not evaluated), talks to the
//! console with `fetch` (`connect-src 'self'`), and adds its indicator rule through a
//! constructed stylesheet, which the policy does not govern. The console uses no `hx-on` or
//! trigger filters, the htmx features that would need `'unsafe-eval'`.

use actix_web::{
    Error,
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::header::{self, HeaderName, HeaderValue},
    middleware::Next,
    web,
};

use super::AppState;

pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The policy of a page whose form leaves the console on purpose (Buy on `/billing` answers with
/// a redirect to Stripe's checkout): browsers hold the redirect a form submission follows to the
/// page's `form-action`, so that page names Stripe's checkout origin besides its own. A handler
/// sets it on its answer; `apply` keeps a policy the answer already carries.
pub fn policy_with_form_target(origin: &str) -> String {
    CONTENT_SECURITY_POLICY.replace("form-action 'self'", &format!("form-action 'self' {origin}"))
}

/// One year: browsers remember to use https for the console's host.
pub const STRICT_TRANSPORT_SECURITY: &str = "max-age=31536000";

pub async fn security_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let https = req.app_data::<web::Data<AppState>>().is_some_and(|s| s.config.secure_cookies());
    let mut res = next.call(req).await?;
    apply(res.headers_mut(), https);
    Ok(res)
}

/// Put the headers on an answer (also used for the answers the request context makes after the
/// request is gone, which no outer middleware sees).
pub fn apply(h: &mut header::HeaderMap, https: bool) {
    let set = |h: &mut header::HeaderMap, name: HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        set(h, header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY);
    }
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "same-origin");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, HeaderName::from_static("cross-origin-opener-policy"), "same-origin");
    if https {
        set(h, header::STRICT_TRANSPORT_SECURITY, STRICT_TRANSPORT_SECURITY);
    }
    // An HTML answer is a whole page or, to htmx, a fragment of one, from the same URL: a cache
    // (the browser's back/forward one included) must tell them apart.
    let html = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/html"));
    if html {
        let vary = match h.get(header::VARY).and_then(|v| v.to_str().ok()) {
            Some(v) if v.split(',').any(|p| p.trim().eq_ignore_ascii_case("hx-request")) => None,
            Some(v) => Some(format!("{v}, HX-Request")),
            None => Some("HX-Request".to_string()),
        };
        if let Some(v) = vary.and_then(|v| HeaderValue::from_str(&v).ok()) {
            h.insert(header::VARY, v);
        }
    }
    // Pages show one person's data: no shared cache keeps them (static files say their own).
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, header::CACHE_CONTROL, "no-store");
    }
}
