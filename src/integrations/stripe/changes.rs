//! The calls that change a subscription a member holds: a plan switch now (with its preview),
//! one at period end through a subscription schedule, the schedule's release, and cancelling at
//! period end. Each POST carries an idempotency key named by the console's operation, so a
//! double click or a retry after a timeout changes (and charges) once.

use chrono::{DateTime, Utc};
use stripe::StripeRequest;

use super::{Stripe, StripeFailure, idempotent};
use crate::ids::{StripeCustomerId, StripeItemId, StripePriceId, StripeScheduleId, StripeSubscriptionId};

/// What an immediate switch costs today, as Stripe previews it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// In the currency's minor unit; negative would be a credit.
    pub amount_due: i64,
    pub currency: String,
    /// The moment Stripe prorated for (its lines' start): the switch sends it back, so the charge
    /// is what was shown. Stripe's clock decides it, a test clock's included.
    pub proration_date: Option<i64>,
}

/// The metadata key (as a form field) and value that mark a collection pause as the console's own.
const CONSOLE_PAUSE_KEY: &str = "metadata[console_pause]";
pub const CONSOLE_PAUSE_VALUE: &str = "displaced";

/// A schedule phase's items: (Stripe price id, quantity).
pub type PhaseItems = Vec<(StripePriceId, u64)>;

impl Stripe {
    /// The invoice Stripe would make now if `item` moved to `price` (None: it keeps its own) with
    /// prorations charged at once.
    pub async fn preview_switch(
        &self,
        customer: &StripeCustomerId,
        subscription: &StripeSubscriptionId,
        item: &StripeItemId,
        price: Option<&StripePriceId>,
        quantity: u64,
    ) -> Result<Preview, StripeFailure> {
        use stripe_billing::invoice::{
            CreatePreviewInvoice, CreatePreviewInvoiceSubscriptionDetails,
            CreatePreviewInvoiceSubscriptionDetailsItems, CreatePreviewInvoiceSubscriptionDetailsProrationBehavior,
        };
        let details = CreatePreviewInvoiceSubscriptionDetails {
            // The quantity is sent: a new price without one would reset it to 1.
            items: Some(vec![CreatePreviewInvoiceSubscriptionDetailsItems {
                id: Some(item.as_str().to_string()),
                price: price.map(|p| p.as_str().to_string()),
                quantity: Some(quantity),
                ..Default::default()
            }]),
            proration_behavior: Some(CreatePreviewInvoiceSubscriptionDetailsProrationBehavior::AlwaysInvoice),
            ..Default::default()
        };
        let invoice = CreatePreviewInvoice::new()
            .customer(customer.as_str())
            .subscription(subscription.as_str())
            .subscription_details(details)
            .send(&self.metered("preview switch"))
            .await
            .map_err(StripeFailure::from_error)?;
        let proration_date = invoice.lines.data.iter().map(|l| l.period.start).min();
        Ok(Preview { amount_due: invoice.amount_due, currency: invoice.currency.to_string(), proration_date })
    }

    /// Move `item` to `price` (None: it keeps its own, which may be archived) and `quantity` now.
    /// `charge_now`: the proration invoiced and charged at once, and when the charge fails Stripe
    /// changes nothing (`error_if_incomplete`) and says why; otherwise the proration (a credit, for
    /// fewer seats) waits for the next invoice.
    #[allow(clippy::too_many_arguments)]
    pub async fn switch_now(
        &self,
        operation: &str,
        subscription: &StripeSubscriptionId,
        item: &StripeItemId,
        price: Option<&StripePriceId>,
        quantity: u64,
        proration_date: Option<i64>,
        charge_now: bool,
    ) -> Result<(), StripeFailure> {
        use stripe_billing::subscription::{
            UpdateSubscription, UpdateSubscriptionItems, UpdateSubscriptionPaymentBehavior,
            UpdateSubscriptionProrationBehavior,
        };
        let mut req = UpdateSubscription::new(subscription.as_str())
            .items(vec![UpdateSubscriptionItems {
                id: Some(item.as_str().to_string()),
                price: price.map(|p| p.as_str().to_string()),
                quantity: Some(quantity),
                ..Default::default()
            }])
            .proration_behavior(if charge_now {
                UpdateSubscriptionProrationBehavior::AlwaysInvoice
            } else {
                UpdateSubscriptionProrationBehavior::CreateProrations
            });
        if charge_now {
            req = req.payment_behavior(UpdateSubscriptionPaymentBehavior::ErrorIfIncomplete);
        }
        if let Some(d) = proration_date {
            req = req.proration_date(d);
        }
        self.send_once("switch now", &format!("switch:{operation}"), req.customize()).await?;
        Ok(())
    }

