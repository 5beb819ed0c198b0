//! Sign-up, email verification and password reset (issue 38; docs/accounts.md). The mailed
//! links carry no session: their GET shows a page with one button, and only the POST acts.

use actix_session::Session;
use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use serde::Deserialize;
use validator::Validate;
use views::paths;

use crate::{
    config::SignupMode,
    services::{
        ServiceError,
        auth::{Email, NewPassword},
        organizations::OrgName,
        signup::{self, Links, Resent, SignUp, SignedUp, UsedLink},
        tokens::Token,
    },
    store::account_tokens::TokenPurpose,
    web::{
        AppState,
        call::{Call, MemberCall},
        errors::AppError,
        forms::{Form, after_post},
        identity::{Member, SESSION_TOKEN, csrf_token, identity},
        input::{self, Field, read},
        pages::auth::{client_address, establish},
        render,
    },
};

/// The links the account mail holds, at the console's public address (never the request's
/// Host header: `AppState::link_base`).
fn links(state: &AppState) -> Links {
    let base = state.link_base();
    Links {
        key: state.tokens.clone(),
        host: state.mail_host(),
        verify: format!("{base}{}?token=", paths::ACCOUNT_VERIFY),
        reset: format!("{base}{}?token=", paths::PASSWORD_RESET),
        sign_in: format!("{base}{}", paths::LOGIN),
        forgot: format!("{base}{}", paths::PASSWORD_FORGOT),
    }
}

fn card(req: &HttpRequest, status: StatusCode, title: &str, body: views::Markup) -> HttpResponse {
    render::bare(req, status, title, body)
}

/// The messages of a refused form, in its fields' order.
fn messages(e: ServiceError) -> Result<Vec<String>, AppError> {
    match e {
        ServiceError::Invalid(p) => Ok(p.into_iter().map(|(_, m)| m).collect()),
        other => Err(other.into()),
    }
}

// Sign up ---------------------------------------------------------------------------------------------

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct SignupForm {
    #[validate(custom(function = read))]
    email: Field<Email>,
    #[validate(custom(function = read))]
    password: Field<NewPassword>,
    #[validate(custom(function = read))]
    organization: Field<OrgName>,
}

impl TryFrom<&SignupForm> for SignUp {
    type Error = ServiceError;

    fn try_from(f: &SignupForm) -> Result<SignUp, ServiceError> {
        let p = input::problems(f);
        let ((email, password), organization) =
            p.or(f.email.ok().cloned().zip(f.password.ok().cloned()).zip(f.organization.ok().cloned()))?;
        Ok(SignUp { email, password, organization })
    }
}

/// What the sign-up page shows before its form: None when the form is open.
async fn signup_closed_view(state: &AppState) -> Result<Option<(StatusCode, views::SignupView<'static>)>, AppError> {
    match state.config.signup_mode() {
        SignupMode::Closed => Err(AppError::NotFound),
        SignupMode::Invite => Ok(Some((StatusCode::FORBIDDEN, views::SignupView::ByInvitation))),
        SignupMode::Open if !state.mail_on => Ok(Some((StatusCode::SERVICE_UNAVAILABLE, views::SignupView::MailOff))),
        SignupMode::Open => match signup::signup_type(&state.db).await? {
            None => Ok(Some((StatusCode::SERVICE_UNAVAILABLE, views::SignupView::NotReady))),
            Some(_) => Ok(None),
        },
    }
}

#[tracing::instrument(name = "Page: sign up", skip_all)]
pub async fn signup_form(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    if identity(&req).is_some() {
        return Ok(after_post(&req, paths::HOME));
    }
    if let Some((_, v)) = signup_closed_view(&state).await? {
        // The page itself is there; what it says is the answer.
        return Ok(card(&req, StatusCode::OK, "Sign up", views::signup(&v)));
    }
    let csrf = csrf_token(&req);
    let v = views::SignupView::Form { email: "", organization: "", errors: &[], csrf_token: &csrf };
    Ok(card(&req, StatusCode::OK, "Sign up", views::signup(&v)))
}

#[tracing::instrument(name = "Page: post sign-up", skip_all)]
pub async fn signup_post(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Form<SignupForm>,
) -> Result<HttpResponse, AppError> {
    if let Some((status, v)) = signup_closed_view(&state).await? {
        return Ok(card(&req, status, "Sign up", views::signup(&v)));
    }
    let command = match SignUp::try_from(&*form) {
        Ok(c) => c,
        Err(e) => {
            let errors = messages(e)?;
            let csrf = csrf_token(&req);
            let v = views::SignupView::Form {
                email: form.email.raw(),
                organization: form.organization.raw(),
                errors: &errors,
                csrf_token: &csrf,
            };
            return Ok(card(&req, StatusCode::UNPROCESSABLE_ENTITY, "Sign up", views::signup(&v)));
        }
    };
    let address = client_address(&req, &state.config.trusted_proxies);
    match signup::sign_up(&state.db, &links(&state), &address, &command).await {
        // One answer whatever happened: a new account, an existing one (mailed a notice), or
        // past the limits (nothing sent). Nobody is signed in.
        Ok(SignedUp::Created { .. } | SignedUp::Existing | SignedUp::Limited) => {
            let v = views::SignupView::CheckEmail { email: command.email.as_str() };
            Ok(card(&req, StatusCode::OK, "Check your email", views::signup(&v)))
        }
        Err(ServiceError::Refused(_)) => {
            Ok(card(&req, StatusCode::SERVICE_UNAVAILABLE, "Sign up", views::signup(&views::SignupView::NotReady)))
        }
        Err(e) => Err(e.into()),
    }
}

