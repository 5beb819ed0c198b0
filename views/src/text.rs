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

/// A resource key's value as a pool has it: a number (a limit), or a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Number(i64),
    Flag(bool),
}

/// A whole number with its thousands grouped: 1,000,000.
pub fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// An entitlement's value as a member reads it, beside the key's name: a number with the key's
/// unit when it has one ("5 GB"; "10" when the name says it: "Active sites: 10"), a flag as
/// "included" or "not included". The one place a value is worded.
pub fn entitlement_value(value: Amount, unit: Option<&str>) -> String {
    match (value, unit) {
        (Amount::Number(n), Some(u)) => format!("{} {u}", grouped(n)),
        (Amount::Number(n), None) => grouped(n),
        (Amount::Flag(true), _) => "included".into(),
        (Amount::Flag(false), _) => "not included".into(),
    }
}

/// Use against a limit, with the unit after the limit: "1 of 3", "2 of 5 GB".
pub fn usage_value(used: i64, limit: i64, unit: Option<&str>) -> String {
    format!("{} of {}", grouped(used), entitlement_value(Amount::Number(limit), unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_with_their_unit_only_when_one_is_set() {
        assert_eq!(entitlement_value(Amount::Number(10), None), "10");
        assert_eq!(entitlement_value(Amount::Number(5), Some("GB")), "5 GB");
        assert_eq!(entitlement_value(Amount::Number(1_000_000), Some("seats")), "1,000,000 seats");
        assert_eq!(entitlement_value(Amount::Flag(true), None), "included");
        assert_eq!(entitlement_value(Amount::Flag(false), Some("GB")), "not included");
        assert_eq!(usage_value(2, 5, Some("GB")), "2 of 5 GB");
        assert_eq!(usage_value(1, 3, None), "1 of 3");
        assert_eq!(grouped(-1234), "-1,234");
        assert_eq!(grouped(999), "999");
    }

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
