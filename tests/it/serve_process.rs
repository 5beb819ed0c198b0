//! `serve` and `worker` as an operator runs them, through the real binary on a private cluster
//! of their own: refused before anything starts when Stripe or the farm is not configured and
//! no stand-ins were asked for (or the public URL is https); `serve --demo` answering, and a
//! SIGTERM at any moment (as soon as it answers, or during its migrations) ending it cleanly,
//! the cluster it started, the local farm's `wiki` and the local DNS stopped; a port in use
//! named with the variable that moves it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A data folder under /tmp (the cluster's user must be able to enter it when run as root),
/// removed on drop with its cluster stopped, so a failed assertion leaves no server running.
struct DataDir(PathBuf);

impl DataDir {
    fn new(tag: &str) -> DataDir {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = Path::new("/tmp").join(format!("mc-serve-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        DataDir(dir)
    }

    fn cluster_port(&self) -> u16 {
        std::fs::read_to_string(self.0.join("postgres.port")).unwrap().trim().parse().unwrap()
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.0.join("postgres.port").exists() {
            let _ = console(&self.0, &["pg", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The real binary with nothing configured but its data folder (no DATABASE_URL: the private
/// cluster), on free ports, whatever the environment the tests run in names.
fn console(data_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_member-console"));
    cmd.args(args);
    for var in [
        "DATABASE_URL",
        "STRIPE_SECRET_KEY",
        "STRIPE_WEBHOOK_SECRET",
        "STRIPE_API_BASE",
        "FARM_URL",
        "FARM_TOKEN",
        "FARM_CALLBACK_SECRET",
        "SMTP_URL",
        "CONSOLE_PUBLIC_URL",
        "CONSOLE_STAND_INS",
        "CONSOLE_SIGNUP",
        "CONSOLE_LOG_FORMAT",
        "NO_COLOR",
        "DNS_RESOLVER",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CONSOLE_DATA_DIR", data_dir)
        .env("CONSOLE_BIND", "127.0.0.1:0")
        .env("FARM_LOCAL_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A running binary whose stderr is collected line by line as it comes.
struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.spawn().expect("the member-console binary starts");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Running { child, lines, reader: Some(reader) }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The first line that starts with `prefix`, waiting for it (panics with the log if the
    /// process exits first or it does not come in time).
    fn line_starting(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self.lines.lock().unwrap().iter().find(|l| l.starts_with(prefix)) {
                return line.clone();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the console exited ({status}) before {prefix:?}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no {prefix:?} within {within:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn sigterm(&self) {
        // SAFETY: kill(2) on our own child, not yet waited for (it still runs).
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    }

    /// Its exit status once it exits (within `within`), and its whole log.
    fn exit(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the console did not exit within {within:?} of SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The reader ends at the end of the pipe, having kept every line.
        self.reader.take().unwrap().join().unwrap();
        (status, self.log())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` over plain HTTP/1.0; the status code, if anything answered.
fn get_status(address: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split(' ').nth(1)?.parse().ok()
}

/// PUT `body` to `path` over plain HTTP/1.0; the status code, if anything answered.
fn put_status(address: &str, path: &str, body: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "PUT {path} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n{body}", body.len()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split(' ').nth(1)?.parse().ok()
}

/// Every live process (zombies left out): pid, process group, command line.
fn live_processes() -> Vec<(i32, i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let (Ok(cmdline), Ok(stat)) =
            (std::fs::read(entry.path().join("cmdline")), std::fs::read_to_string(entry.path().join("stat")))
        else {
            continue;
        };
        // After the command's closing parenthesis: state, ppid, pgrp.
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("").split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(pgrp) = fields.get(2).and_then(|g| g.parse().ok()) {
            found.push((pid, pgrp, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Live processes whose command line names `needle`: (pid, process group).
fn processes_naming(needle: &str) -> Vec<(i32, i32)> {
    live_processes().into_iter().filter(|(_, _, cmd)| cmd.contains(needle)).map(|(pid, g, _)| (pid, g)).collect()
}

/// The live processes of process group `pgrp`.
fn group_members(pgrp: i32) -> Vec<String> {
    live_processes().into_iter().filter(|(_, g, _)| *g == pgrp).map(|(pid, _, cmd)| format!("{pid} {cmd}")).collect()
}

#[test]
fn serve_without_a_stripe_key_or_demo_is_refused_by_name_before_a_cluster_starts_and_https_refuses_the_demos_stand_ins()
{
    let data = DataDir::new("refused");
    let no_cluster = |out: &Output, what: &str| {
        let stderr = stderr_of(out);
        assert!(!out.status.success(), "{what} started:\n{stderr}");
        assert!(!stderr.contains("private PostgreSQL cluster"), "{what}: a cluster was started:\n{stderr}");
        assert!(!data.0.join("postgres").exists() && !data.0.join("postgres.port").exists(), "{what}");
        stderr
    };

    let out = console(&data.0, &["serve"]).output().unwrap();
    let stderr = no_cluster(&out, "serve with nothing configured");
    assert!(stderr.contains("STRIPE_SECRET_KEY and FARM_URL are not set"), "{stderr}");
    assert!(stderr.contains("`serve --stand-ins` or CONSOLE_STAND_INS=1"), "{stderr}");

    let out = console(&data.0, &["serve", "--no-worker"])
        .env("FARM_URL", "http://127.0.0.1:9")
        .env("FARM_TOKEN", "a-farm-token")
        .env("FARM_CALLBACK_SECRET", "a-farm-callback-secret")
        .output()
        .unwrap();
    let stderr = no_cluster(&out, "serve with a farm and no Stripe key");
    assert!(stderr.contains("STRIPE_SECRET_KEY is not set: set STRIPE_SECRET_KEY"), "{stderr}");

    let out = console(&data.0, &["serve", "--demo"])
        .env("CONSOLE_PUBLIC_URL", "https://console.example.test/")
        .output()
        .unwrap();
    let stderr = no_cluster(&out, "serve --demo at an https address");
    assert!(stderr.contains("CONSOLE_PUBLIC_URL is https://console.example.test/"), "{stderr}");
    assert!(stderr.contains("may not start stand-ins"), "{stderr}");

    let out = console(&data.0, &["serve"]).env("CONSOLE_STAND_INS", "maybe").output().unwrap();
    let stderr = no_cluster(&out, "serve with CONSOLE_STAND_INS=maybe");
    assert!(stderr.contains("CONSOLE_STAND_INS") && stderr.contains("maybe"), "{stderr}");

    let out = console(&data.0, &["worker"]).output().unwrap();
    let stderr = no_cluster(&out, "worker with nothing configured");
    assert!(stderr.contains("STRIPE_SECRET_KEY and FARM_URL are not set"), "{stderr}");
}

#[test]
fn serve_demo_answers_and_a_sigterm_as_soon_as_it_does_stops_the_cluster_the_farms_wiki_and_the_local_dns() {
    let data = DataDir::new("sigterm");
    let mut serve = Running::spawn(console(&data.0, &["serve", "--demo"]));
    let line = serve.line_starting("Member Console is listening on http://", Duration::from_secs(240));
    let address = line.trim_start_matches("Member Console is listening on http://").trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_status(&address, "/healthz") != Some(200) {
        assert!(Instant::now() < deadline, "/healthz did not answer 200:\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = data.cluster_port();
    assert!(accepts(port));
    // The local farm's `wiki`, by the sites' folder on its command line, in a group of its own.
    let wiki_data = std::path::absolute(data.0.join("farm").join("wiki")).unwrap();
    let wikis = processes_naming(&wiki_data.display().to_string());
    let expect_wiki = std::env::var_os("FARM_WIKI_BIN").is_some_and(|b| Path::new(&b).is_file())
        || serve.log().contains("the FedWiki server is running");
    if expect_wiki {
        assert!(!wikis.is_empty(), "no wiki process of this farm was found:\n{}", serve.log());
    }
    for (pid, pgrp) in &wikis {
        assert!(wikis.iter().any(|(leader, _)| leader == pgrp), "wiki {pid} is not in a group of the farm's own");
    }

    // The local DNS: a record put through its control endpoint is answered over DNS, to the
    // console's own resolver.
    let line = serve.line_starting("DNS: no DNS_RESOLVER", Duration::from_secs(5));
    let between = |from: &str, to: &str| {
        let rest = &line[line.find(from).unwrap_or_else(|| panic!("{from:?} in {line}")) + from.len()..];
        rest[..rest.find(to).unwrap_or_else(|| panic!("{to:?} in {line}"))].to_string()
    };
    let dns: std::net::SocketAddr = between("local DNS at ", " ").parse().unwrap();
    let control = between("curl -X PUT http://", "/_dns/");
    let name = "_member-console-challenge.serve-process.example";
    let put = put_status(&control, &format!("/_dns/records/{name}/txt"), r#"{"values": ["token-at-start"]}"#);
    assert_eq!(put, Some(200), "{}", serve.log());
    let resolver = member_console::integrations::dns::Resolver::new(Some(dns), Duration::from_secs(2)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(runtime.block_on(resolver.txt(name)), Ok(vec!["token-at-start".to_string()]));

    // At once, while the demo's billing and sites are still loading.
    serve.sigterm();
    let (status, log) = serve.exit(Duration::from_secs(120));
    assert!(status.success(), "{status}:\n{log}");
    assert!(log.contains("shutting down (SIGTERM)"), "{log}");
    assert!(log.contains("stopped the private PostgreSQL cluster it started"), "{log}");
    assert!(!accepts(port), "the cluster still runs:\n{log}");
    assert!(TcpStream::connect(dns).is_err(), "the local DNS still answers:\n{log}");
    let kept = std::fs::read_to_string(data.0.join("local-dns.json")).unwrap();
    assert!(kept.contains("token-at-start"), "the record is kept for the next start: {kept}");
    for (_, pgrp) in &wikis {
        assert_eq!(group_members(*pgrp), Vec::<String>::new(), "the wiki's process group is left:\n{log}");
    }
    assert_eq!(processes_naming(&wiki_data.display().to_string()), vec![], "a wiki of this farm is left:\n{log}");
}

#[test]
fn a_sigterm_during_the_migrations_stops_the_cluster_serve_started() {
    let data = DataDir::new("early");
    let mut serve = Running::spawn(console(&data.0, &["serve", "--demo"]));
    // The cluster is up and the migrations are about to run: the issue's "first seconds".
    let deadline = Instant::now() + Duration::from_secs(180);
    while !serve.log().contains("private PostgreSQL cluster is up") {
        assert!(Instant::now() < deadline, "the cluster did not come up:\n{}", serve.log());
        assert!(serve.child.try_wait().unwrap().is_none(), "the console exited:\n{}", serve.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let port = data.cluster_port();
    serve.sigterm();
    let (status, log) = serve.exit(Duration::from_secs(120));
    assert!(status.success(), "{status}:\n{log}");
    assert!(log.contains("shutting down (SIGTERM)"), "{log}");
    assert!(log.contains("stopped the private PostgreSQL cluster it started"), "{log}");
    assert!(!accepts(port), "the cluster still runs:\n{log}");
}

#[test]
fn a_port_in_use_is_named_with_the_variable_that_moves_it_and_the_cluster_is_stopped_again() {
    let data = DataDir::new("bind");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap();

    let out = console(&data.0, &["serve", "--demo"]).env("FARM_LOCAL_BIND", address.to_string()).output().unwrap();
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "{stderr}");
    let sentence = format!("the local farm could not listen on {address} (FARM_LOCAL_BIND moves it): ");
    assert!(stderr.contains(&sentence), "{stderr}");
    assert!(stderr.contains("stopped the private PostgreSQL cluster it started"), "{stderr}");
    assert!(!accepts(data.cluster_port()), "the cluster still runs:\n{stderr}");

    let out = console(&data.0, &["serve", "--stand-ins"]).env("CONSOLE_BIND", address.to_string()).output().unwrap();
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "{stderr}");
    let sentence = format!("the console could not listen on {address} (CONSOLE_BIND moves it): ");
    assert!(stderr.contains(&sentence), "{stderr}");
    assert!(stderr.contains("stopped the private PostgreSQL cluster it started"), "{stderr}");
    assert!(!accepts(data.cluster_port()), "the cluster still runs:\n{stderr}");
    drop(taken);
}
