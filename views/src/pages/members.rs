//! An organization's members page (its owners'), the invitation forms (the owners' and an
//! operator's), and the page an invitation's link opens.

use maud::{Markup, html};

use crate::components::{Tone, back_link, badge, card, info_note, notice, refusal, table};
use crate::forms::{FormState, Input, csrf_field, form_banners, input_field, select_field};
use crate::paths::{self, fill};

/// A member as the page lists them.
pub struct MemberLine {
    pub account_id: i64,
    pub email: String,
    pub role: String,
    pub verified: bool,
    pub disabled: bool,
}

/// A pending invitation as the page lists it (times already worded).
pub struct PendingLine {
    pub invitation_id: i64,
    pub email: String,
    pub role: String,
    pub sent: String,
    pub expires: String,
    pub expired: bool,
}

pub struct MembersView {
    pub organization_id: i64,
    pub name: String,
    pub csrf: String,
    /// The owner looking at the page.
    pub me: i64,
    pub members: Vec<MemberLine>,
    pub pending: Vec<PendingLine>,
    pub invite_form: FormState,
    /// Whether the console sends mail (an invitation needs it).
    pub mail_on: bool,
    /// What the last act did ("Invitation sent to …").
    pub notice: Option<String>,
}

const ROLES: &[(&str, &str)] = &[("member", "Member"), ("owner", "Owner")];

/// The owners' page: the members with their roles (change, remove), the pending invitations
/// (resend, revoke), the invite form, and leaving.
pub fn members_page(v: &MembersView) -> Markup {
    let id = v.organization_id;
    html! {
        (back_link(paths::HOME, "Home"))
        @if let Some(n) = &v.notice {
            (notice(n))
        }
        (card("members-heading", "Members", members_table(v)))
        (card("invitations-heading", "Pending invitations", pending_table(v)))
        (card("invite-heading", "Invite someone", invite_form(&fill(paths::ORGANIZATION_INVITATIONS, &[&id]), &v.csrf, &v.invite_form, v.mail_on)))
        @if sole_owner(v) == Some(v.me) {
            (card("leave-heading", "Leave", html! {
                p.muted { "You are the only owner of " (v.name) ", so you cannot leave it yet: make another member an owner first." }
            }))
        } @else {
            (card("leave-heading", "Leave", leave_form(id, &v.name, &v.csrf)))
        }
    }
}

/// The one owner who is not disabled, when there is exactly one: the organization must keep
/// them, so the page offers no act that would take that away (the service refuses it anyway).
fn sole_owner(v: &MembersView) -> Option<i64> {
    let mut owners = v.members.iter().filter(|m| m.role == "owner" && !m.disabled);
    match (owners.next(), owners.next()) {
        (Some(only), None) => Some(only.account_id),
        _ => None,
    }
}

fn members_table(v: &MembersView) -> Markup {
    let id = v.organization_id;
    let sole = sole_owner(v);
    let rows = v
        .members
        .iter()
        .map(|m| {
            let role_action = fill(paths::ORGANIZATION_MEMBER_ROLE, &[&id, &m.account_id]);
            let remove_action = fill(paths::ORGANIZATION_MEMBER_REMOVE, &[&id, &m.account_id]);
            let other_role = if m.role == "owner" { ("member", "Make member") } else { ("owner", "Make owner") };
            vec![
                html! {
                    (m.email)
                    @if m.account_id == v.me { " " span.muted { "(you)" } }
                },
                html! { (m.role) },
                html! {
                    @if m.disabled { (badge("disabled", Tone::Warn)) }
                    @else if m.verified { (badge("verified", Tone::Ok)) }
                    @else { (badge("not verified", Tone::Muted)) }
                },
                html! {
                    @if sole == Some(m.account_id) {
                        span.muted { "the only owner" }
                    } @else {
                        form.inline method="post" action=(role_action) {
                            (csrf_field(&v.csrf))
                            input type="hidden" name="role" value=(other_role.0);
                            button.btn.btn-secondary.btn-small type="submit" { (other_role.1) }
                        }
                    }
                    @if m.account_id != v.me && sole != Some(m.account_id) {
                        " "
                        form.inline method="post" action=(remove_action) {
                            (csrf_field(&v.csrf))
                            button.btn.btn-secondary.btn-small type="submit" { "Remove" }
                        }
                    }
                },
            ]
        })
        .collect();
    table(&["Email", "Role", "Email verified", ""], rows, "No members.")
}

