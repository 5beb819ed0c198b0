//! The database's clock: what a service takes as `now` where every replica must agree on it (a
//! subscription's observation, a quote's effective time, a domain claim's deadlines).

use chrono::{DateTime, Utc};

use crate::{db::Db, services::ServiceError};

/// One prepared statement of one round trip: a read transaction would add BEGIN and its end.
pub async fn now(db: &Db) -> Result<DateTime<Utc>, ServiceError> {
    Ok(crate::db::tx::on_prepared(db, async |c| crate::store::billing::clock(c).await).await?)
}
