//! Reads about accounts and organizations for the home and overview pages.

use crate::{
    db::{Db, DbError},
    ids::AccountId,
    store::{
        accounts::{self, AccountSummary, Membership},
        job_overview::{self, FailedJob, JobCounts},
    },
};

#[tracing::instrument(name = "Read an account's memberships", skip_all, fields(account_id = account_id.0))]
pub async fn memberships(db: &Db, account_id: AccountId) -> Result<Vec<Membership>, DbError> {
    let mut conn = db.read().await?;
    Ok(accounts::memberships(&mut conn, account_id).await?)
}

pub struct OperatorOverview {
    pub accounts: Vec<AccountSummary>,
    pub organizations: i64,
    pub jobs: JobCounts,
    pub failed_jobs: Vec<FailedJob>,
}

#[tracing::instrument(name = "Read the operations overview", skip_all)]
pub async fn operator_overview(db: &Db) -> Result<OperatorOverview, DbError> {
    let mut conn = db.read().await?;
    Ok(OperatorOverview {
        accounts: accounts::account_summaries(&mut conn, 200).await?,
        organizations: accounts::organization_count(&mut conn).await?,
        jobs: job_overview::job_counts(&mut conn).await?,
        failed_jobs: job_overview::recent_failed_jobs(&mut conn, 20).await?,
    })
}

/// An account that has not proved it reads its email may look around, but not buy, create
/// sites or invite: those acts call this first, before anything is read or written.
pub fn must_be_verified(
    who: &crate::store::accounts::SessionAccount,
    to: &str,
) -> Result<(), crate::services::refusal::ServiceError> {
    if who.verified {
        return Ok(());
    }
    Err(crate::services::refusal::ServiceError::Refused(format!(
        "Verify your email address first to {to}: open the link in the mail sent to {}, or send it again from the banner above.",
        who.email
    )))
}
