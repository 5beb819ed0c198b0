//! The tier topology: ladders with their tiers by rank, org types and their defaults, and the
//! acts operators shape them with (add a tier, delete a tier nobody holds, the ladders' order).

use std::collections::BTreeMap;
use views::paths::{self, fill};

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use validator::Validate;
use views::{FormState, Total};

use crate::{
    ids::{AccountId, LadderId, OrgTypeId, ProductId},
    services::{
        self, ServiceError,
        grants::Reason,
        plan_acts::{ActReach, Disposition, ReorderTiers},
        reads::CARRIED_COUNT_CAP,
        refusal::Problems,
        topology::{AddTier, RemoveTier},
    },
    web::call::{Call, OperatorCall},
    web::forms::{self, Form, run_parsed, unknown_field},
    web::input::{self, Field, FromField, read},
    web::refusals::{self, Words},
    web::{AppState, errors::AppError, identity::csrf_token, render},
};

/// Every act here is a change path: a lock wait past its bound is "another change is in progress".
const WORDS: Words = Words { done: "changed", busy: None };

/// A reason, as every act's form has it: optional (blank is none), bounded.
fn reason_text(r: Option<Reason>) -> String {
    r.map(Reason::into_string).unwrap_or_default()
}

/// A disposition, as the acts' forms choose it (blank: none chosen).
impl FromField for Disposition {
    fn from_field(raw: &str) -> Result<Self, String> {
        Disposition::parse(raw)?.ok_or_else(|| "Choose migrate or grandfather.".into())
    }
}

/// The tier-add form (and its preview's query).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct AddTierForm {
    #[validate(custom(function = read, message = "Choose a product."))]
    product_id: Field<ProductId>,
    /// Empty: the top.
    #[validate(custom(function = read, message = "“{value}” is not a rank."))]
    rank: Field<Option<i32>>,
    #[validate(custom(function = read))]
    reason: Field<Option<Reason>>,
}

impl AddTierForm {
    fn command(self, ladder_id: LadderId, actor: Option<AccountId>) -> Result<AddTier, ServiceError> {
        let problems = input::problems(&self);
        let ((product_id, rank), reason) =
            problems.or(self.product_id.into_ok().zip(self.rank.into_ok()).zip(self.reason.into_ok()))?;
        Ok(AddTier { ladder_id, product_id, rank, reason: reason_text(reason), actor })
    }
}

/// The tier-delete form: a button (a reason may come with it).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteTierForm {
    #[validate(custom(function = read))]
    reason: Field<Option<Reason>>,
}

impl DeleteTierForm {
    fn command(self) -> Result<String, ServiceError> {
        let problems = input::problems(&self);
        problems.or(self.reason.into_ok()).map(reason_text)
    }
}

/// The ladders' order: a field `position.<ladder id>` per ladder.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct LadderOrderForm {
    #[serde(flatten)]
    positions: BTreeMap<String, Field<i32>>,
}

impl LadderOrderForm {
    fn command(&self) -> Result<BTreeMap<LadderId, i32>, ServiceError> {
        let mut problems = Problems::default();
        let mut positions = BTreeMap::new();
        for (k, v) in &self.positions {
            let Some(id) = k.strip_prefix("position.") else { return Err(unknown_field(k)) };
            match (id.parse::<i64>(), v.ok()) {
                (Ok(id), Some(p)) => {
                    positions.insert(LadderId(id), *p);
                }
                _ => problems.push(k, format!("“{}” is not a position.", v.raw().trim())),
            }
        }
        problems.or(Some(positions))
    }
}

/// The default-change form (and its preview's query).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultChangeForm {
    /// Its problem is said in the act's or the preview's words (`command`).
    plan_ladder_id: Field<LadderId>,
    #[validate(custom(function = read))]
    disposition: Field<Option<Disposition>>,
    #[validate(custom(function = read))]
    reason: Field<Option<Reason>>,
}

