//! Form building blocks, one of each: the CSRF field, labelled inputs and selects with their
//! hints and errors (linked by `aria-describedby`), the form-level banners, and the POST form
//! htmx swaps in place. Every page's forms are made of these.

use maud::{Markup, html};

use crate::components::notice;
use crate::pages::catalog::FormState;

/// The hidden field plain form POSTs carry; HTMX requests send the header instead.
pub fn csrf_field(token: &str) -> Markup {
    html! {
        input type="hidden" name="csrf_token" value=(token);
    }
}

/// One labelled input.
pub struct Field<'a> {
    pub name: &'a str,
    pub label: &'a str,
    /// "text", "email", "password", "number" or "date".
    pub kind: &'a str,
    pub value: &'a str,
    pub error: Option<&'a str>,
    pub required: bool,
    pub autocomplete: Option<&'a str>,
}

/// Label above the input, the error (if any) below it, linked by `aria-describedby`.
///
/// A password's value is never written back into the page, whatever the caller passes.
pub fn field(f: &Field) -> Markup {
    let error_id = format!("{}-error", f.name);
    let value = if f.kind == "password" { "" } else { f.value };
    html! {
        div.field.has-error[f.error.is_some()] {
            label for=(f.name) { (f.label) }
            input id=(f.name) name=(f.name) type=(f.kind) value=(value)
                required[f.required]
                autocomplete=[f.autocomplete]
                aria-invalid=[f.error.map(|_| "true")]
                aria-describedby=[f.error.map(|_| error_id.as_str())];
            @if let Some(error) = f.error {
                p.field-error id=(error_id) { (error) }
            }
        }
    }
}

/// Form-level errors (those that belong to no one field); nothing when there are none.
pub fn form_errors(errors: &[String]) -> Markup {
    html! {
        @if !errors.is_empty() {
            div.form-errors role="alert" {
                strong { "Please correct the following:" }
                ul {
                    @for error in errors {
                        li { (error) }
                    }
                }
            }
        }
    }
}

/// A POST form that works without JavaScript; htmx posts it to the same URL and swaps the
/// container `#{container}` with the answer.
pub fn hx_form(action: &str, container: &str, csrf: &str, body: Markup) -> Markup {
    html! {
        form method="post" action=(action) hx-post=(action) hx-target=(format!("#{container}")) hx-swap="outerHTML" {
            (csrf_field(csrf))
            (body)
        }
    }
}

/// A form that is one primary button and no fields but the CSRF token (a retry, say): it posts
/// `action` and htmx swaps `#{target}` with the answer.
pub fn button_form(action: &str, target: &str, csrf: &str, label: &str) -> Markup {
    hx_form(
        action,
        target,
        csrf,
        html! {
            div.form-actions {
                button.btn.btn-primary type="submit" { (label) }
            }
        },
    )
}

/// The form's notice (good news) and its errors that belong to no one field.
pub fn form_banners(f: &FormState) -> Markup {
    html! {
        @if let Some(message) = &f.notice {
            (notice(message))
        }
        (form_errors(&f.errors))
    }
}

/// A labelled input with an optional placeholder and hint. A number input takes whole numbers
/// from 1.
pub struct Input<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub label: &'a str,
    /// "text", "number", "datetime-local", ...
    pub kind: &'a str,
    pub value: &'a str,
    pub error: Option<&'a str>,
    pub required: bool,
    pub placeholder: Option<&'a str>,
    pub hint: Option<&'a str>,
}

