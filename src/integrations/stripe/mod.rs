//! The console's Stripe client (async-stripe 1.0): one handle built from the configuration, the
//! calls the console makes, and what it reads back as plain snapshots, so the services never
//! see the generated types. Every POST carries an Idempotency-Key made from the console's own
//! operation id, so a retry after a timeout never makes a second object; every call has a
//! timeout and carries the id of the request it is for (`transport`); a failure is a sentence
//! for people and a log line with Stripe's request log.

mod changes;
pub mod signature;
mod transport;

pub use changes::{CONSOLE_PAUSE_VALUE, PhaseItems, Preview};

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use stripe::{IdempotencyKey, RequestStrategy};
use stripe::{StripeError, StripeRequest};
use stripe_client_core::CustomizableStripeRequest;

use crate::{
    ids::{
        StripeCustomerId, StripeEventId, StripeInvoiceId, StripeItemId, StripeLineId, StripePaymentId, StripePriceId,
        StripeProductId, StripeScheduleId, StripeSessionId, StripeSubscriptionId,
    },
    states::{BillingInterval, InvoicePaymentStatus, InvoiceStatus, SubscriptionStatus},
};

/// A connected Stripe account (or the stand-in) and the secrets its webhooks are signed with.
pub struct Stripe {
    client: transport::Transport,
    webhook_secrets: Vec<String>,
    api_base: String,
    timeout: Duration,
}

/// Why a Stripe call did not give an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StripeFailure {
    /// Stripe answered with an error: its status, type and message.
    #[error("Stripe refused the request ({status} {kind}): {message}")]
    Api {
        status: u16,
        kind: String,
        code: Option<String>,
        /// The request's parameter Stripe names (`items[0][price]`), if any.
        param: Option<String>,
        message: String,
        request_log: Option<String>,
    },
    /// No answer: the network, a timeout, or Stripe's answer could not be read.
    #[error("Stripe could not be reached: {0}")]
    Unreachable(String),
    #[error("Stripe's answer could not be read: {0}")]
    Unreadable(String),
    #[error("the Stripe client is misconfigured: {0}")]
    Config(String),
}

impl StripeFailure {
    /// Worth trying again later: no answer, a rate limit, or a server-side error.
    pub fn is_transient(&self) -> bool {
        match self {
            StripeFailure::Api { status, kind, .. } => *status == 429 || *status >= 500 || kind == "api_error",
            StripeFailure::Unreachable(_) => true,
            StripeFailure::Unreadable(_) | StripeFailure::Config(_) => false,
        }
    }

    /// Stripe says the object does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(self, StripeFailure::Api { status: 404, .. })
    }

    /// Stripe says it has no such price or product: one the console recorded is gone (a test-mode
    /// account was reset, a stand-in lost its state). Stripe answers a 400 (`resource_missing`)
    /// when the request names it in a parameter, a 404 when in its path; the stand-in a 404.
    pub fn lost_catalog(&self) -> bool {
        match self {
            StripeFailure::Api { status, code, message, .. } if *status == 400 || *status == 404 => {
                (*status == 404 || code.as_deref() == Some("resource_missing"))
                    && (message.starts_with("No such price") || message.starts_with("No such product"))
            }
            _ => false,
        }
    }

    /// The id of the price or product Stripe says it lacks, as its message names it
    /// ("No such price: 'price_123'").
    pub fn lost_id(&self) -> Option<String> {
        let StripeFailure::Api { message, .. } = self else { return None };
        if !self.lost_catalog() {
            return None;
        }
        let quoted = message.split('\'').nth(1)?;
        (!quoted.is_empty()).then(|| quoted.to_string())
    }

    /// What Stripe's refusal of a change means for the change (see `Refusal`).
    pub fn refusal(&self) -> Refusal {
        match self {
            StripeFailure::Api { status: 402, .. } => Refusal::CardDeclined,
            StripeFailure::Api { kind, .. } if kind == "card_error" => Refusal::CardDeclined,
            StripeFailure::Api { kind, code, .. }
                if kind == "idempotency_error" || code.as_deref() == Some("idempotency_key_in_use") =>
            {
                Refusal::KeyReused
            }
            f if f.lost_catalog() => Refusal::CatalogMissing,
            StripeFailure::Api { status: 404, .. } => Refusal::Missing,
            // Stripe words it "The price specified is inactive. This field only accepts active
            // prices." on the price parameter it names.
            StripeFailure::Api { status, param, message, .. }
                if *status < 500
                    && message.contains("inactive")
                    && param.as_deref().is_some_and(|p| p == "price" || p.ends_with("[price]")) =>
            {
                Refusal::PriceInactive { param: param.clone().unwrap_or_default() }
            }
            // An answer that could not be read may be Stripe's success: unknown as much as no answer.
            f if f.is_transient() || matches!(f, StripeFailure::Unreadable(_)) => Refusal::Unconfirmed,
            _ => Refusal::Other,
        }
    }

    /// The failure of a call that changes something, as a person reads it: without an answer
    /// the console cannot know whether Stripe made the change (or charged for it).
    pub fn write_sentence(&self) -> String {
        match self.refusal() {
            Refusal::Unconfirmed => "The console could not confirm whether Stripe made this change: reload the \
                                     billing page in a minute to see where it stands."
                .into(),
            _ => self.sentence(),
        }
    }

    /// The failure of a read (or of a call Stripe never acted on), as a person reads it.
    pub fn sentence(&self) -> String {
        match self {
            StripeFailure::Api { status, message, .. } if *status < 500 && *status != 429 => {
                format!("Stripe did not accept this: {message}")
            }
            StripeFailure::Api { .. } | StripeFailure::Unreachable(_) => {
                "Stripe did not answer in time. Nothing was charged; please try again in a minute.".into()
            }
            StripeFailure::Unreadable(_) | StripeFailure::Config(_) => {
                "The console could not complete this with Stripe. Nothing was charged; the operators have been told."
                    .into()
            }
        }
    }

    fn from_error(e: StripeError) -> StripeFailure {
        let failure = match e {
            StripeError::Stripe(api, status) => StripeFailure::Api {
                status,
                kind: api.type_.to_string(),
                code: api.code.as_ref().map(|c| c.to_string()),
                param: api.param.clone(),
                message: api.message.clone().unwrap_or_else(|| "no message".into()),
                request_log: api.request_log_url.clone(),
            },
            StripeError::JSONDeserialize(m) => StripeFailure::Unreadable(m),
            StripeError::ClientError(m) => StripeFailure::Unreachable(m),
            StripeError::Timeout => StripeFailure::Unreachable("timed out".into()),
            StripeError::ConfigError(m) => StripeFailure::Config(m),
        };
        match &failure {
            StripeFailure::Api { status, kind, message, request_log, .. } => {
                tracing::warn!(status, kind, message, request_log = request_log.as_deref(), "Stripe refused a request")
            }
            other => tracing::warn!(error = %other, "a Stripe call failed"),
        }
        failure
    }
}

