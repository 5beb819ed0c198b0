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

use crate::forms::{Input, Select, form_banners, hx_form, input_field, select_field};
use maud::{Markup, html};

use crate::components::{Column, Tone, badge, notice, refusal, table_cols};
use crate::pages::catalog::{FormState, count};

const LADDERS_PATH: &str = "/operator/topology/ladders";
const LADDER_ORDER_PATH: &str = "/operator/topology/ladder-order";
const ORG_TYPES_PATH: &str = "/operator/topology/org-types";
const PLAN_ACTS_PATH: &str = "/operator/plan-acts";
/// How many colliding organizations a preview names at most.
const PREVIEW_COLLISIONS_MAX: usize = 10;

/// One tier of a ladder.
pub struct TierRow {
    /// 0 is the ladder's floor.
    pub rank: i32,
    pub product_id: i64,
    pub product_name: String,
    pub set_name: String,
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
    pub default_ladder: Option<String>,
    /// The default ladder's rank-0 product.
    pub floor_product: Option<String>,
    pub organizations: i64,
}

pub struct TopologyView {
    pub csrf: String,
    pub ladders: Vec<LadderView>,
    pub org_types: Vec<OrgTypeRow>,
    /// (id, name) of the published products with an entitlement set: what a tier can be.
    pub products: Vec<(i64, String)>,
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
}

/// The notice, the ladder-order form, ladders in their order (each with its tiers by rank, a
/// delete form and a removal form per tier, the tier-order form when it has two tiers or more,
/// and the add-tier form), then the org types (each with its default-change form).
pub fn topology(v: &TopologyView) -> Markup {
    let mut ladders: Vec<&LadderView> = v.ladders.iter().collect();
    ladders.sort_by_key(|l| l.sort_order);
    let order: Vec<(i64, String, i32)> =
        ladders.iter().zip(1..).map(|(l, position)| (l.id, l.name.clone(), position)).collect();
    let ladder_options: Vec<(i64, String)> = ladders.iter().map(|l| (l.id, l.name.clone())).collect();
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
                a href=(PLAN_ACTS_PATH) { "plan act" } "."
            }
            @if ladders.is_empty() {
                p.empty { "No plan ladders yet." }
            } @else {
                (ladder_order_form(&v.csrf, &order, &v.order_form))
                @for ladder in ladders {
                    @let forms = LadderForms {
                        add: v.add_forms.iter().find(|(id, _)| *id == ladder.id).map_or(&empty_form, |(_, f)| f),
                        remove: &v.remove_forms,
                        tier_order: v
                            .tier_order_forms
                            .iter()
                            .find(|(id, _)| *id == ladder.id)
                            .map_or(&empty_form, |(_, f)| f),
                    };
                    (ladder_card(&v.csrf, ladder, &v.products, &forms))
                }
            }
        }
        section.card aria-labelledby="org-types-heading" {
            h2 #org-types-heading { "Organization types" }
            p.muted { "Every organization of a type holds the floor of the type's default ladder until it gets more." }
            (org_types_table(&v.csrf, &v.org_types, &ladder_options, &v.default_forms))
        }
    }
}

/// The form states one ladder card needs.
struct LadderForms<'a> {
    add: &'a FormState,
    /// Every removal form state on the page, keyed by (ladder id, rank).
    remove: &'a [((i64, i32), FormState)],
    tier_order: &'a FormState,
}

