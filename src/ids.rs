//! The rows' ids, one type per table, so a pool's id cannot be passed where a grant's is meant.
//! Each is the table's `bigint` key as it is (sqlx and serde see the number), printed (Display
//! and Debug, so the logs' fields read as before) as the number. Nothing here imports from the console: every layer may use it.
//!
//! A tier has no id of its own: it is a ladder's rank (`LadderId` and the rank).
//!
//! Beside them, the text keys: names of things the console does not number itself (a site, its
//! domain, a workspace, a resource key, the objects Stripe keeps), one type each, so a domain
//! cannot be passed where a site's id is meant. A key is made where the text comes from (a
//! form's parse, a row, a remote answer) and read back as `&str` only where it leaves (a query's
//! bind, a URL, a log).

use std::fmt;

macro_rules! id {
    ($($(#[$doc:meta])* $name:ident,)+) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, sqlx::Type, serde::Serialize, serde::Deserialize)]
        #[sqlx(transparent)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        /// A query's non-null column of the key (`query_as!` converts it with `into`).
        impl From<i64> for $name {
            fn from(id: i64) -> Self {
                $name(id)
            }
        }
    )+};
}

id! {
    /// `core.accounts`
    AccountId,
    /// `core.organizations`
    OrganizationId,
    /// `core.org_types`
    OrgTypeId,
    /// `core.resource_pools`
    PoolId,
    /// `core.products`
    ProductId,
    /// `core.entitlement_sets`
    EntitlementSetId,
    /// `core.plan_ladders`
    LadderId,
    /// `core.conferrals`
    ConferralId,
    /// `core.grants`; a lineage is named by its first grant's id.
    GrantId,
    /// `core.subscriptions`
    SubscriptionId,
    /// `core.subscription_items`
    SubscriptionItemId,
    /// `core.entitlement_set_changes`: a rule change.
    RuleChangeId,
    /// `core.entitlement_set_change_acts`: one delta of a rule change.
    RuleChangeActId,
    /// `core.plan_acts`
    PlanActId,
    /// `integration.jobs`
    JobId,
    /// `billing.prices`
    PriceId,
    /// `core.outbox`
    OutboxId,
    /// `fedwiki.lifecycle_requests`
    RequestId,
    /// `core.desired_state_connections`
    ConnectionId,
    /// `core.desired_state_records`
    RecordId,
    /// `core.desired_state_outbox`
    NoticeId,
    /// `core.invitations`
    InvitationId,
}

macro_rules! text_key {
    ($($(#[$doc:meta])* $name:ident,)+) => {$(
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, sqlx::Type, serde::Serialize, serde::Deserialize)]
        #[sqlx(transparent)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The key as the text it is (a query's bind, a URL, a log).
            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        /// A query's non-null column of the key, or a remote answer's field, taken as it is: the
        /// text was checked where it was first made (a form's parse), and the database or the
        /// remote system is its source of truth afterwards.
        impl From<String> for $name {
            fn from(key: String) -> Self {
                $name(key)
            }
        }

        impl From<&str> for $name {
            fn from(key: &str) -> Self {
                $name(key.to_string())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    )+};
}

text_key! {
    /// `fedwiki.sites.site_id`: a site, and the lifecycle instance its requests act on (the spec's
    /// `instance_id` is the same name).
    SiteId,
    /// A site's host name on the farm (`fedwiki.sites.domain`), or a custom domain a member adds.
    SiteDomain,
    /// `fedwiki.sites.workspace_id`: the organization's workspace on the farm.
    WorkspaceId,
    /// `core.resource_keys.key`: an entitlement's name (`sites.active`, `seats`).
    ResourceKey,
    /// Stripe's customer (`cus_…`).
    StripeCustomerId,
    /// Stripe's subscription (`sub_…`).
    StripeSubscriptionId,
    /// Stripe's subscription item (`si_…`).
    StripeItemId,
    /// Stripe's subscription schedule (`sub_sched_…`).
    StripeScheduleId,
    /// Stripe's price (`price_…`).
    StripePriceId,
    /// Stripe's product (`prod_…`).
    StripeProductId,
    /// Stripe's invoice (`in_…`).
    StripeInvoiceId,
    /// Stripe's invoice line (`il_…`).
    StripeLineId,
    /// Stripe's payment (`pi_…`, `ch_…`).
    StripePaymentId,
    /// Stripe's Checkout session (`cs_…`).
    StripeSessionId,
    /// Stripe's event (`evt_…`).
    StripeEventId,
}

/// A token's SHA-256, as `core.account_tokens` and `core.invitations` keep it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether a row's stored hash is this one, compared in constant time (the row was found by
    /// an index on the hash; this keeps the final comparison free of an early exit).
    pub fn matches(&self, stored: &[u8]) -> bool {
        stored.len() == 32 && stored.iter().zip(self.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// An email domain, lower-cased, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailDomain(String);

impl EmailDomain {
    pub fn parse(s: &str) -> Result<EmailDomain, String> {
        let d = s.trim().trim_start_matches('@').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        let labels: Vec<&str> = d.split('.').collect();
        if d.len() > 253 || labels.len() < 2 || !labels.iter().all(|l| label_ok(l)) {
            return Err(format!("“{}” is not an email domain such as example.org.", s.trim()));
        }
        Ok(EmailDomain(d))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
