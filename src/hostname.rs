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

/// The farm's zone (`FARM_DOMAIN`): the name every site's own name sits under, which the
/// domains registry holds for the farm. A type of its own rather than a `SiteDomain`: a site's
/// domain is one site's address and is made unchecked from a row, while the zone is checked
/// once where the configuration reads it, and claiming a site's domain as the farm's zone (or the
/// zone as a site's) should not compile.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FarmZone(String);

impl FarmZone {
    /// A host name, lower-cased, spaces around it dropped.
    pub fn parse(raw: &str) -> Result<FarmZone, String> {
        let zone = raw.trim().to_ascii_lowercase();
        if is_hostname(&zone) { Ok(FarmZone(zone)) } else { Err(format!("{raw:?} is not a host name")) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FarmZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for FarmZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
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

    #[test]
    fn a_farm_zone_is_a_lower_cased_host_name() {
        assert_eq!(FarmZone::parse(" Wiki.Example.org ").unwrap().as_str(), "wiki.example.org");
        assert!(
            FarmZone::parse("localhost").is_err() && FarmZone::parse("a..b").is_err() && FarmZone::parse("").is_err()
        );
    }
}
