//! The topology as a picture: each ladder drawn as a ladder, inline SVG made here on the server
//! (no script, nothing fetched). Its tiers are rungs by rank, the floor (rank 0) at the bottom,
//! each labelled with its product and how many organizations are on it; the org types that
//! default to the ladder point at its floor, since a default is a ladder and what an organization
//! of the type holds by default is that ladder's rank 0 (docs/domain.md).
//!
//! Every name goes through maud's escaping, in the SVG as in the text. A screen reader is given
//! the SVG's title and description, and a visually hidden list with the same facts, which tests
//! read too.

use maud::{Markup, html};

use super::*;

/// Vertical distance between two rungs.
const RUNG_GAP: i32 = 56;
/// Rails from above the top rung to below the floor, by this much.
const RAIL_OVERHANG: i32 = 20;
const TOP: i32 = 8;
const RAIL_LEFT: i32 = 214;
const RAIL_RIGHT: i32 = 270;
/// Where a rung's words start, right of the rails.
const LABEL_X: i32 = 282;
/// Where an org type's words end, left of the rails; its arrow starts just after.
const TYPE_X: i32 = 186;
/// Vertical distance between two org types pointing at the same floor.
const TYPE_GAP: i32 = 40;
const WIDTH: i32 = 600;
/// Names longer than these are cut in the drawing (with "…"); the title and the list keep them
/// whole.
const RUNG_NAME_CHARS: usize = 28;
const TYPE_NAME_CHARS: usize = 20;

/// The pictures of the ladders in the order given, above the forms.
pub fn topology_picture(ladders: &[&LadderView], org_types: &[OrgTypeRow]) -> Markup {
    html! {
        div.topology-picture {
            @for l in ladders {
                @let types: Vec<&OrgTypeRow> = org_types.iter().filter(|t| t.default_ladder_id == Some(l.id)).collect();
                (ladder_picture(l, &types))
            }
        }
    }
}

/// One ladder: a figure with the SVG, a visible caption, and the hidden text.
pub fn ladder_picture(l: &LadderView, defaulting: &[&OrgTypeRow]) -> Markup {
    let tiers = l.tiers_by_rank();
    let floor = tiers.iter().find(|t| t.rank == 0);
    let n = tiers.len() as i32;
    // The top rung first: rung i from the bottom sits at floor_y - i * gap.
    let floor_y = TOP + RAIL_OVERHANG + (n - 1).max(0) * RUNG_GAP;
    let rails_bottom = floor_y + RAIL_OVERHANG;
    let types_bottom = floor_y + (defaulting.len() as i32 - 1).max(0) * TYPE_GAP + 20;
    let height = rails_bottom.max(types_bottom) + 8;
    let id = format!("ladder-{}-picture", l.id);
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    // Where the org types point: the floor rung, or the foot of the rails when there is no floor.
    let target = (RAIL_LEFT - 4, if floor.is_some() { floor_y } else { rails_bottom });
    html! {
        figure.ladder-picture #(id) {
            figcaption { (l.name) }
            svg xmlns="http://www.w3.org/2000/svg" role="img" class="ladder-svg"
                viewBox=(format!("0 0 {WIDTH} {height}")) width=(WIDTH) height=(height)
                aria-labelledby=(format!("{title_id} {desc_id}")) {
                title #(title_id) { (l.name) ": a ladder of " (count(n.into(), "tier", "tiers")) }
                desc #(desc_id) { (description(&tiers, defaulting)) }
                g.rails {
                    line x1=(RAIL_LEFT) y1=(TOP) x2=(RAIL_LEFT) y2=(rails_bottom) stroke="currentColor" stroke-width="3" {}
                    line x1=(RAIL_RIGHT) y1=(TOP) x2=(RAIL_RIGHT) y2=(rails_bottom) stroke="currentColor" stroke-width="3" {}
                }
                @if tiers.is_empty() {
                    text.rung-count x=(LABEL_X) y=((TOP + rails_bottom) / 2 + 5) { "no tiers yet" }
                }
                @for (i, t) in tiers.iter().enumerate() {
                    @let y = floor_y - i as i32 * RUNG_GAP;
                    g.rung.rung-floor[t.rank == 0] {
                        title { (t.product_name) " (rank " (t.rank) "): " (t.organizations.words("organization", "organizations")) }
                        line x1=(RAIL_LEFT) y1=(y) x2=(RAIL_RIGHT) y2=(y) stroke="currentColor" stroke-width="4" {}
                        text.rung-name x=(LABEL_X) y=(y - 3) { (cut(&t.product_name, RUNG_NAME_CHARS)) }
                        text.rung-count x=(LABEL_X) y=(y + 14) {
                            @if t.rank == 0 { "floor · " } @else { "rank " (t.rank) " · " }
                            (t.organizations.words("organization", "organizations"))
                        }
                    }
                }
                @for (k, ty) in defaulting.iter().enumerate() {
                    @let y = floor_y + k as i32 * TYPE_GAP;
                    g.default-type {
                        title { (ty.name) " defaults to " (l.name) }
                        text.type-name x=(TYPE_X) y=(y - 3) text-anchor="end" { (cut(&ty.name, TYPE_NAME_CHARS)) }
                        text.type-count x=(TYPE_X) y=(y + 13) text-anchor="end" {
                            (count(ty.organizations, "organization", "organizations"))
                        }
                        (arrow((TYPE_X + 6, y), target))
                    }
                }
            }
            (text_fallback(l, &tiers, defaulting))
        }
    }
}