fn ladder_card(csrf: &str, l: &LadderView, products: &[(i64, String)], forms: &LadderForms) -> Markup {
    let heading_id = format!("ladder-{}-heading", l.id);
    let mut tiers: Vec<&TierRow> = l.tiers.iter().collect();
    tiers.sort_by_key(|t| t.rank);
    let next_rank = tiers.iter().map(|t| t.rank).max().map_or(1, |top| top.saturating_add(1).max(1));
    let empty_form = FormState::default();
    let rows = tiers
        .iter()
        .map(|t| {
            let remove = forms
                .remove
                .iter()
                .find(|((ladder_id, rank), _)| *ladder_id == l.id && *rank == t.rank)
                .map_or(&empty_form, |(_, f)| f);
            vec![
                rank_cell(t.rank),
                html! { a href=(format!("/operator/catalog/products/{}", t.product_id)) { (t.product_name) } },
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
    let order: Vec<(i64, String, i32)> = tiers.iter().map(|t| (t.product_id, t.product_name.clone(), t.rank)).collect();
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

/// The add-tier form of one ladder, in its container `#add-tier-{ladder_id}`; it posts to
/// `/operator/topology/ladders/{ladder_id}/tiers`.
///
/// Fields: `product_id`, `rank` (from 1; `next_rank` unless a value was submitted), `reason`
/// (optional). "Preview" GETs `…/tiers/preview` with the form's values and puts the answer
/// ([`tier_add_preview`]) in `#add-tier-preview-{ladder_id}`, under the form.
pub fn add_tier_form(csrf: &str, ladder_id: i64, products: &[(i64, String)], next_rank: i32, f: &FormState) -> Markup {
    let container = format!("add-tier-{ladder_id}");
    let action = format!("{LADDERS_PATH}/{ladder_id}/tiers");
    let preview_url = format!("{action}/preview");
    let preview_id = format!("add-tier-preview-{ladder_id}");
    let product_id = format!("{container}-product_id");
    let rank_id = format!("{container}-rank");
    let reason_id = format!("{container}-reason");
    let next_rank_text = next_rank.to_string();
    let rank = if f.value("rank").is_empty() { next_rank_text.as_str() } else { f.value("rank") };
    let rank_hint = format!("1 is just above the floor; the top is {next_rank}");
    let mut options: Vec<(String, String)> = vec![(String::new(), "— choose a product —".to_owned())];
    options.extend(products.iter().map(|(id, name)| (id.to_string(), name.clone())));
    let options: Vec<(&str, &str)> = options.iter().map(|(v, l)| (v.as_str(), l.as_str())).collect();
    html! {
        div.form-panel.add-tier #(container) {
            h4 { "Add a tier" }
            p.muted {
                "The product becomes a tier of this ladder at the rank you choose; the tiers at and "
                "above it move up one. Every organization that holds the product now gains the "
                "ladder's position. Preview shows who the add reaches before you confirm it."
            }
            (form_banners(f))
            @if products.is_empty() {
                div.notice.info role="note" {
                    p {
                        "There are no published products with an entitlement set to add. Publish one in the "
                        a href="/operator/catalog" { "catalog" } " first."
                    }
                }
            }
            (hx_form(&action, &container, csrf, html! {
                (select_field(&Select {
                    id: &product_id,
                    name: "product_id",
                    label: "Product",
                    options: &options,
                    selected: f.value("product_id"),
                    error: f.field_error("product_id"),
                    required: true,
                    hint: None,
                }))
                (input_field(&Input {
                    id: &rank_id,
                    name: "rank",
                    label: "Rank",
                    kind: "number",
                    value: rank,
                    error: f.field_error("rank"),
                    required: true,
                    placeholder: None,
                    hint: Some(&rank_hint),
                }))
                (input_field(&Input {
                    id: &reason_id,
                    name: "reason",
                    label: "Reason",
                    kind: "text",
                    value: f.value("reason"),
                    error: f.field_error("reason"),
                    required: false,
                    placeholder: None,
                    hint: Some("optional; kept in the plan act's record"),
                }))
                div.form-actions {
                    button.btn.btn-secondary type="button"
                        hx-get=(preview_url)
                        hx-include=(preview_fields(&container))
                        hx-target=(format!("#{preview_id}"))
                        hx-swap="innerHTML" { "Preview" }
                    button.btn.btn-primary type="submit" { "Add tier" }
                }
            }))
            div #(preview_id) aria-live="polite" {}
        }
    }
}

/// What adding a tier would do, for the preview under the add-tier form.
pub struct TierAddPreview {
    pub ladder: String,
    pub product: String,
    pub rank: i32,
    /// Organizations that hold the product now.
    pub holders: i64,
    /// Names of organizations (at most 10) that hold the product and already hold a plan on
    /// the ladder.
    pub collisions: Vec<String>,
    /// Why the add would be refused, in the operator's words.
    pub refusal: Option<String>,
}

/// The preview, `<div class="preview">…</div>`: the content of `#add-tier-preview-{ladder_id}`.
pub fn tier_add_preview(p: &TierAddPreview) -> Markup {
    html! {
        div.preview {
            p {
                "Adding " strong { (p.product) } " to " strong { (p.ladder) } " at rank " (p.rank) " reaches "
                @if p.holders <= 0 {
                    "no organization: none holds it now."
                } @else {
                    (count(p.holders, "organization that holds it now", "organizations that hold it now"))
                    ": each gains the ladder's position."
                }
            }
            @if !p.collisions.is_empty() {
                div.preview-collisions {
                    p { "These organizations already hold a plan on this ladder; the add would be refused:" }
                    ul {
                        @for name in &p.collisions {
                            li { (name) }
                        }
                    }
                    @if p.collisions.len() >= PREVIEW_COLLISIONS_MAX {
                        p.field-hint { "At most " (PREVIEW_COLLISIONS_MAX) " are named." }
                    }
                }
            }
            @if let Some(message) = &p.refusal {
                (refusal("This tier cannot be added", message))
            } @else if p.collisions.is_empty() {
                p { "Nothing stands in the way: confirm it with " strong { "Add tier" } "." }
            }
        }
    }
}

/// The "Delete tier" form of one tier, in its container `#delete-tier-{ladder_id}-{rank}`; it
/// posts to `/operator/topology/ladders/{ladder_id}/tiers/{rank}/delete`. Its errors (e.g. the
/// tier has holders) show under the button as a small refusal.
pub fn delete_tier_form(csrf: &str, ladder_id: i64, rank: i32, f: &FormState) -> Markup {
    let container = format!("delete-tier-{ladder_id}-{rank}");
    let action = format!("{LADDERS_PATH}/{ladder_id}/tiers/{rank}/delete");
    html! {
        div.tier-delete #(container) {
            (hx_form(&action, &container, csrf, html! {
                button.btn.btn-danger.btn-small type="submit" aria-label=(format!("Delete tier at rank {rank}")) {
                    "Delete tier"
                }
            }))
            @if let Some(message) = &f.notice {
                (notice(message))
            }
            @for error in &f.errors {
                (refusal("Not deleted", error))
            }
        }
    }
}

/// The options of a removal's `disposition`: what happens to the organizations holding the tier.
const REMOVAL_DISPOSITIONS: [(&str, &str); 3] = [
    ("", "— choose —"),
    ("migrate", "Migrate: they leave the tier (organizations whose type defaults to this ladder get its floor)"),
    ("grandfather", "Grandfather: they keep the product as a legacy grant, off the ladder"),
];

/// The options of a tier reorder's `disposition`: what happens to the organizations on the old
/// floor when rank 0 changes.
const REORDER_DISPOSITIONS: [(&str, &str); 3] = [
    ("", "— choose —"),
    ("migrate", "Migrate: organizations on the old floor move to the new rank 0"),
    ("grandfather", "Grandfather: they keep the old floor product as a legacy grant"),
];

/// Whether a folded form has something to show: a notice, errors or submitted values.
fn has_state(f: &FormState) -> bool {
    f.notice.is_some() || !f.errors.is_empty() || !f.field_errors.is_empty() || !f.values.is_empty()
}

/// "Preview": GETs `{action}/preview` with the values of the form in `#{container}` into
/// `#{target}`, leaving out the CSRF token: a GET's query string lands in logs and histories,
/// and a preview changes nothing.
fn preview_button(action: &str, container: &str, target: &str) -> Markup {
    html! {
        button.btn.btn-secondary type="button"
            hx-get=(format!("{action}/preview"))
            hx-include=(preview_fields(container))
            hx-target=(format!("#{target}"))
            hx-swap="innerHTML" { "Preview" }
    }
}

/// The named fields of the form in `#{container}`, but its CSRF token.
fn preview_fields(container: &str) -> String {
    format!("#{container} [name]:not([name=csrf_token])")
}

/// The "Remove…" form of one tier, in its container `#remove-tier-{ladder_id}-{rank}`: a
/// disclosure, folded unless `f` has something to show, holding a form that posts to
/// `/operator/topology/ladders/{ladder_id}/tiers/{rank}/remove`.
///
/// Fields: `disposition` ("migrate" or "grandfather": what happens to the organizations that
/// hold the tier), `reason` (optional). Form errors show above the form, field errors under their
/// field. "Preview" GETs `…/remove/preview` with the form's values and puts the answer
/// ([`tier_removal_preview`]) in `#remove-tier-preview-{ladder_id}-{rank}`, under the form.
pub fn remove_tier_form(csrf: &str, ladder_id: i64, rank: i32, product_name: &str, f: &FormState) -> Markup {
    let container = format!("remove-tier-{ladder_id}-{rank}");
    let action = format!("{LADDERS_PATH}/{ladder_id}/tiers/{rank}/remove");
    let preview_id = format!("remove-tier-preview-{ladder_id}-{rank}");
    let disposition_id = format!("{container}-disposition");
    let reason_id = format!("{container}-reason");
    html! {
        div.tier-remove #(container) {
            details.tier-disclosure open[has_state(f)] {
                summary { "Remove…" span.visually-hidden { " " (product_name) " (rank " (rank) ")" } }
                p.field-hint {
                    "Removing a tier takes " strong { (product_name) } " off the ladder (the ranks above "
                    "close the gap) and moves every organization holding it, in one act. A tier no one "
                    "holds can simply be deleted."
                }
                (form_banners(f))
                (hx_form(&action, &container, csrf, html! {
                    (select_field(&Select {
                        id: &disposition_id,
                        name: "disposition",
                        label: "The organizations holding it",
                        options: &REMOVAL_DISPOSITIONS,
                        selected: f.value("disposition"),
                        error: f.field_error("disposition"),
                        required: true,
                        hint: None,
                    }))
                    (reason_field(&reason_id, f))
                    div.form-actions {
                        (preview_button(&action, &container, &preview_id))
                        button.btn.btn-danger type="submit" aria-label=(format!("Remove tier at rank {rank}")) {
                            "Remove tier"
                        }
                    }
                }))
                div #(preview_id) aria-live="polite" {}
            }
        }
    }
}

/// What removing a tier would do, for the preview under its removal form.
pub struct TierRemovalPreview {
    pub ladder: String,
    pub product: String,
    pub rank: i32,
    /// Organizations that hold the tier now.
    pub holders: i64,
    /// The disposition chosen in the form: "migrate", "grandfather", or none yet.
    pub disposition: Option<String>,
    /// The ladder's rank-0 product once the tier is gone; none when it was the only tier.
    pub floor_after: Option<String>,
    /// Why the removal would be refused, in the operator's words.
    pub refusal: Option<String>,
}

/// The preview, `<div class="preview">…</div>`: the content of
/// `#remove-tier-preview-{ladder_id}-{rank}`. It says who the removal reaches, what each
/// disposition does to them (the chosen one marked), and whether anything stands in the way.
pub fn tier_removal_preview(p: &TierRemovalPreview) -> Markup {
    let chosen = p.disposition.as_deref();
    html! {
        div.preview {
            p {
                "Removing " strong { (p.product) } " (rank " (p.rank) ") from " strong { (p.ladder) } " reaches "
                @if p.holders <= 0 {
                    "no organization: none holds it."
                } @else {
                    (count(p.holders, "organization that holds it.", "organizations that hold it."))
                }
            }
            @if p.holders > 0 {
                ul.preview-dispositions {
                    (disposition_item("migrate", chosen, html! {
                        (count(p.holders, "organization leaves", "organizations leave")) " the tier"
                        @if let Some(floor) = &p.floor_after {
                            "; those whose type defaults to " (p.ladder) " get " strong { (floor) } " in its place"
                        }
                        "."
                    }))
                    (disposition_item("grandfather", chosen, html! {
                        (count(p.holders, "organization keeps", "organizations keep")) " " strong { (p.product) }
                        " as a legacy grant, off the ladder."
                    }))
                }
            } @else {
                p { "No organization is moved, whichever disposition you choose." }
            }
            @if p.floor_after.is_none() {
                p { (p.ladder) " is left with no tiers, and so with no floor." }
            }
            (go_ahead(p.refusal.as_deref(), "This tier cannot be removed", Some("Remove tier")))
        }
    }
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

/// The tier-order form of one ladder, in its container `#tier-order-{ladder_id}`: a disclosure,
/// folded unless `f` has something to show, holding a form that posts to
/// `/operator/topology/ladders/{ladder_id}/tier-order`.
///
/// `tiers` are (product id, product name, current rank). Fields: a number `rank.{product_id}`
/// per tier (from 0; the submitted value, else the current rank), `disposition` ("migrate" or
/// "grandfather": needed only when rank 0 changes and organizations hold the current floor),
/// `reason` (optional). "Preview" GETs `…/tier-order/preview` with the form's values and puts
/// the answer ([`act_reach_preview`]) in `#tier-order-preview-{ladder_id}`, under the form.
pub fn tier_order_form(csrf: &str, ladder_id: i64, tiers: &[(i64, String, i32)], f: &FormState) -> Markup {
    let container = format!("tier-order-{ladder_id}");
    let action = format!("{LADDERS_PATH}/{ladder_id}/tier-order");
    let preview_id = format!("tier-order-preview-{ladder_id}");
    let disposition_id = format!("{container}-disposition");
    let reason_id = format!("{container}-reason");
    let note_id = format!("{container}-note");
    let mut tiers: Vec<&(i64, String, i32)> = tiers.iter().collect();
    tiers.sort_by_key(|(_, _, rank)| *rank);
    html! {
        div.form-panel.tier-order #(container) {
            details.tier-disclosure open[has_state(f)] {
                summary { "Reorder tiers…" }
                p.muted #(note_id) {
                    "Ranks count from 0, the floor. Changing rank 0 changes the floor of every org type "
                    "that defaults to this ladder, and those organizations are moved, live; you then land "
                    "on the plan act's progress page."
                }
                (form_banners(f))
                (hx_form(&action, &container, csrf, html! {
                    div.tier-order-fields {
                        @for (product_id, name, rank) in &tiers {
                            (tier_rank_field(f, &container, *product_id, name, *rank))
                        }
                    }
                    (select_field(&Select {
                        id: &disposition_id,
                        name: "disposition",
                        label: "Organizations on the current floor",
                        options: &REORDER_DISPOSITIONS,
                        selected: f.value("disposition"),
                        error: f.field_error("disposition"),
                        required: false,
                        hint: Some("needed only when rank 0 changes and organizations hold the current floor"),
                    }))
                    (reason_field(&reason_id, f))
                    div.form-actions {
                        (preview_button(&action, &container, &preview_id))
                        button.btn.btn-primary type="submit" aria-describedby=(note_id) { "Save tier order" }
                    }
                }))
                div #(preview_id) aria-live="polite" {}
            }
        }
    }
}

