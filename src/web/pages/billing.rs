//! Billing pages: a product's prices and its sync to Stripe (operator, on the product page); the
//! member's `/billing` (plan, subscriptions, tiers to buy, invoices), the checkout and its
//! return; the operator's billing overview.
//!
//! The price forms answer like the catalog's: success goes back to the product page with a flag
//! that words what happened (the sync says what it queued); a refusal draws the Prices section
//! again, in place for HTMX. The checkout sends the browser to Stripe's page with a 303 (or
//! `HX-Redirect`); nothing of it is a same-origin path, so it does not go through `after_post`.

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use views::{
    FormState,
    paths::{self, fill},
};

use crate::{
    ids::{OrganizationId, PriceId, ProductId, SubscriptionId},
    integrations::stripe::Stripe,
    services::{
        self, ServiceError,
        billing::{
            self as billing,
            catalog_sync::{NewPrice, SyncAnswer},
            checkout::{CheckoutOutcome, ReturnTo},
            plan_changes::{self, SwitchKind},
            reads,
        },
    },
    states::{SubscriptionBranch, SubscriptionStatus},
    store::{accounts::SessionAccount, billing_reads::OrgSubscription},
    web::{
        AppState,
        call::{Call, MemberCall, MemberPage, OperatorCall, PageRead},
        errors::AppError,
        forms::{Form, after_post, query_or_default, see_other},
        identity::{Member, csrf_token},
        refusals::{self, Refused, Words},
        render,
    },
};

use super::{catalog::product_edit_view, home::plan_lines, product_prices::prices_view};

const PRICE_WORDS: Words = Words { done: "saved", busy: None };

// ---------- The product page's prices (operator) ----------

/// The price form.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PriceForm {
    interval: String,
    amount: String,
    currency: String,
}

/// A refused price act: the Prices section alone for HTMX, else the whole product page.
async fn prices_refused(
    req: &HttpRequest,
    state: &AppState,
    product_id: i64,
    status: StatusCode,
    form: Option<FormState>,
    errors: Vec<String>,
) -> Result<HttpResponse, AppError> {
    let (name, edit) = product_edit_view(req, state, product_id, None).await?.ok_or(AppError::NotFound)?;
    let prices = prices_view(req, state, product_id, form, errors).await?;
    let title = format!("Product: {name}");
    Ok(refusals::answer(
        req,
        status,
        &title,
        || views::product_prices(&prices),
        || views::product_with_prices(&edit, &prices),
    ))
}

fn product_page_with(id: i64, query: &str) -> String {
    format!("{}?{query}", fill(paths::CATALOG_PRODUCT, &[&id]))
}

#[tracing::instrument(name = "Page: set a price", skip_all, fields(product_id = *id))]
pub async fn set_price(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<i64>,
    form: Form<PriceForm>,
) -> Result<HttpResponse, AppError> {
    let set = match NewPrice::parse(&form.interval, &form.amount, &form.currency) {
        Ok(p) => billing::set_price(&state.db, ProductId(*id), &p).await,
        Err(e) => Err(e),
    };
    let to = set.map(|_| product_page_with(*id, "price=set"));
    let draw = async |r: Refused| prices_refused(&req, &state, *id, r.status, Some(r.form), vec![]).await;
    refusals::posted(&req, to, form.values(), PRICE_WORDS, draw).await
}

#[tracing::instrument(name = "Page: archive a price", skip_all, fields(price_id = *id))]
pub async fn archive_price(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<i64>,
) -> Result<HttpResponse, AppError> {
    let price = reads::price(&state.db, PriceId(*id)).await?.ok_or(AppError::NotFound)?;
    let product = price.product_id.0;
    let to = billing::archive_price(&state.db, PriceId(*id)).await.map(|()| product_page_with(product, "archived=1"));
    let draw = async |r: Refused| prices_refused(&req, &state, product, r.status, None, r.form.errors).await;
    refusals::posted(&req, to, vec![], PRICE_WORDS, draw).await
}

