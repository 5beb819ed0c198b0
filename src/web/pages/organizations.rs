//! The operator's organizations: a searchable, paginated list and one organization's pool.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use validator::Validate;
use views::paths::{self, fill};

use crate::{
    ids::{OrgTypeId, OrganizationId},
    services::{self, ServiceError, grants::EmailDomain, organizations::OrgName},
    states::GrantKind,
    store::{catalog::HeldConferral, paging::Seek},
    web::call::{Call, OperatorCall},
    web::forms::{Form, run_parsed},
    web::identity::csrf_token,
    web::input::{self, Field, FromField, read},
    web::paging::SeekQuery,
    web::refusals::{self, Words},
    web::{
        AppState,
        errors::AppError,
        pages::home::{entitlement_rows, usage_rows},
        render,
    },
};

/// Creating an organization waits for its type's row past a default change's hold; past the
/// bound it says so in its own words.
const WORDS: Words = Words {
    done: "created",
    busy: Some(
        "The organization could not be set up because its plan type is being changed right now; nothing was \
         created. Try again in a moment.",
    ),
};

/// The create form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct CreateForm {
    #[validate(custom(function = read))]
    name: Field<OrgName>,
    /// Empty: no type.
    #[validate(custom(function = read, message = "Choose an organization type from the list."))]
    org_type_id: Field<Option<OrgTypeId>>,
    /// Empty: none.
    #[validate(custom(function = read))]
    email_domain: Field<Option<EmailDomain>>,
}

/// An organization as the form asks for it.
struct NewOrganization {
    name: OrgName,
    org_type_id: Option<OrgTypeId>,
    email_domain: Option<EmailDomain>,
}

impl CreateForm {
    /// `org_types` are the types the form offers: another id is refused by field.
    fn command(self, org_types: &[(i64, String)]) -> Result<NewOrganization, ServiceError> {
        let mut problems = input::problems(&self);
        let org_type_id = match self.org_type_id.into_ok() {
            Some(Some(id)) if !org_types.iter().any(|(o, _)| *o == id.0) => {
                problems.push("org_type_id", "Choose an organization type from the list.");
                None
            }
            read => read,
        };
        let ((name, org_type_id), email_domain) =
            problems.or(self.name.into_ok().zip(org_type_id).zip(self.email_domain.into_ok()))?;
        Ok(NewOrganization { name, org_type_id, email_domain })
    }
}

/// A search of the organizations' names: at most 200 characters.
#[derive(Debug, Clone, Default)]
pub struct Search(String);

impl FromField for Search {
    fn from_field(raw: &str) -> Result<Self, String> {
        if raw.chars().count() > 200 {
            return Err("A search may have at most 200 characters.".into());
        }
        Ok(Search(raw.to_string()))
    }
}

/// The list's search and page: a search it cannot run is a 400 that says why.
#[derive(Deserialize, Validate)]
pub struct ListQuery {
    #[serde(default)]
    #[validate(custom(function = read))]
    q: Field<Search>,
    #[serde(flatten)]
    page: SeekQuery,
}

#[tracing::instrument(name = "Page: the organizations", skip_all)]
pub async fn list(Call { req, state, .. }: OperatorCall, q: web::Query<ListQuery>) -> Result<HttpResponse, AppError> {
    input::refuse_bad_query(&*q)?;
    let query = q.q.ok().map(|s| s.0.clone()).unwrap_or_default();
    let view = list_view(&req, &state, query, q.page.seek("an organization")?).await?;
    // A search from the box swaps only the results.
    // htmx 4 names the target as `tag#id` (`div#org-results`); older ones as the bare id.
    let target = req.headers().get("hx-target").and_then(|v| v.to_str().ok()).unwrap_or("");
    if render::is_htmx(&req) && (target == "org-results" || target.ends_with("#org-results")) {
        return Ok(HttpResponse::Ok()
            .content_type("text/html; charset=utf-8")
            .insert_header((actix_web::http::header::VARY, "HX-Request, HX-Target"))
            .body(views::organization_results(&view).into_string()));
    }
    let mut page = render::ok(&req, "Organizations", views::organization_list(&view));
    page.headers_mut().insert(
        actix_web::http::header::VARY,
        actix_web::http::header::HeaderValue::from_static("HX-Request, HX-Target"),
    );
    Ok(page)
}

