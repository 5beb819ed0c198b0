//! Billing: a product's prices and their Stripe state (operator, on the product page), a member's
//! billing page (plan, subscriptions, tiers to buy, invoices), and the operator's billing
//! overview (subscriptions, the outbox, Stripe's events).
//!
//! Amounts come as minor units with their currency and are worded here ([`money`]).

use maud::{Markup, html};

use crate::components::{
    Column, Tone, badge, card, facts, info_note, notice, or_none, org_link, refusal, stat, table_cols,
};
use crate::forms::{
    FormState, Input, Select, csrf_field, form_banners, hx_form, input_field, select_field, submit, subscription_form,
};
use crate::pages::home::{PlanLine, plan_section};
use crate::paths::{self, fill};

// ---------- Money ----------

/// Currencies Stripe counts in whole units (no cents): the prices' parse reads their amounts
/// by this list too, so what an operator types, what Stripe charges and what the page shows agree.
pub const ZERO_DECIMAL: &[&str] =
    &["bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"];

/// An amount in minor units, worded with its currency: "€12.00", "$1,250.50", "CHF 9.90",
/// "¥1,200". A currency without a symbol here is written by its code.
pub fn money(amount_minor: i64, currency: &str) -> String {
    let lower = currency.to_ascii_lowercase();
    let abs = amount_minor.unsigned_abs();
    let number = if ZERO_DECIMAL.contains(&lower.as_str()) {
        grouped(abs)
    } else {
        format!("{}.{:02}", grouped(abs / 100), abs % 100)
    };
    let sign = if amount_minor < 0 { "-" } else { "" };
    match lower.as_str() {
        "eur" => format!("{sign}€{number}"),
        "usd" => format!("{sign}${number}"),
        "gbp" => format!("{sign}£{number}"),
        "jpy" => format!("{sign}¥{number}"),
        _ => format!("{sign}{} {number}", lower.to_ascii_uppercase()),
    }
}

/// A price per interval: "€12.00 / month".
pub fn price_words(amount_minor: i64, currency: &str, interval: &str) -> String {
    format!("{} / {interval}", money(amount_minor, currency))
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

// ---------- The product page's prices (operator) ----------

/// Where a product or a price stands with Stripe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeState {
    NotSynced,
    Pending,
    /// Stripe's id for it.
    Synced(String),
    /// The reason the last attempt failed.
    Failed(String),
}

fn stripe_state(s: &StripeState) -> Markup {
    match s {
        StripeState::NotSynced => badge("not synced", Tone::Muted),
        StripeState::Pending => badge("pending", Tone::Warn),
        StripeState::Synced(id) => html! { (badge("synced", Tone::Ok)) " " code { (id) } },
        StripeState::Failed(why) => html! { (badge("failed", Tone::Bad)) " " span.field-error { (why) } },
    }
}

pub struct PriceRow {
    pub price_id: i64,
    /// "month" or "year".
    pub interval: String,
    pub amount_minor: i64,
    pub currency: String,
    pub active: bool,
    pub stripe: StripeState,
    /// An archived price Stripe still sells (the next sync archives it there).
    pub still_on_sale_in_stripe: bool,
}

pub struct ProductPricesView {
    pub csrf: String,
    pub product_id: i64,
    /// The product's own Stripe product.
    pub product_stripe: StripeState,
    pub prices: Vec<PriceRow>,
    /// What the last act did ("Sync queued: …"), after the redirect back.
    pub notice: Option<String>,
    /// A refused archive or sync, in words.
    pub errors: Vec<String>,
    /// The "Set a price" form: interval, amount, currency.
    pub form: FormState,
}

/// The whole product page: its edit form, then its prices.
pub fn product_with_prices(edit: &crate::pages::catalog::ProductEditView, prices: &ProductPricesView) -> Markup {
    html! {
        (crate::pages::catalog::product_edit(edit))
        (product_prices(prices))
    }
}

/// The product page's "Prices" section, in its container `#product-prices`.
pub fn product_prices(v: &ProductPricesView) -> Markup {
    let sync_action = fill(paths::CATALOG_PRODUCT_SYNC, &[&v.product_id]);
    html! {
        section.card #product-prices aria-labelledby="prices-heading" {
            h2 #prices-heading { "Prices" }
            p.muted {
                "What members pay for this product. Stripe never changes a price's amount: a new amount "
                "for an interval and currency archives the old price and adds a new one. Members can buy "
                "a price once Stripe has it."
            }
            @if let Some(n) = &v.notice {
                (notice(n))
            }
            (crate::forms::form_errors(&v.errors))
            (facts(&[("Stripe product", stripe_state(&v.product_stripe))]))
            (prices_table(v))
            (hx_form(&sync_action, "product-prices", &v.csrf, html! {
                div.form-actions {
                    button.btn.btn-secondary type="submit" { "Sync to Stripe" }
                }
            }))
            (price_form(v))
        }
    }
}