fn pending_table(v: &MembersView) -> Markup {
    let id = v.organization_id;
    let rows = v
        .pending
        .iter()
        .map(|p| {
            let resend = fill(paths::ORGANIZATION_INVITATION_RESEND, &[&id, &p.invitation_id]);
            let revoke = fill(paths::ORGANIZATION_INVITATION_REVOKE, &[&id, &p.invitation_id]);
            vec![
                html! { (p.email) },
                html! { (p.role) },
                html! { (p.sent) },
                html! {
                    (p.expires)
                    @if p.expired { " " (badge("expired", Tone::Warn)) }
                },
                html! {
                    @if v.mail_on {
                        form.inline method="post" action=(resend) {
                            (csrf_field(&v.csrf))
                            button.btn.btn-secondary.btn-small type="submit" { "Send again" }
                        }
                        " "
                    }
                    form.inline method="post" action=(revoke) {
                        (csrf_field(&v.csrf))
                        button.btn.btn-secondary.btn-small type="submit" { "Revoke" }
                    }
                },
            ]
        })
        .collect();
    table(&["Email", "Role", "Sent", "Expires", ""], rows, "No pending invitations.")
}

/// The invite form (an owner's on the members page, an operator's on the organization's page):
/// email and role; when mail is off, it says so instead.
pub fn invite_form(action: &str, csrf: &str, f: &FormState, mail_on: bool) -> Markup {
    let email = Input {
        kind: "email",
        required: true,
        autocomplete: Some("off"),
        hint: Some(
            "They get a mail with a link that works once, for 7 days. Inviting an email again sends a new link.",
        ),
        ..f.input("invite-email", "email", "Email")
    };
    let role = f.select("invite-role", "role", "Role", ROLES);
    html! {
        div.form-panel id="invite-form" {
            @if !mail_on {
                (info_note(html! {
                    p { "Mail is off on this console (no SMTP_URL), so invitations cannot be sent. Ask the operator to configure mail." }
                }))
            } @else {
                (form_banners(f))
                form method="post" action=(action) {
                    (csrf_field(csrf))
                    (input_field(&email))
                    (select_field(&role))
                    div.form-actions {
                        button.btn.btn-primary type="submit" { "Send the invitation" }
                    }
                }
            }
        }
    }
}

fn leave_form(organization_id: i64, name: &str, csrf: &str) -> Markup {
    html! {
        p.muted { "Leaving ends your access to " (name) ". An organization keeps at least one owner: its last owner cannot leave." }
        form method="post" action=(fill(paths::ORGANIZATION_LEAVE, &[&organization_id])) {
            (csrf_field(csrf))
            button.btn.btn-secondary type="submit" { "Leave " (name) }
        }
    }
}

/// What a member who is not an owner sees at the members page: why not, and leaving.
pub fn members_not_owner(organization_id: i64, name: &str, csrf: &str) -> Markup {
    html! {
        (back_link(paths::HOME, "Home"))
        (refusal(
            "Only owners manage members",
            &format!("You are a member of {name}, not an owner, so you cannot see or change its members. Ask an owner of {name} to do it."),
        ))
        (card("leave-heading", "Leave", leave_form(organization_id, name, csrf)))
    }
}

/// What the invitation's page offers, by who opens it.
pub enum AcceptCase {
    /// Nobody signed in, no account has the email: choose a password.
    NewPassword { error: Option<String> },
    /// Nobody signed in, an account has the email: sign in first (and come back here).
    SignIn { sign_in_href: String },
    /// Signed in as the invited email: one button.
    Accept { error: Option<String> },
    /// Signed in as another email: refused, with a way to sign out.
    WrongAccount { words: String },
}

pub struct AcceptView {
    pub organization: String,
    pub role: String,
    pub email: String,
    pub token: String,
    pub csrf: String,
    pub case: AcceptCase,
}

/// The page an invitation's link opens: the organization, the role, and what to do. A GET
/// never uses the link; only the form's POST does.
pub fn invitation_page(v: &AcceptView) -> Markup {
    html! {
        section.signin-card {
            h1 { "Join " (v.organization) }
            p { "You are invited to join " strong { (v.organization) } " as " strong { (v.role) } "." }
            p.muted { "The invitation is for " (v.email) "." }
            @match &v.case {
                AcceptCase::NewPassword { error } => {
                    @if let Some(e) = error { (refusal("Not accepted", e)) }
                    p.muted { "Choose a password for your new account. Setting it here also confirms your email address." }
                    form method="post" action=(paths::INVITATION_ACCEPT) {
                        (csrf_field(&v.csrf))
                        input type="hidden" name="token" value=(v.token);
                        (input_field(&Input {
                            kind: "password",
                            required: true,
                            autocomplete: Some("new-password"),
                            hint: Some("At least 8 characters."),
                            ..Input::text("password", "password", "New password", "")
                        }))
                        button.btn.btn-primary.btn-block type="submit" { "Accept and create my account" }
                    }
                }
                AcceptCase::SignIn { sign_in_href } => {
                    p { "An account with this email exists. Sign in to accept; you come back here after." }
                    a.btn.btn-primary.btn-block href=(sign_in_href) { "Sign in to accept" }
                }
                AcceptCase::Accept { error } => {
                    @if let Some(e) = error { (refusal("Not accepted", e)) }
                    form method="post" action=(paths::INVITATION_ACCEPT) {
                        (csrf_field(&v.csrf))
                        input type="hidden" name="token" value=(v.token);
                        button.btn.btn-primary.btn-block type="submit" { "Accept the invitation" }
                    }
                }
                AcceptCase::WrongAccount { words } => {
                    (refusal("This invitation is for someone else", words))
                    form method="post" action=(paths::LOGOUT) {
                        (csrf_field(&v.csrf))
                        button.btn.btn-secondary.btn-block type="submit" { "Sign out" }
                    }
                }
            }
        }
    }
}

