//! Finding the machine's PostgreSQL: the major version of an existing cluster, and the binaries
//! of that major (or the newest one installed) in the usual places and on PATH.

use super::*;

/// The major version of the cluster in `pgdata`, or None when there is none yet (missing or
/// empty directory). A non-empty directory without PG_VERSION is left alone: it is not ours.
pub(super) fn existing_cluster_major(pgdata: &Path) -> Result<Option<u32>, ClusterError> {
    let version_file = pgdata.join("PG_VERSION");
    match fs::read_to_string(&version_file) {
        Ok(text) => {
            return leading_number(text.trim()).map(Some).ok_or_else(|| {
                ClusterError::Unusable(format!(
                    "{} holds {:?}, not a PostgreSQL version; the cluster at {} is damaged. Move \
                     it away (a fresh cluster is then created) or restore it from a backup",
                    version_file.display(),
                    text.trim(),
                    pgdata.display()
                ))
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(ClusterError::Io { context: format!("could not read {}", version_file.display()), source: e });
        }
    }
    match fs::read_dir(pgdata).map(|mut entries| entries.next().is_some()) {
        Ok(true) => Err(ClusterError::Unusable(format!(
            "{} exists but holds no PostgreSQL cluster (no PG_VERSION); move it away or delete \
             it, and a fresh cluster is created there",
            pgdata.display()
        ))),
        Ok(false) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ClusterError::Io { context: format!("could not read {}", pgdata.display()), source: e }),
    }
}

/// The directory holding initdb, pg_ctl and postgres: `CONSOLE_PG_BIN_DIR` alone when set;
/// otherwise PATH, then the usual install locations, newest first. An existing cluster needs the
/// binaries of its own major version; a new one gets the first of version 15 or later.
pub(super) fn find_binaries(existing_major: Option<u32>) -> Result<PathBuf, ClusterError> {
    let candidates = match std::env::var_os("CONSOLE_PG_BIN_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => candidate_bin_dirs(),
    };
    let mut found: Vec<(PathBuf, u32)> = Vec::new();
    for dir in &candidates {
        let complete = ["initdb", "pg_ctl", "postgres"].iter().all(|b| dir.join(b).is_file());
        if !complete {
            continue;
        }
        let Some(major) = server_major(dir) else {
            continue;
        };
        let fits = match existing_major {
            Some(want) => major == want,
            None => major >= MIN_MAJOR,
        };
        if fits {
            return Ok(dir.clone());
        }
        found.push((dir.clone(), major));
    }
    if found.is_empty() {
        return Err(ClusterError::NoBinaries { searched: candidates });
    }
    let seen = found.iter().map(|(d, m)| format!("PostgreSQL {m} in {}", d.display())).collect::<Vec<_>>().join(", ");
    Err(ClusterError::Unusable(match existing_major {
        Some(want) => format!(
            "the private cluster was created by PostgreSQL {want}, but only {seen} was found. \
             Install PostgreSQL {want} (e.g. `apt-get install postgresql-{want}`) or point \
             CONSOLE_PG_BIN_DIR at its bin directory; or upgrade the cluster with pg_upgrade; or \
             move the cluster away to start afresh"
        ),
        None => {
            format!("found only {seen}; the console needs PostgreSQL 15 or later. {INSTALL_HINT}")
        }
    }))
}

pub(super) fn candidate_bin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // PATH first; resolve symlinks (e.g. /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin)
    // so the directory found is the one where `postgres` sits beside initdb.
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let initdb = dir.join("initdb");
            if initdb.is_file()
                && dir.join("pg_ctl").is_file()
                && let Ok(real) = fs::canonicalize(&initdb)
                && let Some(parent) = real.parent()
            {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    dirs.extend(versioned_dirs("/usr/lib/postgresql", "", "bin"));
    dirs.push(PathBuf::from("/usr/local/pgsql/bin"));
    dirs.extend(versioned_dirs("/opt/homebrew/opt", "postgresql", "bin"));
    dirs.extend(versioned_dirs("/usr/local/opt", "postgresql", "bin"));
    dirs.extend(versioned_dirs("/usr", "pgsql-", "bin"));
    let mut unique = Vec::new();
    for d in dirs {
        let d = fs::canonicalize(&d).unwrap_or(d);
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    unique
}

/// `<parent>/<prefix><version>/<sub>` for every entry, highest version first (an entry without a
/// number, e.g. Homebrew's plain `postgresql`, sorts last).
pub(super) fn versioned_dirs(parent: &str, prefix: &str, sub: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(prefix)?;
            let rest = rest.trim_start_matches(|c: char| !c.is_ascii_digit());
            Some((leading_number(rest).unwrap_or(0), e.path().join(sub)))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, p)| p).collect()
}

/// "postgres (PostgreSQL) 15.14 (Debian ...)" -> 15. `--version` is answered before postgres's
/// refusal to run as root, so this works as root too.
pub(super) fn server_major(bin_dir: &Path) -> Option<u32> {
    let out = Command::new(bin_dir.join("postgres")).arg("--version").stdin(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let after = text.split(')').nth(1)?.trim_start();
    leading_number(after)
}

pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}
