//! The operator's grants: the list with filters, issuing, a grant's page with its lineage and
//! history, revoking and managing.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use views::paths::{self, fill};
use views::{FormState, Keyset, Total};

use crate::{
    db::retry::once_more_after_deadlock,
    ids::{AccountId, GrantId, OrganizationId},
    services::{
        self, ServiceError,
        grants::{IssueGrant, ManageGrant},
    },
    states::{GrantKind, GrantStatus},
    store::grants::{EventRow, GrantRow},
    web::call::{Call, OperatorCall},
    web::forms::{Form, run_parsed},
    web::paging::SeekQuery,
    web::refusals::{self, Words},
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

/// A grant act waits up to the lock bound for the organization's pool; past it, it says so in
/// the grant's own words (not a plan change's).
const WORDS: Words = Words {
    done: "changed",
    busy: Some(
        "The organization's plan is being recalculated by another change right now, so the grant was not changed. \
         Try again in a moment.",
    ),
};

/// The issue form.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct IssueForm {
    organization_id: String,
    provision_domain: String,
    product_id: String,
    quantity: String,
    starts_at: String,
    ends_at: String,
    reason: String,
}

impl IssueForm {
    fn parse(&self, actor: Option<AccountId>) -> Result<IssueGrant, ServiceError> {
        IssueGrant::parse(
            &self.organization_id,
            &self.provision_domain,
            &self.product_id,
            &self.quantity,
            &self.starts_at,
            &self.ends_at,
            &self.reason,
            actor,
        )
    }
}

/// The revoke form: the reason alone (the service requires it).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RevokeForm {
    reason: String,
}

/// The manage form (an active grant's has no start).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ManageForm {
    starts_at: String,
    ends_at: String,
    quantity: String,
    reason: String,
}

impl ManageForm {
    fn parse(&self, actor: Option<AccountId>) -> Result<ManageGrant, ServiceError> {
        ManageGrant::parse(&self.starts_at, &self.ends_at, &self.quantity, &self.reason, actor)
    }
}

fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub fn list_row(g: &GrantRow) -> views::GrantListRow {
    views::GrantListRow {
        id: g.grant_id.0,
        organization: g.organization_id.map(|id| (id.0, g.organization_name.clone().unwrap_or_default())),
        provision_domain: g.provision_domain.clone(),
        product: g.product.clone(),
        quantity: g.quantity,
        kind: g.kind.to_string(),
        status: g.status.to_string(),
        starts_at: when(g.starts_at),
        ends_at: g.ends_at.map(when),
        reason: g.reason.clone(),
    }
}

pub fn event_row(e: &EventRow) -> views::GrantEventRow {
    views::GrantEventRow {
        at: when(e.at),
        act: e.act.clone(),
        actor: e.actor.clone().unwrap_or_else(|| "the console".into()),
        reason: e.reason.clone(),
        grant_id: e.grant_id.0,
    }
}

#[derive(Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    organization_id: Option<String>,
    #[serde(flatten)]
    page: SeekQuery,
}

#[tracing::instrument(name = "Page: the grants", skip_all, fields(status = ?q.status, organization_id = ?q.organization_id))]
pub async fn list(Call { req, state, .. }: OperatorCall, q: web::Query<ListQuery>) -> Result<HttpResponse, AppError> {
    let status = q.status.clone().unwrap_or_default();
    let status_filter = match status.as_str() {
        "" => None,
        s => Some(
            GrantStatus::from_text(s)
                .ok_or_else(|| AppError::BadRequest(format!("“{status}” is not a grant status.")))?,
        ),
    };
    let org_text = q.organization_id.clone().unwrap_or_default();
    let org = match org_text.trim() {
        "" => None,
        t => Some(OrganizationId(
            t.parse::<i64>().map_err(|_| AppError::BadRequest(format!("“{t}” is not an organization number.")))?,
        )),
    };
    let seek = q.page.seek("a grant")?;
    let list = services::reads::grants(&state.db, status_filter, org, seek).await?;
    let view = views::GrantListView {
        status,
        organization_id: org_text,
        organization_name: list.organization_name,
        total: if list.total.1 { Total::AtLeast(list.total.0) } else { Total::Exactly(list.total.0) },
        keyset: Keyset {
            has_before: list.page.has_before,
            has_after: list.page.has_after,
            first_id: list.page.rows.first().map(|r| r.grant_id.0),
            last_id: list.page.rows.last().map(|r| r.grant_id.0),
        },
        rows: list.page.rows.iter().map(list_row).collect(),
    };
    Ok(render::ok(&req, "Grants", views::grant_list(&view)))
}

