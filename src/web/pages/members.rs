//! An organization's members page (its owners'): roles, removal, leaving, and invitations; and
//! an operator's invitation from the organization's page.

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use validator::Validate;
use views::paths::{self, fill};

use crate::{
    ids::{AccountId, InvitationId, OrganizationId},
    services::{
        self, ServiceError,
        auth::Email,
        invitations::{Invite, InviteMail, Inviter},
        members::{MembersView, MembershipChange, Role},
    },
    store::invitations::Pending,
    web::{
        AppState,
        call::{Call, MemberCall, OperatorCall},
        errors::AppError,
        forms::{Form, after_post, query_or_default, see_other},
        identity::{Member, csrf_token},
        input::{self, Field, read},
        pages::auth::client_address,
        refusals::{self, Words},
        render,
    },
};

const WORDS: Words = Words { done: "sent", busy: None };

/// The invite form: an email and a role.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct InviteForm {
    #[validate(custom(function = read))]
    email: Field<Email>,
    #[validate(custom(function = read))]
    role: Field<Role>,
}

impl InviteForm {
    fn command(self, organization_id: OrganizationId) -> Result<Invite, ServiceError> {
        let problems = input::problems(&self);
        let (email, role) = problems.or(self.email.into_ok().zip(self.role.into_ok()))?;
        Ok(Invite { organization_id, email, role })
    }
}

/// A role change's form: the new role.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct RoleForm {
    #[validate(custom(function = read))]
    role: Field<Role>,
}

/// A form of no field but the CSRF token (remove, leave, resend, revoke).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// What the page says the last act did.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Done {
    Invited,
    Resent,
    Revoked,
    Role,
    Removed,
}

#[derive(Deserialize, Default)]
struct DoneQuery {
    done: Option<Done>,
}

fn notice(done: Option<Done>) -> Option<String> {
    Some(
        match done? {
            Done::Invited => "Invitation sent.",
            Done::Resent => "Invitation sent again, with a new link; the old link no longer works.",
            Done::Revoked => "Invitation revoked: its link no longer works.",
            Done::Role => "Role changed.",
            Done::Removed => "Member removed.",
        }
        .to_string(),
    )
}

fn members_href(organization_id: OrganizationId, done: &str) -> String {
    format!("{}?done={done}", fill(paths::ORGANIZATION_MEMBERS, &[&organization_id]))
}

/// A time as the page shows it.
fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub(crate) fn pending_lines(pending: &[Pending]) -> Vec<views::PendingLine> {
    pending
        .iter()
        .map(|p| views::PendingLine {
            invitation_id: p.invitation_id.0,
            email: p.email.clone(),
            role: p.role.clone(),
            sent: when(p.sent_at),
            expires: when(p.expires_at),
            expired: p.expired,
        })
        .collect()
}

/// Where the invitation's mail points, and the address its send is counted against.
fn invite_mail(req: &HttpRequest, state: &AppState) -> InviteMail {
    InviteMail {
        // At link_base, never the request's Host header.
        host: state.mail_host(),
        accept_prefix: format!("{}{}?token=", state.link_base(), paths::INVITATION_ACCEPT),
        address: client_address(req, &state.config.trusted_proxies),
    }
}

/// Mail is needed to invite: without it the act is refused in words (409), nothing written.
fn mail_needed(state: &AppState) -> Result<(), ServiceError> {
    if state.mail_on {
        return Ok(());
    }
    Err(ServiceError::Refused(
        "Mail is off on this console (no SMTP_URL), so an invitation cannot be sent. Nothing was written. Ask the \
         operator to configure mail."
            .into(),
    ))
}

/// The members page's markup for `who`, with `form` in the invite form; a non-owner's page and
/// its status.
async fn page(
    req: &HttpRequest,
    state: &AppState,
    who: AccountId,
    organization_id: OrganizationId,
    form: views::FormState,
    notice: Option<String>,
) -> Result<(StatusCode, String, views::Markup), AppError> {
    let csrf = csrf_token(req);
    Ok(match services::members::members_page(&state.db, who, organization_id).await? {
        MembersView::Owner(p) => {
            let view = views::MembersView {
                organization_id: p.organization_id.0,
                name: p.name.clone(),
                csrf,
                me: who.0,
                members: p
                    .members
                    .into_iter()
                    .map(|m| views::MemberLine {
                        account_id: m.account_id.0,
                        email: m.email,
                        role: m.role,
                        verified: m.verified,
                        disabled: m.disabled,
                    })
                    .collect(),
                pending: pending_lines(&p.pending),
                invite_form: form,
                mail_on: state.mail_on,
                notice,
            };
            (StatusCode::OK, format!("Members of {}", p.name), views::members_page(&view))
        }
        // A member who is not an owner: a refusal in words (403), and the way to leave.
        MembersView::NotOwner { name } => (
            StatusCode::FORBIDDEN,
            format!("Members of {name}"),
            views::members_not_owner(organization_id.0, &name, &csrf),
        ),
    })
}

#[tracing::instrument(name = "Page: an organization's members", skip_all, fields(organization_id = %*id))]
pub async fn members(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<OrganizationId>,
) -> Result<HttpResponse, AppError> {
    let done = query_or_default::<DoneQuery>(&req).done;
    let (status, title, body) = page(&req, &state, who.account_id, *id, Default::default(), notice(done)).await?;
    Ok(render::page(&req, status, &title, body))
}

