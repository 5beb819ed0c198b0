//! `/v1/subscriptions` and `/v1/subscription_items`.

use serde_json::{Value, json};

use crate::billing::{self, NewItem, NewSubscription, render_item, render_subscription};
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::state::Inner;

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
    if sub["status"] == "canceled" && !only_metadata(p) {
        return Err(ApiError::invalid(
            "subscription",
            "A canceled subscription can only update its cancellation_details and metadata.",
        ));
    }
    if let Some(proration) = params::string(p, "proration_behavior")?
        && !matches!(proration.as_str(), "create_prorations" | "none" | "always_invoice")
    {
        return Err(ApiError::invalid("proration_behavior", format!("Invalid proration_behavior: {proration}")));
    }
    update_fields(st, id, p)
}

fn only_metadata(p: &Value) -> bool {
    p.as_object().is_some_and(|m| m.keys().all(|k| k == "metadata" || k == "expand" || k == "cancellation_details"))
}

fn update_fields(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
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
    let items = params::array(p, "items")?;
    // Validate item changes before touching anything.
    let mut changes = vec![];
    for (i, item) in items.into_iter().enumerate() {
        let item_id =
            params::string(item, "id").map_err(|_| ApiError::invalid(&format!("items[{i}][id]"), "Invalid id"))?;
        if let Some(si) = &item_id
            && st.items.get(si).is_none_or(|x| x["subscription"] != id)
        {
            return Err(ApiError::missing("subscription_item", si, &format!("items[{i}][id]")));
        }
        let price =
            params::string(item, "price").map_err(|_| ApiError::invalid(&format!("items[{i}][price]"), "Invalid"))?;
        if let Some(pr) = &price {
            billing::validate_items(st, &[NewItem { price: pr.clone(), quantity: 1, metadata: json!({}) }], "items")
                .map_err(|mut e| {
                    e.param = Some(format!("items[{i}][price]"));
                    e
                })?;
        }
        if item_id.is_none() && price.is_none() {
            return Err(ApiError::required(&format!("items[{i}][price]")));
        }
        let deleted = params::boolean(item, "deleted")
            .map_err(|_| ApiError::invalid(&format!("items[{i}][deleted]"), "Invalid boolean"))?;
        let metadata = item.get("metadata").cloned();
        changes.push((item_id, price, quantity(item, i)?, deleted == Some(true), metadata));
    }
    let metadata_param = p.clone();
    billing::update_subscription(st, id, |st| {
        let period = billing::current_period(st, id);
        for (item_id, price, qty, deleted, metadata) in changes {
            match item_id {
                Some(si) if deleted => {
                    st.items.remove(&si);
                }
                Some(si) => {
                    if let Some(item) = st.items.get_mut(&si) {
                        if let Some(pr) = price {
                            item["price"] = json!(pr);
                        }
                        if let Some(q) = qty {
                            item["quantity"] = json!(q);
                        }
                        if let Some(m) = metadata {
                            params::apply_metadata(&json!({ "metadata": m }), "metadata", &mut item["metadata"])?;
                        }
                    }
                }
                None => {
                    let now = st.now_for_customer(st.subscriptions.get(id).and_then(|s| s["customer"].as_str()));
                    let (start, end) = period.unwrap_or((now, now));
                    let new = NewItem {
                        price: price.unwrap_or_default(),
                        quantity: qty.unwrap_or(1),
                        metadata: params::metadata(&json!({ "metadata": metadata.unwrap_or(json!({})) }), "metadata")?,
                    };
                    billing::add_item(st, id, &new, start, end, now);
                }
            }
        }
        if billing::item_ids(st, id).is_empty() {
            return Err(ApiError::invalid("items", "A subscription must have at least one item."));
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
            sub["cancel_at"] = match at.as_str() {
                None => Value::Null,
                Some(s) => json!(s.parse::<i64>().map_err(|_| ApiError::invalid("cancel_at", "Invalid timestamp"))?),
            };
        }
        if let Some(pm) = default_pm {
            sub["default_payment_method"] = pm;
        }
        if let Some(pause) = pause {
            sub["pause_collection"] = pause;
        }
        params::apply_metadata(&metadata_param, "metadata", &mut sub["metadata"])?;
        Ok(())
    })
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
        let s = sub["status"].as_str().unwrap_or_default();
        let status_ok = match status.as_deref() {
            None => s != "canceled" && s != "incomplete_expired",
            Some("all") => true,
            Some("ended") => s == "canceled" || s == "incomplete_expired",
            Some(want) => s == want,
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
    if let Some(pb) = p.get("proration_behavior") {
        sub_params["proration_behavior"] = pb.clone();
    }
    update(st, &sub, &sub_params)?;
    render_item(st, id).ok_or_else(|| ApiError::missing("subscription_item", id, "id"))
}
