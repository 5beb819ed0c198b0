//! The operators' accounts: the list with search and pages, one account's page, and its acts
//! (disable, enable, make or stop being an operator).

use actix_web::{HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use validator::Validate;
use views::paths::{self, fill};

use crate::{
    ids::AccountId,
    services::{ServiceError, operator_accounts as svc},
    store::{account_admin::AccountListRow, account_events::AccountEventKind},
    web::{
        AppState,
        call::{Call, OperatorCall},
        errors::AppError,
        forms::{Form, after_post, partial},
        identity::{Operator, csrf_token},
        input::{self, Field, FromField, read},
        pages::account::session_lines,
        paging::SeekQuery,
        render,
    },
};

/// A search of the accounts' emails: at most 254 characters.
#[derive(Debug, Clone, Default)]
pub struct EmailPrefix(String);

impl FromField for EmailPrefix {
    fn from_field(raw: &str) -> Result<Self, String> {
        if raw.chars().count() > 254 {
            return Err("A search may have at most 254 characters.".into());
        }
        Ok(EmailPrefix(raw.to_string()))
    }
}

/// The list's search and page: a search it cannot run is a 400 that says why.
#[derive(Deserialize, Validate)]
pub struct ListQuery {
    #[serde(default)]
    #[validate(custom(function = read))]
    q: Field<EmailPrefix>,
    #[serde(flatten)]
    page: SeekQuery,
}

fn when(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn line(a: &AccountListRow) -> views::AccountListLine {
    views::AccountListLine {
        id: a.account_id.0,
        email: a.email.clone(),
        is_operator: a.is_operator,
        verified: a.verified,
        disabled: a.disabled,
        deleted: a.deleted,
        created_at: when(a.created_at),
        last_signed_in_at: a.last_signed_in_at.map(when),
    }
}

#[tracing::instrument(name = "Page: the accounts", skip_all)]
pub async fn list(Call { req, state, .. }: OperatorCall, q: web::Query<ListQuery>) -> Result<HttpResponse, AppError> {
    input::refuse_bad_query(&*q)?;
    let query = q.q.ok().map(|s| s.0.clone()).unwrap_or_default();
    let list = svc::accounts(&state.db, &query, q.page.seek("an account")?).await?;
    let view = views::AccountListView {
        query,
        total: if list.total.1 { views::Total::AtLeast(list.total.0) } else { views::Total::Exactly(list.total.0) },
        has_before: list.page.has_before,
        has_after: list.page.has_after,
        rows: list.page.rows.iter().map(line).collect(),
    };
    // A search from the box swaps only the results.
    let target = req.headers().get("hx-target").and_then(|v| v.to_str().ok()).unwrap_or("");
    let vary = (actix_web::http::header::VARY, "HX-Request, HX-Target");
    if render::is_htmx(&req) && (target == "account-results" || target.ends_with("#account-results")) {
        return Ok(HttpResponse::Ok()
            .content_type("text/html; charset=utf-8")
            .insert_header(vary)
            .body(views::account_results(&view).into_string()));
    }
    let mut page = render::ok(&req, "Accounts", views::account_list(&view));
    page.headers_mut().insert(vary.0, actix_web::http::header::HeaderValue::from_static(vary.1));
    Ok(page)
}

/// The account's page as a view, with a refusal of the last act.
async fn view(
    req: &actix_web::HttpRequest,
    state: &AppState,
    who: &Operator,
    id: AccountId,
    refused: Option<String>,
) -> Result<views::OperatorAccountView, AppError> {
    let d = svc::account(&state.db, id).await?.ok_or(AppError::NotFound)?;
    Ok(views::OperatorAccountView {
        csrf: csrf_token(req),
        own: who.account_id() == id,
        account: line(&d.facts),
        memberships: d
            .memberships
            .iter()
            .map(|m| views::MembershipLine {
                organization_id: m.organization_id.0,
                organization: m.name.clone(),
                role: m.role.clone(),
            })
            .collect(),
        sessions: session_lines(&d.sessions),
        events: d
            .events
            .iter()
            .map(|e| views::AccountEventLine {
                what: AccountEventKind::label(&e.kind).to_string(),
                by: e.actor_email.clone().unwrap_or_else(|| "—".into()),
                organization: e.organization.clone().unwrap_or_default(),
                detail: e.detail.clone(),
                at: when(e.at),
            })
            .collect(),
        refused,
    })
}

#[tracing::instrument(name = "Page: an account", skip_all, fields(account_id = %*id))]
pub async fn detail(
    Call { who, req, state }: OperatorCall,
    id: web::Path<AccountId>,
) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, &who, *id, None).await?;
    Ok(render::ok(&req, &v.account.email.clone(), views::operator_account(&v)))
}

/// Nothing: the acts' buttons send their token alone.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// An act's answer: done, to the account's page; refused, the acts again with the refusal (409)
/// in place for HTMX, else the page with it.
async fn acted(call: OperatorCall, id: AccountId, done: Result<(), ServiceError>) -> Result<HttpResponse, AppError> {
    let Call { who, req, state } = call;
    let refusal = match done {
        Ok(()) => return Ok(after_post(&req, &fill(paths::OPERATOR_ACCOUNT, &[&id]))),
        Err(ServiceError::Refused(m)) => m,
        Err(e) => return Err(refused_otherwise(e)),
    };
    let v = view(&req, &state, &who, id, Some(refusal)).await?;
    if render::is_htmx(&req) {
        return Ok(partial(StatusCode::CONFLICT, views::account_acts(&v)));
    }
    Ok(render::page(&req, StatusCode::CONFLICT, &v.account.email.clone(), views::operator_account(&v)))
}

fn refused_otherwise(e: ServiceError) -> AppError {
    crate::web::refusals::in_words(e, "The account is busy right now; nothing was changed. Try again in a moment.")
}

#[tracing::instrument(name = "Page: disable an account", skip_all, fields(account_id = %*id))]
pub async fn disable(
    call: OperatorCall,
    id: web::Path<AccountId>,
    _f: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let done = svc::disable_account(&call.state.db, call.who.account_id(), *id).await;
    acted(call, *id, done).await
}

#[tracing::instrument(name = "Page: enable an account", skip_all, fields(account_id = %*id))]
pub async fn enable(
    call: OperatorCall,
    id: web::Path<AccountId>,
    _f: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let done = svc::enable_account(&call.state.db, call.who.account_id(), *id).await;
    acted(call, *id, done).await
}

#[tracing::instrument(name = "Page: make an operator", skip_all, fields(account_id = %*id))]
pub async fn grant_operator(
    call: OperatorCall,
    id: web::Path<AccountId>,
    _f: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let done = svc::set_operator(&call.state.db, call.who.account_id(), *id, true).await;
    acted(call, *id, done).await
}

#[tracing::instrument(name = "Page: revoke an operator", skip_all, fields(account_id = %*id))]
pub async fn revoke_operator(
    call: OperatorCall,
    id: web::Path<AccountId>,
    _f: Form<NoFields>,
) -> Result<HttpResponse, AppError> {
    let done = svc::set_operator(&call.state.db, call.who.account_id(), *id, false).await;
    acted(call, *id, done).await
}
