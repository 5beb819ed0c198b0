//! `/v1/subscriptions` and `/v1/subscription_items`.

use serde_json::{Value, json};

use crate::billing::{self, Collection, NewItem, NewSubscription, render_item, render_subscription};
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::proration::{self, Behavior, Plan};
use crate::state::{Card, Inner};
use crate::status::SubscriptionStatus;

fn get(st: &Inner, id: &str) -> ApiResult {
    render_subscription(st, id).ok_or_else(|| ApiError::missing("subscription", id, "id"))
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    get(st, id)
}

pub fn create(st: &mut Inner, p: &Value) -> ApiResult {
    let customer = params::required(p, "customer")?;
    if st.customers.get(&customer).is_none_or(|c| c["deleted"] == true) {
        return Err(ApiError::missing("customer", &customer, "customer"));
    }
    let items = new_items(p)?;
    let default_payment_method = params::string(p, "default_payment_method")?;
    if let Some(pm) = &default_payment_method
        && st.card_of(pm).is_none()
    {
        return Err(ApiError::missing("PaymentMethod", pm, "default_payment_method"));
    }
    let new = NewSubscription {
        customer,
        items,
        metadata: params::metadata(p, "metadata")?,
        default_payment_method,
        first_charge: None,
    };
    let id = billing::create_subscription(st, new)?;
    if params::boolean(p, "cancel_at_period_end")? == Some(true) {
        return billing::update_subscription(st, &id, |st| {
            if let Some(s) = st.subscriptions.get_mut(&id) {
                s["cancel_at_period_end"] = json!(true);
            }
            Ok(())
        });
    }
    get(st, &id)
}

fn new_items(p: &Value) -> ApiResult<Vec<NewItem>> {
    let mut items = vec![];
    for (i, item) in params::array(p, "items")?.into_iter().enumerate() {
        let price = params::string(item, "price")
            .ok()
            .flatten()
            .ok_or_else(|| ApiError::required(&format!("items[{i}][price]")))?;
        items.push(NewItem {
            price,
            quantity: quantity(item, i)?.unwrap_or(1),
            metadata: params::metadata(item, "metadata")?,
        });
    }
    Ok(items)
}

fn quantity(item: &Value, i: usize) -> ApiResult<Option<u64>> {
    let param = format!("items[{i}][quantity]");
    match params::integer(item, "quantity").map_err(|_| ApiError::invalid(&param, "Invalid integer"))? {
        None => Ok(None),
        Some(q) if q >= 0 => Ok(Some(q as u64)),
        Some(_) => Err(ApiError::invalid(&param, "Quantity must be at least 0.")),
    }
}

pub fn update(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let sub = get(st, id)?;
    if SubscriptionStatus::of(&sub) == Some(SubscriptionStatus::Canceled) && !only_metadata(p) {
        return Err(ApiError::invalid(
            "subscription",
            "A canceled subscription can only update its cancellation_details and metadata.",
        ));
    }
    let behavior = Behavior::parse(params::string(p, "proration_behavior")?, "proration_behavior")?;
    let payment = PaymentBehavior::parse(params::string(p, "payment_behavior")?)?;
    let proration_date = params::integer(p, "proration_date")?;
    let changes = proration::parse_changes(st, id, &params::array(p, "items")?, "items")?;
    let plan = if changes.is_empty() {
        None
    } else {
        let at = proration::moment(st, id, proration_date, "proration_date")?;
        Some(proration::plan(st, id, &changes, behavior, at, "items")?)
    };
    update_fields(st, id, p, plan, payment)
}

/// `payment_behavior` of an update: what happens when the invoice the update creates at once
/// cannot be paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // named after Stripe's values, which all end so
enum PaymentBehavior {
    /// Stripe's default: the update applies, the invoice stays open, the subscription is past_due.
    AllowIncomplete,
    /// Nothing applies and the answer is the payment error (402).
    ErrorIfIncomplete,
    /// The invoice is finalized but not charged; the subscription is past_due until it is paid.
    DefaultIncomplete,
}

impl PaymentBehavior {
    fn parse(value: Option<String>) -> ApiResult<Self> {
        match value.as_deref() {
            None | Some("allow_incomplete") => Ok(Self::AllowIncomplete),
            Some("error_if_incomplete") => Ok(Self::ErrorIfIncomplete),
            Some("default_incomplete") => Ok(Self::DefaultIncomplete),
            Some("pending_if_incomplete") => Err(ApiError::invalid(
                "payment_behavior",
                "The stand-in does not implement payment_behavior=pending_if_incomplete (pending updates).",
            )),
            Some(other) => Err(ApiError::invalid("payment_behavior", format!("Invalid payment_behavior: {other}"))),
        }
    }
}

