//! Prices and the catalog's sync to Stripe (spec: "Product sync"). An operator sets a product's
//! prices in the console; "Sync to Stripe" runs `catalogsync.Sync` (`sync_product`): a plain
//! transaction, the product's sync lock, the mappings read again, the pending marks and one
//! outbox row. The outbox processor then makes Stripe's product and prices
//! (`apply_product_sync`, SyncProductToStripe's Stripe half) and records their ids.

use crate::{
    db::{
        Db, Tx, TxKind, begin_for,
        keys::AdvisoryKey,
        locks::{Lock, PathLocks},
        tx::{within, within_for},
    },
    ids::{PriceId, ProductId, StripePriceId, StripeProductId},
    integrations::stripe::Stripe,
    services::ServiceError,
    states::{BillingInterval, SyncState},
    store::{billing as store, catalog},
};

use super::remote;

pub static SYNC_PRODUCT_LOCKS: PathLocks = PathLocks {
    path: "catalogsync.Sync",
    function: "services::billing::catalog_sync::sync_product",
    kind: "Plain",
    locks: &[Lock::ProductSyncAdvisory],
    why: "The product's sync lock, then the mappings read again and the pending marks and the outbox row \
          written: two sync clicks for one product write once. No pool, no rendezvous.",
};

pub static SET_PRICE_LOCKS: PathLocks = PathLocks {
    path: "Set a price",
    function: "services::billing::catalog_sync::set_price",
    kind: "Plain",
    locks: &[Lock::ProductSyncAdvisory],
    why: "The product's sync lock, so a price replaced while a sync reads the prices is seen whole by one of them.",
};

pub static RECORD_PRODUCT_SYNC_LOCKS: PathLocks = PathLocks {
    path: "SyncProductToStripe (record)",
    function: "services::billing::catalog_sync::apply_product_sync",
    kind: "Plain",
    locks: &[Lock::ProductSyncAdvisory],
    why: "After each Stripe call, with no lock held during it, the product's sync lock and the ids Stripe gave.",
};

/// The currencies Stripe charges in (its list of presentment currencies, lower case as its API
/// takes them): a price in any other would be saved here and then refused by Stripe at its sync.
const STRIPE_CURRENCIES: &[&str] = &[
    "aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn", "bam", "bbd", "bdt", "bgn", "bhd", "bif",
    "bmd", "bnd", "bob", "brl", "bsd", "bwp", "byn", "bzd", "cad", "cdf", "chf", "clp", "cny", "cop", "crc", "cve",
    "czk", "djf", "dkk", "dop", "dzd", "egp", "etb", "eur", "fjd", "fkp", "gbp", "gel", "gip", "gmd", "gnf", "gtq",
    "gyd", "hkd", "hnl", "htg", "huf", "idr", "ils", "inr", "isk", "jmd", "jod", "jpy", "kes", "kgs", "khr", "kmf",
    "krw", "kwd", "kyd", "kzt", "lak", "lbp", "lkr", "lrd", "lsl", "mad", "mdl", "mga", "mkd", "mmk", "mnt", "mop",
    "mur", "mvr", "mwk", "mxn", "myr", "mzn", "nad", "ngn", "nio", "nok", "npr", "nzd", "omr", "pab", "pen", "pgk",
    "php", "pkr", "pln", "pyg", "qar", "ron", "rsd", "rub", "rwf", "sar", "sbd", "scr", "sek", "sgd", "shp", "sle",
    "sos", "srd", "std", "szl", "thb", "tjs", "tnd", "top", "try", "ttd", "twd", "tzs", "uah", "ugx", "usd", "uyu",
    "uzs", "vnd", "vuv", "wst", "xaf", "xcd", "xcg", "xof", "xpf", "yer", "zar", "zmw",
];

/// A price as an operator sets it: built by the price form's conversion (or `new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPrice {
    pub interval: BillingInterval,
    pub amount_minor: i64,
    pub currency: Currency,
}

