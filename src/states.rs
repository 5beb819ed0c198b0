//! The states and kinds rows take, as the migrations' CHECK constraints list them: `text` in the
//! database, an enum here, so code matches on them instead of comparing strings. Each variant's
//! text is written once (sqlx, serde and `as_str` all use it). Nothing here imports from the
//! console: every layer may use it.

use std::fmt;

macro_rules! text_enum {
    ($($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal,)+ })+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type, serde::Serialize, serde::Deserialize)]
        #[sqlx(type_name = "text")]
        pub enum $name {
            $(
                #[sqlx(rename = $text)]
                #[serde(rename = $text)]
                $variant,
            )+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value this text names, if any.
            pub fn from_text(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

text_enum! {
    /// `core.grants.status`
    GrantStatus {
        Waiting = "waiting",
        Active = "active",
        Replaced = "replaced",
        Expired = "expired",
        Revoked = "revoked",
        Ended = "ended",
    }

    /// `core.grants.kind`
    GrantKind {
        Operator = "operator",
        Floor = "floor",
        Legacy = "legacy",
        Provisioning = "provisioning",
    }

    /// `core.resource_keys.kind`
    KeyKind {
        Numeric = "numeric",
        Flag = "flag",
    }

    /// `core.entitlement_set_changes.state`: a rule change.
    RuleChangeState {
        Draining = "draining",
        Settled = "settled",
    }

    /// `core.plan_acts.kind`
    PlanActKind {
        TierAdd = "tier_add",
        TierRemoval = "tier_removal",
        TierDelete = "tier_delete",
        DefaultChange = "default_change",
        TierReorder = "tier_reorder",
        Retry = "retry",
    }

    /// `core.plan_acts.state`
    PlanActState {
        Running = "running",
        Done = "done",
    }

    /// `integration.jobs.state`
    JobState {
        Pending = "pending",
        Running = "running",
        Done = "done",
        Failed = "failed",
    }

    /// `core.subscriptions.status`: Stripe's subscription statuses.
    SubscriptionStatus {
        Incomplete = "incomplete",
        IncompleteExpired = "incomplete_expired",
        Trialing = "trialing",
        Active = "active",
        PastDue = "past_due",
        Unpaid = "unpaid",
        Paused = "paused",
        Canceled = "canceled",
    }

    /// `billing.prices.sync_state` and `billing.product_mappings.sync_state`
    SyncState {
        Unsynced = "unsynced",
        Pending = "pending",
        Synced = "synced",
        Failed = "failed",
    }

    /// `fedwiki.sites.status`
    SiteStatus {
        Active = "active",
        Parked = "parked",
        Archived = "archived",
    }

    /// `fedwiki.lifecycle_requests.kind`: what a member asked of a site.
    RequestKind {
        Create = "create",
        Activate = "activate",
        Park = "park",
        Archive = "archive",
        Delete = "delete",
    }

    /// `fedwiki.lifecycle_requests.state`
    RequestState {
        Accepted = "accepted",
        Done = "done",
        Declined = "declined",
        Failed = "failed",
    }

    /// `billing.prices.billing_interval`
    BillingInterval {
        Month = "month",
        Year = "year",
    }

    /// `billing.invoices.status`: Stripe's invoice statuses.
    InvoiceStatus {
        Draft = "draft",
        Open = "open",
        Paid = "paid",
        Uncollectible = "uncollectible",
        Void = "void",
    }

    /// `billing.invoice_payments.status`: Stripe's invoice payment statuses.
    InvoicePaymentStatus {
        Open = "open",
        Paid = "paid",
        Canceled = "canceled",
    }
}

/// How the subscription reconcile treats a status (the spec's three branches, and `incomplete`,
/// which confers nothing yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionBranch {
    Active,
    Suspended,
    Ended,
    NotYet,
}

impl SubscriptionStatus {
    pub fn branch(self) -> SubscriptionBranch {
        match self {
            SubscriptionStatus::Active | SubscriptionStatus::Trialing => SubscriptionBranch::Active,
            SubscriptionStatus::PastDue | SubscriptionStatus::Unpaid | SubscriptionStatus::Paused => {
                SubscriptionBranch::Suspended
            }
            SubscriptionStatus::Canceled | SubscriptionStatus::IncompleteExpired => SubscriptionBranch::Ended,
            SubscriptionStatus::Incomplete => SubscriptionBranch::NotYet,
        }
    }

    /// Still the organization's, in any state: not ended.
    pub fn is_live(self) -> bool {
        self.branch() != SubscriptionBranch::Ended
    }
}

impl GrantStatus {
    /// A live grant may still be revoked, changed or expire: it holds, was replaced, or waits.
    pub fn is_live(self) -> bool {
        matches!(self, GrantStatus::Active | GrantStatus::Replaced | GrantStatus::Waiting)
    }
}

impl KeyKind {
    /// A kind as a form names it.
    pub fn parse(s: &str) -> Result<KeyKind, String> {
        KeyKind::from_text(s).ok_or_else(|| format!("“{s}” is not a kind: choose numeric or flag."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_names_each_value_by_its_text() {
        for s in GrantStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(serde_json::from_value::<GrantStatus>(s.as_str().into()).unwrap(), *s);
        }
        assert_eq!(serde_json::to_value(PlanActKind::TierAdd).unwrap(), "tier_add");
        assert_eq!(GrantStatus::from_text("lapsed"), None);
        assert_eq!(KeyKind::parse("flag"), Ok(KeyKind::Flag));
        assert!(KeyKind::parse("text").unwrap_err().contains("numeric or flag"));
    }
}
