//! Prorations, computed as Stripe computes them when a subscription's items change within a
//! billing period: by the second, a credit for the unused time of what an item was and a charge
//! for the remaining time of what it becomes. An update (`POST /v1/subscriptions/{id}`) and a
//! preview (`POST /v1/invoices/create_preview`) build the same [`Plan`], so a preview shows
//! exactly what the update then bills.

use serde_json::{Value, json};

use crate::billing::{self, Billed, Charge, NewItem};
use crate::clock::{add_interval, format_day};
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::params;
use crate::state::Inner;

/// `proration_behavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Stripe's default: prorations become pending invoice items, billed by the next invoice.
    CreateProrations,
    /// Prorations are invoiced (and charged) at once.
    AlwaysInvoice,
    None,
}

impl Behavior {
    pub fn parse(value: Option<String>, param: &str) -> ApiResult<Self> {
        match value.as_deref() {
            None | Some("create_prorations") => Ok(Self::CreateProrations),
            Some("always_invoice") => Ok(Self::AlwaysInvoice),
            Some("none") => Ok(Self::None),
            Some(other) => Err(ApiError::invalid(param, format!("Invalid proration_behavior: {other}"))),
        }
    }
}

/// One entry of `items[N]` (or `subscription_details[items][N]`).
#[derive(Debug, Clone)]
pub struct ItemChange {
    pub id: Option<String>,
    pub price: Option<String>,
    pub quantity: Option<u64>,
    pub deleted: bool,
    pub metadata: Option<Value>,
}

/// Read the requested item changes; `param` names the array in error messages. Items must
/// belong to the subscription and prices must exist, be active and recurring.
pub fn parse_changes(st: &Inner, sub_id: &str, items: &[&Value], param: &str) -> ApiResult<Vec<ItemChange>> {
    let mut changes = vec![];
    for (i, item) in items.iter().enumerate() {
        let field = |name: &str| format!("{param}[{i}][{name}]");
        let id = params::string(item, "id").map_err(|_| ApiError::invalid(&field("id"), "Invalid id"))?;
        if let Some(si) = &id
            && st.items.get(si).is_none_or(|x| x["subscription"] != sub_id)
        {
            return Err(ApiError::missing("subscription_item", si, &field("id")));
        }
        let price = params::string(item, "price").map_err(|_| ApiError::invalid(&field("price"), "Invalid"))?;
        if let Some(pr) = &price {
            let one = NewItem { price: pr.clone(), quantity: 1, metadata: json!({}) };
            billing::validate_items(st, &[one], param).map_err(|mut e| {
                e.param = Some(field("price"));
                e
            })?;
        }
        let deleted = params::boolean(item, "deleted")
            .map_err(|_| ApiError::invalid(&field("deleted"), "Invalid boolean"))?
            .unwrap_or(false);
        if id.is_none() && (deleted || price.is_none()) {
            return Err(ApiError::required(&field(if deleted { "id" } else { "price" })));
        }
        let metadata = item.get("metadata").cloned();
        if let Some(m) = &metadata {
            // Checked now so that a bad value cannot fail the update half-way.
            params::metadata(&json!({ "metadata": m }), &field("metadata"))?;
        }
        changes.push(ItemChange { id, price, quantity: quantity(item, &field("quantity"))?, deleted, metadata });
    }
    Ok(changes)
}

fn quantity(item: &Value, param: &str) -> ApiResult<Option<u64>> {
    match params::integer(item, "quantity").map_err(|_| ApiError::invalid(param, "Invalid integer"))? {
        None => Ok(None),
        Some(q) if q >= 0 => Ok(Some(q as u64)),
        Some(_) => Err(ApiError::invalid(param, "Quantity must be at least 0.")),
    }
}

/// A subscription item as the change leaves it.
#[derive(Debug, Clone)]
pub struct After {
    /// The existing item's id, or the id the new item will get.
    pub id: String,
    pub price: String,
    pub quantity: u64,
    /// Price and quantity before the change; `None` for an item the change adds.
    pub before: Option<(String, u64)>,
    pub deleted: bool,
    pub metadata: Option<Value>,
    /// The `items[N]` that changed it, to name the parameter in errors.
    pub change: Option<usize>,
}

