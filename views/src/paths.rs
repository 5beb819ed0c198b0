//! Every path the console answers, each defined once: the route table registers these patterns
//! and the pages build their links and form actions from them with [`fill`], so a link always
//! names a route that exists (a test in the web layer checks every pattern here is routed).
//! A `{…}` is a segment the route reads.

use std::fmt::Display;

pub const HEALTHZ: &str = "/healthz";
pub const READYZ: &str = "/readyz";
pub const METRICS: &str = "/metrics";
/// A static file: under the address pages name, its content's hash in the name
/// (`console.<hash>.css`), or under its plain name (`console.css`).
pub const STATIC_FILE: &str = "/static/{name}";

pub const HOME: &str = "/";
pub const LOGIN: &str = "/login";
pub const LOGOUT: &str = "/logout";

pub const WEBHOOKS_STRIPE: &str = "/webhooks/stripe";

pub const OPERATOR: &str = "/operator";

pub const CATALOG: &str = "/operator/catalog";
pub const CATALOG_KEYS: &str = "/operator/catalog/keys";
/// A resource key's name and unit (issue 39).
pub const CATALOG_KEY: &str = "/operator/catalog/keys/{key}";
pub const CATALOG_SETS: &str = "/operator/catalog/sets";
pub const CATALOG_SET: &str = "/operator/catalog/sets/{id}";
pub const CATALOG_SET_RULES: &str = "/operator/catalog/sets/{id}/rules";
pub const CATALOG_PRODUCTS: &str = "/operator/catalog/products";
pub const CATALOG_PRODUCT: &str = "/operator/catalog/products/{id}";
pub const CATALOG_PRODUCT_SEATS: &str = "/operator/catalog/products/{id}/seats";

pub const TOPOLOGY: &str = "/operator/topology";
pub const LADDER_ORDER: &str = "/operator/topology/ladder-order";
pub const TIERS: &str = "/operator/topology/ladders/{id}/tiers";
pub const TIERS_PREVIEW: &str = "/operator/topology/ladders/{id}/tiers/preview";
pub const TIER_DELETE: &str = "/operator/topology/ladders/{id}/tiers/{rank}/delete";
pub const TIER_REMOVE: &str = "/operator/topology/ladders/{id}/tiers/{rank}/remove";
pub const TIER_REMOVE_PREVIEW: &str = "/operator/topology/ladders/{id}/tiers/{rank}/remove/preview";
pub const TIER_ORDER: &str = "/operator/topology/ladders/{id}/tier-order";
pub const TIER_ORDER_PREVIEW: &str = "/operator/topology/ladders/{id}/tier-order/preview";
pub const ORG_TYPE_DEFAULT: &str = "/operator/topology/org-types/{id}/default";
pub const ORG_TYPE_DEFAULT_PREVIEW: &str = "/operator/topology/org-types/{id}/default/preview";

pub const PLAN_ACTS: &str = "/operator/plan-acts";
pub const PLAN_ACT: &str = "/operator/plan-acts/{id}";
pub const PLAN_ACT_PROGRESS: &str = "/operator/plan-acts/{id}/progress";
pub const PLAN_ACT_RETRY: &str = "/operator/plan-acts/{id}/retry";

pub const ORGANIZATIONS: &str = "/operator/organizations";
pub const ORGANIZATION: &str = "/operator/organizations/{id}";

pub const RULE_CHANGES: &str = "/operator/rule-changes";
pub const RULE_CHANGE: &str = "/operator/rule-changes/{id}";
pub const RULE_CHANGE_PROGRESS: &str = "/operator/rule-changes/{id}/progress";
pub const RULE_CHANGE_RETRY: &str = "/operator/rule-changes/{id}/retry";

pub const GRANTS: &str = "/operator/grants";
pub const GRANTS_NEW: &str = "/operator/grants/new";
pub const GRANT: &str = "/operator/grants/{id}";
pub const GRANT_REVOKE: &str = "/operator/grants/{id}/revoke";
pub const GRANT_MANAGE: &str = "/operator/grants/{id}/manage";