/// A tier's rank field, `rank.{product_id}`: a whole number from 0 (the shared number input
/// starts at 1, and rank 0 is the floor).
fn tier_rank_field(f: &FormState, container: &str, product_id: i64, name: &str, rank: i32) -> Markup {
    let field_name = format!("rank.{product_id}");
    let field_id = format!("{container}-rank-{product_id}");
    let error_id = format!("{field_id}-error");
    let current = rank.to_string();
    let value = if f.value(&field_name).is_empty() { current.as_str() } else { f.value(&field_name) };
    let error = f.field_error(&field_name);
    html! {
        div.field.has-error[error.is_some()] {
            label for=(field_id) { (name) }
            input id=(field_id) name=(field_name) type="number" value=(value) min="0" step="1" inputmode="numeric"
                required
                aria-invalid=[error.map(|_| "true")]
                aria-describedby=[error.map(|_| error_id.as_str())];
            @if let Some(error) = error {
                p.field-error id=(error_id) { (error) }
            }
        }
    }
}

/// What a plan act that moves organizations off a floor would reach (a default change, a tier
/// reorder that changes rank 0), for the preview under its form.
pub struct ActReachPreview {
    /// What the act does, e.g. "Changing Community's default to Support".
    pub action: String,
    /// The org types it reaches.
    pub types: Vec<String>,
    /// Organizations of those types.
    pub organizations: i64,
    /// Of them, those that hold the floor the act takes away.
    pub holding_floor: i64,
    /// Of them, those that hold no such floor.
    pub vacant: i64,
    /// The floor taken away, and the floor in its place; equal when the floor does not change.
    pub from_floor: Option<String>,
    pub to_floor: Option<String>,
    /// The disposition chosen in the form: "migrate", "grandfather", or none yet.
    pub disposition: Option<String>,
    /// Why the act would be refused, in the operator's words.
    pub refusal: Option<String>,
}

/// The preview, `<div class="preview">…</div>`: the content of
/// `#default-change-preview-{org_type_id}` or `#tier-order-preview-{ladder_id}`. It says whom the
/// act reaches, what each disposition does to those on the old floor (the chosen one marked),
/// what happens to the vacant ones, and whether anything stands in the way.
pub fn act_reach_preview(p: &ActReachPreview) -> Markup {
    let reaches = !p.types.is_empty() && p.organizations > 0;
    let chosen = p.disposition.as_deref();
    let holders = Pronoun::of(p.holding_floor);
    let vacant = Pronoun::of(p.vacant);
    html! {
        div.preview {
            p {
                (p.action) " reaches "
                @if reaches {
                    (count(p.organizations, "organization", "organizations")) " of " (p.types.join(", ")) "."
                } @else if p.from_floor == p.to_floor {
                    "no organization: the floor does not change, so no organization is moved."
                } @else if p.types.is_empty() {
                    "no organization: no organization type defaults to this ladder."
                } @else {
                    "no organization: there is no organization of " (p.types.join(", ")) " yet."
                }
            }
            @if reaches {
                @let from = p.from_floor.as_deref().unwrap_or("the old floor");
                @if p.holding_floor > 0 {
                    p { (count(p.holding_floor, "organization holds", "organizations hold")) " " strong { (from) } ":" }
                    ul.preview-dispositions {
                        (disposition_item("migrate", chosen, html! {
                            @if let Some(to) = &p.to_floor {
                                (holders.they) " " (holders.verb("move")) " to " strong { (to) } "."
                            } @else {
                                (holders.they) " " (holders.verb("lose")) " it, with no floor in its place."
                            }
                        }))
                        (disposition_item("grandfather", chosen, html! {
                            (holders.they) " " (holders.verb("keep")) " " strong { (from) } " as a legacy grant."
                        }))
                    }
                } @else {
                    p { "No organization holds " strong { (from) } ", so Migrate and Grandfather do the same." }
                }
                @if p.vacant > 0 {
                    p {
                        (count(p.vacant, "organization holds", "organizations hold")) " no floor to move (vacant): "
                        @if let Some(to) = &p.to_floor {
                            (vacant.they) " " (vacant.verb("get")) " " strong { (to) } " only if " (vacant.they) " "
                            (vacant.verb("hold")) " nothing on the ladder."
                        } @else {
                            "there is no new floor for " (vacant.them) " to get."
                        }
                    }
                }
            }
            (go_ahead(p.refusal.as_deref(), "This act would be refused", None))
        }
    }
}

/// "it moves" for one organization, "they move" for more.
struct Pronoun {
    they: &'static str,
    them: &'static str,
    one: bool,
}

impl Pronoun {
    fn of(n: i64) -> Self {
        if n == 1 {
            Pronoun { they: "it", them: "it", one: true }
        } else {
            Pronoun { they: "they", them: "them", one: false }
        }
    }

    fn verb(&self, verb: &str) -> String {
        if self.one { format!("{verb}s") } else { verb.to_owned() }
    }
}

/// The ladder-order form, in its container `#ladder-order`; it posts to
/// `/operator/topology/ladder-order` a number `position.{id}` per ladder (the submitted value,
/// else the current position).
pub fn ladder_order_form(csrf: &str, ladders: &[(i64, String, i32)], f: &FormState) -> Markup {
    let mut ladders: Vec<&(i64, String, i32)> = ladders.iter().collect();
    ladders.sort_by_key(|(_, _, position)| *position);
    html! {
        div.card.ladder-order #ladder-order {
            h3 { "Order of the ladders" }
            p.muted {
                "This only changes the order ladders are shown in, here and wherever plans are "
                "listed; no organization's plan changes."
            }
            (form_banners(f))
            @if ladders.is_empty() {
                p.empty { "No plan ladders to order." }
            } @else {
                (hx_form(LADDER_ORDER_PATH, "ladder-order", csrf, html! {
                    div.ladder-order-fields {
                        @for (id, name, position) in &ladders {
                            (position_field(f, *id, name, *position))
                        }
                    }
                    div.form-actions {
                        button.btn.btn-primary type="submit" { "Save ladder order" }
                    }
                }))
            }
        }
    }
}

