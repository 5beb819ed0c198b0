//! The operator's catalog: resource keys, entitlement sets and their rules, products.
//! A form that fails is answered 4xx with the form again (in place, for HTMX), and nothing is
//! written; one that succeeds sends the operator back to the page, which shows the change.

use std::collections::BTreeMap;
use views::paths::{self, fill};

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use validator::Validate;
use views::{FormState, Total};

use crate::{
    ids::{EntitlementSetId, ProductId, ResourceKey},
    services::{
        self, ServiceError,
        catalog::{
            KeyDescription, KeyDisplayName, KeyKind, KeyUnit, ProductName, ResourceKeyName, RuleEntry, Seats, SetName,
        },
        reads::{CARRIED_COUNT_CAP, CatalogOverview},
        rule_changes::ChangeNote,
    },
    web::call::{Call, OperatorCall},
    web::forms::{Form, run_parsed, unknown_field},
    web::input::{self, Field, FromField, read},
    web::refusals::{self, Refused, Words},
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

const WORDS: Words = Words { done: "saved", busy: None };

/// A product's save: a change of its entitlement set waits up to the lock bound for every
/// materialization under way (a grant, a move, a reconcile of any organization) and for the
/// product's row; past it, it says so in its own words, not as another change to plans or rules.
pub const PRODUCT_WORDS: Words = Words {
    done: "saved",
    busy: Some(
        "Organizations' entitlements are being recalculated right now, so the product was not changed. Wait a \
         moment and save it again.",
    ),
};

impl FromField for ResourceKeyName {
    fn from_field(raw: &str) -> Result<Self, String> {
        ResourceKeyName::parse(raw)
    }
}

impl FromField for KeyKind {
    fn from_field(raw: &str) -> Result<Self, String> {
        KeyKind::parse(raw)
    }
}

impl FromField for KeyDescription {
    fn from_field(raw: &str) -> Result<Self, String> {
        KeyDescription::parse(raw)
    }
}

impl FromField for KeyDisplayName {
    fn from_field(raw: &str) -> Result<Self, String> {
        KeyDisplayName::parse(raw)
    }
}

impl FromField for KeyUnit {
    fn from_field(raw: &str) -> Result<Self, String> {
        KeyUnit::parse(raw)
    }
}

impl FromField for SetName {
    fn from_field(raw: &str) -> Result<Self, String> {
        SetName::parse(raw)
    }
}

impl FromField for ProductName {
    fn from_field(raw: &str) -> Result<Self, String> {
        ProductName::parse(raw)
    }
}

impl FromField for Seats {
    fn from_field(raw: &str) -> Result<Self, String> {
        Seats::parse(raw)
    }
}

/// The resource key form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct KeyForm {
    #[validate(custom(function = read))]
    key: Field<ResourceKeyName>,
    #[validate(custom(function = read))]
    kind: Field<KeyKind>,
    #[validate(custom(function = read))]
    description: Field<KeyDescription>,
}

/// A resource key as the form asks for it.
struct NewKey {
    key: ResourceKeyName,
    kind: KeyKind,
    description: KeyDescription,
}

impl TryFrom<&KeyForm> for NewKey {
    type Error = ServiceError;

    fn try_from(form: &KeyForm) -> Result<Self, ServiceError> {
        let problems = input::problems(form);
        let (key, kind, description) = (form.key.ok(), form.kind.ok(), form.description.ok());
        problems.or(key.zip(kind).zip(description).map(|((key, kind), description)| NewKey {
            key: key.clone(),
            kind: *kind,
            description: description.clone(),
        }))
    }
}

/// A resource key's name form: the name members read, and a numeric key's unit (blank: none;
/// a flag's form sends none).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct KeyLabelForm {
    #[validate(custom(function = read))]
    name: Field<KeyDisplayName>,
    #[validate(custom(function = read))]
    unit: Field<KeyUnit>,
}

impl TryFrom<&KeyLabelForm> for (KeyDisplayName, KeyUnit) {
    type Error = ServiceError;

    fn try_from(form: &KeyLabelForm) -> Result<Self, ServiceError> {
        input::problems(form).or(form.name.ok().cloned().zip(form.unit.ok().cloned()))
    }
}

/// The entitlement set form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct SetForm {
    #[validate(custom(function = read))]
    name: Field<SetName>,
}

impl TryFrom<&SetForm> for SetName {
    type Error = ServiceError;

