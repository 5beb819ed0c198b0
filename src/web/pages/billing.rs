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
use validator::Validate;
use views::{
    FormState,
    paths::{self, fill},
};

use crate::{
    ids::{LadderId, OrganizationId, PriceId, ProductId, StripeSessionId, SubscriptionId},
    integrations::stripe::Stripe,
    services::{
        self, ServiceError,
        billing::{
            self as billing,
            catalog_sync::{Amount, Currency, NewPrice, SyncAnswer},
            checkout::{CheckoutOutcome, ReturnTo, Seats},
            plan_changes::{self, QuoteId, SwitchKind},
            reads,
        },
        refusal::Problems,
    },
    states::{BillingInterval, SubscriptionBranch, SubscriptionStatus},
    store::{accounts::SessionAccount, billing_reads::OrgSubscription},
    web::{
        AppState,
        call::{Call, MemberCall, MemberPage, OperatorCall, PageRead},
        errors::AppError,
        forms::{Form, after_post, query_or_default, see_other},
        identity::{Member, csrf_token},
        input::{self, Field, FromField, read},
        refusals::{self, Refused, Words},
        render,
    },
};

use super::{catalog::product_edit_view, home::plan_lines, product_prices::prices_view};

const PRICE_WORDS: Words = Words { done: "saved", busy: None };

// ---------- The product page's prices (operator) ----------

/// The price form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct PriceForm {
    #[validate(custom(function = read, message = "Choose whether the price is per month or per year."))]
    interval: Field<BillingInterval>,
    /// Read once the currency is known (yen has no cents): its problem is told by the conversion.
    amount: Field<Amount>,
    #[validate(custom(function = read))]
    currency: Field<Currency>,
}

impl FromField for BillingInterval {
    fn from_field(raw: &str) -> Result<Self, String> {
        BillingInterval::from_text(raw.trim()).ok_or_else(|| "“{value}” is not a billing interval.".into())
    }
}

impl FromField for Amount {
    fn from_field(raw: &str) -> Result<Self, String> {
        Amount::parse(raw)
    }
}

impl FromField for Currency {
    fn from_field(raw: &str) -> Result<Self, String> {
        Currency::parse(raw)
    }
}

impl TryFrom<PriceForm> for NewPrice {
    type Error = ServiceError;

    fn try_from(f: PriceForm) -> Result<NewPrice, ServiceError> {
        let mut problems = input::problems(&f);
        // A currency that cannot be read is read as one with cents, as the amount's words say.
        let has_cents = f.currency.ok().is_none_or(Currency::has_cents);
        let amount_minor = f.amount.into_ok().and_then(|a| problems.field("amount", a.minor_in(has_cents)));
        let (interval, currency) = (f.interval.into_ok(), f.currency.into_ok());
        problems.or(interval.zip(amount_minor).zip(currency).map(|((interval, amount_minor), currency)| NewPrice {
            interval,
            amount_minor,
            currency,
        }))
    }
}

/// A refused price act: the Prices section alone for HTMX, else the whole product page.
async fn prices_refused(
    req: &HttpRequest,
    state: &AppState,
    product_id: ProductId,
    status: StatusCode,
    form: Option<FormState>,
    errors: Vec<String>,
) -> Result<HttpResponse, AppError> {
    let (name, edit) = product_edit_view(req, state, product_id.0, None).await?.ok_or(AppError::NotFound)?;
    let prices = prices_view(req, state, product_id.0, form, errors).await?;
    let title = format!("Product: {name}");
    Ok(refusals::answer(
        req,
        status,
        &title,
        || views::product_prices(&prices),
        || views::product_with_prices(&edit, &prices),
    ))
}

fn product_page_with(id: ProductId, query: &str) -> String {
    format!("{}?{query}", fill(paths::CATALOG_PRODUCT, &[&id.0]))
}