fn position_field(f: &FormState, id: i64, name: &str, position: i32) -> Markup {
    let field_name = format!("position.{id}");
    let field_id = format!("ladder-order-{id}");
    let current = position.to_string();
    let value = if f.value(&field_name).is_empty() { current.as_str() } else { f.value(&field_name) };
    input_field(&Input {
        id: &field_id,
        name: &field_name,
        label: name,
        kind: "number",
        value,
        error: f.field_error(&field_name),
        required: true,
        placeholder: None,
        hint: None,
    })
}

/// The default-change form of one org type, in its container `#default-change-{org_type_id}`;
/// it posts to `/operator/topology/org-types/{org_type_id}/default`.
///
/// Fields: `plan_ladder_id` (one of `ladders`, (id, name)), `disposition` ("migrate" or
/// "grandfather": what happens to the floor the type's organizations hold now), `reason`
/// (optional). Form errors show above the form, field errors under their field. "Preview" GETs
/// `…/default/preview` with the form's values and puts the answer ([`act_reach_preview`]) in
/// `#default-change-preview-{org_type_id}`, under the form.
pub fn default_change_form(csrf: &str, org_type_id: i64, ladders: &[(i64, String)], f: &FormState) -> Markup {
    let container = format!("default-change-{org_type_id}");
    let action = format!("{ORG_TYPES_PATH}/{org_type_id}/default");
    let preview_id = format!("default-change-preview-{org_type_id}");
    let ladder_id = format!("{container}-plan_ladder_id");
    let disposition_id = format!("{container}-disposition");
    let reason_id = format!("{container}-reason");
    let note_id = format!("{container}-note");
    let mut ladder_options: Vec<(String, String)> = vec![(String::new(), "— choose a ladder —".to_owned())];
    ladder_options.extend(ladders.iter().map(|(id, name)| (id.to_string(), name.clone())));
    let ladder_options: Vec<(&str, &str)> = ladder_options.iter().map(|(v, l)| (v.as_str(), l.as_str())).collect();
    let disposition_options = [
        ("", "— choose —"),
        ("migrate", "Migrate: their floor moves to the new default"),
        ("grandfather", "Grandfather: they keep their old floor as a legacy grant"),
    ];
    html! {
        div.default-change #(container) {
            (form_banners(f))
            (hx_form(&action, &container, csrf, html! {
                p.field-hint #(note_id) {
                    "Every organization of this type is moved, live; you then land on the plan "
                    "act's progress page."
                }
                (select_field(&Select {
                    id: &ladder_id,
                    name: "plan_ladder_id",
                    label: "New default ladder",
                    options: &ladder_options,
                    selected: f.value("plan_ladder_id"),
                    error: f.field_error("plan_ladder_id"),
                    required: true,
                    hint: None,
                }))
                (select_field(&Select {
                    id: &disposition_id,
                    name: "disposition",
                    label: "Their current floor",
                    options: &disposition_options,
                    selected: f.value("disposition"),
                    error: f.field_error("disposition"),
                    required: true,
                    hint: None,
                }))
                (reason_field(&reason_id, f))
                div.form-actions {
                    (preview_button(&action, &container, &preview_id))
                    button.btn.btn-primary type="submit" aria-describedby=(note_id) { "Change default" }
                }
            }))
            div #(preview_id) aria-live="polite" {}
        }
    }
}

