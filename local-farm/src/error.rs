//! The farm API's refusals, in the stand-ins' one error shape (`standin_http::ApiError`:
//! `{"error": "<a sentence for a person>"}` with a 4xx/5xx status).

use actix_web::http::StatusCode;
use standin_http::ApiError;

pub fn no_token() -> ApiError {
    ApiError::unauthorized("This call needs the farm's token as `Authorization: Bearer <token>`.")
}

pub fn no_site(domain: &str) -> ApiError {
    ApiError::not_found(format!("There is no site {domain} on this farm."))
}

pub fn taken(domain: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, format!("The site {domain} already exists and belongs to another owner."))
}

/// The farm could not write its state or a site's folder.
pub fn storage(what: &str, e: &std::io::Error) -> ApiError {
    tracing::error!(error = %e, "{what}");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("The farm could not {what}: {e}."))
}
