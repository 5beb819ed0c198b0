//! Input at the edge: a form's (or a path's, or a query's) fields read into types, every bad
//! field told at once in the console's own words, before a handler acts.
//!
//! A form struct's fields are `Field<T>`: each deserializes from any text, never failing, into
//! the text as sent and `T`'s parse of it (`FromField`), so an empty or bad value becomes a
//! field message, never serde's generic 400. The struct derives `validator::Validate`: a typed
//! field is checked with `#[validate(custom(function = read))]` (its type's parse is its rule,
//! kept in one place beside the type), and the few plain-text fields with validator's own
//! declarative rules (length, range, email, url). `problems` runs every check and gives the
//! messages in the order the struct names its fields; the form's conversion into its command
//! (`TryFrom`, or a `command` method where the command needs more than the form, as who acts)
//! takes the parsed values out with `Field::into_ok`. A message may say `{value}`: it stands
//! for the text that was sent.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{self, DeserializeOwned, Visitor},
};
use validator::{Validate, ValidationError};

use crate::services::refusal::Problems;

/// How a field's text becomes a value: the value, or why not in the console's words.
pub trait FromField: Sized {
    fn from_field(raw: &str) -> Result<Self, String>;
}

/// An optional field: blank (or only spaces) is None; anything else must parse.
impl<T: FromField> FromField for Option<T> {
    fn from_field(raw: &str) -> Result<Self, String> {
        if raw.trim().is_empty() { Ok(None) } else { T::from_field(raw).map(Some) }
    }
}

/// A key the page wrote (a site's id in a form): any text but blank, which the page never
/// sends; whether it names something is the path's to say.
macro_rules! written_key {
    ($($t:ty,)+) => {$(
        impl FromField for $t {
            fn from_field(raw: &str) -> Result<Self, String> {
                match raw.trim() {
                    "" => Err("Choose one from the page.".into()),
                    key => Ok(<$t>::from(key)),
                }
            }
        }
    )+};
}

written_key! {
    crate::ids::SiteId,
}

/// A row's id the page wrote: a positive whole number. Forms say what to choose in their own
/// words (the attribute's `message`), as a chooser's first option is blank.
macro_rules! row_id {
    ($($t:ty,)+) => {$(
        impl FromField for $t {
            fn from_field(raw: &str) -> Result<Self, String> {
                match raw.trim().parse::<i64>() {
                    Ok(id) if id > 0 => Ok(<$t>::from(id)),
                    _ => Err("“{value}” is not one of the page's choices.".into()),
                }
            }
        }
    )+};
}

row_id! {
    crate::ids::AccountId,
    crate::ids::OrganizationId,
    crate::ids::OrgTypeId,
    crate::ids::PoolId,
    crate::ids::ProductId,
    crate::ids::EntitlementSetId,
    crate::ids::LadderId,
    crate::ids::GrantId,
    crate::ids::SubscriptionId,
    crate::ids::RuleChangeId,
    crate::ids::PlanActId,
    crate::ids::PriceId,
    crate::ids::RequestId,
    crate::ids::ConnectionId,
}

/// A field as sent, and its parse.
pub struct Field<T> {
    raw: String,
    read: Result<T, String>,
}

impl<T: FromField> Field<T> {
    /// The field holding `raw`, parsed.
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let read = T::from_field(&raw);
        Field { raw, read }
    }
}

impl<T> Field<T> {
    /// The text as it was sent.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The value, if the text parsed.
    pub fn ok(&self) -> Option<&T> {
        self.read.as_ref().ok()
    }

    /// The value, if the text parsed (its message was told by `problems`).
    pub fn into_ok(self) -> Option<T> {
        self.read.ok()
    }
}

impl<T: Clone> Clone for Field<T> {
    fn clone(&self) -> Self {
        Field { raw: self.raw.clone(), read: self.read.clone() }
    }
}

impl<T> fmt::Debug for Field<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.raw, f)
    }
}

/// A field that was not sent reads as an empty one, so it gets the same message.
impl<T: FromField> Default for Field<T> {
    fn default() -> Self {
        Field::new("")
    }
}

impl<'de, T: FromField> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Field::new(String::deserialize(d)?))
    }
}

/// As the text sent (validator records it as the message's `{value}`).
impl<T> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

/// The check a typed field carries: `#[validate(custom(function = read))]`, optionally with the
/// form's own `message` over the type's.
pub fn read<T>(field: &Field<T>) -> Result<(), ValidationError> {
    match &field.read {
        Ok(_) => Ok(()),
        Err(m) => Err(ValidationError::new("unreadable").with_message(Cow::Owned(m.clone()))),
    }
}

/// Every problem `form`'s checks find, in the order its struct names its fields, in words.
pub fn problems<F: Validate + DeserializeOwned>(form: &F) -> Problems {
    let mut problems = Problems::default();
    let Err(errors) = form.validate() else {
        return problems;
    };
    let order = field_names::<F>();
    let mut fields: Vec<_> = errors.field_errors().into_iter().collect();
    fields
        .sort_by_key(|(name, _)| (order.iter().position(|n| *n == name.as_ref()).unwrap_or(usize::MAX), name.clone()));
    for (name, errors) in fields {
        for e in errors {
            problems.push(&name, words(e));
        }
    }
    problems
}

