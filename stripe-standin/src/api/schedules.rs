//! `/v1/subscription_schedules`, for the common "change the plan at the next renewal" use:
//! create a schedule `from_subscription`, replace its phases, release it. Phases take effect
//! when a test clock moves a subscription across a phase's start (at a period boundary).

use serde_json::{Value, json};

use super::found;
use crate::billing::{self, NewItem, plan_of};
use crate::clock::{Interval, add_interval, real_now};
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::state::Inner;
use crate::status::{ScheduleStatus, SubscriptionStatus};

pub fn create(st: &mut Inner, p: &Value) -> ApiResult {
    let Some(sub_id) = params::string(p, "from_subscription")? else {
        return Err(ApiError::invalid(
            "from_subscription",
            "The stand-in only creates subscription schedules from_subscription.",
        ));
    };
    let sub = st
        .subscriptions
        .get(&sub_id)
        .cloned()
        .ok_or_else(|| ApiError::missing("subscription", &sub_id, "from_subscription"))?;
    if !sub["schedule"].is_null() {
        return Err(ApiError::invalid("from_subscription", "This subscription is already attached to a schedule."));
    }
    if SubscriptionStatus::of(&sub).is_some_and(SubscriptionStatus::has_ended) {
        return Err(ApiError::invalid("from_subscription", "A canceled subscription cannot get a schedule."));
    }
    let (start, end) = billing::current_period(st, &sub_id)
        .ok_or_else(|| ApiError::invalid("from_subscription", "The subscription has no items."))?;
    let items: Vec<Value> = billing::item_ids(st, &sub_id)
        .iter()
        .filter_map(|i| st.items.get(i))
        .map(|i| json!({ "price": i["price"], "quantity": i["quantity"] }))
        .collect();
    let id = format!("sub_sched_{}", crate::ids::random_string(24));
    let customer = sub["customer"].as_str().unwrap_or_default().to_string();
    let phase = phase_json(st, &items, sub["currency"].as_str().unwrap_or("usd"), start, end, &json!({}));
    let schedule = json!({
        "id": id,
        "object": "subscription_schedule",
        "application": null,
        "billing_mode": sub["billing_mode"],
        "canceled_at": null,
        "completed_at": null,
        "created": st.now_for_customer(Some(&customer)),
        "current_phase": { "end_date": end, "start_date": start },
        "customer": customer,
        "default_settings": {
            "application_fee_percent": null,
            "automatic_tax": { "disabled_reason": null, "enabled": false, "liability": null },
            "billing_cycle_anchor": "automatic",
            "billing_thresholds": null,
            "collection_method": "charge_automatically",
            "default_payment_method": sub["default_payment_method"],
            "description": null,
            "invoice_settings": { "account_tax_ids": null, "days_until_due": null, "issuer": { "type": "self" } },
            "on_behalf_of": null,
            "transfer_data": null,
        },
        "end_behavior": "release",
        "livemode": false,
        "metadata": params::metadata(p, "metadata")?,
        "phases": [phase],
        "released_at": null,
        "released_subscription": null,
        "status": ScheduleStatus::Active,
        "subscription": sub_id,
        "test_clock": sub["test_clock"],
    });
    st.schedules.insert(schedule.clone());
    st.emit("subscription_schedule.created", &schedule, None);
    billing::update_subscription(st, &sub_id, |st| {
        if let Some(s) = st.subscriptions.get_mut(&sub_id) {
            s["schedule"] = json!(id);
        }
        Ok(())
    })?;
    Ok(schedule)
}

/// A phase as Stripe shows it; `items` hold `price` ids and quantities.
fn phase_json(st: &Inner, items: &[Value], currency: &str, start: i64, end: i64, metadata: &Value) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|i| {
            let plan = st.prices.get(i["price"].as_str().unwrap_or_default()).map(plan_of).map(|p| p["id"].clone());
            json!({
                "billing_thresholds": null,
                "discounts": [],
                "metadata": {},
                "plan": plan.unwrap_or_else(|| i["price"].clone()),
                "price": i["price"],
                "quantity": i["quantity"],
                "tax_rates": [],
            })
        })
        .collect();
    json!({
        "add_invoice_items": [],
        "application_fee_percent": null,
        "automatic_tax": { "disabled_reason": null, "enabled": false, "liability": null },
        "billing_cycle_anchor": null,
        "billing_thresholds": null,
        "collection_method": null,
        "currency": currency,
        "default_payment_method": null,
        "default_tax_rates": [],
        "description": null,
        "discounts": [],
        "end_date": end,
        "invoice_settings": null,
        "items": items,
        "metadata": metadata,
        "on_behalf_of": null,
        "proration_behavior": "create_prorations",
        "start_date": start,
        "transfer_data": null,
        "trial_end": null,
    })
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.schedules, id, "subscription_schedule")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let given = params::fields_equal(p, &["customer"])?;
    let items = st.schedules.newest_first().filter(|s| given.keeps(s)).cloned().collect();
    params::list_page(p, "/v1/subscription_schedules", items)
}