impl After {
    fn changed(&self) -> bool {
        self.deleted || self.before.as_ref() != Some(&(self.price.clone(), self.quantity))
    }
}

/// What a change to a subscription's items does to its billing.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The moment the change is prorated for (`proration_date`, else now).
    pub at: i64,
    /// The current billing period.
    pub period: (i64, i64),
    pub behavior: Behavior,
    /// Every item of the subscription after the change, then the items it adds.
    pub items: Vec<After>,
    /// Credit and charge lines for `at..period end`; empty with `proration_behavior=none`.
    pub prorations: Vec<Charge>,
    /// The new billing period when the change moves the subscription to another interval:
    /// Stripe then restarts the billing cycle at the change and invoices at once.
    pub restart: Option<(i64, i64)>,
}

/// The moment a change is prorated for: `proration_date` when given (within the current
/// period, as Stripe requires), else now on the customer's test clock.
pub fn moment(st: &Inner, sub_id: &str, given: Option<i64>, param: &str) -> ApiResult<i64> {
    let (start, end) = billing::current_period(st, sub_id)
        .ok_or_else(|| ApiError::invalid("subscription", "The subscription has no items."))?;
    match given {
        Some(t) if t < start || t > end => Err(ApiError::invalid(
            param,
            format!("The proration date must be within the current billing period ({start} to {end})."),
        )),
        Some(t) => Ok(t),
        None => {
            let customer = st.subscriptions.get(sub_id).and_then(|s| s["customer"].as_str());
            Ok(st.now_for_customer(customer).clamp(start, end))
        }
    }
}

/// Work out what `changes` do to the subscription at `at`, without changing anything.
pub fn plan(
    st: &Inner,
    sub_id: &str,
    changes: &[ItemChange],
    behavior: Behavior,
    at: i64,
    param: &str,
) -> ApiResult<Plan> {
    let period = billing::current_period(st, sub_id)
        .ok_or_else(|| ApiError::invalid("subscription", "The subscription has no items."))?;
    let mut items: Vec<After> = billing::current_items(st, sub_id)
        .into_iter()
        .map(|(id, price, quantity)| After {
            id,
            price: price.clone(),
            quantity,
            before: Some((price, quantity)),
            deleted: false,
            metadata: None,
            change: None,
        })
        .collect();
    for (i, c) in changes.iter().enumerate() {
        let Some(si) = &c.id else {
            items.push(After {
                id: new_id("si"),
                price: c.price.clone().unwrap_or_default(),
                quantity: c.quantity.unwrap_or(1),
                before: None,
                deleted: false,
                metadata: c.metadata.clone(),
                change: Some(i),
            });
            continue;
        };
        // `parse_changes` checked that the item is the subscription's.
        let Some(item) = items.iter_mut().find(|a| &a.id == si) else { continue };
        item.deleted |= c.deleted;
        if let Some(price) = c.price.as_ref().filter(|p| **p != item.price) {
            item.price = price.clone();
            // Stripe: changing an item's price sets its quantity to 1 unless one is given.
            item.quantity = 1;
        }
        item.quantity = c.quantity.unwrap_or(item.quantity);
        item.metadata = c.metadata.clone().or(item.metadata.take());
        item.change = Some(i);
    }
    let restart = check_shape(st, sub_id, &items, at, param)?;
    let prorations = match behavior {
        Behavior::None => vec![],
        _ => prorate(st, &items, period, at, restart.is_some()),
    };
    Ok(Plan { at, period, behavior, items, prorations, restart })
}

