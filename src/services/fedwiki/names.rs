//! A site's name as a member types it: one DNS label, which becomes `<name>.<farm zone>`.

/// Names a member may not take for a site: `<name>.<farm zone>` would pass for the farm's own
/// address (its web front, API, mail, operators' console, status or help pages), where a
/// visitor would trust it. docs/fedwiki.md lists them.
pub const RESERVED_SITE_NAMES: &[&str] = &[
    "admin", "api", "assets", "auth", "console", "farm", "ftp", "help", "login", "mail", "smtp", "static", "status",
    "support", "www",
];

/// Two hyphens in a label's third and fourth places: DNS keeps that shape for encoded names
/// (RFC 5891 §4.2.3.1), IDNA's `xn--` the one in use, others for prefixes yet to come.
pub fn has_reserved_hyphens(label: &str) -> bool {
    label.get(2..4) == Some("--")
}

/// A site's name: 1 to 63 of `a-z`, `0-9` and `-`, not starting or ending with `-`, without two
/// hyphens in the third and fourth places (so no `xn--` name either: a site's name is typed in
/// plain letters), and not one of [`RESERVED_SITE_NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteName(String);

impl SiteName {
    pub fn parse(input: &str) -> Result<SiteName, String> {
        let s = input.trim().to_ascii_lowercase();
        if s.is_empty() {
            return Err("Give the site a name, e.g. “handbook”.".into());
        }
        // Counted and cut by characters, not bytes: a name may hold letters outside ASCII (refused
        // below, with their own reason), and a byte cut inside one would panic.
        let length = s.chars().count();
        if length > 63 {
            let head: String = s.chars().take(20).collect();
            return Err(format!(
                "“{head}…” is too long: a site's name is at most 63 characters, and this one has {length}."
            ));
        }
        if !crate::hostname::is_label(&s) {
            return Err(format!(
                "“{}” cannot be a site's name: use letters, digits and hyphens, not starting or ending with a hyphen.",
                input.trim()
            ));
        }
        if has_reserved_hyphens(&s) {
            return Err(format!(
                "“{s}” cannot be a site's name: two hyphens in the third and fourth places mark an encoded name \
                 (such as xn--) in DNS. Move or drop a hyphen."
            ));
        }
        if RESERVED_SITE_NAMES.contains(&s.as_str()) {
            return Err(format!(
                "“{s}” is kept for the farm's own addresses, where visitors would take it for the farm: choose \
                 another name."
            ));
        }
        Ok(SiteName(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The site's address under the farm's zone.
    pub fn domain(&self, zone: &crate::hostname::FarmZone) -> crate::ids::SiteDomain {
        crate::ids::SiteDomain::from(format!("{}.{zone}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_name_is_one_dns_label() {
        assert_eq!(
            SiteName::parse(" Handbook ").unwrap().domain(&crate::hostname::FarmZone::parse("wiki.localhost").unwrap()),
            "handbook.wiki.localhost"
        );
        for bad in ["", "  ", "-a", "a-", "a.b", "a b", "ünï", "a_b", &"x".repeat(64)] {
            assert!(SiteName::parse(bad).is_err(), "{bad:?} is refused");
        }
        assert!(SiteName::parse(&"x".repeat(63)).is_ok());
    }

    #[test]
    fn encoded_shapes_and_the_farms_own_names_are_refused_with_why() {
        for (bad, why) in [
            ("ab--cd", "two hyphens in the third and fourth places"),
            ("xn--abc", "two hyphens in the third and fourth places"),
            ("xn--bcher-kva", "two hyphens in the third and fourth places"),
            ("www", "kept for the farm's own addresses"),
            (" API ", "kept for the farm's own addresses"),
        ] {
            let e = SiteName::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        // Hyphens elsewhere, and names that only start like a reserved one, stay valid.
        for good in ["a--b", "abc--d", "my-www", "wwww", "handbook", "notes", "home-1", "x-y-z"] {
            assert!(SiteName::parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_long_name_outside_ascii_is_refused_by_its_character_count_not_cut_inside_a_letter() {
        let long = format!("a{}", "é".repeat(70));
        let e = SiteName::parse(&long).unwrap_err();
        assert!(
            e.starts_with(&format!("“a{}…” is too long", "é".repeat(19))) && e.ends_with("this one has 71."),
            "{e}"
        );
        // 41 characters (81 bytes): not too long, but not a DNS label either.
        let e = SiteName::parse(&format!("a{}", "é".repeat(40))).unwrap_err();
        assert!(e.contains("cannot be a site's name"), "{e}");
    }
}
