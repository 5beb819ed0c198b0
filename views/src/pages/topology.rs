//! The operator's view of the plan topology, and where operators shape plans: ladders with their
//! tiers (add a tier, with a preview of who it reaches; delete a tier no one holds), the order
//! the ladders are shown in, and org types (change a type's default ladder).
//!
//! Forms follow the catalog's pattern: a plain `method="post"` form that works without
//! JavaScript, enhanced by htmx to post to the same URL and swap its own container
//! (`outerHTML`), so a 4xx answer carrying the re-rendered container shows the refusal in place.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, notice, refusal, table_cols};
use crate::pages::catalog::{FormState, count};
use crate::pages::grants::{Input, Select, form_banners, hx_form, input_field, select_field};

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
    /// Good news shown at the top (e.g. after a plain POST redirected back here).
    pub notice: Option<String>,
}

/// The notice, the ladder-order form, ladders in their order (each with its tiers by rank, a
/// delete form per tier and the add-tier form), then the org types (each with its default-change
/// form).
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
                    @let form = v.add_forms.iter().find(|(id, _)| *id == ladder.id).map_or(&empty_form, |(_, f)| f);
                    (ladder_card(&v.csrf, ladder, &v.products, form))
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

fn ladder_card(csrf: &str, l: &LadderView, products: &[(i64, String)], add_form: &FormState) -> Markup {
    let heading_id = format!("ladder-{}-heading", l.id);
    let mut tiers: Vec<&TierRow> = l.tiers.iter().collect();
    tiers.sort_by_key(|t| t.rank);
    let next_rank = tiers.iter().map(|t| t.rank).max().map_or(1, |top| top.saturating_add(1).max(1));
    let empty_form = FormState::default();
    let rows = tiers
        .iter()
        .map(|t| {
            vec![
                rank_cell(t.rank),
                html! { a href=(format!("/operator/catalog/products/{}", t.product_id)) { (t.product_name) } },
                html! { (t.set_name) },
                delete_tier_form(csrf, l.id, t.rank, &empty_form),
            ]
        })
        .collect();
    let columns = [Column::text("Rank"), Column::text("Product"), Column::text("Entitlement set"), Column::text("")];
    html! {
        section.card.ladder aria-labelledby=(heading_id) {
            h3 id=(heading_id) { (l.name) }
            (table_cols(&columns, rows, "No tiers yet."))
            (add_tier_form(csrf, l.id, products, next_rank, add_form))
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
                        hx-include="closest form"
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
/// (optional). Form errors show above the form, field errors under their field.
pub fn default_change_form(csrf: &str, org_type_id: i64, ladders: &[(i64, String)], f: &FormState) -> Markup {
    let container = format!("default-change-{org_type_id}");
    let action = format!("{ORG_TYPES_PATH}/{org_type_id}/default");
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
                (input_field(&Input {
                    id: &reason_id,
                    name: "reason",
                    label: "Reason",
                    kind: "text",
                    value: f.value("reason"),
                    error: f.field_error("reason"),
                    required: false,
                    placeholder: Some("optional"),
                    hint: None,
                }))
                div.form-actions {
                    button.btn.btn-primary type="submit" aria-describedby=(note_id) { "Change default" }
                }
            }))
        }
    }
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
        // Order form, two add forms, two delete forms, two default-change forms; each carries
        // the token.
        assert_eq!(out.matches(r#"<input type="hidden" name="csrf_token" value="tok">"#).count(), 7);
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
            r##"<button class="btn btn-secondary" type="button" hx-get="/operator/topology/ladders/3/tiers/preview" hx-include="closest form" hx-target="#add-tier-preview-3" hx-swap="innerHTML">Preview</button>"##
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
}