fn prices_table(v: &ProductPricesView) -> Markup {
    let rows = v
        .prices
        .iter()
        .map(|p| {
            let archive = fill(paths::CATALOG_PRICE_ARCHIVE, &[&p.price_id]);
            let words = price_words(p.amount_minor, &p.currency, &p.interval);
            vec![
                html! { (interval_words(&p.interval)) },
                html! { (words) },
                if p.active { badge("active", Tone::Ok) } else { badge("archived", Tone::Muted) },
                html! {
                    (stripe_state(&p.stripe))
                    @if p.still_on_sale_in_stripe {
                        " " span.muted { "still on sale in Stripe until the next sync" }
                    }
                },
                html! {
                    @if p.active {
                        (hx_form(&archive, "product-prices", &v.csrf, html! {
                            button.btn.btn-secondary.btn-small type="submit"
                                aria-label=(format!("Archive {words}")) { "Archive" }
                        }))
                    }
                },
            ]
        })
        .collect();
    let columns = [
        Column::text("Interval"),
        Column::text("Amount"),
        Column::text("Status"),
        Column::text("Stripe"),
        Column::text(""),
    ];
    table_cols(&columns, rows, "No prices yet.")
}

fn interval_words(interval: &str) -> &str {
    match interval {
        "month" => "Monthly",
        "year" => "Yearly",
        other => other,
    }
}

fn price_form(v: &ProductPricesView) -> Markup {
    let f = &v.form;
    let action = fill(paths::CATALOG_PRODUCT_PRICES, &[&v.product_id]);
    let intervals = [("month", "Per month"), ("year", "Per year")];
    let currency = match f.value("currency") {
        "" if f.values.is_empty() => "eur",
        c => c,
    };
    html! {
        div.form-panel {
            h3 { "Set a price" }
            (form_banners(f))
            (hx_form(&action, "product-prices", &v.csrf, html! {
                (select_field(&Select {
                    required: true,
                    ..f.select("interval", "interval", "Interval", &intervals)
                }))
                (input_field(&Input {
                    required: true,
                    placeholder: Some("12.50"),
                    hint: Some("In the currency's main unit, such as 12 or 12.50."),
                    ..f.input("amount", "amount", "Amount")
                }))
                (input_field(&Input {
                    value: currency,
                    required: true,
                    placeholder: Some("eur"),
                    hint: Some("A three-letter code such as eur or usd."),
                    ..f.input("currency", "currency", "Currency")
                }))
                (submit("Set price"))
            }))
        }
    }
}

// ---------- A member's billing page ----------

/// What the checkout's return said, shown once above the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckoutNote {
    Paid,
    Pending,
    Canceled,
}

/// What a plan change did, shown once above the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeNote {
    Upgraded,
    DowngradeScheduled,
    Undone,
    Canceling,
    Kept,
    Resumed,
    Seats,
}

/// A change a subscription will make at its period's end.
pub struct ScheduledLine {
    pub ladder_id: i64,
    /// "Pro until 31 Dec 2026, then Basic".
    pub words: String,
}

pub struct SubscriptionLine {
    pub subscription_id: i64,
    pub stripe_id: String,
    /// Stripe's status: "active", "past_due", ...
    pub status: String,
    pub products: Vec<String>,
    /// Already formatted.
    pub period_end: Option<String>,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
    pub scheduled: Vec<ScheduledLine>,
    /// Items sold in seats: their seats now, and a form to change them.
    pub seats: Vec<SeatsLine>,
}

/// An item whose tier is sold in seats.
pub struct SeatsLine {
    pub tier: String,
    pub price_id: i64,
    pub quantity: i64,
    pub max_quantity: i32,
}

/// A tier on sale at one price.
pub struct Offer {
    pub price_id: i64,
    pub tier: String,
    pub rank: i32,
    pub interval: String,
    pub amount_minor: i64,
    pub currency: String,
    /// The organization holds this tier now.
    pub current: bool,
    /// The subscription holding the ladder can switch to this price (same interval and currency).
    pub switchable: bool,
    /// The most seats a member may buy (1: not sold in seats).
    pub max_quantity: i32,
}

pub struct LadderOffers {
    pub ladder: String,
    pub offers: Vec<Offer>,
    /// A live subscription of the organization holds this ladder: its tier is switched, not
    /// bought again.
    pub subscribed: bool,
    /// That subscription, when it can be switched now (active, not ending, nothing scheduled here).
    pub switch_from: Option<i64>,
    /// Why it cannot, when it holds the ladder but cannot be switched now.
    pub switch_blocked: Option<String>,
}

