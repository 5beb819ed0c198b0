//! The operator's view of the plan topology, and where operators shape plans: ladders with their
//! tiers (add a tier, with a preview of who it reaches; delete a tier no one holds; remove a tier
//! that organizations hold, migrating or grandfathering them; reorder a ladder's tiers, which
//! moves organizations when the floor changes), the order the ladders are shown in, and org types
//! (change a type's default ladder). Every act that moves organizations has a Preview that GETs
//! `…/preview` with the form's values and shows who it reaches ([`tier_add_preview`],
//! [`tier_removal_preview`], [`act_reach_preview`]) under its form.
//!
//! Forms follow the catalog's pattern: a plain `method="post"` form that works without
//! JavaScript, enhanced by htmx to post to the same URL and swap its own container
//! (`outerHTML`), so a 4xx answer carrying the re-rendered container shows the refusal in place.

mod ladders;
mod org_types;
mod picture;
mod reach;
mod signup_type;
#[cfg(test)]
mod tests;
mod tiers;

use crate::paths::{self, fill};
pub use ladders::ladder_order_form;
pub use org_types::default_change_form;
use org_types::org_types_table;
pub use picture::{ladder_picture, topology_picture};
pub use reach::{ActReachPreview, act_reach_preview};
pub use signup_type::SignupTypeView;
pub use tiers::{
    TierAddPreview, TierRemovalPreview, add_tier_form, delete_tier_form, remove_tier_form, tier_add_preview,
    tier_order_form, tier_removal_preview,
};

use crate::forms::{Input, Select, form_banners, hx_form, input_field, select_field};
use maud::{Markup, html};

use crate::components::{Column, Tone, badge, card, notice, or_none, refusal, table_cols};
use crate::forms::FormState;
use crate::pages::catalog::{Total, count};

/// How many colliding organizations a preview names at most.
const PREVIEW_COLLISIONS_MAX: usize = 10;

/// One tier of a ladder.
pub struct TierRow {
    /// 0 is the ladder's floor.
    pub rank: i32,
    pub product_id: i64,
    pub product_name: String,
    pub set_name: String,
    /// Organizations on this tier (holding its place on the ladder), counted up to a cap.
    pub organizations: Total,
}

pub struct LadderView {
    pub id: i64,
    pub name: String,
    pub sort_order: i32,
    pub tiers: Vec<TierRow>,
}

pub struct OrgTypeRow {
    pub id: i64,
    pub name: String,
    /// The default ladder's id: the picture points the type at that ladder's floor.
    pub default_ladder_id: Option<i64>,
    pub default_ladder: Option<String>,
    /// The default ladder's rank-0 product.
    pub floor_product: Option<String>,
    pub organizations: i64,
}

pub struct TopologyView {
    pub csrf: String,
    pub ladders: Vec<LadderView>,
    pub org_types: Vec<OrgTypeRow>,
    /// The published products with an entitlement set: what a tier can be.
    pub products: Vec<Choice>,
    /// A ladder's add-tier form state (values, errors) when it was just refused; a ladder that
    /// is absent gets an empty form.
    pub add_forms: Vec<(i64, FormState)>,
    /// The ladder-order form's state.
    pub order_form: FormState,
    /// An org type's default-change form state (values, errors) when it was just refused; an
    /// org type that is absent gets an empty form.
    pub default_forms: Vec<(i64, FormState)>,
    /// A tier's removal form state, keyed by (ladder id, rank), when it was just refused; a tier
    /// that is absent gets an empty (closed) form.
    pub remove_forms: Vec<((i64, i32), FormState)>,
    /// A ladder's tier-order form state when it was just refused; a ladder that is absent gets an
    /// empty (closed) form.
    pub tier_order_forms: Vec<(i64, FormState)>,
    /// Good news shown at the top (e.g. after a plain POST redirected back here).
    pub notice: Option<String>,
    /// Sign-up: whether it is open, and the type it gives.
    pub signup: SignupTypeView,
}

/// An option of a select: what it stands for and what it is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub id: i64,
    pub name: String,
}

/// An item of an order form: what it is, what it is called, and where it stands now (a
/// ladder's position from 1, a tier's rank from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub id: i64,
    pub name: String,
    pub position: i32,
}

impl TopologyView {
    pub fn ladder(&self, id: i64) -> Option<&LadderView> {
        self.ladders.iter().find(|l| l.id == id)
    }