/// A plan act's optional reason, kept in the act's record.
fn reason_field(id: &str, f: &FormState) -> Markup {
    input_field(&Input {
        id,
        name: "reason",
        label: "Reason",
        kind: "text",
        value: f.value("reason"),
        error: f.field_error("reason"),
        required: false,
        placeholder: Some("optional"),
        hint: None,
    })
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

fn org_types_table(csrf: &str, types: &[OrgTypeRow], ladders: &[(i64, String)], forms: &[(i64, FormState)]) -> Markup {
    let empty_form = FormState::default();
    let rows = types
        .iter()
        .map(|t| {
            let form = forms.iter().find(|(id, _)| *id == t.id).map_or(&empty_form, |(_, f)| f);
            vec![
                html! { (t.name) },
                or_none(t.default_ladder.as_deref(), "no default"),
                or_none(t.floor_product.as_deref(), "no floor"),
                html! { (t.organizations) },
                default_change_form(csrf, t.id, ladders, form),
            ]
        })
        .collect();
    let columns = [
        Column::text("Type"),
        Column::text("Default ladder"),
        Column::text("Floor product"),
        Column::num("Organizations"),
        Column::text("Change default"),
    ];
    table_cols(&columns, rows, "No organization types yet.")
}

fn or_none(value: Option<&str>, none: &str) -> Markup {
    match value {
        Some(v) => html! { (v) },
        None => html! { span.muted { (none) } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(rank: i32, id: i64, name: &str) -> TierRow {
        TierRow { rank, product_id: id, product_name: name.into(), set_name: format!("{name} set") }
    }

    fn state(values: &[(&str, &str)], field_errors: &[(&str, &str)]) -> FormState {
        FormState {
            values: values.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            field_errors: field_errors.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..FormState::default()
        }
    }

    fn sample() -> TopologyView {
        TopologyView {
            csrf: "tok".into(),
            products: vec![(10, "Wiki Free".into()), (12, "<script>Wiki Pro</script>".into())],
            add_forms: vec![],
            order_form: FormState::default(),
            default_forms: vec![],
            remove_forms: vec![],
            tier_order_forms: vec![],
            notice: None,
            ladders: vec![
                LadderView { id: 2, name: "Support".into(), sort_order: 2, tiers: vec![] },
                LadderView {
                    id: 1,
                    name: "<script>Wiki hosting</script>".into(),
                    sort_order: 1,
                    tiers: vec![tier(1, 11, "Wiki Basic"), tier(0, 10, "Wiki Free")],
                },
            ],
            org_types: vec![
                OrgTypeRow {
                    id: 1,
                    name: "Community".into(),
                    default_ladder: Some("Wiki hosting".into()),
                    floor_product: Some("Wiki Free".into()),
                    organizations: 42,
                },
                OrgTypeRow {
                    id: 2,
                    name: "Internal".into(),
                    default_ladder: None,
                    floor_product: None,
                    organizations: 0,
                },
            ],
        }
    }

    #[test]
    fn ladders_are_in_order_with_tiers_by_rank_and_the_floor_labelled() {
        let out = topology(&sample()).into_string();
        let wiki = out.find("&lt;script&gt;Wiki hosting&lt;/script&gt;</h3>").expect("wiki ladder");
        let support = out.find("Support</h3>").expect("support ladder");
        assert!(wiki < support);
        assert!(!out.contains("<script>"));
        let free = out.find("Wiki Free</a>").unwrap();
        let basic = out.find("Wiki Basic</a>").unwrap();
        assert!(free < basic);
        assert!(out.contains(r#"<td><span class="rank">0 <span class="badge badge-muted">floor</span></span></td>"#));
        assert!(out.contains(r#"<td><span class="rank">1</span></td>"#));
        assert!(out.contains(r#"<a href="/operator/catalog/products/10">Wiki Free</a>"#));
        assert!(out.contains("<td>Wiki Free set</td>"));
        assert!(out.contains(r#"<p class="empty">No tiers yet.</p>"#));
    }

    #[test]
    fn org_types_show_default_floor_and_count() {
        let out = topology(&sample()).into_string();
        assert!(out.contains(r#"<td>Community</td><td>Wiki hosting</td><td>Wiki Free</td><td class="num">42</td>"#));
        assert!(out.contains(r#"<span class="muted">no default</span>"#));
        assert!(out.contains(r#"<span class="muted">no floor</span>"#));
    }

    #[test]
    fn empty_topology_says_so() {
        let v = TopologyView { ladders: vec![], org_types: vec![], products: vec![], ..sample() };
        let out = topology(&v).into_string();
        assert!(out.contains(r#"<p class="empty">No plan ladders yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">No organization types yet.</p>"#));
        assert!(!out.contains("<form"));
        assert!(!out.contains("ladder-order"));
    }

    #[test]
    fn page_has_notice_order_form_and_per_ladder_forms() {
        let mut v = sample();
        v.notice = Some("Added <Pro>.".into());
        let out = topology(&v).into_string();
        assert!(out.starts_with(r#"<div class="notice" role="status"><p>Added &lt;Pro&gt;.</p></div>"#));
        let order = out.find(r#"id="ladder-order""#).unwrap();
        assert!(order < out.find("Wiki hosting&lt;/script&gt;</h3>").unwrap());
        // Ladder 1 is shown first, so it is at position 1.
        assert!(out.contains(r#"name="position.1" type="number" value="1""#));
        assert!(out.contains(r#"name="position.2" type="number" value="2""#));
        assert!(out.contains(r#"id="add-tier-1""#));
        assert!(out.contains(r#"id="add-tier-2""#));
        // Ladder 1's top is rank 1, so a new tier goes at 2; the empty ladder starts at 1.
        assert!(out.contains(r#"id="add-tier-1-rank" name="rank" type="number" value="2""#));
        assert!(out.contains(r#"id="add-tier-2-rank" name="rank" type="number" value="1""#));
        assert!(out.contains(r#"id="delete-tier-1-0""#));
        assert!(out.contains(r#"id="delete-tier-1-1""#));
        assert!(!out.contains("delete-tier-2-"));
        assert!(out.contains(r#"id="remove-tier-1-0""#));
        assert!(out.contains(r#"id="remove-tier-1-1""#));
        assert!(!out.contains("remove-tier-2-"));
        // Order form, two add forms, two delete and two removal forms, one tier-order form (only
        // ladder 1 has two tiers), two default-change forms; each carries the token.
        assert_eq!(out.matches(r#"<input type="hidden" name="csrf_token" value="tok">"#).count(), 10);
        assert!(out.contains("&lt;script&gt;Wiki Pro&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
    }

    #[test]
    fn a_refused_add_form_keeps_its_values_for_its_ladder_only() {
        let mut v = sample();
        let mut f = state(&[("product_id", "12"), ("rank", "7"), ("reason", "<r>")], &[("rank", "Too high.")]);
        f.errors = vec!["Acme already holds a plan on this ladder.".into()];
        v.add_forms = vec![(1, f)];
        let out = topology(&v).into_string();
        let ladder1 = &out[out.find(r#"id="add-tier-1""#).unwrap()..out.find(r#"id="add-tier-preview-1""#).unwrap()];
        assert!(ladder1.contains(r#"<option value="12" selected>&lt;script&gt;Wiki Pro&lt;/script&gt;</option>"#));
        assert!(ladder1.contains(r#"name="rank" type="number" value="7""#));
        assert!(ladder1.contains(r#"<p class="field-error" id="add-tier-1-rank-error">Too high.</p>"#));
        assert!(ladder1.contains(r#"value="&lt;r&gt;""#));
        assert!(ladder1.contains("<li>Acme already holds a plan on this ladder.</li>"));
        let ladder2 = &out[out.find(r#"id="add-tier-2""#).unwrap()..out.find(r#"id="add-tier-preview-2""#).unwrap()];
        assert!(!ladder2.contains("selected>&lt;script"));
        assert!(!ladder2.contains("Acme"));
    }

    #[test]
    fn add_tier_form_posts_its_fields_with_the_token_first() {
        let out = add_tier_form("tok", 3, &[(10, "Wiki Free".into())], 4, &FormState::default()).into_string();
        assert!(out.starts_with(r#"<div class="form-panel add-tier" id="add-tier-3">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/topology/ladders/3/tiers" hx-post="/operator/topology/ladders/3/tiers" hx-target="#add-tier-3" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"<select id="add-tier-3-product_id" name="product_id" required>"#));
        assert!(out.contains(
            r#"<option value="" selected>— choose a product —</option><option value="10">Wiki Free</option>"#
        ));
        assert!(out.contains(r#"name="rank" type="number" value="4" min="1" step="1""#));
        assert!(out.contains("1 is just above the floor; the top is 4"));
        assert!(out.contains(r#"name="reason" type="text" value="" aria-describedby="add-tier-3-reason-hint""#));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Add tier</button>"#));
        // The preview's empty home sits under the form, inside the container.
        assert!(out.ends_with(r#"</form><div id="add-tier-preview-3" aria-live="polite"></div></div>"#));
        assert!(!out.contains("no published products"));
    }

    #[test]
    fn preview_button_gets_the_preview_with_the_form_values() {
        let out = add_tier_form("tok", 3, &[], 1, &FormState::default()).into_string();
        assert!(out.contains(
            r##"<button class="btn btn-secondary" type="button" hx-get="/operator/topology/ladders/3/tiers/preview" hx-include="#add-tier-3 [name]:not([name=csrf_token])" hx-target="#add-tier-preview-3" hx-swap="innerHTML">Preview</button>"##
        ));
        // No products to choose from: only the placeholder, and a pointer to the catalog.
        assert!(out.contains("no published products with an entitlement set"));
        assert_eq!(out.matches("<option").count(), 1);
    }

    fn preview() -> TierAddPreview {
        TierAddPreview {
            ladder: "Wiki hosting".into(),
            product: "<script>Pro</script>".into(),
            rank: 2,
            holders: 3,
            collisions: vec![],
            refusal: None,
        }
    }

    #[test]
    fn preview_says_who_the_add_reaches_and_that_it_can_be_confirmed() {
        let out = tier_add_preview(&preview()).into_string();
        assert!(out.starts_with(r#"<div class="preview">"#));
        assert!(out.contains(
            "Adding <strong>&lt;script&gt;Pro&lt;/script&gt;</strong> to <strong>Wiki hosting</strong> at rank 2 reaches 3 organizations that hold it now: each gains the ladder's position."
        ));
        assert!(!out.contains("<script>"));
        assert!(out.contains("confirm it with <strong>Add tier</strong>"));
        assert!(!out.contains("refusal"));
        let out = tier_add_preview(&TierAddPreview { holders: 1, ..preview() }).into_string();
        assert!(out.contains("reaches 1 organization that holds it now:"));
        let out = tier_add_preview(&TierAddPreview { holders: 0, ..preview() }).into_string();
        assert!(out.contains("reaches no organization: none holds it now."));
    }

    #[test]
    fn preview_lists_collisions_and_the_refusal() {
        let p = TierAddPreview {
            collisions: vec!["Acme".into(), "<b>Evil</b>".into()],
            refusal: Some("2 organizations already hold a plan on Wiki hosting.".into()),
            ..preview()
        };
        let out = tier_add_preview(&p).into_string();
        assert!(out.contains("already hold a plan on this ladder; the add would be refused"));
        assert!(out.contains("<li>Acme</li><li>&lt;b&gt;Evil&lt;/b&gt;</li>"));
        assert!(out.contains(r#"<div class="refusal" role="alert"><strong>This tier cannot be added</strong><p>2 organizations already hold a plan on Wiki hosting.</p></div>"#));
        assert!(!out.contains("confirm it with"));
        assert!(!out.contains("At most"));
        let p = TierAddPreview { collisions: (0..10).map(|i| format!("Org {i}")).collect(), ..preview() };
        let out = tier_add_preview(&p).into_string();
        assert!(out.contains("At most 10 are named."));
        assert!(!out.contains("confirm it with"));
    }

    #[test]
    fn delete_tier_form_posts_to_the_rank_with_a_danger_button() {
        let out = delete_tier_form("tok", 3, 2, &FormState::default()).into_string();
        assert_eq!(
            out,
            r##"<div class="tier-delete" id="delete-tier-3-2"><form method="post" action="/operator/topology/ladders/3/tiers/2/delete" hx-post="/operator/topology/ladders/3/tiers/2/delete" hx-target="#delete-tier-3-2" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok"><button class="btn btn-danger btn-small" type="submit" aria-label="Delete tier at rank 2">Delete tier</button></form></div>"##
        );
    }

    #[test]
    fn delete_tier_form_shows_its_refusal_inline() {
        let f = FormState {
            errors: vec!["3 organizations hold this tier: remove it with a disposition instead".into()],
            ..FormState::default()
        };
        let out = delete_tier_form("tok", 3, 2, &f).into_string();
        assert!(out.contains(r#"<div class="refusal" role="alert"><strong>Not deleted</strong><p>3 organizations hold this tier: remove it with a disposition instead</p></div>"#));
        assert!(out.ends_with("</div></div>"));
    }

    #[test]
    fn ladder_order_form_has_a_position_per_ladder() {
        let ladders = [(2, "Support".to_owned(), 2), (1, "<i>Wiki</i>".to_owned(), 1)];
        let f = state(&[("position.2", "1")], &[("position.2", "Positions must differ.")]);
        let out = ladder_order_form("tok", &ladders, &f).into_string();
        assert!(out.starts_with(r#"<div class="card ladder-order" id="ladder-order">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/topology/ladder-order" hx-post="/operator/topology/ladder-order" hx-target="#ladder-order" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"<label for="ladder-order-1">&lt;i&gt;Wiki&lt;/i&gt;</label><input id="ladder-order-1" name="position.1" type="number" value="1" min="1""#));
        // The submitted value wins over the current position.
        assert!(out.contains(r#"<label for="ladder-order-2">Support</label><input id="ladder-order-2" name="position.2" type="number" value="1""#));
        assert!(out.contains(r#"<p class="field-error" id="ladder-order-2-error">Positions must differ.</p>"#));
        // In their current order.
        assert!(out.find("position.1").unwrap() < out.find("position.2").unwrap());
        assert!(out.contains("only changes the order ladders are shown in"));
        assert!(out.contains(r#"<button class="btn btn-primary" type="submit">Save ladder order</button>"#));
    }

    #[test]
    fn ladder_order_form_without_ladders_says_so() {
        let out = ladder_order_form("tok", &[], &FormState::default()).into_string();
        assert!(out.contains(r#"<p class="empty">No plan ladders to order.</p>"#));
        assert!(!out.contains("<form"));
    }

    #[test]
    fn default_change_form_posts_its_fields_with_the_token_first() {
        let ladders = [(1, "Wiki hosting".to_owned()), (2, "<i>Support</i>".to_owned())];
        let out = default_change_form("tok", 4, &ladders, &FormState::default()).into_string();
        assert!(out.starts_with(r#"<div class="default-change" id="default-change-4">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/topology/org-types/4/default" hx-post="/operator/topology/org-types/4/default" hx-target="#default-change-4" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"<select id="default-change-4-plan_ladder_id" name="plan_ladder_id" required>"#));
        assert!(out.contains(
            r#"<option value="" selected>— choose a ladder —</option><option value="1">Wiki hosting</option><option value="2">&lt;i&gt;Support&lt;/i&gt;</option>"#
        ));
        assert!(out.contains(r#"<select id="default-change-4-disposition" name="disposition" required>"#));
        assert!(out.contains(concat!(
            r#"<option value="" selected>— choose —</option>"#,
            r#"<option value="migrate">Migrate: their floor moves to the new default</option>"#,
            r#"<option value="grandfather">Grandfather: they keep their old floor as a legacy grant</option>"#,
        )));
        assert!(out.contains(r#"id="default-change-4-reason" name="reason" type="text" value="""#));
        assert!(!out.contains(r#"name="reason" type="text" value="" required"#));
        assert!(out.contains("Every organization of this type is moved, live"));
        assert!(out.contains("progress page"));
        assert!(out.contains(
            r#"<button class="btn btn-primary" type="submit" aria-describedby="default-change-4-note">Change default</button>"#
        ));
        assert!(!out.contains("<i>"));
        assert!(!out.contains("form-errors"));
    }

    #[test]
    fn a_refused_default_change_keeps_its_values_and_shows_its_errors() {
        let ladders = [(1, "Wiki hosting".to_owned()), (2, "Support".to_owned())];
        let mut f = state(
            &[("plan_ladder_id", "2"), ("disposition", "grandfather"), ("reason", "<why>")],
            &[("disposition", "Choose <what> happens."), ("plan_ladder_id", "Already the default.")],
        );
        f.errors = vec!["A change is <running>.".into()];
        let out = default_change_form("tok", 4, &ladders, &f).into_string();
        let errors = out.find(r#"<div class="form-errors" role="alert">"#).expect("form errors");
        assert!(errors < out.find("<form").unwrap());
        assert!(out.contains("<li>A change is &lt;running&gt;.</li>"));
        assert!(out.contains(r#"<option value="2" selected>Support</option>"#));
        assert!(out.contains(r#"<option value="grandfather" selected>Grandfather"#));
        assert!(!out.contains(r#"<option value="" selected>"#));
        assert!(out.contains(r#"value="&lt;why&gt;""#));
        assert!(out.contains(
            r#"<p class="field-error" id="default-change-4-disposition-error">Choose &lt;what&gt; happens.</p>"#
        ));
        assert!(
            out.contains(
                r#"<p class="field-error" id="default-change-4-plan_ladder_id-error">Already the default.</p>"#
            )
        );
        assert!(out.contains(r#"aria-invalid="true" aria-describedby="default-change-4-disposition-error""#));
    }

    #[test]
    fn org_types_table_has_a_default_change_form_per_type_with_its_own_state() {
        let mut v = sample();
        v.default_forms = vec![(2, state(&[("reason", "moving internal")], &[]))];
        let out = topology(&v).into_string();
        assert!(out.contains(r#"<th scope="col">Change default</th>"#));
        assert!(out.contains(r#"<td class="num">42</td><td><div class="default-change" id="default-change-1">"#));
        assert!(out.contains(r#"id="default-change-2""#));
        // The ladders are offered in their order.
        let one = &out[out.find(r#"id="default-change-1""#).unwrap()..out.find(r#"id="default-change-2""#).unwrap()];
        assert!(one.contains(
            r#"<option value="1">&lt;script&gt;Wiki hosting&lt;/script&gt;</option><option value="2">Support</option>"#
        ));
        assert!(!one.contains("moving internal"));
        let two = &out[out.find(r#"id="default-change-2""#).unwrap()..];
        assert!(two.contains(r#"value="moving internal""#));
    }

    #[test]
    fn each_tier_row_has_delete_and_remove_forms_and_the_ladder_a_tier_order_form() {
        let mut v = sample();
        v.remove_forms = vec![((1, 1), state(&[("disposition", "grandfather")], &[]))];
        v.tier_order_forms = vec![(1, state(&[("rank.11", "0")], &[("rank.11", "Two tiers at rank 0.")]))];
        let out = topology(&v).into_string();
        // Both forms share the tier row's last cell, the delete form first.
        let cell = &out[out.find(r#"<td><div class="tier-actions">"#).unwrap()..];
        assert!(cell.starts_with(r#"<td><div class="tier-actions"><div class="tier-delete" id="delete-tier-1-0">"#));
        assert!(cell.find(r#"id="remove-tier-1-0""#).unwrap() < cell.find("</td>").unwrap());
        // Only the tier whose removal was refused opens, with its value.
        let rank0 =
            &out[out.find(r#"id="remove-tier-1-0""#).unwrap()..out.find(r#"id="remove-tier-preview-1-0""#).unwrap()];
        assert!(rank0.contains(r#"<details class="tier-disclosure"><summary>"#));
        assert!(!rank0.contains(r#"value="grandfather" selected"#));
        let rank1 =
            &out[out.find(r#"id="remove-tier-1-1""#).unwrap()..out.find(r#"id="remove-tier-preview-1-1""#).unwrap()];
        assert!(rank1.contains(r#"<details class="tier-disclosure" open><summary>"#));
        assert!(rank1.contains(r#"<option value="grandfather" selected>"#));
        // The tier-order form comes after the table and before the add-tier form, with its state.
        let table_end = out.find("</table>").unwrap();
        let order = out
            .find(r#"<div class="form-panel tier-order" id="tier-order-1"><details class="tier-disclosure" open>"#)
            .unwrap();
        assert!(table_end < order && order < out.find(r#"id="add-tier-1""#).unwrap());
        assert!(out.contains(r#"name="rank.11" type="number" value="0""#));
        assert!(out.contains("Two tiers at rank 0."));
        // A ladder with fewer than two tiers has nothing to reorder.
        assert!(!out.contains(r#"id="tier-order-2""#));
    }

    #[test]
    fn remove_tier_form_posts_a_disposition_and_starts_folded() {
        let out = remove_tier_form("tok", 3, 2, "<b>Pro</b>", &FormState::default()).into_string();
        assert!(out.starts_with(
            r#"<div class="tier-remove" id="remove-tier-3-2"><details class="tier-disclosure"><summary>Remove…<span class="visually-hidden"> &lt;b&gt;Pro&lt;/b&gt; (rank 2)</span></summary>"#
        ));
        assert!(out.contains("Removing a tier takes <strong>&lt;b&gt;Pro&lt;/b&gt;</strong> off the ladder (the ranks above close the gap)"));
        assert!(out.contains("A tier no one holds can simply be deleted."));
        assert!(!out.contains("<b>"));
        assert!(out.contains(
            r##"<form method="post" action="/operator/topology/ladders/3/tiers/2/remove" hx-post="/operator/topology/ladders/3/tiers/2/remove" hx-target="#remove-tier-3-2" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        assert!(out.contains(r#"<select id="remove-tier-3-2-disposition" name="disposition" required>"#));
        assert!(out.contains(concat!(
            r#"<option value="" selected>— choose —</option>"#,
            r#"<option value="migrate">Migrate: they leave the tier (organizations whose type defaults to this ladder get its floor)</option>"#,
            r#"<option value="grandfather">Grandfather: they keep the product as a legacy grant, off the ladder</option>"#,
        )));
        assert!(out.contains(
            r#"<input id="remove-tier-3-2-reason" name="reason" type="text" value="" placeholder="optional">"#
        ));
        assert!(out.contains(concat!(
            r##"<div class="form-actions"><button class="btn btn-secondary" type="button" hx-get="/operator/topology/ladders/3/tiers/2/remove/preview" hx-include="#remove-tier-3-2 [name]:not([name=csrf_token])" hx-target="#remove-tier-preview-3-2" hx-swap="innerHTML">Preview</button>"##,
            r#"<button class="btn btn-danger" type="submit" aria-label="Remove tier at rank 2">Remove tier</button></div>"#,
        )));
        assert!(out.ends_with(r#"</form><div id="remove-tier-preview-3-2" aria-live="polite"></div></details></div>"#));
        assert!(!out.contains("form-errors"));
    }

    #[test]
    fn a_refused_remove_form_opens_with_its_values_and_errors() {
        let mut f = state(
            &[("disposition", "migrate"), ("reason", "<why>")],
            &[("disposition", "Choose what <happens> to them.")],
        );
        f.errors = vec!["A change is <running> on this ladder.".into()];
        let out = remove_tier_form("tok", 3, 2, "Pro", &f).into_string();
        assert!(out.contains(r#"<details class="tier-disclosure" open>"#));
        let errors = out.find(r#"<div class="form-errors" role="alert">"#).expect("form errors");
        assert!(errors < out.find("<form").unwrap());
        assert!(out.contains("<li>A change is &lt;running&gt; on this ladder.</li>"));
        assert!(out.contains(r#"<option value="migrate" selected>Migrate"#));
        assert!(!out.contains(r#"<option value="" selected>"#));
        assert!(out.contains(r#"value="&lt;why&gt;""#));
        assert!(out.contains(
            r#"<p class="field-error" id="remove-tier-3-2-disposition-error">Choose what &lt;happens&gt; to them.</p>"#
        ));
        // Values alone (a refusal with no message) open it too.
        let out = remove_tier_form("tok", 3, 2, "Pro", &state(&[("reason", "x")], &[])).into_string();
        assert!(out.contains(r#"<details class="tier-disclosure" open>"#));
    }

    #[test]
    fn tier_order_form_has_a_rank_from_zero_per_tier_and_a_preview() {
        let tiers = [(11, "Basic".to_owned(), 1), (10, "<i>Free</i>".to_owned(), 0)];
        let out = tier_order_form("tok", 3, &tiers, &FormState::default()).into_string();
        assert!(out.starts_with(
            r#"<div class="form-panel tier-order" id="tier-order-3"><details class="tier-disclosure"><summary>Reorder tiers…</summary>"#
        ));
        assert!(out.contains("Ranks count from 0, the floor. Changing rank 0 changes the floor of every org type"));
        assert!(out.contains("progress page"));
        assert!(out.contains(
            r##"<form method="post" action="/operator/topology/ladders/3/tier-order" hx-post="/operator/topology/ladders/3/tier-order" hx-target="#tier-order-3" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
        ));
        // By current rank, labelled with the product, from 0.
        assert!(out.contains(concat!(
            r#"<div class="field"><label for="tier-order-3-rank-10">&lt;i&gt;Free&lt;/i&gt;</label>"#,
            r#"<input id="tier-order-3-rank-10" name="rank.10" type="number" value="0" min="0" step="1" inputmode="numeric" required></div>"#,
            r#"<div class="field"><label for="tier-order-3-rank-11">Basic</label>"#,
            r#"<input id="tier-order-3-rank-11" name="rank.11" type="number" value="1" min="0""#,
        )));
        assert!(!out.contains("<i>"));
        assert!(out.contains(r#"<select id="tier-order-3-disposition" name="disposition" aria-describedby="tier-order-3-disposition-hint">"#));
        assert!(out.contains(concat!(
            r#"<option value="" selected>— choose —</option>"#,
            r#"<option value="migrate">Migrate: organizations on the old floor move to the new rank 0</option>"#,
            r#"<option value="grandfather">Grandfather: they keep the old floor product as a legacy grant</option>"#,
        )));
        assert!(out.contains("needed only when rank 0 changes and organizations hold the current floor"));
        assert!(out.contains(r#"name="reason" type="text" value="""#));
        assert!(out.contains(concat!(
            r##"<button class="btn btn-secondary" type="button" hx-get="/operator/topology/ladders/3/tier-order/preview" hx-include="#tier-order-3 [name]:not([name=csrf_token])" hx-target="#tier-order-preview-3" hx-swap="innerHTML">Preview</button>"##,
            r#"<button class="btn btn-primary" type="submit" aria-describedby="tier-order-3-note">Save tier order</button>"#,
        )));
        assert!(out.ends_with(r#"</form><div id="tier-order-preview-3" aria-live="polite"></div></details></div>"#));
    }

    #[test]
    fn a_refused_tier_order_form_opens_with_its_values_and_errors() {
        let tiers = [(10, "Free".to_owned(), 0), (11, "Basic".to_owned(), 1)];
        let mut f = state(
            &[("rank.10", "1"), ("rank.11", "0"), ("disposition", "grandfather")],
            &[("rank.11", "Ranks must <differ>."), ("disposition", "Choose one.")],
        );
        f.errors = vec!["12 organizations hold Free.".into()];
        let out = tier_order_form("tok", 3, &tiers, &f).into_string();
        assert!(out.contains(r#"<details class="tier-disclosure" open>"#));
        assert!(out.find(r#"<div class="form-errors" role="alert">"#).unwrap() < out.find("<form").unwrap());
        assert!(out.contains("<li>12 organizations hold Free.</li>"));
        // The submitted ranks win over the current ones.
        assert!(out.contains(r#"name="rank.10" type="number" value="1""#));
        assert!(out.contains(r#"name="rank.11" type="number" value="0" min="0" step="1" inputmode="numeric" required aria-invalid="true" aria-describedby="tier-order-3-rank-11-error">"#));
        assert!(
            out.contains(r#"<p class="field-error" id="tier-order-3-rank-11-error">Ranks must &lt;differ&gt;.</p>"#)
        );
        assert!(out.contains(r#"<option value="grandfather" selected>Grandfather"#));
        assert!(out.contains(r#"<p class="field-error" id="tier-order-3-disposition-error">Choose one.</p>"#));
    }

    #[test]
    fn default_change_form_has_a_preview_before_its_submit() {
        let out = default_change_form("tok", 4, &[(1, "Wiki".to_owned())], &FormState::default()).into_string();
        assert!(out.contains(concat!(
            r##"<div class="form-actions"><button class="btn btn-secondary" type="button" hx-get="/operator/topology/org-types/4/default/preview" hx-include="#default-change-4 [name]:not([name=csrf_token])" hx-target="#default-change-preview-4" hx-swap="innerHTML">Preview</button>"##,
            r#"<button class="btn btn-primary" type="submit""#,
        )));
        assert!(out.ends_with(r#"</form><div id="default-change-preview-4" aria-live="polite"></div></div>"#));
    }

    fn removal() -> TierRemovalPreview {
        TierRemovalPreview {
            ladder: "<i>Wiki</i>".into(),
            product: "<script>Pro</script>".into(),
            rank: 2,
            holders: 3,
            disposition: None,
            floor_after: Some("Wiki Free".into()),
            refusal: None,
        }
    }

    #[test]
    fn removal_preview_says_who_it_reaches_and_what_each_disposition_does() {
        let out = tier_removal_preview(&removal()).into_string();
        assert!(out.starts_with(r#"<div class="preview">"#));
        assert!(out.contains(
            "Removing <strong>&lt;script&gt;Pro&lt;/script&gt;</strong> (rank 2) from <strong>&lt;i&gt;Wiki&lt;/i&gt;</strong> reaches 3 organizations that hold it."
        ));
        assert!(out.contains(
            "<li><strong>Migrate</strong>: 3 organizations leave the tier; those whose type defaults to &lt;i&gt;Wiki&lt;/i&gt; get <strong>Wiki Free</strong> in its place.</li>"
        ));
        assert!(out.contains(
            "<li><strong>Grandfather</strong>: 3 organizations keep <strong>&lt;script&gt;Pro&lt;/script&gt;</strong> as a legacy grant, off the ladder.</li>"
        ));
        assert!(!out.contains("<script>") && !out.contains("<i>"));
        // Nothing chosen yet: nothing marked.
        assert!(!out.contains("chosen"));
        assert!(!out.contains("no tiers"));
        assert!(out.ends_with("<p>Nothing stands in the way: confirm it with <strong>Remove tier</strong>.</p></div>"));
    }

    #[test]
    fn removal_preview_marks_the_chosen_disposition_and_counts_one() {
        let p = TierRemovalPreview { holders: 1, disposition: Some("grandfather".into()), ..removal() };
        let out = tier_removal_preview(&p).into_string();
        assert!(out.contains("reaches 1 organization that holds it."));
        assert!(out.contains("<li><strong>Migrate</strong>: 1 organization leaves the tier;"));
        assert!(out.contains(concat!(
            r#"<li class="chosen"><strong>Grandfather</strong>: 1 organization keeps <strong>&lt;script&gt;Pro&lt;/script&gt;</strong> as a legacy grant, off the ladder."#,
            r#" <span class="badge badge-ok">chosen</span></li>"#,
        )));
        assert_eq!(out.matches("chosen").count(), 2);
        let p = TierRemovalPreview { disposition: Some("migrate".into()), ..removal() };
        let out = tier_removal_preview(&p).into_string();
        assert!(out.contains(r#"<li class="chosen"><strong>Migrate</strong>: 3 organizations leave the tier"#));
        assert!(out.contains("<li><strong>Grandfather</strong>"));
    }

    #[test]
    fn removal_preview_of_the_last_tier_with_no_holders_and_a_refusal() {
        let p = TierRemovalPreview {
            holders: 0,
            floor_after: None,
            refusal: Some("A change is running on <Wiki>.".into()),
            ..removal()
        };
        let out = tier_removal_preview(&p).into_string();
        assert!(out.contains("reaches no organization: none holds it."));
        assert!(out.contains("No organization is moved, whichever disposition you choose."));
        assert!(!out.contains("<ul"));
        assert!(out.contains("<p>&lt;i&gt;Wiki&lt;/i&gt; is left with no tiers, and so with no floor.</p>"));
        assert!(out.contains(r#"<div class="refusal" role="alert"><strong>This tier cannot be removed</strong><p>A change is running on &lt;Wiki&gt;.</p></div>"#));
        assert!(!out.contains("Nothing stands in the way"));
        // Holders, no floor after: the migrated ones get none.
        let p = TierRemovalPreview { floor_after: None, ..removal() };
        let out = tier_removal_preview(&p).into_string();
        assert!(out.contains("<li><strong>Migrate</strong>: 3 organizations leave the tier.</li>"));
        assert!(out.contains("is left with no tiers"));
    }

    fn reach() -> ActReachPreview {
        ActReachPreview {
            action: "Changing <b>Community</b>'s default to Support".into(),
            types: vec!["Community".into(), "<i>Edu</i>".into()],
            organizations: 5,
            holding_floor: 3,
            vacant: 2,
            from_floor: Some("Wiki <Free>".into()),
            to_floor: Some("Support Basic".into()),
            disposition: None,
            refusal: None,
        }
    }

    #[test]
    fn act_reach_preview_counts_who_it_reaches_per_disposition() {
        let out = act_reach_preview(&reach()).into_string();
        assert!(out.starts_with(r#"<div class="preview">"#));
        assert!(out.contains(
            "<p>Changing &lt;b&gt;Community&lt;/b&gt;'s default to Support reaches 5 organizations of Community, &lt;i&gt;Edu&lt;/i&gt;.</p>"
        ));
        assert!(out.contains("<p>3 organizations hold <strong>Wiki &lt;Free&gt;</strong>:</p>"));
        assert!(out.contains("<li><strong>Migrate</strong>: they move to <strong>Support Basic</strong>.</li>"));
        assert!(out.contains(
            "<li><strong>Grandfather</strong>: they keep <strong>Wiki &lt;Free&gt;</strong> as a legacy grant.</li>"
        ));
        assert!(out.contains(
            "<p>2 organizations hold no floor to move (vacant): they get <strong>Support Basic</strong> only if they hold nothing on the ladder.</p>"
        ));
        assert!(!out.contains("<b>") && !out.contains("<i>"));
        assert!(!out.contains("chosen"));
        assert!(out.ends_with("<p>Nothing stands in the way: confirm it to go ahead.</p></div>"));
    }

    #[test]
    fn act_reach_preview_marks_the_choice_speaks_of_one_and_shows_a_refusal() {
        let p = ActReachPreview {
            organizations: 2,
            holding_floor: 1,
            vacant: 1,
            disposition: Some("migrate".into()),
            refusal: Some("1 organization holds <Wiki Free>: choose a disposition.".into()),
            ..reach()
        };
        let out = act_reach_preview(&p).into_string();
        assert!(out.contains("<p>1 organization holds <strong>Wiki &lt;Free&gt;</strong>:</p>"));
        assert!(out.contains(
            r#"<li class="chosen"><strong>Migrate</strong>: it moves to <strong>Support Basic</strong>. <span class="badge badge-ok">chosen</span></li>"#
        ));
        assert!(out.contains("<li><strong>Grandfather</strong>: it keeps <strong>Wiki &lt;Free&gt;</strong>"));
        assert!(out.contains("1 organization holds no floor to move (vacant): it gets <strong>Support Basic</strong> only if it holds nothing"));
        assert!(out.contains(r#"<div class="refusal" role="alert"><strong>This act would be refused</strong><p>1 organization holds &lt;Wiki Free&gt;: choose a disposition.</p></div>"#));
        assert!(!out.contains("Nothing stands in the way"));
        let out =
            act_reach_preview(&ActReachPreview { disposition: Some("grandfather".into()), ..reach() }).into_string();
        assert!(out.contains(r#"<li class="chosen"><strong>Grandfather</strong>"#));
        assert!(out.contains("<li><strong>Migrate</strong>"));
        let out = act_reach_preview(&ActReachPreview { organizations: 1, holding_floor: 0, vacant: 1, ..reach() })
            .into_string();
        assert!(out.contains("reaches 1 organization of Community"));
        assert!(out.contains(
            "No organization holds <strong>Wiki &lt;Free&gt;</strong>, so Migrate and Grandfather do the same."
        ));
        assert!(!out.contains("<ul"));
    }

    #[test]
    fn act_reach_preview_of_an_act_that_reaches_no_one() {
        // A reorder that keeps rank 0: no type is reached and the floor stays.
        let keeps_floor = ActReachPreview {
            action: "Reordering Wiki's tiers".into(),
            types: vec![],
            organizations: 0,
            holding_floor: 0,
            vacant: 0,
            from_floor: Some("Wiki Free".into()),
            to_floor: Some("Wiki Free".into()),
            ..reach()
        };
        let out = act_reach_preview(&keeps_floor).into_string();
        assert!(out.contains(
            "<p>Reordering Wiki's tiers reaches no organization: the floor does not change, so no organization is moved.</p>"
        ));
        assert!(!out.contains("<ul") && !out.contains("vacant"));
        assert!(out.contains("Nothing stands in the way"));
        let out =
            act_reach_preview(&ActReachPreview { to_floor: Some("Wiki Basic".into()), ..keeps_floor }).into_string();
        assert!(out.contains("reaches no organization: no organization type defaults to this ladder."));
        let out = act_reach_preview(&ActReachPreview { organizations: 0, holding_floor: 0, vacant: 0, ..reach() })
            .into_string();
        assert!(
            out.contains("reaches no organization: there is no organization of Community, &lt;i&gt;Edu&lt;/i&gt; yet.")
        );
        assert!(!out.contains("<ul"));
    }
}
