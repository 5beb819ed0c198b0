//! Form building blocks, one of each: the CSRF field, labelled inputs, selects and checkboxes
//! with their hints and errors (linked by `aria-describedby`), the form-level banners, and the
//! POST form htmx swaps in place. Every page's forms are made of these.

use maud::{Markup, html};

use crate::components::notice;

/// The hidden field plain form POSTs carry; HTMX requests send the header instead.
pub fn csrf_field(token: &str) -> Markup {
    html! {
        input type="hidden" name="csrf_token" value=(token);
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

/// A form answered in place: its container `#{id}` holds `lead` (a heading, or what the form
/// does), the form's banners, then an [`hx_form`] that posts `action` and swaps the container.
pub fn form_panel(id: &str, action: &str, csrf: &str, f: &FormState, lead: Markup, fields: Markup) -> Markup {
    html! {
        div.form-panel id=(id) {
            (lead)
            (form_banners(f))
            (hx_form(action, id, csrf, fields))
        }
    }
}

/// A form's actions row holding its one button, the primary submit.
pub fn submit(label: &str) -> Markup {
    html! {
        div.form-actions {
            button.btn.btn-primary type="submit" { (label) }
        }
    }
}

/// A form that is one primary button and no fields but the CSRF token (a retry, say): it posts
/// `action` and htmx swaps `#{target}` with the answer.
pub fn button_form(action: &str, target: &str, csrf: &str, label: &str) -> Markup {
    hx_form(action, target, csrf, submit(label))
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
    /// "text", "email", "password", "number", "datetime-local", ...
    pub kind: &'a str,
    pub value: &'a str,
    pub error: Option<&'a str>,
    pub required: bool,
    pub placeholder: Option<&'a str>,
    pub hint: Option<&'a str>,
    pub autocomplete: Option<&'a str>,
}

impl<'a> Input<'a> {
    /// An optional text input holding `value`, with no error, placeholder, hint or autocomplete
    /// (a caller sets those, and another kind, over it).
    pub fn text(id: &'a str, name: &'a str, label: &'a str, value: &'a str) -> Self {
        Input {
            id,
            name,
            label,
            kind: "text",
            value,
            error: None,
            required: false,
            placeholder: None,
            hint: None,
            autocomplete: None,
        }
    }
}

/// Label above the input, the hint and error (if any) below it, linked by `aria-describedby`.
///
/// A password's value is never written back into the page, whatever the caller passes.
pub fn input_field(f: &Input) -> Markup {
    let notes = Notes::new(f.id, f.hint, f.error);
    let number = f.kind == "number";
    let value = if f.kind == "password" { "" } else { f.value };
    labelled(
        f.id,
        f.label,
        &notes,
        html! {
            input id=(f.id) name=(f.name) type=(f.kind) value=(value)
                min=[number.then_some("1")]
                step=[number.then_some("1")]
                inputmode=[number.then_some("numeric")]
                required[f.required]
                placeholder=[f.placeholder]
                autocomplete=[f.autocomplete]
                aria-invalid=[notes.invalid()]
                aria-describedby=[notes.described_by()];
        },
    )
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
    let notes = Notes::new(f.id, f.hint, f.error);
    labelled(
        f.id,
        f.label,
        &notes,
        html! {
            select id=(f.id) name=(f.name)
                required[f.required]
                aria-invalid=[notes.invalid()]
                aria-describedby=[notes.described_by()] {
                @for (value, label) in f.options {
                    option value=(value) selected[*value == f.selected] { (label) }
                }
            }
        },
    )
}

/// A select's options over records: first `blank` with no value ("— none —", "— choose … —"),
/// then each record as its id and name. It owns the strings; [`IdOptions::pairs`] lends them to
/// a [`Select`].
pub(crate) struct IdOptions(Vec<(String, String)>);

impl IdOptions {
    pub(crate) fn new<'a>(blank: &str, records: impl IntoIterator<Item = (i64, &'a str)>) -> Self {
        let mut options = vec![(String::new(), blank.to_owned())];
        options.extend(records.into_iter().map(|(id, name)| (id.to_string(), name.to_owned())));
        IdOptions(options)
    }

    /// (value, label) pairs, as [`Select::options`] takes them.
    pub(crate) fn pairs(&self) -> Vec<(&str, &str)> {
        self.0.iter().map(|(value, label)| (value.as_str(), label.as_str())).collect()
    }
}

/// A checkbox that submits `name=on` when ticked, its label beside it and its hint below.
pub fn checkbox(id: &str, name: &str, label: &str, checked: bool, error: Option<&str>, hint: &str) -> Markup {
    let notes = Notes::new(id, Some(hint), error);
    html! {
        div.field.field-check.has-error[error.is_some()] {
            div.check-row {
                input id=(id) name=(name) type="checkbox" value="on" checked[checked]
                    aria-invalid=[notes.invalid()]
                    aria-describedby=[notes.described_by()];
                label for=(id) { (label) }
            }
            (notes.render())
        }
    }
}

/// A field's hint and error, each under the id `{field id}-hint` / `-error` that the control
/// names in its `aria-describedby`.
pub(crate) struct Notes<'a> {
    hint: Option<&'a str>,
    error: Option<&'a str>,
    hint_id: String,
    error_id: String,
}