    fn try_from(form: &SetForm) -> Result<Self, ServiceError> {
        input::problems(form).or(form.name.ok().cloned())
    }
}

/// The product form, to create one or edit one.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ProductForm {
    #[validate(custom(function = read))]
    name: Field<ProductName>,
    /// Empty: no set.
    #[validate(custom(function = read, message = "Choose an entitlement set from the list."))]
    entitlement_set_id: Field<Option<EntitlementSetId>>,
    published: Field<Ticked>,
}

/// A checkbox: ticked ("on", or a true word), or not (anything else, or not sent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ticked(bool);

impl FromField for Ticked {
    fn from_field(raw: &str) -> Result<Self, String> {
        Ok(Ticked(matches!(raw, "on" | "true" | "yes" | "1")))
    }
}

/// A product as the form asks for it.
struct ProductInput {
    name: ProductName,
    set_id: Option<EntitlementSetId>,
    published: bool,
}

impl ProductForm {
    fn command(&self) -> Result<ProductInput, ServiceError> {
        let problems = input::problems(self);
        let (name, set_id) = problems.or(self.name.ok().cloned().zip(self.entitlement_set_id.ok().copied()))?;
        let published = self.published.ok().is_some_and(|t| t.0);
        Ok(ProductInput { name, set_id, published })
    }
}

impl FromField for RuleEntry {
    fn from_field(raw: &str) -> Result<Self, String> {
        RuleEntry::parse(raw)
    }
}

impl FromField for ChangeNote {
    fn from_field(raw: &str) -> Result<Self, String> {
        ChangeNote::parse(raw)
    }
}

/// The rules form: a field `rule.<key>` per resource key (blank: no rule), and a reason.
#[derive(Deserialize, Default, Validate)]
#[serde(default)]
pub struct RulesForm {
    #[validate(custom(function = read))]
    reason: Field<ChangeNote>,
    /// The field names carry the keys, so they are read in `command`.
    #[serde(flatten)]
    rules: BTreeMap<String, Field<RuleEntry>>,
}

/// A set's rules as the form asks for them: what the service reads by each key's kind.
struct NewRules {
    rules: BTreeMap<ResourceKey, RuleEntry>,
    note: ChangeNote,
}