impl NewPrice {
    /// `amount` per `interval` in `currency`; why not when the amount does not fit the currency.
    pub fn new(interval: BillingInterval, amount: &Amount, currency: Currency) -> Result<NewPrice, String> {
        let amount_minor = amount.minor_in(currency.has_cents())?;
        Ok(NewPrice { interval, amount_minor, currency })
    }
}

/// A three-letter currency Stripe charges in, lower case as its API takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Currency(String);

impl Currency {
    /// Any case, spaces around; a code Stripe does not charge in is refused here, not at the sync.
    pub fn parse(s: &str) -> Result<Currency, String> {
        let c = s.trim().to_ascii_lowercase();
        if STRIPE_CURRENCIES.contains(&c.as_str()) {
            Ok(Currency(c))
        } else if c.len() == 3 && c.chars().all(|x| x.is_ascii_lowercase()) {
            Err(format!("“{}” is not a currency Stripe charges in: use a code such as EUR or USD.", s.trim()))
        } else {
            Err(format!("“{}” is not a currency code such as EUR or USD.", s.trim()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the currency has a minor unit (yen has none: 1200 is ¥1,200).
    pub fn has_cents(&self) -> bool {
        !views::ZERO_DECIMAL_CURRENCIES.contains(&self.0.as_str())
    }
}

/// An amount as an operator types it, in the currency's major unit ("12", "12.50"). Which
/// reading holds is the currency's to say (yen has no cents), so both are kept and the amount's
/// problem is told once the currency is known (`minor_in`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Amount {
    cents: Result<i64, String>,
    whole: Result<i64, String>,
}

impl Amount {
    /// Never refuses: whether the text is an amount depends on the currency (`minor_in`).
    pub fn parse(s: &str) -> Result<Amount, String> {
        Ok(Amount { cents: parse_amount(s, false), whole: parse_amount(s, true) })
    }

    /// The amount in minor units of a currency with cents or without, or why not.
    pub fn minor_in(&self, has_cents: bool) -> Result<i64, String> {
        if has_cents { self.cents.clone() } else { self.whole.clone() }
    }
}

/// "12", "12.5", "12.50" in minor units (cents); positive, at most 999,999.99. In a currency
/// with no minor unit (yen), a whole number, which is its own minor unit.
fn parse_amount(s: &str, whole_units: bool) -> Result<i64, String> {
    let t = s.trim();
    if whole_units {
        return match t.parse::<i64>() {
            Ok(n) if n > 0 && n <= 99_999_999 => Ok(n),
            Ok(_) => Err("A price must be more than zero and at most 99,999,999.".into()),
            Err(_) => Err(format!("“{t}” is not a whole amount: this currency has no cents.")),
        };
    }
    let bad = || format!("“{t}” is not an amount such as 12 or 12.50.");
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if whole.is_empty()
        || whole.len() > 6
        || !whole.chars().all(|c| c.is_ascii_digit())
        || frac.len() > 2
        || !frac.chars().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let cents =
        whole.parse::<i64>().map_err(|_| bad())? * 100 + format!("{frac:0<2}").parse::<i64>().map_err(|_| bad())?;
    if cents <= 0 {
        return Err("A price must be more than zero.".into());
    }
    Ok(cents)
}

/// Set the product's price for an interval and currency: the active one is archived (Stripe
/// prices never change amount) and the new one waits for the next sync.
#[tracing::instrument(name = "Set a price", skip(db), fields(product_id = %product_id))]
pub async fn set_price(db: &Db, product_id: ProductId, price: &NewPrice) -> Result<PriceId, ServiceError> {
    within_for(db, TxKind::Plain, &SET_PRICE_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::ProductSync(product_id.to_string())).await?;
        if catalog::product(tx.conn(), product_id).await?.is_none() {
            return Err(ServiceError::NotFound("product"));
        }
        let current = store::prices_of(tx.conn(), product_id).await?;
        if current.iter().any(|p| {
            p.active
                && p.billing_interval == price.interval
                && p.currency == price.currency.as_str()
                && p.amount_minor == price.amount_minor
        }) {
            return Err(ServiceError::Refused("The product already has this price.".into()));
        }
        store::archive_active_price(tx.conn(), product_id, price.interval, price.currency.as_str()).await?;
        let id =
            store::insert_price(tx.conn(), product_id, price.interval, price.amount_minor, price.currency.as_str())
                .await?;
        Ok(id)
    })
    .await
}

/// Stop selling a price: archived here, and in Stripe at the next sync. Subscriptions on it keep it.
#[tracing::instrument(name = "Archive a price", skip(db), fields(price_id = %price_id))]
pub async fn archive_price(db: &Db, price_id: PriceId) -> Result<(), ServiceError> {
    let p = {
        let mut read = db.read().await?;
        store::price(read.conn(), price_id).await?.ok_or(ServiceError::NotFound("price"))?
    };
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::ProductSync(p.product_id.to_string())).await?;
        if !store::archive_price(tx.conn(), price_id).await? {
            return Err(ServiceError::Refused("This price is archived already.".into()));
        }
        Ok(())
    })
    .await
}