#[tracing::instrument(name = "Page: set a price", skip_all, fields(product_id = %*id))]
pub async fn set_price(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ProductId>,
    form: Form<PriceForm>,
) -> Result<HttpResponse, AppError> {
    let id = id.into_inner();
    let values = form.values();
    let set = match NewPrice::try_from(form.into_inner()) {
        Ok(p) => billing::set_price(&state.db, id, &p).await,
        Err(e) => Err(e),
    };
    let to = set.map(|_| product_page_with(id, "price=set"));
    let draw = async |r: Refused| prices_refused(&req, &state, id, r.status, Some(r.form), vec![]).await;
    refusals::posted(&req, to, values, PRICE_WORDS, draw).await
}

#[tracing::instrument(name = "Page: archive a price", skip_all, fields(price_id = %*id))]
pub async fn archive_price(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<PriceId>,
) -> Result<HttpResponse, AppError> {
    let id = id.into_inner();
    let price = reads::price(&state.db, id).await?.ok_or(AppError::NotFound)?;
    let product = price.product_id;
    let to = billing::archive_price(&state.db, id).await.map(|()| product_page_with(product, "archived=1"));
    let draw = async |r: Refused| prices_refused(&req, &state, product, r.status, None, r.form.errors).await;
    refusals::posted(&req, to, vec![], PRICE_WORDS, draw).await
}

#[tracing::instrument(name = "Page: sync a product to Stripe", skip_all, fields(product_id = %*id))]
pub async fn sync_product(
    Call { req, state, .. }: OperatorCall,
    id: web::Path<ProductId>,
) -> Result<HttpResponse, AppError> {
    let id = id.into_inner();
    let to = billing::sync_product(&state.db, id).await.map(|answer| {
        let flag = match answer {
            SyncAnswer::Enqueued { product, prices } => {
                format!("sync=queued&product={}&prices={prices}", u8::from(product))
            }
            SyncAnswer::AlreadyPending => "sync=waiting".into(),
            SyncAnswer::UpToDate => "sync=current".into(),
        };
        product_page_with(id, &flag)
    });
    let draw = async |r: Refused| prices_refused(&req, &state, id, r.status, None, r.form.errors).await;
    refusals::posted(&req, to, vec![], PRICE_WORDS, draw).await
}

// ---------- The member's billing page ----------

/// The notes the checkout's return and a plan change leave on `/billing`'s address.
#[derive(Deserialize, Default)]
#[serde(default)]
struct BillingQuery {
    checkout: Option<CheckoutFlag>,
    changed: Option<ChangedFlag>,
}

/// `?checkout=`: what the checkout's return found; another word is no note.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum CheckoutFlag {
    Paid,
    Pending,
    Canceled,
    #[serde(other)]
    Other,
}

