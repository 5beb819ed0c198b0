//! The body of an error page.

use maud::{Markup, html};

/// Status, title, message and the request id to quote. It carries its own `<h1>`, so render it
/// with [`crate::layout::bare_page`] (or alone, as an HTMX partial).
pub fn error_body(status: u16, title: &str, message: &str, request_id: &str) -> Markup {
    html! {
        section.error-page {
            p.error-status { (status) }
            h1 { (title) }
            p.error-message { (message) }
            p.error-request-id {
                "Request id: " code { (request_id) } " — quote it when you report this."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_shows_status_title_message_and_request_id() {
        let out = error_body(404, "Not found", "No such page.", "req-42").into_string();
        assert!(out.contains(r#"<p class="error-status">404</p>"#));
        assert!(out.contains("<h1>Not found</h1>"));
        assert!(out.contains(r#"<p class="error-message">No such page.</p>"#));
        assert!(out.contains("Request id: <code>req-42</code> — quote it when you report this."));
    }

    #[test]
    fn error_body_escapes_everything() {
        let out = error_body(500, "<t>", "<script>m</script>", "<id>").into_string();
        assert!(!out.contains("<script>"));
        assert!(out.contains("<h1>&lt;t&gt;</h1>"));
        assert!(out.contains("<code>&lt;id&gt;</code>"));
    }
}
