//! Worker and server processes of the real binary, for the crash tests (kill -9 mid-job, then a
//! restart) and the replicas' test.

use std::time::Duration;

use super::TestDb;

/// A worker process of the real binary (`member-console worker`) against the test's database,
/// killed with SIGKILL when dropped; its log goes to `log`.
pub struct WorkerProcess {
    process: Process,
}

impl WorkerProcess {
    pub fn start(t: &TestDb, data_dir: &std::path::Path, lease: Duration, name: &str) -> WorkerProcess {
        Self::start_with(t, data_dir, lease, name, &[])
    }

    /// With more environment (Stripe's settings, say).
    pub fn start_with(
        t: &TestDb,
        data_dir: &std::path::Path,
        lease: Duration,
        name: &str,
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        let lease = lease.as_millis().to_string();
        // Without Stripe's or the farm's settings a worker is refused unless stand-ins are asked
        // for; these tests' workers go without what they are not given (`env` may give it).
        let mut all =
            vec![("CONSOLE_JOB_LEASE_MS", lease.as_str()), ("RUST_LOG", "info,sqlx=warn"), ("CONSOLE_STAND_INS", "1")];
        all.extend_from_slice(env);
        WorkerProcess { process: spawn(t, &["worker"], data_dir, data_dir, name, &all) }
    }

    /// kill -9: no shutdown, no give-back; the database sees its connections drop.
    pub fn kill(&mut self) {
        self.process.child.kill().expect("SIGKILL is delivered");
        let status = self.process.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "the worker died of SIGKILL: {status:?}");
    }

    /// Wait until its job worker has started (it booted: migrations, the run-time role); panics
    /// with its log if it exited instead.
    pub async fn running(&mut self) {
        let started = std::time::Instant::now();
        while !self.log().contains("worker started") {
            if let Ok(Some(status)) = self.process.child.try_wait() {
                panic!("the worker exited ({status}):\n{}", self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(90), "the worker did not start:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `hostname-pid-`: how its worker id, and so the jobs' locked_by, begins.
    pub fn worker_id_prefix(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}-", host.trim(), self.process.child.id())
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// A server process of the real binary (`member-console serve --no-worker`) on a port of its own
/// against the test's database, killed when dropped; its log goes to `log`.
pub struct ServerProcess {
    process: Process,
    /// Known once `ready` read it from the log.
    pub base: String,
}

impl ServerProcess {
    pub fn start(t: &TestDb, data_dir: &std::path::Path, name: &str, env: &[(&str, &str)]) -> ServerProcess {
        // Port 0: the server takes a free port itself and says which (no race with other tests).
        let mut all = vec![("CONSOLE_BIND", "127.0.0.1:0"), ("RUST_LOG", "warn")];
        all.extend_from_slice(env);
        let process = spawn(t, &["serve", "--no-worker"], data_dir, &data_dir.join(name), name, &all);
        ServerProcess { process, base: String::new() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Wait until the log says where the server listens and `/readyz` answers 200 there (90 s at
    /// most: a server migrating beside many tests is slow to start).
    pub async fn ready(&mut self) {
        const LISTENING: &str = "Member Console is listening on ";
        let c = reqwest::Client::new();
        let started = std::time::Instant::now();
        loop {
            if self.base.is_empty()
                && let Some(line) = self.log().lines().find(|l| l.starts_with(LISTENING))
            {
                self.base = line[LISTENING.len()..].trim().to_string();
            }
            if !self.base.is_empty()
                && let Ok(r) = c.get(self.url("/readyz")).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            if let Ok(Some(status)) = self.process.child.try_wait() {
                panic!("the server exited ({status}):\n{}", self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(90), "the server did not get ready:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// A process of the real binary, killed when dropped, and the file its log goes to.
struct Process {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Process {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the real binary with `args` against the test's database, its log in `logs/<name>.log`.
fn spawn(
    t: &TestDb,
    args: &[&str],
    logs: &std::path::Path,
    data_dir: &std::path::Path,
    name: &str,
    env: &[(&str, &str)],
) -> Process {
    std::fs::create_dir_all(logs).unwrap();
    let log = logs.join(format!("{name}.log"));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_member-console"))
        .args(args)
        .env("DATABASE_URL", &t.admin_url)
        .env("CONSOLE_RUNTIME_DB_PASSWORD", super::TEST_RUNTIME_PASSWORD)
        .env("CONSOLE_DATA_DIR", data_dir)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("the member-console binary starts");
    Process { child, log }
}
