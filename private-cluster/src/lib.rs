//! The embedded default PostgreSQL: with no `DATABASE_URL`, the console runs a
//! private cluster from the machine's own PostgreSQL binaries, in its data folder, so one command
//! runs the console on a fresh machine.
//!
//! Layout under the data folder:
//! - `postgres/`          the cluster (PGDATA)
//! - `postgres.password`  the `postgres` superuser's password (random hex, mode 0600)
//! - `postgres.port`      the port the server last listened on (reused when still free)
//! - `postgres.log`       the server log
//! - `postgres.lock`      held (flock) while a process initialises, starts or stops the cluster
//! - `postgres.users`     held shared (flock) by each console process using the cluster (in_use)
//! - `postgres-socket/`   the Unix socket directory (or a short directory under /tmp, see below)
//!
//! Run as root with a data folder PostgreSQL's user cannot enter, `postgres/`, `postgres.log`
//! and `postgres-socket/` live in a folder of the server's own instead (place.rs); the rest stays.
//!
//! Everything here is synchronous std::process work: it runs once at start-up, before the async
//! runtime does anything with the database. A handle does not stop the server when dropped: the
//! command that started it calls `release` when it ends, which stops it unless another console
//! process uses it, and a server found running is left running.

mod discovery;
mod in_use;
mod place;
mod users;

use discovery::*;
use users::*;

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The oldest major version the console supports (DESIGN §5).
const MIN_MAJOR: u32 = 15;
const SUPERUSER: &str = "postgres";
/// Bound for `pg_ctl start/stop -w` and for waiting on a server another process is starting.
const SERVER_WAIT: Duration = Duration::from_secs(60);
/// Bound for waiting on another process's lock: initdb plus a start fits well inside this.
const LOCK_WAIT: Duration = Duration::from_secs(180);
/// A socket path (`<dir>/.s.PGSQL.<port>`) must fit `sun_path` (107 bytes + NUL); the suffix
/// takes up to 15 bytes, so the directory may take 92.
const SOCKET_DIR_MAX: usize = 92;
const LOG_TAIL_LINES: usize = 30;
/// Start attempts: a freshly picked port can be taken by someone else before the server binds it.
const START_ATTEMPTS: usize = 3;

const INSTALL_HINT: &str = "Install PostgreSQL 15 or later (Debian/Ubuntu: `apt-get install \
     postgresql`; Fedora: `dnf install postgresql-server`; macOS: `brew install postgresql@16`), \
     or set CONSOLE_PG_BIN_DIR to the directory holding initdb, pg_ctl and postgres, or set \
     DATABASE_URL to use an existing PostgreSQL server instead";

/// libpq/server variables that would silently point our commands at another server, user or
/// data directory; every child runs without them.
const PG_ENV: &[&str] = &[
    "PGDATA",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGOPTIONS",
    "PGSSLMODE",
    "PGREQUIRESSL",
    "PGTARGETSESSIONATTRS",
    "PGCLIENTENCODING",
    "PGCONNECT_TIMEOUT",
];

/// Appended to the new cluster's postgresql.conf. Port and socket directory are not here: they
/// are given on the command line at each start, because the port can change between starts.
const CONF_TAIL: &str = "
# --- Added by Member Console: its private development/demo server. ---
# Only local TCP connections; port and socket directory come from pg_ctl -o at each start.
listen_addresses = '127.0.0.1'
max_connections = 200
shared_buffers = 128MB
# Durability stays on: this is also the demo database.
fsync = on
log_min_messages = warning
";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl and postgres side by side) were found; \
         searched: {}. {}",
        show_paths(.searched),
        INSTALL_HINT
    )]
    NoBinaries { searched: Vec<PathBuf> },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error("{what} failed ({status}).\n{output}\n{hint}")]
    Command {
        /// What was attempted, with the full command line.
        what: String,
        status: String,
        /// The command's stdout and stderr (and, for a start, the tail of the server log).
        output: String,
        /// What to do about it.
        hint: String,
    },

    #[error(
        "the console runs as root and PostgreSQL refuses to run as root, but /etc/passwd has no \
         `postgres` user to run it as (the console never runs it as `nobody`, which every daemon \
         without a user of its own shares). Create one (`useradd --system --home-dir /var/lib/postgresql \
         postgres`), run the console as a non-root user, or set DATABASE_URL"
    )]
    NoUnprivilegedUser,

    #[error(
        "the private cluster in {pgdata} belongs to `nobody`, and the console does not run PostgreSQL \
         as `nobody` (every daemon without a user of its own shares it, so any of them could read \
         or change the data). Give it to the `postgres` user (`chown -R postgres: {pgdata}`) or \
         remove it to start afresh"
    )]
    OwnedByNobody { pgdata: PathBuf },

    #[error(
        "PostgreSQL must run as the unprivileged user `{user}` (it refuses to run as root), but \
         that user cannot enter {dir} (mode {mode:o}, owner uid {owner}). Choose a data folder \
         whose every parent directory is searchable by others (e.g. under /var/lib or /srv), or \
         grant access with `chmod o+x {dir}`"
    )]
    NotTraversable { dir: PathBuf, user: String, mode: u32, owner: u32 },

    /// The data folder or the installed binaries are in a state this module will not repair on
    /// its own (the message says what to do).
    #[error("{0}")]
    Unusable(String),

    #[error("the private PostgreSQL server is not ready: {0}")]
    NotReady(String),
}

