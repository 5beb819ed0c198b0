//! Which console processes use a private cluster, so the one that started the server stops it
//! when it is done only when no other console process still uses it (a `serve` in another
//! terminal that found the server running and reused it).
//!
//! Each process holds a shared flock on `<data folder>/postgres.users` from its first start of
//! the cluster until it exits (the kernel drops it with the process, so a crash leaves no stale
//! user). One lock per process, not per handle: the process's own handles (boot's, a scratch
//! database's) must not count as other users. Both the taking and the test for others happen
//! under the folder's exclusive `postgres.lock`, so no process can start using the server
//! between the test and the stop.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use super::{ClusterError, io_err};

/// The data folders this process uses, each with its locked file.
static USED: Mutex<Vec<(PathBuf, File)>> = Mutex::new(Vec::new());

fn used() -> MutexGuard<'static, Vec<(PathBuf, File)>> {
    // A panic elsewhere while holding it leaves the list itself intact.
    USED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn open(users_file: &Path) -> Result<File, ClusterError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(users_file)
        .map_err(io_err(format!("could not open {}", users_file.display())))
}

/// Record that this process uses the cluster of `data_dir`. Call with the folder lock held.
pub(super) fn mark(data_dir: &Path, users_file: &Path) -> Result<(), ClusterError> {
    let mut used = used();
    if used.iter().any(|(dir, _)| dir == data_dir) {
        return Ok(());
    }
    let file = open(users_file)?;
    // Only a process holding the folder lock ever holds this one exclusively, and we hold the
    // folder lock: this does not wait.
    file.lock_shared().map_err(io_err(format!("could not lock {}", users_file.display())))?;
    used.push((data_dir.to_path_buf(), file));
    Ok(())
}

/// Is any other process using the cluster? When not, this process holds the users lock
/// exclusively until `release` (so none can start using it meanwhile) and the caller may stop
/// the server. Call with the folder lock held.
pub(super) fn others_use(data_dir: &Path, users_file: &Path) -> Result<bool, ClusterError> {
    let mut used = used();
    let file = match used.iter().position(|(dir, _)| dir == data_dir) {
        Some(i) => used.remove(i).1,
        None => open(users_file)?,
    };
    // Our own shared lock would not stand in our way (flock converts it), but on Linux a failed
    // conversion drops it, so let go first and take it again below when others hold theirs.
    let _ = file.unlock();
    match file.try_lock() {
        Ok(()) => {
            used.push((data_dir.to_path_buf(), file));
            Ok(false)
        }
        Err(TryLockError::WouldBlock) => {
            file.lock_shared().map_err(io_err(format!("could not lock {}", users_file.display())))?;
            used.push((data_dir.to_path_buf(), file));
            Ok(true)
        }
        Err(TryLockError::Error(e)) => {
            Err(ClusterError::Io { context: format!("could not lock {}", users_file.display()), source: e })
        }
    }
}

/// This process no longer uses the cluster of `data_dir` (it stopped it).
pub(super) fn release(data_dir: &Path) {
    used().retain(|(dir, _)| dir != data_dir);
}
