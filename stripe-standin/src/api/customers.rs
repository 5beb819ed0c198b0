//! `/v1/customers`: create, retrieve, update, delete, list; attaching Stripe's named test
//! payment methods (`pm_card_visa`, `pm_card_chargeCustomerFail`, `pm_card_chargeDeclined`).

use serde_json::{Value, json};

use super::found;
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::params;
use crate::state::{Card, Inner};

pub fn create(st: &mut Inner, p: &Value) -> ApiResult {
    let clock = params::string(p, "test_clock")?;
    if let Some(c) = clock.as_deref().filter(|c| !st.clocks.contains(c)) {
        return Err(ApiError::missing("test_clock", c, "test_clock"));
    }
    let now = clock
        .as_deref()
        .and_then(|c| st.clocks.get(c))
        .and_then(|c| c["frozen_time"].as_i64())
        .unwrap_or_else(crate::clock::real_now);
    let id = new_id("cus");
    let mut customer = json!({
        "id": id,
        "object": "customer",
        "address": null,
        "balance": 0,
        "created": now,
        "currency": null,
        "default_source": null,
        "delinquent": false,
        "description": params::string(p, "description")?,
        "discount": null,
        "email": params::string(p, "email")?,
        "invoice_prefix": crate::ids::random_string(8).to_uppercase(),
        "invoice_settings": {
            "custom_fields": null,
            "default_payment_method": null,
            "footer": null,
            "rendering_options": null
        },
        "livemode": false,
        "metadata": params::metadata(p, "metadata")?,
        "name": params::string(p, "name")?,
        "next_invoice_sequence": 1,
        "phone": params::string(p, "phone")?,
        "preferred_locales": [],
        "shipping": null,
        "tax_exempt": "none",
        "test_clock": clock,
    });
    if let Some(pm) = params::string(p, "payment_method")? {
        attach(st, &pm, "payment_method")?;
    }
    if let Some(pm) = invoice_default_pm(p)? {
        attach(st, &pm, "invoice_settings[default_payment_method]")?;
        customer["invoice_settings"]["default_payment_method"] = json!(pm);
    }
    st.customers.insert(with_private(&customer, p)?);
    st.emit("customer.created", &customer, None);
    Ok(customer)
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(public(found(&st.customers, id, "customer")?.clone()))
}

pub fn update(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let before = found(&st.customers, id, "customer")?.clone();
    if before["deleted"] == true {
        return Err(ApiError::missing("customer", id, "id"));
    }
    let mut after = before.clone();
    for field in ["email", "name", "description", "phone"] {
        if let Some(v) = params::nullable(p, field)? {
            after[field] = v;
        }
    }
    params::apply_metadata(p, "metadata", &mut after["metadata"])?;
    if let Some(pm) = invoice_default_pm(p)? {
        attach(st, &pm, "invoice_settings[default_payment_method]")?;
        after["invoice_settings"]["default_payment_method"] = json!(pm);
    }
    st.customers.insert(after.clone());
    let (before, after) = (public(before), public(after));
    if before != after {
        st.emit("customer.updated", &after, Some(&before));
    }
    Ok(after)
}

pub fn delete(st: &mut Inner, id: &str) -> ApiResult {
    let customer = found(&st.customers, id, "customer")?.clone();
    st.customers.insert(json!({ "id": id, "object": "customer", "deleted": true }));
    st.emit("customer.deleted", &public(customer), None);
    Ok(json!({ "id": id, "object": "customer", "deleted": true }))
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let email = params::string(p, "email")?;
    let mut out = vec![];
    for c in st.customers.newest_first() {
        if c["deleted"] == true || !params::range_matches(p, "created", c["created"].as_i64().unwrap_or(0))? {
            continue;
        }
        if email.as_ref().is_some_and(|e| c["email"] != e.as_str()) {
            continue;
        }
        out.push(public(c.clone()));
    }
    params::list_page(p, "/v1/customers", out)
}

fn invoice_default_pm(p: &Value) -> ApiResult<Option<String>> {
    match p.get("invoice_settings") {
        None => Ok(None),
        Some(settings) => params::string(settings, "default_payment_method")
            .map_err(|_| ApiError::invalid("invoice_settings[default_payment_method]", "Invalid string")),
    }
}

/// Attaching a payment method: unknown ids are a 404, a declining card a 402 like Stripe's.
fn attach(st: &Inner, pm: &str, param: &str) -> ApiResult<()> {
    match st.card_of(pm) {
        None => Err(ApiError::missing("PaymentMethod", pm, param)),
        Some(Card::Declines) => Err(ApiError::card_declined(param)),
        Some(_) => Ok(()),
    }
}

/// Stripe only attaches `payment_method`; the stand-in remembers it (privately) so that
/// charges have a card when no default is set.
fn with_private(customer: &Value, p: &Value) -> ApiResult<Value> {
    let mut stored = customer.clone();
    if let Some(pm) = params::string(p, "payment_method")? {
        stored["attached_payment_method"] = json!(pm);
    }
    Ok(stored)
}

/// The customer as the API shows it (without the stand-in's private fields).
pub fn public(mut customer: Value) -> Value {
    if let Some(m) = customer.as_object_mut() {
        m.remove("attached_payment_method");
    }
    customer
}
