//! The account mail's shape: a few paragraphs and, at most, one link to act on, made into the
//! text and HTML parts of one message. The words are the caller's; a secret link is written
//! as `services::mail::LINK` and made when the message is sent.

use crate::{integrations::mail::Outgoing, services::mail::new_message_id};

/// Where a message's one link goes, and what it says.
pub struct Action<'a> {
    pub label: &'a str,
    /// An address, or `services::mail::LINK` for the message's secret link.
    pub url: &'a str,
}

/// One message to `to`: `paragraphs` in order, then the action's link, then a line saying who
/// sent it. The Message-ID names `host` (the console's public host).
pub fn compose(host: &str, to: &str, subject: &str, paragraphs: &[&str], action: Option<Action<'_>>) -> Outgoing {
    let mut text = String::new();
    for p in paragraphs {
        text.push_str(p);
        text.push_str("\n\n");
    }
    if let Some(a) = &action {
        text.push_str(&format!("{}:\n{}\n\n", a.label, a.url));
    }
    text.push_str("— Member Console\n");
    // The secret link's placeholder has nothing to escape; the link itself is escaped when it
    // is made (`SendMail::message`).
    let html = views::letter::letter(paragraphs, action.as_ref().map(|a| (a.label, a.url))).into_string();
    Outgoing { to: to.to_string(), subject: subject.to_string(), text, html, message_id: new_message_id(host) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letter_has_its_paragraphs_and_its_link_in_both_parts_and_escapes_the_html() {
        let m = compose(
            "console.example.test",
            "ana@example.test",
            "Join <Acme>",
            &["Bo invited you to <Acme> & friends."],
            Some(Action { label: "Accept", url: super::super::mail::LINK }),
        );
        assert!(m.text.starts_with("Bo invited you to <Acme> & friends.\n\nAccept:\n{link}\n"), "{}", m.text);
        assert!(m.html.contains("<p>Bo invited you to &lt;Acme&gt; &amp; friends.</p>"), "{}", m.html);
        assert!(m.html.contains("<a href=\"{link}\">Accept</a>"), "{}", m.html);
        assert_eq!(m.subject, "Join <Acme>");
        assert!(m.message_id.ends_with("@console.example.test>"));
    }
}
