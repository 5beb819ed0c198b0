// htmx 4.0.1 (static/htmx.min.js): attributes are NOT inherited unless written `name:inherited`,
// so the CSRF header rides on `<body hx-headers:inherited='{"X-CSRF-Token":…}'>`; a value starting
// with `{` is parsed as JSON. hx-target, hx-swap (default innerHTML) and hx-trigger="every 2s"
// work as in htmx 2, but polling stops only when the element leaves the DOM (no 286), and 4xx/5xx
// responses ARE swapped (only 204/304 are not). History restore re-fetches with HX-Request set.

//! The one layout: document head, top bar, nav, user area and `<main>`.

use crate::forms::csrf_field;
use crate::paths;
use maud::{DOCTYPE, Markup, html};

use crate::components::{Tone, badge};
use crate::text::json_string;

/// Product name, shown in the top bar and every `<title>`.
pub const PRODUCT: &str = "Member Console";

/// Who is signed in, as the top bar shows them.
pub struct SignedIn {
    pub email: String,
    pub is_operator: bool,
    /// Whether the account proved it reads its email; until then every page says so.
    pub verified: bool,
}

/// What the layout needs to know about the page being rendered.
pub struct Page<'a> {
    /// Shown in `<title>` as "{title} · Member Console" and as `<h1>` unless empty.
    pub title: &'a str,
    /// Highlights the nav link that best matches this path.
    pub current_path: &'a str,
    pub signed_in: Option<&'a SignedIn>,
    /// Put in the meta tag, the sign-out form and the `X-CSRF-Token` header htmx sends.
    pub csrf_token: &'a str,
    /// Links to show; the web layer decides which exist for this person.
    pub nav: &'a [NavLink],
    /// Where the stylesheet and the script are.
    pub assets: AssetLinks,
}

/// The addresses of the page's stylesheet and scripts, as the web layer names them: each carries
/// a hash of the file's content, so a browser may keep it for a year and still never runs an old
/// one after an upgrade (the new page names a new address).
#[derive(Clone, Copy, Debug)]
pub struct AssetLinks {
    pub stylesheet: &'static str,
    /// htmx.
    pub script: &'static str,
    /// The console's own few behaviours (the copy buttons), which the CSP keeps out of the page.
    pub console_script: &'static str,
}

/// One link in the top bar.
pub struct NavLink {
    pub href: &'static str,
    pub label: &'static str,
}

/// The full HTML document, with `Page::title` as the page's `<h1>` (unless empty).
pub fn page(p: &Page, body: Markup) -> Markup {
    document(p, true, body)
}

/// The full HTML document without the automatic `<h1>`: for bodies that carry their own heading
/// (the sign-in card, error pages), while `<title>` still names the page.
pub fn bare_page(p: &Page, body: Markup) -> Markup {
    document(p, false, body)
}

/// The whole page on a normal request; only `body` on an HTMX request, which swaps it in place.
///
/// Callers should treat a history restore (`HX-History-Restore-Request: true`) or a request that
/// targets the whole body (`HX-Request-Type: full`) as a normal request: htmx 4 swaps those
/// responses into `<body>`.
pub fn page_or_partial(hx_request: bool, p: &Page, body: Markup) -> Markup {
    if hx_request { body } else { page(p, body) }
}

fn document(p: &Page, with_heading: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(p))
            // `:inherited` is required in htmx 4 for descendants to pick the header up.
            body hx-headers:inherited=(csrf_headers_json(p.csrf_token)) {
                a.skip-link href="#main" { "Skip to content" }
                (top_bar(p))
                main #main tabindex="-1" {
                    @if let Some(user) = p.signed_in.filter(|u| !u.verified) {
                        (crate::pages::signup::unverified_banner(&user.email, p.csrf_token))
                    }
                    @if with_heading && !p.title.is_empty() {
                        h1 { (p.title) }
                    }
                    (body)
                }
            }
        }
    }
}

fn head(p: &Page) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="csrf-token" content=(p.csrf_token);
            title { (document_title(p.title)) }
            link rel="stylesheet" href=(p.assets.stylesheet);
            script src=(p.assets.script) defer {}
            script src=(p.assets.console_script) defer {}
        }
    }
}

fn document_title(title: &str) -> String {
    if title.is_empty() { PRODUCT.to_owned() } else { format!("{title} · {PRODUCT}") }
}