    /// The ladders in the order they are shown in.
    pub fn ladders_in_order(&self) -> Vec<&LadderView> {
        let mut ladders: Vec<&LadderView> = self.ladders.iter().collect();
        ladders.sort_by_key(|l| l.sort_order);
        ladders
    }

    /// The ladders as the ladder-order form lists them: in their order, numbered from 1.
    pub fn ladder_order(&self) -> Vec<Placed> {
        self.ladders_in_order()
            .into_iter()
            .zip(1..)
            .map(|(l, position)| Placed { id: l.id, name: l.name.clone(), position })
            .collect()
    }

    /// The ladders as a default-change form offers them, in their order.
    pub fn ladder_choices(&self) -> Vec<Choice> {
        self.ladders_in_order().into_iter().map(|l| Choice { id: l.id, name: l.name.clone() }).collect()
    }
}

impl LadderView {
    pub fn tiers_by_rank(&self) -> Vec<&TierRow> {
        let mut tiers: Vec<&TierRow> = self.tiers.iter().collect();
        tiers.sort_by_key(|t| t.rank);
        tiers
    }

    /// The rank the add-tier form offers: above the top tier (1 on an empty ladder).
    pub fn next_rank(&self) -> i32 {
        self.tiers.iter().map(|t| t.rank).max().map_or(1, |top| top.saturating_add(1).max(1))
    }

    /// The tiers as the tier-order form lists them: product, name, rank.
    pub fn tier_order(&self) -> Vec<Placed> {
        self.tiers_by_rank()
            .into_iter()
            .map(|t| Placed { id: t.product_id, name: t.product_name.clone(), position: t.rank })
            .collect()
    }
}

/// The notice, the picture of the ladders ([`topology_picture`]), the ladder-order form, ladders
/// in their order (each with its tiers by rank, a delete form and a removal form per tier, the
/// tier-order form when it has two tiers or more, and the add-tier form), then the org types
/// (each with its default-change form).
pub fn topology(v: &TopologyView) -> Markup {
    let ladders = v.ladders_in_order();
    let order = v.ladder_order();
    let ladder_options = v.ladder_choices();
    let empty_form = FormState::default();
    html! {
        @if let Some(message) = &v.notice {
            (notice(message))
        }
        section aria-labelledby="ladders-heading" {
            h2 #ladders-heading { "Plan ladders" }
            p.muted {
                "A ladder is one dimension of a plan. Its tiers are products ranked from 0; rank 0 "
                "is the floor, which an organization holds when nothing else holds the ladder. "
                "Every change to the tiers is recorded as a "
                a href=(paths::PLAN_ACTS) { "plan act" } "."
            }
            @if ladders.is_empty() {
                p.empty { "No plan ladders yet." }
            } @else {
                (topology_picture(&ladders, &v.org_types))
                (ladder_order_form(&v.csrf, &order, &v.order_form))
                @for ladder in ladders {
                    @let forms = LadderForms {
                        add: state_for(&v.add_forms, ladder.id, &empty_form),
                        remove: &v.remove_forms,
                        tier_order: state_for(&v.tier_order_forms, ladder.id, &empty_form),
                    };
                    (ladder_card(&v.csrf, ladder, &v.products, &forms))
                }
            }
        }
        (card("org-types-heading", "Organization types", html! {
            p.muted { "Every organization of a type holds the floor of the type's default ladder until it gets more." }
            (org_types_table(&v.csrf, &v.org_types, &ladder_options, &v.default_forms))
        }))
        (card("signup-type-heading", "Sign-up", signup_type::signup_type_section(&v.csrf, &v.signup, &v.org_types)))
    }
}

/// The form states one ladder card needs.
struct LadderForms<'a> {
    add: &'a FormState,
    /// Every removal form state on the page, keyed by (ladder id, rank).
    remove: &'a [((i64, i32), FormState)],
    tier_order: &'a FormState,
}