pub struct InvoiceLine {
    /// Already formatted.
    pub date: String,
    pub number: Option<String>,
    pub amount_due: i64,
    pub amount_remaining: i64,
    pub currency: String,
    /// Stripe's status: "draft", "open", "paid", "uncollectible", "void".
    pub status: String,
    pub url: Option<String>,
}

pub struct OrgBilling {
    pub organization_id: i64,
    pub name: String,
    pub is_owner: bool,
    /// Its subscriptions another plan displaced (Resume plan).
    pub displaced: Vec<crate::pages::home::DisplacedLine>,
    pub plan: Vec<PlanLine>,
    pub subscriptions: Vec<SubscriptionLine>,
    pub ladders: Vec<LadderOffers>,
    pub invoices: Vec<InvoiceLine>,
}

pub struct BillingView {
    pub csrf: String,
    pub checkout: Option<CheckoutNote>,
    pub change: Option<ChangeNote>,
    /// Whether billing (Stripe) is connected: without it nothing can be bought.
    pub connected: bool,
    pub organizations: Vec<OrgBilling>,
}

/// The member's billing page: a card per organization.
pub fn member_billing(v: &BillingView) -> Markup {
    html! {
        @match v.checkout {
            Some(CheckoutNote::Paid) => (notice("Payment received: your plan is active.")),
            Some(CheckoutNote::Pending) => div.notice.info role="status" {
                p { "Your payment is being confirmed; this page updates when Stripe tells us." }
            },
            Some(CheckoutNote::Canceled) => div.notice.info role="status" {
                p { "Checkout canceled; nothing was charged." }
            },
            None => {}
        }
        @match v.change {
            Some(ChangeNote::Upgraded) => (notice("Switched: the new plan is in force now, and the difference was charged.")),
            Some(ChangeNote::DowngradeScheduled) => (notice("Scheduled: you keep the current plan until the period ends.")),
            Some(ChangeNote::Undone) => (notice("The scheduled change is undone: the plan stays as it is.")),
            Some(ChangeNote::Canceling) => (notice("The subscription will end at the period's end; until then nothing changes.")),
            Some(ChangeNote::Kept) => (notice("The subscription goes on: it renews as before.")),
            Some(ChangeNote::Seats) => (notice("The seats are changed.")),
            Some(ChangeNote::Resumed) => (notice("Resumed: your subscription's plan is in force again, and its payments start again.")),
            None => {}
        }
        @if !v.connected {
            (info_note(html! {
                p { "Billing is not available right now: this console is not connected to a payment provider, so plans cannot be bought here." }
            }))
        }
        @if v.organizations.is_empty() {
            section.card {
                p { "You are not a member of any organization yet, so there is nothing to bill." }
            }
        }
        @for org in &v.organizations {
            (org_billing(v, org))
        }
    }
}

fn org_billing(v: &BillingView, o: &OrgBilling) -> Markup {
    let heading = format!("billing-org-{}-heading", o.organization_id);
    let open: Vec<&InvoiceLine> = o.invoices.iter().filter(|i| i.status == "open").collect();
    let failing = o.subscriptions.iter().any(|s| matches!(s.status.as_str(), "past_due" | "unpaid"));
    html! {
        section.card.org-billing aria-labelledby=(heading) {
            h2 id=(heading) { (o.name) }
            (crate::pages::home::displaced_notes(&v.csrf, o.organization_id, o.is_owner, &o.displaced))
            @if failing {
                (refusal(
                    "A payment failed",
                    "Stripe could not take the last payment, so the plan is suspended until it is paid. \
                     Update the card in Stripe: open the invoice below and pay it.",
                ))
            }
            @for i in &open {
                div.refusal role="alert" {
                    strong { "An invoice is waiting to be paid" }
                    p {
                        "Invoice " (i.number.as_deref().unwrap_or("without a number")) " of " (i.date) ": "
                        (money(i.amount_remaining, &i.currency)) " is still due. "
                        @if let Some(url) = &i.url {
                            a href=(url) target="_blank" rel="noopener" { "Pay it in Stripe" }
                        }
                    }
                }
            }
            (plan_section(&o.plan))
            h3 { "Subscriptions" }
            (subscriptions_table(v, o))
            h3 { "Plans you can buy" }
            (offers(v, o))
            h3 { "Invoices" }
            (invoices_table(&o.invoices))
        }
    }
}

/// A plan switch to confirm.
pub struct SwitchConfirmView {
    pub csrf: String,
    pub organization_id: i64,
    pub organization: String,
    pub subscription_id: i64,
    pub price_id: i64,
    pub ladder: String,
    pub from: String,
    pub to: String,
    pub upgrade: bool,
    /// A change of seats on the same tier: (now, after).
    pub seats: Option<(u64, u64)>,
    /// An upgrade's charge today, formatted.
    pub charge: Option<String>,
    /// The period's end (a downgrade's date), formatted.
    pub effective: String,
    /// The quote's id, which the confirmation carries back.
    pub operation: String,
}

