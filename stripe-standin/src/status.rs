//! The statuses the stand-in's objects take and its API is asked about, one enum each, written
//! on the wire as Stripe words them. An object is JSON
//! here, so a status is read from it with `of` and written with `json!(…)`. Each variant's wire
//! word is written once, for serde and `as_str` alike.

use serde::{Deserialize, Serialize};
use serde_json::Value;

macro_rules! wire_status {
    ($($(#[$doc:meta])* $name:ident { $($variant:ident = $wire:literal,)+ })+) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name {
            $(
                #[serde(rename = $wire)]
                $variant,
            )+
        }

        impl $name {
            /// The object's `status`, when it is one of these.
            pub fn of(object: &Value) -> Option<$name> {
                $name::deserialize(&object["status"]).ok()
            }

            /// The status as Stripe writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }
        }
    )+};
}

wire_status! {
    /// A subscription's `status`.
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

    /// An invoice's `status`.
    InvoiceStatus {
        Draft = "draft",
        Open = "open",
        Paid = "paid",
        Uncollectible = "uncollectible",
        Void = "void",
    }

    /// A Checkout Session's `status`.
    CheckoutStatus {
        Open = "open",
        Complete = "complete",
        Expired = "expired",
    }

    /// An invoice payment's `status` (`/v1/invoice_payments`).
    InvoicePaymentStatus {
        Open = "open",
        Paid = "paid",
        Canceled = "canceled",
    }

    /// A webhook endpoint's `status`: a disabled one is sent nothing.
    EndpointStatus {
        Enabled = "enabled",
        Disabled = "disabled",
    }

    /// A test clock's `status`.
    TestClockStatus {
        Ready = "ready",
        Advancing = "advancing",
        InternalFailure = "internal_failure",
    }

    /// A subscription schedule's `status`.
    ScheduleStatus {
        NotStarted = "not_started",
        Active = "active",
        Completed = "completed",
        Released = "released",
        Canceled = "canceled",
    }
}

impl SubscriptionStatus {
    /// Over for good: nothing is charged or changed any more.
    pub fn has_ended(self) -> bool {
        matches!(self, SubscriptionStatus::Canceled | SubscriptionStatus::IncompleteExpired)
    }
}

impl ScheduleStatus {
    /// Still changing its subscription (it may be updated or released).
    pub fn is_running(self) -> bool {
        matches!(self, ScheduleStatus::Active | ScheduleStatus::NotStarted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_is_written_and_read_in_stripes_words() {
        assert_eq!(json!(SubscriptionStatus::IncompleteExpired), json!("incomplete_expired"));
        assert_eq!(SubscriptionStatus::PastDue.as_str(), "past_due");
        assert_eq!(ScheduleStatus::of(&json!({"status": "not_started"})), Some(ScheduleStatus::NotStarted));
        assert_eq!(InvoiceStatus::of(&json!({"status": "lost"})), None);
        assert_eq!(CheckoutStatus::of(&json!({})), None);
        assert_eq!(json!(InvoicePaymentStatus::Paid), json!("paid"));
        assert_eq!(EndpointStatus::of(&json!({"status": "disabled"})), Some(EndpointStatus::Disabled));
    }
}