/// A default change as the form asks for it: (ladder, disposition, reason).
struct DefaultChange {
    ladder_id: LadderId,
    disposition: Option<Disposition>,
    reason: String,
}

impl DefaultChangeForm {
    /// `no_ladder` is what to say when no ladder was chosen (the act and its preview differ).
    fn command(self, no_ladder: &str) -> Result<DefaultChange, ServiceError> {
        let mut problems = input::problems(&self);
        let ladder = self.plan_ladder_id.ok().copied();
        if ladder.is_none() {
            problems.push("plan_ladder_id", no_ladder);
        }
        let ((ladder_id, disposition), reason) =
            problems.or(ladder.zip(self.disposition.into_ok()).zip(self.reason.into_ok()))?;
        Ok(DefaultChange { ladder_id, disposition, reason: reason_text(reason) })
    }
}

/// The tier-removal form (and its preview's query).
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct RemoveTierForm {
    #[validate(custom(function = read))]
    disposition: Field<Option<Disposition>>,
    #[validate(custom(function = read))]
    reason: Field<Option<Reason>>,
}

impl RemoveTierForm {
    fn command(self, ladder_id: LadderId, rank: i32, actor: Option<AccountId>) -> Result<RemoveTier, ServiceError> {
        let problems = input::problems(&self);
        let (disposition, reason) = problems.or(self.disposition.into_ok().zip(self.reason.into_ok()))?;
        Ok(RemoveTier { ladder_id, rank, disposition, reason: reason_text(reason), actor })
    }
}

/// A ladder's tier order (and its preview's query): a field `rank.<product id>` per tier, each a
/// distinct rank from 0, with a disposition and a reason.
#[derive(Deserialize, Default, Validate)]
#[serde(default)]
pub struct TierOrderForm {
    #[validate(custom(function = read))]
    disposition: Field<Option<Disposition>>,
    #[validate(custom(function = read))]
    reason: Field<Option<Reason>>,
    #[serde(flatten)]
    ranks: BTreeMap<String, Field<i32>>,
}

impl TierOrderForm {
    fn command(self, ladder_id: LadderId, actor: Option<AccountId>) -> Result<ReorderTiers, ServiceError> {
        let mut problems = input::problems(&self);
        let mut ranked: Vec<(i32, i64)> = vec![];
        let mut unread = false;
        for (k, v) in &self.ranks {
            let Some(id) = k.strip_prefix("rank.") else { return Err(unknown_field(k)) };
            match (id.parse::<i64>(), v.ok()) {
                (Ok(id), Some(r)) if *r >= 0 => ranked.push((*r, id)),
                _ => {
                    unread = true;
                    problems.push(k, format!("“{}” is not a rank.", v.raw().trim()));
                }
            }
        }
        ranked.sort();
        let distinct = ranked.iter().enumerate().all(|(i, (r, _))| *r == i as i32);
        if !unread && !distinct {
            problems.push(
                "",
                format!("Give every tier a different rank from 0 to {}, once each.", ranked.len().max(1) - 1),
            );
        }
        let (disposition, reason) = problems.or(self.disposition.into_ok().zip(self.reason.into_ok()))?;
        let order = ranked.into_iter().map(|(_, p)| ProductId(p)).collect();
        Ok(ReorderTiers { ladder_id, order, disposition, reason: reason_text(reason), actor })
    }
}

/// The states of the page's forms that were just refused (the others render empty).
#[derive(Default)]
struct Forms {
    add: Vec<(i64, FormState)>,
    order: FormState,
    default: Vec<(i64, FormState)>,
    remove: Vec<((i64, i32), FormState)>,
    tier_order: Vec<(i64, FormState)>,
}

