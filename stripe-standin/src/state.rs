//! The stand-in's memory: every Stripe object as the JSON Stripe would return, kept in
//! insertion-ordered tables, plus the little private state Stripe keeps behind them (which
//! card a payment method is, a checkout session's line items, idempotency answers, faults).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::real_now;
use crate::webhooks::DeliveryMode;

/// Objects of one kind, oldest first; Stripe lists them newest first.
#[derive(Default, Serialize, Deserialize)]
pub struct Table {
    order: Vec<String>,
    rows: HashMap<String, Value>,
}

impl Table {
    pub fn insert(&mut self, obj: Value) {
        let id = obj["id"].as_str().unwrap_or_default().to_string();
        if self.rows.insert(id.clone(), obj).is_none() {
            self.order.push(id);
        }
    }
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.rows.get(id)
    }
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Value> {
        self.rows.get_mut(id)
    }
    pub fn contains(&self, id: &str) -> bool {
        self.rows.contains_key(id)
    }
    pub fn remove(&mut self, id: &str) -> Option<Value> {
        self.order.retain(|x| x != id);
        self.rows.remove(id)
    }
    /// Newest first, as Stripe's list endpoints order them.
    pub fn newest_first(&self) -> impl Iterator<Item = &Value> {
        self.order.iter().rev().filter_map(|id| self.rows.get(id))
    }
    pub fn oldest_first(&self) -> impl Iterator<Item = &Value> {
        self.order.iter().filter_map(|id| self.rows.get(id))
    }
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        self.rows.values_mut()
    }
}

/// How a payment method behaves when charged, named after Stripe's test cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Card {
    /// `pm_card_visa`, 4242…: every charge succeeds.
    Pays,
    /// `pm_card_chargeCustomerFail`, 4000…0341: attaches, later charges fail.
    ChargeFails,
    /// `pm_card_chargeDeclined`, 4000…9995: declined outright.
    Declines,
}

impl Card {
    /// Stripe's named test payment methods.
    pub fn from_test_pm(id: &str) -> Option<Card> {
        match id {
            "pm_card_visa" | "pm_card_mastercard" | "pm_card_amex" => Some(Card::Pays),
            "pm_card_chargeCustomerFail" => Some(Card::ChargeFails),
            "pm_card_chargeDeclined" => Some(Card::Declines),
            _ => None,
        }
    }
}

/// What a checkout session will buy; Stripe keeps this out of the session object itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionExtra {
    pub line_items: Vec<(String, u64)>,
    pub subscription_metadata: Value,
    /// Message to show on the hosted page after a failed attempt.
    pub last_error: Option<String>,
}

/// A stored answer for an `Idempotency-Key`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredAnswer {
    pub fingerprint: String,
    pub status: u16,
    pub body: String,
}

/// An injected API failure or stall (control API).
#[derive(Debug, Clone)]
pub struct Fault {
    pub path_prefix: String,
    /// Only requests of this method (any when None).
    pub method: Option<String>,
    /// Matching requests let through before the fault applies.
    pub skip: u32,
    pub status: Option<u16>,
    pub delay_ms: Option<u64>,
    pub times: u32,
}

/// Everything but the faults, the delivery mode and the act in progress is kept in the state file
/// (`persist`) when the stand-in has one.
#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Inner {
    /// Where the stand-in answered when this state was written (its pages' links name it).
    pub base_url: String,
    pub customers: Table,
    pub products: Table,
    pub prices: Table,
    pub sessions: Table,
    pub subscriptions: Table,
    pub items: Table,
    pub invoices: Table,
    /// Invoice items (`ii_…`): the prorations of subscription updates, pending until invoiced.
    pub invoice_items: Table,
    pub invoice_payments: Table,
    pub events: Table,
    pub clocks: Table,
    pub endpoints: Table,
    /// Each webhook endpoint's signing secret (Stripe shows it only when the endpoint is made).
    pub endpoint_secrets: HashMap<String, String>,
    pub schedules: Table,
    /// Payment methods created by the hosted page (`pm_…`) and how they charge.
    pub payment_methods: HashMap<String, Card>,
    pub session_extra: HashMap<String, SessionExtra>,
    pub idempotency: HashMap<String, StoredAnswer>,
    #[serde(skip)]
    pub faults: Vec<Fault>,
    #[serde(skip)]
    pub delivery_mode: DeliveryMode,
    /// Events recorded by the current act, delivered together when it ends (see `flush`).
    #[serde(skip)]
    pub batch: Vec<Value>,
    /// Request id and idempotency key of the API call being served, for `event.request`.
    #[serde(skip)]
    pub current_request: Option<(String, Option<String>)>,
    /// Monotonic counter so events created in the same second keep their order.
    pub event_seq: u64,
    pub invoice_seq: u64,
}

/// Shared handle to the state; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    /// How many times the state was locked, so the saver (`persist`) writes only after a change
    /// may have happened. Reads count too: some of them change state (a session expiring).
    touched: Arc<AtomicU64>,
}

impl Store {
    pub fn new(base_url: String) -> Self {
        Self::with(Inner { base_url, ..Inner::default() })
    }

    pub fn with(inner: Inner) -> Self {
        Self { inner: Arc::new(Mutex::new(inner)), touched: Arc::default() }
    }

    /// Lock the state; a panic in another handler must not wedge the whole stand-in.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        let guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Counted under the lock, so the saver, which reads the count under it too, never
        // counts a change it did not see.
        self.touched.fetch_add(1, Ordering::Relaxed);
        guard
    }

    /// The state as it is, for the saver, and the touch count it was read at.
    pub fn read_for_save<T>(&self, read: impl FnOnce(&Inner) -> T) -> (u64, T) {
        let guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (self.touched.load(Ordering::Relaxed), read(&guard))
    }
}

impl Inner {
    /// Current time for a customer: its test clock's frozen time, else real time.
    pub fn now_for_customer(&self, customer_id: Option<&str>) -> i64 {
        customer_id
            .and_then(|c| self.customers.get(c))
            .and_then(|c| c["test_clock"].as_str())
            .and_then(|clock| self.clocks.get(clock))
            .and_then(|clock| clock["frozen_time"].as_i64())
            .unwrap_or_else(real_now)
    }

    /// How a payment method charges, if it is one the stand-in knows.
    pub fn card_of(&self, pm: &str) -> Option<Card> {
        Card::from_test_pm(pm).or_else(|| self.payment_methods.get(pm).copied())
    }

    /// Find any object by id, for `expand[]`; the id prefix says which table.
    pub fn lookup_any(&self, id: &str) -> Option<Value> {
        let table = match id.split('_').next()? {
            "cus" => &self.customers,
            "prod" => &self.products,
            "price" => &self.prices,
            "cs" => &self.sessions,
            "sub" if id.starts_with("sub_sched_") => &self.schedules,
            "sub" => return crate::billing::render_subscription(self, id),
            "si" => return crate::billing::render_item(self, id),
            "in" => &self.invoices,
            "ii" => &self.invoice_items,
            "clock" => &self.clocks,
            "evt" => &self.events,
            _ => return None,
        };
        table.get(id).cloned().map(crate::api::public_customer)
    }
}