/// The items left must share the subscription's currency and one interval, as Stripe requires.
/// A new interval for all of them restarts the billing cycle at `at`: the new period.
fn check_shape(st: &Inner, sub_id: &str, items: &[After], at: i64, param: &str) -> ApiResult<Option<(i64, i64)>> {
    let remaining: Vec<&After> = items.iter().filter(|a| !a.deleted).collect();
    let Some(first) = remaining.first() else {
        return Err(ApiError::invalid(param, "A subscription must have at least one item."));
    };
    let currency = st.subscriptions.get(sub_id).map(|s| s["currency"].clone()).unwrap_or(Value::Null);
    let interval = billing::price_interval(st, &first.price);
    for a in &remaining {
        let price_param = a.change.map(|i| format!("{param}[{i}][price]")).unwrap_or_else(|| param.to_string());
        let mismatch = |field: &str| {
            ApiError::invalid(
                &price_param,
                format!(
                    "Currency and interval fields must match across all plans on this subscription. \
                     Found mismatch in {field} field."
                ),
            )
        };
        if st.prices.get(&a.price).map(|p| &p["currency"]) != Some(&currency) {
            return Err(mismatch("currency"));
        }
        if billing::price_interval(st, &a.price) != interval {
            return Err(mismatch("interval"));
        }
    }
    let old_interval =
        billing::current_items(st, sub_id).first().and_then(|(_, price, _)| billing::price_interval(st, price));
    match interval {
        Some((unit, count)) if Some((unit, count)) != old_interval => Ok(Some((at, add_interval(at, unit, count)))),
        _ => Ok(None),
    }
}

/// Credit the unused time of each changed item as it was, and charge the remaining time of it
/// as it is now (not when the billing cycle restarts: the new period is billed whole).
fn prorate(st: &Inner, items: &[After], (start, end): (i64, i64), at: i64, restart: bool) -> Vec<Charge> {
    let mut lines = vec![];
    for item in items.iter().filter(|a| a.changed()) {
        if let Some((price, quantity)) = &item.before {
            let base = -(billing::unit_amount(st, price) * *quantity as i64);
            lines.push(line(st, item, price, *quantity, prorated(base, (start, end), at), "Unused", (at, end)));
        }
        if !item.deleted && !restart {
            let base = billing::unit_amount(st, &item.price) * item.quantity as i64;
            let amount = prorated(base, (start, end), at);
            lines.push(line(st, item, &item.price, item.quantity, amount, "Remaining", (at, end)));
        }
    }
    // Nothing to credit or charge (a free price, quantity 0, the very end of the period).
    lines.retain(|c| c.amount != 0);
    lines
}

fn line(st: &Inner, item: &After, price: &str, quantity: u64, amount: i64, lead: &str, period: (i64, i64)) -> Charge {
    let name = billing::product_name(st, price);
    let what = if quantity == 1 { name } else { format!("{quantity} × {name}") };
    Charge {
        subscription_item: item.id.clone(),
        price: price.to_string(),
        quantity,
        amount,
        period,
        proration: true,
        description: format!("{lead} time on {what} after {}", format_day(period.0)),
        invoice_item: None,
    }
}

/// `base × (end − at) / (end − start)`, rounded to the nearest cent (halves away from zero).
pub fn prorated(base: i64, (start, end): (i64, i64), at: i64) -> i64 {
    if end <= start {
        return 0;
    }
    let num = i128::from(base) * i128::from(end - at);
    let den = i128::from(end - start);
    let rounded = (num.abs() * 2 + den) / (2 * den);
    (if num < 0 { -rounded } else { rounded }) as i64
}

impl Plan {
    /// The items left after the change.
    pub fn remaining(&self) -> Vec<Billed> {
        self.items.iter().filter(|a| !a.deleted).map(|a| (a.id.clone(), a.price.clone(), a.quantity)).collect()
    }

    /// Whether the update invoices at once: `always_invoice` with something to prorate, or a
    /// restarted billing cycle.
    pub fn invoices_now(&self) -> bool {
        self.restart.is_some() || (self.behavior == Behavior::AlwaysInvoice && !self.prorations.is_empty())
    }

    /// The lines of the invoice the update would create at once, before it is applied.
    pub fn immediate_lines(&self, st: &Inner, sub_id: &str) -> Vec<Charge> {
        immediate_lines(st, sub_id, &self.prorations, self.restart, &self.remaining())
    }

