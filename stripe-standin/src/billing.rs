//! Billing behaviour shared by the API and the hosted page: creating subscriptions and their
//! items, invoicing and charging them, renewing and cancelling them when a test clock moves.
//!
//! Subscriptions are stored without their `items` list; items live in their own table and are
//! joined (with their current price and the derived `plan`) when a subscription is rendered.

use serde_json::{Value, json};

use crate::clock::{Interval, add_interval};
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::state::{Card, Inner};
use crate::status::{InvoicePaymentStatus, InvoiceStatus, SubscriptionStatus};

/// One requested subscription item.
#[derive(Debug, Clone)]
pub struct NewItem {
    pub price: String,
    pub quantity: u64,
    pub metadata: Value,
}

/// The legacy `plan` object Stripe still derives from a recurring price.
pub fn plan_of(price: &Value) -> Value {
    json!({
        "id": price["id"],
        "object": "plan",
        "active": price["active"],
        "amount": price["unit_amount"],
        "amount_decimal": price["unit_amount_decimal"],
        "billing_scheme": "per_unit",
        "created": price["created"],
        "currency": price["currency"],
        "interval": price["recurring"]["interval"],
        "interval_count": price["recurring"]["interval_count"],
        "livemode": false,
        "metadata": price["metadata"],
        "meter": null,
        "nickname": price["nickname"],
        "product": price["product"],
        "tiers_mode": null,
        "transform_usage": null,
        "trial_period_days": null,
        "usage_type": "licensed",
    })
}

/// A subscription item as the API shows it: stored item plus its price object and plan.
pub fn render_item(st: &Inner, id: &str) -> Option<Value> {
    let mut item = st.items.get(id)?.clone();
    let price = st.prices.get(item["price"].as_str()?)?.clone();
    item["plan"] = plan_of(&price);
    item["price"] = price;
    Some(item)
}

/// Ids of a subscription's items, oldest first.
pub fn item_ids(st: &Inner, sub_id: &str) -> Vec<String> {
    st.items
        .oldest_first()
        .filter(|i| i["subscription"] == sub_id)
        .filter_map(|i| i["id"].as_str().map(str::to_string))
        .collect()
}

/// A subscription as the API shows it, with its `items` list.
pub fn render_subscription(st: &Inner, id: &str) -> Option<Value> {
    let mut sub = st.subscriptions.get(id)?.clone();
    let items: Vec<Value> = item_ids(st, id).iter().filter_map(|i| render_item(st, i)).collect();
    sub["items"] = json!({
        "object": "list",
        "data": items,
        "has_more": false,
        "total_count": items.len(),
        "url": format!("/v1/subscription_items?subscription={id}"),
    });
    Some(sub)
}

/// Check requested items: prices exist, are recurring, and share currency and interval.
/// Returns the currency and the billing interval.
pub fn validate_items(st: &Inner, items: &[NewItem], param: &str) -> ApiResult<(String, Interval, i64)> {
    let mut shape: Option<(String, Interval, i64)> = None;
    if items.is_empty() {
        return Err(ApiError::required(&format!("{param}[0][price]")));
    }
    for (i, item) in items.iter().enumerate() {
        let p = format!("{param}[{i}][price]");
        let price = st.prices.get(&item.price).ok_or_else(|| ApiError::missing("price", &item.price, &p))?;
        if price["active"] != true {
            return Err(ApiError::invalid(&p, format!("The price specified ({}) is inactive.", item.price)));
        }
        let interval = price["recurring"]["interval"]
            .as_str()
            .and_then(Interval::parse)
            .ok_or_else(|| ApiError::invalid(&p, format!("The price specified ({}) is not recurring.", item.price)))?;
        let count = price["recurring"]["interval_count"].as_i64().unwrap_or(1);
        let currency = price["currency"].as_str().unwrap_or("usd").to_string();
        let this = (currency, interval, count);
        match &shape {
            None => shape = Some(this),
            Some(first) if *first != this => {
                return Err(ApiError::invalid(
                    &p,
                    "All prices on a subscription must have the same currency and billing interval.",
                ));
            }
            Some(_) => {}
        }
    }
    // `items` is non-empty, so `shape` is set.
    shape.ok_or_else(|| ApiError::required(param))
}