/// Replace phases and/or `end_behavior`. Each phase needs items; its start defaults to the
/// previous phase's end, its end comes from `end_date`, `duration[interval]` or the next start.
pub fn update(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let before = found(&st.schedules, id, "subscription_schedule")?.clone();
    if !ScheduleStatus::of(&before).is_some_and(ScheduleStatus::is_running) {
        return Err(ApiError::invalid("schedule", "Only an active schedule can be updated."));
    }
    let mut after = before.clone();
    if let Some(b) = params::string(p, "end_behavior")? {
        if !matches!(b.as_str(), "release" | "cancel") {
            return Err(ApiError::invalid("end_behavior", "end_behavior must be release or cancel"));
        }
        after["end_behavior"] = json!(b);
    }
    params::apply_metadata(p, "metadata", &mut after["metadata"])?;
    let given = params::array(p, "phases")?;
    if !given.is_empty() {
        after["phases"] = json!(parse_phases(st, &before, &given)?);
        let current = &after["phases"][0];
        after["current_phase"] = json!({ "start_date": current["start_date"], "end_date": current["end_date"] });
    }
    st.schedules.insert(after.clone());
    if before != after {
        st.emit("subscription_schedule.updated", &after, Some(&before));
    }
    Ok(after)
}

/// A requested phase's start, explicit end, and `duration`.
type PhaseSpan = (i64, Option<i64>, Option<(Interval, i64)>);

fn parse_phases(st: &Inner, schedule: &Value, given: &[&Value]) -> ApiResult<Vec<Value>> {
    let currency = schedule["phases"][0]["currency"].as_str().unwrap_or("usd").to_string();
    let first_start = schedule["phases"][0]["start_date"].as_i64().unwrap_or_else(real_now);
    let mut starts_ends: Vec<PhaseSpan> = vec![];
    let mut items_per_phase = vec![];
    for (i, phase) in given.iter().enumerate() {
        let param = |f: &str| format!("phases[{i}][{f}]");
        let mut items = vec![];
        for (j, item) in params::array(phase, "items")
            .map_err(|_| ApiError::invalid(&param("items"), "Invalid items"))?
            .into_iter()
            .enumerate()
        {
            let price = params::string(item, "price")
                .ok()
                .flatten()
                .ok_or_else(|| ApiError::required(&format!("phases[{i}][items][{j}][price]")))?;
            let quantity = params::integer(item, "quantity")
                .map_err(|_| ApiError::invalid(&format!("phases[{i}][items][{j}][quantity]"), "Invalid integer"))?
                .unwrap_or(1);
            items.push(NewItem { price, quantity: quantity.max(0) as u64, metadata: json!({}) });
        }
        if items.is_empty() {
            return Err(ApiError::required(&format!("phases[{i}][items][0][price]")));
        }
        billing::validate_items(st, &items, &param("items"))?;
        let timestamp = |f: &str| -> ApiResult<Option<i64>> {
            match params::string(phase, f).map_err(|_| ApiError::invalid(&param(f), "Invalid timestamp"))? {
                None => Ok(None),
                Some(s) if s == "now" => Ok(Some(real_now())),
                Some(s) => s.parse().map(Some).map_err(|_| ApiError::invalid(&param(f), "Invalid timestamp")),
            }
        };
        let start = match (timestamp("start_date")?, starts_ends.last()) {
            (Some(s), _) => s,
            (None, None) => first_start,
            (None, Some((prev_start, prev_end, prev_dur))) => match (prev_end, prev_dur) {
                (Some(e), _) => *e,
                (None, Some((iv, n))) => add_interval(*prev_start, *iv, *n),
                (None, None) => return Err(ApiError::required(&format!("phases[{}][end_date]", i - 1))),
            },
        };
        let duration = match phase.get("duration") {
            None => None,
            Some(d) => {
                let iv = params::string(d, "interval")
                    .ok()
                    .flatten()
                    .and_then(|s| Interval::parse(&s))
                    .ok_or_else(|| ApiError::invalid(&param("duration][interval"), "Invalid interval"))?;
                let n = params::integer(d, "interval_count").ok().flatten().unwrap_or(1);
                Some((iv, n))
            }
        };
        starts_ends.push((start, timestamp("end_date")?, duration));
        items_per_phase.push(items);
    }
    let count = starts_ends.len();
    let mut phases = vec![];
    for (i, ((start, end, duration), items)) in starts_ends.iter().zip(&items_per_phase).enumerate() {
        let end = match (end, duration) {
            (Some(e), _) => *e,
            (None, Some((iv, n))) => add_interval(*start, *iv, *n),
            (None, None) if i + 1 < count => starts_ends[i + 1].0,
            (None, None) => {
                // The last phase runs one billing interval of its first price.
                let price = st.prices.get(&items[0].price);
                let iv = price
                    .and_then(|p| p["recurring"]["interval"].as_str())
                    .and_then(Interval::parse)
                    .unwrap_or(Interval::Month);
                let n = price.and_then(|p| p["recurring"]["interval_count"].as_i64()).unwrap_or(1);
                add_interval(*start, iv, n)
            }
        };
        if end <= *start {
            return Err(ApiError::invalid(&format!("phases[{i}][end_date]"), "A phase must end after it starts."));
        }
        let item_values: Vec<Value> =
            items.iter().map(|it| json!({ "price": it.price, "quantity": it.quantity })).collect();
        phases.push(phase_json(st, &item_values, &currency, *start, end, &json!({})));
    }
    Ok(phases)
}

