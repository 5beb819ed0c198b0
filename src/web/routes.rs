//! The route table: every route the console answers, with who may call it, in one list that
//! both the router and the tests read. Access is enforced by where a route is registered, so it
//! cannot disagree with routing: operator routes live in the one `/operator` scope, wrapped by
//! the operator check; member routes each carry the member check; public routes the session and
//! CSRF; open routes (probes, static files) nothing. Whatever the router matches into the
//! operator scope, however the path was spelled, passes the operator check first.

use actix_web::{guard, http::Method, middleware::from_fn, web};

use views::paths;

use super::{guards, pages};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, with no session looked up and no CSRF check: probes and static files.
    Open,
    /// Anyone; the session is read when there is one, and a POST needs the CSRF token.
    Public,
    /// A signed-in account (operators are members too); a POST needs the CSRF token.
    Member,
    /// A member's page (a GET) whose handler reads the page with the session in one statement
    /// (`call::MemberPage`): the extractor authenticates, as the member guard would.
    MemberPage,
    /// A signed-in operator; a POST needs the CSRF token. Only under `/operator`.
    Operator,
}

impl Access {
    /// Whether the route needs a signed-in account of any kind (a member route or page).
    pub fn is_member(self) -> bool {
        matches!(self, Access::Member | Access::MemberPage)
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub access: Access,
    /// "GET" or "POST".
    pub method: &'static str,
    /// The path pattern as actix reads it (`{id}` for a segment): a constant of `views::paths`,
    /// which the pages build their links from.
    pub path: &'static str,
}

/// The scope every operator route lives in.
pub const OPERATOR_SCOPE: &str = paths::OPERATOR;

macro_rules! route_table {
    ($($access:ident $method:ident $path:ident => $handler:path;)*) => {
        /// Every route, for the tests that walk them.
        pub static ROUTES: &[Route] = &[$(Route { access: Access::$access, method: stringify!($method), path: paths::$path }),*];

        /// Register every route where its access says.
        pub fn configure(cfg: &mut web::ServiceConfig) {
            let mut operator = web::scope(OPERATOR_SCOPE).wrap(from_fn(guards::operator));
            $( route_table!(@one $access $method $path $handler, cfg, operator); )*
            cfg.service(operator);
        }
    };
    (@one Open $method:ident $path:ident $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource(paths::$path).guard(answers(Method::$method)).to($handler));
    };
    (@one Public $method:ident $path:ident $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource(paths::$path).guard(answers(Method::$method)).wrap(from_fn(guards::public)).to($handler));
    };
    (@one Member $method:ident $path:ident $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource(paths::$path).guard(answers(Method::$method)).wrap(from_fn(guards::member)).to($handler));
    };
    (@one MemberPage $method:ident $path:ident $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource(paths::$path).guard(answers(Method::$method)).wrap(from_fn(guards::member_page)).to($handler));
    };
    (@one Operator $method:ident $path:ident $handler:path, $cfg:ident, $op:ident) => {
        $op = $op.service(web::resource(operator_relative(paths::$path)).guard(answers(Method::$method)).to($handler));
    };
}

/// The methods a route answers: its own, and HEAD beside GET (HTTP asks every server to answer
/// HEAD wherever it answers GET; monitors and load balancers probe with it). actix sends a HEAD's
/// answer without its body.
fn answers(method: Method) -> guard::AnyGuard {
    let head = method == Method::GET;
    let any = guard::Any(guard::Method(method));
    if head { any.or(guard::Method(Method::HEAD)) } else { any }
}

/// An operator route's path inside the scope ("" for the scope's own page).
fn operator_relative(path: &'static str) -> &'static str {
    match path.strip_prefix(OPERATOR_SCOPE) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => panic!("operator route {path} is outside {OPERATOR_SCOPE}"),
    }
}

