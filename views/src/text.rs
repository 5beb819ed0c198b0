//! Small text encoders the views need. They live here, not in a dependency, because the crate
//! depends on maud alone.

use std::fmt::Write;

/// A JSON string literal (with quotes) for `s`.
///
/// `<`, `>` and `&` are written as `\u00XX` too, so the JSON carries nothing HTML-significant
/// even before maud escapes the attribute it goes in.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => unicode_escape(&mut out, c),
            c if (c as u32) < 0x20 => unicode_escape(&mut out, c),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn unicode_escape(out: &mut String, c: char) {
    // Only called for BMP characters, so one \uXXXX is enough.
    let _ = write!(out, "\\u{:04x}", c as u32);
}

/// Percent-encodes one query-string component (key or value).
///
/// Everything but RFC 3986 unreserved characters is encoded, so `&`, `=`, `+`, `#` and spaces
/// in a value can never change the query's structure.
pub(crate) fn query_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_string_escapes_quotes_backslashes_controls_and_html() {
        assert_eq!(json_string("plain"), r#""plain""#);
        assert_eq!(json_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(json_string("<&>"), r#""\u003c\u0026\u003e""#);
        assert_eq!(json_string("\n\u{1}"), r#""\n\u0001""#);
        assert_eq!(json_string("é"), "\"é\"");
    }

    #[test]
    fn query_component_encodes_reserved_and_utf8() {
        assert_eq!(query_component("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(query_component("a b&c=d+e#f"), "a%20b%26c%3Dd%2Be%23f");
        assert_eq!(query_component("é"), "%C3%A9");
    }
}
