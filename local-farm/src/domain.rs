//! Site domains: `<label>.<farm domain>`, parsed once, and where a site's data lives.

use std::fmt;
use std::path::{Path, PathBuf};

/// A site's domain, e.g. `acme.wiki.localhost`: one DNS label (1–63 of `a-z 0-9 -`, not
/// starting or ending with `-`) followed by the farm's domain. Built only by [`SiteDomain::parse`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SiteDomain(String);

impl SiteDomain {
    pub fn parse(raw: &str, farm_domain: &str) -> Result<SiteDomain, String> {
        let refuse = || {
            Err(format!(
                "{raw:?} is not a site domain of this farm: use <name>.{farm_domain}, where the name is 1 to 63 \
                 lowercase letters, digits or hyphens and does not start or end with a hyphen."
            ))
        };
        let Some(label) = raw.strip_suffix(farm_domain).and_then(|rest| rest.strip_suffix('.')) else {
            return refuse();
        };
        if !is_dns_label(label) {
            return refuse();
        }
        Ok(SiteDomain(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The site's folder under the wiki server's data folder. `wiki` in farm mode keeps a site in
    /// `<data>/<Host without port>`, after dropping a leading `www.`; so does the farm.
    pub fn folder(&self, wiki_data: &Path) -> PathBuf {
        wiki_data.join(self.0.strip_prefix("www.").unwrap_or(&self.0))
    }
}

impl fmt::Display for SiteDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_dns_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// The host a request is for when it is a site request: its `Host` lowercased, without the port,
/// when that ends with `.<farm domain>`; `None` for the API's own hosts.
pub fn site_host(host: &str, farm_domain: &str) -> Option<String> {
    let name = match host.strip_prefix('[') {
        Some(_) => return None, // an IPv6 literal is never a site
        None => host.split(':').next().unwrap_or_default(),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let suffix_len = farm_domain.len() + 1;
    (name.len() > suffix_len && name.ends_with(farm_domain) && name.as_bytes()[name.len() - suffix_len] == b'.')
        .then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FARM: &str = "wiki.localhost";

    #[test]
    fn a_label_under_the_farm_domain_is_a_site_domain() {
        for ok in
            ["acme.wiki.localhost", "a.wiki.localhost", "a-1.wiki.localhost", &format!("{}.{FARM}", "a".repeat(63))]
        {
            assert!(SiteDomain::parse(ok, FARM).is_ok(), "{ok}");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let long = format!("{}.{FARM}", "a".repeat(64));
        for bad in [
            "",
            FARM,
            ".wiki.localhost",
            "Acme.wiki.localhost",
            "-acme.wiki.localhost",
            "acme-.wiki.localhost",
            "a_b.wiki.localhost",
            "a.b.wiki.localhost",
            "acmewiki.localhost",
            "acme.wiki.localhost.",
            "acme.other.localhost",
            "acme.wiki.localhost:80",
            &long,
        ] {
            assert!(SiteDomain::parse(bad, FARM).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_folder_drops_a_leading_www_as_wiki_does() {
        let data = Path::new("/d");
        let www = SiteDomain::parse("www.wiki.localhost", FARM).expect("valid");
        assert_eq!(www.folder(data), Path::new("/d/wiki.localhost"));
        let acme = SiteDomain::parse("acme.wiki.localhost", FARM).expect("valid");
        assert_eq!(acme.folder(data), Path::new("/d/acme.wiki.localhost"));
    }

    #[test]
    fn site_hosts_are_lowercased_without_the_port() {
        assert_eq!(site_host("Acme.Wiki.Localhost:8080", FARM).as_deref(), Some("acme.wiki.localhost"));
        assert_eq!(site_host("a.b.wiki.localhost", FARM).as_deref(), Some("a.b.wiki.localhost"));
        assert_eq!(site_host("wiki.localhost:8080", FARM), None);
        assert_eq!(site_host("127.0.0.1:8080", FARM), None);
        assert_eq!(site_host("xwiki.localhost", FARM), None);
        assert_eq!(site_host("[::1]:8080", FARM), None);
    }
}
