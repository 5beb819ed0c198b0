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
        if s.len() > 63 {
            return Err(format!("“{}…” is too long: a site's name is at most 63 characters.", &s[..20]));
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
}
