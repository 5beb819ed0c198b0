//! The rows' ids, one type per table, so a pool's id cannot be passed where a grant's is meant.
//! Each is the table's `bigint` key as it is (sqlx and serde see the number), printed (Display
//! and Debug, so the logs' fields read as before) as the number. Nothing here imports from the console: every layer may use it.
//!
//! A tier has no id of its own: it is a ladder's rank (`LadderId` and the rank).

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
}