pub fn input_field(f: &Input) -> Markup {
    let error_id = format!("{}-error", f.id);
    let hint_id = format!("{}-hint", f.id);
    let described = described_by(f.hint.map(|_| hint_id.as_str()), f.error.map(|_| error_id.as_str()));
    let number = f.kind == "number";
    html! {
        div.field.has-error[f.error.is_some()] {
            label for=(f.id) { (f.label) }
            input id=(f.id) name=(f.name) type=(f.kind) value=(f.value)
                min=[number.then_some("1")]
                step=[number.then_some("1")]
                inputmode=[number.then_some("numeric")]
                required[f.required]
                placeholder=[f.placeholder]
                aria-invalid=[f.error.map(|_| "true")]
                aria-describedby=[described];
            @if let Some(hint) = f.hint {
                p.field-hint id=(hint_id) { (hint) }
            }
            @if let Some(error) = f.error {
                p.field-error id=(error_id) { (error) }
            }
        }
    }
}

pub struct Select<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub label: &'a str,
    /// (value, label) pairs.
    pub options: &'a [(&'a str, &'a str)],
    pub selected: &'a str,
    pub error: Option<&'a str>,
    pub required: bool,
    pub hint: Option<&'a str>,
}

pub fn select_field(f: &Select) -> Markup {
    let error_id = format!("{}-error", f.id);
    let hint_id = format!("{}-hint", f.id);
    let described = described_by(f.hint.map(|_| hint_id.as_str()), f.error.map(|_| error_id.as_str()));
    html! {
        div.field.has-error[f.error.is_some()] {
            label for=(f.id) { (f.label) }
            select id=(f.id) name=(f.name)
                required[f.required]
                aria-invalid=[f.error.map(|_| "true")]
                aria-describedby=[described] {
                @for (value, label) in f.options {
                    option value=(value) selected[*value == f.selected] { (label) }
                }
            }
            @if let Some(hint) = f.hint {
                p.field-hint id=(hint_id) { (hint) }
            }
            @if let Some(error) = f.error {
                p.field-error id=(error_id) { (error) }
            }
        }
    }
}

pub(crate) fn described_by(hint: Option<&str>, error: Option<&str>) -> Option<String> {
    match (hint, error) {
        (Some(h), Some(e)) => Some(format!("{h} {e}")),
        (Some(one), None) | (None, Some(one)) => Some(one.to_owned()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_field_is_hidden_and_escaped() {
        assert_eq!(csrf_field(r#"x"y"#).into_string(), r#"<input type="hidden" name="csrf_token" value="x&quot;y">"#);
    }

    fn email_field<'a>(error: Option<&'a str>) -> Field<'a> {
        Field {
            name: "email",
            label: "Email",
            kind: "email",
            value: "a@b.c",
            error,
            required: true,
            autocomplete: Some("username"),
        }
    }
    #[test]
    fn field_without_error_has_label_and_input() {
        let out = field(&email_field(None)).into_string();
        assert_eq!(
            out,
            r#"<div class="field"><label for="email">Email</label><input id="email" name="email" type="email" value="a@b.c" required autocomplete="username"></div>"#
        );
    }
    #[test]
    fn field_with_error_is_marked_invalid_and_described() {
        let out = field(&email_field(Some("Not an <email>"))).into_string();
        assert!(out.contains(r#"<div class="field has-error">"#));
        assert!(out.contains(r#"aria-invalid="true" aria-describedby="email-error""#));
        assert!(out.contains(r#"<p class="field-error" id="email-error">Not an &lt;email&gt;</p>"#));
    }
    #[test]
    fn password_value_is_never_echoed() {
        let f = Field {
            name: "password",
            label: "Password",
            kind: "password",
            value: "hunter2",
            error: None,
            required: false,
            autocomplete: None,
        };
        let out = field(&f).into_string();
        assert!(!out.contains("hunter2"));
        assert!(out.contains(r#"type="password" value="""#));
        assert!(!out.contains("required"));
        assert!(!out.contains("autocomplete"));
    }
    #[test]
    fn form_errors_empty_or_listed() {
        assert_eq!(form_errors(&[]).into_string(), "");
        let out = form_errors(&["Bad <date>".into(), "Too many".into()]).into_string();
        assert!(out.starts_with(r#"<div class="form-errors" role="alert">"#));
        assert!(out.contains("<li>Bad &lt;date&gt;</li><li>Too many</li>"));
    }
}
