//! The web layer: actix handlers parse input, check who asks, call one service function and
//! render a view. No SQL here.

pub mod call;
pub mod context;
pub mod errors;
pub mod forms;
pub mod guards;
pub mod headers;
pub mod identity;
pub mod input;
pub mod pages;
pub mod paging;
pub mod refusals;
pub mod render;
pub mod routes;
pub mod static_assets;

use std::{net::TcpListener, sync::Arc};

use actix_session::{
    SessionMiddleware,
    config::{BrowserSession, CookieContentSecurity},
    storage::CookieSessionStore,
};
use actix_web::{
    App, HttpResponse, HttpServer,
    cookie::{Key, SameSite},
    dev::Server,
    middleware::from_fn,
    web,
};

// The static files' handler, where the route table names it.
use static_assets::static_file;

use crate::{
    config::Config,
    db::Db,
    integrations::{dns::Resolver, farm::Farm, stripe::Stripe},
    store::billing_reads::OnSaleMemo,
};

/// What every handler can reach.
pub struct AppState {
    pub db: Db,
    pub config: Arc<Config>,
    /// Stripe (or the stand-in), when billing is connected.
    pub stripe: Option<Arc<Stripe>>,
    /// The FedWiki farm (or the local one), when sites are connected.
    pub farm: Option<Arc<Farm>>,
    /// What is on sale, as the billing page last read it (`core.member_billing`).
    pub on_sale: OnSaleMemo,
    /// Whether mail is sent (`SMTP_URL`, or the demo's catcher): pages that need it say so when
    /// it is not.
    pub mail_on: bool,
    /// The key mailed links' tokens are derived under (`services::tokens`).
    pub tokens: crate::services::tokens::TokenKey,
    /// The address the server listens on: mailed links' base when `CONSOLE_PUBLIC_URL` is unset.
    pub bound: Option<std::net::SocketAddr>,
    /// What custom domains' TXT records are asked of (`DNS_RESOLVER`, or the system's resolver).
    pub dns: Arc<Resolver>,
    /// The local DNS's control URL when `serve` runs it (stand-ins): where the demo's pages tell
    /// a member to add a record.
    pub local_dns: Option<String>,
}

impl AppState {
    /// The console's address as Stripe's return pages use it: `CONSOLE_PUBLIC_URL`,
    /// else the address this request came to.
    pub fn public_base(&self, req: &actix_web::HttpRequest) -> String {
        match &self.config.public_url {
            Some(u) => u.as_str().trim_end_matches('/').to_string(),
            None => {
                let ci = req.connection_info();
                format!("{}://{}", ci.scheme(), ci.host())
            }
        }
    }

    /// The console's address as mailed links use it: `CONSOLE_PUBLIC_URL`, else the address the
    /// server bound (a wildcard one as the loopback). Never the request's Host header: anyone
    /// can write that, and a reset link mailed to its victim must not point at the writer's host.
    pub fn link_base(&self) -> String {
        if let Some(u) = &self.config.public_url {
            return u.as_str().trim_end_matches('/').to_string();
        }
        let mut bound = self.bound.unwrap_or_else(|| self.config.bind);
        if bound.ip().is_unspecified() {
            bound.set_ip(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        }
        format!("http://{bound}")
    }

    /// The host a message's Message-ID names.
    pub fn mail_host(&self) -> String {
        url::Url::parse(&self.link_base())
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_else(|| "localhost".into())
    }
}

/// The systems outside the console a server is connected to.
#[derive(Clone, Default)]
pub struct Connected {
    pub stripe: Option<Arc<Stripe>>,
    pub farm: Option<Arc<Farm>>,
    /// Mail is sent (a worker with a mailer runs somewhere).
    pub mail: bool,
    /// The control URL of the local DNS `serve` runs in place of a resolver (stand-ins).
    pub local_dns: Option<String>,
}

/// The application's routes (without middleware), for the server and for tests.
pub fn routes(cfg: &mut web::ServiceConfig) {
    routes::configure(cfg);
}

/// Start the HTTP server on `listener`, with no Stripe connected. The caller awaits (or stops)
/// the returned server.
pub fn serve(listener: TcpListener, db: Db, config: Arc<Config>) -> std::io::Result<Server> {
    serve_with(listener, db, config, None)
}

/// Start the HTTP server on `listener` with Stripe (or the stand-in) connected.
pub fn serve_with(
    listener: TcpListener,
    db: Db,
    config: Arc<Config>,
    stripe: Option<Arc<Stripe>>,
) -> std::io::Result<Server> {
    serve_connected(listener, db, config, Connected { stripe, farm: None, mail: false, local_dns: None })
}

/// Start the HTTP server on `listener` with the outside systems `connected`.
pub fn serve_connected(
    listener: TcpListener,
    db: Db,
    config: Arc<Config>,
    connected: Connected,
) -> std::io::Result<Server> {
    let key = Key::from(&config.session_key);
    let secure = config.secure_cookies();
    let tokens = crate::services::tokens::TokenKey::from_session_key(&config.session_key);
    let bound = listener.local_addr().ok();
    let dns = Arc::new(Resolver::for_config(&config));
    let state = web::Data::new(AppState {
        db,
        config,
        stripe: connected.stripe,
        farm: connected.farm,
        on_sale: OnSaleMemo::default(),
        mail_on: connected.mail,
        tokens,
        bound,
        dns,
        local_dns: connected.local_dns,
    });
    let server =
        HttpServer::new(move || {
            let session = SessionMiddleware::builder(CookieSessionStore::default(), key.clone())
                .cookie_name(session_cookie_name(secure).into())
                .cookie_path("/".into())
                .cookie_http_only(true)
                .cookie_secure(secure)
                .cookie_same_site(SameSite::Lax)
                .cookie_content_security(CookieContentSecurity::Private)
                .session_lifecycle(BrowserSession::default())
                .build();
            App::new()
                .app_data(state.clone())
                .app_data(web::FormConfig::default().limit(64 * 1024).error_handler(|e, _| {
                    errors::AppError::BadRequest(format!("The form could not be read: {e}.")).into()
                }))
                // An id in a path that is not a number names nothing: the friendly 404.
                .app_data(web::PathConfig::default().error_handler(|_, _| errors::AppError::NotFound.into()))
                .app_data(web::QueryConfig::default().error_handler(|e, _| {
                    errors::AppError::BadRequest(format!("The address is not valid: {e}.")).into()
                }))
                .configure(routes)
                .default_service(web::to(not_found))
                // Outermost last: headers, context, then the session; each route's access check
                // wraps the route itself (routes.rs).
                .wrap(session)
                .wrap(from_fn(context::request_context))
                .wrap(from_fn(headers::security_headers))
        })
        .disable_signals()
        .shutdown_timeout(30)
        .listen(listener)?
        .run();
    Ok(server)
}

/// The session cookie's name: with https, the `__Host-` prefix, which browsers accept only from a
/// secure origin, for the whole host, with no Domain, so no subdomain can set or shadow it.
pub fn session_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-mc_session" } else { "mc_session" }
}

async fn not_found() -> Result<HttpResponse, errors::AppError> {
    Err(errors::AppError::NotFound)
}
