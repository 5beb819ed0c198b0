//! The web layer: actix handlers parse input, check who asks, call one service function and
//! render a view. No SQL here.

pub mod context;
pub mod errors;
pub mod forms;
pub mod identity;
pub mod pages;
pub mod render;

use std::{net::TcpListener, sync::Arc};

use actix_session::{
    SessionMiddleware,
    config::{BrowserSession, CookieContentSecurity},
    storage::CookieSessionStore,
};
use actix_web::{
    App, HttpRequest, HttpResponse, HttpServer,
    cookie::{Key, SameSite},
    dev::Server,
    get,
    middleware::from_fn,
    web,
};

use crate::{config::Config, db::Db};

/// What every handler can reach.
pub struct AppState {
    pub db: Db,
    pub config: Arc<Config>,
}

/// The application's routes (without middleware), for the server and for tests.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(pages::health::healthz)
        .service(pages::health::readyz)
        .service(static_file)
        .service(pages::auth::login_form)
        .service(pages::auth::login)
        .service(pages::auth::logout)
        .service(pages::home::home)
        .service(pages::operator::overview)
        .service(pages::catalog::catalog)
        .service(pages::catalog::create_key)
        .service(pages::catalog::create_set)
        .service(pages::catalog::create_product)
        .service(pages::catalog::set_page)
        .service(pages::catalog::save_rules)
        .service(pages::catalog::product_page)
        .service(pages::catalog::save_product)
        .service(pages::topology::topology)
        .service(pages::topology::preview)
        .service(pages::topology::add_tier)
        .service(pages::topology::delete_tier)
        .service(pages::topology::ladder_order)
        .service(pages::plan_acts::list)
        .service(pages::plan_acts::detail)
        .service(pages::plan_acts::progress)
        .service(pages::plan_acts::retry)
        .service(pages::topology::change_default)
        .service(pages::topology::default_preview)
        .service(pages::topology::remove_preview)
        .service(pages::topology::remove_tier)
        .service(pages::topology::tier_order_preview)
        .service(pages::topology::tier_order)
        .service(pages::organizations::list)
        .service(pages::organizations::create)
        .service(pages::rule_changes::list)
        .service(pages::rule_changes::detail)
        .service(pages::rule_changes::progress)
        .service(pages::rule_changes::retry)
        .service(pages::grants::list)
        .service(pages::grants::new_form)
        .service(pages::grants::issue)
        .service(pages::grants::detail)
        .service(pages::grants::revoke)
        .service(pages::grants::manage)
        .service(pages::organizations::detail);
}

/// Start the HTTP server on `listener`. The caller awaits (or stops) the returned server.
pub fn serve(listener: TcpListener, db: Db, config: Arc<Config>) -> std::io::Result<Server> {
    let key = Key::from(&config.session_key);
    let secure = config.secure_cookies();
    let state = web::Data::new(AppState { db, config });
    let server =
        HttpServer::new(move || {
            let session = SessionMiddleware::builder(CookieSessionStore::default(), key.clone())
                .cookie_name("mc_session".into())
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
                // Outermost last: context, then session, then identity and policy.
                .wrap(from_fn(identity::identify_and_authorize))
                .wrap(session)
                .wrap(from_fn(context::request_context))
        })
        .disable_signals()
        .shutdown_timeout(30)
        .listen(listener)?
        .run();
    Ok(server)
}

async fn not_found() -> Result<HttpResponse, errors::AppError> {
    Err(errors::AppError::NotFound)
}

const HTMX: &[u8] = include_bytes!("../../static/htmx.min.js");
const CSS: &[u8] = include_bytes!("../../static/console.css");

/// The two static files, compiled into the binary so it runs from any folder.
#[get("/static/{name}")]
async fn static_file(req: HttpRequest, name: web::Path<String>) -> Result<HttpResponse, errors::AppError> {
    let _ = req;
    let (body, kind) = match name.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "console.css" => (CSS, "text/css; charset=utf-8"),
        _ => return Err(errors::AppError::NotFound),
    };
    Ok(HttpResponse::Ok().content_type(kind).insert_header(("Cache-Control", "public, max-age=3600")).body(body))
}