pub const SITES: &str = "/sites";
pub const SITES_LIVE: &str = "/sites/live";
pub const SITES_SWAP: &str = "/sites/swap";
pub const SITE_STATUS: &str = "/sites/{id}/status";
pub const SITE_DELETE: &str = "/sites/{id}/delete";
pub const SITE_KEEP_ACTIVE: &str = "/sites/{id}/keep-active";
/// Withdraws a site request whose job has not started.
pub const SITE_REQUEST_WITHDRAW: &str = "/sites/requests/{id}/withdraw";
/// Hands the member to the site's wiki to edit it (a redirect with the farm's entry credential).
pub const SITE_OPEN: &str = "/sites/{id}/open";
pub const SITES_DOMAINS: &str = "/sites/domains";
pub const SITES_DOMAINS_REMOVE: &str = "/sites/domains/remove";
/// Looks a domain's TXT record up now (issue 40) instead of waiting for the schedule.
pub const SITES_DOMAINS_CHECK: &str = "/sites/domains/check";
/// Dismisses one of an organization's domain notices (a claim released, lapsing or restored).
pub const SITES_DOMAINS_NOTICE_DISMISS: &str = "/sites/domains/notices/dismiss";
pub const FARM_CALLBACKS: &str = "/farm/callbacks";
/// The farm asks whether a member's edit session still stands.
pub const FARM_EDIT_SESSIONS_CONFIRM: &str = "/farm/edit-sessions/confirm";

pub const BILLING: &str = "/billing";
pub const BILLING_CHECKOUT: &str = "/billing/checkout";
pub const BILLING_RETURN: &str = "/billing/return";
pub const BILLING_SWITCH: &str = "/billing/switch";
pub const BILLING_SWITCH_UNDO: &str = "/billing/switch/undo";
pub const BILLING_CANCEL: &str = "/billing/cancel";
pub const BILLING_RESUME: &str = "/billing/resume";
pub const OPERATOR_BILLING: &str = "/operator/billing";
pub const OPERATOR_FARM: &str = "/operator/farm";
pub const OPERATOR_FARM_RUN: &str = "/operator/farm/run";
pub const CATALOG_PRODUCT_PRICES: &str = "/operator/catalog/products/{id}/prices";
pub const CATALOG_PRODUCT_SYNC: &str = "/operator/catalog/products/{id}/sync";
pub const CATALOG_PRICE_ARCHIVE: &str = "/operator/catalog/prices/{id}/archive";

pub const CONNECTIONS: &str = "/operator/connections";
pub const CONNECTION: &str = "/operator/connections/{id}";
pub const CONNECTION_ROTATE: &str = "/operator/connections/{id}/rotate";
pub const CONNECTION_RETRY: &str = "/operator/connections/{id}/retry";
pub const CONNECTION_TEST: &str = "/operator/connections/{id}/test";
pub const CONNECTION_CHECK: &str = "/operator/connections/{id}/check";
pub const CONNECTION_DELETE: &str = "/operator/connections/{id}/delete";