/// `?changed=`: what a plan change did; another word is no note.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ChangedFlag {
    Upgraded,
    Scheduled,
    Undone,
    Canceling,
    Kept,
    Resumed,
    Seats,
    #[serde(other)]
    Other,
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
    let checkout = q.checkout.and_then(|c| match c {
        CheckoutFlag::Paid => Some(views::CheckoutNote::Paid),
        CheckoutFlag::Pending => Some(views::CheckoutNote::Pending),
        CheckoutFlag::Canceled => Some(views::CheckoutNote::Canceled),
        CheckoutFlag::Other => None,
    });
    let change = q.changed.and_then(|c| match c {
        ChangedFlag::Upgraded => Some(views::ChangeNote::Upgraded),
        ChangedFlag::Scheduled => Some(views::ChangeNote::DowngradeScheduled),
        ChangedFlag::Undone => Some(views::ChangeNote::Undone),
        ChangedFlag::Canceling => Some(views::ChangeNote::Canceling),
        ChangedFlag::Kept => Some(views::ChangeNote::Kept),
        ChangedFlag::Resumed => Some(views::ChangeNote::Resumed),
        ChangedFlag::Seats => Some(views::ChangeNote::Seats),
        ChangedFlag::Other => None,
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
                        stripe_id: s.stripe_subscription_id.to_string(),
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
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct CheckoutForm {
    #[validate(custom(function = read, message = "Choose an organization from the page."))]
    organization_id: Field<OrganizationId>,
    #[validate(custom(function = read, message = "Choose a plan from the page."))]
    price_id: Field<PriceId>,
    /// Seats, for a plan sold in seats (empty: one).
    #[validate(custom(function = read))]
    quantity: Field<Option<Seats>>,
}

impl FromField for Seats {
    fn from_field(raw: &str) -> Result<Self, String> {
        Seats::parse(raw)
    }
}

/// A checkout to start: the organization that buys, the price, and how many seats.
struct Buy {
    organization_id: OrganizationId,
    price_id: PriceId,
    quantity: u64,
}

impl TryFrom<CheckoutForm> for Buy {
    type Error = ServiceError;

    fn try_from(f: CheckoutForm) -> Result<Buy, ServiceError> {
        let problems = input::problems(&f);
        let quantity = f.quantity.into_ok().map(|q| q.map_or(1, |s| s.0));
        let read = f.organization_id.into_ok().zip(f.price_id.into_ok()).zip(quantity);
        problems.or(read.map(|((organization_id, price_id), quantity)| Buy { organization_id, price_id, quantity }))
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

#[tracing::instrument(name = "Page: start a checkout", skip_all, fields(account_id = %who.account_id, organization_id, price_id))]
pub async fn checkout(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<CheckoutForm>,
) -> Result<HttpResponse, AppError> {
    // An unverified account is refused in words before anything is read or sent.
    crate::services::accounts::must_be_verified(&who.session_account(), "buy a plan")?;
    let Buy { organization_id, price_id, quantity } = Buy::try_from(form.into_inner())?;
    let span = tracing::Span::current();
    span.record("organization_id", organization_id.0);
    span.record("price_id", price_id.0);
    // Who may buy is read first: another organization is a 404 and a member who is not an owner
    // is refused, neither reaching Stripe.
    reads::buyer_standing(&state.db, who.account_id, organization_id).await?;
    let stripe = connected(&state, "a plan cannot be bought here")?;
    let base = state.public_base(&req);
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

/// Where Stripe sends the browser back: the session it paid (or did not).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ReturnQuery {
    session_id: Option<StripeSessionId>,
}

#[tracing::instrument(name = "Page: a checkout's return", skip_all, fields(account_id = %who.account_id))]
pub async fn checkout_return(Call { who: Member(who), req, state }: MemberCall) -> Result<HttpResponse, AppError> {
    // No session, a session the console did not start, or one of an organization the member is
    // not in, is nothing at this address, whether or not Stripe is connected.
    let session = query_or_default::<ReturnQuery>(&req).session_id.ok_or(AppError::NotFound)?;
    reads::members_checkout(&state.db, who.account_id, &session).await?.ok_or(AppError::NotFound)?;
    let stripe = connected(&state, "the payment cannot be confirmed here yet")?;
    let to = match billing::finish_checkout(&state.db, stripe, who.account_id, &session).await? {
        CheckoutOutcome::Paid { .. } => "checkout=paid",
        CheckoutOutcome::NotPaid { .. } => "checkout=pending",
    };
    Ok(see_other(&format!("{}?{to}", paths::BILLING)))
}

// ---------- A member's plan changes ----------

/// The Switch button's form, and its confirmation's; Undo, Cancel and Resume send its first
/// two fields and the one they need.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchForm {
    #[validate(custom(function = read, message = "Choose an organization from the page (organization_id)."))]
    organization_id: Field<OrganizationId>,
    #[validate(custom(function = read, message = "Choose a subscription from the page (subscription_id)."))]
    subscription_id: Field<SubscriptionId>,
    #[validate(custom(function = read, message = "Choose a plan from the page (price_id)."))]
    price_id: Field<Option<PriceId>>,
    /// "1" once the member saw what the switch does.
    #[validate(custom(function = read))]
    confirm: Field<Ticked>,
    /// The quote's id: what the member was shown is kept under it.
    #[validate(custom(function = read))]
    operation: Field<QuoteId>,
    /// Undo: the ladder of the scheduled change.
    #[validate(custom(function = read, message = "Choose a plan from the page (ladder_id)."))]
    ladder_id: Field<Option<LadderId>>,
    /// Cancel: "1" to keep the subscription going instead.
    #[validate(custom(function = read))]
    keep: Field<Ticked>,
    /// The seats (a switch keeps the current number when empty).
    #[validate(custom(function = read))]
    quantity: Field<Option<Seats>>,
}

/// A box the page ticks: "1" is ticked, anything else is not.
#[derive(Debug, Clone, Copy, Default)]
struct Ticked(bool);

impl FromField for Ticked {
    fn from_field(raw: &str) -> Result<Self, String> {
        Ok(Ticked(raw == "1"))
    }
}

impl FromField for QuoteId {
    fn from_field(raw: &str) -> Result<Self, String> {
        QuoteId::parse(raw)
    }
}

/// A field only some of the forms send, that this one needs: its value, or `words` beside it.
fn needed<T>(problems: &mut Problems, name: &str, field: Field<Option<T>>, words: &str) -> Option<T> {
    let read = field.into_ok()?;
    if read.is_none() {
        problems.push(name, words);
    }
    read
}

/// The subscription a plan change acts on, as the form names it.
struct Held {
    org: OrganizationId,
    sub: SubscriptionId,
}

/// Switch to a price: quoted first, or confirmed with the quote's id.
struct SwitchTo {
    held: Held,
    price: PriceId,
    /// The quote the member confirmed; None asks for a quote.
    confirmed: Option<QuoteId>,
    /// Seats, when the member changes them.
    quantity: Option<u64>,
}

/// Undo the scheduled change of a ladder.
struct UndoOn {
    held: Held,
    ladder: LadderId,
}

/// Cancel at the period's end, or keep the subscription going.
struct CancelOrKeep {
    held: Held,
    keep: bool,
}

impl SwitchForm {
    /// Every problem of the form, and the subscription it names when both ids read.
    fn held(&self) -> (Problems, Option<Held>) {
        let held = self.organization_id.ok().zip(self.subscription_id.ok()).map(|(o, s)| Held { org: *o, sub: *s });
        (input::problems(self), held)
    }
}

impl TryFrom<SwitchForm> for SwitchTo {
    type Error = ServiceError;

    fn try_from(f: SwitchForm) -> Result<SwitchTo, ServiceError> {
        let (mut problems, held) = f.held();
        let price = needed(&mut problems, "price_id", f.price_id, "Choose a plan from the page (price_id).");
        let confirmed = f.confirm.into_ok().is_some_and(|t| t.0).then(|| f.operation.into_ok()).flatten();
        let quantity = f.quantity.into_ok().map(|q| q.map(|s| s.0));
        problems.or(held.zip(price).zip(quantity).map(|((held, price), quantity)| SwitchTo {
            held,
            price,
            confirmed,
            quantity,
        }))
    }
}

impl TryFrom<SwitchForm> for UndoOn {
    type Error = ServiceError;

    fn try_from(f: SwitchForm) -> Result<UndoOn, ServiceError> {
        let (mut problems, held) = f.held();
        let ladder = needed(&mut problems, "ladder_id", f.ladder_id, "Choose a plan from the page (ladder_id).");
        problems.or(held.zip(ladder).map(|(held, ladder)| UndoOn { held, ladder }))
    }
}

impl TryFrom<SwitchForm> for CancelOrKeep {
    type Error = ServiceError;

    fn try_from(f: SwitchForm) -> Result<CancelOrKeep, ServiceError> {
        let (problems, held) = f.held();
        let keep = f.keep.into_ok().is_some_and(|t| t.0);
        problems.or(held.map(|held| CancelOrKeep { held, keep }))
    }
}

impl TryFrom<SwitchForm> for Held {
    type Error = ServiceError;

    fn try_from(f: SwitchForm) -> Result<Held, ServiceError> {
        let (problems, held) = f.held();
        problems.or(held)
    }
}

/// A plan change's form the page did not write (its ids are hidden fields): a 400 that says
/// every field it could not read, as these forms have always answered.
fn unreadable(e: ServiceError) -> AppError {
    match e {
        ServiceError::Invalid(problems) => {
            AppError::BadRequest(problems.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        e => e.into(),
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
    let SwitchTo { held: Held { org, sub }, price, confirmed, quantity } =
        SwitchTo::try_from(form.into_inner()).map_err(unreadable)?;
    let stripe = connected(&state, "the plan cannot be switched here")?;
    if let Some(operation) = confirmed {
        let done = plan_changes::switch_plan(&state.db, stripe, who.account_id, org, sub, price, &operation).await?;
        let what = match done.kind {
            SwitchKind::Upgrade => "upgraded",
            SwitchKind::Downgrade => "scheduled",
            SwitchKind::MoreSeats | SwitchKind::FewerSeats => "seats",
        };
        return Ok(changed(&req, what));
    }
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
        operation: q.operation.as_str().to_string(),
    };
    Ok(render::ok(&req, "Switch plan", views::switch_confirm(&v)))
}

#[tracing::instrument(name = "Page: undo a scheduled switch", skip_all, fields(account_id = %who.account_id))]
pub async fn undo_switch(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let UndoOn { held: Held { org, sub }, ladder } = UndoOn::try_from(form.into_inner()).map_err(unreadable)?;
    let stripe = connected(&state, "the change cannot be undone here")?;
    plan_changes::undo_switch(&state.db, stripe, who.account_id, org, sub, ladder).await?;
    Ok(changed(&req, "undone"))
}

#[tracing::instrument(name = "Page: cancel a plan at period end", skip_all, fields(account_id = %who.account_id))]
pub async fn cancel(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let CancelOrKeep { held: Held { org, sub }, keep } =
        CancelOrKeep::try_from(form.into_inner()).map_err(unreadable)?;
    let stripe = connected(&state, "the subscription cannot be changed here")?;
    plan_changes::cancel_at_period_end(&state.db, stripe, who.account_id, org, sub, !keep).await?;
    Ok(changed(&req, if keep { "kept" } else { "canceling" }))
}

#[tracing::instrument(name = "Page: resume a plan", skip_all, fields(account_id = %who.account_id))]
pub async fn resume(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwitchForm>,
) -> Result<HttpResponse, AppError> {
    let Held { org, sub } = Held::try_from(form.into_inner()).map_err(unreadable)?;
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
                stripe_id: s.stripe_subscription_id.into_string(),
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
                event_id: e.event_id.into_string(),
                event_type: e.event_type,
                object_id: e.object_id,
                received_at: when(e.received_at),
            })
            .collect(),
    };
    Ok(render::ok(&req, "Billing", views::operator_billing(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(interval: &str, amount: &str, currency: &str) -> Result<NewPrice, ServiceError> {
        let sent = [("interval", interval), ("amount", amount), ("currency", currency)];
        let form =
            crate::web::forms::read::<PriceForm>(sent.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())?;
        NewPrice::try_from(form.into_inner())
    }

    #[test]
    fn a_price_form_tells_every_problem_at_once() {
        let e = price("week", "x", "euro").unwrap_err();
        assert!(matches!(&e, ServiceError::Invalid(v) if v.len() == 3), "{e:?}");
        let e = price("month", "12", "abc").unwrap_err().to_string();
        assert!(e.contains("not a currency Stripe charges in"), "{e}");
        assert_eq!(price("month", "12", " usd ").unwrap().currency.as_str(), "usd");
        let ok = price("year", "120", "EUR").unwrap();
        let eur = Currency::parse("eur").unwrap();
        assert_eq!(ok, NewPrice { interval: BillingInterval::Year, amount_minor: 12000, currency: eur });
        assert_eq!(price("month", "1200", "JPY").unwrap().amount_minor, 1200, "yen has no cents");
        let e = price("month", "12.50", "jpy").unwrap_err().to_string();
        assert!(e.contains("no cents"), "{e}");
    }

    #[test]
    fn a_switch_form_names_every_id_it_cannot_read_in_its_words() {
        let sent = [("organization_id", "x"), ("subscription_id", ""), ("confirm", "1")];
        let form =
            crate::web::forms::read::<SwitchForm>(sent.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
                .map(|f| f.into_inner())
                .unwrap_or_else(|e| panic!("{e}"));
        let e = SwitchTo::try_from(form).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            e,
            "Choose an organization from the page (organization_id). Choose a subscription from the page \
             (subscription_id). Choose a plan from the page (price_id)."
        );
    }
}
