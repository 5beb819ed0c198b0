//! The account page (a person's own password, email, sessions and deletion) and the operators'
//! accounts: the searchable list and one account's page with its acts.

use maud::{Markup, html};

use crate::components::{Keyset, Tone, back_link, badge, card, facts, keyset_pagination, table};
use crate::forms::{FormState, Input, button_form, form_panel, input_field, submit};
use crate::pages::catalog::{Total, capitalized, count};
use crate::paths::{self, fill};

/// A live session as the pages list it.
pub struct SessionLine {
    /// The session's handle the end form sends.
    pub handle: String,
    /// Already formatted.
    pub created_at: String,
    pub last_seen_at: String,
    pub address: String,
    /// The session this page was asked from.
    pub current: bool,
}

pub struct AccountPageView {
    pub csrf: String,
    pub email: String,
    /// Whether mail is sent: an email change needs it.
    pub mail_on: bool,
    /// The new address waiting for its confirmation, and until when (formatted).
    pub pending_email: Option<(String, String)>,
    pub sessions: Vec<SessionLine>,
    pub password_form: FormState,
    pub email_form: FormState,
    pub delete_form: FormState,
}

/// Password, email, sessions and deletion, each a card with its own form.
pub fn account_page(v: &AccountPageView) -> Markup {
    html! {
        (card("account-password-h", "Password", password_form(&v.csrf, &v.password_form)))
        (card("account-email-h", "Email", email_form(v, &v.email_form)))
        (card("account-sessions-h", "Sessions", sessions(v)))
        (card("account-delete-h", "Delete your account", delete_form(&v.csrf, &v.delete_form)))
    }
}

fn password(f: &FormState, id: &'static str, name: &'static str, label: &'static str, auto: &'static str) -> Markup {
    input_field(&Input { kind: "password", required: true, autocomplete: Some(auto), ..f.input(id, name, label) })
}

/// The password form in its container `#account-password`.
pub fn password_form(csrf: &str, f: &FormState) -> Markup {
    form_panel(
        "account-password",
        paths::ACCOUNT_PASSWORD,
        csrf,
        f,
        html! { p.muted { "Changing it signs out every other session of your account; this one stays." } },
        html! {
            (password(f, "current-password", "current_password", "Current password", "current-password"))
            (password(f, "new-password", "new_password", "New password (at least 8 characters)", "new-password"))
            (submit("Change password"))
        },
    )
}

/// The email form in its container `#account-email`, with the change waiting for confirmation.
pub fn email_form(v: &AccountPageView, f: &FormState) -> Markup {
    let lead = html! {
        p { "Your address: " strong { (v.email) } }
        @if let Some((to, until)) = &v.pending_email {
            p.pending-email { "Waiting for confirmation: " strong { (to) } ". Open the link mailed there (it works until " (until) "); until then your account keeps its address." }
        }
        @if !v.mail_on {
            p.muted { "Mail is off on this console, so a new address cannot be confirmed: ask the console's operator to change it." }
        }
    };
    form_panel(
        "account-email",
        paths::ACCOUNT_EMAIL,
        &v.csrf,
        f,
        lead,
        html! {
            (input_field(&Input { kind: "email", required: true, autocomplete: Some("email"), ..f.input("new-email", "email", "New email address") }))
            (password(f, "email-password", "password", "Your password", "current-password"))
            (submit("Send a confirmation link"))
        },
    )
}

fn sessions(v: &AccountPageView) -> Markup {
    let rows = v
        .sessions
        .iter()
        .map(|s| {
            vec![
                html! { (s.created_at) @if s.current { " " (badge("This session", Tone::Ok)) } },
                html! { (s.last_seen_at) },
                html! { (s.address) },
                html! {
                    form method="post" action=(paths::ACCOUNT_SESSION_END) {
                        (crate::forms::csrf_field(&v.csrf))
                        input type="hidden" name="session" value=(s.handle);
                        button.btn.btn-secondary.btn-small type="submit" { "End" }
                    }
                },
            ]
        })
        .collect();
    html! {
        div #account-sessions {
            (table(&["Signed in", "Last seen", "From", ""], rows, "No live sessions."))
            p.muted { "“Sign out everywhere” ends every session of your account, this one included." }
            (button_form(paths::ACCOUNT_SIGN_OUT_EVERYWHERE, "account-sessions", &v.csrf, "Sign out everywhere"))
        }
    }
}