/// A running private cluster. Cloning or dropping it does not stop the server.
#[derive(Clone)]
pub struct PrivateCluster {
    /// The console's files: the password, the port, the locks.
    data_dir: PathBuf,
    /// The server's files and working directory: `data_dir`, or a folder of its own (place.rs).
    home: PathBuf,
    pgdata: PathBuf,
    bin_dir: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    password: String,
    /// uid/gid the server and its tools run as when the console itself runs as root.
    run_as: Option<(u32, u32)>,
    /// This handle started the server (rather than finding it running), so it is the one to stop it.
    started_here: bool,
}

impl fmt::Debug for PrivateCluster {
    // By hand, so the superuser password never lands in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateCluster")
            .field("pgdata", &self.pgdata)
            .field("bin_dir", &self.bin_dir)
            .field("socket_dir", &self.socket_dir)
            .field("port", &self.port)
            .field("run_as", &self.run_as)
            .finish_non_exhaustive()
    }
}

impl PrivateCluster {
    /// Find binaries, initdb if the cluster does not exist yet, start it if not running (reuse a
    /// running one), return a handle. Idempotent, and safe to call from several processes at
    /// once: the work happens under an exclusive lock on `postgres.lock`. The calling process
    /// counts as using the cluster from now until it exits or stops it (see `release`).
    pub fn ensure_started(data_dir: &Path) -> Result<PrivateCluster, ClusterError> {
        fs::create_dir_all(data_dir)
            .map_err(io_err(format!("could not create the data folder {}", data_dir.display())))?;
        // Absolute, symlink-free: children run with the data folder as their working directory,
        // the traversal check below must see the real parents, and the relocated folder's name
        // must be the same however the folder was named.
        let data_dir = fs::canonicalize(data_dir)
            .map_err(io_err(format!("could not resolve the data folder {}", data_dir.display())))?;
        check_shell_safe(&data_dir)?;
        let _lock = DirLock::acquire(&Layout::lock_file(&data_dir))?;

        let root = effective_uid() == Some(0);
        let home = place::server_home(&data_dir, root)?;
        let layout = Layout::new(&data_dir, &home);
        let existing_major = existing_cluster_major(&layout.pgdata)?;
        let bin_dir = find_binaries(existing_major)?;
        let run_as = choose_run_as(&layout.pgdata)?;
        if let Some(user) = &run_as {
            if home != data_dir {
                place::prepare(&home, user, &data_dir)?;
            }
            check_traversable(&home, user)?;
        }
        let ids = run_as.as_ref().map(|u| (u.uid, u.gid));
        let socket_dir = prepare_socket_dir(&home, ids)?;

        let mut cluster = PrivateCluster {
            data_dir,
            home,
            pgdata: layout.pgdata.clone(),
            bin_dir,
            socket_dir,
            port: 0,
            password: String::new(),
            run_as: ids,
            started_here: false,
        };
        cluster.password = match existing_major {
            Some(_) => read_password(&layout)?,
            None => cluster.init(&layout)?,
        };
        cluster.prepare_owned_file(&layout.log_file, 0o600)?;
        (cluster.port, cluster.started_here) = cluster.start_or_reuse(&layout)?;
        fs::write(&layout.port_file, format!("{}\n", cluster.port))
            .map_err(io_err(format!("could not write {}", layout.port_file.display())))?;
        cluster.check_accepts_tcp()?;
        in_use::mark(&cluster.data_dir, &layout.users_file)?;
        Ok(cluster)
    }

    /// The end of a command that called `ensure_started`: stop the server if this handle started
    /// it and no other console process uses it; otherwise leave it running (it was running
    /// before, e.g. for a `serve` or after `pg start`, or someone started using it since).
    pub fn release(&self) -> Result<Release, ClusterError> {
        if !self.started_here {
            return Ok(Release::LeftRunning);
        }
        let layout = self.layout();
        let _lock = DirLock::acquire(&layout.lock_file)?;
        if in_use::others_use(&self.data_dir, &layout.users_file)? {
            return Ok(Release::InUse);
        }
        let stopped = self.stop_locked();
        in_use::release(&self.data_dir);
        stopped.map(|()| Release::Stopped)
    }