/// "Switch Pro to Team?": what happens, the amount, Confirm and Back.
pub fn switch_confirm(v: &SwitchConfirmView) -> Markup {
    html! {
        section.card aria-labelledby="switch-heading" {
            @if let Some((from, to)) = v.seats {
                h2 id="switch-heading" { "Change " (v.organization) "'s " (v.to) " from " (from) " to " (to) " seats?" }
                @if to > from {
                    p { "The seats apply now." }
                    @if let Some(charge) = &v.charge {
                        p.amount { "You will be charged " strong { (charge) } " today: the added seats for the rest of the current period." }
                    }
                } @else {
                    p { "The seats apply now; the unused time of the seats removed is credited on your next invoice." }
                }
            } @else {
                h2 id="switch-heading" { "Switch " (v.organization) " from " (v.from) " to " (v.to) "?" }
                @if v.upgrade {
                    p { (v.to) " applies now, on " (v.ladder) "." }
                    @if let Some(charge) = &v.charge {
                        p.amount { "You will be charged " strong { (charge) } " today: the difference for the rest of the current period." }
                    }
                    p.muted { "From the next period on, " (v.to) "'s price is charged." }
                } @else {
                    p { "You keep " (v.from) " until " (v.effective) ", then " (v.to) " applies, at its price." }
                    p.muted { "Nothing is charged now. You can undo this until " (v.effective) "." }
                }
            }
            (subscription_form(&v.csrf, None, paths::BILLING_SWITCH, v.organization_id, v.subscription_id, html! {
                input type="hidden" name="price_id" value=(v.price_id);
                input type="hidden" name="confirm" value="1";
                input type="hidden" name="operation" value=(v.operation);
                div.form-actions {
                    button.btn.btn-primary type="submit" {
                        @if v.seats.is_some() { "Change the seats" }
                        @else if v.upgrade { "Switch now and pay" } @else { "Schedule the switch" }
                    }
                    " " a.btn.btn-secondary href=(paths::BILLING) { "Back" }
                }
            }))
        }
    }
}

/// A subscription's status in a member's words.
pub fn subscription_status_words(status: &str) -> &str {
    match status {
        "active" => "active",
        "trialing" => "in its trial",
        "past_due" => "past due — payment failed: update the card in Stripe",
        "unpaid" => "unpaid — payment failed: update the card in Stripe",
        "paused" => "paused",
        "canceled" => "canceled",
        "incomplete" => "waiting for the first payment",
        "incomplete_expired" => "never started: the first payment did not go through",
        other => other,
    }
}

fn status_tone(status: &str) -> Tone {
    match status {
        "active" | "trialing" => Tone::Ok,
        "past_due" | "unpaid" => Tone::Bad,
        "paused" | "incomplete" => Tone::Warn,
        _ => Tone::Muted,
    }
}

fn subscriptions_table(v: &BillingView, o: &OrgBilling) -> Markup {
    let acts = o.is_owner && v.connected;
    let rows = o
        .subscriptions
        .iter()
        .map(|s| {
            let live = matches!(s.status.as_str(), "active" | "trialing" | "past_due");
            // An ended subscription renews nothing and makes no scheduled change.
            let ended = matches!(s.status.as_str(), "canceled" | "incomplete_expired");
            vec![
                html! {
                    @if s.products.is_empty() { span.muted { "no items" } } @else { (s.products.join(", ")) }
                    @for seat in &s.seats {
                        br;
                        @if acts && live {
                            (subscription_form(&v.csrf, Some("inline seats"), paths::BILLING_SWITCH,
                                o.organization_id, s.subscription_id, html! {
                                input type="hidden" name="price_id" value=(seat.price_id);
                                label { (seat.tier) " seats "
                                    input type="number" name="quantity" min="1" max=(seat.max_quantity) value=(seat.quantity) required; }
                                " " button.btn.btn-secondary.btn-small type="submit" aria-label=(format!("Change the seats of {}", seat.tier)) { "Change…" }
                            }))
                        } @else {
                            span.muted { (seat.quantity) " seats of " (seat.tier) }
                        }
                    }
                    @for c in s.scheduled.iter().filter(|_| !ended) {
                        br; span.scheduled { (c.words) }
                        @if acts {
                            " " (hidden_post(v, paths::BILLING_SWITCH_UNDO, o.organization_id, s.subscription_id,
                                &[("ladder_id", c.ladder_id.to_string())], "Undo", &format!("Undo: {}", c.words)))
                        }
                    }
                },
                badge(subscription_status_words(&s.status), status_tone(&s.status)),
                html! {
                    @match &s.period_end {
                        _ if ended => span.muted { "ended" },
                        Some(end) if s.cancel_at_period_end => { "ends at period end, " (end) }
                        Some(end) => { "renews " (end) }
                        None => span.muted { "—" },
                    }
                    @if s.collection_paused {
                        " " (badge("payments paused", Tone::Muted))
                    }
                },
                html! {
                    @if acts && live && s.cancel_at_period_end {
                        (hidden_post(v, paths::BILLING_CANCEL, o.organization_id, s.subscription_id,
                            &[("keep", "1".into())], "Keep the plan", &format!("Keep {}", s.products.join(", "))))
                    } @else if acts && live {
                        details.inline.confirm {
                            summary.btn.btn-secondary.btn-small { "Cancel…" }
                            (subscription_form(&v.csrf, None, paths::BILLING_CANCEL,
                                o.organization_id, s.subscription_id, html! {
                                p { "End " (s.products.join(", ")) " at the period's end"
                                    @if let Some(end) = &s.period_end { " (" (end) ")" }
                                    "? You keep it until then and are not charged again; you can undo this until then." }
                                button.btn.btn-danger.btn-small type="submit" { "Cancel at period end" }
                            }))
                        }
                    }
                },
            ]
        })
        .collect();
    let columns = [Column::text("Plan"), Column::text("Status"), Column::text("Current period"), Column::text("")];
    table_cols(&columns, rows, "No subscriptions.")
}

