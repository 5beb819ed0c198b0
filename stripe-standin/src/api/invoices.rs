//! `/v1/invoices` and `/v1/invoice_payments` (read-only: invoices come from billing).

use serde_json::Value;

use super::found;
use crate::billing;
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::state::Inner;

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
            || status.as_ref().is_some_and(|s| inv["status"] != s.as_str())
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
    let invoice = params::string(p, "invoice")?;
    let status = params::string(p, "status")?;
    let items = st
        .invoice_payments
        .newest_first()
        .filter(|ip| invoice.as_ref().is_none_or(|i| ip["invoice"] == i.as_str()))
        .filter(|ip| status.as_ref().is_none_or(|s| ip["status"] == s.as_str()))
        .cloned()
        .collect();
    params::list_page(p, "/v1/invoice_payments", items)
}

pub fn retrieve_payment(st: &mut Inner, id: &str) -> ApiResult {
    st.invoice_payments.get(id).cloned().ok_or_else(|| ApiError::missing("invoice_payment", id, "id"))
}

/// `POST /v1/invoices/{id}/pay`: retry an open invoice with the subscription's payment method
/// (or `payment_method`). Paid → the subscription becomes active again; else a 402 like Stripe.
pub fn pay(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let inv = found(&st.invoices, id, "invoice")?.clone();
    if inv["status"] != "open" {
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
        && matches!(sub["status"].as_str(), Some("past_due" | "incomplete" | "unpaid"))
    {
        billing::update_subscription(st, &sub_id, |st| {
            if let Some(s) = st.subscriptions.get_mut(&sub_id) {
                s["status"] = serde_json::json!("active");
            }
            Ok(())
        })?;
    }
    Ok(found(&st.invoices, id, "invoice")?.clone())
}
