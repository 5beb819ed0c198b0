//! A handler's call: who asks, the request and the app's state, taken together. A handler that
//! acts for a person takes an `OperatorCall` or a `MemberCall` rather than the three apart; a
//! member page that reads its data with the session takes a `MemberPage<D>`.

use std::future::{Ready, ready};

use actix_session::SessionExt;
use actix_web::{FromRequest, HttpMessage, HttpRequest, dev::Payload, error::InternalError, web};
use futures_util::future::LocalBoxFuture;

use super::{
    AppState,
    errors::AppError,
    identity::{Identity, Member, Operator, SESSION_TOKEN, redirect_to_login},
};
use crate::store::accounts::SessionAccount;

/// Who asks (`Operator` or `Member`), the request, and the app's state.
pub struct Call<Who> {
    pub who: Who,
    pub req: HttpRequest,
    pub state: web::Data<AppState>,
}

/// An operator's call.
pub type OperatorCall = Call<Operator>;

/// A member's call (operators are members too).
pub type MemberCall = Call<Member>;

impl<Who> FromRequest for Call<Who>
where
    Who: FromRequest<Error = AppError, Future = Ready<Result<Who, AppError>>>,
{
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        ready(Self::read(req, payload))
    }
}

impl<Who> Call<Who>
where
    Who: FromRequest<Error = AppError, Future = Ready<Result<Who, AppError>>>,
{
    /// Who asks first, by its own extractor, so its refusal comes before anything else is read
    /// (the handler's form, after this, is not touched); then the request and the state.
    fn read(req: &HttpRequest, payload: &mut Payload) -> Result<Self, actix_web::Error> {
        let who = Who::from_request(req, payload).into_inner()?;
        let state = web::Data::<AppState>::from_request(req, payload).into_inner()?;
        Ok(Call { who, req: req.clone(), state })
    }
}

/// A member page's document, read in the statement that resumes the session (the pages every
/// member loads stay one round trip). Each page says how, beside its handler.
pub trait PageRead: Sized + 'static {
    /// The session's account and the page's document; None for a session that has ended.
    fn resume(state: &AppState, token: &str) -> impl Future<Output = Result<Option<(SessionAccount, Self)>, AppError>>;
}

/// A member's GET of a page whose read rides in the session's statement: who asks, the request,
/// the app's state, and the page's document. The route's guard (`guards::member_page`) leaves the
/// session to this extractor, so it authenticates: a visitor, or a session that has ended, is
/// sent to sign in as the member guard sends them.
pub struct MemberPage<D> {
    pub who: Identity,
    pub req: HttpRequest,
    pub state: web::Data<AppState>,
    pub doc: D,
}

impl<D: PageRead> FromRequest for MemberPage<D> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let state = web::Data::<AppState>::extract(&req).await?;
            let session = req.get_session();
            let token = session.get::<String>(SESSION_TOKEN).ok().flatten();
            let resumed = match &token {
                Some(token) => D::resume(&state, token).await?,
                None => None,
            };
            let Some((a, doc)) = resumed else {
                if token.is_some() {
                    session.remove(SESSION_TOKEN);
                }
                return Err(InternalError::from_response("sign in", redirect_to_login(&req)).into());
            };
            tracing::Span::current().record("account_id", a.account_id.0);
            let who =
                Identity { account_id: a.account_id, email: a.email, is_operator: a.is_operator, verified: a.verified };
            // The page's layout reads who is signed in from here, as on every other page.
            req.extensions_mut().insert(who.clone());
            Ok(MemberPage { who, req, state, doc })
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::{HttpMessage, http::StatusCode, test::TestRequest};

    use super::*;
    use crate::{ids::AccountId, web::identity::Identity};

    /// A POST by a member, an operator, or (None) a visitor, with no app state registered.
    fn asked_by(is_operator: Option<bool>) -> HttpRequest {
        let req = TestRequest::post().to_http_request();
        if let Some(is_operator) = is_operator {
            let who = Identity { account_id: AccountId(1), email: "a@example.org".into(), is_operator, verified: true };
            req.extensions_mut().insert(who);
        }
        req
    }

    fn refusal<Who>(req: HttpRequest) -> actix_web::Error
    where
        Who: FromRequest<Error = AppError, Future = Ready<Result<Who, AppError>>>,
    {
        match Call::<Who>::read(&req, &mut Payload::None) {
            Ok(_) => panic!("the call was let through"),
            Err(e) => e,
        }
    }

    #[test]
    fn an_operator_call_refuses_a_member_and_a_visitor_as_the_operator_extractor_does() {
        let member = refusal::<Operator>(asked_by(Some(false)));
        assert!(matches!(member.as_error::<AppError>(), Some(AppError::Forbidden)), "{member:?}");
        let visitor = refusal::<Operator>(asked_by(None));
        assert!(matches!(visitor.as_error::<AppError>(), Some(AppError::SignInRequired)), "{visitor:?}");
        let visitor = refusal::<Member>(asked_by(None));
        assert!(matches!(visitor.as_error::<AppError>(), Some(AppError::SignInRequired)), "{visitor:?}");
    }

    #[test]
    fn who_asks_is_checked_before_the_app_state_is_taken() {
        // No state is registered: a refused visitor never gets that far, one let through does.
        let missing_state = |e: actix_web::Error| e.as_response_error().status_code();
        assert_eq!(missing_state(refusal::<Operator>(asked_by(Some(true)))), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(missing_state(refusal::<Member>(asked_by(Some(false)))), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(missing_state(refusal::<Member>(asked_by(None))), StatusCode::UNAUTHORIZED);
    }
}
