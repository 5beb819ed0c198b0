//! The database: the pool, the transaction kinds, advisory keys, SQLSTATE mapping, migrations,
//! and the lock-order declarations. (The private cluster is its own crate, `private-cluster`.)

pub mod keys;
pub mod locks;
pub mod migrate;
pub mod retry;
pub mod sql_functions;
pub mod trace;
pub mod tx;

use std::time::Duration;

use sqlx::PgPool;

pub use tx::{Tx, TxKind, begin, begin_for};

/// SQLSTATE 55P03: a lock wait passed `lock_timeout` (or NOWAIT).
pub const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE 57014: a statement passed `statement_timeout` (a request's deadline).
pub const QUERY_CANCELED: &str = "57014";
/// SQLSTATE 40P01: the server broke a deadlock.
pub const DEADLOCK_DETECTED: &str = "40P01";

/// The run-time handle every service takes: the pool (connected as `console_runtime`), the
/// pool for prepared one-statement reads (`tx::on_prepared`), and the bound the lock-bounded kinds
/// put on lock waits (5 s in production; tests shorten it).
#[derive(Clone, Debug)]
pub struct Db {
    pub pool: PgPool,
    /// Connections of the same role whose own `statement_timeout` is `prepared_bound`, opened
    /// when first needed (a worker never needs one): see `tx::prepared`.
    pub prepared: PgPool,
    pub prepared_bound: Duration,
    pub lock_timeout: Duration,
}

impl Db {
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
    /// Half the default request deadline: a request's first statement starts with more than
    /// this left, so it rarely needs a bound of its own (`tx::prepared`).
    pub const DEFAULT_PREPARED_BOUND: Duration = Duration::from_secs(16);
    /// The prepared statements every page view opens with are short and busy PostgreSQL's CPU
    /// alone, so a few connections carry them for any number of requests: two per core keep the
    /// cores busy (one statement runs while another's answer travels) without the backends
    /// taking turns on them. On two cores, 4 served 6-15% more pages than 16 did, with a lower
    /// p99 (`bench http`, docs/operations.md).
    pub fn prepared_connections() -> u32 {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        u32::try_from(2 * cores).unwrap_or(u32::MAX).clamp(4, 32)
    }

    pub fn new(pool: PgPool) -> Self {
        Self::with_prepared_bound(pool, Self::DEFAULT_PREPARED_BOUND)
    }

    /// `new`, with the prepared pool's bound (`serve` sets half its request deadline).
    pub fn with_prepared_bound(pool: PgPool, bound: Duration) -> Self {
        let bound = bound.max(Duration::from_millis(1));
        let options =
            (*pool.connect_options()).clone().options([("statement_timeout", format!("{}", bound.as_millis()))]);
        // Lent without a ping: the ping is a round trip of its own before each page view's one
        // statement. A connection the server closed meanwhile is found by the statement itself,
        // which `tx::on_prepared` then runs once more on a new connection.
        let prepared = sqlx::postgres::PgPoolOptions::new()
            .max_connections(Self::prepared_connections())
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
            .connect_lazy_with(options);
        Db { pool, prepared, prepared_bound: bound, lock_timeout: Self::DEFAULT_LOCK_TIMEOUT }
    }

    /// Close both pools.
    pub async fn close(&self) {
        self.prepared.close().await;
        self.pool.close().await;
    }
}

/// A database failure, classified by what a caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A lock wait passed its bound (55P03): under a RuleChange or plan-act path this is the
    /// refusal "another change is in progress".
    #[error("a lock was not available within its bound")]
    LockNotAvailable,
    /// The request's deadline ran out before or during the transaction, or no pooled connection
    /// came free within the pool's bound (the console is overloaded: to the person the same
    /// "could not finish this in time", a 503, never a 500).
    #[error("the request's deadline passed")]
    DeadlinePassed,
    /// The server broke a deadlock (40P01), which the lock order should make impossible; the
    /// server's detail names the backends involved.
    #[error("deadlock detected: {0}")]
    Deadlock(String),
    #[error(transparent)]
    Sql(sqlx::Error),
}

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        if matches!(e, sqlx::Error::PoolTimedOut) {
            tracing::warn!("no pooled database connection came free within its bound: the console is overloaded");
            return DbError::DeadlinePassed;
        }
        match sqlstate(&e).as_deref() {
            Some(LOCK_NOT_AVAILABLE) => {
                crate::metrics::note_lock_wait_refused();
                DbError::LockNotAvailable
            }
            Some(QUERY_CANCELED) => DbError::DeadlinePassed,
            Some(DEADLOCK_DETECTED) => {
                let detail = e
                    .as_database_error()
                    .and_then(|d| d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
                    .and_then(|p| p.detail())
                    .unwrap_or_default()
                    .to_string();
                DbError::Deadlock(detail)
            }
            _ => DbError::Sql(e),
        }
    }
}

/// The SQLSTATE of a database error, if it is one.
pub fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::DbError;

    #[test]
    fn waiting_past_the_pools_bound_is_a_deadline_not_an_unexpected_failure() {
        assert!(matches!(DbError::from(sqlx::Error::PoolTimedOut), DbError::DeadlinePassed));
        assert!(matches!(DbError::from(sqlx::Error::RowNotFound), DbError::Sql(_)));
    }
}