fn only_metadata(p: &Value) -> bool {
    p.as_object().is_some_and(|m| m.keys().all(|k| k == "metadata" || k == "expand" || k == "cancellation_details"))
}

fn update_fields(st: &mut Inner, id: &str, p: &Value, plan: Option<Plan>, payment: PaymentBehavior) -> ApiResult {
    let cancel_at_period_end = params::boolean(p, "cancel_at_period_end")?;
    let cancel_at = params::nullable(p, "cancel_at")?;
    let default_pm = params::nullable(p, "default_payment_method")?;
    if let Some(pm) = default_pm.as_ref().and_then(Value::as_str)
        && st.card_of(pm).is_none()
    {
        return Err(ApiError::missing("PaymentMethod", pm, "default_payment_method"));
    }
    let pause = match p.get("pause_collection") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => Some(Value::Null),
        Some(v) => {
            let behavior = params::string(v, "behavior")
                .ok()
                .flatten()
                .ok_or_else(|| ApiError::required("pause_collection[behavior]"))?;
            if !matches!(behavior.as_str(), "void" | "keep_as_draft" | "mark_uncollectible") {
                return Err(ApiError::invalid("pause_collection[behavior]", format!("Invalid behavior: {behavior}")));
            }
            let resumes_at = params::integer(v, "resumes_at")
                .map_err(|_| ApiError::invalid("pause_collection[resumes_at]", "Invalid integer"))?;
            Some(json!({ "behavior": behavior, "resumes_at": resumes_at }))
        }
    };
    let cancel_at = match cancel_at {
        None => None,
        Some(Value::String(s)) => {
            Some(json!(s.parse::<i64>().map_err(|_| ApiError::invalid("cancel_at", "Invalid timestamp"))?))
        }
        Some(_) => Some(Value::Null),
    };
    // Checked now: once prorations are written, nothing may fail half-way.
    params::metadata(p, "metadata")?;
    if let Some(plan) = plan.as_ref().filter(|plan| plan.invoices_now())
        && payment == PaymentBehavior::ErrorIfIncomplete
    {
        refuse_unpayable(st, id, plan, default_pm.as_ref(), pause.as_ref())?;
    }
    let now = st.now_for_customer(st.subscriptions.get(id).and_then(|s| s["customer"].as_str()));
    let metadata_param = p.clone();
    let mut invoice = None;
    billing::update_subscription(st, id, |st| {
        if let Some(plan) = &plan {
            invoice = proration::apply(st, id, plan, now)?;
        }
        let Some(sub) = st.subscriptions.get_mut(id) else { return Ok(()) };
        if let Some(c) = cancel_at_period_end {
            sub["cancel_at_period_end"] = json!(c);
            if !c {
                sub["canceled_at"] = Value::Null;
                sub["cancellation_details"]["reason"] = Value::Null;
            } else {
                sub["cancellation_details"]["reason"] = json!("cancellation_requested");
            }
        }
        if let Some(at) = cancel_at {
            sub["cancel_at"] = at;
        }
        if let Some(pm) = default_pm {
            sub["default_payment_method"] = pm;
        }
        if let Some(pause) = pause {
            sub["pause_collection"] = pause;
        }
        params::apply_metadata(&metadata_param, "metadata", &mut sub["metadata"])?;
        Ok(())
    })?;
    if let Some(invoice) = invoice {
        collect_update_invoice(st, id, &invoice, payment, now);
    }
    get(st, id)
}

/// With `error_if_incomplete`, an update whose immediate invoice could not be paid is refused
/// before anything is written, as Stripe leaves the subscription untouched then.
fn refuse_unpayable(st: &Inner, id: &str, plan: &Plan, new_pm: Option<&Value>, pause: Option<&Value>) -> ApiResult<()> {
    let sub = st.subscriptions.get(id).cloned().unwrap_or(Value::Null);
    let paused = match pause {
        Some(p) => !p.is_null(),
        None => !sub["pause_collection"].is_null(),
    };
    let total: i64 = plan.immediate_lines(st, id).iter().map(|l| l.amount).sum();
    let balance = billing::customer_balance(st, sub["customer"].as_str().unwrap_or_default());
    if paused || billing::due_after_balance(total, balance) == 0 {
        return Ok(());
    }
    let pm = match new_pm {
        Some(pm) => pm.as_str().map(str::to_string),
        None => billing::payment_method_for(st, &sub),
    };
    match pm.as_deref().and_then(|pm| st.card_of(pm)) {
        Some(Card::Pays) => Ok(()),
        Some(_) => Err(ApiError::payment_declined()),
        None => Err(ApiError::bad_request(
            "This customer has no attached payment source or default payment method. \
             Please consider adding a default payment method.",
        )),
    }
}

