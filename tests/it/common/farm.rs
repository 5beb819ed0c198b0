//! Sites tests' farm: the project's local farm, started in the test's runtime (its API only, or
//! with the real `wiki` server), the console's own client pointed at it, and a raw client for
//! its test controls (faults).

use std::{sync::Arc, time::Duration};

use local_farm::{Config, LocalFarm, WikiMode};
use member_console::{hostname::FarmZone, integrations::farm::Farm};

pub const TOKEN: &str = "farm-test-token";
pub const CALLBACK_SECRET: &str = "farm-test-callback-secret";

/// The id of the site named `name` (its domain under the farm's zone).
pub async fn site_id(t: &super::TestDb, name: &str) -> member_console::ids::SiteId {
    t.one(
        sqlx::query_scalar("SELECT site_id FROM fedwiki.sites WHERE domain = $1")
            .bind(format!("{name}.wiki.localhost")),
    )
    .await
}

pub struct FarmFixture {
    pub local: LocalFarm,
    pub farm: Arc<Farm>,
    pub http: reqwest::Client,
    _dir: std::path::PathBuf,
}

impl FarmFixture {
    /// The farm's API alone (no `wiki`), callbacks retried quickly.
    pub async fn start() -> FarmFixture {
        Self::start_with(WikiMode::Off, Duration::from_secs(5)).await
    }

    pub async fn start_with(wiki: WikiMode, call_timeout: Duration) -> FarmFixture {
        Self::start_tuned(wiki, call_timeout, |_| {}).await
    }

    /// As [`FarmFixture::start_with`], the farm's config adjusted.
    pub async fn start_tuned(wiki: WikiMode, call_timeout: Duration, tune: impl FnOnce(&mut Config)) -> FarmFixture {
        let dir = std::env::temp_dir().join(format!("mc-farm-{}", member_console::config::random_hex(6)));
        let mut config = Config {
            data_dir: dir.clone(),
            token: TOKEN.into(),
            wiki,
            callback_retry: vec![Duration::from_millis(100), Duration::from_millis(200)],
            modified_poll: Duration::from_millis(300),
            ..Config::default()
        };
        tune(&mut config);
        let local = LocalFarm::start(config).await.expect("the local farm starts");
        let farm = Farm::new(&local.base_url(), TOKEN, &FarmZone::parse("wiki.localhost").unwrap(), call_timeout)
            .expect("a farm client")
            .with_site_url(&format!("http://{{domain}}:{}/", local.port()))
            .with_callback_secret(CALLBACK_SECRET);
        FarmFixture { local, farm: Arc::new(farm), http: reqwest::Client::new(), _dir: dir }
    }

    /// Send the farm's callbacks and edit-session questions to the console at `app`, as `serve`
    /// does for its own local farm.
    pub fn report_to(&self, app: &super::TestApp) {
        self.local.set_callback(app.url(views::paths::FARM_CALLBACKS), CALLBACK_SECRET.into());
        self.local.set_confirm_url(app.url(views::paths::FARM_EDIT_SESSIONS_CONFIRM));
    }

    /// `POST /_farm/faults` with `body`.
    pub async fn faults(&self, body: serde_json::Value) {
        let r = self.http.post(format!("{}/_farm/faults", self.local.base_url())).json(&body).send().await.unwrap();
        assert!(r.status().is_success(), "faults: {}", r.status());
    }

    /// The farm's own record of a site (`GET /api/sites/{domain}`), as JSON, or None.
    pub async fn site(&self, domain: &str) -> Option<serde_json::Value> {
        let r = self
            .http
            .get(format!("{}/api/sites/{domain}", self.local.base_url()))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        if r.status() == 404 { None } else { Some(r.json().await.unwrap()) }
    }
}