impl RulesForm {
    /// Key → what was written; any other field is refused by name. Whether a key exists, and
    /// what its value means, the catalog says (by the key's kind).
    fn command(&self) -> Result<NewRules, ServiceError> {
        let mut rules = BTreeMap::new();
        for (k, v) in &self.rules {
            let Some(key) = k.strip_prefix("rule.") else { return Err(unknown_field(k)) };
            if let Some(entry) = v.ok() {
                rules.insert(ResourceKey::from(key), entry.clone());
            }
        }
        let problems = input::problems(self);
        problems.or(self.reason.ok().cloned().map(|note| NewRules { rules, note }))
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
                form: FormState {
                    values: vec![
                        ("name".into(), k.display_name.clone()),
                        ("unit".into(), k.unit.clone().unwrap_or_default()),
                    ],
                    ..FormState::default()
                },
                key: k.resource_key.into_string(),
                kind: k.kind.to_string(),
                provider: k.provider,
                description: k.description,
                name: k.display_name,
                unit: k.unit,
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
                        key: r.resource_key.to_string(),
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

#[tracing::instrument(name = "Page: the catalog", skip_all)]
pub async fn catalog(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let v = catalog_view(&state, &req).await?;
    Ok(render::ok(&req, "Catalog", views::catalog(&v)))
}

/// The catalog's three add forms.
#[derive(Clone, Copy)]
enum CatalogForm {
    Key,
    Set,
    Product,
}

/// A refused add form: in place for HTMX, else the catalog page with that form filled in.
async fn catalog_refused(
    req: &HttpRequest,
    state: &AppState,
    which: CatalogForm,
    r: Refused,
) -> Result<HttpResponse, AppError> {
    let mut v = catalog_view(state, req).await?;
    match which {
        CatalogForm::Key => v.key_form = r.form,
        CatalogForm::Set => v.set_form = r.form,
        CatalogForm::Product => v.product_form = r.form,
    }
    let form = || match which {
        CatalogForm::Key => views::key_form(&v.csrf, &v.key_form),
        CatalogForm::Set => views::set_form(&v.csrf, &v.set_form),
        CatalogForm::Product => views::product_form(&v.csrf, &v.set_options, &v.product_form),
    };
    Ok(refusals::answer(req, r.status, "Catalog", form, || views::catalog(&v)))
}

#[tracing::instrument(name = "Page: add a resource key", skip_all)]
pub async fn create_key(Call { req, state, .. }: OperatorCall, form: Form<KeyForm>) -> Result<HttpResponse, AppError> {
    let create =
        async |k: &NewKey| services::catalog::create_resource_key(&state.db, &k.key, k.kind, &k.description).await;
    let created = run_parsed(&state.db, "Create a resource key", NewKey::try_from(&*form), create).await;
    let draw = async |r| catalog_refused(&req, &state, CatalogForm::Key, r).await;
    refusals::posted(&req, created.map(|_| paths::CATALOG.to_string()), form.values(), WORDS, draw).await
}

#[tracing::instrument(name = "Page: rename a resource key", skip_all, fields(key = %*key))]
pub async fn rename_key(
    Call { req, state, .. }: OperatorCall,
    key: web::Path<String>,
    form: Form<KeyLabelForm>,
) -> Result<HttpResponse, AppError> {
    let key = ResourceKey::from(key.into_inner());
    let rename = async |(name, unit): &(KeyDisplayName, KeyUnit)| {
        services::catalog::rename_resource_key(&state.db, &key, name, unit).await
    };
    let parsed = <(KeyDisplayName, KeyUnit)>::try_from(&*form);
    let renamed = run_parsed(&state.db, "Rename a resource key", parsed, rename).await;
    refusals::posted(&req, renamed.map(|()| paths::CATALOG.to_string()), form.values(), WORDS, async |r| {
        let mut v = catalog_view(&state, &req).await?;
        // A key gone meanwhile has no form to show the refusal in.
        let i = v.keys.iter().position(|k| k.key == key.as_str()).ok_or(AppError::NotFound)?;
        v.keys[i].form = r.form;
        let form = || views::key_label_panel(&v.csrf, &v.keys[i]);
        Ok(refusals::answer(&req, r.status, "Catalog", form, || views::catalog(&v)))
    })
    .await
}

#[tracing::instrument(name = "Page: add an entitlement set", skip_all)]
pub async fn create_set(Call { req, state, .. }: OperatorCall, form: Form<SetForm>) -> Result<HttpResponse, AppError> {
    let create = async |name: &SetName| services::catalog::create_entitlement_set(&state.db, name).await;
    let created = run_parsed(&state.db, "Create an entitlement set", SetName::try_from(&*form), create).await;
    let draw = async |r| catalog_refused(&req, &state, CatalogForm::Set, r).await;
    refusals::posted(&req, created.map(|id| fill(paths::CATALOG_SET, &[&id])), form.values(), WORDS, draw).await
}

#[tracing::instrument(name = "Page: add a product", skip_all)]
pub async fn create_product(
    Call { req, state, .. }: OperatorCall,
    form: Form<ProductForm>,
) -> Result<HttpResponse, AppError> {
    let create =
        async |p: &ProductInput| services::catalog::create_product(&state.db, &p.name, p.set_id, p.published).await;
    let created = run_parsed(&state.db, "Create a product", form.command(), create).await;
    let draw = async |r| catalog_refused(&req, &state, CatalogForm::Product, r).await;
    refusals::posted(&req, created.map(|id| fill(paths::CATALOG_PRODUCT, &[&id])), form.values(), WORDS, draw).await
}

async fn set_edit_view(
    req: &HttpRequest,
    state: &AppState,
    id: EntitlementSetId,
    form: Option<FormState>,
) -> Result<Option<views::SetEditView>, AppError> {
    let Some(d) = services::reads::entitlement_set(&state.db, id).await? else { return Ok(None) };
    let rows = d
        .keys
        .iter()
        .map(|k| {
            let current = d.rules.iter().find(|r| r.resource_key == k.resource_key);
            let submitted = form.as_ref().map(|f| f.value(&format!("rule.{}", k.resource_key)).to_string());
            views::RuleEditRow {
                key: k.resource_key.to_string(),
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
        set_id: id.0,
        name: d.set.name,
        carried_by_pools: Total::capped(d.set.carried_by_pools, CARRIED_COUNT_CAP),
        rows,
        form,
    }))
}

#[tracing::instrument(name = "Page: an entitlement set", skip_all, fields(entitlement_set_id = %*id))]
pub async fn set_page(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<EntitlementSetId>,
) -> Result<HttpResponse, AppError> {
    let v = set_edit_view(&req, &state, *id, None).await?.ok_or(AppError::NotFound)?;
    Ok(render::ok(&req, &format!("Entitlement set: {}", v.name), views::set_edit(&v)))
}

#[tracing::instrument(name = "Page: save a set's rules", skip_all, fields(entitlement_set_id = %*id))]
pub async fn save_rules(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<EntitlementSetId>,
    form: Form<RulesForm>,
) -> Result<HttpResponse, AppError> {
    use crate::services::rule_changes::commit_rule_change_batch;
    let actor = Some(op.account_id());
    let cap = state.config.rule_change_sync_cap;
    let commit = async |c: &NewRules| commit_rule_change_batch(&state.db, *id, &c.rules, actor, &c.note, cap).await;
    let committed = run_parsed(&state.db, "Rule change", form.command(), commit).await;
    // The change's page shows it settled, or draining live.
    let to = committed.map(|c| fill(paths::RULE_CHANGE, &[&c.change_id]));
    refusals::posted(&req, to, form.values(), WORDS, async |r| {
        let mut v = set_edit_view(&req, &state, *id, Some(r.form)).await?.ok_or(AppError::NotFound)?;
        // A problem with no row of its own (an unknown key) is said above the form.
        let rows: Vec<String> = v.rows.iter().map(|r| format!("rule.{}", r.key)).collect();
        let orphans: Vec<String> =
            v.form.field_errors.iter().filter(|(k, _)| !rows.contains(k)).map(|(_, m)| m.clone()).collect();
        v.form.errors.extend(orphans);
        let title = format!("Entitlement set: {}", v.name);
        Ok(refusals::answer(&req, r.status, &title, || views::set_edit(&v), || views::set_edit(&v)))
    })
    .await
}

pub(crate) async fn product_edit_view(
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
            max_quantity: d.product.max_quantity,
        },
    )))
}