/// A one-button form about one subscription.
fn hidden_post(
    v: &BillingView,
    action: &str,
    organization_id: i64,
    subscription_id: i64,
    fields: &[(&str, String)],
    text: &str,
    label: &str,
) -> Markup {
    subscription_form(
        &v.csrf,
        Some("inline"),
        action,
        organization_id,
        subscription_id,
        html! {
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button.btn.btn-secondary.btn-small type="submit" aria-label=(label) { (text) }
        },
    )
}

fn offers(v: &BillingView, o: &OrgBilling) -> Markup {
    html! {
        @if o.ladders.is_empty() {
            p.empty { "No plans are on sale right now." }
        } @else {
            @if !o.is_owner {
                p.muted { "Ask an owner of " (o.name) " to change the plan." }
            }
            @for l in &o.ladders {
                h4 { (l.ladder) }
                @if let Some(why) = &l.switch_blocked {
                    p.muted { (why) }
                } @else if l.subscribed && o.is_owner {
                    p.muted {
                        "Switch to another tier: a higher one applies now (you see the amount first), a lower one "
                        "at the end of the period you paid for."
                    }
                }
                (table_cols(
                    &[Column::text("Tier"), Column::text("Price"), Column::text("")],
                    l.offers.iter().map(|offer| offer_row(v, o, l, offer)).collect(),
                    "",
                ))
            }
        }
    }
}

fn offer_row(v: &BillingView, o: &OrgBilling, l: &LadderOffers, offer: &Offer) -> Vec<Markup> {
    let words = price_words(offer.amount_minor, &offer.currency, &offer.interval);
    vec![
        html! { (offer.tier) },
        html! { (words) },
        html! {
            @if offer.current {
                (badge("current plan", Tone::Ok))
            } @else if let (true, true, true, Some(sub)) = (o.is_owner, v.connected, offer.switchable, l.switch_from) {
                (subscription_form(&v.csrf, Some("buy"), paths::BILLING_SWITCH, o.organization_id, sub, html! {
                    input type="hidden" name="price_id" value=(offer.price_id);
                    button.btn.btn-secondary.btn-small type="submit"
                        aria-label=(format!("Switch to {} at {words} for {}", offer.tier, o.name)) { "Switch…" }
                }))
            } @else if o.is_owner && v.connected && !l.subscribed {
                form.buy method="post" action=(paths::BILLING_CHECKOUT) {
                    (csrf_field(&v.csrf))
                    input type="hidden" name="organization_id" value=(o.organization_id);
                    input type="hidden" name="price_id" value=(offer.price_id);
                    @if offer.max_quantity > 1 {
                        label { "Seats " input.seats type="number" name="quantity" min="1" max=(offer.max_quantity) value="1" required; }
                        " "
                    }
                    button.btn.btn-primary.btn-small type="submit"
                        aria-label=(format!("Buy {} at {words} for {}", offer.tier, o.name)) { "Buy" }
                }
            }
        },
    ]
}

fn invoice_status_words(status: &str) -> &str {
    match status {
        "draft" => "draft",
        "open" => "open: to be paid",
        "paid" => "paid",
        "uncollectible" => "uncollectible",
        "void" => "void",
        other => other,
    }
}