/// The delete form in its container `#account-delete`.
pub fn delete_form(csrf: &str, f: &FormState) -> Markup {
    form_panel(
        "account-delete",
        paths::ACCOUNT_DELETE,
        csrf,
        f,
        html! {
            p { "Deleting your account signs you out everywhere and removes you from your organizations; its past acts stay in their history without your address. It cannot be undone." }
            p.muted { "An organization always keeps an owner: if you are the last owner of one, make another member an owner first." }
        },
        html! {
            (password(f, "delete-password", "password", "Your password, to confirm", "current-password"))
            (submit("Delete my account"))
        },
    )
}

/// An account as the operators' list and page show it.
pub struct AccountListLine {
    pub id: i64,
    pub email: String,
    pub is_operator: bool,
    pub verified: bool,
    pub disabled: bool,
    pub deleted: bool,
    /// Already formatted.
    pub created_at: String,
    pub last_signed_in_at: Option<String>,
}

pub struct AccountListView {
    pub query: String,
    pub total: Total,
    pub rows: Vec<AccountListLine>,
    pub has_before: bool,
    pub has_after: bool,
}

fn marks(a: &AccountListLine) -> Markup {
    html! {
        @if a.deleted { (badge("Deleted", Tone::Bad)) " " }
        @if a.disabled { (badge("Disabled", Tone::Bad)) " " }
        @if a.is_operator { (badge("Operator", Tone::Ok)) " " }
        @if !a.verified { (badge("Not verified", Tone::Warn)) }
    }
}

/// The search form (a plain GET; htmx swaps `#account-results` as the operator types) and the
/// results.
pub fn account_list(v: &AccountListView) -> Markup {
    html! {
        form.search-form role="search" method="get" action=(paths::OPERATOR_ACCOUNTS) {
            div.field {
                label for="account-search" { "Search accounts by the start of their email" }
                input #account-search type="search" name="q" value=(v.query) autocomplete="off"
                    hx-get=(paths::OPERATOR_ACCOUNTS)
                    hx-trigger="input changed delay:300ms, search"
                    hx-target="#account-results"
                    hx-swap="outerHTML"
                    hx-replace-url="true";
            }
            button.btn.btn-secondary type="submit" { "Search" }
        }
        (account_results(v))
    }
}

/// Just the `#account-results` container: the count, the table and the pager.
pub fn account_results(v: &AccountListView) -> Markup {
    let rows = v
        .rows
        .iter()
        .map(|a| {
            vec![
                html! { a href=(fill(paths::OPERATOR_ACCOUNT, &[&a.id])) { (a.email) } },
                marks(a),
                html! { (a.created_at) },
                html! { (a.last_signed_in_at.as_deref().unwrap_or("never")) },
            ]
        })
        .collect();
    let empty = if v.query.is_empty() {
        "No accounts yet.".to_owned()
    } else {
        format!("No account's email starts with “{}”.", v.query)
    };
    let query: Vec<(&str, &str)> = if v.query.is_empty() { vec![] } else { vec![("q", v.query.as_str())] };
    let keyset = Keyset {
        has_before: v.has_before,
        has_after: v.has_after,
        first_id: v.rows.first().map(|r| r.id),
        last_id: v.rows.last().map(|r| r.id),
    };
    let counted = match v.total {
        Total::Exactly(0) => None,
        Total::Exactly(n) => Some(count(n as i64, "account", "accounts")),
        Total::AtLeast(_) => Some(capitalized(&v.total.words("account", "accounts"))),
    };
    html! {
        div #account-results {
            @if let Some(counted) = counted { p.muted.result-count { (counted) } }
            (table(&["Email", "", "Created", "Last sign-in"], rows, &empty))
            (keyset_pagination(paths::OPERATOR_ACCOUNTS, &keyset, &query))
        }
    }
}

