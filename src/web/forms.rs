//! What every form handler shares: the submitted form read as a typed struct, where a successful
//! post goes, and the partial a refused HTMX post gets back.
//!
//! A form is a `#[derive(Deserialize, Validate)]` struct of its fields, each a `Field<T>` (or,
//! for the few plain texts, a `String`) with `#[serde(default)]`: a field that was not sent reads
//! "", so a missing field gets the same message as an empty one (`input` says how a field is
//! read and checked). Every form struct also has
//! `#[serde(deny_unknown_fields)]`, so a field it does not name (a misspelling, a page older than
//! the console) is refused with a 422 that names it, before anything is read or written. Two
//! fields never reach the struct: the CSRF token (`csrf_token`), which every POST carries and the
//! route's guard has checked already, is taken out first; and htmx sends a form's own inputs and
//! nothing else (the forms have no named buttons and no `hx-vals`), so nothing else needs
//! allowing. A form whose field names carry data (`rule.<key>`, `rank.<product id>`) collects
//! them with `#[serde(flatten)]` (which `deny_unknown_fields` does not combine with) and its parse
//! refuses any other name with `unknown_field`.

use std::{fmt, ops::Deref};

use actix_web::{FromRequest, HttpRequest, HttpResponse, dev::Payload, http::StatusCode, web};
use futures_util::future::LocalBoxFuture;
use serde::de::{DeserializeOwned, value::MapDeserializer};

use super::{errors::AppError, identity::CSRF_FIELD, render};
use crate::{
    db::{Db, retry::once_more_after_deadlock},
    services::ServiceError,
};

/// A submitted urlencoded form: its fields as `T`, and what was sent, for drawing the form again.
pub struct Form<T> {
    fields: T,
    sent: Vec<(String, String)>,
}

impl<T> Form<T> {
    /// The fields as sent (the CSRF token left out), for a refused form's re-render.
    pub fn values(&self) -> Vec<(String, String)> {
        self.sent.clone()
    }

    /// The fields, to be turned into the handler's command.
    pub fn into_inner(self) -> T {
        self.fields
    }
}

impl<T> Deref for Form<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.fields
    }
}

/// Read `T` from a form's (name, value) pairs: a body's, or a preview's query.
pub fn read<T: DeserializeOwned>(sent: Vec<(String, String)>) -> Result<Form<T>, ServiceError> {
    let sent: Vec<(String, String)> = sent.into_iter().filter(|(k, _)| k != CSRF_FIELD).collect();
    // No field of the console holds a control character other than a line break or a tab, and
    // PostgreSQL refuses a NUL in text: such a form is refused whole, before it is read.
    let control = |t: &str| t.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'));
    if let Some((name, _)) = sent.iter().find(|(k, v)| control(k) || control(v)) {
        let name = if control(name) { "a field".to_string() } else { format!("the field “{name}”") };
        return Err(ServiceError::invalid_form(format!(
            "The form was not read: {name} holds a control character, so nothing was changed. Remove it and send \
             the form again."
        )));
    }
    let pairs = sent.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    match T::deserialize(MapDeserializer::<_, Unreadable>::new(pairs)) {
        Ok(fields) => Ok(Form { fields, sent }),
        Err(Unreadable::Unknown(name)) => Err(unknown_field(&name)),
        Err(Unreadable::Twice(name)) => Err(ServiceError::invalid_form(format!(
            "The field “{name}” was sent twice, so nothing was changed. Reload the page and try again."
        ))),
        Err(Unreadable::Other(m)) => {
            Err(ServiceError::invalid_form(format!("The form could not be read ({m}), so nothing was changed.")))
        }
    }
}

/// The refusal of a field the form does not have.
pub fn unknown_field(name: &str) -> ServiceError {
    ServiceError::invalid_form(format!(
        "This form has no field “{name}”, so nothing was changed. Reload the page and try again."
    ))
}

impl<T: DeserializeOwned + 'static> FromRequest for Form<T> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        // The body as pairs first (the app's FormConfig bounds its size and answers a body that
        // is not a form), then the struct from the pairs.
        let pairs = web::Form::<Vec<(String, String)>>::from_request(req, payload);
        Box::pin(async move {
            let sent = pairs.await?.into_inner();
            read(sent).map_err(|e| AppError::from(e).into())
        })
    }
}

