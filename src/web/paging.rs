//! The query parameters of a list paged by key: `after=<id>`, `before=<id>` or `at=last` (or
//! none, for the first page). Anything else is a 400 that says what to ask for.

use serde::Deserialize;

use super::errors::AppError;
use crate::store::paging::Seek;

#[derive(Deserialize, Default)]
pub struct SeekQuery {
    after: Option<String>,
    before: Option<String>,
    at: Option<String>,
}

impl SeekQuery {
    /// The page asked for; `noun` names what the ids are ids of, for the message.
    pub fn seek(&self, noun: &str) -> Result<Seek, AppError> {
        let id = |raw: &str| {
            raw.trim()
                .parse::<i64>()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| AppError::BadRequest(format!("“{raw}” is not {noun} id.")))
        };
        Ok(match (self.after.as_deref(), self.before.as_deref(), self.at.as_deref()) {
            (None, None, None | Some("first")) => Seek::First,
            (Some(a), None, None) => Seek::After(id(a)?),
            (None, Some(b), None) => Seek::Before(id(b)?),
            (None, None, Some("last")) => Seek::Last,
            _ => return Err(AppError::BadRequest("Ask for one page: after=, before= or at=last.".into())),
        })
    }
}