/// The page of a link that cannot be used (unknown, expired, used, revoked), in words.
pub fn invitation_problem(words: &str) -> Markup {
    html! {
        section.signin-card {
            h1 { "Invitation" }
            (refusal("This invitation cannot be used", words))
            p { a href=(paths::LOGIN) { "Sign in" } }
        }
    }
}

/// An operator's invitations card on an organization's page: its pending invitations, and the
/// invite form (the same service as an owner's, with the operator as who invites).
pub struct OperatorInvite {
    pub organization_id: i64,
    pub csrf: String,
    pub pending: Vec<PendingLine>,
    pub form: FormState,
    pub mail_on: bool,
}

pub fn operator_invitations(v: &OperatorInvite) -> Markup {
    let rows = v
        .pending
        .iter()
        .map(|p| {
            vec![
                html! { (p.email) },
                html! { (p.role) },
                html! { (p.sent) },
                html! {
                    (p.expires)
                    @if p.expired { " " (badge("expired", Tone::Warn)) }
                },
            ]
        })
        .collect();
    let action = fill(paths::OPERATOR_ORGANIZATION_INVITATIONS, &[&v.organization_id]);
    card(
        "invitations-heading",
        "Invitations",
        html! {
            (table(&["Email", "Role", "Sent", "Expires"], rows, "No pending invitations."))
            h3 { "Invite a person" }
            (invite_form(&action, &v.csrf, &v.form, v.mail_on))
        },
    )
}

/// An operator's refused invitation, on a page of its own, back to the organization's page.
pub fn operator_invite_page(v: &OperatorInvite) -> Markup {
    html! {
        (back_link(&fill(paths::ORGANIZATION, &[&v.organization_id]), "The organization"))
        (operator_invitations(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(case: AcceptCase) -> AcceptView {
        AcceptView {
            organization: "Acme <Co>".into(),
            role: "member".into(),
            email: "ana@example.test".into(),
            token: "t0k".into(),
            csrf: "c".into(),
            case,
        }
    }

    #[test]
    fn the_invitation_page_posts_the_token_and_never_acts_by_a_link() {
        let out = invitation_page(&view(AcceptCase::NewPassword { error: None })).into_string();
        assert!(out.contains(r#"<form method="post" action="/invitations/accept">"#), "{out}");
        assert!(out.contains(r#"<input type="hidden" name="token" value="t0k">"#), "{out}");
        assert!(out.contains("Acme &lt;Co&gt;"));
        assert!(out.contains(r#"autocomplete="new-password""#));
        let out = invitation_page(&view(AcceptCase::WrongAccount { words: "For ana.".into() })).into_string();
        assert!(out.contains(r#"action="/logout""#) && out.contains("For ana."), "{out}");
        assert!(!out.contains("name=\"token\""), "another account gets no accept form");
    }

    fn members(lines: &[(i64, &str, bool)]) -> MembersView {
        MembersView {
            organization_id: 7,
            name: "Acme".into(),
            csrf: "c".into(),
            me: 1,
            members: lines
                .iter()
                .map(|&(account_id, role, disabled)| MemberLine {
                    account_id,
                    email: format!("a{account_id}@example.test"),
                    role: role.into(),
                    verified: true,
                    disabled,
                })
                .collect(),
            pending: vec![],
            invite_form: FormState::default(),
            mail_on: true,
            notice: None,
        }
    }

    #[test]
    fn the_only_owner_is_offered_no_demotion_removal_or_leaving() {
        let out =
            members_page(&members(&[(1, "owner", false), (2, "member", false), (3, "owner", true)])).into_string();
        // The disabled owner may still be made a member; the one who is not may not.
        assert!(out.contains("the only owner") && out.matches("Make member").count() == 1, "{out}");
        assert!(out.contains("cannot leave it yet") && !out.contains("Leave Acme"), "{out}");
        assert!(!out.contains("/members/1/remove") && out.contains("/members/2/remove"), "{out}");
        // A second owner who is not disabled: either may be made a member, and I may leave.
        let out = members_page(&members(&[(1, "owner", false), (2, "owner", false)])).into_string();
        assert_eq!(out.matches("Make member").count(), 2, "{out}");
        assert!(out.contains("Leave Acme") && !out.contains("the only owner"), "{out}");
    }

    #[test]
    fn the_invite_form_says_when_mail_is_off_instead_of_offering_a_send() {
        let off = invite_form("/x", "c", &FormState::default(), false).into_string();
        assert!(off.contains("Mail is off") && !off.contains("<form"), "{off}");
        let on = invite_form("/x", "c", &FormState::default(), true).into_string();
        assert!(on.contains(r#"action="/x""#) && on.contains(r#"name="role""#), "{on}");
    }
}