/// The `hx-headers` value: a JSON object, escaped as JSON here and as HTML by maud.
fn csrf_headers_json(token: &str) -> String {
    format!("{{\"X-CSRF-Token\":{}}}", json_string(token))
}

fn top_bar(p: &Page) -> Markup {
    let current = current_link(p.nav, p.current_path);
    html! {
        header.topbar {
            div.topbar-inner {
                a.brand href=(paths::HOME) { (PRODUCT) }
                @if !p.nav.is_empty() {
                    nav.nav aria-label="Main" {
                        ul {
                            @for (i, link) in p.nav.iter().enumerate() {
                                li { (nav_link(link, current == Some(i))) }
                            }
                        }
                    }
                }
                @if let Some(user) = p.signed_in {
                    (user_area(user, p.csrf_token))
                }
            }
        }
    }
}

fn nav_link(link: &NavLink, is_current: bool) -> Markup {
    html! {
        @if is_current {
            a.current href=(link.href) aria-current="page" { (link.label) }
        } @else {
            a href=(link.href) { (link.label) }
        }
    }
}

fn user_area(user: &SignedIn, csrf_token: &str) -> Markup {
    html! {
        div.user {
            // The account page: password, email, sessions, deletion.
            a.user-email href=(paths::ACCOUNT) title="Your account" { (user.email) }
            @if user.is_operator {
                (badge("Operator", Tone::Ok))
            }
            // A form POST, not a link: signing out changes state, so it needs the CSRF token.
            form.signout method="post" action=(paths::LOGOUT) {
                (csrf_field(csrf_token))
                button.btn.btn-secondary.btn-small type="submit" { "Sign out" }
            }
        }
    }
}

/// Index of the nav link to highlight: the longest href that is the current path or a
/// path-segment prefix of it. `/` matches only itself, or it would match every page.
fn current_link(nav: &[NavLink], current_path: &str) -> Option<usize> {
    let path = current_path.split(['?', '#']).next().unwrap_or("");
    nav.iter()
        .enumerate()
        .filter(|(_, link)| is_prefix_path(link.href, path))
        .max_by_key(|(_, link)| link.href.len())
        .map(|(i, _)| i)
}