#[tracing::instrument(name = "Page: sync a product to Stripe", skip_all, fields(product_id = *id))]
pub async fn sync_product(Call { req, state, .. }: OperatorCall, id: web::Path<i64>) -> Result<HttpResponse, AppError> {
    let to = billing::sync_product(&state.db, ProductId(*id)).await.map(|answer| {
        let flag = match answer {
            SyncAnswer::Enqueued { product, prices } => {
                format!("sync=queued&product={}&prices={prices}", u8::from(product))
            }
            SyncAnswer::AlreadyPending => "sync=waiting".into(),
            SyncAnswer::UpToDate => "sync=current".into(),
        };
        product_page_with(*id, &flag)
    });
    let draw = async |r: Refused| prices_refused(&req, &state, *id, r.status, None, r.form.errors).await;
    refusals::posted(&req, to, vec![], PRICE_WORDS, draw).await
}

// ---------- The member's billing page ----------

#[derive(Deserialize, Default)]
#[serde(default)]
struct BillingQuery {
    checkout: Option<String>,
    changed: Option<String>,
}

fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d").to_string()
}

/// "31 Dec 2026", as a member reads a date a change happens.
fn long_day(t: DateTime<Utc>) -> String {
    t.format("%-d %b %Y").to_string()
}

/// Why a subscription holding a ladder cannot be switched now, in the member's words.
fn switch_blocked(s: &OrgSubscription, ladder: crate::ids::LadderId) -> Option<String> {
    if s.cancel_at_period_end {
        return Some("The subscription ends at the period's end: keep it to switch its plan.".into());
    }
    s.scheduled.iter().find(|c| c.ladder_id == ladder).map(|c| {
        format!("A change to {} is scheduled for {}: undo it to choose another.", c.to, long_day(c.effective_at))
    })
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The billing page's read: the member's organizations, subscriptions and invoices, with the
/// session.
pub struct BillingRead(crate::store::billing_reads::MemberBillingDoc);

impl PageRead for BillingRead {
    async fn resume(state: &AppState, token: &str) -> Result<Option<(SessionAccount, Self)>, AppError> {
        Ok(services::auth::resume_session_with_billing(&state.db, token, &state.on_sale)
            .await?
            .map(|(a, doc)| (a, BillingRead(doc))))
    }
}

#[tracing::instrument(name = "Page: billing", skip_all, fields(account_id = %who.account_id))]
pub async fn billing_page(
    MemberPage { who, req, state, doc: BillingRead(doc) }: MemberPage<BillingRead>,
) -> Result<HttpResponse, AppError> {
    let q = query_or_default::<BillingQuery>(&req);
    let checkout = q.checkout.and_then(|c| match c.as_str() {
        "paid" => Some(views::CheckoutNote::Paid),
        "pending" => Some(views::CheckoutNote::Pending),
        "canceled" => Some(views::CheckoutNote::Canceled),
        _ => None,
    });
    let change = q.changed.and_then(|c| match c.as_str() {
        "upgraded" => Some(views::ChangeNote::Upgraded),
        "scheduled" => Some(views::ChangeNote::DowngradeScheduled),
        "undone" => Some(views::ChangeNote::Undone),
        "canceling" => Some(views::ChangeNote::Canceling),
        "kept" => Some(views::ChangeNote::Kept),
        "resumed" => Some(views::ChangeNote::Resumed),
        "seats" => Some(views::ChangeNote::Seats),
        _ => None,
    });
    let b = reads::MemberBilling::from(doc);
    let organizations = b
        .organizations
        .into_iter()
        .map(|o| {
            let org = o.membership.organization_id;
            let plan = plan_lines(&o.held);
            let subscriptions: Vec<_> = b.subscriptions.iter().filter(|s| s.organization_id == org).collect();
            // The ladders a live subscription holds, as the checkout reads them.
            let subscribed = |ladder: &str| {
                subscriptions.iter().any(|s| {
                    !matches!(
                        s.status,
                        SubscriptionStatus::Canceled
                            | SubscriptionStatus::IncompleteExpired
                            | SubscriptionStatus::Incomplete
                    ) && s.ladders.iter().any(|l| l == ladder)
                })
            };
            // The live subscription holding a ladder, and its item there when the console knows it.
            let holder = |ladder: &str| {
                subscriptions
                    .iter()
                    .find(|s| s.status.branch() != SubscriptionBranch::Ended && s.ladders.iter().any(|l| l == ladder))
                    .map(|s| (*s, s.items.iter().find(|i| i.ladder == ladder)))
            };
            let mut ladders: Vec<views::LadderOffers> = vec![];
            for t in b.on_sale.iter() {
                let held = holder(&t.ladder);
                let active = held.is_some_and(|(s, _)| s.status.branch() == SubscriptionBranch::Active);
                let offer = views::Offer {
                    price_id: t.price_id.0,
                    tier: t.product.clone(),
                    rank: t.rank,
                    interval: t.billing_interval.to_string(),
                    amount_minor: t.amount_minor,
                    currency: t.currency.clone(),
                    current: plan.iter().any(|p| p.ladder == t.ladder && p.rank == t.rank && p.tier == t.product),
                    switchable: active
                        && held.and_then(|(_, i)| i).is_some_and(|i| {
                            i.product != t.product
                                && i.interval == Some(t.billing_interval)
                                && i.currency.as_deref() == Some(t.currency.as_str())
                        }),
                    max_quantity: t.max_quantity,
                };
                match ladders.last_mut() {
                    Some(l) if l.ladder == t.ladder => l.offers.push(offer),
                    _ => {
                        let blocked = match held {
                            Some((s, _)) if !active => Some(format!(
                                "{} pays for a plan on this ladder with a subscription that is {}: settle it before \
                                 switching.",
                                o.membership.name,
                                views::subscription_status_words(s.status.as_str())
                            )),
                            Some((s, Some(i))) => switch_blocked(s, i.ladder_id),
                            _ => None,
                        };
                        ladders.push(views::LadderOffers {
                            ladder: t.ladder.clone(),
                            offers: vec![offer],
                            subscribed: subscribed(&t.ladder),
                            switch_from: held.filter(|_| active && blocked.is_none()).map(|(s, _)| s.subscription_id.0),
                            switch_blocked: blocked,
                        })
                    }
                }
            }
            views::OrgBilling {
                organization_id: org.0,
                is_owner: o.membership.role == "owner",
                displaced: super::home::displaced_lines(&o.displaced),
                name: o.membership.name,
                plan,
                subscriptions: subscriptions
                    .iter()
                    .map(|s| views::SubscriptionLine {
                        subscription_id: s.subscription_id.0,
                        seats: s
                            .items
                            .iter()
                            .filter(|i| i.max_quantity > 1 || i.quantity > 1)
                            .filter_map(|i| {
                                Some(views::SeatsLine {
                                    tier: i.product.clone(),
                                    price_id: i.price_id?.0,
                                    quantity: i.quantity,
                                    max_quantity: i.max_quantity.max(i.quantity as i32),
                                })
                            })
                            .collect(),
                        scheduled: s
                            .scheduled
                            .iter()
                            .map(|c| views::ScheduledLine {
                                ladder_id: c.ladder_id.0,
                                words: format!("{} until {}, then {}", c.from, long_day(c.effective_at), c.to),
                            })
                            .collect(),
                        stripe_id: s.stripe_subscription_id.clone(),
                        status: s.status.to_string(),
                        products: s.products.clone(),
                        period_end: s.current_period_end.map(day),
                        cancel_at_period_end: s.cancel_at_period_end,
                        collection_paused: s.collection_paused,
                    })
                    .collect(),
                ladders,
                invoices: b
                    .invoices
                    .iter()
                    .filter(|i| i.organization_id == org)
                    .map(|i| views::InvoiceLine {
                        date: day(i.stripe_created),
                        number: i.number.clone(),
                        amount_due: i.amount_due,
                        amount_remaining: i.amount_remaining,
                        currency: i.currency.clone(),
                        status: i.status.to_string(),
                        url: i.hosted_invoice_url.clone(),
                    })
                    .collect(),
            }
        })
        .collect();
    let v = views::BillingView {
        csrf: csrf_token(&req),
        checkout,
        change,
        connected: state.stripe.is_some(),
        organizations,
    };
    let mut page = render::ok(&req, "Billing", views::member_billing(&v));
    // Buy answers with a redirect to Stripe's checkout page: the page's form-action allows it.
    if let Some(stripe) = &state.stripe
        && let Ok(policy) = actix_web::http::header::HeaderValue::from_str(
            &crate::web::headers::policy_with_form_target(&stripe.checkout_origin()),
        )
    {
        page.headers_mut().insert(actix_web::http::header::CONTENT_SECURITY_POLICY, policy);
    }
    Ok(page)
}

/// The Buy button's form.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CheckoutForm {
    organization_id: String,
    price_id: String,
    /// Seats, for a plan sold in seats (empty: one).
    quantity: String,
}