/// What a refusal of a change means for that change, so a member reads what happened and what
/// to do rather than Stripe's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The card was declined (402 `card_error`): with `error_if_incomplete` nothing changed and
    /// nothing was charged.
    CardDeclined,
    /// A price sent is archived in Stripe; `param` names which (`items[0][price]`,
    /// `phases[1][items][0][price]`).
    PriceInactive { param: String },
    /// A price or product sent is one Stripe does not have (`lost_catalog`).
    CatalogMissing,
    /// The object is gone (404): a subscription canceled meanwhile, a schedule released.
    Missing,
    /// The idempotency key was used before with other parameters, or is in use right now.
    KeyReused,
    /// No answer, a rate limit or Stripe's own failure: the change may or may not have been made.
    Unconfirmed,
    /// Anything else Stripe refused.
    Other,
}

/// A read's answer, or None when Stripe says there is no such object.
fn found<T>(r: Result<T, StripeError>) -> Result<Option<T>, StripeFailure> {
    match r {
        Ok(x) => Ok(Some(x)),
        Err(e) => {
            let f = StripeFailure::from_error(e);
            if f.is_missing() { Ok(None) } else { Err(f) }
        }
    }
}

/// A creation's key, or, for an object made again because Stripe lost the first, that remaking's.
fn remade_key(key: String, remade: Option<&str>) -> String {
    match remade {
        Some(tag) => format!("{key}:{tag}"),
        None => key,
    }
}

/// The idempotency key of one console operation: the same operation always sends the same key.
fn idempotent(operation: &str) -> Result<RequestStrategy, StripeFailure> {
    // Stripe keeps keys for at least 24 hours; a key names the console's operation, not a try.
    let key = IdempotencyKey::new(format!("member-console:{operation}"))
        .map_err(|e| StripeFailure::Config(format!("idempotency key: {e}")))?;
    Ok(RequestStrategy::Idempotent(key))
}

/// `metadata` with the id of the request the call is made for (`request_id`), when there is
/// one, so the object in Stripe names the action that made it. Only on calls whose idempotency key
/// a later request does not reuse blindly: Stripe refuses a key sent again with other parameters.
fn with_request_id(mut metadata: HashMap<String, String>) -> HashMap<String, String> {
    if let Some(id) = crate::trace_context::current() {
        metadata.insert("request_id".to_string(), id);
    }
    metadata
}

fn at(ts: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(ts, 0).unwrap_or_default()
}

