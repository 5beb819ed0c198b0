//! The webhook's intake (`POST /webhooks/stripe`, after the signature is checked on the raw
//! body): record the event once by its id and, in the same transaction, enqueue the job about
//! its object. A duplicate delivery finds its row and does nothing. The answer is fast; the work
//! is the job's.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::{
    db::Db,
    jobs::{self, Job},
    services::ServiceError,
    store::billing as store,
};

use super::{ConvergeInvoice, ReconcileSubscription};
use crate::ids::{StripeEventId, StripeInvoiceId, StripeSubscriptionId};

/// The parts of a Stripe event the console reads.
#[derive(Debug, Deserialize)]
struct Envelope {
    id: StripeEventId,
    #[serde(rename = "type")]
    event_type: String,
    created: i64,
    data: Data,
}

#[derive(Debug, Deserialize)]
struct Data {
    object: serde_json::Value,
}

/// What the intake did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Recorded, with this many jobs enqueued (0 for a type the console does not act on).
    Recorded { jobs: usize },
    /// Recorded before: nothing was done.
    Duplicate,
}

/// The Stripe objects an event asks the console to look at again.
#[derive(Debug, Default, PartialEq, Eq)]
struct Work {
    subscription: Option<String>,
    invoice: Option<String>,
}

fn str_at<'a>(v: &'a serde_json::Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str().filter(|s| !s.is_empty())
}

fn work_of(event_type: &str, object: &serde_json::Value) -> Work {
    let id = str_at(object, &["id"]).map(String::from);
    match event_type.split('.').next().unwrap_or_default() {
        "customer" if event_type.starts_with("customer.subscription.") => Work { subscription: id, invoice: None },
        "checkout" => Work { subscription: str_at(object, &["subscription"]).map(String::from), invoice: None },
        "invoice" => Work {
            subscription: str_at(object, &["parent", "subscription_details", "subscription"]).map(String::from),
            invoice: id,
        },
        _ => Work::default(),
    }
}

/// Record a verified event and enqueue its work. Bad JSON is `Invalid` (the handler's 400).
#[tracing::instrument(name = "Receive a Stripe event", skip(db, body), fields(event_id, event_type))]
pub async fn receive_event(db: &Db, body: &[u8]) -> Result<Received, ServiceError> {
    let e: Envelope = serde_json::from_slice(body)
        .map_err(|err| ServiceError::invalid_form(format!("The body is not a Stripe event: {err}.")))?;
    tracing::Span::current().record("event_id", e.id.as_str()).record("event_type", e.event_type.as_str());
    let created: DateTime<Utc> = DateTime::from_timestamp(e.created, 0)
        .ok_or_else(|| ServiceError::invalid_form("The event's creation time is not a time."))?;
    let work = work_of(&e.event_type, &e.data.object);
    let object_id = str_at(&e.data.object, &["id"]);
    let (mut kinds, mut payloads) = (vec![], vec![]);
    if let Some(s) = work.subscription.map(StripeSubscriptionId::from) {
        kinds.push(ReconcileSubscription::KIND.to_string());
        payloads.push(ReconcileSubscription { stripe_subscription_id: s }.payload());
    }
    if let Some(i) = work.invoice.map(StripeInvoiceId::from) {
        kinds.push(ConvergeInvoice::KIND.to_string());
        payloads.push(ConvergeInvoice { stripe_invoice_id: i }.payload());
    }
    // One statement on a connection of the prepared pool: the event and its jobs commit together
    // in one round trip, the statement bounded by the request's deadline like every other. Run
    // again on a lost connection, it finds the event recorded and answers as for a duplicate.
    let (recorded, n) = crate::db::tx::on_prepared(db, async |c| {
        store::record_event_with_jobs(
            c,
            (&e.id, &e.event_type, object_id, created),
            &kinds,
            &payloads,
            jobs::DEFAULT_MAX_ATTEMPTS,
        )
        .await
    })
    .await?;
    if !recorded {
        return Ok(Received::Duplicate);
    }
    Ok(Received::Recorded { jobs: n as usize })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_event_family_names_the_objects_to_look_at_again() {
        let sub = json!({"id": "sub_1", "object": "subscription"});
        assert_eq!(work_of("customer.subscription.updated", &sub).subscription.as_deref(), Some("sub_1"));
        assert_eq!(work_of("customer.created", &json!({"id": "cus_1"})), Work::default());
        let cs = json!({"id": "cs_1", "subscription": "sub_2"});
        assert_eq!(work_of("checkout.session.completed", &cs).subscription.as_deref(), Some("sub_2"));
        let inv = json!({"id": "in_1", "parent": {"subscription_details": {"subscription": "sub_3"}}});
        let w = work_of("invoice.payment_failed", &inv);
        assert_eq!((w.subscription.as_deref(), w.invoice.as_deref()), (Some("sub_3"), Some("in_1")));
        assert_eq!(work_of("price.created", &json!({"id": "price_1"})), Work::default());
    }
}
