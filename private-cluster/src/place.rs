//! Where the server's own files live: its data directory (PGDATA), its log, its socket directory
//! and its working directory. Normally in the data folder. But when the console runs as root,
//! PostgreSQL runs as another user (it refuses root), and that user may be unable to enter the
//! data folder: the default `./.data` of a checkout in `/root` is the usual case. Then the server's
//! files go to a folder of its own, `/var/lib/member-console/pg-<hash of the data folder>`, the
//! same at every start. The console's own files (the superuser password, the port, the locks and
//! the generated secrets) stay in the data folder either way: only the console reads them.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{ClusterError, RunAs, check_traversable, fnv1a, io_err, pick_run_as, read_passwd};

/// Under /var/lib rather than /var/tmp or /tmp: those are emptied at boot (a tmpfs /tmp) or swept
/// of files untouched for weeks (systemd-tmpfiles ages /var/tmp out after 30 days), and a sweep
/// that removes a cluster's idle relation files corrupts it; this is also the demo's database.
pub(super) const RELOCATION_BASE: &str = "/var/lib/member-console";

/// Written into a relocated folder: which data folder it belongs to, for a person looking at
/// /var/lib/member-console (the folder's name is only a hash).
const ORIGIN_NOTE: &str = "data-folder";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    DataFolder,
    Relocated,
}

/// The relocated folder for a data folder (canonical: one checkout, one place): a short path,
/// free of anything pg_ctl's shell or a socket address could trip on.
pub(super) fn relocated_home(data_dir: &Path) -> PathBuf {
    let hash = fnv1a(data_dir.as_os_str().as_encoded_bytes());
    Path::new(RELOCATION_BASE).join(format!("pg-{hash:016x}"))
}

/// The place, from what is on disk. An existing cluster is never left for a fresh one elsewhere:
/// one in the data folder stays there (if its user cannot enter, the traversal check says what
/// to do), and one in the relocated folder is used even once the data folder became reachable.
/// `reachable` is asked only when nothing else decides: the user a new cluster would run as can
/// enter the data folder.
pub(super) fn choose(
    other_user: bool,
    cluster_in_data_folder: bool,
    cluster_relocated: bool,
    reachable: impl FnOnce() -> Result<bool, ClusterError>,
) -> Result<Place, ClusterError> {
    if !other_user || cluster_in_data_folder {
        return Ok(Place::DataFolder);
    }
    if cluster_relocated || !reachable()? {
        return Ok(Place::Relocated);
    }
    Ok(Place::DataFolder)
}

/// Where the server's files go for this data folder (canonical), as `choose` decides from disk.
pub(super) fn server_home(data_dir: &Path, runs_as_other_user: bool) -> Result<PathBuf, ClusterError> {
    if !runs_as_other_user {
        // Without looking further: a non-root console may not read the relocated folder.
        return Ok(data_dir.to_path_buf());
    }
    let relocated = relocated_home(data_dir);
    let place =
        choose(true, has_entries(&data_dir.join("postgres"))?, has_entries(&relocated.join("postgres"))?, || {
            let user = pick_run_as(&read_passwd(), None, &data_dir.join("postgres"))?;
            match check_traversable(data_dir, &user) {
                Ok(()) => Ok(true),
                Err(ClusterError::NotTraversable { .. }) => Ok(false),
                Err(other) => Err(other),
            }
        })?;
    Ok(match place {
        Place::DataFolder => data_dir.to_path_buf(),
        Place::Relocated => relocated,
    })
}

