//! `/v1/checkout/sessions` (subscription mode) and completing a session from the hosted page.

use serde_json::{Value, json};

use super::found;
use crate::billing::{self, NewItem, NewSubscription};
use crate::clock::real_now;
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::params;
use crate::state::{Card, Inner, SessionExtra};
use crate::status::CheckoutStatus;

pub fn create(st: &mut Inner, p: &Value) -> ApiResult {
    let mode = params::required(p, "mode")?;
    if mode != "subscription" {
        return Err(ApiError::invalid("mode", "The stand-in only supports mode=subscription."));
    }
    let customer = params::string(p, "customer")?;
    if let Some(c) = &customer
        && st.customers.get(c).is_none_or(|c| c["deleted"] == true)
    {
        return Err(ApiError::missing("customer", c, "customer"));
    }
    let mut items = vec![];
    for (i, li) in params::array(p, "line_items")?.into_iter().enumerate() {
        let param = format!("line_items[{i}]");
        let price =
            params::string(li, "price").ok().flatten().ok_or_else(|| ApiError::required(&format!("{param}[price]")))?;
        let quantity = params::integer(li, "quantity")
            .map_err(|_| ApiError::invalid(&format!("{param}[quantity]"), "Invalid integer"))?
            .unwrap_or(1);
        if quantity < 1 {
            return Err(ApiError::invalid(&format!("{param}[quantity]"), "Quantity must be at least 1."));
        }
        items.push(NewItem { price, quantity: quantity as u64, metadata: json!({}) });
    }
    let (currency, _, _) = billing::validate_items(st, &items, "line_items")?;
    let subscription_metadata = match p.get("subscription_data") {
        Some(data) => params::metadata(data, "metadata")?,
        None => json!({}),
    };
    let total: i64 = items
        .iter()
        .filter_map(|i| st.prices.get(&i.price).map(|p| p["unit_amount"].as_i64().unwrap_or(0) * i.quantity as i64))
        .sum();
    let success_url = params::string(p, "success_url")?;
    let cancel_url = params::string(p, "cancel_url")?;
    if success_url.is_none() && params::string(p, "ui_mode")?.as_deref() != Some("embedded") {
        return Err(ApiError::required("success_url"));
    }
    let id = format!("cs_test_{}", crate::ids::random_string(58));
    // Sessions expire in real time, even for customers on a test clock.
    let now = real_now();
    let session = json!({
        "id": id,
        "object": "checkout.session",
        "adaptive_pricing": null,
        "after_expiration": null,
        "allow_promotion_codes": null,
        "amount_subtotal": total,
        "amount_total": total,
        "automatic_tax": { "enabled": false, "liability": null, "provider": null, "status": null },
        "billing_address_collection": null,
        "cancel_url": cancel_url,
        "client_reference_id": params::string(p, "client_reference_id")?,
        "client_secret": null,
        "consent": null,
        "consent_collection": null,
        "created": now,
        "currency": currency,
        "custom_fields": [],
        "custom_text": { "after_submit": null, "shipping_address": null, "submit": null, "terms_of_service_acceptance": null },
        "customer": customer,
        "customer_creation": if customer.is_some() { Value::Null } else { json!("always") },
        "customer_details": null,
        "customer_email": params::string(p, "customer_email")?,
        "discounts": [],
        "expires_at": now + 24 * 3600,
        "invoice": null,
        "invoice_creation": null,
        "livemode": false,
        "locale": null,
        "metadata": params::metadata(p, "metadata")?,
        "mode": "subscription",
        "payment_intent": null,
        "payment_link": null,
        "payment_method_collection": "always",
        "payment_method_types": ["card"],
        "payment_status": "unpaid",
        "phone_number_collection": { "enabled": false },
        "recovered_from": null,
        "setup_intent": null,
        "shipping_address_collection": null,
        "shipping_cost": null,
        "shipping_options": [],
        "status": CheckoutStatus::Open,
        "submit_type": null,
        "subscription": null,
        "success_url": success_url,
        "total_details": { "amount_discount": 0, "amount_shipping": 0, "amount_tax": 0 },
        "ui_mode": "hosted",
        "url": format!("{}/c/pay/{id}", st.base_url),
    });
    st.sessions.insert(session.clone());
    st.session_extra.insert(
        id,
        SessionExtra {
            line_items: items.into_iter().map(|i| (i.price, i.quantity)).collect(),
            subscription_metadata,
            last_error: None,
        },
    );
    Ok(session)
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    expire_if_due(st, id);
    Ok(found(&st.sessions, id, "checkout.session")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let given = params::fields_equal(p, &["customer", "subscription"])?;
    let items = st.sessions.newest_first().filter(|s| given.keeps(s)).cloned().collect();
    params::list_page(p, "/v1/checkout/sessions", items)
}

/// `GET /v1/checkout/sessions/{id}/line_items`.
pub fn line_items(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    found(&st.sessions, id, "checkout.session")?;
    let lines = st.session_extra.get(id).map(|e| e.line_items.clone()).unwrap_or_default();
    let items = lines
        .iter()
        .filter_map(|(price_id, qty)| {
            let price = st.prices.get(price_id)?;
            let amount = price["unit_amount"].as_i64().unwrap_or(0) * *qty as i64;
            let name = st.products.get(price["product"].as_str()?).map(|p| p["name"].clone());
            Some(json!({
                "id": new_id("li"),
                "object": "item",
                "amount_discount": 0,
                "amount_subtotal": amount,
                "amount_tax": 0,
                "amount_total": amount,
                "currency": price["currency"],
                "description": name,
                "price": price,
                "quantity": qty,
            }))
        })
        .collect();
    params::list_page(p, &format!("/v1/checkout/sessions/{id}/line_items"), items)
}

pub fn expire(st: &mut Inner, id: &str) -> ApiResult {
    let session = found(&st.sessions, id, "checkout.session")?;
    if CheckoutStatus::of(session) != Some(CheckoutStatus::Open) {
        return Err(ApiError::invalid(
            "session",
            format!(
                "Only Checkout Sessions with a status in [\"open\"] can be expired. This Checkout Session has a status of \"{}\".",
                session["status"].as_str().unwrap_or_default()
            ),
        ));
    }
    set_expired(st, id);
    Ok(found(&st.sessions, id, "checkout.session")?.clone())
}

fn set_expired(st: &mut Inner, id: &str) {
    if let Some(s) = st.sessions.get_mut(id) {
        s["status"] = json!(CheckoutStatus::Expired);
        s["url"] = Value::Null;
        let snapshot = s.clone();
        st.emit("checkout.session.expired", &snapshot, None);
    }
}

/// Sessions expire on their own after `expires_at` (real time).
pub fn expire_if_due(st: &mut Inner, id: &str) {
    let due = st.sessions.get(id).is_some_and(|s| {
        CheckoutStatus::of(s) == Some(CheckoutStatus::Open) && s["expires_at"].as_i64().is_some_and(|e| e <= real_now())
    });
    if due {
        set_expired(st, id);
    }
}

/// Pay a session from the hosted page with a test card: create (or reuse) the customer, a
/// payment method, the subscription and its paid first invoice; mark the session complete.
/// A declined card changes nothing and returns the message to show.
pub fn complete(st: &mut Inner, id: &str, card: Card) -> Result<(), String> {
    expire_if_due(st, id);
    let session = st.sessions.get(id).cloned().ok_or("This checkout session does not exist.")?;
    if CheckoutStatus::of(&session) != Some(CheckoutStatus::Open) {
        return Err(format!("This checkout session is {}.", session["status"].as_str().unwrap_or("closed")));
    }
    if card == Card::Declines {
        return Err("Your card was declined.".into());
    }
    let extra = st.session_extra.get(id).cloned().ok_or("This checkout session has no line items.")?;
    let customer = match session["customer"].as_str() {
        Some(c) => c.to_string(),
        None => {
            let mut p = json!({});
            if let Some(email) = session["customer_email"].as_str() {
                p["email"] = json!(email);
            }
            let created = super::customers::create(st, &p).map_err(|e| e.message)?;
            created["id"].as_str().unwrap_or_default().to_string()
        }
    };
    // The hosted page's card becomes a payment method the subscription charges from now on.
    let pm = new_id("pm");
    st.payment_methods.insert(pm.clone(), card);
    let new = NewSubscription {
        customer: customer.clone(),
        items: extra
            .line_items
            .iter()
            .map(|(price, quantity)| NewItem { price: price.clone(), quantity: *quantity, metadata: json!({}) })
            .collect(),
        metadata: extra.subscription_metadata.clone(),
        default_payment_method: Some(pm),
        // Both paying test cards pay the first invoice; 0341 only fails later charges.
        first_charge: Some(Card::Pays),
    };
    let sub = billing::create_subscription(st, new).map_err(|e| e.message)?;
    let invoice = st.subscriptions.get(&sub).map(|s| s["latest_invoice"].clone()).unwrap_or(Value::Null);
    let email = st.customers.get(&customer).map(|c| c["email"].clone()).unwrap_or(Value::Null);
    let name = st.customers.get(&customer).map(|c| c["name"].clone()).unwrap_or(Value::Null);
    if let Some(s) = st.sessions.get_mut(id) {
        s["status"] = json!(CheckoutStatus::Complete);
        s["payment_status"] = json!("paid");
        s["customer"] = json!(customer);
        s["subscription"] = json!(sub);
        s["invoice"] = invoice;
        s["url"] = Value::Null;
        s["customer_details"] = json!({
            "address": null, "email": email, "name": name, "phone": null,
            "tax_exempt": "none", "tax_ids": [],
        });
        let snapshot = s.clone();
        st.emit("checkout.session.completed", &snapshot, None);
    }
    Ok(())
}