/// What a sync click did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAnswer {
    /// Marked pending and enqueued: the product and this many prices.
    Enqueued { product: bool, prices: usize },
    /// A sync of this product is already waiting; it will take these changes too.
    AlreadyPending,
    /// Stripe has everything already; nothing was written.
    UpToDate,
}

/// catalogsync.Sync.
#[tracing::instrument(name = "Sync a product to Stripe", skip(db), fields(product_id = %product_id))]
pub async fn sync_product(db: &Db, product_id: ProductId) -> Result<SyncAnswer, ServiceError> {
    let mut tx = begin_for(db, TxKind::Plain, &SYNC_PRODUCT_LOCKS).await?;
    // The answer, and whether it is to be kept.
    let decided: Result<_, ServiceError> = async {
        tx.lock(&AdvisoryKey::ProductSync(product_id.to_string())).await?;
        let Some(product) = catalog::product(tx.conn(), product_id).await? else {
            return Err(ServiceError::NotFound("product"));
        };
        let mapping = store::product_mapping(tx.conn(), product_id).await?;
        let prices = store::prices_of(tx.conn(), product_id).await?;
        let product_work = match &mapping {
            None => true,
            Some(m) => m.stripe_product_id.is_none() || m.synced_name.as_deref() != Some(product.name.as_str()),
        };
        let price_work: Vec<PriceId> = prices
            .iter()
            .filter(|p| {
                (p.active && p.stripe_price_id.is_none())
                    || (!p.active && p.stripe_price_id.is_some() && p.stripe_active == Some(true))
            })
            .map(|p| p.price_id)
            .collect();
        if !product_work && price_work.is_empty() {
            return Ok((SyncAnswer::UpToDate, false));
        }
        let already = mapping.as_ref().is_some_and(|m| m.sync_state == SyncState::Pending)
            && prices.iter().filter(|p| price_work.contains(&p.price_id)).all(|p| p.sync_state == SyncState::Pending);
        store::mapping_pending(tx.conn(), product_id).await?;
        store::prices_pending(tx.conn(), &price_work).await?;
        let enqueued = store::enqueue_product_sync(tx.conn(), product_id).await?;
        if already && !enqueued {
            return Ok((SyncAnswer::AlreadyPending, false));
        }
        Ok((SyncAnswer::Enqueued { product: product_work, prices: price_work.len() }, true))
    }
    .await;
    // Nothing to keep: rolled back, its lock with it, before the answer is given.
    tx.end_keeping(decided).await
}

