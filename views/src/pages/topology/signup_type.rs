//! The sign-up type (issue 38): which organization type a sign-up's organization gets, and
//! whether sign-up is open at all (`CONSOLE_SIGNUP`, the server's setting).

use maud::{Markup, html};

use super::OrgTypeRow;
use crate::components::{Column, Tone, badge, table_cols};
use crate::forms::csrf_field;
use crate::paths::{self, fill};

/// What the topology page says of sign-up.
#[derive(Clone, Debug, Default)]
pub struct SignupTypeView {
    /// `CONSOLE_SIGNUP`: open, invite or closed.
    pub mode: String,
    /// The type marked for sign-up, if any.
    pub chosen: Option<i64>,
}

pub(super) fn signup_type_section(csrf: &str, v: &SignupTypeView, types: &[OrgTypeRow]) -> Markup {
    let rows = types
        .iter()
        .map(|t| {
            vec![
                html! { (t.name) },
                html! {
                    @if v.chosen == Some(t.id) {
                        (badge("The sign-up type", Tone::Ok))
                    } @else {
                        form method="post" action=(fill(paths::ORG_TYPE_SIGNUP, &[&t.id])) {
                            (csrf_field(csrf))
                            button.btn.btn-secondary.btn-small type="submit" { "Make this the sign-up type" }
                        }
                    }
                },
            ]
        })
        .collect();
    html! {
        p.muted {
            "Sign-up is " strong { (v.mode) } " (CONSOLE_SIGNUP). A sign-up makes an organization of the type "
            "marked here, which starts on its type's floor, with the new account as its owner."
        }
        @if v.chosen.is_none() {
            p.refusal-text { "No type is marked: the sign-up page says sign-up is not ready until one is." }
        }
        (table_cols(&[Column::text("Type"), Column::text("Sign-up")], rows, "No organization types yet."))
    }
}
