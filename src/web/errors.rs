//! Errors a handler returns. Each becomes a status and a message a person understands; the
//! request-context middleware wraps the message in a page, or a partial for HTMX. A service's
//! refusal becomes one of these in `refusals.rs`, the one place that maps them.

use actix_web::{HttpResponse, ResponseError, http::StatusCode};

use crate::db::{DbError, tx::Saved};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("Page not found")]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
    #[error("{}", .0.join(" "))]
    Invalid(Vec<String>),
    /// The act does not apply to things as they are now (a service's `Refused`), outside a form.
    #[error("{0}")]
    Refused(String),
    #[error("Operators only")]
    Forbidden,
    #[error("Sign in to continue")]
    SignInRequired,
    #[error("This form has expired")]
    CsrfRejected,
    /// 55P03 on one of the spec's change paths (rule change, tier add/delete/removal, reorder,
    /// default change).
    #[error("Another change is in progress")]
    ChangeInProgress,
    /// 55P03 on any other path, in that path's own words.
    #[error("Busy right now")]
    Busy(String),
    #[error("Too many failed sign-ins")]
    Throttled { retry_after_minutes: u64 },
    #[error("The request took too long")]
    Timeout,
    /// A system outside the console (Stripe) did not do its part; the sentence says what now.
    #[error("A connected service did not answer")]
    Upstream(String),
    /// A system outside the console (Stripe) gave no answer in time, or asked to be called less
    /// (429, 5xx, a timeout): worth trying again later; the sentence says what is known.
    #[error("A connected service is not answering right now")]
    Unavailable(String),
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
            AppError::Refused(m) => m.clone(),
            AppError::Forbidden => "This page is for operators. Sign in with an operator account to use it.".into(),
            AppError::SignInRequired => "Sign in to see this page.".into(),
            AppError::Busy(m) => m.clone(),
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
            AppError::Timeout => Self::timeout_message(Saved::Nothing),
            AppError::Upstream(m) | AppError::Unavailable(m) => m.clone(),
            AppError::Unexpected(_) => {
                "The console hit an unexpected problem and changed nothing. Try again; if it keeps happening, \
                 report it with the request id below."
                    .into()
            }
        };
        (t, m)
    }
}

impl AppError {
    /// What a request stopped at its deadline tells the person, by what it had saved.
    pub fn timeout_message(saved: Saved) -> String {
        match saved {
            Saved::Nothing => {
                "The console could not finish this in time, so nothing was changed. Try again in a moment.".into()
            }
            Saved::Partly => "The console could not finish this in time. Part of it was saved: reload the page to \
                see where things stand before you try again."
                .into(),
            Saved::Unknown => "The console could not confirm in time whether this was saved. Reload the page to \
                see where things stand before you try again."
                .into(),
        }
    }
}

impl ResponseError for AppError {
    fn status_code(&self) -> StatusCode {
        match self {
            AppError::NotFound => StatusCode::NOT_FOUND,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::Forbidden | AppError::CsrfRejected => StatusCode::FORBIDDEN,
            AppError::SignInRequired => StatusCode::UNAUTHORIZED,
            AppError::Refused(_) | AppError::ChangeInProgress | AppError::Busy(_) => StatusCode::CONFLICT,
            AppError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::Timeout | AppError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Upstream(_) => StatusCode::BAD_GATEWAY,
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
            // A path that is not one of the spec's change paths and did not say it in its own words.
            DbError::LockNotAvailable => AppError::Busy(
                "Something this needs is being changed by another request right now, so nothing was changed. \
                 Try again in a moment."
                    .into(),
            ),
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