/// The page, with any refused form's state and a notice.
async fn view(
    req: &HttpRequest,
    state: &AppState,
    forms: Forms,
    notice: Option<String>,
) -> Result<views::TopologyView, AppError> {
    let t = services::reads::topology(&state.db).await?;
    let products = services::reads::tier_product_options(&state.db).await?;
    let signup_type = services::signup::signup_type(&state.db).await?;
    Ok(views::TopologyView {
        signup: views::SignupTypeView {
            mode: state.config.signup_mode().as_str().to_string(),
            chosen: signup_type.map(|(t, _)| t.0),
        },
        csrf: csrf_token(req),
        products: products.into_iter().map(|(id, name)| views::Choice { id: id.0, name }).collect(),
        add_forms: forms.add,
        order_form: forms.order,
        default_forms: forms.default,
        remove_forms: forms.remove,
        tier_order_forms: forms.tier_order,
        notice,
        ladders: t
            .ladders
            .iter()
            .map(|l| views::LadderView {
                id: l.plan_ladder_id.0,
                name: l.name.clone(),
                sort_order: l.sort_order,
                tiers: t
                    .tiers
                    .iter()
                    .filter(|x| x.plan_ladder_id == l.plan_ladder_id)
                    .map(|x| views::TierRow {
                        rank: x.rank,
                        product_id: x.product_id.0,
                        product_name: x.product_name.clone(),
                        set_name: x.set_name.clone().unwrap_or_default(),
                        organizations: Total::capped(
                            t.tier_counts
                                .iter()
                                .find(|c| c.plan_ladder_id == x.plan_ladder_id && c.rank == x.rank)
                                .map_or(0, |c| c.organizations),
                            CARRIED_COUNT_CAP,
                        ),
                    })
                    .collect(),
            })
            .collect(),
        org_types: t
            .org_types
            .into_iter()
            .map(|o| views::OrgTypeRow {
                id: o.org_type_id.0,
                name: o.name,
                default_ladder_id: o.default_plan_ladder_id.map(|l| l.0),
                default_ladder: o.default_ladder,
                floor_product: o.floor_product,
                organizations: o.organizations,
            })
            .collect(),
    })
}

/// What an act that just succeeded did, for the page to say (`?done=`).
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum Done {
    TierAdded,
    TierDeleted,
    TierRemoved,
    Order,
    SignupType,
}

/// The page's query: a note of what was done (anything else, and the page shows no note).
#[derive(Deserialize, Default)]
pub struct Notice {
    done: Option<Done>,
}

#[tracing::instrument(name = "Page: the tier topology", skip_all)]
pub async fn topology(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let q: Notice = forms::query_or_default(&req);
    let notice = q.done.map(|d| {
        match d {
            Done::TierAdded => "The tier was added.",
            Done::TierDeleted => "The tier was deleted.",
            Done::TierRemoved => "The tier was removed and its holders moved.",
            Done::Order => "The ladders' order was saved.",
            Done::SignupType => "The sign-up type was chosen.",
        }
        .to_string()
    });
    let v = view(&req, &state, Forms::default(), notice).await?;
    Ok(render::ok(&req, "Tier topology", views::topology(&v)))
}

/// A preview's answer: its form, read from its query like a posted form (an unknown field is
/// refused in the preview's words), and what `reach` makes of it, or the refusal it would meet
/// under `refused`.
async fn previewed<T: serde::de::DeserializeOwned>(
    q: web::Query<Vec<(String, String)>>,
    refused: &str,
    reach: impl AsyncFnOnce(Form<T>) -> Result<views::Markup, ServiceError>,
) -> Result<HttpResponse, AppError> {
    let answer = async { reach(forms::read(q.into_inner())?).await };
    refusals::preview(refused, answer.await)
}

#[tracing::instrument(name = "Page: preview a tier add", skip_all, fields(ladder_id = %*id))]
pub async fn preview(
    Call { state, .. }: OperatorCall,
    id: web::Path<LadderId>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    previewed(q, "This tier cannot be added", async |f: Form<AddTierForm>| {
        let a = f.into_inner().command(*id, None)?;
        let r = services::topology::preview_add_tier(&state.db, &a, state.config.plan_act_holder_cap).await?;
        let names = services::reads::tier_names(&state.db, a.ladder_id, a.product_id).await?;
        Ok(views::tier_add_preview(&views::TierAddPreview {
            ladder: names.0,
            product: names.1,
            rank: r.rank,
            holders: r.holders,
            collisions: r.colliding,
            refusal: r.refusal,
        }))
    })
    .await
}