    /// The server's files are not in the data folder (run as root, PostgreSQL's user could not
    /// enter it): `pgdata()` says where they are.
    pub fn relocated(&self) -> bool {
        self.home != self.data_dir
    }

    /// Did this handle start the server? Only then should its owner stop it at shutdown: another
    /// process (a `serve` in another terminal) may be using one it found running.
    pub fn started_here(&self) -> bool {
        self.started_here
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pgdata(&self) -> &Path {
        &self.pgdata
    }

    /// The data folder, canonical: the console's files (password, port, locks).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory the server binaries (and, normally, `psql`/`createdb`) were taken from.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// `postgres://postgres:<password>@127.0.0.1:<port>/<database>`
    pub fn admin_url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}:{}@127.0.0.1:{}/{}", self.password, self.port, percent_encode(database))
    }

    /// Create the database if missing. Safe against a concurrent creator: a failed `createdb`
    /// whose database exists afterwards counts as success.
    pub fn ensure_database(&self, name: &str) -> Result<(), ClusterError> {
        // NAMEDATALEN - 1: PostgreSQL would silently truncate a longer name.
        if name.is_empty() || name.len() > 63 || name.contains('\0') {
            return Err(ClusterError::Unusable(format!(
                "invalid database name {name:?}: it must be 1 to 63 bytes with no NUL"
            )));
        }
        if self.database_exists(name)? {
            return Ok(());
        }
        let mut cmd = self.command(&self.client_tool("createdb"));
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", SUPERUSER])
            .arg("--maintenance-db=postgres")
            .arg("--") // a name starting with '-' is still a name
            .arg(name);
        self.client_env(&mut cmd);
        let what = format!("creating database {name:?}");
        let out = spawn_output(&mut cmd, &what)?;
        if out.status.success() || self.database_exists(name)? {
            return Ok(());
        }
        Err(command_failed(&cmd, &what, &out, "Check the server log for details"))
    }

    /// `pg_ctl stop -m fast`, whoever started it and whoever uses it (`pg stop`); no error when
    /// the server is already stopped.
    pub fn stop(&self) -> Result<(), ClusterError> {
        let layout = self.layout();
        let _lock = DirLock::acquire(&layout.lock_file)?;
        self.stop_locked()
    }

    fn layout(&self) -> Layout {
        Layout::new(&self.data_dir, &self.home)
    }

    /// `stop` with the folder lock already held.
    fn stop_locked(&self) -> Result<(), ClusterError> {
        if !self.is_running()? {
            return Ok(());
        }
        let mut cmd = self.command(&self.bin_dir.join("pg_ctl"));
        cmd.arg("stop").arg("-D").arg(&self.pgdata).args([
            "-m",
            "fast",
            "-w",
            "-t",
            &SERVER_WAIT.as_secs().to_string(),
        ]);
        let what = "stopping the private PostgreSQL server";
        let out = spawn_output(&mut cmd, what)?;
        // Someone else may have stopped it between our status check and our stop.
        if out.status.success() || !self.is_running()? {
            return Ok(());
        }
        Err(command_failed(&cmd, what, &out, "Look at the server's processes (`ps aux | grep postgres`) and its log"))
    }

    // ---- initialisation ------------------------------------------------------------------------

    /// initdb into a staging directory and rename it into place, so an interrupted initdb never
    /// leaves a half-made `postgres/` that later looks like a cluster. Returns the password.
    fn init(&self, layout: &Layout) -> Result<String, ClusterError> {
        if layout.staging.exists() {
            // Left by an interrupted initdb; we hold the lock, so nobody else is using it.
            fs::remove_dir_all(&layout.staging)
                .map_err(io_err(format!("could not remove the leftover {}", layout.staging.display())))?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&layout.staging)
            .map_err(io_err(format!("could not create {}", layout.staging.display())))?;
        self.chown(&layout.staging)?;

        // Reuse a valid password (e.g. the folder's cluster was deleted to start afresh);
        // otherwise make one.
        let password = match read_password(layout) {
            Ok(p) => p,
            Err(_) => random_hex(16)?,
        };
        write_secret(&layout.password_file, &password)?;
        // initdb reads the password as the server's user, who may be unable to enter the data
        // folder: a copy beside the cluster, the server user's alone, gone once initdb is done.
        write_secret(&layout.initdb_password, &password)?;
        self.chown(&layout.initdb_password)?;
        let ran = self.run_initdb(layout);
        let _ = fs::remove_file(&layout.initdb_password);
        let (cmd, out) = ran?;
        if !out.status.success() {
            return Err(command_failed(
                &cmd,
                "initialising the private PostgreSQL cluster (initdb)",
                &out,
                &format!(
                    "Fix the cause above and start again; or set DATABASE_URL to use an existing \
                     server. Nothing was written to {}",
                    layout.pgdata.display()
                ),
            ));
        }

        let conf = layout.staging.join("postgresql.conf");
        let mut f = OpenOptions::new()
            .append(true)
            .open(&conf)
            .map_err(io_err(format!("could not open {}", conf.display())))?;
        f.write_all(CONF_TAIL.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(io_err(format!("could not write {}", conf.display())))?;

        if layout.pgdata.exists() {
            // existing_cluster_major() let this through only because it is empty.
            fs::remove_dir(&layout.pgdata)
                .map_err(io_err(format!("could not replace the empty {}", layout.pgdata.display())))?;
        }
        fs::rename(&layout.staging, &layout.pgdata).map_err(io_err(format!(
            "could not move the new cluster from {} to {}",
            layout.staging.display(),
            layout.pgdata.display()
        )))?;
        Ok(password)
    }

    /// initdb into the staging directory, in the C.UTF-8 locale, else the plain C locale.
    fn run_initdb(&self, layout: &Layout) -> Result<(Command, Output), ClusterError> {
        let initdb = self.bin_dir.join("initdb");
        let run = |locale: &str| -> Result<(Command, Output), ClusterError> {
            let mut cmd = self.command(&initdb);
            cmd.arg("-D")
                .arg(&layout.staging)
                .args(["-U", SUPERUSER])
                .arg("--pwfile")
                .arg(&layout.initdb_password)
                .args(["--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", locale]);
            let out = spawn_output(&mut cmd, "initdb")?;
            Ok((cmd, out))
        };
        let (mut cmd, mut out) = run("--locale=C.UTF-8")?;
        // Only stderr: initdb's progress on stdout always mentions the locale.
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("locale") {
            // Systems without a C.UTF-8 locale (older macOS, minimal images): the plain C locale.
            fs::remove_dir_all(&layout.staging).ok();
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&layout.staging)
                .map_err(io_err(format!("could not create {}", layout.staging.display())))?;
            self.chown(&layout.staging)?;
            (cmd, out) = run("--no-locale")?;
        }
        Ok((cmd, out))
    }

    // ---- starting ------------------------------------------------------------------------------

    /// Reuse a running server (waiting while another process's server finishes starting or
    /// stopping), else start one. Returns the port it listens on.
    /// The port, and whether this call started the server.
    fn start_or_reuse(&self, layout: &Layout) -> Result<(u16, bool), ClusterError> {
        let deadline = Instant::now() + SERVER_WAIT;
        loop {
            if !self.is_running()? {
                return self.start(layout).map(|p| (p, true));
            }
            let pid_file = self.read_pid_file();
            if let Some(pf) = &pid_file
                && pf.status == "ready"
                && let Some(port) = pf.port
            {
                return Ok((port, false));
            }
            if Instant::now() >= deadline {
                let state = pid_file.map_or("unknown".to_string(), |pf| pf.status);
                return Err(ClusterError::NotReady(format!(
                    "a server is running on {} but stayed in state {state:?} for {} s. Last lines \
                     of {}:\n{}",
                    self.pgdata.display(),
                    SERVER_WAIT.as_secs(),
                    layout.log_file.display(),
                    log_tail(&layout.log_file, 0)
                )));
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    fn start(&self, layout: &Layout) -> Result<u16, ClusterError> {
        let socket_dir = self.socket_dir.to_str().ok_or_else(|| {
            ClusterError::Unusable(format!("the socket directory {} is not valid UTF-8", self.socket_dir.display()))
        })?;
        let mut last_port = read_port_file(&layout.port_file);
        for attempt in 1..=START_ATTEMPTS {
            let port = pick_port(last_port)?;
            self.clear_stale_lock_files(port)?;
            let log_start = fs::metadata(&layout.log_file).map_or(0, |m| m.len());
            let mut cmd = self.command(&self.bin_dir.join("pg_ctl"));
            cmd.arg("start")
                .args(["-w", "-t", &SERVER_WAIT.as_secs().to_string()])
                .arg("-D")
                .arg(&self.pgdata)
                .arg("-l")
                .arg(&layout.log_file)
                // pg_ctl hands -o to /bin/sh; the socket directory is single-quoted and was
                // chosen free of quotes and shell metacharacters (prepare_socket_dir).
                .arg("-o")
                .arg(format!("-p {port} -k '{socket_dir}'"));
            let what = format!("starting the private PostgreSQL server on port {port}");
            let out = spawn_output(&mut cmd, &what)?;
            if out.status.success() {
                // The server's own record wins (e.g. ALTER SYSTEM SET port).
                let port = self.read_pid_file().and_then(|pf| pf.port).unwrap_or(port);
                return Ok(port);
            }
            let tail = log_tail(&layout.log_file, log_start);
            let port_taken = ["could not bind", "Address already in use", "could not create any TCP/IP"]
                .iter()
                .any(|m| tail.contains(m));
            if port_taken && attempt < START_ATTEMPTS {
                last_port = None;
                continue;
            }
            let mut err = command_failed(
                &cmd,
                &what,
                &out,
                &format!(
                    "Fix the cause shown in the server log, then start again. The cluster is {}; \
                     or set DATABASE_URL to use an existing server",
                    self.pgdata.display()
                ),
            );
            if let ClusterError::Command { output, .. } = &mut err {
                output.push_str(&format!("\n--- last lines of {} ---\n{tail}", layout.log_file.display()));
            }
            return Err(err);
        }
        unreachable!("the last attempt returns")
    }

    /// Remove lock files that would make postgres refuse to start although no server runs.
    /// postgres itself ignores a lock file whose PID is gone, but it takes any PID that
    /// `kill(pid, 0)` reaches as a live server: after a container or machine restart that PID
    /// can belong to an unrelated process, and a killed postmaster can linger as an unreaped
    /// zombie where the init process does not reap. Such files are removed here, and only when
    /// no live process still works in the data directory (an orphaned backend: postgres's own
    /// shared-memory check relies on `postmaster.pid`, so that case is left to the operator).
    /// Linux only; elsewhere postgres's own handling applies.
    fn clear_stale_lock_files(&self, port: u16) -> Result<(), ClusterError> {
        let pid_path = self.pgdata.join("postmaster.pid");
        if let Some(pid) = lock_file_pid(&pid_path)
            && let Some(why) = stale_holder(pid)
        {
            let live = processes_in(&self.pgdata);
            if !live.is_empty() {
                return Err(ClusterError::Unusable(format!(
                    "no server runs on {} ({}), yet processes {live:?} still work in it (orphaned \
                     backends of a crashed server?). Stop them (`kill {}`), then start again",
                    self.pgdata.display(),
                    why,
                    live.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
                )));
            }
            remove_stale(&pid_path, &why)?;
        }
        let socket_lock = self.socket_dir.join(format!(".s.PGSQL.{port}.lock"));
        if let Some(pid) = lock_file_pid(&socket_lock)
            && let Some(why) = stale_holder(pid)
        {
            remove_stale(&socket_lock, &why)?;
            let _ = fs::remove_file(self.socket_dir.join(format!(".s.PGSQL.{port}")));
        }
        Ok(())
    }

    /// `pg_ctl status` says running, and the PID it saw is not a zombie or an unrelated process
    /// (it counts both as a running server).
    fn is_running(&self) -> Result<bool, ClusterError> {
        let mut cmd = self.command(&self.bin_dir.join("pg_ctl"));
        cmd.arg("status").arg("-D").arg(&self.pgdata);
        let what = "checking the private PostgreSQL server (pg_ctl status)";
        let out = spawn_output(&mut cmd, what)?;
        match out.status.code() {
            Some(0) => {
                Ok(lock_file_pid(&self.pgdata.join("postmaster.pid")).is_none_or(|pid| stale_holder(pid).is_none()))
            }
            Some(3) => Ok(false),
            _ => Err(command_failed(
                &cmd,
                what,
                &out,
                &format!("Check that {} exists and belongs to the user the server runs as", self.pgdata.display()),
            )),
        }
    }

    fn read_pid_file(&self) -> Option<PidFile> {
        let text = fs::read_to_string(self.pgdata.join("postmaster.pid")).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        Some(PidFile {
            port: lines.get(3).and_then(|l| l.trim().parse().ok()),
            // Absent while the postmaster is still writing the file: not ready yet.
            status: lines.get(7).map_or("starting", |l| l.trim()).to_string(),
        })
    }

    /// `pg_ctl -w` already waited for "ready"; this proves the port answers from here.
    fn check_accepts_tcp(&self) -> Result<(), ClusterError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map(drop).map_err(|e| {
            ClusterError::NotReady(format!(
                "the server on {} reports ready but 127.0.0.1:{} refuses connections ({e}); \
                     check listen_addresses in {}/postgresql.conf and the server log",
                self.pgdata.display(),
                self.port,
                self.pgdata.display()
            ))
        })
    }

    // ---- databases -----------------------------------------------------------------------------

    fn database_exists(&self, name: &str) -> Result<bool, ClusterError> {
        let sql = format!("SELECT 1 FROM pg_database WHERE datname = {}", sql_literal(name));
        let mut cmd = self.command(&self.client_tool("psql"));
        cmd.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port))
            .arg("-c")
            .arg(&sql);
        self.client_env(&mut cmd);
        let what = format!("checking whether database {name:?} exists");
        let out = spawn_output(&mut cmd, &what)?;
        if !out.status.success() {
            return Err(command_failed(
                &cmd,
                &what,
                &out,
                "Check that the server runs and that postgres.password matches its superuser",
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim() == "1")
    }

    /// `psql`/`createdb` sit beside the server binaries on Debian, Fedora and Homebrew; fall back
    /// to PATH for split installs.
    fn client_tool(&self, name: &str) -> PathBuf {
        let beside = self.bin_dir.join(name);
        if beside.is_file() {
            return beside;
        }
        find_on_path(name).unwrap_or(beside)
    }

    fn client_env(&self, cmd: &mut Command) {
        // The environment, not argv: argv is visible to every user in `ps`.
        cmd.env("PGPASSWORD", &self.password).env("PGCONNECT_TIMEOUT", "10");
    }

    // ---- processes and ownership ---------------------------------------------------------------

    /// A command for a PostgreSQL program: no inherited PG* variables, the data folder as working
    /// directory, and, when the console runs as root, the unprivileged user's identity.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        for var in PG_ENV {
            cmd.env_remove(var);
        }
        cmd.current_dir(&self.home).stdin(Stdio::null());
        // A process group of its own: a Ctrl-C in the terminal reaches the console alone, which
        // then finishes or stops what it started in order (an `initdb` or `pg_ctl` cut short by
        // the terminal's signal would leave a half-made cluster or a server nobody stops).
        cmd.process_group(0);
        if let Some((uid, gid)) = self.run_as {
            // std drops supplementary groups when switching away from root.
            cmd.uid(uid).gid(gid).env("HOME", &self.home);
        }
        cmd
    }

    fn chown(&self, path: &Path) -> Result<(), ClusterError> {
        match self.run_as {
            Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(io_err(format!("could not give {} to uid {uid} (the server's user)", path.display()))),
            None => Ok(()),
        }
    }

    /// Create `path` if missing, set its mode, and give it to the server's user (who must
    /// append to the log and read the password file, in a folder it cannot write).
    fn prepare_owned_file(&self, path: &Path, mode: u32) -> Result<(), ClusterError> {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(mode)
            .open(path)
            .map_err(io_err(format!("could not create {}", path.display())))?;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_err(format!("could not set the mode of {}", path.display())))?;
        self.chown(path)
    }
}

