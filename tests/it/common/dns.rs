//! DNS tests' server: the project's local DNS, started in the test's runtime on free loopback
//! ports with no data folder, and its control endpoint driven over HTTP as a person or the demo
//! page would drive it.

use std::time::Duration;

use local_dns::{Config, LocalDns};
use member_console::integrations::dns::Resolver;

pub struct DnsFixture {
    pub local: LocalDns,
    pub http: reqwest::Client,
}

impl DnsFixture {
    pub async fn start() -> DnsFixture {
        let local = LocalDns::start(Config::default()).await.expect("the local DNS starts");
        DnsFixture { local, http: reqwest::Client::new() }
    }

    /// The console's resolver, asking this server and no other.
    pub fn resolver(&self, timeout: Duration) -> Resolver {
        Resolver::new(Some(self.local.dns_addr()), timeout).expect("a resolver")
    }

    /// `PUT /_dns/records/{name}/txt`: the name's TXT set replaced.
    pub async fn put_txt(&self, name: &str, values: &[&str]) {
        let url = format!("{}/_dns/records/{name}/txt", self.local.control_url());
        let answer = self.http.put(url).json(&serde_json::json!({ "values": values })).send().await.expect("answered");
        assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap_or_default());
    }

    /// `PUT /_dns/faults/{name}` with `mode` (`timeout` or `servfail`).
    pub async fn put_fault(&self, name: &str, mode: &str) {
        let url = format!("{}/_dns/faults/{name}", self.local.control_url());
        let answer = self.http.put(url).json(&serde_json::json!({ "mode": mode })).send().await.expect("answered");
        assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap_or_default());
    }

    pub async fn stop(self) {
        self.local.stop().await;
    }
}
