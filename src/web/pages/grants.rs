//! The operator's grants: the list with filters, issuing, a grant's page with its lineage and
//! history, revoking and managing.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use validator::Validate;
use views::paths::{self, fill};
use views::{FormState, Keyset, Total};

use crate::{
    ids::{AccountId, GrantId, OrganizationId, ProductId},
    services::{
        self, ServiceError,
        grants::{EmailDomain, GrantTime, IssueGrant, ManageGrant, Quantity, Reason, Recipient, check_bounds},
    },
    states::{GrantKind, GrantStatus},
    store::grants::{EventRow, GrantRow},
    web::call::{Call, OperatorCall},
    web::forms::{Form, run_parsed},
    web::input::{self, Field, FromField, read},
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
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct IssueForm {
    #[validate(custom(function = read, message = "“{value}” is not an organization number."))]
    organization_id: Field<Option<OrganizationId>>,
    #[validate(custom(function = read))]
    provision_domain: Field<Option<EmailDomain>>,
    #[validate(custom(function = read, message = "Choose a product."))]
    product_id: Field<ProductId>,
    #[validate(custom(function = read))]
    quantity: Field<Quantity>,
    #[validate(custom(function = read))]
    starts_at: Field<Option<GrantTime>>,
    #[validate(custom(function = read))]
    ends_at: Field<Option<GrantTime>>,
    #[validate(custom(function = read))]
    reason: Field<Reason>,
}

impl IssueForm {
    /// The grant asked for, every problem by its field; `actor` issues it.
    fn command(self, actor: Option<AccountId>) -> Result<IssueGrant, ServiceError> {
        let mut problems = input::problems(&self);
        let recipient = match (self.organization_id.ok(), self.provision_domain.ok()) {
            (Some(None), Some(None)) => {
                problems.push("organization_id", "Name an organization, or an email domain to wait for.");
                None
            }
            (Some(Some(o)), Some(None)) => Some(Recipient::Organization(*o)),
            (Some(None), Some(Some(d))) => Some(Recipient::Domain(d.clone())),
            (Some(Some(_)), Some(Some(_))) => {
                problems.push("provision_domain", "Name an organization or an email domain, not both.");
                None
            }
            // One of them was told already.
            _ => None,
        };
        let starts = self.starts_at.ok().copied().flatten().map(GrantTime::get);
        let ends = self.ends_at.ok().copied().flatten().map(GrantTime::get);
        check_bounds(starts, ends, &mut problems);
        let (((recipient, product_id), quantity), reason) = problems
            .or(recipient.zip(self.product_id.into_ok()).zip(self.quantity.into_ok()).zip(self.reason.into_ok()))?;
        Ok(IssueGrant {
            recipient,
            product_id,
            quantity: quantity.get(),
            starts_at: starts,
            ends_at: ends,
            reason: reason.into_string(),
            actor,
        })
    }
}

/// The revoke form: the reason alone (the service requires it).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct RevokeForm {
    #[validate(custom(function = read))]
    reason: Field<Reason>,
}

impl TryFrom<RevokeForm> for Reason {
    type Error = ServiceError;

    fn try_from(f: RevokeForm) -> Result<Reason, ServiceError> {
        let problems = input::problems(&f);
        problems.or(f.reason.into_ok())
    }
}

/// The manage form (an active grant's has no start).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ManageForm {
    #[validate(custom(function = read))]
    starts_at: Field<Option<GrantTime>>,
    #[validate(custom(function = read))]
    ends_at: Field<Option<GrantTime>>,
    #[validate(custom(function = read))]
    quantity: Field<Quantity>,
    #[validate(custom(function = read))]
    reason: Field<Reason>,
}

impl ManageForm {
    /// The change asked for, every problem by its field; `actor` makes it.
    fn command(self, actor: Option<AccountId>) -> Result<ManageGrant, ServiceError> {
        let mut problems = input::problems(&self);
        let starts = self.starts_at.ok().copied().flatten().map(GrantTime::get);
        let ends = self.ends_at.ok().copied().flatten().map(GrantTime::get);
        check_bounds(starts, ends, &mut problems);
        let (quantity, reason) = problems.or(self.quantity.into_ok().zip(self.reason.into_ok()))?;
        Ok(ManageGrant {
            starts_at: starts,
            ends_at: ends,
            quantity: quantity.get(),
            reason: reason.into_string(),
            actor,
        })
    }
}