/// One sentence for the SVG's `desc`: the rungs from the floor up, then who defaults here.
fn description(tiers: &[&TierRow], defaulting: &[&OrgTypeRow]) -> String {
    let mut s = if tiers.is_empty() {
        "No tiers yet.".to_string()
    } else {
        let rungs: Vec<String> = tiers
            .iter()
            .map(|t| format!("{} ({})", t.product_name, t.organizations.words("organization", "organizations")))
            .collect();
        format!("Rungs from the floor up: {}.", rungs.join(", "))
    };
    if !defaulting.is_empty() {
        let names: Vec<&str> = defaulting.iter().map(|t| t.name.as_str()).collect();
        s.push_str(&format!(" Defaulting here, pointing at the floor: {}.", names.join(", ")));
    }
    s
}

/// The same facts as a list, for screen readers and for whoever reads the page as text.
fn text_fallback(l: &LadderView, tiers: &[&TierRow], defaulting: &[&OrgTypeRow]) -> Markup {
    let floor = tiers.iter().find(|t| t.rank == 0).map(|t| t.product_name.as_str());
    html! {
        div.visually-hidden.ladder-picture-text {
            p { (l.name) ", from the floor up:" }
            @if tiers.is_empty() {
                p { "No tiers yet." }
            } @else {
                ol {
                    @for t in tiers {
                        li.rung-text {
                            "Rank " (t.rank) @if t.rank == 0 { ", the floor" } ": " (t.product_name) ", "
                            (t.organizations.words("organization", "organizations"))
                        }
                    }
                }
            }
            @if !defaulting.is_empty() {
                ul {
                    @for ty in defaulting {
                        li.default-text {
                            (ty.name) " (" (count(ty.organizations, "organization", "organizations")) ") defaults to "
                            "this ladder: "
                            @match floor {
                                Some(f) => { "its organizations hold the floor, " (f) ", when nothing else holds it." },
                                None => "the ladder has no floor, so they hold nothing here by default.",
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A line from `from` to `to` with a head at `to`; the head is a polygon, not a marker, so no
/// id has to be unique across the page.
fn arrow(from: (i32, i32), to: (i32, i32)) -> Markup {
    let (dx, dy) = (f64::from(to.0 - from.0), f64::from(to.1 - from.1));
    let len = dx.hypot(dy).max(1.0);
    let (ux, uy) = (dx / len, dy / len);
    let (bx, by) = (f64::from(to.0) - 9.0 * ux, f64::from(to.1) - 9.0 * uy);
    let (px, py) = (-uy * 4.5, ux * 4.5);
    let head = format!("{},{} {:.1},{:.1} {:.1},{:.1}", to.0, to.1, bx + px, by + py, bx - px, by - py);
    html! {
        line x1=(from.0) y1=(from.1) x2=(format!("{bx:.1}")) y2=(format!("{by:.1}")) stroke="currentColor" stroke-width="1.5" {}
        polygon points=(head) fill="currentColor" {}
    }
}

/// `s`, cut to `max` characters with "…" when longer.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(rank: i32, name: &str, organizations: Total) -> TierRow {
        TierRow {
            rank,
            product_id: 10 + i64::from(rank),
            product_name: name.into(),
            set_name: String::new(),
            organizations,
        }
    }

    fn ladder() -> LadderView {
        LadderView {
            id: 7,
            name: "Wiki <hosting>".into(),
            sort_order: 1,
            // Given out of order: the picture orders them by rank.
            tiers: vec![
                tier(2, "Pro", Total::Exactly(1)),
                tier(0, "<b>&", Total::AtLeast(1000)),
                tier(1, "Basic", Total::Exactly(0)),
            ],
        }
    }

    fn org_type(name: &str, organizations: i64) -> OrgTypeRow {
        OrgTypeRow {
            id: 1,
            name: name.into(),
            default_ladder_id: Some(7),
            default_ladder: Some("Wiki <hosting>".into()),
            floor_product: Some("<b>&".into()),
            organizations,
        }
    }

    #[test]
    fn rungs_go_from_the_floor_at_the_bottom_up_by_rank_with_names_and_counts() {
        let out = ladder_picture(&ladder(), &[]).into_string();
        // Drawn: the floor lowest (largest y), the top rank highest.
        let y_of = |name: &str| -> i32 {
            let at = out.find(&format!(">{name}</text>")).unwrap_or_else(|| panic!("{name} in {out}"));
            let before = &out[..at];
            let y = &before[before.rfind(" y=\"").unwrap() + 4..];
            y[..y.find('"').unwrap()].parse().unwrap()
        };
        let (floor, basic, pro) = (y_of("&lt;b&gt;&amp;"), y_of("Basic"), y_of("Pro"));
        assert!(floor > basic && basic > pro, "{floor} {basic} {pro}");
        assert!(out.contains(">floor · more than 1,000 organizations</text>"), "{out}");
        assert!(out.contains(">rank 1 · 0 organizations</text>"));
        assert!(out.contains(">rank 2 · 1 organization</text>"));
        // Read as text, from the floor up.
        let rungs: Vec<&str> =
            out.split(r#"<li class="rung-text">"#).skip(1).map(|s| &s[..s.find("</li>").unwrap()]).collect();
        assert_eq!(
            rungs,
            [
                "Rank 0, the floor: &lt;b&gt;&amp;, more than 1,000 organizations",
                "Rank 1: Basic, 0 organizations",
                "Rank 2: Pro, 1 organization"
            ]
        );
    }

    #[test]
    fn the_picture_is_an_image_with_a_title_and_a_description() {
        let out = ladder_picture(&ladder(), &[]).into_string();
        assert!(out.starts_with(r#"<figure class="ladder-picture" id="ladder-7-picture"><figcaption>Wiki &lt;hosting&gt;</figcaption><svg xmlns="http://www.w3.org/2000/svg" role="img""#), "{out}");
        assert!(out.contains(r#"aria-labelledby="ladder-7-picture-title ladder-7-picture-desc""#));
        assert!(
            out.contains(r#"<title id="ladder-7-picture-title">Wiki &lt;hosting&gt;: a ladder of 3 tiers</title>"#)
        );
        assert!(out.contains(
            r#"<desc id="ladder-7-picture-desc">Rungs from the floor up: &lt;b&gt;&amp; (more than 1,000 organizations), Basic (0 organizations), Pro (1 organization).</desc>"#
        ));
        assert!(out.contains(r#"<div class="visually-hidden ladder-picture-text">"#));
        // SVG elements are closed explicitly: an HTML parser nests what follows an unclosed one.
        assert_eq!(out.matches("<line ").count(), out.matches("</line>").count());
    }

    #[test]
    fn names_are_escaped_everywhere_and_nothing_is_markup() {
        let mut l = ladder();
        l.tiers[1].product_name = "<b>&".into();
        let evil = org_type("<script>x</script>", 2);
        let out = ladder_picture(&l, &[&evil]).into_string();
        assert!(!out.contains("<b>") && !out.contains("<script>") && !out.contains("<hosting>"), "{out}");
        assert!(out.contains("&lt;b&gt;&amp;"));
        assert!(out.contains("&lt;script&gt;x&lt;/script&gt;"));
    }

    #[test]
    fn org_types_that_default_here_point_at_the_floor() {
        let (community, schools) = (org_type("Community", 3), org_type("Schools", 1));
        let out = ladder_picture(&ladder(), &[&community, &schools]).into_string();
        assert_eq!(out.matches(r#"<g class="default-type">"#).count(), 2);
        assert!(out.contains(r#"text-anchor="end">Community</text>"#));
        assert!(out.contains(r#"text-anchor="end">3 organizations</text>"#));
        assert!(out.contains(r#"text-anchor="end">1 organization</text>"#));
        // Every arrow's head is at the floor rung's left end.
        let floor_line = out.find(r#"<g class="rung rung-floor">"#).unwrap();
        let y = &out[floor_line..];
        let y = &y[y.find(" y1=\"").unwrap() + 5..];
        let floor_y: i32 = y[..y.find('"').unwrap()].parse().unwrap();
        let tip = format!(r#"<polygon points="{},{floor_y} "#, RAIL_LEFT - 4);
        assert_eq!(out.matches(&tip).count(), 2, "{tip} in {out}");
        let said: Vec<&str> =
            out.split(r#"<li class="default-text">"#).skip(1).map(|s| &s[..s.find("</li>").unwrap()]).collect();
        assert_eq!(
            said,
            [
                "Community (3 organizations) defaults to this ladder: its organizations hold the floor, &lt;b&gt;&amp;, when nothing else holds it.",
                "Schools (1 organization) defaults to this ladder: its organizations hold the floor, &lt;b&gt;&amp;, when nothing else holds it."
            ]
        );
        assert!(out.contains(" Defaulting here, pointing at the floor: Community, Schools.</desc>"));
    }

    #[test]
    fn an_empty_ladder_says_it_has_no_tiers_and_its_types_point_at_its_foot() {
        let l = LadderView { id: 2, name: "Support".into(), sort_order: 2, tiers: vec![] };
        let t = org_type("Business", 1);
        let out = ladder_picture(&l, &[&t]).into_string();
        assert!(out.contains(">no tiers yet</text>"));
        assert!(out.contains("<p>No tiers yet.</p>"));
        assert!(out.contains("the ladder has no floor, so they hold nothing here by default."));
        assert!(!out.contains(r#"<g class="rung"#));
        assert!(out.contains(&format!(r#"<polygon points="{},{} "#, RAIL_LEFT - 4, TOP + 2 * RAIL_OVERHANG)));
    }

    #[test]
    fn long_names_are_cut_in_the_drawing_but_kept_whole_in_the_text() {
        assert_eq!(cut("Community support", 28), "Community support");
        assert_eq!(cut("abcdef", 4), "abc…");
        let mut l = ladder();
        l.tiers[0].product_name = "A very long product name that goes on".into();
        let out = ladder_picture(&l, &[]).into_string();
        assert!(out.contains(">A very long product name th…</text>"));
        assert!(out.contains("Rank 2: A very long product name that goes on, 1 organization"));
    }

    #[test]
    fn the_page_draws_every_ladder_in_order_with_only_its_own_types() {
        let wiki = ladder();
        let support = LadderView { id: 2, name: "Support".into(), sort_order: 2, tiers: vec![] };
        let mut business = org_type("Business", 1);
        business.default_ladder_id = Some(2);
        let none = OrgTypeRow { default_ladder_id: None, ..org_type("Internal", 0) };
        let out = topology_picture(&[&wiki, &support], &[org_type("Community", 3), business, none]).into_string();
        let (w, s) = (out.find(r#"id="ladder-7-picture""#).unwrap(), out.find(r#"id="ladder-2-picture""#).unwrap());
        assert!(w < s);
        assert!(out[w..s].contains(">Community</text>") && !out[w..s].contains("Business"));
        assert!(out[s..].contains(">Business</text>") && !out[s..].contains("Community"));
        assert!(!out.contains("Internal"));
    }
}