/// SyncProductToStripe: make or update the Stripe product, create the new prices, archive the
/// archived ones, recording each id as it comes back (so a retry after a crash sends the same
/// idempotency keys and records the same objects).
#[tracing::instrument(name = "Apply a product's sync to Stripe", skip(db, stripe), fields(product_id = %product_id))]
/// `operation` names this sync (the outbox row): a retry of it sends the same idempotency keys.
pub async fn apply_product_sync(
    db: &Db,
    stripe: &Stripe,
    product_id: ProductId,
    operation: &str,
) -> Result<(), ServiceError> {
    apply(db, stripe, product_id, operation, None).await
}

/// A price Stripe says it does not have, met when a member buys or switches (a test-mode account
/// that was reset, a stand-in that lost its state): the product synced again through
/// SyncProductToStripe's own recording path, with the lost ids forgotten, so Stripe gets the
/// price (and the product, when that is lost too) anew and the console records the new ids. The
/// price's Stripe id now, or None when the sync did not give it one (it is no longer active).
#[tracing::instrument(name = "Sync again a price Stripe lost", skip(db, stripe), fields(product_id = %product_id, price_id = %price_id, lost = %lost))]
pub async fn resync_lost_price(
    db: &Db,
    stripe: &Stripe,
    product_id: ProductId,
    price_id: PriceId,
    lost: &StripePriceId,
) -> Result<Option<StripePriceId>, ServiceError> {
    record(db, product_id, Outcome::PriceLost { price: price_id, stripe_id: lost }).await?;
    // The remaking's keys name what it replaces: two members meeting the same loss make one.
    let tag = format!("after-{lost}");
    apply(db, stripe, product_id, &tag, Some(&tag)).await?;
    let mut read = db.read().await?;
    Ok(store::price(read.conn(), price_id).await?.filter(|p| p.active).and_then(|p| p.stripe_price_id))
}

/// SyncProductToStripe. A product Stripe no longer has is forgotten with its prices' ids and
/// made again, under keys tagged with what it replaces (or with `remade`, a re-sync's own tag),
/// since the first making's keys would give back what Stripe lost.
async fn apply(
    db: &Db,
    stripe: &Stripe,
    product_id: ProductId,
    operation: &str,
    remade: Option<&str>,
) -> Result<(), ServiceError> {
    let read = async || -> Result<_, ServiceError> {
        let mut tx = db.read().await?;
        let Some(product) = catalog::product(tx.conn(), product_id).await? else { return Ok(None) };
        let mapping = store::product_mapping(tx.conn(), product_id).await?;
        let prices = store::prices_of(tx.conn(), product_id).await?;
        Ok(Some((product, mapping, prices)))
    };
    let Some((product, mapping, mut prices)) = read().await? else { return Ok(()) };
    let stripe_product_id = mapping.as_ref().and_then(|m| m.stripe_product_id.clone());
    let mut tag = remade.map(str::to_string);
    let mut put =
        stripe.put_product(product_id.0, stripe_product_id.as_ref(), &product.name, operation, tag.as_deref()).await;
    if let (Err(f), Some(lost)) = (&put, &stripe_product_id)
        && f.lost_catalog()
    {
        tracing::warn!(plan = %product_id, lost = %lost, "Stripe has no such product: it is made again with its prices");
        record(db, product_id, Outcome::ProductLost { stripe_id: lost }).await?;
        prices = match read().await? {
            Some((_, _, p)) => p,
            None => return Ok(()),
        };
        tag.get_or_insert_with(|| format!("after-{lost}"));
        put = stripe.put_product(product_id.0, None, &product.name, operation, tag.as_deref()).await;
    }
    let remade = tag.as_deref();
    let stripe_product = match put {
        Ok(id) => id,
        Err(f) => {
            record(db, product_id, Outcome::ProductFailed(&f.sentence())).await?;
            return Err(remote(f));
        }
    };
    record(db, product_id, Outcome::ProductSynced { stripe_id: &stripe_product, name: &product.name }).await?;
    let mut failure = None;
    for p in &prices {
        let result = if p.active && p.stripe_price_id.is_none() {
            stripe
                .create_price(p.price_id.0, &stripe_product, p.amount_minor, &p.currency, p.billing_interval, remade)
                .await
                .map(|id| Some((id, true)))
        } else if !p.active
            && p.stripe_active == Some(true)
            && let Some(id) = p.stripe_price_id.clone()
        {
            stripe.archive_price(p.price_id.0, &id).await.map(|_| Some((id, false)))
        } else {
            Ok(None)
        };
        match result {
            Ok(Some((id, active))) => {
                record(db, product_id, Outcome::PriceSynced { price: p.price_id, stripe_id: &id, active }).await?
            }
            Ok(None) => {}
            Err(f) => {
                record(db, product_id, Outcome::PriceFailed { price: p.price_id, why: &f.sentence() }).await?;
                failure.get_or_insert(f);
            }
        }
    }
    match failure {
        Some(f) => Err(remote(f)),
        None => Ok(()),
    }
}