// ---- layout and lock -------------------------------------------------------------------------

/// What `release` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// This handle started the server, nobody else used it: stopped.
    Stopped,
    /// This handle started the server, but another console process uses it: left running.
    InUse,
    /// The server was running before this handle found it: left running.
    LeftRunning,
}

/// The files of a cluster: the server's in `home`, the console's in the data folder.
struct Layout {
    pgdata: PathBuf,
    staging: PathBuf,
    /// A copy of the password for initdb, where the server's user can read it; removed after.
    initdb_password: PathBuf,
    password_file: PathBuf,
    port_file: PathBuf,
    log_file: PathBuf,
    lock_file: PathBuf,
    users_file: PathBuf,
}

impl Layout {
    fn new(data_dir: &Path, home: &Path) -> Self {
        Layout {
            pgdata: home.join("postgres"),
            staging: home.join("postgres.initdb"),
            initdb_password: home.join("postgres.initdb-password"),
            password_file: data_dir.join("postgres.password"),
            port_file: data_dir.join("postgres.port"),
            log_file: home.join("postgres.log"),
            lock_file: Self::lock_file(data_dir),
            users_file: data_dir.join("postgres.users"),
        }
    }

    /// Known before the server's place is: choosing it happens under this lock.
    fn lock_file(data_dir: &Path) -> PathBuf {
        data_dir.join("postgres.lock")
    }
}

