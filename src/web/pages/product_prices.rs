//! The product page's Prices section (operator): the product's and each price's state in Stripe,
//! and the notice a price act's flags word on the page's address. The catalog's product page and
//! the price acts' refusals both draw it.

use actix_web::HttpRequest;
use serde::Deserialize;
use views::FormState;

use crate::{
    ids::ProductId,
    services::billing::reads,
    states::SyncState,
    store::billing::{Price, ProductMapping},
    web::{AppState, errors::AppError, forms::query_or_default, identity::csrf_token},
};

/// The flags a price act leaves on the product page's address, to say what it did.
#[derive(Deserialize, Default)]
#[serde(default)]
struct PriceFlags {
    price: Option<PriceSet>,
    archived: Option<Archived>,
    sync: Option<SyncFlag>,
    product: Option<u8>,
    prices: Option<usize>,
}

/// `?price=set`: a price was set.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum PriceSet {
    Set,
}

/// `?archived=1`: a price was archived.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
enum Archived {
    #[serde(rename = "1")]
    Yes,
}

/// `?sync=`: what a sync click did.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum SyncFlag {
    Queued,
    Waiting,
    Current,
}

impl PriceFlags {
    fn notice(&self) -> Option<String> {
        match self.sync {
            Some(SyncFlag::Queued) => {
                return Some(queued_words(self.product == Some(1), self.prices.unwrap_or(0)));
            }
            Some(SyncFlag::Waiting) => {
                return Some("A sync is already waiting; it will take these changes too.".into());
            }
            Some(SyncFlag::Current) => return Some("Stripe already has everything; nothing was queued.".into()),
            None => {}
        }
        if self.price == Some(PriceSet::Set) {
            return Some("The price was set. Sync to Stripe to put it on sale.".into());
        }
        if self.archived == Some(Archived::Yes) {
            return Some("The price was archived. Sync to Stripe to stop selling it there too.".into());
        }
        None
    }
}

/// "Sync queued: the product and 2 prices."
fn queued_words(product: bool, prices: usize) -> String {
    let prices = match prices {
        0 => None,
        1 => Some("1 price".to_string()),
        n => Some(format!("{n} prices")),
    };
    match (product, prices) {
        (true, Some(p)) => format!("Sync queued: the product and {p}."),
        (true, None) => "Sync queued: the product.".into(),
        (false, Some(p)) => format!("Sync queued: {p}."),
        (false, None) => "Sync queued.".into(),
    }
}

fn stripe_state(state: SyncState, id: Option<&str>, error: Option<&str>) -> views::StripeState {
    match state {
        SyncState::Unsynced => views::StripeState::NotSynced,
        SyncState::Pending => views::StripeState::Pending,
        SyncState::Synced => views::StripeState::Synced(id.unwrap_or_default().to_string()),
        SyncState::Failed => {
            views::StripeState::Failed(error.unwrap_or("Stripe refused it, and gave no reason.").to_string())
        }
    }
}

fn product_stripe(m: Option<&ProductMapping>) -> views::StripeState {
    match m {
        None => views::StripeState::NotSynced,
        Some(m) => {
            stripe_state(m.sync_state, m.stripe_product_id.as_ref().map(|x| x.as_str()), m.last_error.as_deref())
        }
    }
}

fn price_row(p: &Price) -> views::PriceRow {
    views::PriceRow {
        price_id: p.price_id.0,
        interval: p.billing_interval.to_string(),
        amount_minor: p.amount_minor,
        currency: p.currency.clone(),
        active: p.active,
        stripe: stripe_state(p.sync_state, p.stripe_price_id.as_ref().map(|x| x.as_str()), p.last_error.as_deref()),
        still_on_sale_in_stripe: !p.active && p.stripe_price_id.is_some() && p.stripe_active == Some(true),
    }
}

/// The product page's Prices section: the form as sent (a refusal) or empty, the flags' notice.
pub(crate) async fn prices_view(
    req: &HttpRequest,
    state: &AppState,
    product_id: i64,
    form: Option<FormState>,
    errors: Vec<String>,
) -> Result<views::ProductPricesView, AppError> {
    let r = reads::product_prices(&state.db, ProductId(product_id)).await?;
    let refused = form.is_some() || !errors.is_empty();
    Ok(views::ProductPricesView {
        csrf: csrf_token(req),
        product_id,
        product_stripe: product_stripe(r.mapping.as_ref()),
        prices: r.prices.iter().map(price_row).collect(),
        notice: if refused { None } else { query_or_default::<PriceFlags>(req).notice() },
        errors,
        form: form.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(query: &str) -> Option<String> {
        actix_web::web::Query::<PriceFlags>::from_query(query).map(|q| q.into_inner()).unwrap_or_default().notice()
    }

    #[test]
    fn a_sync_click_is_worded_by_what_it_queued() {
        assert_eq!(queued_words(true, 2), "Sync queued: the product and 2 prices.");
        assert_eq!(queued_words(true, 1), "Sync queued: the product and 1 price.");
        assert_eq!(queued_words(true, 0), "Sync queued: the product.");
        assert_eq!(queued_words(false, 1), "Sync queued: 1 price.");
        assert_eq!(flags("sync=queued&product=0&prices=3").as_deref(), Some("Sync queued: 3 prices."));
        assert_eq!(
            flags("sync=waiting").as_deref(),
            Some("A sync is already waiting; it will take these changes too.")
        );
        assert_eq!(flags("sync=current").as_deref(), Some("Stripe already has everything; nothing was queued."));
    }

    #[test]
    fn flags_the_page_did_not_set_say_nothing() {
        assert_eq!(flags(""), None);
        assert_eq!(flags("sync=<script>"), None);
        assert_eq!(flags("sync=queued&prices=lots"), None, "an unreadable flag is ignored");
        assert!(flags("price=set").is_some_and(|n| n.starts_with("The price was set.")));
    }
}
