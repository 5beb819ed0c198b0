//! Who the server runs as when the console runs as root (PostgreSQL refuses root), and whether
//! that user can reach the data folder.

use super::*;

#[derive(Debug)]
pub(super) struct RunAs {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// Who the server runs as: the console's own user, unless that is root (postgres refuses root).
/// Then the owner of an existing cluster, else `postgres`; never `nobody`.
pub(super) fn choose_run_as(pgdata: &Path) -> Result<Option<RunAs>, ClusterError> {
    if effective_uid() != Some(0) {
        return Ok(None);
    }
    let owner = fs::metadata(pgdata.join("PG_VERSION")).ok().map(|m| (m.uid(), m.gid()));
    pick_run_as(&read_passwd(), owner, pgdata).map(Some)
}

/// The user for a root console: the existing cluster's owner (not root, not `nobody`), else
/// `postgres`.
pub(super) fn pick_run_as(
    users: &[RunAs],
    existing_owner: Option<(u32, u32)>,
    pgdata: &Path,
) -> Result<RunAs, ClusterError> {
    const NOBODY_UID: u32 = 65534;
    let is_nobody = |uid: u32| uid == NOBODY_UID || users.iter().any(|u| u.uid == uid && u.name == "nobody");
    if let Some((uid, gid)) = existing_owner
        && uid != 0
    {
        if is_nobody(uid) {
            return Err(ClusterError::OwnedByNobody { pgdata: pgdata.to_path_buf() });
        }
        let known = users.iter().find(|u| u.uid == uid);
        return Ok(RunAs {
            name: known.map_or(format!("uid {uid}"), |u| u.name.clone()),
            uid,
            gid: known.map_or(gid, |u| u.gid),
        });
    }
    users
        .iter()
        .find(|u| u.name == "postgres" && u.uid != 0 && !is_nobody(u.uid))
        .map(|u| RunAs { name: u.name.clone(), uid: u.uid, gid: u.gid })
        .ok_or(ClusterError::NoUnprivilegedUser)
}

/// The effective uid, from the owner of /proc/self (Linux), else `id -u`.
pub(super) fn effective_uid() -> Option<u32> {
    if let Ok(meta) = fs::metadata("/proc/self") {
        return Some(meta.uid());
    }
    let out = Command::new("id").arg("-u").output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

pub(super) fn read_passwd() -> Vec<RunAs> {
    let text = fs::read_to_string("/etc/passwd").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            Some(RunAs { name: f.first()?.to_string(), uid: f.get(2)?.parse().ok()?, gid: f.get(3)?.parse().ok()? })
        })
        .collect()
}

/// The user's primary group and its supplementary groups from /etc/group.
pub(super) fn groups_of(user: &RunAs) -> Vec<u32> {
    let mut gids = vec![user.gid];
    let text = fs::read_to_string("/etc/group").unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if let (Some(gid), Some(members)) = (f.get(2).and_then(|g| g.parse().ok()), f.get(3))
            && members.split(',').any(|m| m.trim() == user.name)
        {
            gids.push(gid);
        }
    }
    gids
}

/// The server's user must be able to enter the data folder and every parent (it runs with the
/// folder as working directory and opens files inside). Checked from mode bits; ACLs are not
/// consulted.
pub(super) fn check_traversable(data_dir: &Path, user: &RunAs) -> Result<(), ClusterError> {
    let gids = groups_of(user);
    for dir in data_dir.ancestors() {
        let meta = fs::metadata(dir).map_err(io_err(format!("could not inspect {}", dir.display())))?;
        let mode = meta.mode();
        let bit = if meta.uid() == user.uid {
            0o100
        } else if gids.contains(&meta.gid()) {
            0o010
        } else {
            0o001
        };
        if mode & bit == 0 {
            return Err(ClusterError::NotTraversable {
                dir: dir.to_path_buf(),
                user: user.name.clone(),
                mode: mode & 0o7777,
                owner: meta.uid(),
            });
        }
    }
    Ok(())
}