/// The payment method a subscription charges: its own default, else the customer's.
pub fn payment_method_for(st: &Inner, sub: &Value) -> Option<String> {
    if let Some(pm) = sub["default_payment_method"].as_str() {
        return Some(pm.to_string());
    }
    let customer = st.customers.get(sub["customer"].as_str()?)?;
    customer["invoice_settings"]["default_payment_method"]
        .as_str()
        .or_else(|| customer["attached_payment_method"].as_str())
        .map(str::to_string)
}

/// Everything needed to start a subscription.
pub struct NewSubscription {
    pub customer: String,
    pub items: Vec<NewItem>,
    pub metadata: Value,
    pub default_payment_method: Option<String>,
    /// How the first invoice's charge goes; `None` charges the subscription's payment method.
    pub first_charge: Option<Card>,
}

/// Create a subscription with its first invoice, charge it, and record the events.
/// Paid → `active`; payment failed → `incomplete` with an open invoice.
pub fn create_subscription(st: &mut Inner, new: NewSubscription) -> ApiResult<String> {
    let (currency, interval, count) = validate_items(st, &new.items, "items")?;
    let now = st.now_for_customer(Some(&new.customer));
    let end = add_interval(now, interval, count);
    let clock = st.customers.get(&new.customer).map(|c| c["test_clock"].clone()).unwrap_or(Value::Null);
    let id = new_id("sub");
    let sub = json!({
        "id": id,
        "object": "subscription",
        "application": null,
        "application_fee_percent": null,
        "automatic_tax": { "disabled_reason": null, "enabled": false, "liability": null },
        "billing_cycle_anchor": now,
        "billing_cycle_anchor_config": null,
        "billing_mode": { "type": "flexible", "flexible": { "proration_discounts": "included" }, "updated_at": now },
        "billing_schedules": [],
        "billing_thresholds": null,
        "cancel_at": null,
        "cancel_at_period_end": false,
        "canceled_at": null,
        "cancellation_details": { "comment": null, "feedback": null, "reason": null },
        "collection_method": "charge_automatically",
        "created": now,
        "currency": currency,
        "customer": new.customer,
        "days_until_due": null,
        "default_payment_method": new.default_payment_method,
        "default_source": null,
        "default_tax_rates": [],
        "description": null,
        "discounts": [],
        "ended_at": null,
        "invoice_settings": { "account_tax_ids": null, "issuer": { "type": "self" } },
        "latest_invoice": null,
        "livemode": false,
        "metadata": new.metadata,
        "next_pending_invoice_item_invoice": null,
        "on_behalf_of": null,
        "pause_collection": null,
        "payment_settings": {
            "payment_method_options": null,
            "payment_method_types": null,
            "save_default_payment_method": "off"
        },
        "pending_invoice_item_interval": null,
        "pending_setup_intent": null,
        "pending_update": null,
        "schedule": null,
        "start_date": now,
        "status": SubscriptionStatus::Incomplete,
        "test_clock": clock,
        "transfer_data": null,
        "trial_end": null,
        "trial_settings": { "end_behavior": { "missing_payment_method": "create_invoice" } },
        "trial_start": null,
    });
    st.subscriptions.insert(sub);
    for item in &new.items {
        add_item(st, &id, item, now, end, now);
    }
    let charge = match new.first_charge {
        Some(card) => Some(card),
        None => {
            let stored = st.subscriptions.get(&id).cloned().unwrap_or(Value::Null);
            payment_method_for(st, &stored).and_then(|pm| st.card_of(&pm))
        }
    };
    // Stripe's `created` event already shows the outcome of the first, synchronous charge.
    let status = if charge == Some(Card::Pays) { SubscriptionStatus::Active } else { SubscriptionStatus::Incomplete };
    set_field(st, &id, "status", json!(status));
    let invoice = create_invoice(st, &id, "subscription_create", now, end, now);
    set_field(st, &id, "latest_invoice", json!(invoice));
    if let Some(snapshot) = render_subscription(st, &id) {
        st.emit("customer.subscription.created", &snapshot, None);
    }
    emit_invoice(st, &invoice, "invoice.created");
    finalize_invoice(st, &invoice, now);
    charge_invoice(st, &invoice, charge, now);
    Ok(id)
}