struct PidFile {
    port: Option<u16>,
    status: String,
}

/// An exclusive flock on the lock file, released when dropped (or when the process dies, so a
/// crashed starter never leaves a stale lock). The file is opened close-on-exec, so the server
/// we start does not inherit it.
struct DirLock {
    _file: File,
}

impl DirLock {
    fn acquire(path: &Path) -> Result<DirLock, ClusterError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(format!("could not open the lock file {}", path.display())))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(DirLock { _file: file }),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(ClusterError::Unusable(format!(
                        "another process has held {} for {} s while initialising, starting or \
                         stopping the private PostgreSQL server; find it with `fuser {}` (or \
                         `lsof`), let it finish or stop it, then try again",
                        path.display(),
                        LOCK_WAIT.as_secs(),
                        path.display()
                    )));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(ClusterError::Io { context: format!("could not lock {}", path.display()), source: e });
                }
            }
        }
    }
}

// ---- processes (Linux /proc) ---------------------------------------------------------------

/// The PID on the first line of a postgres lock file (negative for a standalone backend).
fn lock_file_pid(path: &Path) -> Option<u32> {
    let text = fs::read_to_string(path).ok()?;
    let pid = text.lines().next()?.trim().parse::<i64>().ok()?.unsigned_abs();
    u32::try_from(pid).ok().filter(|p| *p != 0)
}

