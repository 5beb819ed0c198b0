//! DNS lookups for custom domains' challenges (hickory-resolver): the TXT strings at a name, as
//! the resolver `DNS_RESOLVER` names (or the system's) answers them now. Nothing is cached (a
//! member who has just added the record must be seen at once), the name is asked as given
//! (fully qualified: no search domain is appended), and every lookup is bounded by
//! `DNS_TIMEOUT_MS`. No record is an answer (an empty list); a resolver that does not answer,
//! fails or refuses is `CouldNotCheck`, never a verdict. Nothing here touches the database.

use std::{net::SocketAddr, time::Duration};

use hickory_resolver::{
    TokioResolver,
    config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts},
    net::{DnsError, NetError, NoRecords, runtime::TokioRuntimeProvider},
    proto::{
        op::ResponseCode,
        rr::{Name, RData},
    },
};

/// Why a name's records could not be read: a sentence for a person, saying which resolver and
/// what it did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CouldNotCheck(pub String);

/// The console's resolver; cheap to clone (the connections are shared).
#[derive(Clone)]
pub struct Resolver {
    inner: Result<TokioResolver, String>,
    /// What the sentences call it: `the DNS server at 127.0.0.1:53`, `the system's resolver`.
    who: String,
    timeout: Duration,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").field("who", &self.who).field("timeout", &self.timeout).finish()
    }
}

impl Resolver {
    /// `target` = DNS_RESOLVER (host:port) or None = the system's resolver (/etc/resolv.conf).
    pub fn new(target: Option<SocketAddr>, timeout: Duration) -> Result<Resolver, String> {
        let (builder, who) = match target {
            Some(address) => {
                let mut server = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut server.connections {
                    connection.port = address.port();
                }
                let config = ResolverConfig::from_name_servers(vec![server]);
                (
                    TokioResolver::builder_with_config(config, TokioRuntimeProvider::default()),
                    format!("the DNS server at {address}"),
                )
            }
            None => (
                TokioResolver::builder_tokio().map_err(|e| {
                    format!(
                        "the system's DNS configuration (/etc/resolv.conf) could not be read: {e}; set DNS_RESOLVER"
                    )
                })?,
                "the system's resolver".to_string(),
            ),
        };
        let resolver = builder.with_options(options(timeout)).build().map_err(|e| format!("{who}: {e}"))?;
        Ok(Resolver { inner: Ok(resolver), who, timeout })
    }

    pub fn from_config(config: &crate::config::Config) -> Result<Resolver, String> {
        Self::new(config.dns_resolver, config.dns_timeout)
    }

    /// The resolver the configuration names; one that cannot be built is logged, and the
    /// system's is used instead (or, with none to be had, a resolver whose every lookup says why
    /// it cannot check: a page that checks a domain tells the member, and nothing else stops).
    pub fn for_config(config: &crate::config::Config) -> Resolver {
        match Self::from_config(config) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, resolver = ?config.dns_resolver, "the DNS resolver could not be built");
                let fallback = if config.dns_resolver.is_some() { Self::new(None, config.dns_timeout) } else { Err(e) };
                fallback.unwrap_or_else(Self::unavailable)
            }
        }
    }

    /// A resolver there is none of (`why`): every lookup is `CouldNotCheck` saying so, so a page
    /// that checks a domain tells the member instead of the console failing to start.
    pub fn unavailable(why: String) -> Resolver {
        Resolver { inner: Err(why), who: "no resolver".into(), timeout: Duration::ZERO }
    }

    /// The TXT strings at `name` (each record's character-strings joined, as DNS providers show
    /// them). NXDOMAIN and NOERROR-without-TXT are Ok(empty). A timeout, SERVFAIL, REFUSED or a
    /// network error is Err(CouldNotCheck) with a sentence for a person. Bounded by the timeout.
    #[tracing::instrument(name = "Look up TXT records", skip(self), fields(resolver = %self.who))]
    pub async fn txt(&self, name: &str) -> Result<Vec<String>, CouldNotCheck> {
        let resolver =
            self.inner.as_ref().map_err(|why| CouldNotCheck(format!("No DNS lookup can be made: {why}.")))?;
        let fqdn = fully_qualified(name)?;
        let shown = name.trim_end_matches('.');
        let lookup = match tokio::time::timeout(self.timeout, resolver.txt_lookup(fqdn)).await {
            Ok(Ok(lookup)) => lookup,
            Ok(Err(e)) if no_record(&e) => return Ok(Vec::new()),
            Ok(Err(e)) => {
                tracing::info!(error = %e, "a TXT lookup failed");
                return Err(CouldNotCheck(failure(&self.who, shown, self.timeout, &e)));
            }
            Err(_) => return Err(CouldNotCheck(timed_out(&self.who, shown, self.timeout))),
        };
        Ok(lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(joined(txt.txt_data.iter().map(|s| &s[..]))),
                _ => None,
            })
            .collect())
    }
}

/// No cache, nothing from /etc/hosts, and two tries of half the timeout each (a lost UDP packet
/// is tried again), so the whole lookup fits the timeout.
fn options(timeout: Duration) -> ResolverOpts {
    let mut o = ResolverOpts::default();
    o.cache_size = 0;
    // And whatever a cache of none might still hold for an instant is already expired.
    o.positive_max_ttl = Some(Duration::ZERO);
    o.negative_max_ttl = Some(Duration::ZERO);
    o.use_hosts_file = ResolveHosts::Never;
    o.attempts = 1;
    o.timeout = timeout / 2;
    o
}