/// A check's message: the form's or the type's own, `{value}` filled in; validator's plain rules
/// say theirs when the form gave none.
fn words(e: &ValidationError) -> String {
    let sent = e.params.get("value").and_then(|v| v.as_str()).unwrap_or_default();
    let param = |p: &str| e.params.get(p).map(|v| v.to_string());
    let message = match (&e.message, e.code.as_ref()) {
        (Some(m), _) => m.to_string(),
        (None, "length") => match (param("min"), param("max")) {
            (Some(min), Some(max)) => format!("Write {min} to {max} characters."),
            (Some(min), None) => format!("Write at least {min} characters."),
            (None, Some(max)) => format!("Write at most {max} characters."),
            (None, None) => "This is not the right length.".into(),
        },
        (None, "range") => match (param("min"), param("max")) {
            (Some(min), Some(max)) => format!("Give a number from {min} to {max}."),
            (Some(min), None) => format!("Give a number of at least {min}."),
            (None, Some(max)) => format!("Give a number of at most {max}."),
            (None, None) => "This number is out of range.".into(),
        },
        (None, "email") => "“{value}” is not an email address.".into(),
        (None, "url") => "“{value}” is not a web address.".into(),
        (None, _) => "“{value}” cannot be used here.".into(),
    };
    message.replace("{value}", sent)
}

/// The names a struct's `Deserialize` asks for, in its order (an empty list for a struct that
/// collects its fields with `flatten`): read by asking it to deserialize from a deserializer
/// that notes the names and stops.
fn field_names<F: DeserializeOwned>() -> &'static [&'static str] {
    struct Names(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for &mut Names {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = Names(None);
    let _ = F::deserialize(&mut names);
    names.0.unwrap_or(&[])
}

/// A page's query checked as a form is (its struct derives `Validate`), but refused whole: a
/// filter the page cannot read is a 400 whose message says every problem, as pages answer a bad
/// address.
pub fn refuse_bad_query<F: Validate + DeserializeOwned>(query: &F) -> Result<(), crate::web::errors::AppError> {
    problems(query).or(Some(())).map_err(|e| crate::web::errors::AppError::BadRequest(e.to_string()))
}

/// The domain types several pages' forms share: each reads as its own `parse` says, in the
/// words the type keeps beside its rule (a form gives its own with the attribute's `message`).
macro_rules! parsed {
    ($($t:ty,)+) => {$(
        impl FromField for $t {
            fn from_field(raw: &str) -> Result<Self, String> {
                <$t>::parse(raw)
            }
        }
    )+};
}

parsed! {
    crate::services::grants::Reason,
    crate::services::grants::EmailDomain,
    crate::services::organizations::OrgName,
    crate::services::auth::Email,
    crate::services::auth::Password,
    crate::services::auth::NewPassword,
    crate::services::tokens::Token,
}

/// A whole number a form writes (a position, a rank): what it means, and so what to say of a
/// bad one, is the form's (`message`, or its conversion's words).
impl FromField for i32 {
    fn from_field(raw: &str) -> Result<Self, String> {
        raw.trim().parse().map_err(|_| "“{value}” is not a whole number.".into())
    }
}

/// Issue 38, members: a member's role, and an invitation's id in a path or form.
impl FromField for crate::services::members::Role {
    fn from_field(raw: &str) -> Result<Self, String> {
        crate::services::members::Role::parse(raw)
    }
}

impl FromField for crate::ids::InvitationId {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw.trim().parse::<i64>() {
            Ok(id) if id > 0 => Ok(crate::ids::InvitationId(id)),
            _ => Err("“{value}” is not one of the page's invitations.".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count(u8);

    impl FromField for Count {
        fn from_field(raw: &str) -> Result<Self, String> {
            raw.trim().parse().map(Count).map_err(|_| "“{value}” is not a count.".into())
        }
    }

    #[derive(Deserialize, Default, Validate)]
    #[serde(default, deny_unknown_fields)]
    struct Order {
        #[validate(custom(function = read, message = "Choose how many."))]
        many: Field<Count>,
        #[validate(custom(function = read))]
        extra: Field<Option<Count>>,
        #[validate(length(min = 1, max = 5))]
        note: String,
    }

    fn form(p: &[(&str, &str)]) -> Order {
        crate::web::forms::read::<Order>(p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
            .map(|f| f.into_inner())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_bad_or_missing_field_reads_as_its_text_and_every_problem_is_told_in_field_order() {
        let f = form(&[("note", "far too long"), ("extra", "x"), ("many", "")]);
        assert_eq!(f.extra.raw(), "x");
        let told = format!("{:?}", problems(&f).or(Some(())).unwrap_err());
        let at = |s: &str| told.find(s).unwrap_or_else(|| panic!("{s} not in {told}"));
        assert!(
            at("Choose how many.") < at("“x” is not a count.")
                && at("“x” is not a count.") < at("Write 1 to 5 characters.")
        );
        let f = form(&[("note", "hi"), ("many", " 3 ")]);
        assert!(problems(&f).is_empty());
        assert_eq!(f.many.into_ok().map(|c| c.0), Some(3));
        assert!(f.extra.into_ok().is_some_and(|e| e.is_none()), "a blank optional field is None");
    }

    #[test]
    fn a_struct_names_its_fields_in_order() {
        assert_eq!(field_names::<Order>(), ["many", "extra", "note"]);
    }
}
