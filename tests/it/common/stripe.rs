//! Billing tests' Stripe: the project's stand-in, started in the test's runtime, the console's own
//! client pointed at it, and a raw HTTP client for what the console never asks Stripe to do
//! (making a subscription outside a checkout, a test clock, a fault).

use std::{sync::Arc, time::Duration};

use member_console::{
    db::Db,
    ids::{OrganizationId, PriceId, ProductId, StripeCustomerId, StripePriceId, StripeSubscriptionId},
    integrations::stripe::Stripe,
    services::billing::{self, catalog_sync::NewPrice},
};
use serde_json::Value;
use stripe_standin::{Config, StandIn};

pub const SECRET_KEY: &str = "sk_test_console_tests";

/// The demo, and a stand-in of the test's own.
pub async fn demo_with_stripe() -> (super::TestDb, StripeFixture) {
    let t = super::pages::demo_db().await;
    (t, StripeFixture::start().await)
}

pub struct StripeFixture {
    /// Held so it keeps serving for the test's life.
    _standin: StandIn,
    pub stripe: Arc<Stripe>,
    pub http: reqwest::Client,
    pub base: String,
}

impl StripeFixture {
    /// A stand-in of this test's own, webhooks retried quickly.
    pub async fn start() -> StripeFixture {
        let standin = StandIn::start(Config {
            webhook_retry: vec![Duration::from_millis(200), Duration::from_millis(400)],
            ..Config::default()
        })
        .await
        .expect("the stand-in starts");
        let base = standin.base_url();
        let stripe = Stripe::connect(SECRET_KEY, Some(&base), vec![], Duration::from_secs(5)).expect("a client");
        StripeFixture { _standin: standin, stripe: Arc::new(stripe), http: reqwest::Client::new(), base }
    }

    /// A client for the same stand-in that signs nothing but verifies with `secrets`.
    pub fn with_webhook_secrets(&self, secrets: Vec<String>) -> Arc<Stripe> {
        Arc::new(Stripe::connect(SECRET_KEY, Some(&self.base), secrets, Duration::from_secs(5)).expect("a client"))
    }

    /// POST to Stripe's API (form-encoded, as Stripe takes it); the answer's JSON.
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Value {
        let r = self.post_form(&format!("/v1{path}"), form).await;
        let status = r.status();
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).expect("JSON");
        assert!(status.is_success(), "POST {path} answered {status}: {body}");
        body
    }

    pub async fn get(&self, path: &str) -> Value {
        let r = self.http.get(format!("{}/v1{path}", self.base)).bearer_auth(SECRET_KEY).send().await.unwrap();
        serde_json::from_str(&r.text().await.unwrap()).expect("JSON")
    }

    pub async fn delete(&self, path: &str) -> Value {
        let r = self.http.delete(format!("{}/v1{path}", self.base)).bearer_auth(SECRET_KEY).send().await.unwrap();
        serde_json::from_str(&r.text().await.unwrap()).expect("JSON")
    }

    /// The stand-in's control API (not Stripe's).
    pub async fn control(&self, path: &str, form: &[(&str, &str)]) {
        let r = self.post_form(&format!("/_standin{path}"), form).await;
        assert!(r.status().is_success(), "control {path}: {}", r.status());
    }

    /// POST a form to the stand-in at `path` (below its base), with the key.
    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        let url = format!("{}{path}", self.base);
        self.http.post(url).bearer_auth(SECRET_KEY).form(form).send().await.expect("the stand-in answers")
    }

    /// A monthly price for `product`, synced to the stand-in as the outbox would.
    pub async fn price(&self, db: &Db, product: ProductId, amount: &str) -> PriceId {
        let price = billing::set_price(db, product, &new_price("month", amount, "eur").unwrap()).await.unwrap();
        billing::sync_product(db, product).await.unwrap();
        billing::apply_product_sync(db, &self.stripe, product, &format!("test-{}", price.0)).await.unwrap();
        price
    }

    /// The demo's paid wiki tiers priced, as the billing tests sell them: (Basic at 12, Pro at 30).
    pub async fn demo_prices(&self, t: &super::TestDb) -> (PriceId, PriceId) {
        let basic = self.price(&t.db, super::acts::product_id(t, "Basic").await, "12").await;
        let pro = self.price(&t.db, super::acts::product_id(t, "Pro").await, "30").await;
        (basic, pro)
    }

    /// The Stripe price id the console recorded for `price`.
    pub async fn stripe_price(&self, admin: &sqlx::PgPool, price: PriceId) -> StripePriceId {
        sqlx::query_scalar("SELECT stripe_price_id FROM billing.prices WHERE price_id = $1")
            .bind(price)
            .fetch_one(admin)
            .await
            .unwrap()
    }

    /// The organization's customer, made by the console, paying with Stripe's test method `pm`
    /// (pm_card_visa, pm_card_chargeCustomerFail), optionally on a test clock.
    pub async fn customer(&self, db: &Db, org: OrganizationId, pm: &str, clock: Option<&str>) -> StripeCustomerId {
        let id = match clock {
            None => self.stripe.create_customer(org.0, "Test organization", None).await.unwrap(),
            Some(c) => {
                let made = self
                    .post(
                        "/customers",
                        &[("name", "Clocked"), ("test_clock", c), ("metadata[organization_id]", &org.0.to_string())],
                    )
                    .await;
                StripeCustomerId::from(made["id"].as_str().unwrap())
            }
        };
        self.post(
            &format!("/customers/{id}"),
            &[("payment_method", pm), ("invoice_settings[default_payment_method]", pm)],
        )
        .await;
        let mut tx = member_console::db::begin(db, member_console::db::TxKind::Plain).await.unwrap();
        member_console::store::billing::put_customer(tx.conn(), org, &id).await.unwrap();
        tx.commit().await.unwrap();
        id
    }

    /// A subscription made directly in Stripe (as a checkout would, with the organization in its
    /// metadata); its id.
    pub async fn subscribe(
        &self,
        customer: &StripeCustomerId,
        stripe_price: &StripePriceId,
        org: OrganizationId,
    ) -> StripeSubscriptionId {
        let s = self
            .post(
                "/subscriptions",
                &[
                    ("customer", customer.as_str()),
                    ("items[0][price]", stripe_price.as_str()),
                    ("items[0][quantity]", "1"),
                    ("metadata[organization_id]", &org.0.to_string()),
                ],
            )
            .await;
        StripeSubscriptionId::from(s["id"].as_str().unwrap())
    }

    /// A test clock frozen at `at` (unix seconds); its id.
    pub async fn clock(&self, at: i64) -> String {
        self.post("/test_helpers/test_clocks", &[("frozen_time", &at.to_string())]).await["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn advance(&self, clock: &str, to: i64) {
        self.post(&format!("/test_helpers/test_clocks/{clock}/advance"), &[("frozen_time", &to.to_string())]).await;
        // The clock is ready when its status says so.
        for _ in 0..100 {
            if self.get(&format!("/test_helpers/test_clocks/{clock}")).await["status"] == "ready" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the test clock {clock} did not get ready");
    }
}

/// A price as the price form would make it from these texts (`interval` "month" or "year").
pub fn new_price(interval: &str, amount: &str, currency: &str) -> Result<NewPrice, String> {
    use member_console::{
        services::billing::catalog_sync::{Amount, Currency},
        states::BillingInterval,
    };
    let interval = BillingInterval::from_text(interval).ok_or_else(|| format!("no interval {interval}"))?;
    NewPrice::new(interval, &Amount::parse(amount)?, Currency::parse(currency)?)
}
