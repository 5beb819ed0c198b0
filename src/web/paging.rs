//! The query parameters of a list paged by key: `after=<id>`, `before=<id>` or `at=last` (or
//! none, for the first page). Anything else is a 400 that says what to ask for.

use serde::Deserialize;

use super::{
    errors::AppError,
    input::{Field, FromField},
};
use crate::store::paging::Seek;

/// The key a page starts after or ends before: a row's id, a positive number.
#[derive(Debug, Clone, Copy)]
pub struct Cursor(i64);

impl FromField for Cursor {
    fn from_field(raw: &str) -> Result<Self, String> {
        // The list names what the ids are ids of (`SeekQuery::seek` says it).
        raw.trim().parse::<i64>().ok().filter(|id| *id > 0).map(Cursor).ok_or_else(|| "not an id".into())
    }
}

/// The end of a list a page is asked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    First,
    Last,
}

impl FromField for End {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "first" => Ok(End::First),
            "last" => Ok(End::Last),
            _ => Err("not an end".into()),
        }
    }
}

#[derive(Deserialize, Default)]
pub struct SeekQuery {
    #[serde(default)]
    after: Option<Field<Cursor>>,
    #[serde(default)]
    before: Option<Field<Cursor>>,
    #[serde(default)]
    at: Option<Field<End>>,
}

impl SeekQuery {
    /// The page asked for; `noun` names what the ids are ids of, for the message.
    pub fn seek(&self, noun: &str) -> Result<Seek, AppError> {
        let id = |f: &Field<Cursor>| {
            f.ok().map(|c| c.0).ok_or_else(|| AppError::BadRequest(format!("“{}” is not {noun} id.", f.raw())))
        };
        let at = self.at.as_ref().map(|a| a.ok().copied());
        Ok(match (&self.after, &self.before, at) {
            (None, None, None | Some(Some(End::First))) => Seek::First,
            (Some(a), None, None) => Seek::After(id(a)?),
            (None, Some(b), None) => Seek::Before(id(b)?),
            (None, None, Some(Some(End::Last))) => Seek::Last,
            _ => return Err(AppError::BadRequest("Ask for one page: after=, before= or at=last.".into())),
        })
    }
}