pub fn set_field(st: &mut Inner, sub_id: &str, field: &str, value: Value) {
    if let Some(sub) = st.subscriptions.get_mut(sub_id) {
        sub[field] = value;
    }
}

/// Add an item to a subscription for the period `start..end`.
pub fn add_item(st: &mut Inner, sub_id: &str, item: &NewItem, start: i64, end: i64, now: i64) -> String {
    insert_item(st, new_id("si"), sub_id, item, (start, end), now)
}

/// Add an item whose id was chosen beforehand (an update's plan names its new items).
pub fn insert_item(
    st: &mut Inner,
    id: String,
    sub_id: &str,
    item: &NewItem,
    (start, end): (i64, i64),
    now: i64,
) -> String {
    st.items.insert(json!({
        "id": id,
        "object": "subscription_item",
        "billing_thresholds": null,
        "created": now,
        "current_period_end": end,
        "current_period_start": start,
        "discounts": [],
        "metadata": item.metadata,
        "price": item.price,
        "quantity": item.quantity,
        "subscription": sub_id,
        "tax_rates": [],
    }));
    id
}

/// A recurring price's billing interval and interval count.
pub fn price_interval(st: &Inner, price: &str) -> Option<(Interval, i64)> {
    let price = st.prices.get(price)?;
    let interval = price["recurring"]["interval"].as_str().and_then(Interval::parse)?;
    Some((interval, price["recurring"]["interval_count"].as_i64().unwrap_or(1)))
}

/// The current period of a subscription, from its items (they share one period).
pub fn current_period(st: &Inner, sub_id: &str) -> Option<(i64, i64)> {
    let first = item_ids(st, sub_id).into_iter().next()?;
    let item = st.items.get(&first)?;
    Some((item["current_period_start"].as_i64()?, item["current_period_end"].as_i64()?))
}

/// One line of an invoice before it is shaped as Stripe's `line_item`: a subscription item's
/// price for a period, or a proration of it.
#[derive(Debug, Clone)]
pub struct Charge {
    pub subscription_item: String,
    pub price: String,
    pub quantity: u64,
    pub amount: i64,
    pub period: (i64, i64),
    pub proration: bool,
    pub description: String,
    /// The pending invoice item this line bills (prorations are invoice items first).
    pub invoice_item: Option<String>,
}

/// A subscription item as billing sees it: (subscription item id, price id, quantity).
pub type Billed = (String, String, u64);

/// The subscription's items as they stand, oldest first.
pub fn current_items(st: &Inner, sub_id: &str) -> Vec<Billed> {
    item_ids(st, sub_id)
        .into_iter()
        .filter_map(|id| {
            let item = st.items.get(&id)?;
            let price = item["price"].as_str()?.to_string();
            Some((id, price, item["quantity"].as_u64().unwrap_or(1)))
        })
        .collect()
}

/// The product's name for a price, as line descriptions show it.
pub fn product_name(st: &Inner, price: &str) -> String {
    let product = st.prices.get(price).and_then(|p| p["product"].as_str()).unwrap_or_default();
    st.products.get(product).and_then(|p| p["name"].as_str()).unwrap_or(product).to_string()
}

pub fn unit_amount(st: &Inner, price: &str) -> i64 {
    st.prices.get(price).and_then(|p| p["unit_amount"].as_i64()).unwrap_or(0)
}

/// What each of `items` costs for the whole period `start..end`.
pub fn period_charges(st: &Inner, items: &[Billed], start: i64, end: i64) -> Vec<Charge> {
    items
        .iter()
        .map(|(si, price, quantity)| Charge {
            subscription_item: si.clone(),
            price: price.clone(),
            quantity: *quantity,
            amount: unit_amount(st, price) * *quantity as i64,
            period: (start, end),
            proration: false,
            description: format!("{quantity} × {}", product_name(st, price)),
            invoice_item: None,
        })
        .collect()
}

