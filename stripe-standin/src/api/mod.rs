//! Routing of Stripe API paths (and the stand-in's `/_standin/` control API) to handlers.
//! Handlers are synchronous functions over the locked state returning the JSON answer.

mod checkout;
mod control;
mod customers;
mod events;
mod invoices;
mod products;
mod schedules;
mod subscriptions;
mod test_clocks;
mod webhook_endpoints;

use actix_web::http::Method;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::state::Inner;
use crate::webhooks::Dispatcher;

pub fn route(st: &mut Inner, hooks: &Dispatcher, method: &Method, segs: &[&str], p: &Value) -> ApiResult {
    let m = method.as_str();
    match (m, segs) {
        ("POST", ["v1", "customers"]) => customers::create(st, p),
        ("GET", ["v1", "customers"]) => customers::list(st, p),
        ("GET", ["v1", "customers", id]) => customers::retrieve(st, id),
        ("POST", ["v1", "customers", id]) => customers::update(st, id, p),
        ("DELETE", ["v1", "customers", id]) => customers::delete(st, id),

        ("POST", ["v1", "products"]) => products::create_product(st, p),
        ("GET", ["v1", "products"]) => products::list_products(st, p),
        ("GET", ["v1", "products", id]) => products::retrieve_product(st, id),
        ("POST", ["v1", "products", id]) => products::update_product(st, id, p),
        ("POST", ["v1", "prices"]) => products::create_price(st, p),
        ("GET", ["v1", "prices"]) => products::list_prices(st, p),
        ("GET", ["v1", "prices", id]) => products::retrieve_price(st, id),
        ("POST", ["v1", "prices", id]) => products::update_price(st, id, p),

        ("POST", ["v1", "checkout", "sessions"]) => checkout::create(st, p),
        ("GET", ["v1", "checkout", "sessions"]) => checkout::list(st, p),
        ("GET", ["v1", "checkout", "sessions", id]) => checkout::retrieve(st, id),
        ("GET", ["v1", "checkout", "sessions", id, "line_items"]) => checkout::line_items(st, id, p),
        ("POST", ["v1", "checkout", "sessions", id, "expire"]) => checkout::expire(st, id),

        ("POST", ["v1", "subscriptions"]) => subscriptions::create(st, p),
        ("GET", ["v1", "subscriptions"]) => subscriptions::list(st, p),
        ("GET", ["v1", "subscriptions", id]) => subscriptions::retrieve(st, id),
        ("POST", ["v1", "subscriptions", id]) => subscriptions::update(st, id, p),
        ("DELETE", ["v1", "subscriptions", id]) => subscriptions::cancel(st, id),
        ("GET", ["v1", "subscription_items"]) => subscriptions::list_items(st, p),
        ("GET", ["v1", "subscription_items", id]) => subscriptions::retrieve_item(st, id),
        ("POST", ["v1", "subscription_items", id]) => subscriptions::update_item(st, id, p),

        ("GET", ["v1", "invoices"]) => invoices::list(st, p),
        ("POST", ["v1", "invoices", "create_preview"]) => invoices::create_preview(st, p),
        ("GET", ["v1", "invoices", id]) => invoices::retrieve(st, id),
        ("GET", ["v1", "invoices", id, "lines"]) => invoices::lines(st, id, p),
        ("POST", ["v1", "invoices", id, "pay"]) => invoices::pay(st, id, p),
        ("GET", ["v1", "invoiceitems"]) => invoices::list_items(st, p),
        ("GET", ["v1", "invoiceitems", id]) => invoices::retrieve_item(st, id),
        ("GET", ["v1", "invoice_payments"]) => invoices::list_payments(st, p),
        ("GET", ["v1", "invoice_payments", id]) => invoices::retrieve_payment(st, id),

        ("GET", ["v1", "events"]) => events::list(st, p),
        ("GET", ["v1", "events", id]) => events::retrieve(st, id),

        ("POST", ["v1", "webhook_endpoints"]) => webhook_endpoints::create(st, hooks, p),
        ("GET", ["v1", "webhook_endpoints"]) => webhook_endpoints::list(st, p),
        ("GET", ["v1", "webhook_endpoints", id]) => webhook_endpoints::retrieve(st, id),
        ("POST", ["v1", "webhook_endpoints", id]) => webhook_endpoints::update(st, hooks, id, p),
        ("DELETE", ["v1", "webhook_endpoints", id]) => webhook_endpoints::delete(st, hooks, id),

        ("POST", ["v1", "test_helpers", "test_clocks"]) => test_clocks::create(st, p),
        ("GET", ["v1", "test_helpers", "test_clocks"]) => test_clocks::list(st, p),
        ("GET", ["v1", "test_helpers", "test_clocks", id]) => test_clocks::retrieve(st, id),
        ("DELETE", ["v1", "test_helpers", "test_clocks", id]) => test_clocks::delete(st, id),
        ("POST", ["v1", "test_helpers", "test_clocks", id, "advance"]) => test_clocks::advance(st, id, p),

        ("POST", ["v1", "subscription_schedules"]) => schedules::create(st, p),
        ("GET", ["v1", "subscription_schedules"]) => schedules::list(st, p),
        ("GET", ["v1", "subscription_schedules", id]) => schedules::retrieve(st, id),
        ("POST", ["v1", "subscription_schedules", id]) => schedules::update(st, id, p),
        ("POST", ["v1", "subscription_schedules", id, "release"]) => schedules::release(st, id),

        ("POST", ["_standin", "delivery"]) => control::set_delivery(st, p),
        ("POST", ["_standin", "faults"]) => control::add_fault(st, p),
        ("DELETE", ["_standin", "faults"]) => control::clear_faults(st),
        ("GET", ["_standin", "deliveries"]) => control::deliveries(hooks),
        ("POST", ["_standin", "events", id, "resend"]) => control::resend(st, hooks, id),

        _ => Err(ApiError::unknown_route(m, &format!("/{}", segs.join("/")))),
    }
}

/// Look an object up in a table or answer Stripe's 404.
pub fn found<'a>(table: &'a crate::state::Table, id: &str, what: &str) -> ApiResult<&'a Value> {
    table.get(id).ok_or_else(|| ApiError::missing(what, id, "id"))
}

pub use checkout::{complete as checkout_complete, expire_if_due as checkout_expire_if_due};
pub use customers::public as public_customer;
pub use invoices::pay as invoice_pay;
pub use schedules::{Boundary, at_boundary as schedule_boundary};
pub use webhook_endpoints::{create as create_webhook_endpoint, update as update_webhook_endpoint};