/// Why a lock file's PID cannot be a server (a zombie, or a live non-postgres process), or None
/// when it may be one, is gone (postgres handles that), or /proc is unavailable.
fn stale_holder(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ...": comm may hold spaces and parentheses, so split at the last ')'.
    let (head, tail) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1;
    if tail.trim_start().starts_with('Z') {
        return Some(format!("its PID {pid} is an exited, unreaped process"));
    }
    if comm.starts_with("postgres") || comm.starts_with("postmaster") {
        return None;
    }
    Some(format!("its PID {pid} now belongs to {comm:?}"))
}

/// Live processes (other than this one) whose working directory is `dir`: postgres backends
/// run with the data directory as their working directory.
fn processes_in(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, t)| !t.trim_start().starts_with('Z')))
        })
        .collect()
}

fn remove_stale(path: &Path, why: &str) -> Result<(), ClusterError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ClusterError::Io {
            context: format!("could not remove the stale lock file {} ({why}); remove it by hand", path.display()),
            source: e,
        }),
    }
}

// ---- paths, ports, files ---------------------------------------------------------------------

/// pg_ctl builds a /bin/sh command line with `-D "<pgdata>"` and `-l "<log>"` in double quotes,
/// so these characters in the data folder would break (or inject into) that command.
fn check_shell_safe(data_dir: &Path) -> Result<(), ClusterError> {
    let s = data_dir.as_os_str().as_encoded_bytes();
    if let Some(c) = s.iter().find(|c| b"\"$`\\\n\r".contains(c)) {
        return Err(ClusterError::Unusable(format!(
            "the data folder {} contains the character {:?}, which pg_ctl cannot pass through its \
             shell; choose a data folder path without \" $ ` \\ or line breaks",
            data_dir.display(),
            *c as char
        )));
    }
    Ok(())
}

