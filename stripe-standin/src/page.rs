//! The hosted pages: the checkout payment page (`/c/pay/{session}`, plain HTML, no JavaScript)
//! and the hosted invoice page (`/i/{invoice}`, the invoice's `hosted_invoice_url`): a receipt,
//! and for an open invoice a form that pays it with a test card, as Stripe's page lets a customer
//! whose card failed pay with another.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde_json::Value;

use crate::api::checkout_complete;
use crate::clock::format_date;
use crate::form;
use crate::server::AppState;
use crate::state::{Card, Inner};
use crate::status::{CheckoutStatus, InvoiceStatus};

/// Stripe's test card numbers the page accepts.
fn card_for(number: &str) -> Option<Card> {
    let digits: String = number.chars().filter(|c| !c.is_whitespace() && *c != '-').collect();
    match digits.as_str() {
        "4242424242424242" => Some(Card::Pays),
        "4000000000000341" => Some(Card::ChargeFails),
        "4000000000009995" => Some(Card::Declines),
        _ => None,
    }
}

/// The card number a hosted page's form sent ("" when none).
fn card_number(body: &[u8]) -> String {
    std::str::from_utf8(body)
        .ok()
        .and_then(|b| form::parse(b).ok())
        .and_then(|f| f.get("card_number").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

pub async fn show_checkout(path: web::Path<String>, app: web::Data<AppState>) -> HttpResponse {
    let id = path.into_inner();
    let mut st = app.store.lock();
    crate::api::checkout_expire_if_due(&mut st, &id);
    app.hooks.flush(&mut st);
    checkout_page(&st, &id, None, StatusCode::OK)
}

pub async fn submit_checkout(path: web::Path<String>, body: web::Bytes, app: web::Data<AppState>) -> HttpResponse {
    let id = path.into_inner();
    let number = card_number(&body);
    let mut st = app.store.lock();
    let Some(card) = card_for(&number) else {
        let message = if number.trim().is_empty() { "Please enter a card number." } else { NOT_A_TEST_CARD };
        return checkout_page(&st, &id, Some(message), StatusCode::BAD_REQUEST);
    };
    let result = checkout_complete(&mut st, &id, card);
    app.hooks.flush(&mut st);
    match result {
        Ok(()) => {
            let session = st.sessions.get(&id).cloned().unwrap_or(Value::Null);
            let target = session["success_url"].as_str().unwrap_or("/").replace("{CHECKOUT_SESSION_ID}", &id);
            HttpResponse::SeeOther().insert_header(("Location", target)).finish()
        }
        Err(message) => {
            let status = if card == Card::Declines { StatusCode::PAYMENT_REQUIRED } else { StatusCode::CONFLICT };
            checkout_page(&st, &id, Some(&message), status)
        }
    }
}

fn html(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(body)
}

fn checkout_page(st: &Inner, id: &str, error: Option<&str>, status: StatusCode) -> HttpResponse {
    let Some(session) = st.sessions.get(id) else {
        return html(
            StatusCode::NOT_FOUND,
            layout(
                "Checkout session not found",
                "<h1>Checkout session not found</h1><p>This payment link is not valid.</p>",
            ),
        );
    };
    let lines = st.session_extra.get(id).map(|e| e.line_items.clone()).unwrap_or_default();
    let currency = session["currency"].as_str().unwrap_or("usd");
    let total = session["amount_total"].as_i64().unwrap_or(0);
    let mut names = vec![];
    let mut rows = String::new();
    for (price_id, qty) in &lines {
        let Some(price) = st.prices.get(price_id) else { continue };
        let product = price["product"].as_str().and_then(|p| st.products.get(p));
        let name = product.and_then(|p| p["name"].as_str()).unwrap_or("Item").to_string();
        let per = match price["recurring"]["interval_count"].as_i64() {
            Some(1) | None => format!("per {}", price["recurring"]["interval"].as_str().unwrap_or("period")),
            Some(n) => format!("every {n} {}s", price["recurring"]["interval"].as_str().unwrap_or("period")),
        };
        let amount = price["unit_amount"].as_i64().unwrap_or(0) * *qty as i64;
        rows.push_str(&format!(
            "<tr><td class=\"product\">{}</td><td>× {qty}</td><td>{} {per}</td></tr>",
            esc(&name),
            money(amount, currency)
        ));
        names.push(name);
    }
    let title = format!("Pay {} — {}", money(total, currency), names.join(", "));
    let cancel = session["cancel_url"]
        .as_str()
        .map(|u| format!("<a id=\"cancel\" href=\"{}\">Cancel</a>", esc(u)))
        .unwrap_or_default();
    let body = match CheckoutStatus::of(session) {
        Some(CheckoutStatus::Complete) => format!(
            "<h1>{}</h1><p class=\"notice\">This checkout session is already complete: the payment was received.</p>",
            esc(&title)
        ),
        Some(CheckoutStatus::Expired) => format!(
            "<h1>{}</h1><p class=\"notice\">This checkout session has expired. Start again from the site.</p>{cancel}",
            esc(&title)
        ),
        _ => {
            let error = error
                .map(|e| format!("<p class=\"error\" id=\"card-errors\" role=\"alert\">{}</p>", esc(e)))
                .unwrap_or_default();
            format!(
                "<h1>{title}</h1>\
                 <table>{rows}</table>\
                 <p class=\"total\">Total due today: <strong>{total}</strong></p>\
                 {error}\
                 <form method=\"post\" action=\"/c/pay/{id}\">\
                 <label for=\"card-number\">Card number</label>\
                 <input id=\"card-number\" name=\"card_number\" type=\"text\" inputmode=\"numeric\" \
                  autocomplete=\"cc-number\" placeholder=\"4242 4242 4242 4242\" required>\
                 <button type=\"submit\" id=\"submit\">Pay</button>\
                 </form>{cancel}",
                title = esc(&title),
                total = money(total, currency),
                id = esc(id),
            )
        }
    };
    html(status, layout(&title, &body))
}

pub async fn show_invoice(path: web::Path<String>, app: web::Data<AppState>) -> HttpResponse {
    let id = path.into_inner();
    let st = app.store.lock();
    invoice_page(&st, &id, None, StatusCode::OK)
}

/// Pay an open invoice with the card typed on its page. The card becomes the subscription's
/// default payment method, so its next renewals charge it (Stripe's hosted invoice page saves it
/// for the subscription); a paid invoice reinstates a past-due subscription, as `/pay` does.
pub async fn submit_invoice(path: web::Path<String>, body: web::Bytes, app: web::Data<AppState>) -> HttpResponse {
    let id = path.into_inner();
    let number = card_number(&body);
    let mut st = app.store.lock();
    let Some(card) = card_for(&number) else {
        let message = if number.trim().is_empty() { "Please enter a card number." } else { NOT_A_TEST_CARD };
        return invoice_page(&st, &id, Some(message), StatusCode::BAD_REQUEST);
    };
    let pm = crate::ids::new_id("pm");
    st.payment_methods.insert(pm.clone(), card);
    let result = crate::api::invoice_pay(&mut st, &id, &serde_json::json!({ "payment_method": pm }));
    let outcome = match result {
        Ok(paid) => {
            if let Some(sub) = paid["parent"]["subscription_details"]["subscription"].as_str() {
                let sub = sub.to_string();
                let saved = crate::billing::update_subscription(&mut st, &sub, |st| {
                    if let Some(s) = st.subscriptions.get_mut(&sub) {
                        s["default_payment_method"] = serde_json::json!(pm);
                    }
                    Ok(())
                });
                if let Err(e) = saved {
                    tracing::warn!(subscription = %sub, error = %e.message, "the paying card was not saved");
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    app.hooks.flush(&mut st);
    match outcome {
        Ok(()) => HttpResponse::SeeOther().insert_header(("Location", format!("/i/{id}"))).finish(),
        Err(e) => {
            let status = if e.status == StatusCode::PAYMENT_REQUIRED { e.status } else { StatusCode::CONFLICT };
            invoice_page(&st, &id, Some(&e.message), status)
        }
    }
}

const NOT_A_TEST_CARD: &str = "That card number is not a stand-in test card. Use 4242 4242 4242 4242 (pays), \
     4000 0000 0000 0341 (pays now, later charges fail) or 4000 0000 0000 9995 (declined).";

fn invoice_page(st: &Inner, id: &str, error: Option<&str>, status: StatusCode) -> HttpResponse {
    let Some(inv) = st.invoices.get(id) else {
        return html(StatusCode::NOT_FOUND, layout("Invoice not found", "<h1>Invoice not found</h1>"));
    };
    let currency = inv["currency"].as_str().unwrap_or("usd");
    let mut rows = String::new();
    for line in inv["lines"]["data"].as_array().into_iter().flatten() {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{} – {}</td><td>{}</td></tr>",
            esc(line["description"].as_str().unwrap_or("")),
            format_date(line["period"]["start"].as_i64().unwrap_or(0)),
            format_date(line["period"]["end"].as_i64().unwrap_or(0)),
            money(line["amount"].as_i64().unwrap_or(0), currency)
        ));
    }
    let number = inv["number"].as_str().unwrap_or("draft");
    let title = format!("Invoice {number}");
    let body = format!(
        "<h1>{}</h1><p>Status: <strong class=\"status\">{}</strong></p>\
         <p>Billed to {}</p><table>{rows}</table>\
         <p>Amount due: {}</p><p>Amount paid: {}</p><p>Amount remaining: {}</p>",
        esc(&title),
        esc(inv["status"].as_str().unwrap_or("")),
        esc(inv["customer_email"].as_str().or(inv["customer"].as_str()).unwrap_or("")),
        money(inv["amount_due"].as_i64().unwrap_or(0), currency),
        money(inv["amount_paid"].as_i64().unwrap_or(0), currency),
        money(inv["amount_remaining"].as_i64().unwrap_or(0), currency),
    );
    let pay = if InvoiceStatus::of(inv) == Some(InvoiceStatus::Open) {
        let error = error
            .map(|e| format!("<p class=\"error\" id=\"card-errors\" role=\"alert\">{}</p>", esc(e)))
            .unwrap_or_default();
        format!(
            "{error}<form method=\"post\" action=\"/i/{id}\">\
             <label for=\"card-number\">Card number</label>\
             <input id=\"card-number\" name=\"card_number\" type=\"text\" inputmode=\"numeric\" \
              autocomplete=\"cc-number\" placeholder=\"4242 4242 4242 4242\" required>\
             <button type=\"submit\" id=\"submit\">Pay {}</button></form>",
            money(inv["amount_remaining"].as_i64().unwrap_or(0), currency),
            id = esc(id),
        )
    } else {
        error.map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", esc(e))).unwrap_or_default()
    };
    html(status, layout(&title, &format!("{body}{pay}")))
}

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}}\
         .error{{color:#b00020}}input{{display:block;width:100%;padding:.5rem;margin:.5rem 0 1rem}}\
         button{{padding:.6rem 2rem}}td{{padding:.2rem .6rem}}</style></head>\
         <body><p class=\"brand\">Stripe stand-in — test mode</p>{body}</body></html>",
        esc(title)
    )
}

/// Amount in minor units as the customer reads it.
pub fn money(amount: i64, currency: &str) -> String {
    // Credits (proration lines) are negative: the sign goes before the whole amount, `-$5.00`.
    let sign = if amount < 0 { "-" } else { "" };
    let major = format!("{}.{:02}", amount.abs() / 100, amount.abs() % 100);
    match currency {
        "usd" => format!("{sign}${major}"),
        "eur" => format!("{sign}€{major}"),
        "gbp" => format!("{sign}£{major}"),
        other => format!("{sign}{major} {}", other.to_uppercase()),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}