/// Make the relocated folder ready for `user`: the base root's and open to enter (0755), the
/// folder the server user's alone (0700). Anything else found there is refused, not repaired:
/// a base another user could write to would let them swap the cluster's folder, and a folder
/// owned by someone else is not ours to take.
pub(super) fn prepare(home: &Path, user: &RunAs, data_dir: &Path) -> Result<(), ClusterError> {
    let base = home.parent().unwrap_or(Path::new("/"));
    create_dir(base, 0o755)?;
    let meta = fs::symlink_metadata(base).map_err(io_err(format!("could not inspect {}", base.display())))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(ClusterError::Unusable(format!(
            "{} must be a directory owned by root and writable by root alone (it holds the \
             folders of private clusters whose data folder PostgreSQL's user cannot enter); fix \
             or remove it, or choose a data folder (CONSOLE_DATA_DIR) every parent of which others \
             may enter",
            base.display()
        )));
    }
    fs::set_permissions(base, fs::Permissions::from_mode(0o755))
        .map_err(io_err(format!("could not set the mode of {}", base.display())))?;

    create_dir(home, 0o700)?;
    let meta = fs::symlink_metadata(home).map_err(io_err(format!("could not inspect {}", home.display())))?;
    // Owned by root: this module made it and was stopped before handing it over.
    let ours = meta.uid() == user.uid || meta.uid() == 0;
    if !meta.is_dir() || !ours {
        return Err(ClusterError::Unusable(format!(
            "{} (the folder for the private cluster of {}) is not a directory owned by `{}`, the \
             user PostgreSQL runs as (owner uid {}); remove it and start again",
            home.display(),
            data_dir.display(),
            user.name,
            meta.uid()
        )));
    }
    std::os::unix::fs::chown(home, Some(user.uid), Some(user.gid)).map_err(io_err(format!(
        "could not give {} to `{}`",
        home.display(),
        user.name
    )))?;
    fs::set_permissions(home, fs::Permissions::from_mode(0o700))
        .map_err(io_err(format!("could not set the mode of {}", home.display())))?;
    let note = home.join(ORIGIN_NOTE);
    fs::write(&note, format!("{}\n", data_dir.display()))
        .map_err(io_err(format!("could not write {}", note.display())))?;
    Ok(())
}

fn create_dir(dir: &Path, mode: u32) -> Result<(), ClusterError> {
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(ClusterError::Io { context: format!("could not create {}", dir.display()), source: e }),
    }
}

/// A directory with anything in it (a missing one has nothing).
fn has_entries(dir: &Path) -> Result<bool, ClusterError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ClusterError::Io { context: format!("could not read {}", dir.display()), source: e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> Result<bool, ClusterError> {
        panic!("reachability was asked although the place was already decided")
    }

    #[test]
    fn the_server_leaves_the_data_folder_only_when_its_user_cannot_enter_it() {
        // The console's own user runs the server: it can enter its own data folder.
        assert_eq!(choose(false, false, false, never).unwrap(), Place::DataFolder);
        // Run as root, a data folder the server's user can enter is used as before...
        assert_eq!(choose(true, false, false, || Ok(true)).unwrap(), Place::DataFolder);
        // ...and one it cannot enter (a checkout under /root) sends it elsewhere.
        assert_eq!(choose(true, false, false, || Ok(false)).unwrap(), Place::Relocated);
    }

    #[test]
    fn an_existing_cluster_is_used_where_it_is() {
        // A cluster in the data folder is never swapped for an empty one elsewhere, reachable or not.
        assert_eq!(choose(true, true, false, never).unwrap(), Place::DataFolder);
        assert_eq!(choose(true, true, true, never).unwrap(), Place::DataFolder);
        // One made elsewhere at an earlier start is reused, even after `chmod o+x` on the way in.
        assert_eq!(choose(true, false, true, never).unwrap(), Place::Relocated);
        // A failure to find out is reported, not taken for an answer.
        let e = choose(true, false, false, || Err(ClusterError::NoUnprivilegedUser)).unwrap_err();
        assert!(matches!(e, ClusterError::NoUnprivilegedUser), "{e}");
    }

    #[test]
    fn the_relocated_folder_is_the_same_for_a_data_folder_and_differs_between_them() {
        let a = relocated_home(Path::new("/root/member-console/.data"));
        assert_eq!(a, relocated_home(Path::new("/root/member-console/.data")));
        assert_ne!(a, relocated_home(Path::new("/root/other-checkout/.data")));
        assert!(a.starts_with(RELOCATION_BASE), "{}", a.display());
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.len() == 19 && name.starts_with("pg-"), "{name}");
        assert!(name[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
        // Its socket directory fits a socket address, so the /tmp fallback is not needed.
        assert!(a.join("postgres-socket").as_os_str().len() <= super::super::SOCKET_DIR_MAX);
    }
}