// Verify an email ---------------------------------------------------------------------------------------

/// A link's query: its token (a bad one is refused in words by the page, not by serde).
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TokenQuery {
    token: Field<Token>,
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct TokenForm {
    #[validate(custom(function = read))]
    token: Field<Token>,
}

/// A link that does not work, as its page says it: 404 for no such link (or a broken one),
/// 410 for one used or expired, 409 for one the account's state refuses.
fn refused_link(req: &HttpRequest, heading: &str, e: ServiceError) -> Result<HttpResponse, AppError> {
    let (status, message) = match e {
        ServiceError::NotFound(_) => (
            StatusCode::NOT_FOUND,
            "This link is not one we sent, or it was changed on the way. Open it from the mail again, or ask for a new one."
                .to_string(),
        ),
        ServiceError::Invalid(p) => {
            (StatusCode::BAD_REQUEST, p.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(" "))
        }
        ServiceError::Refused(m) if m.contains("used already") || m.contains("expired") => (StatusCode::GONE, m),
        ServiceError::Refused(m) => (StatusCode::CONFLICT, m),
        other => return Err(other.into()),
    };
    Ok(card(req, status, heading, views::link_refused(heading, &message)))
}

fn parsed(token: &Field<Token>) -> Result<Token, ServiceError> {
    token.ok().cloned().ok_or_else(|| {
        ServiceError::invalid("token", Token::parse(token.raw()).err().unwrap_or_else(|| "No link.".into()))
    })
}

#[tracing::instrument(name = "Page: verification link", skip_all)]
pub async fn verify_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<TokenQuery>,
) -> Result<HttpResponse, AppError> {
    let heading = "Verify your email address";
    let glanced = match parsed(&q.token) {
        Ok(t) => {
            signup::glance(&state.db, &t, &[TokenPurpose::VerifyEmail, TokenPurpose::ChangeEmail]).await.map(|g| (t, g))
        }
        Err(e) => Err(e),
    };
    let (token, link) = match glanced {
        Ok(x) => x,
        Err(e) => return refused_link(&req, heading, e),
    };
    let lead = match link.purpose {
        TokenPurpose::ChangeEmail => format!("Make {} your account's email address.", link.email),
        _ => format!("Confirm that {} is your address.", link.email),
    };
    let csrf = csrf_token(&req);
    let v = views::LinkView {
        heading,
        lead: &lead,
        action: paths::ACCOUNT_VERIFY,
        token: token.as_str(),
        button: "Verify my email address",
        csrf_token: &csrf,
        new_password: false,
        error: None,
    };
    Ok(card(&req, StatusCode::OK, heading, views::link_page(&v)))
}

/// After a verification: home when this browser is signed in, else the sign-in page with a note.
#[tracing::instrument(name = "Page: use a verification link", skip_all)]
pub async fn verify(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Form<TokenForm>,
) -> Result<HttpResponse, AppError> {
    let heading = "Verify your email address";
    let used = match parsed(&form.token) {
        Ok(t) => signup::use_email_token(&state.db, &links(&state), &t).await,
        Err(e) => Err(e),
    };
    match used {
        Ok(UsedLink::Verified { .. } | UsedLink::EmailChanged { .. }) => Ok(if identity(&req).is_some() {
            after_post(&req, paths::HOME)
        } else {
            after_post(&req, &format!("{}?verified=1", paths::LOGIN))
        }),
        Err(e) => refused_link(&req, heading, e),
    }
}

#[tracing::instrument(name = "Page: send the verification link again", skip_all, fields(account_id = %who.account_id))]
pub async fn resend(Call { who: Member(who), req, state }: MemberCall) -> Result<HttpResponse, AppError> {
    if !state.mail_on {
        return Err(AppError::Refused(
            "This console sends no mail yet, so no link can be sent. Ask the console's operator.".into(),
        ));
    }
    let address = client_address(&req, &state.config.trusted_proxies);
    let said = match signup::resend_verification(&state.db, &links(&state), &who.session_account(), &address).await? {
        // The same words past the limits: a limit tells nothing.
        Resent::Sent => {
            format!("We sent a new link to {}. It works for 24 hours; earlier links no longer do.", who.email)
        }
        Resent::AlreadyVerified => "Your email address is verified already.".to_string(),
    };
    Ok(render::ok(&req, "Verification link", views::resent(&said)))
}

