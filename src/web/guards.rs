//! The checks the route table wraps around its routes: read the session, require a member or an
//! operator, and check the CSRF token of every state-changing request. They run on what the
//! router matched (they wrap the matched resource or scope), never on the raw path.

use actix_session::SessionExt;
use actix_web::{
    Error, HttpMessage,
    body::{BoxBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    http::Method,
    middleware::Next,
    web,
};

use super::{
    AppState,
    errors::AppError,
    identity::{Identity, SESSION_TOKEN, check_csrf, identity, redirect_to_login},
};

/// What a guard answers: the route's own response, or the guard's refusal or redirect.
type Guarded = Result<ServiceResponse<BoxBody>, Error>;

/// Anyone: the session is read when there is one (the page shows who is signed in), and an
/// unsafe method needs the CSRF token.
pub async fn public(req: ServiceRequest, next: Next<impl MessageBody + 'static>) -> Guarded {
    guard(req, next, Needs::Anyone).await
}

/// A signed-in account; anyone else is sent to sign in.
pub async fn member(req: ServiceRequest, next: Next<impl MessageBody + 'static>) -> Guarded {
    guard(req, next, Needs::Account).await
}

/// A member page that reads its data with the session (`call::MemberPage`): its extractor
/// resumes the session and authenticates, so the page stays one statement. A request with no
/// session cookie at all is sent to sign in here, before the handler; such routes are GETs, which
/// carry no CSRF token.
pub async fn member_page(req: ServiceRequest, next: Next<impl MessageBody + 'static>) -> Guarded {
    if identity(req.request()).is_none() && !matches!(req.get_session().get::<String>(SESSION_TOKEN), Ok(Some(_))) {
        let response = redirect_to_login(req.request());
        return Ok(req.into_response(response).map_into_boxed_body());
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// A signed-in operator: anyone not signed in is sent to sign in, a member is refused.
pub async fn operator(req: ServiceRequest, next: Next<impl MessageBody + 'static>) -> Guarded {
    guard(req, next, Needs::Operator).await
}

/// Whom a guard lets through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Anyone,
    Account,
    Operator,
}

/// The three guards in one: who the session is (a visitor is sent to sign in where an account is
/// needed, a member refused where an operator is), then the CSRF token of an unsafe method.
async fn guard(mut req: ServiceRequest, next: Next<impl MessageBody + 'static>, needs: Needs) -> Guarded {
    match identify(&req).await {
        Err(e) => return Ok(req.error_response(e)),
        Ok(None) if needs != Needs::Anyone => {
            let response = redirect_to_login(req.request());
            return Ok(req.into_response(response).map_into_boxed_body());
        }
        Ok(Some(i)) if needs == Needs::Operator && !i.is_operator => {
            return Ok(req.error_response(AppError::Forbidden));
        }
        Ok(_) => {}
    }
    if let Err(e) = csrf(&mut req).await {
        return Ok(req.error_response(e));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// The account behind the session cookie, put in the request's extensions; a session that has
/// ended is forgotten. Only who asks: a page's own data is the page's to read (`call::MemberPage`).
async fn identify(req: &ServiceRequest) -> Result<Option<Identity>, AppError> {
    if let Some(i) = identity(req.request()) {
        return Ok(Some(i));
    }
    let session = req.get_session();
    let Ok(Some(token)) = session.get::<String>(SESSION_TOKEN) else { return Ok(None) };
    let state = req.app_data::<web::Data<AppState>>().cloned().expect("the app state is registered");
    match crate::services::auth::resume_session(&state.db, &token).await? {
        Some(a) => {
            tracing::Span::current().record("account_id", a.account_id.0);
            let who =
                Identity { account_id: a.account_id, email: a.email, is_operator: a.is_operator, verified: a.verified };
            req.extensions_mut().insert(who.clone());
            Ok(Some(who))
        }
        None => {
            session.remove(SESSION_TOKEN);
            Ok(None)
        }
    }
}

async fn csrf(req: &mut ServiceRequest) -> Result<(), AppError> {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    check_csrf(req).await
}
