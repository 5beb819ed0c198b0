//! Start-up: find the database (the configured one, or the private cluster), migrate it, and
//! connect as the run-time role. And the private cluster's hold: a command that runs on it
//! starts it first (`hold_private_cluster`) and, when it ends, stops it if it started it
//! (`release_private_cluster`), so one-shot commands leave no server behind.

use std::sync::Arc;

use anyhow::Context;
use sqlx::postgres::PgPoolOptions;

use private_cluster::{PrivateCluster, Release};

use crate::{
    config::Config,
    db::{Db, migrate},
};

/// The database the private cluster holds the console's data in.
pub const PRIVATE_DATABASE: &str = "member_console";

pub struct Booted {
    pub config: Arc<Config>,
    pub db: Db,
    pub admin_url: String,
}

/// With no DATABASE_URL, the private cluster, started when it is not running. The caller holds
/// it for the command's life (`hold_private_cluster`): stopping it is not boot's business.
pub async fn boot(config: Config) -> anyhow::Result<Booted> {
    let admin_url = match &config.database_url {
        Some(u) => u.clone(),
        None => {
            let dir = config.data_dir.clone();
            let cluster = tokio::task::spawn_blocking(move || -> anyhow::Result<PrivateCluster> {
                let c = PrivateCluster::ensure_started(&dir)?;
                c.ensure_database(PRIVATE_DATABASE)?;
                Ok(c)
            })
            .await??;
            cluster.admin_url(PRIVATE_DATABASE)
        }
    };
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(migrate::admin_options(&admin_url)?)
        .await
        .with_context(|| format!("connecting to {}", crate::config::mask_url(&admin_url)))?;
    migrate::run(&admin, &admin_url, &config.runtime_password).await?;
    admin.close().await;

    let runtime = migrate::runtime_options(&admin_url, &config.runtime_password)?;
    let pool = PgPoolOptions::new()
        .max_connections(32)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(runtime)
        .await
        .context("connecting as console_runtime")?;
    let mut db = Db::with_prepared_bound(pool, config.request_timeout / 2);
    db.lock_timeout = config.lock_timeout;
    // Every integration's keys exist and name their provider before anything materializes.
    crate::services::entitlements::register_providers(&db).await?;
    Ok(Booted { config: Arc::new(config), db, admin_url })
}

/// Stripe as the configuration names it: the account of `STRIPE_SECRET_KEY` at `STRIPE_API_BASE`.
/// None without a key (`serve` then starts the stand-in, when `crate::stand_ins` allows it:
/// `stripe_for_serve`).
pub fn connect_stripe(config: &Config) -> anyhow::Result<Option<Arc<crate::integrations::stripe::Stripe>>> {
    let Some(key) = &config.stripe.secret_key else { return Ok(None) };
    let stripe = crate::integrations::stripe::Stripe::connect(
        key,
        config.stripe.api_base.as_ref().map(|u| u.as_str()),
        config.stripe.webhook_secrets.clone(),
        config.stripe.call_timeout,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Some(Arc::new(stripe)))
}

/// The key the console uses with the stand-in it starts (the stand-in takes any test key).
pub const STANDIN_SECRET_KEY: &str = "sk_test_member_console_standin";

/// Stripe for `serve`: the configured account, or, with no key, the project's stand-in started
/// in this process (kept running as long as the value is held), with the console's own
/// `/webhooks/stripe` at `console` registered with it.
pub struct ServeStripe {
    pub stripe: Option<Arc<crate::integrations::stripe::Stripe>>,
    #[cfg(feature = "stand-ins")]
    pub standin: Option<stripe_standin::StandIn>,
}

impl ServeStripe {
    /// Stop the stand-in, if it runs.
    pub async fn stop(self) {
        #[cfg(feature = "stand-ins")]
        if let Some(standin) = self.standin {
            standin.stop().await;
        }
    }
}

/// A build without stand-ins: the configured account only (`crate::stand_ins` refused the start
/// without one).
#[cfg(not(feature = "stand-ins"))]
pub async fn stripe_for_serve(config: &Config, _console: std::net::SocketAddr) -> anyhow::Result<ServeStripe> {
    Ok(ServeStripe { stripe: connect_stripe(config)? })
}

