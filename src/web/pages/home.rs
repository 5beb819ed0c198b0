//! The member's home: each of their organizations' plan per ladder, entitlements and usage.

use actix_web::HttpResponse;

use crate::{
    services,
    states::GrantKind,
    store::{
        accounts::{DisplacedSubscription, SessionAccount},
        catalog::{HeldConferral, Usage},
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
        entitlements: entitlement_rows(&o.entitlements),
        usage: usage_rows(&o.usage),
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

/// Entitlements in a person's words: a number, or included / not included.
pub fn entitlement_rows(values: &[EntitlementValue]) -> Vec<views::EntitlementRow> {
    values
        .iter()
        .map(|e| views::EntitlementRow {
            key: e.resource_key.clone(),
            value: match (e.numeric_value, e.flag_value) {
                (Some(n), _) => n.to_string(),
                (_, Some(true)) => "included".into(),
                _ => "not included".into(),
            },
        })
        .collect()
}

pub fn usage_rows(usage: &[Usage]) -> Vec<views::UsageRow> {
    usage
        .iter()
        .map(|u| views::UsageRow { key: u.resource_key.to_string(), used: u.used, limit: u.limit_value })
        .collect()
}
