//! A deadlock, which the documented lock order should make impossible, is logged as an error
//! naming both paths and the work is tried once more: the server rolled the victim back, so the
//! second try starts from nothing.

use super::{Db, DbError};

/// An error that may be the server breaking a deadlock.
pub trait MaybeDeadlock {
    /// The server's detail when this is a deadlock.
    fn deadlock(&self) -> Option<&str>;
}

impl MaybeDeadlock for DbError {
    fn deadlock(&self) -> Option<&str> {
        match self {
            DbError::Deadlock(detail) => Some(detail),
            _ => None,
        }
    }
}

/// `MaybeDeadlock` for an error enum with a `Db(DbError)` variant.
#[macro_export]
macro_rules! deadlock_through_db {
    ($t:ty) => {
        impl $crate::db::retry::MaybeDeadlock for $t {
            fn deadlock(&self) -> Option<&str> {
                match self {
                    Self::Db(e) => $crate::db::retry::MaybeDeadlock::deadlock(e),
                    _ => None,
                }
            }
        }
    };
}

/// Run `work`; when it ends in a deadlock, log it with the path that lost (`path`) and the paths
/// of the other backends the server named, and run it once more.
pub async fn once_more_after_deadlock<T, E: MaybeDeadlock>(
    db: &Db,
    path: &str,
    mut work: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    match work().await {
        Err(e) if e.deadlock().is_some() => {
            let detail = e.deadlock().unwrap_or_default().to_string();
            let others = other_paths(db, &detail).await;
            tracing::error!(path, other_paths = ?others, detail, "deadlock: the lock order was broken; trying once more");
            work().await
        }
        r => r,
    }
}

/// The paths (application names, which each transaction sets to its path) of the backends a
/// deadlock's detail names, as far as they are still connected.
async fn other_paths(db: &Db, detail: &str) -> Vec<String> {
    let pids = backend_pids(detail);
    if pids.is_empty() {
        return vec![];
    }
    sqlx::query_scalar(
        "SELECT pid::text || ': ' || coalesce(nullif(application_name, ''), '(unnamed)') FROM pg_stat_activity
         WHERE pid = ANY($1) ORDER BY pid",
    )
    .bind(pids)
    .fetch_all(&db.pool)
    .await
    .unwrap_or_default()
}

/// "Process 123 waits for ShareLock on transaction 9; blocked by process 456." → [123, 456].
pub fn backend_pids(detail: &str) -> Vec<i32> {
    let mut out: Vec<i32> = detail
        .split(|c: char| !c.is_ascii_alphanumeric())
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0].eq_ignore_ascii_case("process"))
        .filter_map(|w| w[1].parse().ok())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backends_of_a_deadlock_detail() {
        let d = "Process 101 waits for ShareLock on transaction 77; blocked by process 202.\n\
                 Process 202 waits for ShareLock on transaction 78; blocked by process 101.";
        assert_eq!(backend_pids(d), vec![101, 202]);
        assert!(backend_pids("").is_empty());
    }
}