fn invoices_table(invoices: &[InvoiceLine]) -> Markup {
    let rows = invoices
        .iter()
        .map(|i| {
            let tone = match i.status.as_str() {
                "paid" => Tone::Ok,
                "open" => Tone::Warn,
                "uncollectible" => Tone::Bad,
                _ => Tone::Muted,
            };
            vec![
                html! { (i.date) },
                html! { (i.number.as_deref().unwrap_or("—")) },
                html! { (money(i.amount_due, &i.currency)) },
                badge(invoice_status_words(&i.status), tone),
                html! {
                    @if let Some(url) = &i.url {
                        a href=(url) target="_blank" rel="noopener" { "View invoice" }
                    }
                },
            ]
        })
        .collect();
    let columns =
        [Column::text("Date"), Column::text("Number"), Column::num("Amount"), Column::text("Status"), Column::text("")];
    table_cols(&columns, rows, "No invoices yet.")
}

// ---------- The operator's billing overview ----------

pub struct OpSubscriptionRow {
    pub organization_id: i64,
    pub organization: String,
    pub stripe_id: String,
    pub status: String,
    pub period_end: Option<String>,
    pub cancel_at_period_end: bool,
    pub collection_paused: bool,
}

pub struct OpOutboxRow {
    pub outbox_id: i64,
    /// "reconcile_subscription" or "sync_product".
    pub kind: String,
    /// What it is about, worded: the Stripe subscription, or the product.
    pub object: String,
    pub attempts: i32,
    pub due_at: String,
    pub last_error: Option<String>,
    pub stuck: bool,
}

pub struct OpEventRow {
    pub event_id: String,
    pub event_type: String,
    pub object_id: Option<String>,
    pub received_at: String,
}

pub struct OperatorBillingView {
    /// Live subscriptions by Stripe status.
    pub live_by_status: Vec<(String, i64)>,
    pub outbox_pending: i64,
    pub outbox_stuck: i64,
    pub events_last_day: i64,
    pub subscriptions: Vec<OpSubscriptionRow>,
    /// How many subscriptions there are in all, and how many the table shows at most.
    pub subscriptions_total: i64,
    pub subscriptions_cap: i64,
    pub outbox: Vec<OpOutboxRow>,
    pub outbox_cap: i64,
    pub events: Vec<OpEventRow>,
}

pub fn operator_billing(v: &OperatorBillingView) -> Markup {
    let live: i64 = v.live_by_status.iter().map(|(_, n)| n).sum();
    html! {
        section.stats aria-label="Summary" {
            (stat("Live subscriptions", live, false))
            (stat("Outbox rows waiting", v.outbox_pending, false))
            (stat("Outbox rows stuck", v.outbox_stuck, false))
            (stat("Stripe events, last 24 h", v.events_last_day, false))
        }
        (card("live-heading", "Live subscriptions by status", html! {
            (table_cols(
                &[Column::text("Status"), Column::num("Subscriptions")],
                v.live_by_status.iter().map(|(s, n)| vec![badge(s, status_tone(s)), html! { (n) }]).collect(),
                "No live subscriptions.",
            ))
        }))
        (card("subs-heading", "Subscriptions", html! {
            @if v.subscriptions_total > v.subscriptions_cap {
                p.muted { "The newest " (v.subscriptions_cap) " of " (v.subscriptions_total) " subscriptions." }
            }
            (op_subscriptions(&v.subscriptions))
        }))
        (card("outbox-heading", "Outbox: work not done yet", html! {
            p.muted {
                "Stripe updates the console owes, stuck ones first (tried more than once, or failed). "
                "The processor retries them with backoff."
            }
            @if v.outbox_pending > v.outbox_cap {
                p.muted { "The first " (v.outbox_cap) " of " (v.outbox_pending) " rows." }
            }
            (op_outbox(&v.outbox))
        }))
        (card("events-heading", "Latest Stripe events", html! {
            (table_cols(
                &[Column::text("Type"), Column::text("Object"), Column::text("Received"), Column::text("Event")],
                v.events
                    .iter()
                    .map(|e| vec![
                        html! { code { (e.event_type) } },
                        html! { @if let Some(o) = &e.object_id { code { (o) } } @else { span.muted { "—" } } },
                        html! { (e.received_at) },
                        html! { code { (e.event_id) } },
                    ])
                    .collect(),
                "No events received yet.",
            ))
        }))
    }
}

fn yes_no(b: bool) -> Markup {
    if b {
        badge("yes", Tone::Warn)
    } else {
        html! { span.muted { "no" } }
    }
}

fn op_subscriptions(rows: &[OpSubscriptionRow]) -> Markup {
    let rows = rows
        .iter()
        .map(|s| {
            vec![
                org_link(s.organization_id, &s.organization),
                html! { code { (s.stripe_id) } },
                badge(&s.status, status_tone(&s.status)),
                html! { (s.period_end.as_deref().unwrap_or("—")) },
                yes_no(s.cancel_at_period_end),
                yes_no(s.collection_paused),
            ]
        })
        .collect();
    let columns = [
        Column::text("Organization"),
        Column::text("Stripe subscription"),
        Column::text("Status"),
        Column::text("Period ends"),
        Column::text("Cancels at period end"),
        Column::text("Collection paused"),
    ];
    table_cols(&columns, rows, "No subscriptions yet.")
}

