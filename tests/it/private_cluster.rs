//! The embedded default PostgreSQL (src/db/cluster.rs) against the machine's real binaries:
//! first start (from two threads at once), reuse, stop/restart on the same port, databases, the
//! long-path socket fallback, who stops the server when a command ends (in process, and through
//! the real binary, Ctrl-C included), the binary's log format and, as root, a data folder the
//! server's user cannot enter (moved out, and the traversal check for a cluster already there).

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use private_cluster::{ClusterError, PrivateCluster, Release};

/// A fresh folder under target/ (cargo's CARGO_TARGET_TMPDIR), removed on drop together with
/// the cluster in it, so a failed assertion does not leave a server running.
struct Scratch {
    dir: PathBuf,
    cluster: Option<PrivateCluster>,
    extra: Vec<PathBuf>,
    /// A data folder the binary used: its cluster is stopped with `pg stop` if still running.
    binary_data: Option<PathBuf>,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        // Under /tmp, not the checkout: run as root, the cluster runs as another user, who must be
        // able to enter every parent, and a checkout may sit in a folder only root can enter.
        let dir = Path::new("/tmp").join(format!("mc-pc-{tag}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        Scratch { dir, cluster: None, extra: Vec::new(), binary_data: None }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(c) = &self.cluster
            && let Err(e) = c.stop()
        {
            eprintln!("cleanup: stopping the cluster failed: {e}");
        }
        if let Some(data) = &self.binary_data
            && data.join("postgres/postmaster.pid").exists()
        {
            let _ = console(data, &["pg", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        let _ = fs::remove_dir_all(&self.dir);
        for p in &self.extra {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Runs `sql` through psql with the admin URL, as a client would; returns trimmed stdout.
fn psql(c: &PrivateCluster, database: &str, sql: &str) -> String {
    let out = Command::new(c.bin_dir().join("psql"))
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(c.admin_url(database))
        .arg("-c")
        .arg(sql)
        .env_remove("PGPASSWORD")
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .output()
        .expect("run psql");
    assert!(out.status.success(), "psql {sql:?} on {database:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn mtime(p: &Path) -> SystemTime {
    fs::metadata(p).unwrap().modified().unwrap()
}

fn postmaster_pid_line(c: &PrivateCluster, index: usize) -> String {
    let text = fs::read_to_string(c.pgdata().join("postmaster.pid")).unwrap();
    text.lines().nth(index).unwrap().trim().to_string()
}

fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn start_reuse_stop_restart_and_create_database() {
    let mut scratch = Scratch::new("main");
    let data_dir = scratch.dir.join("data");

    // Two starters at once on a fresh folder: one initdbs and starts, the other waits on the
    // lock and reuses the running server.
    let (a, b) = std::thread::scope(|s| {
        let one = s.spawn(|| PrivateCluster::ensure_started(&data_dir));
        let two = s.spawn(|| PrivateCluster::ensure_started(&data_dir));
        (one.join().unwrap(), two.join().unwrap())
    });
    let cluster = a.unwrap_or_else(|e| panic!("first starter: {e}"));
    scratch.cluster = Some(cluster.clone());
    let other = b.unwrap_or_else(|e| panic!("second starter: {e}"));
    assert_eq!(cluster.port(), other.port());
    assert_eq!(cluster.pgdata(), other.pgdata());

    let port = cluster.port();
    assert_eq!(psql(&cluster, "postgres", "SELECT 1"), "1");
    assert!(cluster.admin_url("postgres").starts_with("postgres://postgres:"));
    assert!(cluster.admin_url("postgres").ends_with(&format!("@127.0.0.1:{port}/postgres")));
    assert_eq!(fs::read_to_string(data_dir.join("postgres.port")).unwrap().trim(), port.to_string());
    // The password must not leak through Debug (it is logged at start-up).
    let password = fs::read_to_string(data_dir.join("postgres.password")).unwrap();
    assert!(!format!("{cluster:?}").contains(password.trim()));
    let mode = fs::metadata(data_dir.join("postgres.password")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Again while running: same server, same port, no second initdb.
    let pg_version = cluster.pgdata().join("PG_VERSION");
    let created = mtime(&pg_version);
    let postmaster = postmaster_pid_line(&cluster, 0);
    let again = PrivateCluster::ensure_started(&data_dir).unwrap();
    assert_eq!(again.port(), port);
    assert_eq!(mtime(&pg_version), created);
    assert_eq!(postmaster_pid_line(&again, 0), postmaster, "the running server was reused");

    // Stop (twice: stopping a stopped server is fine).
    cluster.stop().unwrap();
    assert!(!cluster.pgdata().join("postmaster.pid").exists());
    assert!(!accepts(port));
    cluster.stop().unwrap();

    // Start again: back on the same port, same cluster.
    let restarted = PrivateCluster::ensure_started(&data_dir).unwrap();
    assert_eq!(restarted.port(), port);
    assert_eq!(mtime(&pg_version), created);
    assert_eq!(psql(&restarted, "postgres", "SELECT 1"), "1");

    // Databases: created once, idempotent, with a name that needs quoting and URL-encoding.
    let name = "it's a db";
    restarted.ensure_database(name).unwrap();
    restarted.ensure_database(name).unwrap();
    assert_eq!(psql(&restarted, name, "SELECT current_database()"), name);
    restarted.ensure_database("console_second").unwrap();
    assert_eq!(
        psql(
            &restarted,
            "postgres",
            "SELECT count(*) FROM pg_database WHERE datname IN ('it''s a db', 'console_second')"
        ),
        "2"
    );
    assert!(matches!(restarted.ensure_database(""), Err(ClusterError::Unusable(_))));

    restarted.stop().unwrap();
    assert!(!accepts(port));
    scratch.cluster = None;
    drop(scratch);
}

#[test]
fn long_data_dir_puts_the_socket_under_tmp() {
    let mut scratch = Scratch::new("long");
    // Too long for `<data_dir>/postgres-socket/.s.PGSQL.<port>` to fit a socket address.
    let data_dir = scratch.dir.join("d".repeat(60)).join("e".repeat(60));
    let cluster = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    scratch.cluster = Some(cluster.clone());
    let socket_dir = postmaster_pid_line(&cluster, 4);
    scratch.extra.push(PathBuf::from(&socket_dir));
    assert!(socket_dir.starts_with("/tmp/member-console-pg-"), "{socket_dir}");
    assert!(Path::new(&socket_dir).join(format!(".s.PGSQL.{}", cluster.port())).exists());
    assert_eq!(psql(&cluster, "postgres", "SELECT 1"), "1");
    cluster.stop().unwrap();
    scratch.cluster = None;
}

fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A folder under the scratch one that only root may enter (as a checkout in /root is).
fn closed_folder(scratch: &Scratch) -> PathBuf {
    let closed = scratch.dir.join("closed");
    fs::create_dir(&closed).unwrap();
    fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
    closed
}

#[test]
fn as_root_a_data_folder_postgres_cannot_enter_gets_its_cluster_a_folder_of_its_own() {
    // Only as root does the server run as another user who might not get in.
    if !is_root() {
        eprintln!("skipped: not running as root");
        return;
    }
    let mut scratch = Scratch::new("moved");
    let data_dir = closed_folder(&scratch).join("data");

    let cluster = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    scratch.cluster = Some(cluster.clone());
    let home = cluster.pgdata().parent().unwrap().to_path_buf();
    scratch.extra.push(home.clone());
    assert!(cluster.relocated());
    assert!(home.to_str().unwrap().starts_with("/var/lib/member-console/pg-"), "{}", home.display());
    // The server user's alone, and named for this data folder.
    let meta = fs::metadata(&home).unwrap();
    assert_ne!(meta.uid(), 0);
    assert_eq!(meta.uid(), fs::metadata(cluster.pgdata().join("PG_VERSION")).unwrap().uid());
    assert_eq!(meta.mode() & 0o7777, 0o700);
    let note = fs::read_to_string(home.join("data-folder")).unwrap();
    assert_eq!(note.trim(), fs::canonicalize(&data_dir).unwrap().display().to_string());
    // The server's files moved; the console's stayed, the password root's alone.
    assert!(!data_dir.join("postgres").exists());
    assert!(home.join("postgres.log").exists() && !data_dir.join("postgres.log").exists());
    assert!(!home.join("postgres.initdb-password").exists(), "initdb's copy of the password is gone");
    let password = data_dir.join("postgres.password");
    assert_eq!(fs::metadata(&password).unwrap().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(&password).unwrap().uid(), 0);
    assert_eq!(psql(&cluster, "postgres", "SELECT 1"), "1");
    cluster.ensure_database("member_console").unwrap();

    // Stopped and started again: the same place, the same cluster and its data.
    let created = mtime(&cluster.pgdata().join("PG_VERSION"));
    cluster.stop().unwrap();
    let again = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    assert!(again.started_here());
    assert_eq!(again.pgdata(), cluster.pgdata());
    assert_eq!(mtime(&again.pgdata().join("PG_VERSION")), created);
    assert_eq!(psql(&again, "member_console", "SELECT current_database()"), "member_console");

    // Even once the data folder is opened up, the cluster is not abandoned for a fresh one.
    fs::set_permissions(data_dir.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
    let opened = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(opened.pgdata(), cluster.pgdata());
    assert!(!data_dir.join("postgres").exists());
    again.stop().unwrap();
    scratch.cluster = None;
}

#[test]
fn as_root_a_cluster_already_in_a_data_folder_postgres_cannot_enter_is_refused_not_replaced() {
    if !is_root() {
        eprintln!("skipped: not running as root");
        return;
    }
    let mut scratch = Scratch::new("closed");
    // A cluster made while the way in was open...
    let gate = scratch.dir.join("gate");
    let data_dir = gate.join("data");
    let cluster = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    scratch.cluster = Some(cluster.clone());
    assert!(!cluster.relocated());
    cluster.stop().unwrap();
    scratch.cluster = None;
    // ...then closed to others: the cluster is still there, so no empty one is made elsewhere.
    fs::set_permissions(&gate, fs::Permissions::from_mode(0o700)).unwrap();
    match PrivateCluster::ensure_started(&data_dir) {
        Err(ClusterError::NotTraversable { dir, .. }) => assert_eq!(dir, gate),
        Ok(c) => {
            c.stop().ok();
            panic!("expected NotTraversable, but the cluster started: {c:?}");
        }
        Err(other) => panic!("expected NotTraversable, got {other}"),
    }
}

#[test]
fn a_command_stops_the_cluster_it_started_unless_another_process_uses_it() {
    let mut scratch = Scratch::new("release");
    let data_dir = scratch.dir.join("data");
    let started = PrivateCluster::ensure_started(&data_dir).unwrap_or_else(|e| panic!("{e}"));
    scratch.cluster = Some(started.clone());
    let port = started.port();
    assert!(started.started_here());

    // Another handle in this process found it running: its release leaves it alone.
    let found = PrivateCluster::ensure_started(&data_dir).unwrap();
    assert!(!found.started_here());
    assert_eq!(found.release().unwrap(), Release::LeftRunning);
    assert!(accepts(port));

    // Another console process uses it (a `serve` that found it running holds this lock shared).
    let other = fs::File::open(data_dir.join("postgres.users")).unwrap();
    other.lock_shared().unwrap();
    assert_eq!(started.release().unwrap(), Release::InUse);
    assert!(accepts(port), "a server another process uses is left running");
    drop(other);

    // Alone again (this process's own handles do not count): the starter stops it.
    assert_eq!(started.release().unwrap(), Release::Stopped);
    assert!(!accepts(port));
    assert!(!started.pgdata().join("postmaster.pid").exists());
    scratch.cluster = None;
}

// ---- the binary ------------------------------------------------------------------------------

/// The real `member-console` on the private cluster of `data_dir` (no DATABASE_URL), with the
/// default log format and stdout and stderr piped, as a log collector or a script sees them.
fn console(data_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_member-console"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("CONSOLE_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .env("CONSOLE_DATA_DIR", data_dir)
        .env("RUST_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn port_of(data_dir: &Path) -> u16 {
    fs::read_to_string(data_dir.join("postgres.port")).unwrap().trim().parse().unwrap()
}

#[test]
fn a_one_shot_command_stops_the_cluster_it_started_and_logs_json_lines_when_asked() {
    let mut scratch = Scratch::new("json");
    let data_dir = scratch.dir.join("data");
    scratch.binary_data = Some(data_dir.clone());
    let out = console(&data_dir, &["migrate"]).env("CONSOLE_LOG_FORMAT", "json").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "migrate failed:\n{stderr}");
    assert!(!out.stderr.contains(&0x1b), "an escape code in piped logs:\n{stderr}");

    // Every log line is one JSON object; the two about the cluster say where it is.
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let event = |message: &str| {
        events
            .iter()
            .find(|e| e["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} event in:\n{stderr}"))
            .clone()
    };
    let up = event("private PostgreSQL cluster is up");
    assert_eq!(up["level"], "INFO");
    assert_eq!(up["fields"]["started"], true);
    let pgdata = PathBuf::from(up["fields"]["pgdata"].as_str().unwrap());
    let stopped = event("stopped the private PostgreSQL cluster it started");
    assert_eq!(stopped["fields"]["pgdata"], up["fields"]["pgdata"]);

    // And it is stopped.
    assert!(pgdata.join("PG_VERSION").exists(), "{}", pgdata.display());
    assert!(!pgdata.join("postmaster.pid").exists(), "the server still runs after migrate");
    assert!(!accepts(port_of(&data_dir)));
}

#[test]
fn a_one_shot_command_leaves_a_cluster_it_found_running_and_plain_logs_carry_no_colour_in_a_pipe() {
    let mut scratch = Scratch::new("found");
    let data_dir = scratch.dir.join("data");
    scratch.binary_data = Some(data_dir.clone());
    // Started by `pg start`, which exits and leaves it running (as scripts/test uses it).
    let started = console(&data_dir, &["pg", "start"]).output().unwrap();
    assert!(started.status.success(), "pg start failed:\n{}", String::from_utf8_lossy(&started.stderr));
    let port = port_of(&data_dir);
    assert!(accepts(port));

    let out = console(&data_dir, &["migrate"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "migrate failed:\n{stderr}");
    assert!(stderr.contains("private PostgreSQL cluster is up"), "{stderr}");
    assert!(!out.stderr.contains(&0x1b), "an escape code in piped logs:\n{stderr}");
    assert!(!stderr.contains("stopped the private PostgreSQL cluster"), "{stderr}");
    assert!(accepts(port), "migrate stopped a server it had not started");

    let stop = console(&data_dir, &["pg", "stop"]).output().unwrap();
    assert!(stop.status.success(), "pg stop failed:\n{}", String::from_utf8_lossy(&stop.stderr));
    assert!(!accepts(port));
}

#[test]
fn an_interrupted_stress_run_stops_the_cluster_it_started() {
    let mut scratch = Scratch::new("sigint");
    let data_dir = scratch.dir.join("data");
    scratch.binary_data = Some(data_dir.clone());
    let mut child = console(&data_dir, &["stress", "--seconds", "600", "--orgs", "5", "--connections", "2"])
        .spawn()
        .expect("the member-console binary starts");
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut seen = Vec::new();
    // Interrupt once the paths run (the cluster started, the scratch database made and filled).
    let deadline = Instant::now() + Duration::from_secs(180);
    while !seen.iter().any(|l: &String| l.starts_with("stress: seed")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("the run did not get going:\n{}", seen.join("\n"));
            }
        }
    }
    let port = port_of(&data_dir);
    assert!(accepts(port));
    // SAFETY: kill(2) on the child's own pid, which has not been waited for (it still runs).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stress did not end within 90 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The reader ends at the end of the pipe, having sent every line.
    reader.join().unwrap();
    seen.extend(lines.try_iter());
    let log = seen.join("\n");
    assert!(!status.success(), "{log}");
    assert!(log.contains("interrupted"), "{log}");
    assert!(log.contains("stopped the private PostgreSQL cluster it started"), "{log}");
    assert!(!accepts(port), "the server still runs after the interrupted run:\n{log}");
}

#[test]
fn a_log_format_that_is_neither_text_nor_json_stops_the_command_before_anything_starts() {
    let scratch = Scratch::new("badlog");
    let data_dir = scratch.dir.join("data");
    let out = console(&data_dir, &["migrate"]).env("CONSOLE_LOG_FORMAT", "xml").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("CONSOLE_LOG_FORMAT") && stderr.contains("xml"), "{stderr}");
    assert!(!data_dir.join("postgres").exists(), "a cluster was made before the refusal");
}