/// The subscription's pending invoice items (prorations not invoiced yet), oldest first: the
/// next invoice of the subscription bills them.
pub fn pending_charges(st: &Inner, sub_id: &str) -> Vec<Charge> {
    st.invoice_items
        .oldest_first()
        .filter(|ii| ii["invoice"].is_null() && ii["parent"]["subscription_details"]["subscription"] == sub_id)
        .map(|ii| Charge {
            subscription_item: ii["parent"]["subscription_details"]["subscription_item"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            price: ii["pricing"]["price_details"]["price"].as_str().unwrap_or_default().to_string(),
            quantity: ii["quantity"].as_u64().unwrap_or(1),
            amount: ii["amount"].as_i64().unwrap_or(0),
            period: (ii["period"]["start"].as_i64().unwrap_or(0), ii["period"]["end"].as_i64().unwrap_or(0)),
            proration: ii["proration"] == true,
            description: ii["description"].as_str().unwrap_or_default().to_string(),
            invoice_item: ii["id"].as_str().map(str::to_string),
        })
        .collect()
}

/// `num / den` as a decimal string (at most 12 places), for `unit_amount_decimal`.
fn decimal(num: i64, den: u64) -> String {
    if den == 0 || num % den as i64 == 0 {
        return (if den == 0 { num } else { num / den as i64 }).to_string();
    }
    let scaled = (i128::from(num) * 1_000_000_000_000) / i128::from(den);
    let sign = if scaled < 0 { "-" } else { "" };
    let (whole, frac) = (scaled.abs() / 1_000_000_000_000, scaled.abs() % 1_000_000_000_000);
    format!("{sign}{whole}.{}", format!("{frac:012}").trim_end_matches('0'))
}

fn pricing(st: &Inner, c: &Charge) -> Value {
    let product = st.prices.get(&c.price).map(|p| p["product"].clone()).unwrap_or(Value::Null);
    let unit = if c.proration { decimal(c.amount, c.quantity) } else { unit_amount(st, &c.price).to_string() };
    json!({
        "type": "price_details",
        "price_details": { "price": c.price, "product": product },
        "unit_amount_decimal": unit,
    })
}

fn line_json(st: &Inner, invoice: &str, line_id: String, sub_id: &str, currency: &Value, c: &Charge) -> Value {
    json!({
        "id": line_id,
        "object": "line_item",
        "amount": c.amount,
        "currency": currency,
        "description": c.description,
        "discount_amounts": [],
        // Stripe makes prorations non-discountable: a discount is already in their amount.
        "discountable": !c.proration,
        "discounts": [],
        "invoice": invoice,
        "livemode": false,
        "metadata": {},
        "parent": {
            "type": "subscription_item_details",
            "invoice_item_details": null,
            "subscription_item_details": {
                "invoice_item": c.invoice_item,
                "proration": c.proration,
                "proration_details": { "credited_items": null },
                "subscription": sub_id,
                "subscription_item": c.subscription_item,
            }
        },
        "period": { "end": c.period.1, "start": c.period.0 },
        "pretax_credit_amounts": [],
        "pricing": pricing(st, c),
        "quantity": c.quantity,
        "subtotal": c.amount,
        "taxes": [],
    })
}

/// A pending invoice item for a proration, as Stripe shows `invoiceitem` objects.
pub fn create_invoice_item(st: &mut Inner, sub_id: &str, c: &Charge, now: i64) -> String {
    let id = new_id("ii");
    let sub = st.subscriptions.get(sub_id).cloned().unwrap_or(Value::Null);
    let item = json!({
        "id": id,
        "object": "invoiceitem",
        "amount": c.amount,
        "currency": sub["currency"],
        "customer": sub["customer"],
        "customer_account": null,
        "date": now,
        "description": c.description,
        "discountable": !c.proration,
        "discounts": [],
        "invoice": null,
        "livemode": false,
        "metadata": {},
        "net_amount": c.amount,
        "parent": {
            "type": "subscription_details",
            "subscription_details": { "subscription": sub_id, "subscription_item": c.subscription_item },
        },
        "period": { "end": c.period.1, "start": c.period.0 },
        "pricing": pricing(st, c),
        "proration": c.proration,
        "proration_details": { "credited_items": null, "discount_amounts": [] },
        "quantity": c.quantity,
        "quantity_decimal": c.quantity.to_string(),
        "tax_rates": [],
        "test_clock": sub["test_clock"],
    });
    st.invoice_items.insert(item.clone());
    st.emit("invoiceitem.created", &item, None);
    id
}

/// An invoice object of the subscription billing `charges`, as a draft. The invoice id and the
/// line id prefix differ between stored invoices (`in_…`, `il`) and previews (`upcoming_in_…`,
/// `il_tmp`).
pub fn invoice_json(
    st: &Inner,
    (id, line_prefix): (&str, &str),
    sub_id: &str,
    reason: &str,
    charges: &[Charge],
    (start, end): (i64, i64),
    now: i64,
) -> Value {
    let sub = st.subscriptions.get(sub_id).cloned().unwrap_or(Value::Null);
    let currency = sub["currency"].clone();
    let lines: Vec<Value> =
        charges.iter().map(|c| line_json(st, id, new_id(line_prefix), sub_id, &currency, c)).collect();
    let total: i64 = charges.iter().map(|c| c.amount).sum();
    let customer_id = sub["customer"].as_str().unwrap_or_default().to_string();
    let customer = st.customers.get(&customer_id).cloned().unwrap_or(Value::Null);
    let line_count = lines.len();
    let mut invoice = json!({
        "id": id,
        "object": "invoice",
        "account_country": "US",
        "account_name": "Stripe stand-in",
        "account_tax_ids": null,
        "amount_due": total,
        "amount_overpaid": 0,
        "amount_paid": 0,
        "amount_remaining": total,
        "amount_shipping": 0,
        "application": null,
        "attempt_count": 0,
        "attempted": false,
        "auto_advance": true,
        "automatic_tax": { "disabled_reason": null, "enabled": false, "liability": null, "provider": null, "status": null },
        "automatically_finalizes_at": null,
        "billing_reason": reason,
        "collection_method": "charge_automatically",
        "created": now,
        "currency": currency,
        "custom_fields": null,
        "customer": customer_id,
        "customer_address": null,
        "customer_email": customer["email"],
        "customer_name": customer["name"],
        "customer_phone": null,
        "customer_shipping": null,
        "customer_tax_exempt": "none",
        "customer_tax_ids": [],
        "default_payment_method": null,
        "default_source": null,
        "default_tax_rates": [],
        "description": null,
        "discounts": [],
        "due_date": null,
        "effective_at": null,
        "ending_balance": null,
        "footer": null,
        "from_invoice": null,
        "hosted_invoice_url": format!("{}/i/{id}", st.base_url),
        "invoice_pdf": null,
        "issuer": { "type": "self" },
        "last_finalization_error": null,
        "latest_revision": null,
        "lines": {
            "object": "list",
            "data": lines,
            "has_more": false,
            "total_count": line_count,
            "url": format!("/v1/invoices/{id}/lines"),
        },
        "livemode": false,
        "metadata": {},
        "next_payment_attempt": null,
        "number": null,
        "on_behalf_of": null,
        "parent": {
            "type": "subscription_details",
            "quote_details": null,
            "subscription_details": { "metadata": sub["metadata"], "subscription": sub_id },
        },
        "payment_settings": { "default_mandate": null, "payment_method_options": null, "payment_method_types": null },
        "period_end": end,
        "period_start": start,
        "post_payment_credit_notes_amount": 0,
        "pre_payment_credit_notes_amount": 0,
        "receipt_number": null,
        "rendering": null,
        "shipping_cost": null,
        "shipping_details": null,
        "starting_balance": 0,
        "statement_descriptor": null,
        "status": InvoiceStatus::Draft,
        "status_transitions": { "finalized_at": null, "marked_uncollectible_at": null, "paid_at": null, "voided_at": null },
        "subtotal": total,
        "subtotal_excluding_tax": total,
        "test_clock": sub["test_clock"],
        "total": total,
        "total_discount_amounts": [],
        "total_excluding_tax": total,
        "total_pretax_credit_amounts": [],
        "total_taxes": [],
        "webhooks_delivered_at": null,
    });
    apply_balance(&mut invoice, 0);
    invoice
}

/// Apply the customer's balance (negative is credit) to an invoice as Stripe does when it
/// finalizes one: credit lowers what is due, and a negative total becomes credit rather than a
/// negative amount due. Returns the customer's balance afterwards.
pub fn apply_balance(invoice: &mut Value, balance: i64) -> i64 {
    let total = invoice["total"].as_i64().unwrap_or(0);
    invoice["starting_balance"] = json!(balance);
    invoice["amount_due"] = json!(due_after_balance(total, balance));
    invoice["amount_remaining"] = json!(due_after_balance(total, balance));
    (total + balance).min(0)
}

/// What an invoice of `total` asks for once the customer's balance is applied.
pub fn due_after_balance(total: i64, balance: i64) -> i64 {
    (total + balance).max(0)
}

/// The customer's balance (negative is credit owed to the customer).
pub fn customer_balance(st: &Inner, customer: &str) -> i64 {
    st.customers.get(customer).and_then(|c| c["balance"].as_i64()).unwrap_or(0)
}

/// Store a draft invoice of the subscription billing `charges`; the pending invoice items among
/// them now belong to it.
pub fn store_invoice(
    st: &mut Inner,
    sub_id: &str,
    reason: &str,
    charges: &[Charge],
    period: (i64, i64),
    now: i64,
) -> String {
    let id = new_id("in");
    let invoice = invoice_json(st, (&id, "il"), sub_id, reason, charges, period, now);
    st.invoices.insert(invoice);
    for ii in charges.iter().filter_map(|c| c.invoice_item.as_deref()) {
        if let Some(item) = st.invoice_items.get_mut(ii) {
            item["invoice"] = json!(id);
        }
    }
    id
}

/// Create a draft invoice billing every item of the subscription for `start..end`, after the
/// subscription's pending invoice items (the prorations of changes since the last invoice).
pub fn create_invoice(st: &mut Inner, sub_id: &str, reason: &str, start: i64, end: i64, now: i64) -> String {
    let mut charges = pending_charges(st, sub_id);
    charges.extend(period_charges(st, &current_items(st, sub_id), start, end));
    store_invoice(st, sub_id, reason, &charges, (start, end), now)
}

pub fn emit_invoice(st: &mut Inner, id: &str, kind: &str) {
    if let Some(inv) = st.invoices.get(id).cloned() {
        st.emit(kind, &inv, None);
    }
}

/// Draft → open, with a number; the customer's balance is applied (and updated) now.
pub fn finalize_invoice(st: &mut Inner, id: &str, now: i64) {
    st.invoice_seq += 1;
    let seq = st.invoice_seq;
    let customer = st.invoices.get(id).and_then(|i| i["customer"].as_str()).unwrap_or_default().to_string();
    let balance = customer_balance(st, &customer);
    let Some(inv) = st.invoices.get_mut(id) else { return };
    let ending = apply_balance(inv, balance);
    inv["ending_balance"] = json!(ending);
    inv["status"] = json!(InvoiceStatus::Open);
    inv["number"] = json!(format!("STANDIN-{seq:04}"));
    inv["effective_at"] = json!(now);
    inv["status_transitions"]["finalized_at"] = json!(now);
    set_customer_balance(st, &customer, ending);
    emit_invoice(st, id, "invoice.finalized");
}

/// Record a customer's new balance, with `customer.updated` when it changed.
fn set_customer_balance(st: &mut Inner, customer: &str, balance: i64) {
    let Some(before) = st.customers.get(customer).cloned() else { return };
    if before["balance"].as_i64() == Some(balance) {
        return;
    }
    let mut after = before.clone();
    after["balance"] = json!(balance);
    st.customers.insert(after.clone());
    let (before, after) = (crate::api::public_customer(before), crate::api::public_customer(after));
    st.emit("customer.updated", &after, Some(&before));
}

/// Charge an open invoice with `card`. Paid → `invoice.paid` (and an invoice payment);
/// otherwise the invoice stays open and `invoice.payment_failed` is recorded.
pub fn charge_invoice(st: &mut Inner, id: &str, card: Option<Card>, now: i64) -> bool {
    let Some(inv) = st.invoices.get_mut(id) else { return false };
    let due = inv["amount_due"].as_i64().unwrap_or(0);
    let paid = due == 0 || card == Some(Card::Pays);
    inv["attempted"] = json!(true);
    inv["attempt_count"] = json!(inv["attempt_count"].as_i64().unwrap_or(0) + 1);
    let currency = inv["currency"].clone();
    if paid {
        inv["status"] = json!(InvoiceStatus::Paid);
        inv["amount_paid"] = json!(due);
        inv["amount_remaining"] = json!(0);
        inv["status_transitions"]["paid_at"] = json!(now);
        inv["next_payment_attempt"] = Value::Null;
        st.invoice_payments.insert(json!({
            "id": new_id("inpay"),
            "object": "invoice_payment",
            "amount_paid": due,
            "amount_requested": due,
            "created": now,
            "currency": currency,
            "invoice": id,
            "is_default": true,
            "livemode": false,
            "payment": { "type": "payment_intent", "payment_intent": new_id("pi") },
            "status": InvoicePaymentStatus::Paid,
            "status_transitions": { "canceled_at": null, "paid_at": now },
        }));
        emit_invoice(st, id, "invoice.paid");
        emit_invoice(st, id, "invoice.payment_succeeded");
    } else {
        // Stripe's smart retries would try again later; the stand-in does not retry.
        inv["next_payment_attempt"] = Value::Null;
        emit_invoice(st, id, "invoice.payment_failed");
    }
    paid
}

/// Apply a change to a stored subscription and record `customer.subscription.updated` with
/// the attributes that changed.
pub fn update_subscription(
    st: &mut Inner,
    id: &str,
    change: impl FnOnce(&mut Inner) -> ApiResult<()>,
) -> ApiResult<Value> {
    let before = render_subscription(st, id).ok_or_else(|| ApiError::missing("subscription", id, "id"))?;
    change(st)?;
    let after = render_subscription(st, id).ok_or_else(|| ApiError::missing("subscription", id, "id"))?;
    if before != after {
        st.emit("customer.subscription.updated", &after, Some(&before));
    }
    Ok(after)
}

/// End a subscription at `at`: status canceled, `customer.subscription.deleted`.
pub fn cancel_subscription(st: &mut Inner, id: &str, at: i64, reason: &str) -> ApiResult<Value> {
    let sub = st.subscriptions.get_mut(id).ok_or_else(|| ApiError::missing("subscription", id, "id"))?;
    if SubscriptionStatus::of(sub) == Some(SubscriptionStatus::Canceled) {
        return Err(ApiError::invalid("subscription", "This subscription has already been canceled."));
    }
    sub["status"] = json!(SubscriptionStatus::Canceled);
    sub["ended_at"] = json!(at);
    if sub["canceled_at"].is_null() {
        sub["canceled_at"] = json!(at);
    }
    sub["cancellation_details"]["reason"] = json!(reason);
    let snapshot = render_subscription(st, id).unwrap_or(Value::Null);
    st.emit("customer.subscription.deleted", &snapshot, None);
    Ok(snapshot)
}

/// Bring every subscription of the clock's customers up to `now`: end those set to cancel at
/// period end, renew the others (invoice, charge, new period) once per elapsed period.
pub fn advance_clock(st: &mut Inner, clock_id: &str, now: i64) {
    let customers: Vec<String> = st
        .customers
        .oldest_first()
        .filter(|c| c["test_clock"] == clock_id)
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect();
    let subs: Vec<String> = st
        .subscriptions
        .oldest_first()
        .filter(|s| s["customer"].as_str().is_some_and(|c| customers.iter().any(|x| x == c)))
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    for sub in subs {
        advance_subscription(st, &sub, now);
    }
}

fn advance_subscription(st: &mut Inner, id: &str, now: i64) {
    // Bounded so a tiny interval and a huge jump cannot spin for ever.
    for _ in 0..1000 {
        let Some(sub) = st.subscriptions.get(id).cloned() else { return };
        let status = SubscriptionStatus::of(&sub);
        if status == Some(SubscriptionStatus::Incomplete)
            && sub["created"].as_i64().is_some_and(|c| c + 23 * 3600 <= now)
        {
            // Stripe expires a subscription whose first payment never succeeded after 23 hours.
            let _ = update_subscription(st, id, |st| {
                set_field(st, id, "status", json!(SubscriptionStatus::IncompleteExpired));
                set_field(st, id, "ended_at", json!(now));
                Ok(())
            });
            return;
        }
        if status.is_none_or(|s| s.has_ended() || s == SubscriptionStatus::Incomplete) {
            return;
        }
        let Some((_, end)) = current_period(st, id) else { return };
        if end > now {
            return;
        }
        if crate::api::schedule_boundary(st, id, end) == crate::api::Boundary::Cancel {
            let _ = cancel_subscription(st, id, end, "cancellation_requested");
            return;
        }
        // The schedule may have changed the items: read the subscription again.
        let Some(sub) = st.subscriptions.get(id).cloned() else { return };
        if sub["cancel_at_period_end"] == true || sub["cancel_at"].as_i64().is_some_and(|c| c <= end) {
            let _ = cancel_subscription(st, id, end, "cancellation_requested");
            return;
        }
        renew(st, id, &sub, end);
    }
}

/// Start the next period at `start`: move the items' periods, invoice and charge.
fn renew(st: &mut Inner, id: &str, sub: &Value, start: i64) {
    let first = current_items(st, id).into_iter().next();
    let Some((interval, count)) = first.and_then(|(_, price, _)| price_interval(st, &price)) else { return };
    let end = add_interval(start, interval, count);
    let pause = sub["pause_collection"]["behavior"].as_str().map(str::to_string);
    let card = payment_method_for(st, sub).and_then(|pm| st.card_of(&pm));
    let mut invoice = String::new();
    let result = update_subscription(st, id, |st| {
        for item in item_ids(st, id) {
            if let Some(i) = st.items.get_mut(&item) {
                i["current_period_start"] = json!(start);
                i["current_period_end"] = json!(end);
            }
        }
        invoice = create_invoice(st, id, "subscription_cycle", start, end, start);
        set_field(st, id, "latest_invoice", json!(invoice));
        Ok(())
    });
    if result.is_err() {
        return;
    }
    emit_invoice(st, &invoice, "invoice.created");
    if let Some(paid) = collect(st, &invoice, pause.as_deref(), Collection::Charge(card), start) {
        let next = if paid { SubscriptionStatus::Active } else { SubscriptionStatus::PastDue };
        if SubscriptionStatus::of(sub) != Some(next) {
            let _ = update_subscription(st, id, |st| {
                set_field(st, id, "status", json!(next));
                Ok(())
            });
        }
    }
}

/// How a new invoice is collected once finalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collection {
    /// Charge it with this card (`None`: no usable payment method, so the charge fails).
    Charge(Option<Card>),
    /// Leave it open for the customer to pay, as `payment_behavior=default_incomplete` does.
    LeaveOpen,
}

