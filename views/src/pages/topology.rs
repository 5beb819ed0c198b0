//! The operator's view of the plan topology: ladders with their tiers, and org types.

use maud::{Markup, html};

use crate::components::{Column, Tone, badge, table_cols};

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
    pub ladders: Vec<LadderView>,
    pub org_types: Vec<OrgTypeRow>,
}

/// Ladders in their order, each with its tiers by rank, then the org types.
pub fn topology(v: &TopologyView) -> Markup {
    let mut ladders: Vec<&LadderView> = v.ladders.iter().collect();
    ladders.sort_by_key(|l| l.sort_order);
    html! {
        section aria-labelledby="ladders-heading" {
            h2 #ladders-heading { "Plan ladders" }
            p.muted {
                "A ladder is one dimension of a plan. Its tiers are products ranked from 0; rank 0 "
                "is the floor, which an organization holds when nothing else holds the ladder."
            }
            @if ladders.is_empty() {
                p.empty { "No plan ladders yet." }
            } @else {
                @for ladder in ladders {
                    (ladder_card(ladder))
                }
            }
        }
        section.card aria-labelledby="org-types-heading" {
            h2 #org-types-heading { "Organization types" }
            p.muted { "Every organization of a type holds the floor of the type's default ladder until it gets more." }
            (org_types_table(&v.org_types))
        }
    }
}

fn ladder_card(l: &LadderView) -> Markup {
    let heading_id = format!("ladder-{}-heading", l.id);
    let mut tiers: Vec<&TierRow> = l.tiers.iter().collect();
    tiers.sort_by_key(|t| t.rank);
    let rows = tiers
        .iter()
        .map(|t| {
            vec![
                rank_cell(t.rank),
                html! { a href=(format!("/operator/catalog/products/{}", t.product_id)) { (t.product_name) } },
                html! { (t.set_name) },
            ]
        })
        .collect();
    let columns = [Column::text("Rank"), Column::text("Product"), Column::text("Entitlement set")];
    html! {
        section.card.ladder aria-labelledby=(heading_id) {
            h3 id=(heading_id) { (l.name) }
            (table_cols(&columns, rows, "No tiers yet."))
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

fn org_types_table(types: &[OrgTypeRow]) -> Markup {
    let rows = types
        .iter()
        .map(|t| {
            vec![
                html! { (t.name) },
                or_none(t.default_ladder.as_deref(), "no default"),
                or_none(t.floor_product.as_deref(), "no floor"),
                html! { (t.organizations) },
            ]
        })
        .collect();
    let columns = [
        Column::text("Type"),
        Column::text("Default ladder"),
        Column::text("Floor product"),
        Column::num("Organizations"),
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

    fn sample() -> TopologyView {
        TopologyView {
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
        let out = topology(&TopologyView { ladders: vec![], org_types: vec![] }).into_string();
        assert!(out.contains(r#"<p class="empty">No plan ladders yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">No organization types yet.</p>"#));
    }
}
