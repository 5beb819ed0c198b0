//! The local DNS as DNS clients meet it: hickory's resolver over UDP and over TCP, and raw
//! queries in hickory's wire format where the response's code, flags and TTLs are the point;
//! and its control endpoint over HTTP.

use std::{
    io::{Read, Write},
    net::SocketAddr,
    time::{Duration, Instant},
};

use hickory_resolver::{
    TokioResolver,
    config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts},
    net::{DnsError, NetError, NoRecords, runtime::TokioRuntimeProvider},
    proto::{
        op::{Message, MessageType, Query, ResponseCode},
        rr::{DNSClass, Name, RData, RecordType},
    },
};
use local_dns::{Config, FaultMode, LocalDns};

const CHALLENGE: &str = "_member-console-challenge.acme.example";

/// hickory's resolver asking `server` over one transport only, caching nothing.
fn resolver(server: SocketAddr, tcp: bool) -> TokioResolver {
    let mut ns = if tcp { NameServerConfig::tcp(server.ip()) } else { NameServerConfig::udp(server.ip()) };
    for c in &mut ns.connections {
        c.port = server.port();
    }
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    opts.attempts = 0;
    opts.timeout = Duration::from_millis(500);
    opts.use_hosts_file = ResolveHosts::Never;
    TokioResolver::builder_with_config(ResolverConfig::from_name_servers(vec![ns]), TokioRuntimeProvider::default())
        .with_options(opts)
        .build()
        .expect("a resolver")
}

async fn txt(r: &TokioResolver, name: &str) -> Result<Vec<String>, NetError> {
    let lookup = r.txt_lookup(format!("{name}.")).await?;
    Ok(lookup
        .answers()
        .iter()
        .filter_map(|rec| match &rec.data {
            RData::TXT(t) => Some(String::from_utf8_lossy(&t.txt_data.concat()).into_owned()),
            _ => None,
        })
        .collect())
}

fn code_of(e: &NetError) -> Option<ResponseCode> {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(NoRecords { response_code, .. })) => Some(*response_code),
        NetError::Dns(DnsError::ResponseCode(code)) => Some(*code),
        _ => None,
    }
}