impl CheckoutForm {
    fn parse(&self) -> Result<(OrganizationId, PriceId, u64), ServiceError> {
        let id = |field: &str, v: &str, what: &str| {
            v.trim().parse::<i64>().map_err(|_| ServiceError::invalid(field, format!("Choose {what} from the page.")))
        };
        let quantity = match self.quantity.trim() {
            "" => 1,
            q => {
                q.parse::<u64>().map_err(|_| ServiceError::invalid("quantity", "Give the seats as a whole number."))?
            }
        };
        Ok((
            OrganizationId(id("organization_id", &self.organization_id, "an organization")?),
            PriceId(id("price_id", &self.price_id, "a plan")?),
            quantity,
        ))
    }
}

/// Stripe, or the refusal that says billing is not connected, so `what`.
fn connected<'a>(state: &'a AppState, what: &str) -> Result<&'a Stripe, AppError> {
    state.stripe.as_deref().ok_or_else(|| {
        AppError::Refused(format!(
            "Billing is not connected to a payment provider right now, so {what}. Nothing was charged. Try again \
             later, or ask an operator."
        ))
    })
}

/// Where Stripe sends the browser back: the configured public address, else this request's own.
fn base_url(req: &HttpRequest, state: &AppState) -> String {
    match &state.config.public_url {
        Some(u) => u.as_str().trim_end_matches('/').to_string(),
        None => {
            let ci = req.connection_info();
            format!("{}://{}", ci.scheme(), ci.host())
        }
    }
}

