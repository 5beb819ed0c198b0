//! sqlx queries, grouped by table family. Services call these; handlers never do.

pub mod account_admin;
pub mod account_events;
pub mod account_tokens;
pub mod accounts;
pub mod billing;
pub mod billing_reads;
pub mod catalog;
pub mod desired_state;
pub mod domains;
pub mod entitlements;
pub mod fedwiki;
pub mod fedwiki_maintenance;
pub mod grants;
pub mod invitations;
pub mod job_overview;
pub mod jobs;
pub mod mail_limits;
pub mod members;
pub mod metrics;
pub mod paging;
pub mod plan_acts;
pub mod plan_changes;
pub mod rule_changes;
pub mod signup;
pub mod site_entry;
pub mod site_pages;
pub mod topology;

/// A duration as the bigint of milliseconds the queries multiply `interval '1 millisecond'` by
/// (the largest when it does not fit).
fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A SQL function's JSON document (a page read in one statement), decoded; one that does not
/// decode is sqlx's decode error, as a column's would be.
fn json_document<T: serde::de::DeserializeOwned>(json: &str) -> sqlx::Result<T> {
    serde_json::from_str(json).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}