    /// The next renewal invoice after the change: its lines and the period it bills.
    pub fn renewal_lines(&self, st: &Inner, sub_id: &str) -> (Vec<Charge>, (i64, i64)) {
        let remaining = self.remaining();
        let end = self.period.1;
        let next = remaining
            .first()
            .and_then(|(_, price, _)| billing::price_interval(st, price))
            .map_or(end, |(unit, count)| add_interval(end, unit, count));
        let mut lines = billing::pending_charges(st, sub_id);
        lines.extend(self.prorations.iter().cloned());
        lines.extend(billing::period_charges(st, &remaining, end, next));
        (lines, (end, next))
    }
}

/// An immediate invoice bills the subscription's pending invoice items (plus `unapplied`
/// prorations not stored as items yet), then the first period of a restarted cycle.
fn immediate_lines(
    st: &Inner,
    sub_id: &str,
    unapplied: &[Charge],
    restart: Option<(i64, i64)>,
    items: &[Billed],
) -> Vec<Charge> {
    let mut lines = billing::pending_charges(st, sub_id);
    lines.extend(unapplied.iter().cloned());
    if let Some((start, end)) = restart {
        lines.extend(billing::period_charges(st, items, start, end));
    }
    lines
}

/// Make the plan's changes to the stored subscription: items changed, added and deleted, a
/// restarted cycle, the prorations as pending invoice items (`invoiceitem.created`). With
/// `invoices_now`, also the invoice (a draft, not yet announced); its id.
pub fn apply(st: &mut Inner, sub_id: &str, plan: &Plan, now: i64) -> ApiResult<Option<String>> {
    for item in &plan.items {
        if item.deleted {
            st.items.remove(&item.id);
        } else if item.before.is_none() {
            let metadata = json!({ "metadata": item.metadata.clone().unwrap_or_else(|| json!({})) });
            let new = NewItem {
                price: item.price.clone(),
                quantity: item.quantity,
                metadata: params::metadata(&metadata, "metadata")?,
            };
            billing::insert_item(st, item.id.clone(), sub_id, &new, plan.period, now);
        } else if let Some(stored) = st.items.get_mut(&item.id) {
            stored["price"] = json!(item.price);
            stored["quantity"] = json!(item.quantity);
            if let Some(m) = &item.metadata {
                params::apply_metadata(&json!({ "metadata": m }), "metadata", &mut stored["metadata"])?;
            }
        }
    }
    if let Some((start, end)) = plan.restart {
        for id in billing::item_ids(st, sub_id) {
            if let Some(item) = st.items.get_mut(&id) {
                item["current_period_start"] = json!(start);
                item["current_period_end"] = json!(end);
            }
        }
        billing::set_field(st, sub_id, "billing_cycle_anchor", json!(start));
    }
    for line in &plan.prorations {
        billing::create_invoice_item(st, sub_id, line, now);
    }
    if !plan.invoices_now() {
        return Ok(None);
    }
    let lines = immediate_lines(st, sub_id, &[], plan.restart, &billing::current_items(st, sub_id));
    let invoice = billing::store_invoice(st, sub_id, "subscription_update", &lines, (plan.at, plan.at), now);
    billing::set_field(st, sub_id, "latest_invoice", json!(invoice));
    Ok(Some(invoice))
}

#[cfg(test)]
mod tests {
    use super::prorated;

    #[test]
    fn prorations_round_each_line_to_the_nearest_cent_with_halves_away_from_zero() {
        assert_eq!(prorated(1000, (0, 30), 15), 500);
        assert_eq!(prorated(-1000, (0, 30), 15), -500);
        assert_eq!(prorated(1000, (0, 3), 1), 667);
        assert_eq!(prorated(-1000, (0, 3), 1), -667);
        assert_eq!(prorated(1, (0, 2), 1), 1);
        assert_eq!(prorated(-1, (0, 2), 1), -1);
        assert_eq!(prorated(1000, (0, 30), 30), 0);
        assert_eq!(prorated(1000, (5, 5), 5), 0);
    }
}