fn ladder_card(csrf: &str, l: &LadderView, products: &[Choice], forms: &LadderForms) -> Markup {
    let heading_id = format!("ladder-{}-heading", l.id);
    let tiers = l.tiers_by_rank();
    let next_rank = l.next_rank();
    let empty_form = FormState::default();
    let rows = tiers
        .iter()
        .map(|t| {
            let remove = state_for(forms.remove, (l.id, t.rank), &empty_form);
            vec![
                rank_cell(t.rank),
                html! { a href=(fill(paths::CATALOG_PRODUCT, &[&t.product_id])) { (t.product_name) } },
                html! { (t.set_name) },
                html! {
                    div.tier-actions {
                        (delete_tier_form(csrf, l.id, t.rank, &empty_form))
                        (remove_tier_form(csrf, l.id, t.rank, &t.product_name, remove))
                    }
                },
            ]
        })
        .collect();
    let order = l.tier_order();
    let columns = [Column::text("Rank"), Column::text("Product"), Column::text("Entitlement set"), Column::text("")];
    html! {
        section.card.ladder aria-labelledby=(heading_id) {
            h3 id=(heading_id) { (l.name) }
            (table_cols(&columns, rows, "No tiers yet."))
            @if order.len() >= 2 {
                (tier_order_form(csrf, l.id, &order, forms.tier_order))
            }
            (add_tier_form(csrf, l.id, products, next_rank, forms.add))
        }
    }
}

/// The state kept for the form of `key` (sent and refused just now), else `empty`.
fn state_for<'a, K: PartialEq>(forms: &'a [(K, FormState)], key: K, empty: &'a FormState) -> &'a FormState {
    forms.iter().find(|(k, _)| *k == key).map_or(empty, |(_, f)| f)
}

/// Whether a folded form has something to show: a notice, errors or submitted values.
fn has_state(f: &FormState) -> bool {
    f.notice.is_some() || !f.errors.is_empty() || !f.field_errors.is_empty() || !f.values.is_empty()
}

/// "Preview": GETs `preview` (the act's preview route) with the values of the form in `#{container}` into
/// `#{target}`, leaving out the CSRF token: a GET's query string lands in logs and histories,
/// and a preview changes nothing.
fn preview_button(preview: &str, container: &str, target: &str) -> Markup {
    html! {
        button.btn.btn-secondary type="button"
            hx-get=(preview)
            hx-include=(preview_fields(container))
            hx-target=(format!("#{target}"))
            hx-swap="innerHTML" { "Preview" }
    }
}

/// Where the form of a plan act posts and where its preview goes.
struct ActForm<'a> {
    csrf: &'a str,
    action: &'a str,
    /// The form's container, which htmx swaps with the answer.
    container: &'a str,
    /// The act's preview route, and the element under the form its answer lands in.
    preview: &'a str,
    preview_id: &'a str,
}

impl ActForm<'_> {
    /// The form: `fields`, the act's reason, then Preview and `submit`; the preview's empty home
    /// under it.
    fn render(&self, f: &FormState, fields: Markup, submit: Markup) -> Markup {
        html! {
            (hx_form(self.action, self.container, self.csrf, html! {
                (fields)
                (reason_field(&format!("{}-reason", self.container), f))
                div.form-actions {
                    (preview_button(self.preview, self.container, self.preview_id))
                    (submit)
                }
            }))
            div #(self.preview_id) aria-live="polite" {}
        }
    }
}

/// The named fields of the form in `#{container}`, but its CSRF token.
fn preview_fields(container: &str) -> String {
    format!("#{container} [name]:not([name=csrf_token])")
}

/// One disposition of a preview's list, "Migrate: …", marked when it is the one chosen.
fn disposition_item(value: &str, chosen: Option<&str>, body: Markup) -> Markup {
    let is_chosen = chosen == Some(value);
    let label = if value == "migrate" { "Migrate" } else { "Grandfather" };
    html! {
        li class=[is_chosen.then_some("chosen")] {
            strong { (label) } ": " (body)
            @if is_chosen {
                " " (badge("chosen", Tone::Ok))
            }
        }
    }
}

/// The refusal, or the line that says nothing stands in the way (naming the confirming button
/// when there is one).
fn go_ahead(refused: Option<&str>, title: &str, button: Option<&str>) -> Markup {
    html! {
        @if let Some(message) = refused {
            (refusal(title, message))
        } @else if let Some(button) = button {
            p { "Nothing stands in the way: confirm it with " strong { (button) } "." }
        } @else {
            p { "Nothing stands in the way: confirm it to go ahead." }
        }
    }
}

/// A plan act's optional reason, kept in the act's record.
fn reason_field(id: &str, f: &FormState) -> Markup {
    input_field(&Input { placeholder: Some("optional"), ..f.input(id, "reason", "Reason") })
}

/// The rank, with rank 0 labelled as the floor.
pub(crate) fn rank_cell(rank: i32) -> Markup {
    html! {
        span.rank {
            (rank)
            @if rank == 0 {
                " " (badge("floor", Tone::Muted))
            }
        }
    }
}
