//! The order the ladders are shown in.

use maud::{Markup, html};

use crate::forms::submit;

use super::*;

/// The ladder-order form, in its container `#ladder-order`; it posts to
/// `/operator/topology/ladder-order` a number `position.{id}` per ladder (the submitted value,
/// else the current position).
pub fn ladder_order_form(csrf: &str, ladders: &[Placed], f: &FormState) -> Markup {
    let mut ladders: Vec<&Placed> = ladders.iter().collect();
    ladders.sort_by_key(|l| l.position);
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
                (hx_form(paths::LADDER_ORDER, "ladder-order", csrf, html! {
                    div.ladder-order-fields {
                        @for l in &ladders {
                            (position_field(f, l.id, &l.name, l.position))
                        }
                    }
                    (submit("Save ladder order"))
                }))
            }
        }
    }
}

fn position_field(f: &FormState, id: i64, name: &str, position: i32) -> Markup {
    let field_name = format!("position.{id}");
    let field_id = format!("ladder-order-{id}");
    let current = position.to_string();
    input_field(&Input {
        kind: "number",
        value: f.value_or(&field_name, &current),
        required: true,
        ..f.input(&field_id, &field_name, name)
    })
}