/// A subscription as the reconcile needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSnapshot {
    pub id: StripeSubscriptionId,
    pub customer: StripeCustomerId,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    /// Paused by the console because another plan displaced it on every ladder (its mark is in
    /// the metadata); a pause made in Stripe's dashboard is not the console's to lift.
    pub console_paused: bool,
    pub ended_at: Option<DateTime<Utc>>,
    pub metadata: HashMap<String, String>,
    /// The schedule that will change it, if any (Billing II's ledger reads its phases).
    pub schedule: Option<StripeScheduleId>,
    pub items: Vec<ItemSnapshot>,
}

impl SubscriptionSnapshot {
    /// The subscription's current period: the items' (in this API version the period lives on
    /// each item; a subscription's items share one cycle).
    pub fn current_period(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let start = self.items.iter().map(|i| i.period_start).min()?;
        let end = self.items.iter().map(|i| i.period_end).max()?;
        Some((start, end))
    }

    /// Ended for good (canceled, or never started): nothing is collected or changed any more.
    pub fn has_ended(&self) -> bool {
        matches!(self.status, SubscriptionStatus::Canceled | SubscriptionStatus::IncompleteExpired)
    }

    /// Its items as a schedule phase holds them: (price, quantity).
    pub fn phase_items(&self) -> PhaseItems {
        self.items.iter().map(|i| (i.price.clone(), i.quantity.max(1) as u64)).collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ItemSnapshot {
    pub id: StripeItemId,
    pub price: StripePriceId,
    pub quantity: i32,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InvoiceSnapshot {
    pub id: StripeInvoiceId,
    pub customer: StripeCustomerId,
    pub subscription: Option<StripeSubscriptionId>,
    pub number: Option<String>,
    pub status: InvoiceStatus,
    pub currency: String,
    pub amount_due: i64,
    pub amount_paid: i64,
    pub amount_remaining: i64,
    pub hosted_invoice_url: Option<String>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub created: DateTime<Utc>,
    pub lines: Vec<InvoiceLineSnapshot>,
    pub payments: Vec<InvoicePaymentSnapshot>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InvoiceLineSnapshot {
    pub id: StripeLineId,
    pub description: Option<String>,
    pub amount: i64,
    pub quantity: Option<i64>,
    pub price: Option<StripePriceId>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InvoicePaymentSnapshot {
    pub id: StripePaymentId,
    pub status: InvoicePaymentStatus,
    pub amount: i64,
    pub paid_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CheckoutSnapshot {
    pub id: StripeSessionId,
    pub status: CheckoutStatus,
    pub client_reference_id: Option<String>,
    pub subscription: Option<StripeSubscriptionId>,
    pub url: Option<String>,
    /// The console's price and seat count the session sells (its metadata), when it set them.
    pub price_id: Option<i64>,
    pub quantity: Option<u64>,
}

/// A Checkout Session's status, as Stripe words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckoutStatus {
    Open,
    Complete,
    Expired,
}

/// An event as the sweep lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSummary {
    pub id: StripeEventId,
    pub event_type: String,
    /// The id of the object the event is about (`data.object.id`).
    pub object_id: Option<String>,
    pub created: DateTime<Utc>,
}

/// The events a sweep read: oldest first, and whether they are all there were.
#[derive(Debug, Clone, PartialEq)]
pub struct EventsRead {
    pub events: Vec<EventSummary>,
    pub complete: bool,
    /// The id of the last event Stripe listed (the oldest read; the one given when none was),
    /// where a read cut short continues.
    pub last_id: Option<StripeEventId>,
}

/// A subscription schedule: its phases, each with the prices it will charge.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSnapshot {
    pub id: StripeScheduleId,
    pub status: ScheduleStatus,
    /// The phase in force (its start), if any.
    pub current_phase_start: Option<DateTime<Utc>>,
    pub phases: Vec<PhaseSnapshot>,
}

/// A subscription schedule's status, as Stripe words it. Not stored: the reconcile reads it
/// from Stripe each time, so it is no `states` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleStatus {
    NotStarted,
    Active,
    Completed,
    Released,
    Canceled,
}

impl ScheduleStatus {
    /// Still changing its subscription: it may be updated or released.
    pub fn is_running(self) -> bool {
        matches!(self, ScheduleStatus::Active | ScheduleStatus::NotStarted)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSnapshot {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// (price id, quantity)
    pub items: Vec<(StripePriceId, i32)>,
}

impl PhaseSnapshot {
    /// Its items as a phase is written back: (price, quantity).
    pub fn phase_items(&self) -> PhaseItems {
        self.items.iter().map(|(price, q)| (price.clone(), (*q).max(1) as u64)).collect()
    }
}

impl ScheduleSnapshot {
    /// Still attached, in its last phase: nothing is left for it to change, and while attached it
    /// would stand in the way of the subscription's next change (releaseSpentSchedule lets it go).
    pub fn is_spent(&self) -> bool {
        self.status == ScheduleStatus::Active && self.current_phase_start.is_some() && self.next_phase().is_none()
    }

    /// The phase that comes next: the first after the one in force (the first of all when none
    /// is), while the schedule still runs.
    pub fn next_phase(&self) -> Option<&PhaseSnapshot> {
        if !self.status.is_running() {
            return None;
        }
        match self.current_phase_start {
            Some(current) => self.phases.iter().filter(|p| p.start > current).min_by_key(|p| p.start),
            None => self.phases.iter().min_by_key(|p| p.start),
        }
    }
}

/// What a checkout is for.
pub struct CheckoutRequest<'a> {
    /// The console's own id of this attempt (the idempotency key).
    pub operation: &'a str,
    pub customer: &'a StripeCustomerId,
    pub price: &'a StripePriceId,
    pub quantity: u64,
    /// The console's price (recorded in the session's metadata).
    pub price_id: i64,
    pub organization_id: i64,
    pub success_url: &'a str,
    pub cancel_url: &'a str,
}

/// The client, measured: each call's latency and failure under the operation it is for.
pub(crate) struct Metered<'a> {
    client: &'a transport::Transport,
    operation: &'static str,
}

impl stripe_client_core::StripeClient for Metered<'_> {
    type Err = StripeError;

    fn execute(
        &self,
        req: stripe::CustomizedStripeRequest,
    ) -> impl Future<Output = Result<actix_web::web::Bytes, StripeError>> + Send {
        // A 404 is Stripe's answer that the object is not there, not a failed call.
        crate::metrics::timed(
            crate::metrics::System::Stripe,
            self.operation,
            self.client.execute(self.operation, req),
            |r| matches!(r, Err(e) if !matches!(e, StripeError::Stripe(_, 404))),
        )
    }
}

impl Stripe {
    /// The client, measured as `operation`.
    pub(crate) fn metered(&self, operation: &'static str) -> Metered<'_> {
        Metered { client: &self.client, operation }
    }

    /// Send a request that makes or changes something under the idempotency key of the
    /// console's operation `key`, so a retry of that operation does it once; measured as
    /// `operation`.
    pub(crate) async fn send_once<T: miniserde::Deserialize>(
        &self,
        operation: &'static str,
        key: &str,
        req: CustomizableStripeRequest<T>,
    ) -> Result<T, StripeFailure> {
        req.request_strategy(idempotent(key)?).send(&self.metered(operation)).await.map_err(StripeFailure::from_error)
    }

    /// A client for `secret_key` at `api_base` (Stripe's own when None).
    pub fn connect(
        secret_key: &str,
        api_base: Option<&str>,
        webhook_secrets: Vec<String>,
        timeout: Duration,
    ) -> Result<Stripe, StripeFailure> {
        let api_base = api_base.unwrap_or("https://api.stripe.com/").to_string();
        let client = transport::Transport::new(secret_key, &api_base, timeout).map_err(StripeFailure::from_error)?;
        Ok(Stripe { client, webhook_secrets, api_base, timeout })
    }

    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// The origin of the payment pages checkout sends people to: Stripe's for Stripe's API, the
    /// API's own for a stand-in (which serves its page itself). Pages name it in their policy.
    pub fn checkout_origin(&self) -> String {
        match url::Url::parse(&self.api_base) {
            Ok(u) if u.host_str() == Some("api.stripe.com") => "https://checkout.stripe.com".into(),
            Ok(u) => u.origin().ascii_serialization(),
            Err(_) => "https://checkout.stripe.com".into(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Check a webhook's signature on its raw body (see `signature`).
    pub fn verify_webhook(&self, header: Option<&str>, body: &[u8]) -> Result<(), signature::SignatureError> {
        signature::verify(header, body, &self.webhook_secrets, Utc::now().timestamp())
    }

    /// The subscription as Stripe has it now, or None when Stripe has no such subscription.
    pub async fn subscription(&self, id: &StripeSubscriptionId) -> Result<Option<SubscriptionSnapshot>, StripeFailure> {
        use stripe_billing::subscription::RetrieveSubscription;
        let Some(s) = found(RetrieveSubscription::new(id.as_str()).send(&self.metered("read subscription")).await)?
        else {
            return Ok(None);
        };
        Ok(Some(SubscriptionSnapshot {
            id: s.id.to_string().into(),
            customer: s.customer.id().to_string().into(),
            status: SubscriptionStatus::from_text(s.status.as_str()).ok_or_else(|| {
                StripeFailure::Unreadable(format!("a subscription status the console does not know: {}", s.status))
            })?,
            cancel_at_period_end: s.cancel_at_period_end,
            collection_paused: s.pause_collection.is_some(),
            console_paused: s.pause_collection.is_some()
                && s.metadata.get("console_pause").map(String::as_str) == Some(CONSOLE_PAUSE_VALUE),
            ended_at: s.ended_at.map(at),
            metadata: s.metadata.clone(),
            schedule: s.schedule.as_ref().map(|x| x.id().to_string().into()),
            items: s
                .items
                .data
                .iter()
                .map(|i| ItemSnapshot {
                    id: i.id.to_string().into(),
                    price: i.price.id.to_string().into(),
                    quantity: i.quantity.unwrap_or(1).clamp(1, i32::MAX as u64) as i32,
                    period_start: at(i.current_period_start),
                    period_end: at(i.current_period_end),
                })
                .collect(),
        }))
    }

    /// The subscription schedule as Stripe has it now, or None when Stripe has no such schedule.
    pub async fn subscription_schedule(
        &self,
        id: &StripeScheduleId,
    ) -> Result<Option<ScheduleSnapshot>, StripeFailure> {
        use stripe_billing::subscription_schedule::RetrieveSubscriptionSchedule;
        let Some(s) = found(
            RetrieveSubscriptionSchedule::new(id.as_str()).send(&self.metered("read subscription schedule")).await,
        )?
        else {
            return Ok(None);
        };
        Ok(Some(ScheduleSnapshot {
            id: s.id.to_string().into(),
            status: {
                use stripe_shared::SubscriptionScheduleStatus as S;
                match &s.status {
                    S::NotStarted => ScheduleStatus::NotStarted,
                    S::Active => ScheduleStatus::Active,
                    S::Completed => ScheduleStatus::Completed,
                    S::Released => ScheduleStatus::Released,
                    S::Canceled => ScheduleStatus::Canceled,
                    other => {
                        return Err(StripeFailure::Unreadable(format!(
                            "a subscription schedule status the console does not know: {other}"
                        )));
                    }
                }
            },
            current_phase_start: s.current_phase.as_ref().map(|p| at(p.start_date)),
            phases: s
                .phases
                .iter()
                .map(|p| PhaseSnapshot {
                    start: at(p.start_date),
                    end: at(p.end_date),
                    items: p
                        .items
                        .iter()
                        .map(|i| {
                            (i.price.id().to_string().into(), i.quantity.unwrap_or(1).clamp(1, i32::MAX as u64) as i32)
                        })
                        .collect(),
                })
                .collect(),
        }))
    }

    /// The invoice as Stripe has it now, with its lines and payments.
    pub async fn invoice(&self, id: &StripeInvoiceId) -> Result<Option<InvoiceSnapshot>, StripeFailure> {
        use stripe_billing::invoice::RetrieveInvoice;
        let Some(inv) = found(
            RetrieveInvoice::new(id.as_str())
                .expand(vec!["payments".to_string()])
                .send(&self.metered("read invoice"))
                .await,
        )?
        else {
            return Ok(None);
        };
        let subscription =
            inv.parent.as_ref().and_then(|p| p.subscription_details.as_ref()).map(|d| d.subscription.id().to_string());
        let status = match &inv.status {
            None => InvoiceStatus::Draft,
            Some(s) => InvoiceStatus::from_text(s.as_str()).ok_or_else(|| {
                StripeFailure::Unreadable(format!("an invoice status the console does not know: {s}"))
            })?,
        };
        Ok(Some(InvoiceSnapshot {
            id: inv.id.as_ref().map(|i| StripeInvoiceId::from(i.as_str())).unwrap_or_else(|| id.clone()),
            customer: inv.customer.as_ref().map(|c| c.id().to_string()).unwrap_or_default().into(),
            subscription: subscription.map(StripeSubscriptionId::from),
            number: inv.number.clone(),
            status,
            currency: inv.currency.to_string(),
            amount_due: inv.amount_due,
            amount_paid: inv.amount_paid,
            amount_remaining: inv.amount_remaining,
            hosted_invoice_url: inv.hosted_invoice_url.clone(),
            period_start: at(inv.period_start),
            period_end: at(inv.period_end),
            created: at(inv.created),
            lines: inv
                .lines
                .data
                .iter()
                .map(|l| InvoiceLineSnapshot {
                    id: l.id.to_string().into(),
                    description: l.description.clone(),
                    amount: l.amount,
                    quantity: l.quantity.map(|q| q as i64),
                    price: l
                        .pricing
                        .as_ref()
                        .and_then(|p| p.price_details.as_ref())
                        .map(|d| d.price.id().to_string().into()),
                    period_start: at(l.period.start),
                    period_end: at(l.period.end),
                })
                .collect(),
            payments: inv
                .payments
                .as_ref()
                .map(|list| {
                    list.data
                        .iter()
                        .map(|p| {
                            Ok(InvoicePaymentSnapshot {
                                id: p.id.to_string().into(),
                                status: InvoicePaymentStatus::from_text(&p.status).ok_or_else(|| {
                                    StripeFailure::Unreadable(format!(
                                        "an invoice payment status the console does not know: {}",
                                        p.status
                                    ))
                                })?,
                                amount: p.amount_paid.unwrap_or(0),
                                paid_at: p.status_transitions.paid_at.map(at),
                            })
                        })
                        .collect::<Result<Vec<_>, StripeFailure>>()
                })
                .transpose()?
                .unwrap_or_default(),
        }))
    }

    /// Make the organization's customer. The key is the organization's, so two racing clicks
    /// make one customer (or, the request ids in their metadata differing, one customer and a
    /// refused key: `create_customer_again`).
    pub async fn create_customer(
        &self,
        organization_id: i64,
        name: &str,
        email: Option<&str>,
    ) -> Result<StripeCustomerId, StripeFailure> {
        self.create_customer_keyed(organization_id, name, email, &format!("customer:organization:{organization_id}"))
            .await
    }

    /// Make the organization's customer under a key of this attempt's own (`attempt`): when the
    /// organization's key was used by another request and the console recorded no customer from
    /// it (that request failed before recording, or has not recorded yet).
    pub async fn create_customer_again(
        &self,
        organization_id: i64,
        name: &str,
        attempt: &str,
    ) -> Result<StripeCustomerId, StripeFailure> {
        self.create_customer_keyed(
            organization_id,
            name,
            None,
            &format!("customer:organization:{organization_id}:{attempt}"),
        )
        .await
    }

    async fn create_customer_keyed(
        &self,
        organization_id: i64,
        name: &str,
        email: Option<&str>,
        key: &str,
    ) -> Result<StripeCustomerId, StripeFailure> {
        use stripe_core::customer::CreateCustomer;
        let mut metadata = HashMap::new();
        metadata.insert("organization_id".to_string(), organization_id.to_string());
        let mut req = CreateCustomer::new().name(name).metadata(with_request_id(metadata));
        if let Some(e) = email {
            req = req.email(e);
        }
        let c = self.send_once("create customer", key, req.customize()).await?;
        Ok(c.id.to_string().into())
    }

    /// A Checkout Session for one price, in subscription mode, returning to the console.
    pub async fn create_checkout(&self, r: CheckoutRequest<'_>) -> Result<CheckoutSnapshot, StripeFailure> {
        use stripe_checkout::checkout_session::{
            CreateCheckoutSession, CreateCheckoutSessionLineItems, CreateCheckoutSessionSubscriptionData,
        };
        let mut metadata = HashMap::new();
        metadata.insert("organization_id".to_string(), r.organization_id.to_string());
        // The session and the subscription it makes name the member's request that asked.
        let mut metadata = with_request_id(metadata);
        let data = CreateCheckoutSessionSubscriptionData { metadata: Some(metadata.clone()), ..Default::default() };
        // The session's own metadata also names what it sells, so a later click can tell whether
        // an open session is the one it would make.
        metadata.insert("price_id".to_string(), r.price_id.to_string());
        metadata.insert("quantity".to_string(), r.quantity.to_string());
        let line = CreateCheckoutSessionLineItems {
            price: Some(r.price.as_str().to_string()),
            quantity: Some(r.quantity),
            ..Default::default()
        };
        let s = self
            .send_once(
                "create checkout",
                &format!("checkout:{}", r.operation),
                CreateCheckoutSession::new()
                    .mode(stripe_shared::CheckoutSessionMode::Subscription)
                    .customer(r.customer.as_str())
                    .client_reference_id(r.organization_id.to_string())
                    .line_items(vec![line])
                    .metadata(metadata)
                    .subscription_data(data)
                    .success_url(r.success_url)
                    .cancel_url(r.cancel_url)
                    .customize(),
            )
            .await?;
        Ok(checkout_snapshot(&s))
    }

    pub async fn checkout(&self, id: &StripeSessionId) -> Result<Option<CheckoutSnapshot>, StripeFailure> {
        use stripe_checkout::checkout_session::RetrieveCheckoutSession;
        Ok(found(RetrieveCheckoutSession::new(id.as_str()).send(&self.metered("read checkout")).await)?
            .map(|s| checkout_snapshot(&s)))
    }

    /// Expire an open Checkout Session, so nobody can pay it any more; the session as it is
    /// after. A session that is no longer open is not expired: Stripe refuses, and the answer is
    /// the session as it is (complete or expired), so the caller decides what that means.
    pub async fn expire_checkout(&self, id: &StripeSessionId) -> Result<Option<CheckoutSnapshot>, StripeFailure> {
        use stripe_checkout::checkout_session::ExpireCheckoutSession;
        // Expiring twice is harmless (the second is refused, and then read): no key needed.
        match ExpireCheckoutSession::new(id.as_str()).send(&self.metered("expire checkout")).await {
            Ok(s) => Ok(Some(checkout_snapshot(&s))),
            Err(e) => {
                let f = StripeFailure::from_error(e);
                if f.is_missing() {
                    return Ok(None);
                }
                match self.checkout(id).await? {
                    Some(s) if s.status != CheckoutStatus::Open => Ok(Some(s)),
                    _ => Err(f),
                }
            }
        }
    }

    /// Create the product's Stripe product, or bring its name up to date. `version` names this
    /// sync, so a retry of one sync sends the same key and a later sync a new one. A product is
    /// made once under its own key, or again under `remade` when Stripe lost the one it made.
    pub async fn put_product(
        &self,
        product_id: i64,
        stripe_id: Option<&StripeProductId>,
        name: &str,
        version: &str,
        remade: Option<&str>,
    ) -> Result<StripeProductId, StripeFailure> {
        use stripe_product::product::{CreateProduct, UpdateProduct};
        let mut metadata = HashMap::new();
        metadata.insert("product_id".to_string(), product_id.to_string());
        let p = match stripe_id {
            None => {
                self.send_once(
                    "put product",
                    &remade_key(format!("product:{product_id}:create"), remade),
                    CreateProduct::new(name).metadata(metadata).customize(),
                )
                .await?
            }
            Some(id) => {
                self.send_once(
                    "put product",
                    &format!("product:{product_id}:update:{version}"),
                    UpdateProduct::new(id.as_str()).name(name).metadata(metadata).customize(),
                )
                .await?
            }
        };
        Ok(p.id.to_string().into())
    }

    /// Create a recurring price (its amount is fixed for good: a new amount is a new price);
    /// under `remade`'s key when Stripe lost the one made before.
    pub async fn create_price(
        &self,
        price_id: i64,
        stripe_product: &StripeProductId,
        amount_minor: i64,
        currency: &str,
        interval: BillingInterval,
        remade: Option<&str>,
    ) -> Result<StripePriceId, StripeFailure> {
        use stripe_product::price::{CreatePrice, CreatePriceRecurring, CreatePriceRecurringInterval};
        let interval = match interval {
            BillingInterval::Year => CreatePriceRecurringInterval::Year,
            BillingInterval::Month => CreatePriceRecurringInterval::Month,
        };
        let mut metadata = HashMap::new();
        metadata.insert("price_id".to_string(), price_id.to_string());
        let currency: stripe_types::Currency =
            currency.parse().map_err(|_| StripeFailure::Config(format!("currency {currency}")))?;
        let p = self
            .send_once(
                "create price",
                &remade_key(format!("price:{price_id}:create"), remade),
                CreatePrice::new(currency)
                    .product(stripe_product.as_str())
                    .unit_amount(amount_minor)
                    .recurring(CreatePriceRecurring::new(interval))
                    .metadata(metadata)
                    .customize(),
            )
            .await?;
        Ok(p.id.to_string().into())
    }

    /// Archive a price in Stripe: existing subscriptions keep it, no new checkout can use it.
    pub async fn archive_price(&self, price_id: i64, stripe_price: &StripePriceId) -> Result<(), StripeFailure> {
        use stripe_product::price::UpdatePrice;
        self.send_once(
            "archive price",
            &format!("price:{price_id}:archive"),
            UpdatePrice::new(stripe_price.as_str()).active(false).customize(),
        )
        .await?;
        Ok(())
    }

    /// Events created after `after`, oldest first: Stripe lists them newest first, so pages are
    /// read (`starting_after` the last one read, from `starting_after` when given: a walk a pass
    /// left unfinished) until Stripe has no more, or `max_pages` pages of `page_size`. `complete`
    /// is false when pages were left: events between `after` and the oldest one read
    /// (`last_id`) were not seen, and a next call with `starting_after` that id reads them.
    pub async fn events_since(
        &self,
        after: DateTime<Utc>,
        starting_after: Option<&StripeEventId>,
        page_size: i64,
        max_pages: usize,
    ) -> Result<EventsRead, StripeFailure> {
        use stripe_core::event::ListEvent;
        let mut events = vec![];
        let mut last_id: Option<StripeEventId> = starting_after.cloned();
        let mut complete = false;
        for _ in 0..max_pages {
            let mut req = ListEvent::new().created(stripe_types::RangeQueryTs::gt(after.timestamp())).limit(page_size);
            if let Some(last) = &last_id {
                req = req.starting_after(last.as_str());
            }
            let list = req.send(&self.metered("events since")).await.map_err(StripeFailure::from_error)?;
            events.extend(list.data.iter().map(|e| EventSummary {
                id: e.id.to_string().into(),
                event_type: e.type_.to_string(),
                object_id: match &e.data.object {
                    miniserde::json::Value::Object(o) => match o.get("id") {
                        Some(miniserde::json::Value::String(id)) => Some(id.clone()),
                        _ => None,
                    },
                    _ => None,
                },
                created: at(e.created),
            }));
            let Some(last) = list.data.last() else {
                complete = true;
                break;
            };
            last_id = Some(last.id.to_string().into());
            if !list.has_more {
                complete = true;
                break;
            }
        }
        events.sort_by_key(|e| e.created);
        Ok(EventsRead { events, complete, last_id })
    }
}

/// What only a test account is asked: the demo's seed and the tests make subscriptions outside a
/// checkout and move a test clock (Stripe's `test_helpers`), as an operator would in Stripe's
/// dashboard.
impl Stripe {
    /// A customer for the organization paying with Stripe's test method `payment_method`
    /// (`pm_card_visa`, `pm_card_chargeCustomerFail`), on `test_clock` when given.
    pub async fn create_test_customer(
        &self,
        organization_id: i64,
        name: &str,
        payment_method: &str,
        test_clock: Option<&str>,
    ) -> Result<StripeCustomerId, StripeFailure> {
        use stripe_core::customer::{CreateCustomer, CreateCustomerInvoiceSettings};
        let mut metadata = HashMap::new();
        metadata.insert("organization_id".to_string(), organization_id.to_string());
        let mut req =
            CreateCustomer::new().name(name).metadata(metadata).payment_method(payment_method).invoice_settings(
                CreateCustomerInvoiceSettings {
                    default_payment_method: Some(payment_method.to_string()),
                    ..Default::default()
                },
            );
        if let Some(c) = test_clock {
            req = req.test_clock(c);
        }
        let c = req.send(&self.metered("create test customer")).await.map_err(StripeFailure::from_error)?;
        Ok(c.id.to_string().into())
    }

    /// Make the customer's invoices charge `payment_method` from now on.
    pub async fn set_default_payment_method(
        &self,
        customer: &StripeCustomerId,
        payment_method: &str,
    ) -> Result<(), StripeFailure> {
        use stripe_core::customer::{UpdateCustomer, UpdateCustomerInvoiceSettings};
        UpdateCustomer::new(customer.as_str())
            .invoice_settings(UpdateCustomerInvoiceSettings {
                default_payment_method: Some(payment_method.to_string()),
                ..Default::default()
            })
            .send(&self.metered("set default payment method"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(())
    }

    /// A subscription to one price, charged to the customer's default method; its id.
    pub async fn create_subscription(
        &self,
        customer: &StripeCustomerId,
        price: &StripePriceId,
        organization_id: i64,
    ) -> Result<StripeSubscriptionId, StripeFailure> {
        use stripe_billing::subscription::{CreateSubscription, CreateSubscriptionItems};
        let mut metadata = HashMap::new();
        metadata.insert("organization_id".to_string(), organization_id.to_string());
        let metadata = with_request_id(metadata);
        let s = CreateSubscription::new()
            .customer(customer.as_str())
            .items(vec![CreateSubscriptionItems {
                price: Some(price.as_str().to_string()),
                quantity: Some(1),
                ..Default::default()
            }])
            .metadata(metadata)
            .send(&self.metered("create subscription"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(s.id.to_string().into())
    }

    /// A test clock frozen at `at`; its id.
    pub async fn create_test_clock(&self, at: DateTime<Utc>, name: &str) -> Result<String, StripeFailure> {
        use stripe_billing::test_helpers_test_clock::CreateTestHelpersTestClock;
        let c = CreateTestHelpersTestClock::new(at.timestamp())
            .name(name)
            .send(&self.metered("create test clock"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(c.id.to_string())
    }

    /// Move a test clock to `to`: renewals and period ends up to then happen.
    pub async fn advance_test_clock(&self, clock: &str, to: DateTime<Utc>) -> Result<(), StripeFailure> {
        use stripe_billing::test_helpers_test_clock::AdvanceTestHelpersTestClock;
        AdvanceTestHelpersTestClock::new(clock, to.timestamp())
            .send(&self.metered("advance test clock"))
            .await
            .map_err(StripeFailure::from_error)?;
        Ok(())
    }
}

fn checkout_snapshot(s: &stripe_shared::CheckoutSession) -> CheckoutSnapshot {
    CheckoutSnapshot {
        id: s.id.to_string().into(),
        status: match s.status {
            Some(stripe_shared::CheckoutSessionStatus::Complete) => CheckoutStatus::Complete,
            Some(stripe_shared::CheckoutSessionStatus::Expired) => CheckoutStatus::Expired,
            _ => CheckoutStatus::Open,
        },
        client_reference_id: s.client_reference_id.clone(),
        subscription: s.subscription.as_ref().map(|x| x.id().to_string().into()),
        url: s.url.clone(),
        price_id: s.metadata.as_ref().and_then(|m| m.get("price_id")).and_then(|v| v.parse().ok()),
        quantity: s.metadata.as_ref().and_then(|m| m.get("quantity")).and_then(|v| v.parse().ok()),
    }
}