// Forgot and reset a password -------------------------------------------------------------------------

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ForgotForm {
    #[validate(custom(function = read))]
    email: Field<Email>,
}

#[tracing::instrument(name = "Page: forgot password", skip_all)]
pub async fn forgot_form(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let csrf = csrf_token(&req);
    let v = views::ForgotView { email: "", error: None, csrf_token: &csrf, sent: false, mail_off: !state.mail_on };
    card(&req, StatusCode::OK, "Forgot your password?", views::forgot(&v))
}

#[tracing::instrument(name = "Page: post forgot password", skip_all)]
pub async fn forgot(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: Form<ForgotForm>,
) -> Result<HttpResponse, AppError> {
    let csrf = csrf_token(&req);
    if !state.mail_on {
        let v = views::ForgotView { email: "", error: None, csrf_token: &csrf, sent: false, mail_off: true };
        return Ok(card(&req, StatusCode::SERVICE_UNAVAILABLE, "Forgot your password?", views::forgot(&v)));
    }
    let email = match input::problems(&*form).or(form.email.ok().cloned()) {
        Ok(e) => e,
        Err(e) => {
            let errors = messages(e)?.join(" ");
            let v = views::ForgotView {
                email: form.email.raw(),
                error: Some(&errors),
                csrf_token: &csrf,
                sent: false,
                mail_off: false,
            };
            return Ok(card(&req, StatusCode::UNPROCESSABLE_ENTITY, "Forgot your password?", views::forgot(&v)));
        }
    };
    let address = client_address(&req, &state.config.trusted_proxies);
    signup::forgot_password(&state.db, &links(&state), &email, &address).await?;
    let v = views::ForgotView { email: email.as_str(), error: None, csrf_token: &csrf, sent: true, mail_off: false };
    Ok(card(&req, StatusCode::OK, "Forgot your password?", views::forgot(&v)))
}

#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ResetForm {
    #[validate(custom(function = read))]
    token: Field<Token>,
    #[validate(custom(function = read))]
    password: Field<NewPassword>,
}

fn reset_card(req: &HttpRequest, status: StatusCode, token: &str, email: &str, error: Option<&str>) -> HttpResponse {
    let csrf = csrf_token(req);
    let lead =
        format!("Choose a new password for {email}. Every session of the account ends, and this browser is signed in.");
    let v = views::LinkView {
        heading: "Set a new password",
        lead: &lead,
        action: paths::PASSWORD_RESET,
        token,
        button: "Set the password",
        csrf_token: &csrf,
        new_password: true,
        error,
    };
    card(req, status, "Set a new password", views::link_page(&v))
}

#[tracing::instrument(name = "Page: password reset link", skip_all)]
pub async fn reset_page(
    req: HttpRequest,
    state: web::Data<AppState>,
    q: web::Query<TokenQuery>,
) -> Result<HttpResponse, AppError> {
    let glanced = match parsed(&q.token) {
        Ok(t) => signup::glance(&state.db, &t, &[TokenPurpose::ResetPassword]).await.map(|g| (t, g)),
        Err(e) => Err(e),
    };
    match glanced {
        Ok((token, link)) => Ok(reset_card(&req, StatusCode::OK, token.as_str(), &link.email, None)),
        Err(e) => refused_link(&req, "Set a new password", e),
    }
}

#[tracing::instrument(name = "Page: reset a password", skip_all)]
pub async fn reset(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    form: Form<ResetForm>,
) -> Result<HttpResponse, AppError> {
    let token = match parsed(&form.token) {
        Ok(t) => t,
        Err(e) => return refused_link(&req, "Set a new password", e),
    };
    let Some(password) = form.password.ok().cloned() else {
        // The link still works: the form again, with what was wrong with the password.
        let link = match signup::glance(&state.db, &token, &[TokenPurpose::ResetPassword]).await {
            Ok(l) => l,
            Err(e) => return refused_link(&req, "Set a new password", e),
        };
        let why = NewPassword::parse(form.password.raw()).err().unwrap_or_default();
        return Ok(reset_card(&req, StatusCode::UNPROCESSABLE_ENTITY, token.as_str(), &link.email, Some(&why)));
    };
    let address = client_address(&req, &state.config.trusted_proxies);
    let previous = session.get::<String>(SESSION_TOKEN).ok().flatten();
    match signup::reset_password(&state.db, &links(&state), &token, &password, &address, previous.as_deref()).await {
        Ok(r) => {
            establish(&session, &r.session_token)?;
            Ok(after_post(&req, paths::HOME))
        }
        Err(e) => refused_link(&req, "Set a new password", e),
    }
}