/// `<home>/postgres-socket` when its path fits a Unix socket address and is safe inside the
/// single quotes of pg_ctl's `-o`; otherwise `/tmp/member-console-pg-<hash of home>`.
/// Either way a 0700 directory owned by the server's user.
fn prepare_socket_dir(home: &Path, run_as: Option<(u32, u32)>) -> Result<PathBuf, ClusterError> {
    let inside = home.join("postgres-socket");
    let fits = inside
        .to_str()
        .is_some_and(|s| s.len() <= SOCKET_DIR_MAX && !s.chars().any(|c| "'\",\\$`".contains(c) || c.is_control()));
    let dir = if fits {
        inside
    } else {
        let hash = fnv1a(home.as_os_str().as_encoded_bytes());
        PathBuf::from(format!("/tmp/member-console-pg-{hash:016x}"))
    };
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {
            if let Some((uid, gid)) = run_as {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                    .map_err(io_err(format!("could not give {} to uid {uid}", dir.display())))?;
            }
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(ClusterError::Io {
                context: format!("could not create the socket directory {}", dir.display()),
                source: e,
            });
        }
    }
    // In a shared /tmp, someone else could have made the directory first: refuse anything not
    // ours (inside our own folder, take it over instead).
    let meta = fs::symlink_metadata(&dir).map_err(io_err(format!("could not inspect {}", dir.display())))?;
    let want_uid = run_as.map(|(uid, _)| uid).or_else(effective_uid);
    if !meta.is_dir() || want_uid.is_some_and(|u| meta.uid() != u) {
        if meta.is_dir()
            && dir.starts_with(home)
            && let Some((uid, gid)) = run_as
        {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(io_err(format!("could not give {} to uid {uid}", dir.display())))?;
        } else {
            return Err(ClusterError::Unusable(format!(
                "the socket directory {} exists but is not a directory owned by the server's \
                 user (uid {:?}); remove it and start again",
                dir.display(),
                want_uid
            )));
        }
    }
    Ok(dir)
}

fn read_port_file(path: &Path) -> Option<u16> {
    fs::read_to_string(path).ok()?.trim().parse().ok().filter(|p| *p != 0)
}

