//! How a service's refusal becomes a job's failure: retried with backoff, or final.

use super::job::JobError;
use crate::services::ServiceError;

/// A failure of a job of the console's own (a grant's start or end): the database's is tried
/// again (a lock wait past its bound, a deadline), as is another change in progress; a refusal
/// is the job's answer for good.
pub fn grant_failure(e: ServiceError) -> JobError {
    match e {
        ServiceError::Db(d) => JobError::Db(d),
        ServiceError::ChangeInProgress => JobError::retry(e.to_string()),
        other => JobError::Permanent(other.to_string()),
    }
}

/// A job's failure in a system outside (Stripe, the farm, a connection's endpoint): it not
/// answering, the database, or another change in progress is tried again with backoff; anything
/// else is the job's answer for good.
pub fn remote_failure(e: ServiceError) -> JobError {
    match e {
        ServiceError::Db(d) => JobError::Db(d),
        ServiceError::Remote { transient: true, .. } | ServiceError::ChangeInProgress => JobError::retry(e.to_string()),
        other => JobError::Permanent(other.to_string()),
    }
}