/// One query, in hickory's wire format, over UDP (or TCP, length-prefixed); the raw answer.
fn ask(server: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Message {
    let mut query = Message::query();
    let mut q = Query::query(Name::from_ascii(name).unwrap(), qtype);
    q.set_query_class(DNSClass::IN);
    query.add_query(q);
    let bytes = query.to_vec().unwrap();
    let answer = if tcp {
        let mut s = std::net::TcpStream::connect(server).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(&(bytes.len() as u16).to_be_bytes()).unwrap();
        s.write_all(&bytes).unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).unwrap();
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).unwrap();
        buf
    } else {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(&bytes, server).unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.recv(&mut buf).unwrap();
        buf.truncate(n);
        buf
    };
    let answer = Message::from_vec(&answer).unwrap();
    assert_eq!(answer.metadata.id, query.metadata.id);
    assert_eq!(answer.metadata.message_type, MessageType::Response);
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txt_records_are_answered_over_udp_and_tcp_and_unknown_names_are_nxdomain() {
    let dns = LocalDns::start(Config::default()).await.expect("started");
    dns.set_txt(CHALLENGE, vec!["token-1".into(), "v=other".into()]).unwrap();
    for tcp in [false, true] {
        let r = resolver(dns.dns_addr(), tcp);
        let mut got = txt(&r, CHALLENGE).await.unwrap_or_else(|e| panic!("tcp={tcp}: {e}"));
        got.sort();
        assert_eq!(got, vec!["token-1".to_string(), "v=other".to_string()], "tcp={tcp}");
        // Any case, as DNS compares names.
        assert_eq!(txt(&r, &CHALLENGE.to_uppercase()).await.unwrap().len(), 2, "tcp={tcp}");
        let e = txt(&r, "_member-console-challenge.nobody.example").await.unwrap_err();
        assert_eq!(code_of(&e), Some(ResponseCode::NXDomain), "tcp={tcp}: {e}");
        // The parent of a name it holds exists, with no records of its own.
        let e = txt(&r, "acme.example").await.unwrap_err();
        assert_eq!(code_of(&e), Some(ResponseCode::NoError), "tcp={tcp}: {e}");
    }
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_authoritative_with_ttl_zero_and_a_negative_one_names_an_soa_of_ttl_zero() {
    let dns = LocalDns::start(Config::default()).await.expect("started");
    dns.set_txt(CHALLENGE, vec!["token".into()]).unwrap();
    let addr = dns.dns_addr();
    let (found, nx, other_type) = tokio::task::spawn_blocking(move || {
        (
            ask(addr, &format!("{CHALLENGE}."), RecordType::TXT, false),
            ask(addr, "missing.example.", RecordType::TXT, true),
            ask(addr, &format!("{CHALLENGE}."), RecordType::A, false),
        )
    })
    .await
    .unwrap();
    assert_eq!(found.metadata.response_code, ResponseCode::NoError);
    assert!(found.metadata.authoritative);
    assert_eq!(found.answers.len(), 1);
    assert_eq!(found.answers[0].ttl, 0, "nothing is to be cached");
    assert_eq!(found.answers[0].name.to_string(), format!("{CHALLENGE}."));
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert!(nx.metadata.authoritative && nx.answers.is_empty());
    match nx.authorities.first().map(|r| &r.data) {
        Some(RData::SOA(soa)) => assert_eq!(soa.minimum, 0),
        other => panic!("no SOA in the negative answer: {other:?}"),
    }
    assert_eq!(other_type.metadata.response_code, ResponseCode::NoError, "the name exists, with no A record");
    assert!(other_type.answers.is_empty());
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_longer_than_one_character_string_is_split_and_too_long_for_udp_comes_over_tcp() {
    let dns = LocalDns::start(Config::default()).await.expect("started");
    let long = "k".repeat(600);
    let many: Vec<String> = (0..8).map(|i| format!("{i}-{}", "x".repeat(200))).collect();
    dns.set_txt("long.example", vec![long.clone()]).unwrap();
    dns.set_txt("many.example", many.clone()).unwrap();
    let addr = dns.dns_addr();
    let raw = tokio::task::spawn_blocking(move || ask(addr, "long.example.", RecordType::TXT, true)).await.unwrap();
    match &raw.answers[0].data {
        RData::TXT(t) => assert_eq!(t.txt_data.iter().map(|s| s.len()).collect::<Vec<_>>(), vec![255, 255, 90]),
        other => panic!("{other:?}"),
    }
    // Past the 512 bytes of a UDP answer without EDNS: truncated, and the resolver asks again
    // over TCP.
    let truncated =
        tokio::task::spawn_blocking(move || ask(addr, "many.example.", RecordType::TXT, false)).await.unwrap();
    assert!(truncated.metadata.truncation, "{truncated:?}");
    let mut tcp_and_udp = NameServerConfig::udp_and_tcp(addr.ip());
    for c in &mut tcp_and_udp.connections {
        c.port = addr.port();
    }
    let mut opts = ResolverOpts::default();
    opts.cache_size = 0;
    opts.edns0 = false;
    let r = TokioResolver::builder_with_config(
        ResolverConfig::from_name_servers(vec![tcp_and_udp]),
        TokioRuntimeProvider::default(),
    )
    .with_options(opts)
    .build()
    .unwrap();
    let mut got = txt(&r, "many.example").await.expect("answered over TCP");
    got.sort();
    assert_eq!(got, many);
    assert_eq!(txt(&r, "long.example").await.unwrap(), vec![long]);
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_fault_is_never_answered_and_a_servfail_fault_is_answered_servfail() {
    let dns = LocalDns::start(Config::default()).await.expect("started");
    dns.set_txt(CHALLENGE, vec!["token".into()]).unwrap();
    dns.set_fault(CHALLENGE, FaultMode::Timeout).unwrap();
    dns.set_fault("broken.example", FaultMode::Servfail).unwrap();
    for tcp in [false, true] {
        let r = resolver(dns.dns_addr(), tcp);
        let started = Instant::now();
        let e = txt(&r, CHALLENGE).await.unwrap_err();
        assert!(matches!(e, NetError::Timeout), "tcp={tcp}: {e:?}");
        assert!(started.elapsed() >= Duration::from_millis(450), "tcp={tcp}: {:?}", started.elapsed());
        let e = txt(&r, "broken.example").await.unwrap_err();
        assert_eq!(code_of(&e), Some(ResponseCode::ServFail), "tcp={tcp}: {e}");
    }
    assert!(dns.clear_fault(CHALLENGE).unwrap());
    assert_eq!(txt(&resolver(dns.dns_addr(), false), CHALLENGE).await.unwrap(), vec!["token".to_string()]);
    // Stopping does not wait for the queries a fault holds.
    dns.set_fault(CHALLENGE, FaultMode::Timeout).unwrap();
    let held = resolver(dns.dns_addr(), true);
    let pending = tokio::spawn(async move { txt(&held, CHALLENGE).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    dns.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5), "stop took {:?}", started.elapsed());
    assert!(pending.await.unwrap().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_endpoint_sets_lists_and_removes_records_and_faults_and_refuses_bad_names() {
    let dns = LocalDns::start(Config::default()).await.expect("started");
    let http = reqwest::Client::new();
    let base = format!("{}/_dns", dns.control_url());
    let put = http
        .put(format!("{base}/records/{}./txt", CHALLENGE.to_uppercase()))
        .body(r#"{"values": ["from-http"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let kept: serde_json::Value = put.json().await.unwrap();
    assert_eq!(kept, serde_json::json!({"name": CHALLENGE, "txt": ["from-http"]}), "kept lowercased, no final dot");
    let r = resolver(dns.dns_addr(), false);
    assert_eq!(txt(&r, CHALLENGE).await.unwrap(), vec!["from-http".to_string()]);
    let list: serde_json::Value = http.get(format!("{base}/records")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list, serde_json::json!([{"name": CHALLENGE, "txt": ["from-http"]}]));

    let fault = http.put(format!("{base}/faults/{CHALLENGE}")).body(r#"{"mode": "servfail"}"#).send().await.unwrap();
    assert_eq!(fault.status(), 200);
    assert_eq!(code_of(&txt(&r, CHALLENGE).await.unwrap_err()), Some(ResponseCode::ServFail));
    let faults: serde_json::Value = http.get(format!("{base}/faults")).send().await.unwrap().json().await.unwrap();
    assert_eq!(faults, serde_json::json!([{"name": CHALLENGE, "mode": "servfail"}]));
    assert_eq!(http.delete(format!("{base}/faults/{CHALLENGE}")).send().await.unwrap().status(), 204);
    assert_eq!(txt(&r, CHALLENGE).await.unwrap(), vec!["from-http".to_string()]);

    assert_eq!(http.delete(format!("{base}/records/{CHALLENGE}/txt")).send().await.unwrap().status(), 204);
    assert_eq!(code_of(&txt(&r, CHALLENGE).await.unwrap_err()), Some(ResponseCode::NXDomain));

    for (path, body) in [
        ("records/bad name.example/txt", r#"{"values": []}"#),
        ("records/ok.example/txt", r#"{"value": "x"}"#),
        ("faults/ok.example", r#"{"mode": "slow"}"#),
    ] {
        let answer = http.put(format!("{base}/{path}")).body(body).send().await.unwrap();
        assert_eq!(answer.status(), 400, "{path}");
        let e: serde_json::Value = answer.json().await.unwrap();
        assert!(e["error"].as_str().is_some_and(|s| !s.is_empty()), "{path}: {e}");
    }
    assert_eq!(http.post(format!("{base}/records")).send().await.unwrap().status(), 405);
    assert_eq!(http.get(format!("{base}/nothing")).send().await.unwrap().status(), 404);
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_kept_in_the_data_folder_are_answered_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("local-dns-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = Config { data_dir: Some(dir.clone()), ..Config::default() };
    let first = LocalDns::start(config.clone()).await.expect("started");
    first.set_txt(CHALLENGE, vec!["kept".into()]).unwrap();
    first.set_fault("faulty.example", FaultMode::Servfail).unwrap();
    first.stop().await;
    assert!(dir.join(local_dns::RECORDS_FILE).is_file());

    let second = LocalDns::start(config).await.expect("restarted");
    assert_eq!(txt(&resolver(second.dns_addr(), false), CHALLENGE).await.unwrap(), vec!["kept".to_string()]);
    assert!(second.clear_fault("faulty.example").is_ok_and(|had| !had), "faults are not kept");
    second.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
