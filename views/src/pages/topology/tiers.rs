//! A ladder's tiers: add (with its preview), delete, remove (with its preview) and reorder.

use maud::{Markup, html};

use crate::forms::{IdOptions, Notes, labelled};
use crate::pages::catalog::publish_first;

use super::*;

/// The add-tier form of one ladder, in its container `#add-tier-{ladder_id}`; it posts to
/// `/operator/topology/ladders/{ladder_id}/tiers`.
///
/// Fields: `product_id`, `rank` (from 1; `next_rank` unless a value was submitted), `reason`
/// (optional). "Preview" GETs `…/tiers/preview` with the form's values and puts the answer
/// ([`tier_add_preview`]) in `#add-tier-preview-{ladder_id}`, under the form.
pub fn add_tier_form(csrf: &str, ladder_id: i64, products: &[Choice], next_rank: i32, f: &FormState) -> Markup {
    let container = format!("add-tier-{ladder_id}");
    let action = fill(paths::TIERS, &[&ladder_id]);
    let preview_url = fill(paths::TIERS_PREVIEW, &[&ladder_id]);
    let preview_id = format!("add-tier-preview-{ladder_id}");
    let product_id = format!("{container}-product_id");
    let rank_id = format!("{container}-rank");
    let reason_id = format!("{container}-reason");
    let next_rank_text = next_rank.to_string();
    let rank = f.value_or("rank", &next_rank_text);
    let rank_hint = format!("1 is just above the floor; the top is {next_rank}");
    let options = IdOptions::new("— choose a product —", products.iter().map(|p| (p.id, p.name.as_str())));
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
                (publish_first("There are no published products with an entitlement set to add."))
            }
            (hx_form(&action, &container, csrf, html! {
                (select_field(&Select {
                    required: true,
                    ..f.select(&product_id, "product_id", "Product", &options.pairs())
                }))
                (input_field(&Input {
                    kind: "number",
                    value: rank,
                    required: true,
                    hint: Some(&rank_hint),
                    ..f.input(&rank_id, "rank", "Rank")
                }))
                (input_field(&Input {
                    hint: Some("optional; kept in the plan act's record"),
                    ..f.input(&reason_id, "reason", "Reason")
                }))
                div.form-actions {
                    (preview_button(&preview_url, &container, &preview_id))
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
    let action = fill(paths::TIER_DELETE, &[&ladder_id, &rank]);
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
    let action = fill(paths::TIER_REMOVE, &[&ladder_id, &rank]);
    let preview = fill(paths::TIER_REMOVE_PREVIEW, &[&ladder_id, &rank]);
    let preview_id = format!("remove-tier-preview-{ladder_id}-{rank}");
    let disposition_id = format!("{container}-disposition");
    let form = ActForm { csrf, action: &action, container: &container, preview: &preview, preview_id: &preview_id };
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
                (form.render(
                    f,
                    html! {
                        (select_field(&Select {
                            required: true,
                            ..f.select(
                                &disposition_id,
                                "disposition",
                                "The organizations holding it",
                                &REMOVAL_DISPOSITIONS,
                            )
                        }))
                    },
                    html! {
                        button.btn.btn-danger type="submit" aria-label=(format!("Remove tier at rank {rank}")) {
                            "Remove tier"
                        }
                    },
                ))
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

/// The options of a tier reorder's `disposition`: what happens to the organizations on the old
/// floor when rank 0 changes.
const REORDER_DISPOSITIONS: [(&str, &str); 3] = [
    ("", "— choose —"),
    ("migrate", "Migrate: organizations on the old floor move to the new rank 0"),
    ("grandfather", "Grandfather: they keep the old floor product as a legacy grant"),
];

/// The tier-order form of one ladder, in its container `#tier-order-{ladder_id}`: a disclosure,
/// folded unless `f` has something to show, holding a form that posts to
/// `/operator/topology/ladders/{ladder_id}/tier-order`.
///
/// `tiers` are (product id, product name, current rank). Fields: a number `rank.{product_id}`
/// per tier (from 0; the submitted value, else the current rank), `disposition` ("migrate" or
/// "grandfather": needed only when rank 0 changes and organizations hold the current floor),
/// `reason` (optional). "Preview" GETs `…/tier-order/preview` with the form's values and puts
/// the answer ([`act_reach_preview`]) in `#tier-order-preview-{ladder_id}`, under the form.
pub fn tier_order_form(csrf: &str, ladder_id: i64, tiers: &[Placed], f: &FormState) -> Markup {
    let container = format!("tier-order-{ladder_id}");
    let action = fill(paths::TIER_ORDER, &[&ladder_id]);
    let preview = fill(paths::TIER_ORDER_PREVIEW, &[&ladder_id]);
    let preview_id = format!("tier-order-preview-{ladder_id}");
    let disposition_id = format!("{container}-disposition");
    let note_id = format!("{container}-note");
    let form = ActForm { csrf, action: &action, container: &container, preview: &preview, preview_id: &preview_id };
    let mut tiers: Vec<&Placed> = tiers.iter().collect();
    tiers.sort_by_key(|t| t.position);
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
                (form.render(
                    f,
                    html! {
                        div.tier-order-fields {
                            @for t in &tiers {
                                (tier_rank_field(f, &container, t.id, &t.name, t.position))
                            }
                        }
                        (select_field(&Select {
                            hint: Some("needed only when rank 0 changes and organizations hold the current floor"),
                            ..f.select(
                                &disposition_id,
                                "disposition",
                                "Organizations on the current floor",
                                &REORDER_DISPOSITIONS,
                            )
                        }))
                    },
                    html! { button.btn.btn-primary type="submit" aria-describedby=(note_id) { "Save tier order" } },
                ))
            }
        }
    }
}

/// A tier's rank field, `rank.{product_id}`: a whole number from 0 (the shared number input
/// starts at 1, and rank 0 is the floor).
fn tier_rank_field(f: &FormState, container: &str, product_id: i64, name: &str, rank: i32) -> Markup {
    let field_name = format!("rank.{product_id}");
    let field_id = format!("{container}-rank-{product_id}");
    let current = rank.to_string();
    let value = f.value_or(&field_name, &current);
    let notes = Notes::new(&field_id, None, f.field_error(&field_name));
    labelled(
        &field_id,
        name,
        &notes,
        html! {
            input id=(field_id) name=(field_name) type="number" value=(value) min="0" step="1" inputmode="numeric"
                required
                aria-invalid=[notes.invalid()]
                aria-describedby=[notes.described_by()];
        },
    )
}
