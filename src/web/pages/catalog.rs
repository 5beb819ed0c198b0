//! The operator's catalog: resource keys, entitlement sets and their rules, products.
//! A form that fails is answered 4xx with the form again (in place, for HTMX), and nothing is
//! written; one that succeeds sends the operator back to the page, which shows the change.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use views::{FormState, Markup, Total};

use crate::{
    db::retry::once_more_after_deadlock,
    ids::{EntitlementSetId, ProductId},
    services::{
        self,
        catalog::CatalogError,
        reads::{CARRIED_COUNT_CAP, CatalogOverview},
    },
    web::forms::{Fields, after_post, partial, value},
    web::identity::Operator,
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

fn state_from(fields: &[(String, String)], e: &CatalogError) -> (StatusCode, FormState) {
    let mut f = FormState {
        values: fields.iter().filter(|(k, _)| k != "csrf_token").cloned().collect(),
        ..FormState::default()
    };
    let status = match e {
        CatalogError::Invalid(problems) => {
            f.field_errors = problems.clone();
            f.errors = vec!["Nothing was saved: correct the fields marked below.".into()];
            StatusCode::UNPROCESSABLE_ENTITY
        }
        CatalogError::Carried { pools } => {
            f.errors = vec![format!(
                "Nothing was saved: {} {} this now, so changing what it confers is a rule change, which applies \
                 to every one of them.",
                Total::capped(*pools, CARRIED_COUNT_CAP).words("organization pool", "organization pools"),
                if *pools == 1 { "carries" } else { "carry" }
            )];
            StatusCode::CONFLICT
        }
        CatalogError::ChangeInProgress => {
            let (_, m) = AppError::ChangeInProgress.title_and_message();
            f.errors = vec![format!("Another change is in progress. {m}")];
            StatusCode::CONFLICT
        }
        CatalogError::NotFound(what) => {
            f.errors = vec![format!("That {what} does not exist (any more).")];
            StatusCode::NOT_FOUND
        }
        CatalogError::Db(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, f)
}

fn fail(e: CatalogError) -> Result<HttpResponse, AppError> {
    match e {
        CatalogError::Db(db) => Err(db.into()),
        _ => unreachable!("only database failures are not shown in the form"),
    }
}

async fn catalog_view(state: &AppState, req: &HttpRequest) -> Result<views::CatalogView, AppError> {
    let CatalogOverview { keys, sets, rules, products, tiers } = services::reads::catalog(&state.db).await?;
    Ok(views::CatalogView {
        csrf: csrf_token(req),
        set_options: sets.iter().map(|s| (s.entitlement_set_id.0, s.name.clone())).collect(),
        keys: keys
            .into_iter()
            .map(|k| views::ResourceKeyRow {
                key: k.resource_key,
                kind: k.kind.to_string(),
                provider: k.provider,
                description: k.description,
            })
            .collect(),
        sets: sets
            .into_iter()
            .map(|s| views::SetRow {
                id: s.entitlement_set_id.0,
                rules: rules
                    .iter()
                    .filter(|r| r.entitlement_set_id == s.entitlement_set_id)
                    .map(|r| views::RuleRow {
                        key: r.resource_key.clone(),
                        value: rule_text(r.numeric_value, r.flag_value),
                    })
                    .collect(),
                name: s.name,
                carried_by_pools: Total::capped(s.carried_by_pools, CARRIED_COUNT_CAP),
            })
            .collect(),
        products: products
            .into_iter()
            .map(|p| views::ProductRow {
                shape: tiers
                    .iter()
                    .filter(|t| t.product_id == p.product_id)
                    .map(|t| format!("{} · rank {}", t.ladder_name, t.rank))
                    .collect(),
                id: p.product_id.0,
                name: p.name,
                set_name: p.set_name,
                published: p.published,
            })
            .collect(),
        key_form: FormState::default(),
        set_form: FormState::default(),
        product_form: FormState::default(),
    })
}

fn rule_text(n: Option<i64>, f: Option<bool>) -> String {
    match (n, f) {
        (Some(n), _) => n.to_string(),
        (_, Some(true)) => "yes".into(),
        (_, Some(false)) => "no".into(),
        _ => String::new(),
    }
}

pub async fn catalog(_op: Operator, req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    let v = catalog_view(&state, &req).await?;
    Ok(render::ok(&req, "Catalog", views::catalog(&v)))
}

/// A failed catalog form: the form alone for HTMX, else the whole page with the form filled in.
async fn refused_catalog_form(
    req: &HttpRequest,
    state: &AppState,
    status: StatusCode,
    which: &str,
    form: FormState,
) -> Result<HttpResponse, AppError> {
    let mut v = catalog_view(state, req).await?;
    let form_markup: Markup = match which {
        "key" => views::key_form(&v.csrf, &form),
        "set" => views::set_form(&v.csrf, &form),
        _ => views::product_form(&v.csrf, &v.set_options, &form),
    };
    if render::is_htmx(req) {
        return Ok(partial(status, form_markup));
    }
    match which {
        "key" => v.key_form = form,
        "set" => v.set_form = form,
        _ => v.product_form = form,
    }
    Ok(render::page(req, status, "Catalog", views::catalog(&v)))
}

pub async fn create_key(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let create = async || {
        services::catalog::create_resource_key(&state.db, value(&f, "key"), value(&f, "kind"), value(&f, "description"))
            .await
    };
    match once_more_after_deadlock(&state.db, "Create a resource key", create).await {
        Ok(_) => Ok(after_post(&req, "/operator/catalog")),
        Err(CatalogError::Db(e)) => fail(CatalogError::Db(e)),
        Err(e) => {
            let (status, fs) = state_from(&f, &e);
            refused_catalog_form(&req, &state, status, "key", fs).await
        }
    }
}

pub async fn create_set(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let create = async || services::catalog::create_entitlement_set(&state.db, value(&f, "name")).await;
    match once_more_after_deadlock(&state.db, "Create an entitlement set", create).await {
        Ok(id) => Ok(after_post(&req, &format!("/operator/catalog/sets/{id}"))),
        Err(CatalogError::Db(e)) => fail(CatalogError::Db(e)),
        Err(e) => {
            let (status, fs) = state_from(&f, &e);
            refused_catalog_form(&req, &state, status, "set", fs).await
        }
    }
}

/// The set field of a product form: empty is "no set", anything else must be an id.
fn parse_set(raw: &str) -> Result<Option<EntitlementSetId>, CatalogError> {
    match raw.trim() {
        "" => Ok(None),
        s => s.parse().map(|id| Some(EntitlementSetId(id))).map_err(|_| {
            CatalogError::Invalid(vec![(
                "entitlement_set_id".into(),
                "Choose an entitlement set from the list.".into(),
            )])
        }),
    }
}

fn checked(raw: &str) -> bool {
    matches!(raw, "on" | "true" | "yes" | "1")
}

pub async fn create_product(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let result = match parse_set(value(&f, "entitlement_set_id")) {
        Ok(set) => {
            let create = async || {
                services::catalog::create_product(&state.db, value(&f, "name"), set, checked(value(&f, "published")))
                    .await
            };
            once_more_after_deadlock(&state.db, "Create a product", create).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(id) => Ok(after_post(&req, &format!("/operator/catalog/products/{id}"))),
        Err(CatalogError::Db(e)) => fail(CatalogError::Db(e)),
        Err(e) => {
            let (status, fs) = state_from(&f, &e);
            refused_catalog_form(&req, &state, status, "product", fs).await
        }
    }
}

async fn set_edit_view(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    form: Option<FormState>,
) -> Result<Option<views::SetEditView>, AppError> {
    let Some(d) = services::reads::entitlement_set(&state.db, EntitlementSetId(id)).await? else { return Ok(None) };
    let rows = d
        .keys
        .iter()
        .map(|k| {
            let current = d.rules.iter().find(|r| r.resource_key == k.resource_key);
            let submitted = form.as_ref().map(|f| f.value(&format!("rule.{}", k.resource_key)).to_string());
            views::RuleEditRow {
                key: k.resource_key.clone(),
                kind: k.kind.to_string(),
                value: submitted
                    .unwrap_or_else(|| current.map(|r| rule_text(r.numeric_value, r.flag_value)).unwrap_or_default()),
            }
        })
        .collect();
    let mut form = form.unwrap_or_default();
    if req.query_string().contains("saved=1") && form.errors.is_empty() {
        form.notice = Some("The rules were saved.".into());
    }
    Ok(Some(views::SetEditView {
        csrf: csrf_token(req),
        set_id: id,
        name: d.set.name,
        carried_by_pools: Total::capped(d.set.carried_by_pools, CARRIED_COUNT_CAP),
        rows,
        form,
    }))
}

pub async fn set_page(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let v = set_edit_view(&req, &state, *id, None).await?.ok_or(AppError::NotFound)?;
    Ok(render::ok(&req, &format!("Entitlement set: {}", v.name), views::set_edit(&v)))
}

pub async fn save_rules(
    op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    use crate::services::rule_changes::{RuleChangeError, commit_rule_change_batch};
    let f = form.into_inner();
    let submitted: BTreeMap<String, String> =
        f.iter().filter_map(|(k, v)| k.strip_prefix("rule.").map(|key| (key.to_string(), v.clone()))).collect();
    let actor = Some(op.account_id());
    let commit = async || {
        commit_rule_change_batch(
            &state.db,
            EntitlementSetId(*id),
            &submitted,
            actor,
            value(&f, "reason"),
            state.config.rule_change_sync_cap,
        )
        .await
    };
    let result = once_more_after_deadlock(&state.db, "Rule change", commit).await;
    let e = match result {
        // The change's page shows it settled, or draining live.
        Ok(c) => return Ok(after_post(&req, &format!("/operator/rule-changes/{}", c.change_id))),
        Err(RuleChangeError::Db(e)) => return Err(e.into()),
        Err(RuleChangeError::NotFound(_)) => return Err(AppError::NotFound),
        Err(RuleChangeError::ChangeInProgress) => CatalogError::ChangeInProgress,
        Err(RuleChangeError::Invalid(p)) => CatalogError::Invalid(p),
    };
    let (status, fs) = state_from(&f, &e);
    let mut v = set_edit_view(&req, &state, *id, Some(fs)).await?.ok_or(AppError::NotFound)?;
    // A problem with no field of its own (an unknown key, nothing to change) is said above the form.
    let rows: Vec<String> = v.rows.iter().map(|r| format!("rule.{}", r.key)).collect();
    let orphans: Vec<String> =
        v.form.field_errors.iter().filter(|(k, _)| !rows.contains(k)).map(|(_, m)| m.clone()).collect();
    v.form.errors.extend(orphans);
    if render::is_htmx(&req) {
        return Ok(HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(views::set_edit(&v).into_string()));
    }
    Ok(render::page(&req, status, &format!("Entitlement set: {}", v.name), views::set_edit(&v)))
}

async fn product_edit_view(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    form: Option<FormState>,
) -> Result<Option<(String, views::ProductEditView)>, AppError> {
    let Some(d) = services::reads::product(&state.db, ProductId(id)).await? else { return Ok(None) };
    let form = form.unwrap_or_else(|| {
        let mut f = FormState {
            values: vec![
                ("name".into(), d.product.name.clone()),
                ("entitlement_set_id".into(), d.product.entitlement_set_id.map(|s| s.to_string()).unwrap_or_default()),
                ("published".into(), if d.product.published { "on".into() } else { String::new() }),
            ],
            ..FormState::default()
        };
        if req.query_string().contains("saved=1") {
            f.notice = Some("The product was saved.".into());
        }
        f
    });
    Ok(Some((
        d.product.name.clone(),
        views::ProductEditView {
            csrf: csrf_token(req),
            product_id: id,
            set_options: d.sets.iter().map(|s| (s.entitlement_set_id.0, s.name.clone())).collect(),
            shape: d.tiers.iter().map(|t| format!("{} · rank {}", t.ladder_name, t.rank)).collect(),
            carried_by_pools: Total::capped(d.product.carried_by_pools, CARRIED_COUNT_CAP),
            form,
        },
    )))
}

pub async fn product_page(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let (name, v) = product_edit_view(&req, &state, *id, None).await?.ok_or(AppError::NotFound)?;
    Ok(render::ok(&req, &format!("Product: {name}"), views::product_edit(&v)))
}

pub async fn save_product(
    _op: Operator,
    req: HttpRequest,
    state: web::Data<AppState>,
    id: web::Path<i64>,
    form: Fields,
) -> Result<HttpResponse, AppError> {
    let f = form.into_inner();
    let result = match parse_set(value(&f, "entitlement_set_id")) {
        Ok(set) => {
            let published = checked(value(&f, "published"));
            services::catalog::update_product(&state.db, ProductId(*id), value(&f, "name"), set, published).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Ok(after_post(&req, &format!("/operator/catalog/products/{id}?saved=1"))),
        Err(CatalogError::Db(e)) => fail(CatalogError::Db(e)),
        Err(CatalogError::NotFound(_)) => Err(AppError::NotFound),
        Err(e) => {
            let (status, fs) = state_from(&f, &e);
            let (name, v) = product_edit_view(&req, &state, *id, Some(fs)).await?.ok_or(AppError::NotFound)?;
            Ok(render::page(&req, status, &format!("Product: {name}"), views::product_edit(&v)))
        }
    }
}
