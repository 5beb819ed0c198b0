//! A member's home page.

use maud::{Markup, html};

use crate::components::table;

/// One organization the member belongs to.
pub struct OrgMembership {
    pub organization_id: i64,
    pub name: String,
    pub role: String,
}

pub struct HomeView {
    pub email: String,
    pub organizations: Vec<OrgMembership>,
}

/// Greets the member and lists their organizations, or says how to get one.
pub fn member_home(v: &HomeView) -> Markup {
    html! {
        p.lead { "Welcome, " (v.email) "." }
        section.card aria-labelledby="orgs-heading" {
            h2 #orgs-heading { "Your organizations" }
            @if v.organizations.is_empty() {
                (no_organization())
            } @else {
                (organizations_table(&v.organizations))
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

fn organizations_table(orgs: &[OrgMembership]) -> Markup {
    let rows = orgs.iter().map(|o| vec![html! { (o.name) }, html! { (o.role) }]).collect();
    table(&["Organization", "Your role"], rows, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_home_lists_organizations_with_roles() {
        let v = HomeView {
            email: "ann@example.org".into(),
            organizations: vec![
                OrgMembership { organization_id: 1, name: "Acme <Wiki>".into(), role: "owner".into() },
                OrgMembership { organization_id: 2, name: "Beta".into(), role: "member".into() },
            ],
        };
        let out = member_home(&v).into_string();
        assert!(out.contains("Welcome, ann@example.org."));
        assert!(out.contains("<tr><td>Acme &lt;Wiki&gt;</td><td>owner</td></tr>"));
        assert!(out.contains("<tr><td>Beta</td><td>member</td></tr>"));
        assert!(!out.contains("An operator must add you"));
    }

    #[test]
    fn member_home_without_organizations_explains_what_to_do() {
        let v = HomeView { email: "<b>@x".into(), organizations: vec![] };
        let out = member_home(&v).into_string();
        assert!(out.contains("You are not a member of any organization yet."));
        assert!(out.contains("An operator must add you to an organization"));
        assert!(out.contains("Welcome, &lt;b&gt;@x."));
        assert!(!out.contains("<table"));
    }
}
