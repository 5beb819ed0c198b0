//! The member's home: each of their organizations' plan per ladder, entitlements and usage.

use actix_web::HttpResponse;

use crate::{
    services,
    states::GrantKind,
    store::{
        accounts::{DisplacedSubscription, SessionAccount},
        catalog::{HeldConferral, KeyLabel, Usage},
        entitlements::EntitlementValue,
    },
    web::{
        AppState,
        call::{MemberPage, PageRead},
        errors::AppError,
        render,
    },
};

/// The home's read: the member's organizations and what each holds, with the session.
pub struct HomeRead(Vec<crate::store::accounts::MemberHome>);

impl PageRead for HomeRead {
    async fn resume(state: &AppState, token: &str) -> Result<Option<(SessionAccount, Self)>, AppError> {
        Ok(services::auth::resume_session_with_home(&state.db, token).await?.map(|(a, home)| (a, HomeRead(home))))
    }
}

#[tracing::instrument(name = "Page: home", skip_all)]
pub async fn home(
    MemberPage { who, req, doc: HomeRead(organizations), .. }: MemberPage<HomeRead>,
) -> Result<HttpResponse, AppError> {
    let view = views::HomeView {
        email: who.email,
        csrf: crate::web::identity::csrf_token(&req),
        organizations: organizations.into_iter().map(org_home).collect(),
    };
    Ok(render::ok(&req, "Home", views::member_home(&view)))
}

/// An organization's plan as its members read it: each ladder its held conferrals sit on, the
/// tier and where it comes from (the home and the billing page show the same lines).
pub(crate) fn plan_lines(held: &[HeldConferral]) -> Vec<views::PlanLine> {
    held.iter()
        .filter_map(|c| {
            Some(views::PlanLine {
                ladder: c.ladder.clone()?,
                tier: c.product.clone(),
                rank: c.rank.unwrap_or_default(),
                source: member_source(c).into(),
                suspended: c.suspended,
            })
        })
        .collect()
}

fn org_home(o: crate::store::accounts::MemberHome) -> views::OrgHome {
    views::OrgHome {
        organization_id: o.membership.organization_id.0,
        name: o.membership.name,
        role: o.membership.role,
        plan: plan_lines(&o.held),
        entitlements: entitlement_rows(&o.entitlements, &o.labels),
        usage: usage_rows(&o.usage, &o.labels),
        displaced: displaced_lines(&o.displaced),
    }
}

/// Each displaced subscription in a member's words (the home and the billing page say the same).
pub(crate) fn displaced_lines(displaced: &[DisplacedSubscription]) -> Vec<views::DisplacedLine> {
    displaced
        .iter()
        .map(|d| {
            let until = d.until.map(|t| format!(" until {}", t.format("%-d %b %Y"))).unwrap_or_default();
            let who = if d.granted { "An operator grant" } else { "Another subscription" };
            views::DisplacedLine {
                subscription_id: d.subscription_id.0,
                words: format!(
                    "{who} gives you {}{until} in place of your {} subscription, which is paused and not charged \
                     meanwhile.",
                    d.by, d.product
                ),
            }
        })
        .collect()
}

fn member_source(c: &HeldConferral) -> &'static str {
    match c.grant_kind {
        Some(GrantKind::Floor) => "included with your organization type",
        Some(_) => "granted by an operator",
        None => "your subscription",
    }
}

/// A key's name and unit from `labels`. Every key has a row there (read in the same statement);
/// were one missing, the name the catalog would give it by default, never the key itself.
fn label_of(key: &str, labels: &[KeyLabel]) -> (String, Option<String>) {
    match labels.iter().find(|l| l.resource_key == key) {
        Some(l) => (l.name.clone(), l.unit.clone()),
        None => (default_key_name(key), None),
    }
}

/// `core.default_resource_key_name`: the key's last word, `_` as a space, first letter upper-cased.
fn default_key_name(key: &str) -> String {
    let word = key.rsplit('.').next().unwrap_or(key).replace('_', " ");
    let mut c = word.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// Entitlements by their names, with their values (worded by the view: a number with its unit,
/// or included / not included).
pub fn entitlement_rows(values: &[EntitlementValue], labels: &[KeyLabel]) -> Vec<views::EntitlementRow> {
    values
        .iter()
        .map(|e| {
            let (name, unit) = label_of(&e.resource_key, labels);
            views::EntitlementRow {
                key: e.resource_key.clone(),
                name,
                unit,
                value: match (e.numeric_value, e.flag_value) {
                    (Some(n), _) => views::Amount::Number(n),
                    (_, f) => views::Amount::Flag(f == Some(true)),
                },
            }
        })
        .collect()
}

pub fn usage_rows(usage: &[Usage], labels: &[KeyLabel]) -> Vec<views::UsageRow> {
    usage
        .iter()
        .map(|u| {
            let (name, unit) = label_of(u.resource_key.as_str(), labels);
            views::UsageRow { key: u.resource_key.to_string(), name, unit, used: u.used, limit: u.limit_value }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_without_a_name_reads_as_the_catalogs_default_never_as_the_key() {
        assert_eq!(super::default_key_name("fedwiki.active_sites"), "Active sites");
        assert_eq!(super::default_key_name("support.priority"), "Priority");
        let (name, unit) = super::label_of("a.storage_gb", &[]);
        assert_eq!((name.as_str(), unit), ("Storage gb", None));
    }
}
