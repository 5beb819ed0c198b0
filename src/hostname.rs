//! Host names as the farm and the domains registry take them: lower-case DNS labels joined by
//! dots. A leaf module (it imports nothing), so the configuration and the services share it.

/// One DNS label: 1 to 63 of `a-z`, `0-9` and `-`, not starting or ending with `-`.
pub fn is_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A host name of at least two labels, at most 253 characters, lower case.
pub fn is_hostname(s: &str) -> bool {
    s.len() <= 253 && s.contains('.') && s.split('.').all(is_label)
}

/// Is `name` equal to `zone` or under it (`a.b.zone`)?
pub fn is_at_or_under(name: &str, zone: &str) -> bool {
    name == zone || name.strip_suffix(zone).is_some_and(|head| head.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_names() {
        assert!(is_label("acme") && is_label("a-1") && is_label("0"));
        assert!(!is_label("") && !is_label("-a") && !is_label("a-") && !is_label("Acme") && !is_label("a_b"));
        assert!(!is_label(&"a".repeat(64)) && is_label(&"a".repeat(63)));
        assert!(is_hostname("acme.wiki.localhost") && !is_hostname("localhost") && !is_hostname("a..b"));
        assert!(
            is_at_or_under("a.wiki.localhost", "wiki.localhost") && is_at_or_under("wiki.localhost", "wiki.localhost")
        );
        assert!(!is_at_or_under("awiki.localhost", "wiki.localhost"));
    }
}
