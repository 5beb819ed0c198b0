//! Org types: the table, and the form that changes a type's default ladder.

use maud::{Markup, html};

use crate::forms::IdOptions;

use super::*;

/// The default-change form of one org type, in its container `#default-change-{org_type_id}`;
/// it posts to `/operator/topology/org-types/{org_type_id}/default`.
///
/// Fields: `plan_ladder_id` (one of `ladders`, (id, name)), `disposition` ("migrate" or
/// "grandfather": what happens to the floor the type's organizations hold now), `reason`
/// (optional). Form errors show above the form, field errors under their field. "Preview" GETs
/// `…/default/preview` with the form's values and puts the answer ([`act_reach_preview`]) in
/// `#default-change-preview-{org_type_id}`, under the form.
pub fn default_change_form(csrf: &str, org_type_id: i64, ladders: &[Choice], f: &FormState) -> Markup {
    let container = format!("default-change-{org_type_id}");
    let action = fill(paths::ORG_TYPE_DEFAULT, &[&org_type_id]);
    let preview_id = format!("default-change-preview-{org_type_id}");
    let ladder_id = format!("{container}-plan_ladder_id");
    let disposition_id = format!("{container}-disposition");
    let preview = fill(paths::ORG_TYPE_DEFAULT_PREVIEW, &[&org_type_id]);
    let note_id = format!("{container}-note");
    let ladder_options = IdOptions::new("— choose a ladder —", ladders.iter().map(|l| (l.id, l.name.as_str())));
    let disposition_options = [
        ("", "— choose —"),
        ("migrate", "Migrate: their floor moves to the new default"),
        ("grandfather", "Grandfather: they keep their old floor as a legacy grant"),
    ];
    let form = ActForm { csrf, action: &action, container: &container, preview: &preview, preview_id: &preview_id };
    html! {
        div.default-change #(container) {
            (form_banners(f))
            (form.render(
                f,
                html! {
                    p.field-hint #(note_id) {
                        "Every organization of this type is moved, live; you then land on the plan "
                        "act's progress page."
                    }
                    (select_field(&Select {
                        required: true,
                        ..f.select(&ladder_id, "plan_ladder_id", "New default ladder", &ladder_options.pairs())
                    }))
                    (select_field(&Select {
                        required: true,
                        ..f.select(&disposition_id, "disposition", "Their current floor", &disposition_options)
                    }))
                },
                html! { button.btn.btn-primary type="submit" aria-describedby=(note_id) { "Change default" } },
            ))
        }
    }
}

pub(super) fn org_types_table(
    csrf: &str,
    types: &[OrgTypeRow],
    ladders: &[Choice],
    forms: &[(i64, FormState)],
) -> Markup {
    let empty_form = FormState::default();
    let rows = types
        .iter()
        .map(|t| {
            let form = state_for(forms, t.id, &empty_form);
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