fn op_outbox(rows: &[OpOutboxRow]) -> Markup {
    let rows = rows
        .iter()
        .map(|o| {
            vec![
                html! {
                    code { (o.kind) }
                    @if o.stuck { " " (badge("stuck", Tone::Bad)) }
                },
                html! { (o.object) },
                html! { (o.attempts) },
                html! { (o.due_at) },
                or_none(o.last_error.as_deref(), "—"),
            ]
        })
        .collect();
    let columns = [
        Column::text("Kind"),
        Column::text("Object"),
        Column::num("Attempts"),
        Column::text("Due"),
        Column::text("Last error"),
    ];
    table_cols(&columns, rows, "Nothing waiting.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_worded_in_its_own_currency() {
        assert_eq!(money(1200, "eur"), "€12.00");
        assert_eq!(money(125050, "usd"), "$1,250.50");
        assert_eq!(money(5, "gbp"), "£0.05");
        assert_eq!(money(990, "chf"), "CHF 9.90");
        assert_eq!(money(1200, "jpy"), "¥1,200");
        assert_eq!(money(-300, "eur"), "-€3.00");
        assert_eq!(price_words(1200, "eur", "month"), "€12.00 / month");
    }

    fn prices_view() -> ProductPricesView {
        ProductPricesView {
            csrf: "tok".into(),
            product_id: 9,
            product_stripe: StripeState::Synced("prod_1".into()),
            prices: vec![
                PriceRow {
                    price_id: 3,
                    interval: "month".into(),
                    amount_minor: 1200,
                    currency: "eur".into(),
                    active: true,
                    stripe: StripeState::Failed("<bad> key".into()),
                    still_on_sale_in_stripe: false,
                },
                PriceRow {
                    price_id: 2,
                    interval: "year".into(),
                    amount_minor: 10000,
                    currency: "usd".into(),
                    active: false,
                    stripe: StripeState::Synced("price_2".into()),
                    still_on_sale_in_stripe: true,
                },
            ],
            notice: Some("Sync queued: the product and 2 prices.".into()),
            errors: vec![],
            form: FormState::default(),
        }
    }

    #[test]
    fn the_prices_section_lists_prices_with_their_stripe_state_and_its_forms() {
        let out = product_prices(&prices_view()).into_string();
        assert!(out.contains(r#"id="product-prices""#));
        assert!(out.contains("€12.00 / month"));
        assert!(out.contains("$100.00 / year"));
        assert!(out.contains("&lt;bad&gt; key"));
        assert!(out.contains("<code>price_2</code>"));
        assert!(out.contains("<code>prod_1</code>"));
        assert!(out.contains("still on sale in Stripe"));
        assert!(out.contains(r#"action="/operator/catalog/prices/3/archive""#));
        assert!(!out.contains("/operator/catalog/prices/2/archive"), "an archived price has no Archive button");
        assert!(out.contains(r#"action="/operator/catalog/products/9/sync""#));
        assert!(out.contains(r#"action="/operator/catalog/products/9/prices""#));
        assert!(out.contains(r#"name="currency" type="text" value="eur""#), "eur by default");
        assert!(out.contains("Sync queued: the product and 2 prices."));
    }

    fn org(is_owner: bool) -> OrgBilling {
        OrgBilling {
            organization_id: 4,
            name: "Acme <Wikis>".into(),
            is_owner,
            displaced: vec![],
            plan: vec![PlanLine {
                ladder: "Wiki hosting".into(),
                tier: "Basic".into(),
                rank: 1,
                source: "your subscription".into(),
                suspended: true,
            }],
            subscriptions: vec![SubscriptionLine {
                subscription_id: 3,
                stripe_id: "sub_1".into(),
                status: "past_due".into(),
                products: vec!["Basic".into()],
                period_end: Some("2026-12-31".into()),
                cancel_at_period_end: true,
                collection_paused: false,
                scheduled: vec![],
                seats: vec![],
            }],
            ladders: vec![LadderOffers {
                ladder: "Wiki hosting".into(),
                offers: vec![
                    Offer {
                        price_id: 7,
                        tier: "Basic".into(),
                        rank: 1,
                        interval: "month".into(),
                        amount_minor: 500,
                        currency: "eur".into(),
                        current: true,
                        switchable: false,
                        max_quantity: 1,
                    },
                    Offer {
                        price_id: 8,
                        tier: "Pro".into(),
                        rank: 2,
                        interval: "month".into(),
                        amount_minor: 1500,
                        currency: "eur".into(),
                        current: false,
                        switchable: true,
                        max_quantity: 5,
                    },
                ],
                subscribed: false,
                switch_from: None,
                switch_blocked: None,
            }],
            invoices: vec![InvoiceLine {
                date: "2026-11-30".into(),
                number: Some("INV-1".into()),
                amount_due: 500,
                amount_remaining: 500,
                currency: "eur".into(),
                status: "open".into(),
                url: Some("https://pay.example/i/1".into()),
            }],
        }
    }

    #[test]
    fn an_owner_sees_buy_buttons_for_tiers_not_held_and_the_invoice_banner() {
        let v = BillingView {
            csrf: "tok".into(),
            checkout: Some(CheckoutNote::Paid),
            change: None,
            connected: true,
            organizations: vec![org(true)],
        };
        let out = member_billing(&v).into_string();
        assert!(out.contains("Payment received: your plan is active."));
        assert!(out.contains("Acme &lt;Wikis&gt;"));
        assert!(out.contains("current plan"));
        assert_eq!(out.matches(r#"action="/billing/checkout""#).count(), 1);
        assert!(out.contains(r#"name="price_id" value="8""#));
        assert!(!out.contains(r#"name="price_id" value="7""#));
        assert!(out.contains(r#"name="csrf_token" value="tok""#));
        assert!(out.contains("payment failed: update the card in Stripe"));
        assert!(out.contains("ends at period end, 2026-12-31"));
        assert!(out.contains(r#"href="https://pay.example/i/1" target="_blank" rel="noopener""#));
        assert!(out.contains("An invoice is waiting to be paid"));
        assert!(out.contains("€15.00 / month"));
    }

    #[test]
    fn a_ladder_a_subscription_holds_offers_a_switch_instead_of_a_buy_button_or_says_why_not() {
        let mut o = org(true);
        o.ladders[0].subscribed = true;
        o.ladders[0].switch_from = Some(3);
        o.subscriptions[0].scheduled =
            vec![ScheduledLine { ladder_id: 4, words: "Pro until 31 Dec 2026, then Basic".into() }];
        let v =
            BillingView { csrf: "tok".into(), checkout: None, change: None, connected: true, organizations: vec![o] };
        let out = member_billing(&v).into_string();
        assert!(!out.contains("/billing/checkout"));
        assert_eq!(out.matches(r#"action="/billing/switch""#).count(), 1, "Pro only: Basic is held");
        assert!(out.contains(r#"name="subscription_id" value="3""#));
        assert!(out.contains("Pro until 31 Dec 2026, then Basic"));
        assert!(out.contains(r#"action="/billing/switch/undo""#) && out.contains(r#"name="ladder_id" value="4""#));
        assert!(out.contains("Keep the plan"), "a subscription ending at period end can be kept");
        let mut o = org(true);
        o.ladders[0].subscribed = true;
        o.ladders[0].switch_blocked = Some("The subscription ends at the period's end: keep it to switch.".into());
        let v =
            BillingView { csrf: "tok".into(), checkout: None, change: None, connected: true, organizations: vec![o] };
        let out = member_billing(&v).into_string();
        assert!(!out.contains(r#"action="/billing/switch""#));
        assert!(out.contains("keep it to switch"));
    }

    #[test]
    fn an_ended_subscription_shows_neither_a_renewal_nor_a_scheduled_change_to_undo() {
        let mut o = org(true);
        o.subscriptions[0].status = "canceled".into();
        o.subscriptions[0].cancel_at_period_end = false;
        o.subscriptions[0].scheduled =
            vec![ScheduledLine { ladder_id: 4, words: "Pro until 31 Dec 2026, then Basic".into() }];
        let v =
            BillingView { csrf: "tok".into(), checkout: None, change: None, connected: true, organizations: vec![o] };
        let out = member_billing(&v).into_string();
        assert!(!out.contains("renews"), "{out}");
        assert!(!out.contains("/billing/switch/undo"), "{out}");
        assert!(!out.contains("then Basic"), "{out}");
        assert!(out.contains("ended"), "{out}");
    }

    #[test]
    fn a_member_who_is_not_an_owner_or_a_console_without_stripe_shows_no_buy_button() {
        let v = BillingView {
            csrf: "tok".into(),
            checkout: None,
            change: None,
            connected: true,
            organizations: vec![org(false)],
        };
        let out = member_billing(&v).into_string();
        assert!(!out.contains("/billing/checkout"));
        assert!(out.contains("Ask an owner of Acme &lt;Wikis&gt; to change the plan."));
        let v = BillingView {
            csrf: "tok".into(),
            checkout: Some(CheckoutNote::Canceled),
            change: None,
            connected: false,
            organizations: vec![org(true)],
        };
        let out = member_billing(&v).into_string();
        assert!(!out.contains("/billing/checkout"));
        assert!(out.contains("Billing is not available right now"));
        assert!(out.contains("Checkout canceled; nothing was charged."));
    }
}