/// A grant's start or end, as its form's field reads it.
impl FromField for GrantTime {
    fn from_field(raw: &str) -> Result<Self, String> {
        GrantTime::parse(raw)
    }
}

/// A grant's quantity, as its form's field reads it.
impl FromField for Quantity {
    fn from_field(raw: &str) -> Result<Self, String> {
        Quantity::parse(raw)
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

/// The list's filters and page: a bad filter is a 400 that says what was wrong.
#[derive(Deserialize, Validate)]
pub struct ListQuery {
    #[serde(default)]
    #[validate(custom(function = read))]
    status: Field<Option<GrantStatus>>,
    #[serde(default)]
    #[validate(custom(function = read, message = "“{value}” is not an organization number."))]
    organization_id: Field<Option<OrganizationId>>,
    #[serde(flatten)]
    page: SeekQuery,
}

/// A status filter names one of the grants' statuses exactly as the list writes them.
impl FromField for GrantStatus {
    fn from_field(raw: &str) -> Result<Self, String> {
        GrantStatus::from_text(raw).ok_or_else(|| "“{value}” is not a grant status.".into())
    }
}

#[tracing::instrument(name = "Page: the grants", skip_all, fields(status = ?q.status, organization_id = ?q.organization_id))]
pub async fn list(Call { req, state, .. }: OperatorCall, q: web::Query<ListQuery>) -> Result<HttpResponse, AppError> {
    input::refuse_bad_query(&*q)?;
    let status_filter = q.status.ok().copied().flatten();
    let org = q.organization_id.ok().copied().flatten();
    let status = status_filter.map(|s| s.to_string()).unwrap_or_default();
    let org_text = q.organization_id.raw().to_string();
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

/// The issue page's query: an organization to issue to, filled in (a bad one is the form's to tell).
#[derive(Deserialize)]
pub struct NewQuery {
    #[serde(default)]
    organization_id: Field<Option<OrganizationId>>,
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
        values: vec![("organization_id".into(), q.organization_id.raw().to_string()), ("quantity".into(), "1".into())],
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
    let values = form.values();
    let issue = async |g: &IssueGrant| services::grants::issue_grant(&state.db, g).await;
    let issued = run_parsed(&state.db, "Issue a grant", form.into_inner().command(Some(op.account_id())), issue).await;
    refusals::posted(&req, issued.map(|id| fill(paths::GRANT, &[&id])), values, WORDS, async |r| {
        let v = issue_view(&req, &state, r.form).await?;
        Ok(refusals::answer(&req, r.status, "Issue a grant", || views::issue_grant(&v), || views::issue_grant(&v)))
    })
    .await
}

async fn detail_view(
    req: &HttpRequest,
    state: &AppState,
    id: GrantId,
    revoke_form: FormState,
    manage_form: FormState,
) -> Result<views::GrantDetailView, AppError> {
    let d = services::reads::grant(&state.db, id).await?.ok_or(AppError::NotFound)?;
    let head = d.lineage.iter().find(|g| !d.lineage.iter().any(|n| n.extends_grant_id == Some(g.grant_id)));
    let head_id = head.map_or(id.0, |h| h.grant_id.0);
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
                current: l.grant_id == id,
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

#[tracing::instrument(name = "Page: a grant", skip_all, fields(grant_id = %*id))]
pub async fn detail(Call { req, state, .. }: OperatorCall, id: web::Path<GrantId>) -> Result<HttpResponse, AppError> {
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

#[tracing::instrument(name = "Page: revoke a grant", skip_all, fields(grant_id = %*id))]
pub async fn revoke(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<GrantId>,
    form: Form<RevokeForm>,
) -> Result<HttpResponse, AppError> {
    let actor = Some(op.account_id());
    let values = form.values();
    let revoke = async |reason: &Reason| services::grants::revoke_grant(&state.db, *id, actor, reason).await;
    let revoked = run_parsed(&state.db, "Revoke a grant", Reason::try_from(form.into_inner()), revoke).await;
    refusals::posted(&req, revoked.map(|head| fill(paths::GRANT, &[&head])), values, WORDS, async |r| {
        let page = async || {
            let v = detail_view(&req, &state, *id, r.form.clone(), FormState::default()).await?;
            Ok(with_banner(&v, &r.form, v.can_revoke))
        };
        let form = || views::revoke_form(&csrf_token(&req), id.0, &r.form);
        refusals::answer_reading(&req, r.status, &format!("Grant #{}", *id), form, page).await
    })
    .await
}

#[tracing::instrument(name = "Page: manage a grant", skip_all, fields(grant_id = %*id))]
pub async fn manage(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<GrantId>,
    form: Form<ManageForm>,
) -> Result<HttpResponse, AppError> {
    let values = form.values();
    let manage = async |m: &ManageGrant| services::grants::manage_grant(&state.db, *id, m).await;
    let managed =
        run_parsed(&state.db, "Manage a grant", form.into_inner().command(Some(op.account_id())), manage).await;
    refusals::posted(&req, managed.map(|head| fill(paths::GRANT, &[&head])), values, WORDS, async |r| {
        let v = detail_view(&req, &state, *id, FormState::default(), r.form).await?;
        let title = format!("Grant #{}", v.grant.id);
        Ok(refusals::answer(
            &req,
            r.status,
            &title,
            || views::manage_form(&v.csrf, id.0, v.waiting, &v.manage_form),
            || with_banner(&v, &v.manage_form, v.can_manage),
        ))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The issue form sent with these fields, as its command.
    #[allow(clippy::too_many_arguments)]
    fn issue(o: &str, d: &str, p: &str, q: &str, s: &str, e: &str, r: &str) -> Result<IssueGrant, ServiceError> {
        let names = ["organization_id", "provision_domain", "product_id", "quantity", "starts_at", "ends_at", "reason"];
        let sent = names.iter().zip([o, d, p, q, s, e, r]).map(|(n, v)| (n.to_string(), v.to_string())).collect();
        crate::web::forms::read::<IssueForm>(sent)?.into_inner().command(None)
    }

    #[test]
    fn issue_input_is_parsed_or_refused_by_field() {
        let ok = issue("3", "", "2", "2", "", "2999-01-01T00:00", "a partner").unwrap();
        assert_eq!(ok.recipient, Recipient::Organization(OrganizationId(3)));
        assert_eq!(ok.quantity, 2);
        let fields = |e: ServiceError| match e {
            ServiceError::Invalid(p) => p.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(fields(issue("", "", "2", "1", "", "", "r").unwrap_err()), ["organization_id"]);
        assert_eq!(fields(issue("1", "x.org", "2", "1", "", "", "r").unwrap_err()), ["provision_domain"]);
        assert_eq!(fields(issue("1", "", "", "1", "", "", "r").unwrap_err()), ["product_id"]);
        assert_eq!(fields(issue("1", "", "2", "0", "", "", "r").unwrap_err()), ["quantity"]);
        assert_eq!(fields(issue("1", "", "2", "1", "", "", " ").unwrap_err()), ["reason"]);
        assert_eq!(
            fields(issue("1", "", "2", "1", "2999-02-01T00:00", "2999-01-01T00:00", "r").unwrap_err()),
            ["ends_at"]
        );
        assert_eq!(fields(issue("1", "", "2", "1", "", "2001-01-01", "r").unwrap_err()), ["ends_at"]);
        assert_eq!(fields(issue("1", "", "2", "1", "soon", "", "r").unwrap_err()), ["starts_at"]);
        let d = issue("", "@Example.ORG", "2", "", "", "", "r").unwrap();
        assert_eq!(d.recipient, Recipient::Domain(EmailDomain::parse("example.org").unwrap()));
    }
}