#[tracing::instrument(name = "Page: start a checkout", skip_all, fields(account_id = %who.account_id, organization_id, price_id))]
pub async fn checkout(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<CheckoutForm>,
) -> Result<HttpResponse, AppError> {
    let (organization_id, price_id, quantity) = form.parse()?;
    let span = tracing::Span::current();
    span.record("organization_id", organization_id.0);
    span.record("price_id", price_id.0);
    // Who may buy is read first: another organization is a 404 and a member who is not an owner
    // is refused, neither reaching Stripe.
    reads::buyer_standing(&state.db, who.account_id, organization_id).await?;
    let stripe = connected(&state, "a plan cannot be bought here")?;
    let base = base_url(&req, &state);
    let url = billing::start_checkout(
        &state.db,
        stripe,
        who.account_id,
        organization_id,
        price_id,
        quantity,
        ReturnTo { base_url: &base },
    )
    .await?;
    Ok(if render::is_htmx(&req) {
        HttpResponse::Ok().insert_header(("HX-Redirect", url)).finish()
    } else {
        HttpResponse::SeeOther().insert_header(("Location", url)).finish()
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ReturnQuery {
    session_id: String,
}

#[tracing::instrument(name = "Page: a checkout's return", skip_all, fields(account_id = %who.account_id))]
pub async fn checkout_return(Call { who: Member(who), req, state }: MemberCall) -> Result<HttpResponse, AppError> {
    let q = query_or_default::<ReturnQuery>(&req);
    // A session the console did not start, or one of an organization the member is not in, is
    // nothing at this address, whether or not Stripe is connected.
    reads::members_checkout(&state.db, who.account_id, &q.session_id).await?.ok_or(AppError::NotFound)?;
    let stripe = connected(&state, "the payment cannot be confirmed here yet")?;
    let to = match billing::finish_checkout(&state.db, stripe, who.account_id, &q.session_id).await? {
        CheckoutOutcome::Paid { .. } => "checkout=paid",
        CheckoutOutcome::NotPaid { .. } => "checkout=pending",
    };
    Ok(see_other(&format!("{}?{to}", paths::BILLING)))
}

// ---------- A member's plan changes ----------

/// The Switch button's form, and its confirmation's.
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchForm {
    organization_id: String,
    subscription_id: String,
    price_id: String,
    /// "1" once the member saw what the switch does.
    confirm: String,
    /// The quote's id: what the member was shown is kept under it.
    operation: String,
    /// Undo: the ladder of the scheduled change.
    ladder_id: String,
    /// Cancel: "1" to keep the subscription going instead.
    keep: String,
    /// The seats (a switch keeps the current number when empty).
    quantity: String,
}

fn form_id(field: &str, v: &str, what: &str) -> Result<i64, AppError> {
    v.trim().parse::<i64>().map_err(|_| AppError::BadRequest(format!("Choose {what} from the page ({field}).")))
}

impl SwitchForm {
    fn subscription(&self) -> Result<(OrganizationId, SubscriptionId), AppError> {
        Ok((
            OrganizationId(form_id("organization_id", &self.organization_id, "an organization")?),
            SubscriptionId(form_id("subscription_id", &self.subscription_id, "a subscription")?),
        ))
    }
}

/// A plan change's answer: back to `/billing` with what happened.
fn changed(req: &HttpRequest, what: &str) -> HttpResponse {
    after_post(req, &format!("{}?changed={what}", paths::BILLING))
}

#[tracing::instrument(name = "Page: switch a plan", skip_all, fields(account_id = %who.account_id))]
pub async fn switch(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let (org, sub) = form.subscription()?;
    let price = PriceId(form_id("price_id", &form.price_id, "a plan")?);
    let stripe = connected(&state, "the plan cannot be switched here")?;
    if form.confirm == "1" {
        let done = plan_changes::switch_plan(&state.db, stripe, who.account_id, org, sub, price, form.operation.trim())
            .await?;
        let what = match done.kind {
            SwitchKind::Upgrade => "upgraded",
            SwitchKind::Downgrade => "scheduled",
            SwitchKind::MoreSeats | SwitchKind::FewerSeats => "seats",
        };
        return Ok(changed(&req, what));
    }
    let quantity = match form.quantity.trim() {
        "" => None,
        q => Some(q.parse::<u64>().map_err(|_| AppError::BadRequest("Give the seats as a whole number.".into()))?),
    };
    let q = plan_changes::quote_switch(&state.db, stripe, who.account_id, org, sub, price, quantity).await?;
    let organization = reads::buyer_standing(&state.db, who.account_id, org).await?.name;
    let v = views::SwitchConfirmView {
        csrf: csrf_token(&req),
        organization_id: org.0,
        organization,
        subscription_id: sub.0,
        price_id: price.0,
        ladder: q.ladder,
        from: q.from,
        to: q.to,
        upgrade: q.kind == SwitchKind::Upgrade,
        seats: match q.kind {
            SwitchKind::MoreSeats | SwitchKind::FewerSeats => Some((q.from_quantity, q.to_quantity)),
            _ => None,
        },
        charge: q.charge.map(|c| views::money(c.amount_due, &c.currency)),
        effective: long_day(q.effective_at),
        operation: q.operation,
    };
    Ok(render::ok(&req, "Switch plan", views::switch_confirm(&v)))
}

#[tracing::instrument(name = "Page: undo a scheduled switch", skip_all, fields(account_id = %who.account_id))]
pub async fn undo_switch(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let (org, sub) = form.subscription()?;
    let ladder = crate::ids::LadderId(form_id("ladder_id", &form.ladder_id, "a plan")?);
    let stripe = connected(&state, "the change cannot be undone here")?;
    plan_changes::undo_switch(&state.db, stripe, who.account_id, org, sub, ladder).await?;
    Ok(changed(&req, "undone"))
}

#[tracing::instrument(name = "Page: cancel a plan at period end", skip_all, fields(account_id = %who.account_id))]
pub async fn cancel(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let (org, sub) = form.subscription()?;
    let keep = form.keep == "1";
    let stripe = connected(&state, "the subscription cannot be changed here")?;
    plan_changes::cancel_at_period_end(&state.db, stripe, who.account_id, org, sub, !keep).await?;
    Ok(changed(&req, if keep { "kept" } else { "canceling" }))
}

#[tracing::instrument(name = "Page: resume a plan", skip_all, fields(account_id = %who.account_id))]
pub async fn resume(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let (org, sub) = form.subscription()?;
    billing::resume::resume_subscription(&state.db, who.account_id, org, sub).await?;
    Ok(changed(&req, "resumed"))
}

// ---------- The operator's billing overview ----------

#[tracing::instrument(name = "Page: billing overview", skip_all)]
pub async fn operator_billing(Call { req, state, .. }: OperatorCall) -> Result<HttpResponse, AppError> {
    let b = reads::operator_billing(&state.db).await?;
    let v = views::OperatorBillingView {
        live_by_status: b.live_by_status.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        outbox_pending: b.outbox.pending,
        outbox_stuck: b.outbox.stuck,
        events_last_day: b.events_last_day,
        subscriptions: b
            .subscriptions
            .into_iter()
            .map(|s| views::OpSubscriptionRow {
                organization_id: s.organization_id.0,
                organization: s.organization,
                stripe_id: s.stripe_subscription_id,
                status: s.status.to_string(),
                period_end: s.current_period_end.map(day),
                cancel_at_period_end: s.cancel_at_period_end,
                collection_paused: s.collection_paused,
            })
            .collect(),
        subscriptions_total: b.subscription_total,
        subscriptions_cap: reads::SUBSCRIPTIONS_SHOWN,
        outbox: b
            .unprocessed
            .into_iter()
            .map(|o| views::OpOutboxRow {
                outbox_id: o.outbox_id.0,
                object: match (&o.stripe_subscription_id, &o.product) {
                    (Some(s), _) => format!("subscription {s}"),
                    (None, Some(p)) => format!("product {p}"),
                    (None, None) => o.product_id.map(|p| format!("product #{p}")).unwrap_or_else(|| "—".into()),
                },
                kind: o.kind,
                attempts: o.attempts,
                due_at: when(o.due_at),
                last_error: o.last_error,
                stuck: o.stuck,
            })
            .collect(),
        outbox_cap: reads::OUTBOX_SHOWN,
        events: b
            .events
            .into_iter()
            .map(|e| views::OpEventRow {
                event_id: e.event_id,
                event_type: e.event_type,
                object_id: e.object_id,
                received_at: when(e.received_at),
            })
            .collect(),
    };
    Ok(render::ok(&req, "Billing", views::operator_billing(&v)))
}