/// Why a form's pairs did not make its struct, kept apart so the refusal can name the field.
#[derive(Debug)]
enum Unreadable {
    Unknown(String),
    Twice(String),
    Other(String),
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::Unknown(n) => write!(f, "unknown field {n}"),
            Unreadable::Twice(n) => write!(f, "field {n} sent twice"),
            Unreadable::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Unreadable {}

impl serde::de::Error for Unreadable {
    fn custom<M: fmt::Display>(m: M) -> Self {
        Unreadable::Other(m.to_string())
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        Unreadable::Unknown(field.to_string())
    }

    fn duplicate_field(field: &'static str) -> Self {
        Unreadable::Twice(field.to_string())
    }
}

/// A page's optional query as `T`: what the address asks for, or the defaults when it carries
/// nothing readable, since a page shows itself rather than refuse an optional filter or note.
pub fn query_or_default<T: DeserializeOwned + Default>(req: &HttpRequest) -> T {
    web::Query::<T>::from_query(req.query_string()).map(|q| q.into_inner()).unwrap_or_default()
}

/// A form's path: the command its parse made, run once more after a deadlock. A parse refusal
/// is the path's refusal, so the handler answers both the same way.
pub async fn run_parsed<C, T>(
    db: &Db,
    path: &str,
    parsed: Result<C, ServiceError>,
    mut work: impl AsyncFnMut(&C) -> Result<T, ServiceError>,
) -> Result<T, ServiceError> {
    let command = parsed?;
    once_more_after_deadlock(db, path, async || work(&command).await).await
}

/// After a successful post: to `to` (HTMX follows `HX-Redirect`; a plain form a 303).
pub fn after_post(req: &HttpRequest, to: &str) -> HttpResponse {
    if render::is_htmx(req) {
        HttpResponse::Ok().insert_header(("HX-Redirect", to.to_string())).finish()
    } else {
        see_other(to)
    }
}

/// After a Retry on a page that shows its progress: a plain form back to the page (a 303); HTMX
/// gets the progress, read after the act, to swap in place.
pub async fn after_retry(
    req: &HttpRequest,
    page: &str,
    progress: impl AsyncFnOnce() -> Result<views::Markup, AppError>,
) -> Result<HttpResponse, AppError> {
    if !render::is_htmx(req) {
        return Ok(see_other(page));
    }
    Ok(partial(StatusCode::OK, progress().await?))
}

/// To `to`, for a plain request (a 303).
pub fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header(("Location", to.to_string())).finish()
}

/// A piece of a page, as an HTMX request swaps it in.
pub fn partial(status: StatusCode, m: views::Markup) -> HttpResponse {
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(m.into_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Revoke {
        #[serde(default)]
        reason: String,
    }

    #[derive(Deserialize)]
    struct Rules {
        #[serde(default)]
        reason: String,
        #[serde(flatten)]
        rules: BTreeMap<String, String>,
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn refusal<T: DeserializeOwned>(p: &[(&str, &str)]) -> String {
        match read::<T>(pairs(p)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{p:?} was read"),
        }
    }

    #[test]
    fn a_form_is_read_without_its_csrf_token_and_a_missing_field_reads_empty() {
        let f = read::<Revoke>(pairs(&[("reason", "done"), ("csrf_token", "t")])).unwrap();
        assert_eq!(f.reason, "done");
        assert_eq!(f.values(), pairs(&[("reason", "done")]));
        assert_eq!(read::<Revoke>(pairs(&[("csrf_token", "t")])).unwrap().reason, "");
    }

    #[test]
    fn a_control_character_in_a_name_or_value_refuses_the_form_but_line_breaks_and_tabs_do_not() {
        assert!(refusal::<Revoke>(&[("name", "a\0b")]).contains("the field “name” holds a control character"));
        assert!(refusal::<Revoke>(&[("na\u{1}me", "x")]).contains("a field holds a control character"));
        assert!(read::<Revoke>(pairs(&[("reason", "two\r\nlines\tand a tab")])).is_ok());
    }

    #[test]
    fn a_misspelt_or_repeated_field_is_refused_by_name() {
        assert!(refusal::<Revoke>(&[("reasn", "x")]).contains("This form has no field “reasn”"));
        assert!(refusal::<Revoke>(&[("reason", "a"), ("reason", "b")]).contains("“reason” was sent twice"));
    }

    #[test]
    fn fields_named_by_data_are_collected() {
        let f = read::<Rules>(pairs(&[("rule.a.b", "1"), ("reason", "r"), ("csrf_token", "t")])).unwrap();
        assert_eq!(f.reason, "r");
        assert_eq!(f.rules, BTreeMap::from([("rule.a.b".to_string(), "1".to_string())]));
    }
}
