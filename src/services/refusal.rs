//! The refusal model every area shares. A path does what it was asked, or refuses and says why
//! (having written nothing), or fails in the database. The web layer maps this to HTTP and to a
//! form's re-render in one place (`web::refusals`); jobs and the stress tool match on it too.

use std::future::Future;

use crate::db::DbError;

/// What a service path returns when it did not do what it was asked.
///
/// One flat enum rather than a refusal nested in an error, so every caller (the web layer, the
/// jobs, the stress tool, the tests) matches the same five cases by name.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Bad input, nothing written: one (field, sentence) per problem, the field named as the form
    /// names it; a problem of the whole form (of no one field) has the field "".
    #[error("{}", .0.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>().join(" "))]
    Invalid(Vec<(String, String)>),
    /// What the request names does not exist (any more).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// The act does not apply to things as they are now (a conflict); the sentence says why.
    #[error("{0}")]
    Refused(String),
    /// 55P03 on one of the spec's change paths (`change_path`): another change holds what the
    /// path waits for past its bound.
    #[error("another change is in progress")]
    ChangeInProgress,
    /// A system outside the console (Stripe) failed; nothing was written here. `sentence` is for
    /// people; `transient` says whether trying again later may succeed (a job retries it).
    #[error("{sentence}")]
    Remote { sentence: String, transient: bool },
    /// The database failed: a deadline (the request's 503), a deadlock (tried again by the
    /// caller, `db::retry`), 55P03 on a path that is not a change path (the caller says it in the
    /// path's own words), or anything else.
    #[error(transparent)]
    Db(DbError),
}

impl ServiceError {
    /// Bad input in one field.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ServiceError::Invalid(vec![(field.to_string(), message.into())])
    }

    /// Bad input of the whole form (no one field to put it beside).
    pub fn invalid_form(message: impl Into<String>) -> Self {
        Self::invalid("", message)
    }

    /// Whether the path refused (and wrote nothing), rather than failed.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, ServiceError::Db(_))
    }

    /// A failed statement: when it broke one of the constraints `table` knows (by the name
    /// PostgreSQL reports, a trigger's `RAISE ... CONSTRAINT` included), that field's message;
    /// otherwise the database error. Each area keeps its table beside its paths.
    pub fn from_constraint(e: sqlx::Error, table: impl FnOnce(&str) -> Option<(&'static str, String)>) -> Self {
        match e.as_database_error().and_then(|d| d.constraint()).and_then(table) {
            Some((field, message)) => Self::invalid(field, message),
            None => e.into(),
        }
    }
}

impl From<DbError> for ServiceError {
    fn from(e: DbError) -> Self {
        ServiceError::Db(e)
    }
}

impl From<sqlx::Error> for ServiceError {
    fn from(e: sqlx::Error) -> Self {
        DbError::from(e).into()
    }
}

crate::deadlock_through_db!(ServiceError);

/// Run one of the spec's six change paths (a rule change, a tier add, delete or removal, a
/// reorder, a default change): there a lock wait past its bound (55P03) means another change
/// holds the rendezvous, the refusal "another change is in progress". Only the lock-bounded
/// transaction kinds (Materializing, RuleChange) can meet 55P03, so a path in Plain transactions
/// needs no wrapping. A plan act's Retry and a product's set change are not wrapped: what they
/// wait for is not only another change, and their pages say it in their own words.
pub async fn change_path<T>(work: impl Future<Output = Result<T, ServiceError>>) -> Result<T, ServiceError> {
    work.await.map_err(|e| match e {
        ServiceError::Db(DbError::LockNotAvailable) => ServiceError::ChangeInProgress,
        other => other,
    })
}

/// The problems found while parsing a form's input: every field is checked, and all of its
/// problems are told at once.
#[derive(Debug, Default)]
pub struct Problems(Vec<(String, String)>);

impl Problems {
    /// The parsed value, or None with the field's message kept.
    pub fn field<T>(&mut self, field: &str, parsed: Result<T, String>) -> Option<T> {
        parsed.map_err(|m| self.push(field, m)).ok()
    }

    pub fn push(&mut self, field: &str, message: impl Into<String>) {
        self.0.push((field.to_string(), message.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `value` when nothing was wrong, else every problem found.
    pub fn or<T>(self, value: Option<T>) -> Result<T, ServiceError> {
        match value {
            Some(v) if self.0.is_empty() => Ok(v),
            _ => Err(ServiceError::Invalid(self.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lock_wait_past_its_bound_is_a_change_in_progress_only_on_a_change_path() {
        let busy = || async { Err::<(), _>(ServiceError::Db(DbError::LockNotAvailable)) };
        assert!(matches!(change_path(busy()).await, Err(ServiceError::ChangeInProgress)));
        assert!(matches!(busy().await, Err(ServiceError::Db(DbError::LockNotAvailable))));
        let late = change_path(async { Err::<(), _>(ServiceError::Db(DbError::DeadlinePassed)) }).await;
        assert!(matches!(late, Err(ServiceError::Db(DbError::DeadlinePassed))), "a deadline stays the 503");
    }

    #[test]
    fn problems_are_all_told() {
        let mut p = Problems::default();
        let a: Option<i32> = p.field("a", Err("A is wrong.".into()));
        let b = p.field("b", Ok::<_, String>(2));
        p.push("", "The form is wrong.");
        let e = p.or(a.zip(b)).unwrap_err();
        assert!(matches!(&e, ServiceError::Invalid(v) if v.len() == 2 && v[1].0.is_empty()), "{e:?}");
        assert_eq!(Problems::default().or(Some(1)).unwrap(), 1);
    }
}
