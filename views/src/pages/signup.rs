//! Sign-up, email verification and password reset (issue 38): cards like the sign-in's, and the
//! banner an unverified account sees on every page.

use maud::{Markup, html};

use crate::components::{notice, refusal};
use crate::forms::{Input, csrf_field, input_field};
use crate::paths;

/// The banner of an account that has not verified its email: what it cannot do yet, and the
/// button that sends the link again.
pub fn unverified_banner(email: &str, csrf_token: &str) -> Markup {
    html! {
        div.notice.info.verify-banner role="note" {
            p {
                "Verify your email address: we sent a link to " strong { (email) } ". "
                "Until you open it, you can look around but not buy a plan, create sites or invite people."
            }
            form method="post" action=(paths::ACCOUNT_VERIFY_RESEND) {
                (csrf_field(csrf_token))
                button.btn.btn-secondary.btn-small type="submit" { "Send the link again" }
            }
        }
    }
}

/// What "send the link again" answers, and the way home.
pub fn resent(message: &str) -> Markup {
    html! {
        (notice(message))
        p { a href=(paths::HOME) { "Home" } }
    }
}

/// What the sign-up page shows.
pub enum SignupView<'a> {
    /// The form (again, with what was wrong, after a refused post).
    Form { email: &'a str, organization: &'a str, errors: &'a [String], csrf_token: &'a str },
    /// Sign-up is by invitation only.
    ByInvitation,
    /// Open, but no organization type is marked for sign-up yet.
    NotReady,
    /// Mail is off: no link could be sent.
    MailOff,
    /// The answer to every accepted sign-up, whether or not the email had an account.
    CheckEmail { email: &'a str },
}

pub fn signup(v: &SignupView) -> Markup {
    html! {
        section.signin-card {
            h1 { "Sign up" }
            @match v {
                SignupView::Form { email, organization, errors, csrf_token } => {
                    @if !errors.is_empty() {
                        (refusal("Could not sign you up", &errors.join(" ")))
                    }
                    form method="post" action=(paths::SIGNUP) {
                        (csrf_field(csrf_token))
                        (input_field(&Input { kind: "email", required: true, autocomplete: Some("username"), ..Input::text("email", "email", "Email", email) }))
                        (input_field(&Input {
                            kind: "password",
                            required: true,
                            autocomplete: Some("new-password"),
                            hint: Some("At least 8 characters."),
                            ..Input::text("password", "password", "Password", "")
                        }))
                        (input_field(&Input { required: true, autocomplete: Some("organization"), ..Input::text("organization", "organization", "Organization name", organization) }))
                        button.btn.btn-primary.btn-block type="submit" { "Sign up" }
                    }
                    p { "Have an account? " a href=(paths::LOGIN) { "Sign in" } }
                }
                SignupView::ByInvitation => {
                    p { "Sign-up here is by invitation. Ask an owner of your organization to invite you: the invitation's mail holds a link that makes your account." }
                    p { a href=(paths::LOGIN) { "Sign in" } }
                }
                SignupView::NotReady => {
                    p { "Sign-up is not ready yet: the console's operator has not chosen the type of organization a sign-up makes. Try again later." }
                    p { a href=(paths::LOGIN) { "Sign in" } }
                }
                SignupView::MailOff => {
                    p { "Sign-up needs mail to verify your address, and this console sends none yet. Ask the console's operator." }
                    p { a href=(paths::LOGIN) { "Sign in" } }
                }
                SignupView::CheckEmail { email } => {
                    (notice(&format!("Check your email: we sent a link to {email}.")))
                    p { "Open it to verify your address. Then sign in." }
                    p { a href=(paths::LOGIN) { "Sign in" } }
                }
            }
        }
    }
}

/// A mailed link's page before it is used: one button (a GET never uses a link).
pub struct LinkView<'a> {
    pub heading: &'a str,
    pub lead: &'a str,
    /// Where the button posts (with the token as a hidden field).
    pub action: &'static str,
    pub token: &'a str,
    pub button: &'a str,
    pub csrf_token: &'a str,
    /// A new password's field, for a reset link.
    pub new_password: bool,
    pub error: Option<&'a str>,
}

