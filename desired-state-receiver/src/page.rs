//! `GET /`: what the receiver holds, for a person watching the demo.

use std::fmt::Write;

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::SecondsFormat;

use crate::server::AppState;

/// Text made safe for HTML content and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}\
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;\
vertical-align:top}pre{margin:0;white-space:pre-wrap}code{background:#f3f3f3;padding:0 .2em}\
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}dd{margin:0}";

pub async fn index(req: HttpRequest, app: web::Data<AppState>) -> HttpResponse {
    let push_url = format!("{}://{}/desired-state", req.connection_info().scheme(), req.connection_info().host());
    let mut body = String::new();
    let held = app.held();
    let c = held.counters;
    // Writing to a String cannot fail.
    let _ = write!(
        body,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Desired-state receiver</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>Desired-state receiver</h1>\n\
         <p>Give a connection this URL: <code>{url}</code>. It holds what the console pushed, per recipient.</p>\n",
        url = escape(&push_url),
    );
    let _ = write!(
        body,
        "<h2>Counters</h2>\n<dl>\n<dt>Pushes accepted</dt><dd>{}</dd>\n<dt>Repeats dropped</dt><dd>{}</dd>\n\
         <dt>Older generations ignored</dt><dd>{}</dd>\n<dt>Replays applied</dt><dd>{}</dd>\n\
         <dt>Refused (signature or timestamp)</dt><dd>{}</dd>\n<dt>Tests received</dt><dd>{}</dd>\n\
         <dt>Read-backs answered</dt><dd>{}</dd>\n</dl>\n",
        c.pushes, c.duplicates, c.ignored_stale, c.replays, c.rejected, c.tests, c.read_backs,
    );
    let _ = writeln!(body, "<h2>Recipients</h2>");
    let mut recipients = held.recipients().peekable();
    if recipients.peek().is_none() {
        let _ = writeln!(body, "<p>Nothing held yet.</p>");
    } else {
        let _ = writeln!(
            body,
            "<table>\n<thead><tr><th>Kind</th><th>Id</th><th>Generation</th><th>Updated at</th>\
             <th>Content</th></tr></thead>\n<tbody>"
        );
        for r in recipients {
            let content = serde_json::to_string_pretty(&r.content).unwrap_or_else(|_| r.content.to_string());
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
                escape(&r.kind),
                escape(&r.id),
                r.generation,
                escape(&r.updated_at.to_rfc3339_opts(SecondsFormat::Secs, true)),
                escape(&content),
            );
        }
        let _ = writeln!(body, "</tbody>\n</table>");
    }
    let _ = writeln!(body, "</body>\n</html>");
    HttpResponse::Ok().content_type("text/html; charset=utf-8").insert_header(("Cache-Control", "no-store")).body(body)
}

#[cfg(test)]
mod tests {
    #[test]
    fn escape_covers_the_characters_html_gives_meaning_to() {
        assert_eq!(super::escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }
}