    /// The subscription's schedule, made from the subscription when it has none; its id.
    pub async fn schedule_of(
        &self,
        operation: &str,
        subscription: &StripeSubscriptionId,
        existing: Option<&StripeScheduleId>,
    ) -> Result<StripeScheduleId, StripeFailure> {
        use stripe_billing::subscription_schedule::CreateSubscriptionSchedule;
        if let Some(id) = existing {
            return Ok(id.clone());
        }
        let s = self
            .send_once(
                "schedule of",
                &format!("schedule:{operation}"),
                CreateSubscriptionSchedule::new().from_subscription(subscription.as_str()).customize(),
            )
            .await?;
        Ok(s.id.to_string().into())
    }

    /// Two phases on `schedule`: the current items until `at` (the period's end), then `next`
    /// for one period, after which the schedule lets the subscription go on as it is.
    pub async fn set_next_phase(
        &self,
        operation: &str,
        schedule: &StripeScheduleId,
        current_start: DateTime<Utc>,
        current: &PhaseItems,
        at: DateTime<Utc>,
        next: &PhaseItems,
    ) -> Result<(), StripeFailure> {
        use stripe_billing::subscription_schedule::{
            UpdateSubscriptionSchedule, UpdateSubscriptionSchedulePhases, UpdateSubscriptionSchedulePhasesEndDate,
            UpdateSubscriptionSchedulePhasesItems, UpdateSubscriptionSchedulePhasesStartDate,
        };
        let items = |list: &PhaseItems| -> Vec<UpdateSubscriptionSchedulePhasesItems> {
            list.iter()
                .map(|(price, quantity)| UpdateSubscriptionSchedulePhasesItems {
                    price: Some(price.as_str().to_string()),
                    quantity: Some(*quantity),
                    ..Default::default()
                })
                .collect()
        };
        let mut first = UpdateSubscriptionSchedulePhases::new(items(current));
        first.start_date = Some(UpdateSubscriptionSchedulePhasesStartDate::Timestamp(current_start.timestamp()));
        first.end_date = Some(UpdateSubscriptionSchedulePhasesEndDate::Timestamp(at.timestamp()));
        let mut second = UpdateSubscriptionSchedulePhases::new(items(next));
        second.start_date = Some(UpdateSubscriptionSchedulePhasesStartDate::Timestamp(at.timestamp()));
        self.send_once(
            "set next phase",
            &format!("phases:{operation}"),
            UpdateSubscriptionSchedule::new(schedule.as_str())
                .phases(vec![first, second])
                .end_behavior(stripe_shared::SubscriptionScheduleEndBehavior::Release)
                .customize(),
        )
        .await?;
        Ok(())
    }

    /// Let the subscription go on as it is now, without its schedule. A schedule already
    /// released or completed counts as released.
    pub async fn release_schedule(&self, schedule: &StripeScheduleId) -> Result<(), StripeFailure> {
        use stripe_billing::subscription_schedule::ReleaseSubscriptionSchedule;
        match ReleaseSubscriptionSchedule::new(schedule.as_str())
            .customize()
            .request_strategy(idempotent(&format!("release:{schedule}"))?)
            .send(&self.metered("release schedule"))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let f = StripeFailure::from_error(e);
                match self.subscription_schedule(schedule).await? {
                    Some(s) if !s.status.is_running() => Ok(()),
                    _ => Err(f),
                }
            }
        }
    }

    /// Pause the subscription's collection because another plan displaced it everywhere
    /// (`true`: its invoices are voided, and the console's mark is in its metadata), or resume a
    /// pause the console made (`false`). Setting the state it has is harmless: no key needed.
    pub async fn set_console_pause(
        &self,
        subscription: &StripeSubscriptionId,
        pause: bool,
    ) -> Result<(), StripeFailure> {
        use std::collections::BTreeMap;
        use stripe_client_core::{RequestBuilder, StripeMethod};
        // An empty value clears a field, as Stripe reads forms.
        let form: BTreeMap<&str, &str> = if pause {
            BTreeMap::from([("pause_collection[behavior]", "void"), (CONSOLE_PAUSE_KEY, CONSOLE_PAUSE_VALUE)])
        } else {
            BTreeMap::from([("pause_collection", ""), (CONSOLE_PAUSE_KEY, "")])
        };
        RequestBuilder::new(StripeMethod::Post, format!("/subscriptions/{subscription}"))
            .form(&form)
            .customize::<stripe_shared::Subscription>()
            .send(&self.metered("set console pause"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(())
    }

    /// End the subscription at its period's end (`true`), or keep it going (`false`).
    pub async fn cancel_at_period_end(
        &self,
        subscription: &StripeSubscriptionId,
        cancel: bool,
    ) -> Result<(), StripeFailure> {
        use stripe_billing::subscription::UpdateSubscription;
        // Setting the same value twice is harmless, so no key is needed to make it once.
        UpdateSubscription::new(subscription.as_str())
            .cancel_at_period_end(cancel)
            .send(&self.metered("cancel at period end"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(())
    }
}
