//! A worker process of the real binary, for the crash tests (kill -9 mid-job, then a restart).

use std::time::Duration;

use super::TestDb;

/// A worker process of the real binary (`member-console worker`) against the test's database,
/// killed with SIGKILL when dropped; its log goes to `log`.
pub struct WorkerProcess {
    child: std::process::Child,
    log: std::path::PathBuf,
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
        std::fs::create_dir_all(data_dir).unwrap();
        let log = data_dir.join(format!("{name}.log"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_member-console"))
            .arg("worker")
            .env("DATABASE_URL", &t.admin_url)
            .env("CONSOLE_RUNTIME_DB_PASSWORD", super::TEST_RUNTIME_PASSWORD)
            .env("CONSOLE_DATA_DIR", data_dir)
            .env("CONSOLE_JOB_LEASE_MS", lease.as_millis().to_string())
            .env("RUST_LOG", "info,sqlx=warn")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the member-console binary starts");
        WorkerProcess { child, log }
    }

    /// kill -9: no shutdown, no give-back; the database sees its connections drop.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL is delivered");
        let status = self.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "the worker died of SIGKILL: {status:?}");
    }

    /// `hostname-pid-`: how its worker id, and so the jobs' locked_by, begins.
    pub fn worker_id_prefix(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}-", host.trim(), self.child.id())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