pub fn link_page(v: &LinkView) -> Markup {
    html! {
        section.signin-card {
            h1 { (v.heading) }
            @if let Some(e) = v.error {
                (refusal("Not done", e))
            }
            p { (v.lead) }
            form method="post" action=(v.action) {
                (csrf_field(v.csrf_token))
                input type="hidden" name="token" value=(v.token);
                @if v.new_password {
                    (input_field(&Input {
                        kind: "password",
                        required: true,
                        autocomplete: Some("new-password"),
                        hint: Some("At least 8 characters."),
                        ..Input::text("password", "password", "New password", "")
                    }))
                }
                button.btn.btn-primary.btn-block type="submit" { (v.button) }
            }
        }
    }
}

/// A link that does not work (unknown, used, expired, or no longer right): what to do instead.
pub fn link_refused(heading: &str, message: &str) -> Markup {
    html! {
        section.signin-card {
            h1 { (heading) }
            (refusal("This link does not work", message))
            p { a href=(paths::PASSWORD_FORGOT) { "Forgot your password?" } " · " a href=(paths::LOGIN) { "Sign in" } }
        }
    }
}

/// The forgot-password page: the form, or the one answer every email gets.
pub struct ForgotView<'a> {
    pub email: &'a str,
    pub error: Option<&'a str>,
    pub csrf_token: &'a str,
    /// Answered: the same words whatever the email.
    pub sent: bool,
    /// Mail is off: no link can be sent.
    pub mail_off: bool,
}

pub fn forgot(v: &ForgotView) -> Markup {
    html! {
        section.signin-card {
            h1 { "Forgot your password?" }
            @if v.mail_off {
                p { "A new password is set from a link we mail, and this console sends no mail yet. Ask the console's operator." }
            } @else if v.sent {
                (notice(&format!("If an account has the address {}, we sent it a link to set a new password. It works for an hour.", v.email)))
                p { a href=(paths::LOGIN) { "Sign in" } }
            } @else {
                @if let Some(e) = v.error {
                    (refusal("Not sent", e))
                }
                p { "Write your account's email address: we mail it a link to set a new password." }
                form method="post" action=(paths::PASSWORD_FORGOT) {
                    (csrf_field(v.csrf_token))
                    (input_field(&Input { kind: "email", required: true, autocomplete: Some("username"), ..Input::text("email", "email", "Email", v.email) }))
                    button.btn.btn-primary.btn-block type="submit" { "Send the link" }
                }
                p { a href=(paths::LOGIN) { "Sign in" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_says_what_waits_and_posts_the_resend_with_the_csrf_token() {
        let out = unverified_banner("ann@example.org", "tok").into_string();
        assert!(out.contains("we sent a link to <strong>ann@example.org</strong>"));
        assert!(out.contains(r#"<form method="post" action="/account/verify/resend">"#));
        assert!(out.contains(r#"value="tok""#));
        assert!(out.contains("Send the link again"));
    }

    #[test]
    fn a_sign_up_form_echoes_the_email_and_organization_but_never_the_password() {
        let errors = vec!["A password needs at least 8 characters".to_string()];
        let out =
            signup(&SignupView::Form { email: "a@b.org", organization: "<Acme>", errors: &errors, csrf_token: "t" })
                .into_string();
        assert!(out.contains(r#"value="a@b.org""#) && out.contains(r#"value="&lt;Acme&gt;""#));
        assert!(out.contains(r#"name="password" type="password" value="""#));
        assert!(out.contains("A password needs at least 8 characters"));
    }

    #[test]
    fn a_link_page_carries_its_token_in_a_post_form_and_never_acts_by_itself() {
        let out = link_page(&LinkView {
            heading: "Verify",
            lead: "l",
            action: paths::ACCOUNT_VERIFY,
            token: "abc",
            button: "Verify my email",
            csrf_token: "t",
            new_password: false,
            error: None,
        })
        .into_string();
        assert!(out.contains(r#"<form method="post" action="/account/verify">"#));
        assert!(out.contains(r#"<input type="hidden" name="token" value="abc">"#));
        assert!(!out.contains(r#"name="password""#));
    }
}