impl<'a> Notes<'a> {
    pub(crate) fn new(id: &str, hint: Option<&'a str>, error: Option<&'a str>) -> Self {
        Notes { hint, error, hint_id: format!("{id}-hint"), error_id: format!("{id}-error") }
    }

    /// The control's `aria-invalid`: set only when it has an error.
    pub(crate) fn invalid(&self) -> Option<&'static str> {
        self.error.map(|_| "true")
    }

    /// The control's `aria-describedby`: the hint's id, then the error's, of those shown.
    pub(crate) fn described_by(&self) -> Option<String> {
        match (self.hint, self.error) {
            (Some(_), Some(_)) => Some(format!("{} {}", self.hint_id, self.error_id)),
            (Some(_), None) => Some(self.hint_id.clone()),
            (None, Some(_)) => Some(self.error_id.clone()),
            (None, None) => None,
        }
    }

    /// The hint, then the error, under the control.
    pub(crate) fn render(&self) -> Markup {
        html! {
            @if let Some(hint) = self.hint {
                p.field-hint id=(self.hint_id) { (hint) }
            }
            @if let Some(error) = self.error {
                p.field-error id=(self.error_id) { (error) }
            }
        }
    }
}

/// The label above the control, its hint and error below it; marked when it has an error.
pub(crate) fn labelled(id: &str, label: &str, notes: &Notes, control: Markup) -> Markup {
    html! {
        div.field.has-error[notes.error.is_some()] {
            label for=(id) { (label) }
            (control)
            (notes.render())
        }
    }
}

/// What a form shows: the submitted values, the errors that go with them, and a notice.
#[derive(Debug, Clone, Default)]
pub struct FormState {
    /// Field name → submitted (or current) value.
    pub values: Vec<(String, String)>,
    /// Errors that belong to no one field.
    pub errors: Vec<String>,
    /// Field name → message.
    pub field_errors: Vec<(String, String)>,
    /// Good news shown above the form (e.g. "Saved").
    pub notice: Option<String>,
}

impl FormState {
    /// A form as sent: these values, and these messages on their fields (the tests draw forms
    /// with it).
    #[cfg(test)]
    pub(crate) fn sent(values: &[(&str, &str)], field_errors: &[(&str, &str)]) -> FormState {
        FormState {
            values: values.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            field_errors: field_errors.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..FormState::default()
        }
    }

    /// The text input for field `name` with this form's value and message for it: optional, no
    /// placeholder or hint (a caller sets those, and another kind, over it).
    pub fn input<'a>(&'a self, id: &'a str, name: &'a str, label: &'a str) -> Input<'a> {
        Input { error: self.field_error(name), ..Input::text(id, name, label, self.value(name)) }
    }

    /// The select for field `name` among `options`, with this form's choice and message for it.
    pub fn select<'a>(
        &'a self,
        id: &'a str,
        name: &'a str,
        label: &'a str,
        options: &'a [(&'a str, &'a str)],
    ) -> Select<'a> {
        Select {
            id,
            name,
            label,
            options,
            selected: self.value(name),
            error: self.field_error(name),
            required: false,
            hint: None,
        }
    }

    /// The value for `name`, or "" when there is none.
    pub fn value(&self, name: &str) -> &str {
        self.values.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
    }

    /// The value sent for `name`, or `current` when none was (a field that starts filled in).
    pub fn value_or<'a>(&'a self, name: &str, current: &'a str) -> &'a str {
        match self.value(name) {
            "" => current,
            sent => sent,
        }
    }

    /// The error for `name`, if any.
    pub fn field_error(&self, name: &str) -> Option<&str> {
        self.field_errors.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A plain POST about one subscription: the CSRF token, the organization's and the
/// subscription's ids, then `body`.
pub(crate) fn subscription_form(
    csrf: &str,
    class: Option<&str>,
    action: &str,
    organization_id: i64,
    subscription_id: i64,
    body: Markup,
) -> Markup {
    html! {
        form class=[class] method="post" action=(action) {
            (csrf_field(csrf))
            input type="hidden" name="organization_id" value=(organization_id);
            input type="hidden" name="subscription_id" value=(subscription_id);
            (body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_field_is_hidden_and_escaped() {
        assert_eq!(csrf_field(r#"x"y"#).into_string(), r#"<input type="hidden" name="csrf_token" value="x&quot;y">"#);
    }

    fn email_field(error: Option<&str>) -> Input<'_> {
        Input {
            kind: "email",
            error,
            required: true,
            autocomplete: Some("username"),
            ..Input::text("email", "email", "Email", "a@b.c")
        }
    }
    #[test]
    fn field_without_error_has_label_and_input() {
        let out = input_field(&email_field(None)).into_string();
        assert_eq!(
            out,
            r#"<div class="field"><label for="email">Email</label><input id="email" name="email" type="email" value="a@b.c" required autocomplete="username"></div>"#
        );
    }
    #[test]
    fn field_with_error_is_marked_invalid_and_described() {
        let out = input_field(&email_field(Some("Not an <email>"))).into_string();
        assert!(out.contains(r#"<div class="field has-error">"#));
        assert!(out.contains(r#"aria-invalid="true" aria-describedby="email-error""#));
        assert!(out.contains(r#"<p class="field-error" id="email-error">Not an &lt;email&gt;</p>"#));
    }
    #[test]
    fn password_value_is_never_echoed() {
        let f = Input { kind: "password", ..Input::text("password", "password", "Password", "hunter2") };
        let out = input_field(&f).into_string();
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
