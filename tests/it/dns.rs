//! The console's resolver against a real DNS server (the project's local DNS, on loopback): a
//! TXT record added through the server's control endpoint is read at once, a missing one is no
//! record, and a server that times out, fails, or is not there is "could not check", within the
//! resolver's timeout.

use std::time::{Duration, Instant};

use crate::common::dns::DnsFixture;

const CHALLENGE: &str = "_member-console-challenge.acme-wiki.example";

#[tokio::test]
async fn a_txt_record_set_through_the_control_endpoint_is_read_at_once_and_its_replacement_too() {
    let dns = DnsFixture::start().await;
    let resolver = dns.resolver(Duration::from_secs(3));
    assert_eq!(resolver.txt(CHALLENGE).await, Ok(vec![]), "nothing there yet");
    dns.put_txt(CHALLENGE, &["token-one"]).await;
    assert_eq!(resolver.txt(CHALLENGE).await, Ok(vec!["token-one".to_string()]));
    // The name as a member may type it: any case, a final dot. And no answer is kept: the new
    // set is what the next lookup sees.
    dns.put_txt(CHALLENGE, &["token-two", "another-service=1"]).await;
    let mut seen = resolver.txt(&format!("{}.", CHALLENGE.to_uppercase())).await.expect("read");
    seen.sort();
    assert_eq!(seen, vec!["another-service=1".to_string(), "token-two".to_string()]);
    // A value longer than one character-string (255 bytes) comes back whole, its strings joined.
    let long = "v".repeat(300);
    dns.put_txt(CHALLENGE, &[&long]).await;
    assert_eq!(resolver.txt(CHALLENGE).await, Ok(vec![long]));
    dns.stop().await;
}

#[tokio::test]
async fn a_missing_record_is_no_record_whether_the_name_is_unknown_or_has_no_txt() {
    let dns = DnsFixture::start().await;
    let resolver = dns.resolver(Duration::from_secs(3));
    assert_eq!(resolver.txt("_member-console-challenge.nobody.example").await, Ok(vec![]), "NXDOMAIN");
    dns.put_txt(CHALLENGE, &["token"]).await;
    assert_eq!(resolver.txt("acme-wiki.example").await, Ok(vec![]), "a name with only names under it");
    dns.put_txt("empty.example", &[]).await;
    assert_eq!(resolver.txt("empty.example").await, Ok(vec![]), "a name with an empty TXT set");
    dns.stop().await;
}

#[tokio::test]
async fn a_name_that_never_answers_is_could_not_check_within_the_timeout() {
    let dns = DnsFixture::start().await;
    dns.put_txt(CHALLENGE, &["token"]).await;
    dns.put_fault(CHALLENGE, "timeout").await;
    let resolver = dns.resolver(Duration::from_millis(500));
    let started = Instant::now();
    let e = resolver.txt(CHALLENGE).await.expect_err("no answer is no verdict");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400) && took < Duration::from_millis(1500), "took {took:?}");
    assert!(e.0.contains("did not answer") && e.0.contains(CHALLENGE), "{e}");
    // Other names still answer: the fault is the name's.
    assert_eq!(resolver.txt("acme-wiki.example").await, Ok(vec![]));
    dns.stop().await;
}

#[tokio::test]
async fn a_servfail_is_could_not_check_and_clearing_the_fault_answers_the_record_again() {
    let dns = DnsFixture::start().await;
    dns.put_txt(CHALLENGE, &["token"]).await;
    dns.put_fault(CHALLENGE, "servfail").await;
    let resolver = dns.resolver(Duration::from_secs(3));
    let e = resolver.txt(CHALLENGE).await.expect_err("a failure is no verdict");
    assert!(e.0.contains("failed"), "{e}");
    dns.local.clear_fault(CHALLENGE).expect("a name");
    assert_eq!(resolver.txt(CHALLENGE).await, Ok(vec!["token".to_string()]));
    dns.stop().await;
}

#[tokio::test]
async fn a_resolver_pointed_at_a_port_nothing_listens_on_is_could_not_check() {
    // A port just freed: nothing answers there, over UDP or TCP.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let resolver = member_console::integrations::dns::Resolver::new(Some(port), Duration::from_millis(500)).unwrap();
    let started = Instant::now();
    let e = resolver.txt(CHALLENGE).await.expect_err("nobody answered");
    assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
    assert!(e.0.contains(CHALLENGE), "{e}");
}