pub fn release(st: &mut Inner, id: &str) -> ApiResult {
    let schedule = found(&st.schedules, id, "subscription_schedule")?.clone();
    if !ScheduleStatus::of(&schedule).is_some_and(ScheduleStatus::is_running) {
        return Err(ApiError::invalid("schedule", "Only an active schedule can be released."));
    }
    let sub_id = schedule["subscription"].as_str().unwrap_or_default().to_string();
    let now = st.now_for_customer(schedule["customer"].as_str());
    Ok(finish(st, id, &sub_id, ScheduleStatus::Released, now))
}

/// End a schedule (`released` or `completed`) and detach it from its subscription.
fn finish(st: &mut Inner, id: &str, sub_id: &str, status: ScheduleStatus, now: i64) -> Value {
    let Some(before) = st.schedules.get(id).cloned() else { return Value::Null };
    let mut after = before.clone();
    after["status"] = json!(status);
    after["current_phase"] = Value::Null;
    let released = status == ScheduleStatus::Released;
    if released {
        after["released_at"] = json!(now);
        after["released_subscription"] = json!(sub_id);
    } else {
        after["completed_at"] = json!(now);
    }
    after["subscription"] = if released { Value::Null } else { json!(sub_id) };
    st.schedules.insert(after.clone());
    let kind = if released { "subscription_schedule.released" } else { "subscription_schedule.completed" };
    st.emit(kind, &after, Some(&before));
    let _ = billing::update_subscription(st, sub_id, |st| {
        if let Some(s) = st.subscriptions.get_mut(sub_id) {
            s["schedule"] = Value::Null;
        }
        Ok(())
    });
    after
}

/// What a subscription's schedule says at a period boundary.
#[derive(Debug, PartialEq, Eq)]
pub enum Boundary {
    /// Renew (possibly with the items of a phase that starts now).
    Renew,
    /// The schedule ended with `end_behavior=cancel`.
    Cancel,
}

/// Called when a subscription reaches the end of a period at `at`: switch to the phase that
/// starts then, or end the schedule after its last phase.
pub fn at_boundary(st: &mut Inner, sub_id: &str, at: i64) -> Boundary {
    let Some(sched_id) = st.subscriptions.get(sub_id).and_then(|s| s["schedule"].as_str()).map(str::to_string) else {
        return Boundary::Renew;
    };
    let Some(schedule) = st.schedules.get(&sched_id).cloned() else { return Boundary::Renew };
    let phases = schedule["phases"].as_array().cloned().unwrap_or_default();
    let last_end = phases.last().and_then(|p| p["end_date"].as_i64()).unwrap_or(i64::MAX);
    if at >= last_end {
        if schedule["end_behavior"] == "cancel" {
            finish(st, &sched_id, sub_id, ScheduleStatus::Completed, at);
            return Boundary::Cancel;
        }
        finish(st, &sched_id, sub_id, ScheduleStatus::Released, at);
        return Boundary::Renew;
    }
    let Some(phase) = phases.iter().rev().find(|p| p["start_date"].as_i64().is_some_and(|s| s <= at)) else {
        return Boundary::Renew;
    };
    let wanted: Vec<(String, u64)> = phase["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| (i["price"].as_str().unwrap_or_default().to_string(), i["quantity"].as_u64().unwrap_or(1)))
        .collect();
    let current: Vec<(String, u64)> = billing::item_ids(st, sub_id)
        .iter()
        .filter_map(|i| st.items.get(i))
        .map(|i| (i["price"].as_str().unwrap_or_default().to_string(), i["quantity"].as_u64().unwrap_or(1)))
        .collect();
    if wanted != current && !wanted.is_empty() {
        let period = billing::current_period(st, sub_id).unwrap_or((at, at));
        let _ = billing::update_subscription(st, sub_id, |st| {
            for old in billing::item_ids(st, sub_id) {
                st.items.remove(&old);
            }
            for (price, quantity) in &wanted {
                let item = NewItem { price: price.clone(), quantity: *quantity, metadata: json!({}) };
                billing::add_item(st, sub_id, &item, period.0, period.1, at);
            }
            Ok(())
        });
    }
    if let Some(s) = st.schedules.get_mut(&sched_id) {
        s["current_phase"] = json!({ "start_date": phase["start_date"], "end_date": phase["end_date"] });
    }
    Boundary::Renew
}