/// What one Stripe call of a sync came back with.
enum Outcome<'a> {
    ProductSynced {
        stripe_id: &'a StripeProductId,
        name: &'a str,
    },
    ProductFailed(&'a str),
    PriceSynced {
        price: PriceId,
        stripe_id: &'a StripePriceId,
        active: bool,
    },
    PriceFailed {
        price: PriceId,
        why: &'a str,
    },
    /// Stripe has no such product: its id and its prices' ids are forgotten (all of them went
    /// with it), so the sync makes them again.
    ProductLost {
        stripe_id: &'a StripeProductId,
    },
    /// Stripe has no such price: its id is forgotten, so the sync makes it again.
    PriceLost {
        price: PriceId,
        stripe_id: &'a StripePriceId,
    },
}

/// One recorded outcome, in its own short transaction under the product's sync lock.
async fn record(db: &Db, product_id: ProductId, outcome: Outcome<'_>) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &RECORD_PRODUCT_SYNC_LOCKS, async |tx: &mut Tx| {
        tx.lock(&AdvisoryKey::ProductSync(product_id.to_string())).await?;
        match outcome {
            Outcome::ProductSynced { stripe_id, name } => {
                store::mapping_synced(tx.conn(), product_id, stripe_id, name).await?
            }
            Outcome::ProductFailed(why) => store::mapping_failed(tx.conn(), product_id, why).await?,
            Outcome::PriceSynced { price, stripe_id, active } => {
                store::price_synced(tx.conn(), price, stripe_id, active).await?
            }
            Outcome::PriceFailed { price, why } => store::price_failed(tx.conn(), price, why).await?,
            // Only the ids Stripe said it lacks: a sync that recorded new ones meanwhile stands.
            Outcome::ProductLost { stripe_id } => store::forget_lost_product(tx.conn(), product_id, stripe_id).await?,
            Outcome::PriceLost { price, stripe_id } => store::forget_lost_price(tx.conn(), price, stripe_id).await?,
        }
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_in_major_units_and_refused_clearly() {
        assert_eq!(parse_amount("12", false), Ok(1200));
        assert_eq!(parse_amount(" 12.5 ", false), Ok(1250));
        assert_eq!(parse_amount("0.99", false), Ok(99));
        for bad in ["", "-3", "1,50", "12.345", "abc", "1234567", ".5"] {
            assert!(parse_amount(bad, false).is_err(), "{bad}");
        }
        assert!(parse_amount("0", false).unwrap_err().contains("more than zero"));
        // Yen has no minor unit: 1200 is ¥1,200, and 12.50 is not an amount.
        assert_eq!(parse_amount("1200", true), Ok(1200));
        assert!(parse_amount("12.50", true).unwrap_err().contains("no cents"));
        let yen = Currency::parse("JPY").unwrap();
        assert_eq!(
            NewPrice::new(BillingInterval::Month, &Amount::parse("1200").unwrap(), yen).unwrap().amount_minor,
            1200
        );
    }
}