/// The last port when it is still free, else one the kernel hands out. The check is a bind and
/// close, so another program can take the port before the server binds it; start() retries.
fn pick_port(last: Option<u16>) -> Result<u16, ClusterError> {
    if let Some(port) = last
        && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
    {
        return Ok(port);
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(io_err("could not find a free TCP port on 127.0.0.1".to_string()))?;
    listener.local_addr().map(|a| a.port()).map_err(io_err("could not read the picked TCP port".to_string()))
}

fn read_password(layout: &Layout) -> Result<String, ClusterError> {
    let text = fs::read_to_string(&layout.password_file).map_err(|e| {
        ClusterError::Unusable(format!(
            "could not read the superuser password file {} ({e}). Without it the cluster at {} \
             cannot be used: restore the file, or move the cluster away (a fresh, empty one is \
             then created)",
            layout.password_file.display(),
            layout.pgdata.display()
        ))
    })?;
    let password = text.trim().to_string();
    if password.len() < 16 || !password.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ClusterError::Unusable(format!(
            "{} does not hold a password this module wrote (hex, 16+ characters); restore it, or \
             move the cluster at {} away to start afresh",
            layout.password_file.display(),
            layout.pgdata.display()
        )));
    }
    Ok(password)
}

/// `password` and a newline into `path`, mode 0600 (also when the file was there before).
fn write_secret(path: &Path, password: &str) -> Result<(), ClusterError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("could not write {}", path.display())))?;
    f.write_all(format!("{password}\n").as_bytes()).map_err(io_err(format!("could not write {}", path.display())))?;
    // A file that already existed keeps its old mode under `mode()`.
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(io_err(format!("could not set the mode of {}", path.display())))
}

fn random_hex(bytes: usize) -> Result<String, ClusterError> {
    let mut buf = vec![0u8; bytes];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(io_err("could not read /dev/urandom for a password".to_string()))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last LOG_TAIL_LINES lines written at or after byte `from` (the whole log when that part
/// is empty, e.g. the failure was reported by pg_ctl before the server wrote anything).
fn log_tail(path: &Path, from: u64) -> String {
    let read_from = |offset: u64| -> String {
        let mut text = Vec::new();
        if let Ok(mut f) = File::open(path) {
            let _ = f.seek(SeekFrom::Start(offset));
            let _ = f.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    };
    let mut text = read_from(from);
    if text.trim().is_empty() && from > 0 {
        text = read_from(0);
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() { "(the log is empty)".to_string() } else { tail }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    // Stable across builds (unlike std's hasher), so the fallback socket path stays the same.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

fn leading_number(s: &str) -> Option<u32> {
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A SQL string literal; standard_conforming_strings is on, so only quotes need doubling.
fn sql_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn show_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "(nothing)".to_string();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

// ---- running commands ------------------------------------------------------------------------

fn io_err(context: String) -> impl FnOnce(io::Error) -> ClusterError {
    move |source| ClusterError::Io { context, source }
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
            s.push_str(&format!(" '{}'", arg.replace('\'', "'\\''")));
        } else {
            s.push(' ');
            s.push_str(&arg);
        }
    }
    s
}

fn spawn_output(cmd: &mut Command, what: &str) -> Result<Output, ClusterError> {
    cmd.output().map_err(|e| {
        let who = cmd
            .get_envs()
            .find(|(k, _)| *k == "HOME")
            .map(|_| " as the unprivileged server user (is the program readable and executable by that user?)")
            .unwrap_or("");
        ClusterError::Io { context: format!("{what}: could not run `{}`{who}", describe(cmd)), source: e }
    })
}

fn combined(out: &Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.trim().is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(err.trim());
    }
    s
}

fn command_failed(cmd: &Command, what: &str, out: &Output, hint: &str) -> ClusterError {
    ClusterError::Command {
        what: format!("{what}: `{}`", describe(cmd)),
        status: out.status.to_string(),
        output: combined(out),
        hint: hint.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, uid: u32) -> RunAs {
        RunAs { name: name.into(), uid, gid: uid }
    }

    #[test]
    fn a_root_console_runs_postgres_as_postgres_and_never_as_nobody() {
        let dir = Path::new("/srv/pg");
        let with_both = [user("root", 0), user("nobody", 65534), user("postgres", 104)];
        assert_eq!(pick_run_as(&with_both, None, dir).unwrap().name, "postgres");

        let only_nobody = [user("root", 0), user("nobody", 65534)];
        assert!(matches!(pick_run_as(&only_nobody, None, dir), Err(ClusterError::NoUnprivilegedUser)));

        // A cluster an earlier version made as nobody is refused, with what to do.
        let e = pick_run_as(&with_both, Some((65534, 65534)), dir).unwrap_err();
        assert!(matches!(e, ClusterError::OwnedByNobody { .. }), "{e}");
        assert!(e.to_string().contains("chown -R postgres"), "{e}");

        // Another owner of an existing cluster is kept.
        assert_eq!(pick_run_as(&with_both, Some((104, 104)), dir).unwrap().uid, 104);
    }
}