pub struct MembershipLine {
    pub organization_id: i64,
    pub organization: String,
    pub role: String,
}

pub struct AccountEventLine {
    /// Already worded ("Disabled").
    pub what: String,
    pub by: String,
    pub organization: String,
    pub detail: String,
    /// Already formatted.
    pub at: String,
}

pub struct OperatorAccountView {
    pub csrf: String,
    pub account: AccountListLine,
    /// Whether it is the operator's own account (no disable, no demotion).
    pub own: bool,
    pub memberships: Vec<MembershipLine>,
    pub sessions: Vec<SessionLine>,
    pub events: Vec<AccountEventLine>,
    /// A refusal of the last act, shown above the acts.
    pub refused: Option<String>,
}

/// Facts, the acts, memberships, sessions and the account's history.
pub fn operator_account(v: &OperatorAccountView) -> Markup {
    let a = &v.account;
    let id = a.id;
    let memberships = v
        .memberships
        .iter()
        .map(|m| {
            vec![
                html! { a href=(fill(paths::ORGANIZATION, &[&m.organization_id])) { (m.organization) } },
                html! { (m.role) },
            ]
        })
        .collect();
    let sessions = v
        .sessions
        .iter()
        .map(|s| vec![html! { (s.created_at) }, html! { (s.last_seen_at) }, html! { (s.address) }])
        .collect();
    let events = v
        .events
        .iter()
        .map(|e| {
            vec![
                html! { (e.at) },
                html! { (e.what) },
                html! { (e.by) },
                html! { (e.organization) },
                html! { (e.detail) },
            ]
        })
        .collect();
    html! {
        (back_link(paths::OPERATOR_ACCOUNTS, "All accounts"))
        (facts(&[
            ("Email", html! { (a.email) " " span.muted { "#" (id) } }),
            ("State", marks(a)),
            ("Verified", html! { @if a.verified { "yes" } @else { "not yet" } }),
            ("Created", html! { (a.created_at) }),
            ("Last sign-in", html! { (a.last_signed_in_at.as_deref().unwrap_or("never")) }),
        ]))
        (account_acts(v))
        (card("account-memberships-h", "Memberships", table(&["Organization", "Role"], memberships, "No memberships.")))
        (card("account-sessions-h", "Sessions", table(&["Signed in", "Last seen", "From"], sessions, "No live sessions.")))
        (card("account-events-h", "History", table(&["When", "What", "By", "Organization", "Detail"], events, "Nothing recorded yet.")))
    }
}

/// The acts on the account in their container `#account-acts` (each button swaps it), with the
/// last act's refusal above them.
pub fn account_acts(v: &OperatorAccountView) -> Markup {
    let a = &v.account;
    let id = a.id;
    html! {
        div #account-acts {
            @if let Some(m) = &v.refused { (crate::components::refusal("Not done", m)) }
            @if !a.deleted {
                div.form-actions {
                    @if a.disabled {
                        (button_form(&fill(paths::OPERATOR_ACCOUNT_ENABLE, &[&id]), "account-acts", &v.csrf, "Enable"))
                    } @else if !v.own {
                        (button_form(&fill(paths::OPERATOR_ACCOUNT_DISABLE, &[&id]), "account-acts", &v.csrf, "Disable"))
                    }
                    @if a.is_operator {
                        @if !v.own {
                            (button_form(&fill(paths::OPERATOR_ACCOUNT_REVOKE_OPERATOR, &[&id]), "account-acts", &v.csrf, "Revoke operator"))
                        }
                    } @else if !a.disabled {
                        (button_form(&fill(paths::OPERATOR_ACCOUNT_GRANT_OPERATOR, &[&id]), "account-acts", &v.csrf, "Make operator"))
                    }
                }
            }
        }
    }
}
