//! A member's home page: per organization, its plan, entitlements and usage.

use maud::{Markup, html};

use crate::components::{Tone, badge, card, facts, info_note};
use crate::forms::subscription_form;
use crate::pages::organizations::{EntitlementRow, UsageRow, usage_badge};
use crate::text::{entitlement_value, usage_value};

/// One ladder of an organization's plan, as the member reads it.
pub struct PlanLine {
    pub ladder: String,
    pub tier: String,
    pub rank: i32,
    /// Already worded: "included with your organization type", "granted by an operator",
    /// "your subscription".
    pub source: String,
    pub suspended: bool,
}

/// One organization the member belongs to, with what it has.
pub struct OrgHome {
    pub organization_id: i64,
    pub name: String,
    pub role: String,
    pub plan: Vec<PlanLine>,
    pub entitlements: Vec<EntitlementRow>,
    pub usage: Vec<UsageRow>,
    /// Its subscriptions another plan displaced, which an owner may resume.
    pub displaced: Vec<DisplacedLine>,
}

/// A paid subscription another plan displaced, worded ("An operator grant gives you Pro until
/// 1 Mar 2027; your Basic subscription is paused and not charged.").
pub struct DisplacedLine {
    pub subscription_id: i64,
    pub words: String,
}

pub struct HomeView {
    pub email: String,
    pub csrf: String,
    pub organizations: Vec<OrgHome>,
}

/// Greets the member, then a card per organization; or says how to get one.
pub fn member_home(v: &HomeView) -> Markup {
    html! {
        p.lead { "Welcome, " (v.email) "." }
        @if v.organizations.is_empty() {
            (card("orgs-heading", "Your organizations", no_organization()))
        } @else {
            @for org in &v.organizations {
                (org_card(v, org))
            }
        }
    }
}

fn no_organization() -> Markup {
    html! {
        p { "You are not a member of any organization yet." }
        p.muted {
            "An operator must add you to an organization before you can see its plan, "
            "entitlements and sites. Ask the person who invited you, or your operator, to add you."
        }
    }
}

fn org_card(v: &HomeView, o: &OrgHome) -> Markup {
    let heading_id = format!("org-{}-heading", o.organization_id);
    html! {
        section.card.org-home aria-labelledby=(heading_id) {
            h2 id=(heading_id) { (o.name) }
            p.muted {
                "Your role: " (o.role) " · "
                @if o.role == "owner" {
                    a href=(crate::paths::fill(crate::paths::ORGANIZATION_MEMBERS, &[&o.organization_id])) { "Members and invitations" }
                } @else {
                    a href=(crate::paths::fill(crate::paths::ORGANIZATION_MEMBERS, &[&o.organization_id])) { "Leave" }
                }
            }
            (displaced_notes(&v.csrf, o.organization_id, o.role == "owner", &o.displaced))
            (plan_section(&o.plan))
            (facts_section("What your plan includes", "Nothing yet.", &entitlement_facts(&o.entitlements)))
            (facts_section("Usage", "Nothing counted yet.", &usage_facts(&o.usage)))
        }
    }
}

/// Why a paid subscription confers nothing now, and (for an owner) Resume plan, which brings its
/// tier back over what displaced it. The billing page shows the same.
pub fn displaced_notes(csrf: &str, organization_id: i64, owner: bool, lines: &[DisplacedLine]) -> Markup {
    html! {
        @for d in lines {
            (info_note(html! {
                p { (d.words) }
                @if owner {
                    (subscription_form(csrf, Some("inline"), crate::paths::BILLING_RESUME,
                        organization_id, d.subscription_id, html! {
                        button.btn.btn-secondary.btn-small type="submit" { "Resume plan" }
                    }))
                    " " span.muted { "Resume plan puts your subscription's tier back in place of the grant, and its payments start again." }
                } @else {
                    span.muted { "An owner can resume the plan." }
                }
            }))
        }
    }
}

/// "Plan" and the organization's tier on each ladder, or that it has none. The billing page
/// shows the same.
pub(crate) fn plan_section(plan: &[PlanLine]) -> Markup {
    html! {
        h3 { "Plan" }
        @if plan.is_empty() {
            p.empty { "No plan yet." }
        } @else {
            ul.plan-lines {
                @for line in plan {
                    (plan_line(line))
                }
            }
        }
    }
}

fn plan_line(line: &PlanLine) -> Markup {
    html! {
        li {
            span.plan-ladder { (line.ladder) ": " }
            strong { (line.tier) }
            " "
            span.muted { "— " (line.source) }
            @if line.suspended {
                " " (badge("suspended: payment needed", Tone::Warn))
            }
        }
    }
}

/// `title`, then its facts, or `none` when there are none.
fn facts_section(title: &str, none: &str, items: &[(&str, Markup)]) -> Markup {
    html! {
        h3 { (title) }
        @if items.is_empty() {
            p.empty { (none) }
        } @else {
            (facts(items))
        }
    }
}

/// Each entitlement by the name members read, never its key.
fn entitlement_facts(entitlements: &[EntitlementRow]) -> Vec<(&str, Markup)> {
    entitlements.iter().map(|e| (e.name.as_str(), html! { (entitlement_value(e.value, e.unit.as_deref())) })).collect()
}

fn usage_facts(usage: &[UsageRow]) -> Vec<(&str, Markup)> {
    usage.iter().map(|u| (u.name.as_str(), usage_text(u))).collect()
}