/// Finalize a new subscription invoice and collect it. Paused collection leaves it a draft,
/// voids it or writes it off instead. Whether it was paid; `None` when no charge was made.
pub fn collect(st: &mut Inner, invoice: &str, pause: Option<&str>, how: Collection, now: i64) -> Option<bool> {
    match pause {
        Some("keep_as_draft") => None,
        Some(behavior) => {
            finalize_invoice(st, invoice, now);
            let (status, stamp) = if behavior == "void" {
                (InvoiceStatus::Void, "voided_at")
            } else {
                (InvoiceStatus::Uncollectible, "marked_uncollectible_at")
            };
            if let Some(inv) = st.invoices.get_mut(invoice) {
                inv["status"] = json!(status);
                inv["status_transitions"][stamp] = json!(now);
                if status == InvoiceStatus::Void {
                    inv["amount_remaining"] = json!(0);
                }
            }
            let kind = if status == InvoiceStatus::Void { "invoice.voided" } else { "invoice.marked_uncollectible" };
            emit_invoice(st, invoice, kind);
            None
        }
        None => {
            finalize_invoice(st, invoice, now);
            let due = st.invoices.get(invoice).and_then(|i| i["amount_due"].as_i64()).unwrap_or(0);
            match how {
                Collection::Charge(card) => Some(charge_invoice(st, invoice, card, now)),
                // Nothing to pay is paid, as Stripe marks a zero invoice paid at finalization.
                Collection::LeaveOpen if due == 0 => Some(charge_invoice(st, invoice, None, now)),
                Collection::LeaveOpen => Some(false),
            }
        }
    }
}