#[tracing::instrument(name = "Page: add a tier", skip_all, fields(ladder_id = %*id))]
pub async fn add_tier(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<LadderId>,
    form: Form<AddTierForm>,
) -> Result<HttpResponse, AppError> {
    let add = async |a: &AddTier| services::topology::add_tier(&state.db, a, state.config.plan_act_holder_cap).await;
    let values = form.values();
    let added = run_parsed(&state.db, "AddTier", form.into_inner().command(*id, Some(op.account_id())), add).await;
    let to = added.map(|_| format!("{}?done=tier-added", paths::TOPOLOGY));
    let id = id.0;
    let placed = |f| Forms { add: vec![(id, f)], ..Forms::default() };
    form_answer(&req, &state, to, values, placed, |v, f| {
        let next_rank = v.ladder(id).map_or(1, views::LadderView::next_rank);
        views::add_tier_form(&v.csrf, id, &v.products, next_rank, f)
    })
    .await
}

#[tracing::instrument(name = "Page: delete a tier", skip_all, fields(ladder_id = %path.0, rank = path.1))]
pub async fn delete_tier(
    Call { who: op, req, state }: OperatorCall,
    path: web::Path<(LadderId, i32)>,
    form: Form<DeleteTierForm>,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    let actor = Some(op.account_id());
    let values = form.values();
    let delete = async |reason: &String| services::topology::delete_tier(&state.db, ladder, rank, actor, reason).await;
    let deleted = run_parsed(&state.db, "DeleteTier", form.into_inner().command(), delete).await;
    let to = deleted.map(|_| format!("{}?done=tier-deleted", paths::TOPOLOGY));
    refusals::posted(&req, to, values, WORDS, async |r| {
        // The delete button's form has no room for a message: the page says it in a banner.
        let page = async || {
            let v = view(&req, &state, Forms::default(), None).await?;
            let banner = views::refusal("The tier was not deleted", &r.form.errors.join(" "));
            Ok(views::PreEscaped(banner.into_string() + &views::topology(&v).into_string()))
        };
        let form = || views::delete_tier_form(&csrf_token(&req), ladder.0, rank, &r.form);
        refusals::answer_reading(&req, r.status, "Tier topology", form, page).await
    })
    .await
}

#[tracing::instrument(name = "Page: order the ladders", skip_all)]
pub async fn ladder_order(
    Call { req, state, .. }: OperatorCall,
    form: Form<LadderOrderForm>,
) -> Result<HttpResponse, AppError> {
    let reorder = async |positions: &BTreeMap<LadderId, i32>| {
        services::topology::reorder_plan_ladders(&state.db, positions).await
    };
    let ordered = run_parsed(&state.db, "ReorderPlanLadders", form.command(), reorder).await;
    let to = ordered.map(|_| format!("{}?done=order", paths::TOPOLOGY));
    let placed = |f| Forms { order: f, ..Forms::default() };
    form_answer(&req, &state, to, form.values(), placed, |v, f| views::ladder_order_form(&v.csrf, &v.ladder_order(), f))
        .await
}