#[derive(Deserialize)]
pub struct NewQuery {
    organization_id: Option<String>,
}

async fn issue_view(req: &HttpRequest, state: &AppState, form: FormState) -> Result<views::IssueGrantView, AppError> {
    Ok(views::IssueGrantView {
        csrf: csrf_token(req),
        products: services::reads::published_products(&state.db).await?.into_iter().map(|(id, n)| (id.0, n)).collect(),
        form,
    })
}

#[tracing::instrument(name = "Page: issue a grant", skip_all, fields(organization_id = ?q.organization_id))]
pub async fn new_form(
    Call { req, state, .. }: OperatorCall,
    q: web::Query<NewQuery>,
) -> Result<HttpResponse, AppError> {
    let form = FormState {
        values: vec![
            ("organization_id".into(), q.organization_id.clone().unwrap_or_default()),
            ("quantity".into(), "1".into()),
        ],
        ..FormState::default()
    };
    let v = issue_view(&req, &state, form).await?;
    Ok(render::ok(&req, "Issue a grant", views::issue_grant(&v)))
}

#[tracing::instrument(name = "Page: post a grant", skip_all)]
pub async fn issue(
    Call { who: op, req, state }: OperatorCall,
    form: Form<IssueForm>,
) -> Result<HttpResponse, AppError> {
    let issue = async |g: &IssueGrant| services::grants::issue_grant(&state.db, g).await;
    let issued = run_parsed(&state.db, "Issue a grant", form.parse(Some(op.account_id())), issue).await;
    refusals::posted(&req, issued.map(|id| fill(paths::GRANT, &[&id])), form.values(), WORDS, async |r| {
        let v = issue_view(&req, &state, r.form).await?;
        Ok(refusals::answer(&req, r.status, "Issue a grant", || views::issue_grant(&v), || views::issue_grant(&v)))
    })
    .await
}

async fn detail_view(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    revoke_form: FormState,
    manage_form: FormState,
) -> Result<views::GrantDetailView, AppError> {
    let d = services::reads::grant(&state.db, GrantId(id)).await?.ok_or(AppError::NotFound)?;
    let head = d.lineage.iter().find(|g| !d.lineage.iter().any(|n| n.extends_grant_id == Some(g.grant_id)));
    let head_id = head.map_or(id, |h| h.grant_id.0);
    let head_status = head.map_or(d.grant.status, |h| h.status);
    let live = head_status.is_live();
    let is_floor = d.grant.kind == GrantKind::Floor;
    let waiting = head_status == GrantStatus::Waiting;
    // The manage form opens with the head's values, so changing one field keeps the others.
    let mut manage_form = manage_form;
    if manage_form.values.is_empty()
        && let Some(h) = head
    {
        let local = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M").to_string();
        manage_form.values.push(("quantity".into(), h.quantity.to_string()));
        manage_form.values.push(("ends_at".into(), h.ends_at.map(local).unwrap_or_default()));
        if waiting {
            manage_form.values.push(("starts_at".into(), local(h.starts_at)));
        }
    }
    // A problem with a field this form does not draw (a start for a started grant) is said above it.
    if !waiting {
        let (drawn, hidden): (Vec<_>, Vec<_>) = manage_form.field_errors.drain(..).partition(|(f, _)| f != "starts_at");
        manage_form.field_errors = drawn;
        manage_form.errors.extend(hidden.into_iter().map(|(_, m)| m));
    }
    let g = &d.grant;
    Ok(views::GrantDetailView {
        csrf: csrf_token(req),
        grant: list_row(g),
        head_id,
        lineage: d
            .lineage
            .iter()
            .map(|l| views::LineageRow {
                id: l.grant_id.0,
                status: l.status.to_string(),
                starts_at: when(l.starts_at),
                ends_at: l.ends_at.map(when),
                quantity: l.quantity,
                current: l.grant_id.0 == id,
            })
            .collect(),
        events: d.events.iter().map(event_row).collect(),
        can_revoke: live && !is_floor,
        can_manage: live && !is_floor,
        waiting,
        revoke_form,
        manage_form,
    })
}

