//! A site's name as a member types it: one DNS label, which becomes `<name>.<farm zone>`.

/// A site's name: 1 to 63 of `a-z`, `0-9` and `-`, not starting or ending with `-`.
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
        Ok(SiteName(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The site's address under the farm's zone.
    pub fn domain(&self, zone: &str) -> String {
        format!("{}.{zone}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_name_is_one_dns_label() {
        assert_eq!(SiteName::parse(" Handbook ").unwrap().domain("wiki.localhost"), "handbook.wiki.localhost");
        for bad in ["", "  ", "-a", "a-", "a.b", "a b", "ünï", "a_b", &"x".repeat(64)] {
            assert!(SiteName::parse(bad).is_err(), "{bad:?} is refused");
        }
        assert!(SiteName::parse(&"x".repeat(63)).is_ok());
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