fn usage_text(u: &UsageRow) -> Markup {
    html! {
        (usage_value(u.used, u.limit, u.unit.as_deref()))
        @if let Some(b) = usage_badge(u.used, u.limit) {
            " " (b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::text::Amount;

    fn row(key: &str, name: &str, unit: Option<&str>, value: Amount) -> EntitlementRow {
        EntitlementRow { key: key.into(), name: name.into(), unit: unit.map(Into::into), value }
    }

    fn sites_used(used: i64, limit: i64) -> UsageRow {
        UsageRow { key: "fedwiki.active_sites".into(), name: "Active sites".into(), unit: None, used, limit }
    }

    fn org() -> OrgHome {
        OrgHome {
            organization_id: 1,
            name: "Acme <Wiki>".into(),
            role: "owner".into(),
            plan: vec![
                PlanLine {
                    ladder: "Wiki hosting".into(),
                    tier: "Basic".into(),
                    rank: 1,
                    source: "your subscription".into(),
                    suspended: true,
                },
                PlanLine {
                    ladder: "Support".into(),
                    tier: "Community".into(),
                    rank: 0,
                    source: "included with your organization type".into(),
                    suspended: false,
                },
            ],
            entitlements: vec![
                row("fedwiki.active_sites", "Active sites", None, Amount::Number(3)),
                row("fedwiki.custom_domain", "Custom domain", None, Amount::Flag(true)),
                row("support.priority", "Priority support", None, Amount::Flag(false)),
                row("fedwiki.storage", "Storage", Some("GB"), Amount::Number(5)),
            ],
            usage: vec![sites_used(1, 3)],
            displaced: vec![],
        }
    }

    #[test]
    fn member_home_shows_each_organization_with_plan_entitlements_and_usage() {
        let v = HomeView {
            email: "ann@example.org".into(),
            csrf: "tok".into(),
            organizations: vec![
                org(),
                OrgHome {
                    organization_id: 2,
                    name: "Beta".into(),
                    role: "member".into(),
                    plan: vec![],
                    entitlements: vec![],
                    usage: vec![],
                    displaced: vec![],
                },
            ],
        };
        let out = member_home(&v).into_string();
        assert!(out.contains("Welcome, ann@example.org."));
        assert!(out.contains(r#"<h2 id="org-1-heading">Acme &lt;Wiki&gt;</h2>"#));
        assert!(out.contains("Your role: owner"));
        assert!(out.contains(r#"<span class="plan-ladder">Wiki hosting: </span><strong>Basic</strong>"#));
        assert!(out.contains(r#"<span class="badge badge-warn">suspended: payment needed</span>"#));
        assert_eq!(out.matches("suspended: payment needed").count(), 1);
        assert!(out.contains("— included with your organization type"));
        assert!(out.contains("<dt>Active sites</dt><dd>3</dd>"));
        assert!(out.contains("<dt>Custom domain</dt><dd>included</dd>"));
        assert!(out.contains("<dt>Priority support</dt><dd>not included</dd>"));
        assert!(out.contains("<dt>Storage</dt><dd>5 GB</dd>"));
        assert!(out.contains("<dt>Active sites</dt><dd>1 of 3</dd>"));
        // Members read names, never keys.
        assert!(!out.contains("fedwiki.") && !out.contains("support.priority"));
        assert!(out.contains(r#"<h2 id="org-2-heading">Beta</h2>"#));
        assert!(out.contains("No plan yet."));
        assert!(!out.contains("An operator must add you"));
    }

    #[test]
    fn usage_at_the_limit_is_flagged() {
        let mut o = org();
        o.usage = vec![sites_used(3, 3)];
        let out =
            member_home(&HomeView { email: "a@b".into(), csrf: "tok".into(), organizations: vec![o] }).into_string();
        assert!(out.contains(r#"<dd>3 of 3 <span class="badge badge-warn">at limit</span></dd>"#));
    }

    #[test]
    fn a_displaced_subscription_says_why_and_an_owner_may_resume_it() {
        let mut o = org();
        o.displaced = vec![DisplacedLine {
            subscription_id: 9,
            words: "An operator grant gives you Pro until 1 Mar 2027; your Basic subscription is paused.".into(),
        }];
        let out =
            member_home(&HomeView { email: "a@b".into(), csrf: "tok".into(), organizations: vec![o] }).into_string();
        assert!(out.contains("An operator grant gives you Pro until 1 Mar 2027"));
        assert!(out.contains(r#"action="/billing/resume""#) && out.contains(r#"name="subscription_id" value="9""#));
        let mut o = org();
        o.role = "member".into();
        o.displaced = vec![DisplacedLine { subscription_id: 9, words: "Paused.".into() }];
        let out =
            member_home(&HomeView { email: "a@b".into(), csrf: "tok".into(), organizations: vec![o] }).into_string();
        assert!(!out.contains("/billing/resume") && out.contains("An owner can resume the plan."));
    }

    #[test]
    fn member_home_without_organizations_explains_what_to_do() {
        let v = HomeView { email: "<script>@x".into(), csrf: "tok".into(), organizations: vec![] };
        let out = member_home(&v).into_string();
        assert!(out.contains("You are not a member of any organization yet."));
        assert!(out.contains("An operator must add you to an organization"));
        assert!(out.contains("Welcome, &lt;script&gt;@x."));
        assert!(!out.contains("<script>"));
    }
}