#[cfg(feature = "stand-ins")]
pub async fn stripe_for_serve(config: &Config, console: std::net::SocketAddr) -> anyhow::Result<ServeStripe> {
    if config.stripe.secret_key.is_some() {
        return Ok(ServeStripe { stripe: connect_stripe(config)?, standin: None });
    }
    // Its state is kept beside the console's, so a restarted console finds the products, prices,
    // customers and subscriptions it synced (and its webhook endpoint) where it left them.
    let state_file = config.data_dir.join("stripe-standin.json");
    let standin = stripe_standin::StandIn::start(stripe_standin::Config {
        state_file: Some(state_file.clone()),
        ..stripe_standin::Config::default()
    })
    .await
    .with_context(|| {
        format!("starting the Stripe stand-in (on a free port of 127.0.0.1, its state in {})", state_file.display())
    })?;
    let host = if console.ip().is_unspecified() { std::net::IpAddr::from([127, 0, 0, 1]) } else { console.ip() };
    let hook = format!("http://{}/webhooks/stripe", std::net::SocketAddr::new(host, console.port()));
    let secret = standin.add_webhook_endpoint(&hook).map_err(|e| anyhow::anyhow!("registering the webhook: {e}"))?;
    let stripe = crate::integrations::stripe::Stripe::connect(
        STANDIN_SECRET_KEY,
        Some(&standin.base_url()),
        vec![secret],
        config.stripe.call_timeout,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "Stripe: no STRIPE_SECRET_KEY, so the Stripe stand-in runs at {} (its payment page takes 4242 4242 4242 4242; \
         4000 0000 0000 0341 pays once, then fails; 4000 0000 0000 9995 is declined; its state is kept in {})",
        standin.base_url(),
        state_file.display()
    );
    Ok(ServeStripe { stripe: Some(Arc::new(stripe)), standin: Some(standin) })
}

