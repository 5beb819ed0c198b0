//! The sign-in card.

use crate::forms::{Input, csrf_field, input_field};
use crate::paths;
use maud::{Markup, html};

use crate::components::refusal;

/// What the sign-in form shows.
pub struct LoginView<'a> {
    /// Echoed back after a failed attempt so the person need not retype it.
    pub email: &'a str,
    pub error: Option<&'a str>,
    pub csrf_token: &'a str,
    /// Where to go after signing in; carried through the POST as a hidden field.
    pub next: Option<&'a str>,
    /// Whether sign-up is open (the page offers it).
    pub signup: bool,
    /// Good news above the form (an email just verified).
    pub notice: Option<&'a str>,
}

/// The centred sign-in card. It carries its own `<h1>`, so render it with
/// [`crate::layout::bare_page`]. A plain form POST: it works without JavaScript.
pub fn login(v: &LoginView) -> Markup {
    html! {
        section.signin-card {
            h1 { "Sign in" }
            @if let Some(n) = v.notice {
                (crate::components::notice(n))
            }
            @if let Some(error) = v.error {
                (refusal("Could not sign you in", error))
            }
            form method="post" action=(paths::LOGIN) {
                (csrf_field(v.csrf_token))
                @if let Some(next) = v.next {
                    input type="hidden" name="next" value=(next);
                }
                (input_field(&email_field(v.email)))
                (input_field(&password_field()))
                button.btn.btn-primary.btn-block type="submit" { "Sign in" }
            }
            p.signin-links {
                a href=(paths::PASSWORD_FORGOT) { "Forgot your password?" }
                @if v.signup {
                    " · " a href=(paths::SIGNUP) { "Sign up" }
                }
            }
        }
    }
}

fn email_field(value: &str) -> Input<'_> {
    Input {
        kind: "email",
        required: true,
        // Password managers pair "username" with "current-password".
        autocomplete: Some("username"),
        ..Input::text("email", "email", "Email", value)
    }
}

fn password_field() -> Input<'static> {
    Input {
        kind: "password",
        required: true,
        autocomplete: Some("current-password"),
        ..Input::text("password", "password", "Password", "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(error: Option<&'a str>, next: Option<&'a str>) -> LoginView<'a> {
        LoginView { email: "ann@example.org", error, csrf_token: "tok", next, signup: false, notice: None }
    }

    #[test]
    fn login_is_a_plain_post_form_with_csrf_and_fields() {
        let out = login(&view(None, None)).into_string();
        assert!(out.contains(r#"<form method="post" action="/login">"#));
        assert!(out.contains(r#"<input type="hidden" name="csrf_token" value="tok">"#));
        assert!(out.contains(r#"name="email" type="email" value="ann@example.org" required"#));
        assert!(out.contains(r#"name="password" type="password" value="" required autocomplete="current-password""#));
        assert!(out.contains(r#"<button class="btn btn-primary btn-block" type="submit">Sign in</button>"#));
        assert!(!out.contains("hx-"));
        assert!(!out.contains("role=\"alert\""));
        assert!(!out.contains("name=\"next\""));
    }

    #[test]
    fn login_shows_error_above_fields_and_keeps_next() {
        let out = login(&view(Some("Wrong <email> or password."), Some("/sites?a=1&b=2"))).into_string();
        let alert = out.find(r#"<div class="refusal" role="alert">"#).expect("refusal box");
        let form = out.find("<form").expect("form");
        assert!(alert < form);
        assert!(out.contains("<p>Wrong &lt;email&gt; or password.</p>"));
        assert!(out.contains(r#"<input type="hidden" name="next" value="/sites?a=1&amp;b=2">"#));
    }

    #[test]
    fn login_links_forgot_password_always_and_sign_up_only_when_open() {
        let out = login(&view(None, None)).into_string();
        assert!(out.contains(r#"href="/password/forgot""#));
        assert!(!out.contains(r#"href="/signup""#));
        let out = login(&LoginView { signup: true, ..view(None, None) }).into_string();
        assert!(out.contains(r#"href="/signup""#));
    }

    #[test]
    fn login_escapes_echoed_email() {
        let v = LoginView { email: r#""><script>x</script>"#, ..view(None, None) };
        let out = login(&v).into_string();
        assert!(!out.contains("<script>"));
        assert!(out.contains(r#"value="&quot;&gt;&lt;script&gt;x&lt;/script&gt;""#));
    }
}
