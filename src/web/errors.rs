//! Errors a handler returns. Each becomes a status and a message a person understands; the
//! request-context middleware wraps the message in a page, or a partial for HTMX.

use actix_web::{HttpResponse, ResponseError, http::StatusCode};

use crate::db::DbError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("Page not found")]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
    #[error("{}", .0.join(" "))]
    Invalid(Vec<String>),
    #[error("Operators only")]
    Forbidden,
    #[error("This form has expired")]
    CsrfRejected,
    #[error("Another change is in progress")]
    ChangeInProgress,
    #[error("Too many failed sign-ins")]
    Throttled { retry_after_minutes: u64 },
    #[error("The request took too long")]
    Timeout,
    #[error("Something went wrong on our side")]
    Unexpected(#[source] anyhow::Error),
}

impl AppError {
    /// The title and the sentence shown to the person.
    pub fn title_and_message(&self) -> (String, String) {
        let t = self.to_string();
        let m = match self {
            AppError::NotFound => {
                "There is nothing at this address. Check the link, or go back to the start page.".into()
            }
            AppError::BadRequest(m) => m.clone(),
            AppError::Invalid(ms) => ms.join(" "),
            AppError::Forbidden => "This page is for operators. Sign in with an operator account to use it.".into(),
            AppError::CsrfRejected => {
                "The page you sent this from is out of date, so nothing was changed. Reload the page and try again."
                    .into()
            }
            AppError::ChangeInProgress => {
                "Another change to plans or rules is being applied right now, so nothing was \
                changed. Wait a moment and try again."
                    .into()
            }
            AppError::Throttled { retry_after_minutes } => format!(
                "Sign-in is paused for this account or address after too many failed attempts. Try again in \
                 {retry_after_minutes} minutes."
            ),
            AppError::Timeout => "The console could not finish this in time, so nothing was changed. Try again in a \
                moment."
                .into(),
            AppError::Unexpected(_) => {
                "The console hit an unexpected problem and changed nothing. Try again; if it keeps happening, \
                 report it with the request id below."
                    .into()
            }
        };
        (t, m)
    }
}

impl ResponseError for AppError {
    fn status_code(&self) -> StatusCode {
        match self {
            AppError::NotFound => StatusCode::NOT_FOUND,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::Forbidden | AppError::CsrfRejected => StatusCode::FORBIDDEN,
            AppError::ChangeInProgress => StatusCode::CONFLICT,
            AppError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        // The context middleware replaces this body with the rendered page or partial.
        HttpResponse::build(self.status_code()).content_type("text/plain; charset=utf-8").body(self.to_string())
    }
}

impl From<DbError> for AppError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::LockNotAvailable => AppError::ChangeInProgress,
            DbError::DeadlinePassed => AppError::Timeout,
            other => AppError::Unexpected(other.into()),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        DbError::from(e).into()
    }
}