#[tracing::instrument(name = "Page: change a member's role", skip_all, fields(organization_id = %path.0, account_id = %path.1))]
pub async fn change_role(
    Call { who: Member(who), state, .. }: MemberCall,
    path: web::Path<(OrganizationId, AccountId)>,
    form: Form<RoleForm>,
) -> Result<HttpResponse, AppError> {
    let (organization_id, account) = path.into_inner();
    let f = form.into_inner();
    input::problems(&f).or(Some(()))?;
    let role = f.role.into_ok().ok_or_else(|| AppError::BadRequest("Choose owner or member.".into()))?;
    let change = MembershipChange::SetRole { account, role };
    services::members::change_membership(&state.db, who.account_id, organization_id, change).await?;
    Ok(see_other(&members_href(organization_id, "role")))
}

#[tracing::instrument(name = "Page: remove a member", skip_all, fields(organization_id = %path.0, account_id = %path.1))]
pub async fn remove(
    Call { who: Member(who), state, .. }: MemberCall,
    path: web::Path<(OrganizationId, AccountId)>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let (organization_id, account) = path.into_inner();
    let change = MembershipChange::Remove { account };
    services::members::change_membership(&state.db, who.account_id, organization_id, change).await?;
    Ok(see_other(&members_href(organization_id, "removed")))
}

#[tracing::instrument(name = "Page: leave an organization", skip_all, fields(organization_id = %*id))]
pub async fn leave(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<OrganizationId>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    services::members::change_membership(&state.db, who.account_id, *id, MembershipChange::Leave).await?;
    Ok(after_post(&req, paths::HOME))
}

#[tracing::instrument(name = "Page: invite into an organization", skip_all, fields(organization_id = %*id))]
pub async fn invite(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<OrganizationId>,
    form: Form<InviteForm>,
) -> Result<HttpResponse, AppError> {
    let organization_id = *id;
    let values = form.values();
    let invited = async {
        mail_needed(&state)?;
        let invite = form.into_inner().command(organization_id)?;
        let mail = invite_mail(&req, &state);
        services::invitations::invite(&state.db, &state.tokens, Inviter::Owner(who.account_id), &invite, &mail).await
    }
    .await;
    let to = invited.map(|_| members_href(organization_id, "invited"));
    refusals::posted(&req, to, values, WORDS, async |r| {
        let (_, title, body) = page(&req, &state, who.account_id, organization_id, r.form, None).await?;
        Ok(render::page(&req, r.status, &title, body))
    })
    .await
}

#[tracing::instrument(name = "Page: resend an invitation", skip_all, fields(organization_id = %path.0, invitation_id = %path.1))]
pub async fn resend(
    Call { who: Member(who), req, state }: MemberCall,
    path: web::Path<(OrganizationId, InvitationId)>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let (organization_id, invitation_id) = path.into_inner();
    mail_needed(&state)?;
    let mail = invite_mail(&req, &state);
    let by = Inviter::Owner(who.account_id);
    services::invitations::resend(&state.db, &state.tokens, by, organization_id, invitation_id, &mail).await?;
    Ok(see_other(&members_href(organization_id, "resent")))
}

#[tracing::instrument(name = "Page: revoke an invitation", skip_all, fields(organization_id = %path.0, invitation_id = %path.1))]
pub async fn revoke(
    Call { who: Member(who), state, .. }: MemberCall,
    path: web::Path<(OrganizationId, InvitationId)>,
    _form: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let (organization_id, invitation_id) = path.into_inner();
    services::invitations::revoke(&state.db, Inviter::Owner(who.account_id), organization_id, invitation_id).await?;
    Ok(see_other(&members_href(organization_id, "revoked")))
}

/// An operator's invitation card on an organization's page, with `form`.
pub(crate) async fn operator_invite_view(
    req: &HttpRequest,
    state: &AppState,
    organization_id: OrganizationId,
    form: views::FormState,
) -> Result<views::OperatorInvite, AppError> {
    Ok(views::OperatorInvite {
        organization_id: organization_id.0,
        csrf: csrf_token(req),
        pending: pending_lines(&services::members::pending_invitations(&state.db, organization_id).await?),
        form,
        mail_on: state.mail_on,
    })
}

#[tracing::instrument(name = "Page: an operator invites into an organization", skip_all, fields(organization_id = %*id))]
pub async fn operator_invite(
    Call { who, req, state }: OperatorCall,
    id: web::Path<OrganizationId>,
    form: Form<InviteForm>,
) -> Result<HttpResponse, AppError> {
    let organization_id = *id;
    let values = form.values();
    let invited = async {
        mail_needed(&state)?;
        let invite = form.into_inner().command(organization_id)?;
        let mail = invite_mail(&req, &state);
        services::invitations::invite(&state.db, &state.tokens, Inviter::Operator(who.account_id()), &invite, &mail)
            .await
    }
    .await;
    let to = invited.map(|_| fill(paths::ORGANIZATION, &[&organization_id]));
    refusals::posted(&req, to, values, WORDS, async |r| {
        // The refused form on a page of its own, back to the organization's page.
        let card = operator_invite_view(&req, &state, organization_id, r.form).await?;
        let body = views::operator_invite_page(&card);
        Ok(render::page(&req, r.status, "Invite a person", body))
    })
    .await
}