/// `name` as a fully qualified DNS name (a final dot: asked as is, never with a search domain);
/// an internationalized name in its ASCII form.
fn fully_qualified(name: &str) -> Result<Name, CouldNotCheck> {
    let mut parsed = Name::from_utf8(name.trim())
        .map_err(|e| CouldNotCheck(format!("{name:?} is not a name DNS can look up: {e}.")))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// NXDOMAIN, or the name with no TXT record: an answer, with no records in it.
fn no_record(e: &NetError) -> bool {
    matches!(
        e,
        NetError::Dns(DnsError::NoRecordsFound(NoRecords {
            response_code: ResponseCode::NXDomain | ResponseCode::NoError,
            ..
        }))
    )
}

fn timed_out(who: &str, name: &str, timeout: Duration) -> String {
    format!("{} did not answer for {name} within {} ms; it will be tried again.", capitalized(who), timeout.as_millis())
}

fn failure(who: &str, name: &str, timeout: Duration, e: &NetError) -> String {
    let who = capitalized(who);
    match e {
        NetError::Timeout => timed_out(&who, name, timeout),
        NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail)) => {
            format!("{who} failed to look up {name} (SERVFAIL); it will be tried again.")
        }
        NetError::Dns(DnsError::ResponseCode(ResponseCode::Refused)) => {
            format!("{who} refused to look up {name} (REFUSED); it will be tried again.")
        }
        NetError::Dns(DnsError::ResponseCode(code)) => {
            format!("{who} answered {code} for {name}; it will be tried again.")
        }
        NetError::Io(io) => format!("{who} could not be reached to look up {name}: {io}; it will be tried again."),
        other => format!("{who} could not look up {name}: {other}; it will be tried again."),
    }
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// One TXT record's character-strings as one string, as providers show a record (a value longer
/// than 255 bytes is carried in several); bytes that are not UTF-8 are replaced, not refused.
fn joined<'a>(strings: impl Iterator<Item = &'a [u8]>) -> String {
    let bytes: Vec<u8> = strings.flatten().copied().collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_strings_are_joined_into_one_and_a_split_character_survives() {
        let value = "é".repeat(200);
        let (a, b) = value.as_bytes().split_at(255);
        assert_eq!(joined([a, b].into_iter()), value, "split inside a two-byte character");
        assert_eq!(joined(std::iter::empty()), "");
    }

    #[test]
    fn a_name_is_asked_fully_qualified_in_its_ascii_form_and_nonsense_is_could_not_check() {
        assert_eq!(fully_qualified("_c.Example.org").unwrap().to_string(), "_c.example.org.");
        assert_eq!(fully_qualified("café.example.").unwrap().to_ascii(), "xn--caf-dma.example.");
        assert!(fully_qualified(&format!("{}.example", "a".repeat(64))).is_err());
    }

    #[test]
    fn nxdomain_and_nodata_are_no_record_and_every_failure_is_said_with_the_resolver_and_the_name() {
        let nx = NetError::Dns(DnsError::NoRecordsFound(NoRecords::new(
            hickory_resolver::proto::op::Query::default(),
            ResponseCode::NXDomain,
        )));
        let nodata = NetError::Dns(DnsError::NoRecordsFound(NoRecords::new(
            hickory_resolver::proto::op::Query::default(),
            ResponseCode::NoError,
        )));
        assert!(no_record(&nx) && no_record(&nodata));
        let who = "the DNS server at 127.0.0.1:53";
        let t = Duration::from_millis(500);
        let servfail = NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail));
        assert!(!no_record(&servfail));
        let s = failure(who, "x.example", t, &servfail);
        assert_eq!(s, "The DNS server at 127.0.0.1:53 failed to look up x.example (SERVFAIL); it will be tried again.");
        let s = failure(who, "x.example", t, &NetError::Dns(DnsError::ResponseCode(ResponseCode::Refused)));
        assert!(s.contains("refused") && s.contains("x.example"), "{s}");
        let s = failure(who, "x.example", t, &NetError::Timeout);
        assert!(s.contains("did not answer for x.example within 500 ms"), "{s}");
    }

    #[test]
    fn the_resolver_keeps_no_answer_reads_no_hosts_file_and_fits_its_tries_in_the_timeout() {
        // The local DNS answers with TTL 0, so the tests against it cannot see a cache: these
        // are what keep a real domain's answer (TTL 3600, say) from being kept.
        let o = options(Duration::from_secs(3));
        assert_eq!(o.cache_size, 0);
        assert_eq!((o.positive_max_ttl, o.negative_max_ttl), (Some(Duration::ZERO), Some(Duration::ZERO)));
        assert_eq!(o.use_hosts_file, ResolveHosts::Never);
        assert!(o.timeout * (o.attempts as u32 + 1) <= Duration::from_secs(3), "{o:?}");
    }

    #[tokio::test]
    async fn an_unavailable_resolver_says_why_at_every_lookup() {
        let r = Resolver::unavailable("the system's DNS configuration could not be read".into());
        let e = r.txt("x.example").await.unwrap_err();
        assert!(e.0.contains("could not be read"), "{e}");
    }
}
