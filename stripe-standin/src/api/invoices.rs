//! `/v1/invoices`, `/v1/invoiceitems` and `/v1/invoice_payments` (read-only: invoices and
//! invoice items come from billing), and previews (`/v1/invoices/create_preview`).

use serde_json::{Value, json};

use super::found;
use crate::billing;
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::proration::{self, Behavior};
use crate::state::Inner;
use crate::status::{InvoiceStatus, SubscriptionStatus};

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.invoices, id, "invoice")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let customer = params::string(p, "customer")?;
    let subscription = params::string(p, "subscription")?;
    let status = params::string(p, "status")?;
    let mut out = vec![];
    for inv in st.invoices.newest_first() {
        if customer.as_ref().is_some_and(|c| inv["customer"] != c.as_str())
            || subscription
                .as_ref()
                .is_some_and(|s| inv["parent"]["subscription_details"]["subscription"] != s.as_str())
            || status.as_ref().is_some_and(|s| InvoiceStatus::of(inv).is_none_or(|i| i.as_str() != s.as_str()))
            || !params::range_matches(p, "created", inv["created"].as_i64().unwrap_or(0))?
        {
            continue;
        }
        out.push(inv.clone());
    }
    params::list_page(p, "/v1/invoices", out)
}

pub fn lines(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let inv = found(&st.invoices, id, "invoice")?;
    let lines = inv["lines"]["data"].as_array().cloned().unwrap_or_default();
    params::list_page(p, &format!("/v1/invoices/{id}/lines"), lines)
}

pub fn list_payments(st: &mut Inner, p: &Value) -> ApiResult {
    let given = params::fields_equal(p, &["invoice", "status"])?;
    let items = st.invoice_payments.newest_first().filter(|ip| given.keeps(ip)).cloned().collect();
    params::list_page(p, "/v1/invoice_payments", items)
}

pub fn retrieve_payment(st: &mut Inner, id: &str) -> ApiResult {
    st.invoice_payments.get(id).cloned().ok_or_else(|| ApiError::missing("invoice_payment", id, "id"))
}

/// `POST /v1/invoices/{id}/pay`: retry an open invoice with the subscription's payment method
/// (or `payment_method`). Paid → the subscription becomes active again; else a 402 like Stripe.
pub fn pay(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let inv = found(&st.invoices, id, "invoice")?.clone();
    if InvoiceStatus::of(&inv) != Some(InvoiceStatus::Open) {
        return Err(ApiError::invalid(
            "invoice",
            format!("Invoice is already {}.", inv["status"].as_str().unwrap_or("closed")),
        ));
    }
    let sub_id = inv["parent"]["subscription_details"]["subscription"].as_str().map(str::to_string);
    let sub = sub_id.as_deref().and_then(|s| st.subscriptions.get(s)).cloned().unwrap_or(Value::Null);
    let pm = match params::string(p, "payment_method")? {
        Some(pm) => Some(pm),
        None => billing::payment_method_for(st, &sub),
    };
    let card = pm.as_deref().and_then(|pm| st.card_of(pm));
    let now = st.now_for_customer(inv["customer"].as_str());
    if !billing::charge_invoice(st, id, card, now) {
        return Err(ApiError::card_declined("payment_method"));
    }
    if let Some(sub_id) = sub_id
        && matches!(
            SubscriptionStatus::of(&sub),
            Some(SubscriptionStatus::PastDue | SubscriptionStatus::Incomplete | SubscriptionStatus::Unpaid)
        )
    {
        billing::update_subscription(st, &sub_id, |st| {
            if let Some(s) = st.subscriptions.get_mut(&sub_id) {
                s["status"] = json!(SubscriptionStatus::Active);
            }
            Ok(())
        })?;
    }
    Ok(found(&st.invoices, id, "invoice")?.clone())
}

