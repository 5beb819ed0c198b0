//! The HTML part of the console's mail: a few paragraphs and, at most, one link to act on. The
//! text part and the message itself are the console's (`services::letters`).

use maud::{DOCTYPE, Markup, html};

/// Text made safe to place in HTML, as maud escapes it (a mailed link is placed after the
/// letter is made, so it goes through this too).
pub fn escape(text: &str) -> String {
    html! { (text) }.into_string()
}

/// The letter's HTML: `paragraphs` in order, then the action's link (label, address) with the
/// address written out for mail readers that hide links, then who sent it.
pub fn letter(paragraphs: &[&str], action: Option<(&str, &str)>) -> Markup {
    html! {
        (DOCTYPE)
        html {
            body style="font-family: sans-serif; line-height: 1.5" {
                @for p in paragraphs { p { (p) } }
                @if let Some((label, href)) = action {
                    p { a href=(href) { (label) } }
                    p style="color: #555" { "Or open this address: " (href) }
                }
                p style="color: #555" { "— Member Console" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn paragraphs_and_the_link_are_escaped() {
        let out =
            super::letter(&["Bo invited you to <Acme> & friends."], Some(("Accept", "https://x.test/?a=1&b=\"2\"")))
                .into_string();
        assert!(out.contains("<p>Bo invited you to &lt;Acme&gt; &amp; friends.</p>"), "{out}");
        assert!(out.contains(r#"<a href="https://x.test/?a=1&amp;b=&quot;2&quot;">Accept</a>"#), "{out}");
        assert_eq!(super::escape("<a href=\"x\">&</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;");
    }
}
