//! `/v1/products` and `/v1/prices`. Price amounts, currency and recurrence are immutable after
//! creation, as in Stripe; only `active`, `nickname`, `lookup_key` and `metadata` change.

use serde_json::{Value, json};

use super::found;
use crate::clock::{Interval, real_now};
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::params;
use crate::state::Inner;

pub fn create_product(st: &mut Inner, p: &Value) -> ApiResult {
    let id = params::string(p, "id")?.unwrap_or_else(|| new_id("prod"));
    if st.products.contains(&id) {
        return Err(
            ApiError::invalid("id", format!("Product already exists: {id}")).with_code("resource_already_exists")
        );
    }
    let now = real_now();
    let product = json!({
        "id": id,
        "object": "product",
        "active": params::boolean(p, "active")?.unwrap_or(true),
        "created": now,
        "default_price": null,
        "description": params::string(p, "description")?,
        "images": [],
        "livemode": false,
        "marketing_features": [],
        "metadata": params::metadata(p, "metadata")?,
        "name": params::required(p, "name")?,
        "package_dimensions": null,
        "shippable": null,
        "statement_descriptor": null,
        "tax_code": null,
        "type": "service",
        "unit_label": null,
        "updated": now,
        "url": null,
    });
    st.products.insert(product.clone());
    st.emit("product.created", &product, None);
    Ok(product)
}

pub fn retrieve_product(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.products, id, "product")?.clone())
}

pub fn update_product(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let before = found(&st.products, id, "product")?.clone();
    let mut after = before.clone();
    if let Some(name) = params::string(p, "name")? {
        if name.is_empty() {
            return Err(ApiError::invalid("name", "A product's name cannot be empty."));
        }
        after["name"] = json!(name);
    }
    if let Some(d) = params::nullable(p, "description")? {
        after["description"] = d;
    }
    if let Some(a) = params::boolean(p, "active")? {
        after["active"] = json!(a);
    }
    params::apply_metadata(p, "metadata", &mut after["metadata"])?;
    if before != after {
        after["updated"] = json!(real_now());
        st.products.insert(after.clone());
        st.emit("product.updated", &after, Some(&before));
    }
    Ok(after)
}

pub fn list_products(st: &mut Inner, p: &Value) -> ApiResult {
    let active = params::boolean(p, "active")?;
    let items = st.products.newest_first().filter(|prod| active.is_none_or(|a| prod["active"] == a)).cloned().collect();
    params::list_page(p, "/v1/products", items)
}

pub fn create_price(st: &mut Inner, p: &Value) -> ApiResult {
    let product = params::required(p, "product")?;
    if !st.products.contains(&product) {
        return Err(ApiError::missing("product", &product, "product"));
    }
    let unit_amount = params::integer(p, "unit_amount")?.ok_or_else(|| ApiError::required("unit_amount"))?;
    if unit_amount < 0 {
        return Err(ApiError::invalid("unit_amount", "unit_amount must be at least 0"));
    }
    let currency = params::required(p, "currency")?.to_lowercase();
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_lowercase()) {
        return Err(ApiError::invalid("currency", format!("Invalid currency: {currency}")));
    }
    let recurring = match p.get("recurring") {
        None => Value::Null,
        Some(r) => {
            let interval = params::string(r, "interval")
                .ok()
                .flatten()
                .ok_or_else(|| ApiError::required("recurring[interval]"))?;
            if Interval::parse(&interval).is_none() {
                return Err(ApiError::invalid(
                    "recurring[interval]",
                    "Invalid recurring[interval]: must be one of day, week, month, or year".to_string(),
                ));
            }
            let count = params::integer(r, "interval_count")
                .map_err(|_| ApiError::invalid("recurring[interval_count]", "Invalid integer"))?
                .unwrap_or(1);
            if !(1..=36).contains(&count) {
                return Err(ApiError::invalid("recurring[interval_count]", "Invalid interval_count"));
            }
            json!({
                "interval": interval,
                "interval_count": count,
                "meter": null,
                "trial_period_days": null,
                "usage_type": "licensed",
            })
        }
    };
    let lookup_key = params::string(p, "lookup_key")?;
    if let Some(key) = &lookup_key {
        take_lookup_key(st, key, p)?;
    }
    let price = json!({
        "id": new_id("price"),
        "object": "price",
        "active": params::boolean(p, "active")?.unwrap_or(true),
        "billing_scheme": "per_unit",
        "created": real_now(),
        "currency": currency,
        "custom_unit_amount": null,
        "livemode": false,
        "lookup_key": lookup_key,
        "metadata": params::metadata(p, "metadata")?,
        "nickname": params::string(p, "nickname")?,
        "product": product,
        "recurring": recurring,
        "tax_behavior": "unspecified",
        "tiers_mode": null,
        "transform_quantity": null,
        "type": if recurring.is_null() { "one_time" } else { "recurring" },
        "unit_amount": unit_amount,
        "unit_amount_decimal": unit_amount.to_string(),
    });
    st.prices.insert(price.clone());
    st.emit("price.created", &price, None);
    Ok(price)
}

/// A lookup key belongs to one price; `transfer_lookup_key=true` moves it, else it is a 400.
fn take_lookup_key(st: &mut Inner, key: &str, p: &Value) -> ApiResult<()> {
    let holder = st.prices.newest_first().find(|pr| pr["lookup_key"] == key).cloned();
    let Some(before) = holder else { return Ok(()) };
    if params::boolean(p, "transfer_lookup_key")? != Some(true) {
        return Err(ApiError::invalid(
            "lookup_key",
            format!("A price ({}) already uses that lookup key.", before["id"].as_str().unwrap_or_default()),
        ));
    }
    let mut after = before.clone();
    after["lookup_key"] = Value::Null;
    st.prices.insert(after.clone());
    st.emit("price.updated", &after, Some(&before));
    Ok(())
}

pub fn retrieve_price(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.prices, id, "price")?.clone())
}

pub fn update_price(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let before = found(&st.prices, id, "price")?.clone();
    for immutable in ["unit_amount", "currency", "recurring", "product"] {
        if p.get(immutable).is_some() {
            return Err(ApiError::invalid(immutable, format!("Received unknown parameter: {immutable}")));
        }
    }
    let mut after = before.clone();
    if let Some(a) = params::boolean(p, "active")? {
        after["active"] = json!(a);
    }
    if let Some(n) = params::nullable(p, "nickname")? {
        after["nickname"] = n;
    }
    if let Some(k) = params::nullable(p, "lookup_key")? {
        if let Some(key) = k.as_str()
            && before["lookup_key"] != key
        {
            take_lookup_key(st, key, p)?;
        }
        after["lookup_key"] = k;
    }
    params::apply_metadata(p, "metadata", &mut after["metadata"])?;
    if before != after {
        st.prices.insert(after.clone());
        st.emit("price.updated", &after, Some(&before));
    }
    Ok(after)
}

pub fn list_prices(st: &mut Inner, p: &Value) -> ApiResult {
    let given = params::fields_equal(p, &["product", "type"])?;
    let active = params::boolean(p, "active")?;
    let lookup_keys: Vec<String> =
        params::array(p, "lookup_keys")?.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect();
    let items = st
        .prices
        .newest_first()
        .filter(|pr| given.keeps(pr))
        .filter(|pr| active.is_none_or(|a| pr["active"] == a))
        .filter(|pr| lookup_keys.is_empty() || lookup_keys.iter().any(|k| pr["lookup_key"] == k.as_str()))
        .cloned()
        .collect();
    params::list_page(p, "/v1/prices", items)
}