route_table! {
    Open GET HEALTHZ => pages::health::healthz;
    Open GET READYZ => pages::health::readyz;
    // Behind a token or loopback only: the handler checks before it reads anything.
    Open GET METRICS => pages::metrics::metrics;
    Open GET STATIC_FILE => super::static_file;
    // Stripe's events: no session and no CSRF; the handler checks the signature before anything.
    Open POST WEBHOOKS_STRIPE => pages::webhooks::stripe;
    // The farm's callbacks: the same, with the farm's signature.
    Open POST FARM_CALLBACKS => pages::webhooks::farm;
    // The farm's question about a member's edit session: the same signature, checked first.
    Open POST FARM_EDIT_SESSIONS_CONFIRM => pages::webhooks::confirm_edit_session;

    Public GET LOGIN => pages::auth::login_form;
    Public POST LOGIN => pages::auth::login;
    Public POST LOGOUT => pages::auth::logout;
    // Issue 38, sign-up, verification and password reset: the links carry no session (a GET
    // shows the link's page, only its POST acts).
    Public GET SIGNUP => pages::signup::signup_form;
    Public POST SIGNUP => pages::signup::signup_post;
    Public GET ACCOUNT_VERIFY => pages::signup::verify_page;
    Public POST ACCOUNT_VERIFY => pages::signup::verify;
    Member POST ACCOUNT_VERIFY_RESEND => pages::signup::resend;
    Public GET PASSWORD_FORGOT => pages::signup::forgot_form;
    Public POST PASSWORD_FORGOT => pages::signup::forgot;
    Public GET PASSWORD_RESET => pages::signup::reset_page;
    Public POST PASSWORD_RESET => pages::signup::reset;
    Operator POST ORG_TYPE_SIGNUP => pages::topology::choose_signup_type;

    MemberPage GET HOME => pages::home::home;
    MemberPage GET SITES => pages::sites::sites_page;
    MemberPage GET SITES_LIVE => pages::sites::sites_live;
    Member POST SITES => pages::sites::create;
    Member POST SITES_SWAP => pages::sites::swap;
    Member POST SITE_STATUS => pages::sites::change_status;
    Member POST SITE_DELETE => pages::sites::delete;
    Member POST SITE_KEEP_ACTIVE => pages::sites::keep_active;
    Member POST SITE_REQUEST_WITHDRAW => pages::sites::withdraw;
    Member GET SITE_OPEN => pages::sites::open;
    Member POST SITES_DOMAINS => pages::sites::domains;
    Member POST SITES_DOMAINS_REMOVE => pages::sites::remove_domain;
    Member POST SITES_DOMAINS_CHECK => pages::sites::check_domain;
    Member POST SITES_DOMAINS_NOTICE_DISMISS => pages::sites::dismiss_notice;
    MemberPage GET BILLING => pages::billing::billing_page;
    Member POST BILLING_CHECKOUT => pages::billing::checkout;
    Member GET BILLING_RETURN => pages::billing::checkout_return;
    Member POST BILLING_SWITCH => pages::billing::switch;
    Member POST BILLING_SWITCH_UNDO => pages::billing::undo_switch;
    Member POST BILLING_CANCEL => pages::billing::cancel;
    Member POST BILLING_RESUME => pages::billing::resume;

    // Issue 38, the account page and the operators' accounts.
    Member GET ACCOUNT => pages::account::page;
    Member POST ACCOUNT_PASSWORD => pages::account::change_password;
    Member POST ACCOUNT_EMAIL => pages::account::change_email;
    Member POST ACCOUNT_SESSION_END => pages::account::end_session;
    Member POST ACCOUNT_SIGN_OUT_EVERYWHERE => pages::account::sign_out_everywhere;
    Member POST ACCOUNT_DELETE => pages::account::delete;
    Operator GET OPERATOR_ACCOUNTS => pages::operator_accounts::list;
    Operator GET OPERATOR_ACCOUNT => pages::operator_accounts::detail;
    Operator POST OPERATOR_ACCOUNT_DISABLE => pages::operator_accounts::disable;
    Operator POST OPERATOR_ACCOUNT_ENABLE => pages::operator_accounts::enable;
    Operator POST OPERATOR_ACCOUNT_GRANT_OPERATOR => pages::operator_accounts::grant_operator;
    Operator POST OPERATOR_ACCOUNT_REVOKE_OPERATOR => pages::operator_accounts::revoke_operator;

    Operator GET OPERATOR => pages::operator::overview;
    Operator GET CATALOG => pages::catalog::catalog;
    Operator POST CATALOG_KEYS => pages::catalog::create_key;
    Operator POST CATALOG_KEY => pages::catalog::rename_key;
    Operator POST CATALOG_SETS => pages::catalog::create_set;
    Operator POST CATALOG_PRODUCTS => pages::catalog::create_product;
    Operator GET CATALOG_SET => pages::catalog::set_page;
    Operator POST CATALOG_SET_RULES => pages::catalog::save_rules;
    Operator GET CATALOG_PRODUCT => pages::catalog::product_page;
    Operator POST CATALOG_PRODUCT => pages::catalog::save_product;
    Operator POST CATALOG_PRODUCT_SEATS => pages::catalog::save_seats;
    Operator POST CATALOG_PRODUCT_PRICES => pages::billing::set_price;
    Operator POST CATALOG_PRODUCT_SYNC => pages::billing::sync_product;
    Operator POST CATALOG_PRICE_ARCHIVE => pages::billing::archive_price;
    Operator GET OPERATOR_BILLING => pages::billing::operator_billing;
    Operator GET OPERATOR_FARM => pages::farm::operator_farm;
    Operator POST OPERATOR_FARM_RUN => pages::farm::run_now;
    Operator GET CONNECTIONS => pages::connections::list;
    Operator POST CONNECTIONS => pages::connections::create;
    Operator GET CONNECTION => pages::connections::detail;
    Operator POST CONNECTION => pages::connections::edit;
    Operator POST CONNECTION_ROTATE => pages::connections::rotate;
    Operator POST CONNECTION_RETRY => pages::connections::retry;
    Operator POST CONNECTION_TEST => pages::connections::test;
    Operator POST CONNECTION_CHECK => pages::connections::check;
    Operator POST CONNECTION_DELETE => pages::connections::delete;
    Operator GET TOPOLOGY => pages::topology::topology;
    Operator GET TIERS_PREVIEW => pages::topology::preview;
    Operator POST TIERS => pages::topology::add_tier;
    Operator POST TIER_DELETE => pages::topology::delete_tier;
    Operator POST LADDER_ORDER => pages::topology::ladder_order;
    Operator POST ORG_TYPE_DEFAULT => pages::topology::change_default;
    Operator GET ORG_TYPE_DEFAULT_PREVIEW => pages::topology::default_preview;
    Operator GET TIER_REMOVE_PREVIEW => pages::topology::remove_preview;
    Operator POST TIER_REMOVE => pages::topology::remove_tier;
    Operator GET TIER_ORDER_PREVIEW => pages::topology::tier_order_preview;
    Operator POST TIER_ORDER => pages::topology::tier_order;
    Operator GET PLAN_ACTS => pages::plan_acts::list;
    Operator GET PLAN_ACT => pages::plan_acts::detail;
    Operator GET PLAN_ACT_PROGRESS => pages::plan_acts::progress;
    Operator POST PLAN_ACT_RETRY => pages::plan_acts::retry;
    Operator GET ORGANIZATIONS => pages::organizations::list;
    Operator POST ORGANIZATIONS => pages::organizations::create;
    Operator GET ORGANIZATION => pages::organizations::detail;
    Operator GET RULE_CHANGES => pages::rule_changes::list;
    Operator GET RULE_CHANGE => pages::rule_changes::detail;
    Operator GET RULE_CHANGE_PROGRESS => pages::rule_changes::progress;
    Operator POST RULE_CHANGE_RETRY => pages::rule_changes::retry;
    Operator GET GRANTS => pages::grants::list;
    Operator GET GRANTS_NEW => pages::grants::new_form;
    Operator POST GRANTS => pages::grants::issue;
    Operator GET GRANT => pages::grants::detail;
    Operator POST GRANT_REVOKE => pages::grants::revoke;
    Operator POST GRANT_MANAGE => pages::grants::manage;

    // Issue 38, members: an organization's members and invitations, the invitation's link (no
    // session: its GET shows, its POST accepts), and an operator's invitation.
    Member GET ORGANIZATION_MEMBERS => pages::members::members;
    Member POST ORGANIZATION_MEMBER_ROLE => pages::members::change_role;
    Member POST ORGANIZATION_MEMBER_REMOVE => pages::members::remove;
    Member POST ORGANIZATION_LEAVE => pages::members::leave;
    Member POST ORGANIZATION_INVITATIONS => pages::members::invite;
    Member POST ORGANIZATION_INVITATION_RESEND => pages::members::resend;
    Member POST ORGANIZATION_INVITATION_REVOKE => pages::members::revoke;
    Public GET INVITATION_ACCEPT => pages::invitations::accept_form;
    Public POST INVITATION_ACCEPT => pages::invitations::accept;
    Operator POST OPERATOR_ORGANIZATION_INVITATIONS => pages::members::operator_invite;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_routes_and_only_they_live_under_the_operator_scope() {
        for r in ROUTES {
            let under = r.path == OPERATOR_SCOPE || r.path.starts_with("/operator/");
            assert_eq!(under, r.access == Access::Operator, "{} {}", r.method, r.path);
        }
    }

    #[test]
    fn every_path_the_pages_link_to_is_routed_and_every_route_is_such_a_path() {
        let routed: std::collections::HashSet<&str> = ROUTES.iter().map(|r| r.path).collect();
        let defined: std::collections::HashSet<&str> = paths::ALL.iter().copied().collect();
        assert_eq!(routed, defined);
    }

    #[test]
    fn no_route_is_listed_twice() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.method, r.path)), "{} {} twice", r.method, r.path);
        }
    }
}
