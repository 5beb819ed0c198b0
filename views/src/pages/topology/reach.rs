//! Who a plan act reaches: the preview under the tier-order and default-change forms.

use maud::{Markup, html};

use super::*;

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
