//! The embedded default PostgreSQL (src/db/cluster.rs) against the machine's real binaries:
//! first start (from two threads at once), reuse, stop/restart on the same port, databases, the
//! long-path socket fallback and, as root, the traversal check.

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use member_console::db::cluster::{ClusterError, PrivateCluster};

/// A fresh folder under target/ (cargo's CARGO_TARGET_TMPDIR), removed on drop together with
/// the cluster in it, so a failed assertion does not leave a server running.
struct Scratch {
    dir: PathBuf,
    cluster: Option<PrivateCluster>,
    extra: Vec<PathBuf>,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        // Under /tmp, not the checkout: run as root, the cluster runs as another user, who must be
        // able to enter every parent, and a checkout may sit in a folder only root can enter.
        let dir = Path::new("/tmp").join(format!("mc-pc-{tag}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        Scratch { dir, cluster: None, extra: Vec::new() }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(c) = &self.cluster
            && let Err(e) = c.stop()
        {
            eprintln!("cleanup: stopping the cluster failed: {e}");
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
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(data_dir.join("postgres.password")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

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

#[test]
fn root_needs_a_traversable_data_dir() {
    // Only as root does the server run as another user who might not get in.
    let root = fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if root.ok() != Some(true) {
        eprintln!("skipped: not running as root");
        return;
    }
    let scratch = Scratch::new("closed");
    let closed = scratch.dir.join("closed");
    fs::create_dir(&closed).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
    }
    match PrivateCluster::ensure_started(&closed.join("data")) {
        Err(ClusterError::NotTraversable { dir, .. }) => assert_eq!(dir, closed),
        Ok(c) => {
            c.stop().ok();
            panic!("expected NotTraversable, but the cluster started: {c:?}");
        }
        Err(other) => panic!("expected NotTraversable, got {other}"),
    }
}