/// `POST /v1/invoices/create_preview`: the invoice a subscription change would produce, with
/// nothing written. With `proration_behavior=always_invoice` (or a change of interval, which
/// restarts the billing cycle) it is the invoice the update creates at once; otherwise it is the
/// next renewal invoice, with the pending prorations the change would add.
pub fn create_preview(st: &mut Inner, p: &Value) -> ApiResult {
    for unsupported in ["schedule", "schedule_details", "invoice_items"] {
        if p.get(unsupported).is_some() {
            return Err(ApiError::invalid(
                unsupported,
                format!("The stand-in previews subscriptions only; {unsupported} is not implemented."),
            ));
        }
    }
    if params::string(p, "preview_mode")?.is_some_and(|m| m != "next") {
        return Err(ApiError::invalid(
            "preview_mode",
            "The stand-in only previews the next invoice (preview_mode=next).",
        ));
    }
    let empty = json!({});
    let details = match p.get("subscription_details") {
        None => &empty,
        Some(d @ Value::Object(_)) => d,
        Some(_) => return Err(ApiError::invalid("subscription_details", "Invalid hash")),
    };
    let sub_id = preview_subscription(st, p, details)?;
    let param = |name: &str| format!("subscription_details[{name}]");
    let behavior = Behavior::parse(
        params::string(details, "proration_behavior")
            .map_err(|_| ApiError::invalid(&param("proration_behavior"), "Invalid"))?,
        &param("proration_behavior"),
    )?;
    let proration_date = params::integer(details, "proration_date")
        .map_err(|_| ApiError::invalid(&param("proration_date"), "Invalid timestamp"))?;
    if proration_date.is_some() && behavior == Behavior::None {
        return Err(ApiError::invalid(
            &param("proration_date"),
            "subscription_details[proration_date] cannot be used with subscription_details[proration_behavior]=none.",
        ));
    }
    let items = params::array(details, "items").map_err(|_| ApiError::invalid(&param("items"), "Invalid array"))?;
    let changes = proration::parse_changes(st, &sub_id, &items, &param("items"))?;
    let at = proration::moment(st, &sub_id, proration_date, &param("proration_date"))?;
    let plan = proration::plan(st, &sub_id, &changes, behavior, at, &param("items"))?;
    let sub = st.subscriptions.get(&sub_id).cloned().unwrap_or(Value::Null);
    let now = st.now_for_customer(sub["customer"].as_str());
    let (lines, period, created) = if plan.invoices_now() {
        (plan.immediate_lines(st, &sub_id), (at, at), now)
    } else {
        let cancel_at_period_end = params::boolean(details, "cancel_at_period_end")
            .map_err(|_| ApiError::invalid(&param("cancel_at_period_end"), "Invalid boolean"))?
            .unwrap_or(sub["cancel_at_period_end"] == true);
        let end = plan.period.1;
        if cancel_at_period_end || sub["cancel_at"].as_i64().is_some_and(|c| c <= end) {
            // The subscription ends at the period end: no renewal invoice follows.
            return Err(no_upcoming(&sub_id));
        }
        let (lines, period) = plan.renewal_lines(st, &sub_id);
        (lines, period, end)
    };
    let id = format!("upcoming_in_{}", crate::ids::random_string(24));
    let mut invoice = billing::invoice_json(st, (&id, "il_tmp"), &sub_id, "upcoming", &lines, period, created);
    billing::apply_balance(&mut invoice, billing::customer_balance(st, sub["customer"].as_str().unwrap_or_default()));
    // A preview is never a real invoice: it has no page and no payment attempt.
    invoice["hosted_invoice_url"] = Value::Null;
    invoice["auto_advance"] = json!(false);
    invoice["next_payment_attempt"] = json!(created);
    Ok(invoice)
}

/// The subscription a preview is about: `subscription`, else the customer's subscription that
/// renews first.
fn preview_subscription(st: &Inner, p: &Value, details: &Value) -> ApiResult<String> {
    let customer = params::string(p, "customer")?;
    let Some(sub_id) = params::string(p, "subscription")? else {
        if details.get("items").is_some() {
            return Err(ApiError::invalid(
                "subscription",
                "The stand-in previews changes to existing subscriptions only: pass subscription.",
            ));
        }
        let customer = customer.ok_or_else(|| ApiError::required("customer"))?;
        found(&st.customers, &customer, "customer")?;
        return st
            .subscriptions
            .oldest_first()
            .filter(|s| s["customer"] == customer.as_str() && live(s))
            .filter_map(|s| s["id"].as_str())
            .min_by_key(|s| billing::current_period(st, s).map_or(i64::MAX, |(_, end)| end))
            .map(str::to_string)
            .ok_or_else(|| no_upcoming_for_customer(&customer));
    };
    let sub =
        st.subscriptions.get(&sub_id).ok_or_else(|| ApiError::missing("subscription", &sub_id, "subscription"))?;
    if let Some(c) = customer
        && sub["customer"] != c.as_str()
    {
        return Err(ApiError::invalid(
            "customer",
            format!("The subscription {sub_id} does not belong to customer {c}."),
        ));
    }
    if !live(sub) {
        return Err(no_upcoming(&sub_id));
    }
    Ok(sub_id)
}

fn live(sub: &Value) -> bool {
    !SubscriptionStatus::of(sub).is_some_and(SubscriptionStatus::has_ended)
}

/// Stripe's answer when there is nothing to preview.
fn no_upcoming(sub_id: &str) -> ApiError {
    let mut e = ApiError::missing("upcoming invoice", sub_id, "subscription").with_code("invoice_upcoming_none");
    e.message = format!("No upcoming invoices for subscription: {sub_id}");
    e
}

fn no_upcoming_for_customer(customer: &str) -> ApiError {
    let mut e = ApiError::missing("upcoming invoice", customer, "customer").with_code("invoice_upcoming_none");
    e.message = format!("No upcoming invoices for customer: {customer}");
    e
}

/// `GET /v1/invoiceitems`: `customer`, `invoice`, `pending`, `created`.
pub fn list_items(st: &mut Inner, p: &Value) -> ApiResult {
    let customer = params::string(p, "customer")?;
    let invoice = params::string(p, "invoice")?;
    let pending = params::boolean(p, "pending")?;
    let mut out = vec![];
    for ii in st.invoice_items.newest_first() {
        if customer.as_ref().is_some_and(|c| ii["customer"] != c.as_str())
            || invoice.as_ref().is_some_and(|i| ii["invoice"] != i.as_str())
            || pending.is_some_and(|want| ii["invoice"].is_null() != want)
            || !params::range_matches(p, "created", ii["date"].as_i64().unwrap_or(0))?
        {
            continue;
        }
        out.push(ii.clone());
    }
    params::list_page(p, "/v1/invoiceitems", out)
}

pub fn retrieve_item(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.invoice_items, id, "invoiceitem")?.clone())
}