/// The farm as the configuration names it (`FARM_URL`, `FARM_TOKEN`, `FARM_CALLBACK_SECRET`,
/// `FARM_SITE_URL`); None without a URL (`serve` then starts the local farm: `farm_for_serve`).
pub fn connect_farm(config: &Config) -> anyhow::Result<Option<Arc<crate::integrations::farm::Farm>>> {
    let Some(url) = &config.farm.url else { return Ok(None) };
    let farm = crate::integrations::farm::Farm::new(
        url.as_str(),
        config.farm.token.as_deref().unwrap_or_default(),
        &config.farm.domain,
        config.farm.call_timeout,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?
    .with_site_url(&config.farm.site_url)
    .with_callback_secret(config.farm.callback_secret.as_deref().unwrap_or_default());
    Ok(Some(Arc::new(farm)))
}

/// The farm for `serve`: the configured one, or, with no `FARM_URL`, the project's local farm
/// started in this process (its data under the data folder's `farm/`, kept running as long as
/// the value is held), sending its callbacks to the console's own `/farm/callbacks` at `console`.
pub struct ServeFarm {
    pub farm: Option<Arc<crate::integrations::farm::Farm>>,
    #[cfg(feature = "stand-ins")]
    pub local: Option<local_farm::LocalFarm>,
}

impl ServeFarm {
    /// Stop the local farm, if it runs, and its `wiki` server's process group with it.
    pub async fn stop(self) {
        #[cfg(feature = "stand-ins")]
        if let Some(local) = self.local {
            local.stop().await;
        }
    }
}

/// A build without stand-ins: the configured farm only (`crate::stand_ins` refused the start
/// without one).
#[cfg(not(feature = "stand-ins"))]
pub async fn farm_for_serve(config: &Config, _console: std::net::SocketAddr) -> anyhow::Result<ServeFarm> {
    Ok(ServeFarm { farm: connect_farm(config)? })
}

#[cfg(feature = "stand-ins")]
pub async fn farm_for_serve(config: &Config, console: std::net::SocketAddr) -> anyhow::Result<ServeFarm> {
    if config.farm.url.is_some() {
        return Ok(ServeFarm { farm: connect_farm(config)?, local: None });
    }
    let token = crate::config::random_hex(24);
    let secret = crate::config::random_hex(24);
    let local = local_farm::LocalFarm::start(local_farm::Config {
        data_dir: config.data_dir.join("farm"),
        listen: config.farm.local_listen,
        farm_domain: config.farm.domain.to_string(),
        token: token.clone(),
        ..local_farm::Config::default()
    })
    .await
    .map_err(|e| match e.get_ref().and_then(|inner| inner.downcast_ref::<local_farm::ListenError>()) {
        // Its address is the operator's to move: say where, and with what.
        Some(listen) => anyhow::anyhow!(
            "the local farm could not listen on {} (FARM_LOCAL_BIND moves it): {}",
            listen.address,
            listen.source
        ),
        None => anyhow::anyhow!("starting the local farm: {e}"),
    })?;
    let host = if console.ip().is_unspecified() { std::net::IpAddr::from([127, 0, 0, 1]) } else { console.ip() };
    let console_base = format!("http://{}", std::net::SocketAddr::new(host, console.port()));
    local.set_callback(format!("{console_base}/farm/callbacks"), secret.clone());
    // The farm asks the console, with the same secret, whether a member may still edit a site.
    local.set_confirm_url(format!("{console_base}{}", views::paths::FARM_EDIT_SESSIONS_CONFIRM));
    let farm =
        crate::integrations::farm::Farm::new(&local.base_url(), &token, &config.farm.domain, config.farm.call_timeout)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .with_site_url(&format!("http://{{domain}}:{}/", local.port()))
            .with_callback_secret(&secret);
    eprintln!(
        "Farm: no FARM_URL, so the local farm runs at {} (sites at http://<name>.{}:{}/){}",
        local.base_url(),
        config.farm.domain,
        local.port(),
        if local.wiki_running() { String::new() } else { format!("; {}", local_farm::install_hint()) }
    );
    Ok(ServeFarm { farm: Some(Arc::new(farm)), local: Some(local) })
}

impl Booted {
    /// Close the pool (the private cluster is released by whoever holds it).
    pub async fn shutdown(self) {
        self.db.close().await;
    }
}

/// With no DATABASE_URL, start the private cluster (or find it running) before a command runs,
/// and say where it is. Hold the result until the command ends, then `release_private_cluster`.
pub async fn hold_private_cluster(config: &Config) -> anyhow::Result<Option<PrivateCluster>> {
    if config.database_url.is_some() {
        return Ok(None);
    }
    let dir = config.data_dir.clone();
    let cluster = tokio::task::spawn_blocking(move || PrivateCluster::ensure_started(&dir)).await??;
    tracing::info!(
        port = cluster.port(),
        pgdata = %cluster.pgdata().display(),
        started = cluster.started_here(),
        "private PostgreSQL cluster is up"
    );
    say_where_relocated(&cluster);
    Ok(Some(cluster))
}

/// Once per command, when the cluster is not in the data folder: a person who looks for it there
/// learns where it is and why.
pub fn say_where_relocated(cluster: &PrivateCluster) {
    if cluster.relocated() {
        tracing::info!(
            data_dir = %cluster.data_dir().display(),
            pgdata = %cluster.pgdata().display(),
            "the data folder is out of reach of the user PostgreSQL runs as, so the cluster lives \
             in a folder of its own (the same at every start); the secrets stay in the data folder"
        );
    }
}

/// The command has ended (done, failed or interrupted): stop the private cluster if it started
/// it and no other console process uses it. A failure to stop is logged, not returned: the
/// command's own outcome is what its caller needs to see.
pub async fn release_private_cluster(cluster: Option<PrivateCluster>) {
    let Some(cluster) = cluster else { return };
    let pgdata = cluster.pgdata().display().to_string();
    match tokio::task::spawn_blocking(move || cluster.release()).await {
        Ok(Ok(Release::Stopped)) => tracing::info!(%pgdata, "stopped the private PostgreSQL cluster it started"),
        Ok(Ok(Release::InUse)) => {
            tracing::info!(%pgdata, "left the private PostgreSQL cluster running: another console process uses it")
        }
        Ok(Ok(Release::LeftRunning)) => {}
        Ok(Err(e)) => tracing::warn!(%pgdata, error = %e, "stopping the private PostgreSQL cluster failed"),
        Err(e) => tracing::warn!(%pgdata, error = %e, "stopping the private PostgreSQL cluster failed"),
    }
}

/// What `serve` sends mail with: the configured server, or, when the stand-ins were asked for
/// and none is configured (`crate::stand_ins`), the mail catcher the project ships (its page is
/// logged); otherwise mail is off, and said so.
pub struct ServeMail {
    pub mailer: Option<Arc<crate::integrations::mail::Mailer>>,
    #[cfg(feature = "stand-ins")]
    pub catcher: Option<mail_catcher::MailCatcher>,
}

impl ServeMail {
    /// Stop the mail catcher, if it runs.
    pub async fn stop(self) {
        #[cfg(feature = "stand-ins")]
        if let Some(catcher) = self.catcher {
            catcher.stop().await;
        }
    }
}

pub async fn mail_for_serve(config: &Config, catcher: bool) -> anyhow::Result<ServeMail> {
    use crate::integrations::mail::Mailer;
    if config.mail.smtp_url.is_some() || !catcher {
        if config.mail.smtp_url.is_none() {
            eprintln!("Mail is off: no SMTP_URL is set, so no mail is sent (see docs/operations.md, \"Mail\").");
        }
        let mailer = Mailer::from_settings(&config.mail)?.map(Arc::new);
        return Ok(ServeMail {
            mailer,
            #[cfg(feature = "stand-ins")]
            catcher: None,
        });
    }
    start_mail_catcher(config).await
}

#[cfg(feature = "stand-ins")]
async fn start_mail_catcher(config: &Config) -> anyhow::Result<ServeMail> {
    use crate::integrations::mail::Mailer;
    let catcher = mail_catcher::MailCatcher::start(mail_catcher::Config::default())
        .await
        .context("starting the mail catcher (on free ports of 127.0.0.1)")?;
    let settings = crate::config::MailSettings { smtp_url: Some(catcher.smtp_url()), ..config.mail.clone() };
    let mailer = Mailer::from_settings(&settings)?.map(Arc::new);
    eprintln!("Mail: no SMTP_URL, so mail is caught, not sent; read it at {}", catcher.http_url());
    Ok(ServeMail { mailer, catcher: Some(catcher) })
}

/// `crate::stand_ins` refuses a start that would need it in a build without stand-ins.
#[cfg(not(feature = "stand-ins"))]
async fn start_mail_catcher(_config: &Config) -> anyhow::Result<ServeMail> {
    anyhow::bail!("SMTP_URL is not set, and this build has no mail catcher (built without the `stand-ins` feature)")
}

/// The DNS `serve` checks custom domains with: `DNS_RESOLVER` or the system's resolver, or,
/// when the stand-ins were asked for and `DNS_RESOLVER` is unset (`crate::stand_ins`), the local
/// DNS the project ships, on free loopback ports, its records kept in the data folder.
#[derive(Default)]
pub struct ServeDns {
    #[cfg(feature = "stand-ins")]
    pub local: Option<local_dns::LocalDns>,
}

impl ServeDns {
    /// Where the local DNS answers, when it runs: the console's `DNS_RESOLVER`.
    pub fn resolver(&self) -> Option<std::net::SocketAddr> {
        #[cfg(feature = "stand-ins")]
        if let Some(local) = &self.local {
            return Some(local.dns_addr());
        }
        None
    }

    /// The local DNS's control URL, when it runs.
    pub fn control_url(&self) -> Option<String> {
        #[cfg(feature = "stand-ins")]
        if let Some(local) = &self.local {
            return Some(local.control_url());
        }
        None
    }

    /// Stop the local DNS, if it runs.
    pub async fn stop(self) {
        #[cfg(feature = "stand-ins")]
        if let Some(local) = self.local {
            local.stop().await;
        }
    }
}

pub async fn dns_for_serve(config: &Config, local: bool) -> anyhow::Result<ServeDns> {
    if !local || config.dns_resolver.is_some() {
        return Ok(ServeDns::default());
    }
    start_local_dns(config).await
}

#[cfg(feature = "stand-ins")]
async fn start_local_dns(config: &Config) -> anyhow::Result<ServeDns> {
    let local = local_dns::LocalDns::start(local_dns::Config {
        data_dir: Some(config.data_dir.clone()),
        ..local_dns::Config::default()
    })
    .await
    .with_context(|| {
        format!(
            "starting the local DNS (on free ports of 127.0.0.1, its records in {})",
            config.data_dir.join(local_dns::RECORDS_FILE).display()
        )
    })?;
    eprintln!(
        "DNS: no DNS_RESOLVER, so custom domains are checked against the local DNS at {} (add a record with \
         `curl -X PUT {}/_dns/records/<name>/txt -d '{{\"values\": [\"<token>\"]}}'`)",
        local.dns_addr(),
        local.control_url()
    );
    Ok(ServeDns { local: Some(local) })
}

/// `crate::stand_ins` asks for it only in a build with stand-ins.
#[cfg(not(feature = "stand-ins"))]
async fn start_local_dns(_config: &Config) -> anyhow::Result<ServeDns> {
    anyhow::bail!("this build has no local DNS (built without the `stand-ins` feature)")
}