#[tracing::instrument(name = "Page: a grant", skip_all, fields(grant_id = *id))]
pub async fn detail(Call { req, state, .. }: OperatorCall, id: web::Path<i64>) -> Result<HttpResponse, AppError> {
    let v = detail_view(&req, &state, *id, FormState::default(), FormState::default()).await?;
    Ok(render::ok(&req, &format!("Grant #{}", v.grant.id), views::grant_detail(&v)))
}

/// The grant's page; when the refused form is not on it (the grant is no longer live, or a
/// floor), its errors in a banner above, so the page always says why nothing changed.
fn with_banner(v: &views::GrantDetailView, f: &FormState, form_shown: bool) -> views::Markup {
    let banner = (!form_shown && !f.errors.is_empty()).then(|| {
        views::refusal(
            "Nothing was changed",
            &f.errors.iter().filter(|e| !e.starts_with("Nothing was")).cloned().collect::<Vec<_>>().join(" "),
        )
    });
    let mut out = banner.map(|b| b.into_string()).unwrap_or_default();
    out.push_str(&views::grant_detail(v).into_string());
    views::PreEscaped(out)
}

#[tracing::instrument(name = "Page: revoke a grant", skip_all, fields(grant_id = *id))]
pub async fn revoke(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<i64>,
    form: Form<RevokeForm>,
) -> Result<HttpResponse, AppError> {
    let actor = Some(op.account_id());
    let revoke = async || services::grants::revoke_grant(&state.db, GrantId(*id), actor, &form.reason).await;
    let revoked = once_more_after_deadlock(&state.db, "Revoke a grant", revoke).await;
    refusals::posted(&req, revoked.map(|head| fill(paths::GRANT, &[&head])), form.values(), WORDS, async |r| {
        let page = async || {
            let v = detail_view(&req, &state, *id, r.form.clone(), FormState::default()).await?;
            Ok(with_banner(&v, &r.form, v.can_revoke))
        };
        let form = || views::revoke_form(&csrf_token(&req), *id, &r.form);
        refusals::answer_reading(&req, r.status, &format!("Grant #{}", *id), form, page).await
    })
    .await
}

#[tracing::instrument(name = "Page: manage a grant", skip_all, fields(grant_id = *id))]
pub async fn manage(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<i64>,
    form: Form<ManageForm>,
) -> Result<HttpResponse, AppError> {
    let manage = async |m: &ManageGrant| services::grants::manage_grant(&state.db, GrantId(*id), m).await;
    let managed = run_parsed(&state.db, "Manage a grant", form.parse(Some(op.account_id())), manage).await;
    refusals::posted(&req, managed.map(|head| fill(paths::GRANT, &[&head])), form.values(), WORDS, async |r| {
        let v = detail_view(&req, &state, *id, FormState::default(), r.form).await?;
        let title = format!("Grant #{}", v.grant.id);
        Ok(refusals::answer(
            &req,
            r.status,
            &title,
            || views::manage_form(&v.csrf, *id, v.waiting, &v.manage_form),
            || with_banner(&v, &v.manage_form, v.can_manage),
        ))
    })
    .await
}