fn is_prefix_path(href: &str, path: &str) -> bool {
    if href == path {
        return true;
    }
    if href == paths::HOME || href.is_empty() {
        return false;
    }
    match path.strip_prefix(href) {
        Some(rest) => href.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAV: &[NavLink] = &[
        NavLink { href: paths::HOME, label: "Home" },
        NavLink { href: "/sites", label: "Sites" },
        NavLink { href: paths::OPERATOR, label: "Operator" },
        NavLink { href: paths::GRANTS, label: "Grants" },
    ];

    const ASSETS: AssetLinks = AssetLinks {
        stylesheet: "/static/console.0123456789abcdef.css",
        script: "/static/htmx.min.fedcba9876543210.js",
        console_script: "/static/console.0011223344556677.js",
    };

    fn sample<'a>(user: Option<&'a SignedIn>, token: &'a str, path: &'a str) -> Page<'a> {
        Page { title: "Sites", current_path: path, signed_in: user, csrf_token: token, nav: NAV, assets: ASSETS }
    }

    fn user(is_operator: bool) -> SignedIn {
        SignedIn { email: "ann@example.org".into(), is_operator, verified: true }
    }

    #[test]
    fn full_page_has_head_assets_title_heading_and_main() {
        let u = user(false);
        let out = page(&sample(Some(&u), "tok123", "/sites"), html! { p { "Body" } }).into_string();
        assert!(out.starts_with("<!DOCTYPE html><html lang=\"en\">"));
        assert!(out.contains("<title>Sites · Member Console</title>"));
        assert!(out.contains(r#"<link rel="stylesheet" href="/static/console.0123456789abcdef.css">"#));
        // Both deferred, so they run in this order once the document is parsed: htmx first.
        assert!(out.contains(concat!(
            r#"<script src="/static/htmx.min.fedcba9876543210.js" defer></script>"#,
            r#"<script src="/static/console.0011223344556677.js" defer></script>"#
        )));
        assert!(out.contains(r#"<main id="main" tabindex="-1"><h1>Sites</h1><p>Body</p></main>"#));
    }

    #[test]
    fn csrf_token_is_in_meta_signout_form_and_inherited_hx_headers() {
        let u = user(false);
        let out = page(&sample(Some(&u), "tok123", "/"), html! {}).into_string();
        assert!(out.contains(r#"<meta name="csrf-token" content="tok123">"#));
        assert!(out.contains(r#"<body hx-headers:inherited="{&quot;X-CSRF-Token&quot;:&quot;tok123&quot;}">"#));
        assert!(out.contains(r#"<form class="signout" method="post" action="/logout">"#));
        assert!(out.contains(r#"<input type="hidden" name="csrf_token" value="tok123">"#));
    }

    #[test]
    fn csrf_token_is_json_and_html_escaped() {
        let u = user(false);
        let token = r#"a"b\c<d>&"#;
        let out = page(&sample(Some(&u), token, "/"), html! {}).into_string();
        assert!(out.contains(r#"content="a&quot;b\c&lt;d&gt;&amp;""#));
        assert!(out.contains(r#"value="a&quot;b\c&lt;d&gt;&amp;""#));
        // JSON: \" and \\ and \u003c…; then HTML: every " becomes &quot;.
        assert!(out.contains(
            r#"hx-headers:inherited="{&quot;X-CSRF-Token&quot;:&quot;a\&quot;b\\c\u003cd\u003e\u0026&quot;}""#
        ));
        assert!(!out.contains("<d>"));
    }

    #[test]
    fn partial_is_only_the_body() {
        let body = html! { div #progress { "3 of 9" } };
        let out = page_or_partial(true, &sample(None, "t", "/"), body).into_string();
        assert_eq!(out, r#"<div id="progress">3 of 9</div>"#);
        assert!(!out.contains("<html"));
        let full = page_or_partial(false, &sample(None, "t", "/"), html! {}).into_string();
        assert!(full.contains("<html"));
    }

    #[test]
    fn bare_page_and_empty_title_skip_the_heading() {
        let p = sample(None, "t", "/login");
        let out = bare_page(&p, html! { h1 { "Sign in" } }).into_string();
        assert!(out.contains("<title>Sites · Member Console</title>"));
        assert_eq!(out.matches("<h1>").count(), 1);
        let untitled = Page { title: "", ..sample(None, "t", "/") };
        let out = page(&untitled, html! {}).into_string();
        assert!(out.contains("<title>Member Console</title>"));
        assert!(!out.contains("<h1>"));
    }

    #[test]
    fn nav_highlights_the_longest_segment_prefix() {
        let out = page(&sample(None, "t", "/operator/grants/7?x=1"), html! {}).into_string();
        assert!(out.contains(r#"<a class="current" href="/operator/grants" aria-current="page">Grants</a>"#));
        assert_eq!(out.matches("aria-current").count(), 1);
        assert_eq!(current_link(NAV, "/"), Some(0));
        assert_eq!(current_link(NAV, "/sites/4"), Some(1));
        assert_eq!(current_link(NAV, "/sitesx"), None);
        assert_eq!(current_link(NAV, "/billing"), None);
    }

    #[test]
    fn user_area_shows_email_operator_badge_or_nothing_when_signed_out() {
        let op = user(true);
        let out = page(&sample(Some(&op), "t", "/"), html! {}).into_string();
        assert!(out.contains(r#"<a class="user-email" href="/account" title="Your account">ann@example.org</a>"#));
        assert!(out.contains(r#"<span class="badge badge-ok">Operator</span>"#));
        let member = user(false);
        let out = page(&sample(Some(&member), "t", "/"), html! {}).into_string();
        assert!(!out.contains("Operator</span>"));
        let out = page(&sample(None, "t", "/"), html! {}).into_string();
        assert!(!out.contains("/logout"));
    }

    #[test]
    fn data_in_layout_is_escaped() {
        let u = SignedIn { email: "<script>alert(1)</script>@x".into(), is_operator: false, verified: true };
        let p = Page { title: "<script>t</script>", ..sample(Some(&u), "t", "/") };
        let out = page(&p, html! {}).into_string();
        assert!(!out.contains("<script>alert"));
        assert!(!out.contains("<script>t"));
        assert!(out.contains("&lt;script&gt;alert(1)&lt;/script&gt;@x"));
    }
}