// Issue 38, sign-up, verification and password reset.
pub const SIGNUP: &str = "/signup";
/// A verification (or email change) link: GET shows it, POST uses it.
pub const ACCOUNT_VERIFY: &str = "/account/verify";
pub const ACCOUNT_VERIFY_RESEND: &str = "/account/verify/resend";
pub const PASSWORD_FORGOT: &str = "/password/forgot";
/// A reset link: GET shows the new-password form, POST sets it.
pub const PASSWORD_RESET: &str = "/password/reset";
/// An operator marks an org type as the one sign-up gives.
pub const ORG_TYPE_SIGNUP: &str = "/operator/topology/org-types/{id}/signup";
// Issue 38, the account page and the operators' accounts.
pub const ACCOUNT: &str = "/account";
pub const ACCOUNT_PASSWORD: &str = "/account/password";
pub const ACCOUNT_EMAIL: &str = "/account/email";
pub const ACCOUNT_SESSION_END: &str = "/account/sessions/end";
pub const ACCOUNT_SIGN_OUT_EVERYWHERE: &str = "/account/sessions/end-all";
pub const ACCOUNT_DELETE: &str = "/account/delete";
pub const OPERATOR_ACCOUNTS: &str = "/operator/accounts";
pub const OPERATOR_ACCOUNT: &str = "/operator/accounts/{id}";
pub const OPERATOR_ACCOUNT_DISABLE: &str = "/operator/accounts/{id}/disable";
pub const OPERATOR_ACCOUNT_ENABLE: &str = "/operator/accounts/{id}/enable";
pub const OPERATOR_ACCOUNT_GRANT_OPERATOR: &str = "/operator/accounts/{id}/operator/grant";
pub const OPERATOR_ACCOUNT_REVOKE_OPERATOR: &str = "/operator/accounts/{id}/operator/revoke";
// Issue 38, members: an organization's members page and acts, its invitations, and the link.
pub const ORGANIZATION_MEMBERS: &str = "/organizations/{id}/members";
pub const ORGANIZATION_MEMBER_ROLE: &str = "/organizations/{id}/members/{account}/role";
pub const ORGANIZATION_MEMBER_REMOVE: &str = "/organizations/{id}/members/{account}/remove";
pub const ORGANIZATION_LEAVE: &str = "/organizations/{id}/leave";
pub const ORGANIZATION_INVITATIONS: &str = "/organizations/{id}/invitations";
pub const ORGANIZATION_INVITATION_RESEND: &str = "/organizations/{id}/invitations/{invitation}/resend";
pub const ORGANIZATION_INVITATION_REVOKE: &str = "/organizations/{id}/invitations/{invitation}/revoke";
/// An invitation's secret link: GET shows it, POST accepts it.
pub const INVITATION_ACCEPT: &str = "/invitations/accept";
/// An operator invites a person to any organization.
pub const OPERATOR_ORGANIZATION_INVITATIONS: &str = "/operator/organizations/{id}/invitations";

