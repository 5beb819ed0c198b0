//! The topology views, rendered and read back.

use super::*;

fn choice(id: i64, name: &str) -> Choice {
    Choice { id, name: name.into() }
}

fn placed(id: i64, name: &str, position: i32) -> Placed {
    Placed { id, name: name.into(), position }
}

fn tier(rank: i32, id: i64, name: &str) -> TierRow {
    TierRow {
        rank,
        product_id: id,
        product_name: name.into(),
        set_name: format!("{name} set"),
        organizations: Total::Exactly(0),
    }
}

fn sample() -> TopologyView {
    TopologyView {
        csrf: "tok".into(),
        products: vec![choice(10, "Wiki Free"), choice(12, "<script>Wiki Pro</script>")],
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
                default_ladder_id: Some(1),
                default_ladder: Some("Wiki hosting".into()),
                floor_product: Some("Wiki Free".into()),
                organizations: 42,
            },
            OrgTypeRow {
                id: 2,
                name: "Internal".into(),
                default_ladder_id: None,
                default_ladder: None,
                floor_product: None,
                organizations: 0,
            },
        ],
        signup: SignupTypeView { mode: "invite".into(), chosen: None },
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
    // ladder 1 has two tiers), two default-change forms, two sign-up type forms (no type is
    // marked yet); each carries the token.
    assert_eq!(out.matches(r#"<input type="hidden" name="csrf_token" value="tok">"#).count(), 12);
    assert!(out.contains("&lt;script&gt;Wiki Pro&lt;/script&gt;"));
    assert!(!out.contains("<script>"));
}

#[test]
fn a_refused_add_form_keeps_its_values_for_its_ladder_only() {
    let mut v = sample();
    let mut f = FormState::sent(&[("product_id", "12"), ("rank", "7"), ("reason", "<r>")], &[("rank", "Too high.")]);
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
    let out = add_tier_form("tok", 3, &[choice(10, "Wiki Free")], 4, &FormState::default()).into_string();
    assert!(out.starts_with(r#"<div class="form-panel add-tier" id="add-tier-3">"#));
    assert!(out.contains(
        r##"<form method="post" action="/operator/topology/ladders/3/tiers" hx-post="/operator/topology/ladders/3/tiers" hx-target="#add-tier-3" hx-swap="outerHTML"><input type="hidden" name="csrf_token" value="tok">"##
    ));
    assert!(out.contains(r#"<select id="add-tier-3-product_id" name="product_id" required>"#));
    assert!(
        out.contains(r#"<option value="" selected>— choose a product —</option><option value="10">Wiki Free</option>"#)
    );
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
    let ladders = [placed(2, "Support", 2), placed(1, "<i>Wiki</i>", 1)];
    let f = FormState::sent(&[("position.2", "1")], &[("position.2", "Positions must differ.")]);
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
    let ladders = [choice(1, "Wiki hosting"), choice(2, "<i>Support</i>")];
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
    let ladders = [choice(1, "Wiki hosting"), choice(2, "Support")];
    let mut f = FormState::sent(
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
        out.contains(r#"<p class="field-error" id="default-change-4-plan_ladder_id-error">Already the default.</p>"#)
    );
    assert!(out.contains(r#"aria-invalid="true" aria-describedby="default-change-4-disposition-error""#));
}

#[test]
fn org_types_table_has_a_default_change_form_per_type_with_its_own_state() {
    let mut v = sample();
    v.default_forms = vec![(2, FormState::sent(&[("reason", "moving internal")], &[]))];
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
    v.remove_forms = vec![((1, 1), FormState::sent(&[("disposition", "grandfather")], &[]))];
    v.tier_order_forms = vec![(1, FormState::sent(&[("rank.11", "0")], &[("rank.11", "Two tiers at rank 0.")]))];
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
    assert!(out.contains(
        "Removing a tier takes <strong>&lt;b&gt;Pro&lt;/b&gt;</strong> off the ladder (the ranks above close the gap)"
    ));
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
    assert!(
        out.contains(
            r#"<input id="remove-tier-3-2-reason" name="reason" type="text" value="" placeholder="optional">"#
        )
    );
    assert!(out.contains(concat!(
        r##"<div class="form-actions"><button class="btn btn-secondary" type="button" hx-get="/operator/topology/ladders/3/tiers/2/remove/preview" hx-include="#remove-tier-3-2 [name]:not([name=csrf_token])" hx-target="#remove-tier-preview-3-2" hx-swap="innerHTML">Preview</button>"##,
        r#"<button class="btn btn-danger" type="submit" aria-label="Remove tier at rank 2">Remove tier</button></div>"#,
    )));
    assert!(out.ends_with(r#"</form><div id="remove-tier-preview-3-2" aria-live="polite"></div></details></div>"#));
    assert!(!out.contains("form-errors"));
}

#[test]
fn a_refused_remove_form_opens_with_its_values_and_errors() {
    let mut f = FormState::sent(
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
    let out = remove_tier_form("tok", 3, 2, "Pro", &FormState::sent(&[("reason", "x")], &[])).into_string();
    assert!(out.contains(r#"<details class="tier-disclosure" open>"#));
}

#[test]
fn tier_order_form_has_a_rank_from_zero_per_tier_and_a_preview() {
    let tiers = [placed(11, "Basic", 1), placed(10, "<i>Free</i>", 0)];
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
    assert!(out.contains(
        r#"<select id="tier-order-3-disposition" name="disposition" aria-describedby="tier-order-3-disposition-hint">"#
    ));
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
    let tiers = [placed(10, "Free", 0), placed(11, "Basic", 1)];
    let mut f = FormState::sent(
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
    assert!(out.contains(r#"<p class="field-error" id="tier-order-3-rank-11-error">Ranks must &lt;differ&gt;.</p>"#));
    assert!(out.contains(r#"<option value="grandfather" selected>Grandfather"#));
    assert!(out.contains(r#"<p class="field-error" id="tier-order-3-disposition-error">Choose one.</p>"#));
}

#[test]
fn default_change_form_has_a_preview_before_its_submit() {
    let out = default_change_form("tok", 4, &[choice(1, "Wiki")], &FormState::default()).into_string();
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
    let out = act_reach_preview(&ActReachPreview { disposition: Some("grandfather".into()), ..reach() }).into_string();
    assert!(out.contains(r#"<li class="chosen"><strong>Grandfather</strong>"#));
    assert!(out.contains("<li><strong>Migrate</strong>"));
    let out =
        act_reach_preview(&ActReachPreview { organizations: 1, holding_floor: 0, vacant: 1, ..reach() }).into_string();
    assert!(out.contains("reaches 1 organization of Community"));
    assert!(
        out.contains(
            "No organization holds <strong>Wiki &lt;Free&gt;</strong>, so Migrate and Grandfather do the same."
        )
    );
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
    let out = act_reach_preview(&ActReachPreview { to_floor: Some("Wiki Basic".into()), ..keeps_floor }).into_string();
    assert!(out.contains("reaches no organization: no organization type defaults to this ladder."));
    let out =
        act_reach_preview(&ActReachPreview { organizations: 0, holding_floor: 0, vacant: 0, ..reach() }).into_string();
    assert!(
        out.contains("reaches no organization: there is no organization of Community, &lt;i&gt;Edu&lt;/i&gt; yet.")
    );
    assert!(!out.contains("<ul"));
}

#[test]
fn the_page_and_a_refused_forms_answer_read_the_same_order_and_next_rank() {
    let v = sample();
    // The ladders by their order (Support's sort order is 2), numbered from 1; not as listed.
    assert_eq!(v.ladder_order(), vec![placed(1, "<script>Wiki hosting</script>", 1), placed(2, "Support", 2)]);
    assert_eq!(v.ladder_choices(), vec![choice(1, "<script>Wiki hosting</script>"), choice(2, "Support")]);
    let wiki = v.ladder(1).unwrap();
    // Tiers by rank; the next rank is above the top one, not the count of tiers.
    assert_eq!(wiki.tier_order(), vec![placed(10, "Wiki Free", 0), placed(11, "Wiki Basic", 1)]);
    assert_eq!(wiki.next_rank(), 2);
    let gap = LadderView { id: 3, name: "Gap".into(), sort_order: 3, tiers: vec![tier(0, 10, "A"), tier(4, 11, "B")] };
    assert_eq!(gap.next_rank(), 5);
    assert_eq!(v.ladder(2).unwrap().next_rank(), 1);
    assert!(v.ladder(9).is_none());
}

#[test]
fn the_ladders_are_drawn_above_the_forms() {
    let out = topology(&sample()).into_string();
    let wiki = out.find(r#"<figure class="ladder-picture" id="ladder-1-picture">"#).expect("wiki's picture");
    let support = out.find(r#"<figure class="ladder-picture" id="ladder-2-picture">"#).expect("support's picture");
    assert!(wiki < support, "in the ladders' order");
    assert!(support < out.find(r#"id="ladder-order""#).unwrap());
    assert!(support < out.find("<form").unwrap());
    // Community defaults to Wiki hosting; Internal has no default and is drawn nowhere.
    assert!(out[wiki..support].contains(r#"text-anchor="end">Community</text>"#));
    assert!(!out.contains(r#"text-anchor="end">Internal</text>"#));
    // An empty topology draws nothing.
    let v = TopologyView { ladders: vec![], ..sample() };
    assert!(!topology(&v).into_string().contains("ladder-picture"));
}

#[test]
fn the_sign_up_section_says_the_mode_marks_the_chosen_type_and_offers_the_others() {
    let v = sample();
    let out = topology(&v).into_string();
    assert!(out.contains("Sign-up is <strong>invite</strong>"));
    assert!(out.contains("No type is marked"));
    let first = v.org_types[0].id;
    let marked = TopologyView { signup: SignupTypeView { mode: "open".into(), chosen: Some(first) }, ..sample() };
    let out = topology(&marked).into_string();
    assert!(!out.contains("No type is marked"));
    assert!(out.contains("The sign-up type"));
    assert!(!out.contains(&format!(r#"action="/operator/topology/org-types/{first}/signup""#)));
    assert_eq!(out.matches("Make this the sign-up type").count(), v.org_types.len() - 1);
}