/// ChangeOrgTypeDefault: T0, then the listing and moves for up to a few seconds of this request;
/// the operator lands on the act's live progress.
#[tracing::instrument(name = "Page: change a type's default", skip_all, fields(org_type_id = %*id))]
pub async fn change_default(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<OrgTypeId>,
    form: Form<DefaultChangeForm>,
) -> Result<HttpResponse, AppError> {
    use crate::services::plan_acts::change_org_type_default;
    let actor = Some(op.account_id());
    let change = async |c: &DefaultChange| {
        let within = Some(within(&state));
        change_org_type_default(&state.db, *id, c.ladder_id, c.disposition, actor, &c.reason, within).await
    };
    let values = form.values();
    let changed =
        run_parsed(&state.db, "ChangeOrgTypeDefault", form.into_inner().command("Choose a ladder."), change).await;
    let to = changed.map(|act| fill(paths::PLAN_ACT, &[&act]));
    let id = id.0;
    let placed = |f| Forms { default: vec![(id, f)], ..Forms::default() };
    form_answer(&req, &state, to, values, placed, |v, f| {
        views::default_change_form(&v.csrf, id, &v.ladder_choices(), f)
    })
    .await
}

/// A topology form's answer: on success to `to`; refused, the page read again with the form's
/// state where `placed` puts it, and the form drawn again (`form`) alone for htmx, else within
/// the whole page.
async fn form_answer(
    req: &HttpRequest,
    state: &AppState,
    to: Result<String, ServiceError>,
    sent: Vec<(String, String)>,
    placed: impl FnOnce(FormState) -> Forms,
    form: impl FnOnce(&views::TopologyView, &FormState) -> views::Markup,
) -> Result<HttpResponse, AppError> {
    refusals::posted(req, to, sent, WORDS, async |r| {
        let v = view(req, state, placed(r.form.clone()), None).await?;
        Ok(refusals::answer(req, r.status, "Tier topology", || form(&v, &r.form), || views::topology(&v)))
    })
    .await
}

/// What the request has left to move organizations in, less a margin to answer in.
fn within(state: &AppState) -> std::time::Instant {
    std::time::Instant::now() + state.config.request_timeout.mul_f64(0.25)
}

fn reach_preview(action: String, r: ActReach, d: Option<Disposition>) -> views::ActReachPreview {
    views::ActReachPreview {
        action,
        types: r.types,
        organizations: r.organizations,
        holding_floor: r.holding_floor,
        vacant: r.vacant,
        from_floor: r.from_floor,
        to_floor: r.to_floor,
        disposition: d.map(|d| d.as_str().to_string()),
        refusal: r.refusal,
    }
}

/// The preview of a default change: how many organizations it reaches, per disposition.
#[tracing::instrument(name = "Page: preview a default change", skip_all, fields(org_type_id = %*id))]
pub async fn default_preview(
    Call { state, .. }: OperatorCall,
    id: web::Path<OrgTypeId>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    previewed(q, "This default cannot be changed", async |f: Form<DefaultChangeForm>| {
        let c = f.into_inner().command("Choose a ladder to preview.")?;
        let r = services::plan_acts::preview_default_change(&state.db, *id, c.ladder_id, c.disposition).await?;
        let action = format!("Changing {}'s default to {}", r.types.first().cloned().unwrap_or_default(), r.ladder);
        Ok(views::act_reach_preview(&reach_preview(action, r, c.disposition)))
    })
    .await
}

#[tracing::instrument(name = "Page: preview a tier removal", skip_all, fields(ladder_id = %path.0, rank = path.1))]
pub async fn remove_preview(
    Call { state, .. }: OperatorCall,
    path: web::Path<(LadderId, i32)>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    previewed(q, "This tier cannot be removed", async |f: Form<RemoveTierForm>| {
        let r = f.into_inner().command(ladder, rank, None)?;
        let p = services::topology::preview_remove_tier(&state.db, &r, state.config.plan_act_holder_cap).await?;
        Ok(views::tier_removal_preview(&views::TierRemovalPreview {
            ladder: p.ladder,
            product: p.product,
            rank,
            holders: p.holders,
            disposition: r.disposition.map(|d| d.as_str().to_string()),
            floor_after: p.floor_after,
            refusal: p.refusal,
        }))
    })
    .await
}