/// The list's page `seek` for `query`, with an empty create form.
async fn list_view(
    req: &HttpRequest,
    state: &AppState,
    query: String,
    seek: Seek,
) -> Result<views::OrgListView, AppError> {
    let list = services::reads::organizations(&state.db, &query, seek).await?;
    Ok(views::OrgListView {
        csrf: csrf_token(req),
        org_types: org_type_options(state).await?,
        create_form: views::FormState::default(),
        query,
        total: if list.total.1 { views::Total::AtLeast(list.total.0) } else { views::Total::Exactly(list.total.0) },
        has_before: list.page.has_before,
        has_after: list.page.has_after,
        rows: list
            .page
            .rows
            .into_iter()
            .map(|r| views::OrgListRow {
                id: r.organization_id.0,
                name: r.name,
                org_type: r.org_type,
                plan: r.plan.unwrap_or_default(),
            })
            .collect(),
    })
}

/// The organization types as the create form lists them.
async fn org_type_options(state: &AppState) -> Result<Vec<(i64, String)>, AppError> {
    Ok(services::reads::org_type_options(&state.db).await?.into_iter().map(|(id, name)| (id.0, name)).collect())
}

fn source(c: &HeldConferral) -> String {
    match (c.grant_kind, c.grant_id, &c.stripe_subscription_id, &c.stripe_item_id) {
        (Some(GrantKind::Floor), Some(g), _, _) => format!("floor grant #{g}"),
        (Some(kind), Some(g), _, _) => format!("{kind} grant #{g}"),
        (_, _, Some(s), Some(i)) => format!("subscription {s} item {i}"),
        _ => format!("conferral #{}", c.conferral_id),
    }
}

fn position_row(c: &HeldConferral) -> views::PositionRow {
    views::PositionRow {
        ladder: c.ladder.clone().unwrap_or_default(),
        rank: c.rank.unwrap_or_default(),
        product: if c.quantity > 1 { format!("{} × {}", c.product, c.quantity) } else { c.product.clone() },
        source: source(c),
        status: if c.suspended { "suspended".into() } else { "active".into() },
    }
}

#[tracing::instrument(name = "Page: an organization", skip_all, fields(organization_id = %*id))]
pub async fn detail(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<OrganizationId>,
) -> Result<HttpResponse, AppError> {
    let d = services::reads::organization(&state.db, *id).await?.ok_or(AppError::NotFound)?;
    let view = views::OrgDetailView {
        id: d.facts.organization_id.0,
        name: d.facts.name.clone(),
        org_type: d.facts.org_type.clone(),
        pool_id: d.facts.pool_id.map_or(0, |p| p.0),
        created_at: d.facts.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        positions: d.held.iter().filter(|c| c.ladder.is_some()).map(position_row).collect(),
        other_conferrals: d.held.iter().filter(|c| c.ladder.is_none()).map(position_row).collect(),
        displaced: d
            .displaced
            .iter()
            .map(|x| views::DisplacedRow {
                source: x.source.clone(),
                product: x.product.clone(),
                since: x.since.format("%Y-%m-%d %H:%M UTC").to_string(),
                kind: x.kind.clone(),
            })
            .collect(),
        entitlements: entitlement_rows(&d.entitlements, &d.labels),
        usage: usage_rows(&d.usage, &d.labels),
        members: d.members.iter().map(|m| views::MemberRow { email: m.email.clone(), role: m.role.clone() }).collect(),
        grants: d.grants.iter().map(crate::web::pages::grants::list_row).collect(),
        events: d.events.iter().map(crate::web::pages::grants::event_row).collect(),
        invitations: crate::web::pages::members::operator_invite_view(&req, &state, *id, Default::default()).await?,
    };
    Ok(render::ok(&req, &d.facts.name, views::organization_detail(&view)))
}

/// Create an organization (with its pool and floor; with an email domain, the grants waiting
/// for it).
#[tracing::instrument(name = "Page: create an organization", skip_all)]
pub async fn create(Call { req, state, .. }: OperatorCall, form: Form<CreateForm>) -> Result<HttpResponse, AppError> {
    let org_types = org_type_options(&state).await?;
    let create = async |o: &NewOrganization| {
        let domain = o.email_domain.as_ref();
        services::organizations::create_organization_with_domain(&state.db, &o.name, o.org_type_id, domain).await
    };
    let values = form.values();
    let created = run_parsed(&state.db, "Create an organization", form.into_inner().command(&org_types), create).await;
    let to = created.map(|(created, _)| fill(paths::ORGANIZATION, &[&created.organization_id]));
    refusals::posted(&req, to, values, WORDS, async |r| {
        let page = async || {
            let mut view = list_view(&req, &state, String::new(), Seek::First).await?;
            view.create_form = r.form.clone();
            Ok(views::organization_list(&view))
        };
        let form = || views::create_organization_form(&csrf_token(&req), &org_types, &r.form);
        refusals::answer_reading(&req, r.status, "Organizations", form, page).await
    })
    .await
}
