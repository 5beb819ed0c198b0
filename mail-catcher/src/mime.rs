//! Just enough of a message's MIME to show it: its headers, its subject's encoded words, and its
//! text and HTML parts, decoded from quoted-printable or base64.

use base64::Engine;

/// A message's header fields, unfolded, in order.
pub fn headers(head: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    for line in head.split('\n').map(|l| l.trim_end_matches('\r')) {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// The first field named `name` (any case).
pub fn header<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// A message split at its first empty line: the header block and the body.
pub fn split(message: &str) -> (&str, &str) {
    for sep in ["\r\n\r\n", "\n\n"] {
        if let Some(at) = message.find(sep) {
            return (&message[..at], &message[at + sep.len()..]);
        }
    }
    (message, "")
}

/// A parameter of a header value (`boundary` of a Content-Type), unquoted.
fn param(value: &str, name: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The text and HTML parts of a message (the first of each), decoded.
pub fn bodies(message: &str) -> (Option<String>, Option<String>) {
    let mut text = None;
    let mut html = None;
    walk(message, &mut text, &mut html, 0);
    (text, html)
}

fn walk(entity: &str, text: &mut Option<String>, html: &mut Option<String>, depth: usize) {
    let (head, body) = split(entity);
    let fields = headers(head);
    let kind = header(&fields, "Content-Type").unwrap_or("text/plain");
    let media = kind.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media.starts_with("multipart/") {
        let Some(boundary) = param(kind, "boundary") else { return };
        if depth > 8 {
            return;
        }
        let delimiter = format!("--{boundary}");
        for part in body.split(&delimiter).skip(1) {
            if part.starts_with("--") {
                break;
            }
            let part = part.strip_prefix("\r\n").or_else(|| part.strip_prefix('\n')).unwrap_or(part);
            walk(part, text, html, depth + 1);
        }
        return;
    }
    let slot = match media.as_str() {
        "text/plain" => text,
        "text/html" => html,
        _ => return,
    };
    if slot.is_none() {
        let encoding = header(&fields, "Content-Transfer-Encoding").unwrap_or("7bit").to_ascii_lowercase();
        *slot = Some(decode_body(body, &encoding));
    }
}

fn decode_body(body: &str, encoding: &str) -> String {
    let bytes = match encoding {
        "base64" => {
            let clean: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD.decode(clean).unwrap_or_default()
        }
        "quoted-printable" => quoted_printable(body, false),
        _ => body.as_bytes().to_vec(),
    };
    String::from_utf8_lossy(&bytes).trim_end_matches(['\r', '\n']).replace("\r\n", "\n")
}

/// Quoted-printable (RFC 2045), or the Q encoding of a header's encoded word (`_` is a space).
fn quoted_printable(s: &str, q: bool) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = hex(b.get(i + 1)).zip(hex(b.get(i + 2))).map(|(h, l)| h * 16 + l);
        match (b[i], escaped) {
            (b'=', _) if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => i += 3,
            (b'=', _) if b.get(i + 1) == Some(&b'\n') => i += 2,
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'_', _) if q => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn hex(c: Option<&u8>) -> Option<u8> {
    (*c? as char).to_digit(16).map(|d| d as u8)
}

/// A header value with its encoded words (RFC 2047, `=?utf-8?b?...?=`) decoded; the space
/// between two encoded words is not part of the text.
pub fn decode_words(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    let mut last_was_word = false;
    while let Some(start) = rest.find("=?") {
        let (before, from) = rest.split_at(start);
        let Some(word) = encoded_word(from) else {
            out.push_str(&rest[..start + 2]);
            rest = &rest[start + 2..];
            last_was_word = false;
            continue;
        };
        if !(last_was_word && before.trim().is_empty()) {
            out.push_str(before);
        }
        out.push_str(&word.0);
        rest = &from[word.1..];
        last_was_word = true;
    }
    out.push_str(rest);
    out
}

/// The decoded text of the encoded word `s` starts with, and its length.
fn encoded_word(s: &str) -> Option<(String, usize)> {
    let inner = s.strip_prefix("=?")?;
    let mut fields = inner.splitn(3, '?');
    let _charset = fields.next()?;
    let encoding = fields.next()?;
    let text_and_rest = fields.next()?;
    let end = text_and_rest.find("?=")?;
    let text = &text_and_rest[..end];
    let bytes = match encoding {
        "B" | "b" => base64::engine::general_purpose::STANDARD.decode(text).ok()?,
        "Q" | "q" => quoted_printable(text, true),
        _ => return None,
    };
    let len = 2 + inner.len() - text_and_rest.len() + end + 2;
    Some((String::from_utf8_lossy(&bytes).into_owned(), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_message_gives_its_text_and_html_parts_decoded() {
        let m = "Subject: =?utf-8?b?V2VsY29tZSwgw6l0w6k=?= =?utf-8?q?_now?=\r\n\
                 Content-Type: multipart/alternative;\r\n boundary=\"b1\"\r\n\r\n\
                 --b1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
                 Open https://x.test/verify?token=3Dab=\r\ncd caf=C3=A9\r\n\
                 --b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n\
                 PHA+SGk8L3A+\r\n--b1--\r\n";
        let (head, _) = split(m);
        assert_eq!(decode_words(header(&headers(head), "subject").unwrap()), "Welcome, été now");
        let (text, html) = bodies(m);
        assert_eq!(text.as_deref(), Some("Open https://x.test/verify?token=abcd café"));
        assert_eq!(html.as_deref(), Some("<p>Hi</p>"));
    }

    #[test]
    fn a_plain_message_is_its_own_text_and_a_stray_equals_sign_is_kept() {
        let (text, html) = bodies("Subject: a =?x\r\n\r\nline one\r\nline two\r\n");
        assert_eq!(text.as_deref(), Some("line one\nline two"));
        assert!(html.is_none());
        assert_eq!(decode_words("a =?x"), "a =?x");
    }
}