/// Announce, finalize and collect the invoice an update created at once. A failed charge leaves
/// the subscription past_due (`allow_incomplete`); `default_incomplete` leaves the invoice open.
fn collect_update_invoice(st: &mut Inner, id: &str, invoice: &str, payment: PaymentBehavior, now: i64) {
    billing::emit_invoice(st, invoice, "invoice.created");
    let sub = st.subscriptions.get(id).cloned().unwrap_or(Value::Null);
    let how = match payment {
        PaymentBehavior::DefaultIncomplete => Collection::LeaveOpen,
        _ => Collection::Charge(billing::payment_method_for(st, &sub).and_then(|pm| st.card_of(&pm))),
    };
    let pause = sub["pause_collection"]["behavior"].as_str().map(str::to_string);
    if billing::collect(st, invoice, pause.as_deref(), how, now) == Some(false)
        && SubscriptionStatus::of(&sub) != Some(SubscriptionStatus::PastDue)
    {
        let _ = billing::update_subscription(st, id, |st| {
            billing::set_field(st, id, "status", json!(SubscriptionStatus::PastDue));
            Ok(())
        });
    }
}

pub fn cancel(st: &mut Inner, id: &str) -> ApiResult {
    let sub = get(st, id)?;
    let now = st.now_for_customer(sub["customer"].as_str());
    billing::cancel_subscription(st, id, now, "cancellation_requested")
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let customer = params::string(p, "customer")?;
    let price = params::string(p, "price")?;
    let status = params::string(p, "status")?;
    let mut out = vec![];
    for sub in st.subscriptions.newest_first() {
        let s = SubscriptionStatus::of(sub);
        // Besides a status, Stripe's filter takes `all` and `ended`; no filter lists the live ones.
        let ended = s.is_some_and(SubscriptionStatus::has_ended);
        let status_ok = match status.as_deref() {
            None => !ended,
            Some("all") => true,
            Some("ended") => ended,
            Some(want) => s.is_some_and(|s| s.as_str() == want),
        };
        if !status_ok || customer.as_ref().is_some_and(|c| sub["customer"] != c.as_str()) {
            continue;
        }
        let mut created_ok = true;
        for field in ["created", "current_period_start", "current_period_end"] {
            let ts = match field {
                "created" => sub["created"].as_i64(),
                _ => billing::current_period(st, sub["id"].as_str().unwrap_or_default())
                    .map(|(a, b)| if field == "current_period_start" { a } else { b }),
            };
            if p.get(field).is_some() && !params::range_matches(p, field, ts.unwrap_or(0))? {
                created_ok = false;
            }
        }
        if !created_ok {
            continue;
        }
        let Some(rendered) = render_subscription(st, sub["id"].as_str().unwrap_or_default()) else { continue };
        if let Some(pr) = &price {
            let has =
                rendered["items"]["data"].as_array().is_some_and(|d| d.iter().any(|i| i["price"]["id"] == pr.as_str()));
            if !has {
                continue;
            }
        }
        out.push(rendered);
    }
    params::list_page(p, "/v1/subscriptions", out)
}

pub fn list_items(st: &mut Inner, p: &Value) -> ApiResult {
    let sub = params::required(p, "subscription")?;
    get(st, &sub)?;
    // Stripe lists a subscription's items oldest first.
    let items = billing::item_ids(st, &sub).iter().filter_map(|i| render_item(st, i)).collect();
    params::list_page(p, "/v1/subscription_items", items)
}

pub fn retrieve_item(st: &mut Inner, id: &str) -> ApiResult {
    render_item(st, id).ok_or_else(|| ApiError::missing("subscription_item", id, "id"))
}

pub fn update_item(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let item = render_item(st, id).ok_or_else(|| ApiError::missing("subscription_item", id, "id"))?;
    let sub = item["subscription"].as_str().unwrap_or_default().to_string();
    let mut change = json!({ "id": id });
    for field in ["price", "quantity", "metadata"] {
        if let Some(v) = p.get(field) {
            change[field] = v.clone();
        }
    }
    let mut sub_params = json!({ "items": [change] });
    for field in ["proration_behavior", "proration_date", "payment_behavior"] {
        if let Some(v) = p.get(field) {
            sub_params[field] = v.clone();
        }
    }
    update(st, &sub, &sub_params)?;
    render_item(st, id).ok_or_else(|| ApiError::missing("subscription_item", id, "id"))
}
