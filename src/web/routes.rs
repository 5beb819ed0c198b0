//! The route table: every route the console answers, with who may call it, in one list that
//! both the router and the tests read. Access is enforced by where a route is registered, so it
//! cannot disagree with routing: operator routes live in the one `/operator` scope, wrapped by
//! the operator check; member routes each carry the member check; public routes the session and
//! CSRF; open routes (probes, static files) nothing. Whatever the router matches into the
//! operator scope, however the path was spelled, passes the operator check first.

use actix_web::{guard, http::Method, middleware::from_fn, web};

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
    /// A signed-in operator; a POST needs the CSRF token. Only under `/operator`.
    Operator,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub access: Access,
    /// "GET" or "POST".
    pub method: &'static str,
    /// The path pattern as actix reads it (`{id}` for a segment).
    pub path: &'static str,
}

/// The scope every operator route lives in.
pub const OPERATOR_SCOPE: &str = "/operator";

macro_rules! route_table {
    ($($access:ident $method:ident $path:literal => $handler:path;)*) => {
        /// Every route, for the tests that walk them.
        pub static ROUTES: &[Route] = &[$(Route { access: Access::$access, method: stringify!($method), path: $path }),*];

        /// Register every route where its access says.
        pub fn configure(cfg: &mut web::ServiceConfig) {
            let mut operator = web::scope(OPERATOR_SCOPE).wrap(from_fn(guards::operator));
            $( route_table!(@one $access $method $path $handler, cfg, operator); )*
            cfg.service(operator);
        }
    };
    (@one Open $method:ident $path:literal $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource($path).guard(guard::Method(Method::$method)).to($handler));
    };
    (@one Public $method:ident $path:literal $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource($path).guard(guard::Method(Method::$method)).wrap(from_fn(guards::public)).to($handler));
    };
    (@one Member $method:ident $path:literal $handler:path, $cfg:ident, $op:ident) => {
        $cfg.service(web::resource($path).guard(guard::Method(Method::$method)).wrap(from_fn(guards::member)).to($handler));
    };
    (@one Operator $method:ident $path:literal $handler:path, $cfg:ident, $op:ident) => {
        $op = $op.service(web::resource(operator_relative($path)).guard(guard::Method(Method::$method)).to($handler));
    };
}

/// An operator route's path inside the scope ("" for the scope's own page).
fn operator_relative(path: &'static str) -> &'static str {
    match path.strip_prefix(OPERATOR_SCOPE) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => panic!("operator route {path} is outside {OPERATOR_SCOPE}"),
    }
}

route_table! {
    Open GET "/healthz" => pages::health::healthz;
    Open GET "/readyz" => pages::health::readyz;
    Open GET "/static/{name}" => super::static_file;

    Public GET "/login" => pages::auth::login_form;
    Public POST "/login" => pages::auth::login;
    Public POST "/logout" => pages::auth::logout;

    Member GET "/" => pages::home::home;

    Operator GET "/operator" => pages::operator::overview;
    Operator GET "/operator/catalog" => pages::catalog::catalog;
    Operator POST "/operator/catalog/keys" => pages::catalog::create_key;
    Operator POST "/operator/catalog/sets" => pages::catalog::create_set;
    Operator POST "/operator/catalog/products" => pages::catalog::create_product;
    Operator GET "/operator/catalog/sets/{id}" => pages::catalog::set_page;
    Operator POST "/operator/catalog/sets/{id}/rules" => pages::catalog::save_rules;
    Operator GET "/operator/catalog/products/{id}" => pages::catalog::product_page;
    Operator POST "/operator/catalog/products/{id}" => pages::catalog::save_product;
    Operator GET "/operator/topology" => pages::topology::topology;
    Operator GET "/operator/topology/ladders/{id}/tiers/preview" => pages::topology::preview;
    Operator POST "/operator/topology/ladders/{id}/tiers" => pages::topology::add_tier;
    Operator POST "/operator/topology/ladders/{id}/tiers/{rank}/delete" => pages::topology::delete_tier;
    Operator POST "/operator/topology/ladder-order" => pages::topology::ladder_order;
    Operator POST "/operator/topology/org-types/{id}/default" => pages::topology::change_default;
    Operator GET "/operator/topology/org-types/{id}/default/preview" => pages::topology::default_preview;
    Operator GET "/operator/topology/ladders/{id}/tiers/{rank}/remove/preview" => pages::topology::remove_preview;
    Operator POST "/operator/topology/ladders/{id}/tiers/{rank}/remove" => pages::topology::remove_tier;
    Operator GET "/operator/topology/ladders/{id}/tier-order/preview" => pages::topology::tier_order_preview;
    Operator POST "/operator/topology/ladders/{id}/tier-order" => pages::topology::tier_order;
    Operator GET "/operator/plan-acts" => pages::plan_acts::list;
    Operator GET "/operator/plan-acts/{id}" => pages::plan_acts::detail;
    Operator GET "/operator/plan-acts/{id}/progress" => pages::plan_acts::progress;
    Operator POST "/operator/plan-acts/{id}/retry" => pages::plan_acts::retry;
    Operator GET "/operator/organizations" => pages::organizations::list;
    Operator POST "/operator/organizations" => pages::organizations::create;
    Operator GET "/operator/organizations/{id}" => pages::organizations::detail;
    Operator GET "/operator/rule-changes" => pages::rule_changes::list;
    Operator GET "/operator/rule-changes/{id}" => pages::rule_changes::detail;
    Operator GET "/operator/rule-changes/{id}/progress" => pages::rule_changes::progress;
    Operator POST "/operator/rule-changes/{id}/retry" => pages::rule_changes::retry;
    Operator GET "/operator/grants" => pages::grants::list;
    Operator GET "/operator/grants/new" => pages::grants::new_form;
    Operator POST "/operator/grants" => pages::grants::issue;
    Operator GET "/operator/grants/{id}" => pages::grants::detail;
    Operator POST "/operator/grants/{id}/revoke" => pages::grants::revoke;
    Operator POST "/operator/grants/{id}/manage" => pages::grants::manage;
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
    fn no_route_is_listed_twice() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.method, r.path)), "{} {} twice", r.method, r.path);
        }
    }
}