/// RemoveTier: one transaction moves every holder; the operator lands on the act's record.
#[tracing::instrument(name = "Page: remove a tier", skip_all, fields(ladder_id = %path.0, rank = path.1))]
pub async fn remove_tier(
    Call { who: op, req, state }: OperatorCall,
    path: web::Path<(LadderId, i32)>,
    form: Form<RemoveTierForm>,
) -> Result<HttpResponse, AppError> {
    let (ladder, rank) = path.into_inner();
    let remove =
        async |r: &RemoveTier| services::topology::remove_tier(&state.db, r, state.config.plan_act_holder_cap).await;
    let values = form.values();
    let removed =
        run_parsed(&state.db, "RemoveTier", form.into_inner().command(ladder, rank, Some(op.account_id())), remove)
            .await;
    let to = removed.map(|(act, _)| fill(paths::PLAN_ACT, &[&act]));
    let ladder = ladder.0;
    let placed = |f| Forms { remove: vec![((ladder, rank), f)], ..Forms::default() };
    form_answer(&req, &state, to, values, placed, |v, f| {
        let product = v
            .ladders
            .iter()
            .find(|l| l.id == ladder)
            .and_then(|l| l.tiers.iter().find(|t| t.rank == rank))
            .map(|t| t.product_name.clone())
            .unwrap_or_default();
        views::remove_tier_form(&v.csrf, ladder, rank, &product, f)
    })
    .await
}

#[tracing::instrument(name = "Page: preview a tier order", skip_all, fields(ladder_id = %*id))]
pub async fn tier_order_preview(
    Call { state, .. }: OperatorCall,
    id: web::Path<LadderId>,
    q: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, AppError> {
    previewed(q, "These tiers cannot be reordered", async |f: Form<TierOrderForm>| {
        let r = f.into_inner().command(*id, None)?;
        let p = services::plan_acts::preview_reorder_tiers(&state.db, &r).await?;
        let action = match (&p.from_floor, &p.to_floor) {
            (Some(from), Some(to)) if from != to => {
                format!("Reordering {} (its floor becomes {to} instead of {from})", p.ladder)
            }
            _ => format!("Reordering {} (its floor stays)", p.ladder),
        };
        Ok(views::act_reach_preview(&reach_preview(action, p, r.disposition)))
    })
    .await
}

/// ReorderTiers: T0, then the moves for part of this request; the operator lands on the act.
#[tracing::instrument(name = "Page: reorder a ladder's tiers", skip_all, fields(ladder_id = %*id))]
pub async fn tier_order(
    Call { who: op, req, state }: OperatorCall,
    id: web::Path<LadderId>,
    form: Form<TierOrderForm>,
) -> Result<HttpResponse, AppError> {
    let reorder = async |r: &ReorderTiers| services::plan_acts::reorder_tiers(&state.db, r, Some(within(&state))).await;
    let values = form.values();
    let reordered =
        run_parsed(&state.db, "ReorderTiers", form.into_inner().command(*id, Some(op.account_id())), reorder).await;
    let to = reordered.map(|act| fill(paths::PLAN_ACT, &[&act]));
    let id = id.0;
    let placed = |f| Forms { tier_order: vec![(id, f)], ..Forms::default() };
    form_answer(&req, &state, to, values, placed, |v, f| {
        let tiers = v.ladder(id).map(views::LadderView::tier_order).unwrap_or_default();
        views::tier_order_form(&v.csrf, id, &tiers, f)
    })
    .await
}

/// The sign-up type's form: its button, nothing else.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ChooseSignupTypeForm {}

/// Issue 38: mark an org type as the one a sign-up's organization gets.
#[tracing::instrument(name = "Page: choose the sign-up type", skip_all, fields(org_type_id = %*id))]
pub async fn choose_signup_type(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<OrgTypeId>,
    _form: Form<ChooseSignupTypeForm>,
) -> Result<HttpResponse, AppError> {
    services::signup::choose_signup_type(&state.db, *id).await?;
    Ok(crate::web::forms::after_post(&req, &format!("{}?done=signup-type", paths::TOPOLOGY)))
}