/// Every pattern above, for the test that checks each is routed.
pub const ALL: &[&str] = &[
    // Issue 38, the account page and the operators' accounts.
    ACCOUNT,
    ACCOUNT_PASSWORD,
    ACCOUNT_EMAIL,
    ACCOUNT_SESSION_END,
    ACCOUNT_SIGN_OUT_EVERYWHERE,
    ACCOUNT_DELETE,
    OPERATOR_ACCOUNTS,
    OPERATOR_ACCOUNT,
    OPERATOR_ACCOUNT_DISABLE,
    OPERATOR_ACCOUNT_ENABLE,
    OPERATOR_ACCOUNT_GRANT_OPERATOR,
    OPERATOR_ACCOUNT_REVOKE_OPERATOR,
    HEALTHZ,
    READYZ,
    METRICS,
    STATIC_FILE,
    HOME,
    LOGIN,
    LOGOUT,
    WEBHOOKS_STRIPE,
    OPERATOR,
    CATALOG,
    CATALOG_KEYS,
    CATALOG_KEY,
    CATALOG_SETS,
    CATALOG_SET,
    CATALOG_SET_RULES,
    CATALOG_PRODUCTS,
    CATALOG_PRODUCT,
    CATALOG_PRODUCT_SEATS,
    TOPOLOGY,
    LADDER_ORDER,
    TIERS,
    TIERS_PREVIEW,
    TIER_DELETE,
    TIER_REMOVE,
    TIER_REMOVE_PREVIEW,
    TIER_ORDER,
    TIER_ORDER_PREVIEW,
    ORG_TYPE_DEFAULT,
    ORG_TYPE_DEFAULT_PREVIEW,
    PLAN_ACTS,
    PLAN_ACT,
    PLAN_ACT_PROGRESS,
    PLAN_ACT_RETRY,
    ORGANIZATIONS,
    ORGANIZATION,
    RULE_CHANGES,
    RULE_CHANGE,
    RULE_CHANGE_PROGRESS,
    RULE_CHANGE_RETRY,
    GRANTS,
    GRANTS_NEW,
    GRANT,
    GRANT_REVOKE,
    GRANT_MANAGE,
    SITES,
    SITES_LIVE,
    SITES_SWAP,
    SITE_STATUS,
    SITE_DELETE,
    SITE_KEEP_ACTIVE,
    SITE_REQUEST_WITHDRAW,
    SITE_OPEN,
    SITES_DOMAINS,
    SITES_DOMAINS_REMOVE,
    SITES_DOMAINS_CHECK,
    SITES_DOMAINS_NOTICE_DISMISS,
    FARM_CALLBACKS,
    FARM_EDIT_SESSIONS_CONFIRM,
    BILLING,
    BILLING_CHECKOUT,
    BILLING_RETURN,
    BILLING_SWITCH,
    BILLING_SWITCH_UNDO,
    BILLING_CANCEL,
    BILLING_RESUME,
    OPERATOR_BILLING,
    OPERATOR_FARM,
    OPERATOR_FARM_RUN,
    CATALOG_PRODUCT_PRICES,
    CATALOG_PRODUCT_SYNC,
    CATALOG_PRICE_ARCHIVE,
    CONNECTIONS,
    CONNECTION,
    CONNECTION_ROTATE,
    CONNECTION_RETRY,
    CONNECTION_TEST,
    CONNECTION_CHECK,
    CONNECTION_DELETE,
    // Issue 38, sign-up, verification and password reset.
    SIGNUP,
    ACCOUNT_VERIFY,
    ACCOUNT_VERIFY_RESEND,
    PASSWORD_FORGOT,
    PASSWORD_RESET,
    ORG_TYPE_SIGNUP,
    // Issue 38, members.
    ORGANIZATION_MEMBERS,
    ORGANIZATION_MEMBER_ROLE,
    ORGANIZATION_MEMBER_REMOVE,
    ORGANIZATION_LEAVE,
    ORGANIZATION_INVITATIONS,
    ORGANIZATION_INVITATION_RESEND,
    ORGANIZATION_INVITATION_REVOKE,
    INVITATION_ACCEPT,
    OPERATOR_ORGANIZATION_INVITATIONS,
];

/// The pattern with each `{…}` segment replaced, in order, by the next value. The values are
/// ids and ranks (numbers), so they need no encoding.
///
/// Panics when the values do not match the pattern's segments: a programming error, caught by
/// the first test that renders the link.
pub fn fill(pattern: &str, values: &[&dyn Display]) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut values = values.iter();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').expect("a segment is closed");
        out.push_str(&rest[..open]);
        out.push_str(&values.next().expect("a value for each segment").to_string());
        rest = &rest[close + 1..];
    }
    assert!(values.next().is_none(), "more values than segments in {pattern}");
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_puts_each_value_in_its_segment() {
        assert_eq!(fill(GRANT, &[&7]), "/operator/grants/7");
        assert_eq!(fill(TIER_REMOVE_PREVIEW, &[&3, &0]), "/operator/topology/ladders/3/tiers/0/remove/preview");
        assert_eq!(fill(GRANTS, &[]), "/operator/grants");
    }

    #[test]
    #[should_panic(expected = "a value for each segment")]
    fn fill_refuses_too_few_values() {
        fill(TIER_DELETE, &[&1]);
    }

    #[test]
    #[should_panic(expected = "more values than segments")]
    fn fill_refuses_too_many_values() {
        fill(GRANT, &[&1, &2]);
    }

    #[test]
    fn every_pattern_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for p in ALL {
            assert!(seen.insert(p), "{p} twice");
        }
    }
}