#[tracing::instrument(name = "Page: a product", skip_all, fields(product_id = %*id))]
pub async fn product_page(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ProductId>,
) -> Result<HttpResponse, AppError> {
    let (name, v) = product_edit_view(&req, &state, id.0, None).await?.ok_or(AppError::NotFound)?;
    let prices = super::product_prices::prices_view(&req, &state, id.0, None, vec![]).await?;
    let body = views::product_with_prices(&v, &prices);
    Ok(render::ok(&req, &format!("Product: {name}"), body))
}

/// The seats form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct SeatsForm {
    #[validate(custom(function = read))]
    max_quantity: Field<Seats>,
}

#[tracing::instrument(name = "Page: save a product's seats", skip_all, fields(product_id = %*id))]
pub async fn save_seats(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ProductId>,
    form: Form<SeatsForm>,
) -> Result<HttpResponse, AppError> {
    let seats = input::problems(&*form).or(form.max_quantity.ok().copied());
    let saved = match seats {
        Ok(seats) => services::catalog::set_product_seats(&state.db, *id, seats).await,
        Err(e) => Err(e),
    };
    product_saved(&req, &state, id.0, saved.map(|_| ()), form.values()).await
}

/// A product form's answer: back to its page, or the page again with the refusal in place.
async fn product_saved(
    req: &HttpRequest,
    state: &AppState,
    id: i64,
    saved: Result<(), services::ServiceError>,
    values: Vec<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let to = saved.map(|()| format!("{}?saved=1", fill(paths::CATALOG_PRODUCT, &[&id])));
    refusals::posted(req, to, values, PRODUCT_WORDS, async |r| {
        let (name, v) = product_edit_view(req, state, id, Some(r.form)).await?.ok_or(AppError::NotFound)?;
        let prices = super::product_prices::prices_view(req, state, id, None, vec![]).await?;
        let title = format!("Product: {name}");
        let form = || views::product_edit(&v);
        Ok(refusals::answer(req, r.status, &title, form, || views::product_with_prices(&v, &prices)))
    })
    .await
}

#[tracing::instrument(name = "Page: save a product", skip_all, fields(product_id = %*id))]
pub async fn save_product(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ProductId>,
    form: Form<ProductForm>,
) -> Result<HttpResponse, AppError> {
    let saved = match form.command() {
        Ok(p) => services::catalog::update_product(&state.db, *id, &p.name, p.set_id, p.published).await,
        Err(e) => Err(e),
    };
    product_saved(&req, &state, id.0, saved, form.values()).await
}
