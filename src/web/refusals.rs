//! A service's refusal as HTTP, in one place. Every handler sends what its service path returned
//! through here: a refused form comes back drawn again with the messages beside their fields
//! (`posted`, or `form` then `answer`), a refusal outside a form is an error page or HTMX
//! partial (`From`), and a preview shows the refusal it would meet (`preview`).
//!
//! | the service said                                   | the answer                              |
//! |----------------------------------------------------|-----------------------------------------|
//! | `Invalid` (bad input, by field)                    | 422, the form again                     |
//! | `Refused` (a conflict with things as they are now)  | 409, the form again                     |
//! | `ChangeInProgress` (55P03 on a change path)        | 409, "Another change is in progress"    |
//! | `NotFound`                                         | 404, the error page                     |
//! | `Db(LockNotAvailable)` (55P03 on any other path)   | 409, in the path's own words (`Words`)  |
//! | `Db(DeadlinePassed)`                               | 503, saying what was saved              |
//! | `Remote`, transient (no answer, 429, 5xx)          | 503, in the failure's own sentence      |
//! | `Remote` otherwise (Stripe failed)                 | 502, in the failure's own sentence      |
//! | `Db(_)` otherwise                                  | 500 with the request id                 |
//!
//! Stripe's refusals of a member's plan change are `Refused` (409) in the member's words, never
//! Stripe's raw English: a declined card ("The payment was declined … nothing was charged"), a
//! price Stripe no longer sells, a subscription that ended meanwhile, a confirmation already
//! used. A 409 rather than a 402, as every other "not with things as they are" answer is. A
//! write Stripe did not answer is the 503, saying the console cannot know yet whether Stripe
//! made the change (`services::billing::remote_write`).

use actix_web::{HttpRequest, HttpResponse, http::StatusCode};
use views::{FormState, Markup};

use super::{
    errors::AppError,
    forms::{after_post, partial},
    render,
};
use crate::{db::DbError, services::ServiceError};

/// How a form's refusals are worded, per form family.
#[derive(Clone, Copy, Debug)]
pub struct Words {
    /// What did not happen, in the sentence above bad input: "Nothing was {done}: correct the
    /// fields marked below."
    pub done: &'static str,
    /// A lock wait past its bound on a path that is not one of the spec's change paths, in the
    /// path's own words; None for the console's general ones.
    pub busy: Option<&'static str>,
}

/// A refused form: its status, and its state to draw it again with.
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub form: FormState,
}

/// A refusal as the form's state (what was sent, the field messages beside their fields, the
/// rest above); not found and database failures as the error the request ends in.
pub fn form(e: ServiceError, values: Vec<(String, String)>, words: Words) -> Result<Refused, AppError> {
    let mut form = FormState { values, ..FormState::default() };
    let status = match e {
        ServiceError::Invalid(problems) => {
            form.errors.push(format!("Nothing was {}: correct the fields marked below.", words.done));
            for (field, m) in problems {
                if field.is_empty() { form.errors.push(m) } else { form.field_errors.push((field, m)) }
            }
            StatusCode::UNPROCESSABLE_ENTITY
        }
        ServiceError::Refused(m) => {
            form.errors.push(m);
            StatusCode::CONFLICT
        }
        ServiceError::ChangeInProgress => {
            let (title, m) = AppError::ChangeInProgress.title_and_message();
            form.errors.push(format!("{title}. {m}"));
            StatusCode::CONFLICT
        }
        other => return Err(app_error(other, words.busy)),
    };
    Ok(Refused { status, form })
}

/// A posted form's answer: on success to the address it gave (`after_post`); refused, the form's
/// state (`form`) for `draw` to answer with.
pub async fn posted(
    req: &HttpRequest,
    done: Result<String, ServiceError>,
    sent: Vec<(String, String)>,
    words: Words,
    draw: impl AsyncFnOnce(Refused) -> Result<HttpResponse, AppError>,
) -> Result<HttpResponse, AppError> {
    match done {
        Ok(to) => Ok(after_post(req, &to)),
        Err(e) => draw(form(e, sent, words)?).await,
    }
}

/// A refused form's answer: the form alone for HTMX (it swaps in place), else the whole page
/// with the form filled in. Only the one asked for is drawn.
pub fn answer(
    req: &HttpRequest,
    status: StatusCode,
    title: &str,
    form: impl FnOnce() -> Markup,
    page: impl FnOnce() -> Markup,
) -> HttpResponse {
    if render::is_htmx(req) { partial(status, form()) } else { render::page(req, status, title, page()) }
}

/// `answer` where the form is drawn without the page (a button's form): the page is read only when
/// it is the answer.
pub async fn answer_reading(
    req: &HttpRequest,
    status: StatusCode,
    title: &str,
    form: impl FnOnce() -> Markup,
    page: impl AsyncFnOnce() -> Result<Markup, AppError>,
) -> Result<HttpResponse, AppError> {
    if render::is_htmx(req) { Ok(partial(status, form())) } else { Ok(render::page(req, status, title, page().await?)) }
}

/// A preview's answer, in place (200): what the act would reach, or the refusal it would meet
/// (bad input, a cap, the gate, no such ladder or tier) under `refused`; a database failure is
/// an error page.
pub fn preview(refused: &str, answer: Result<Markup, ServiceError>) -> Result<HttpResponse, AppError> {
    match answer {
        Ok(m) => Ok(partial(StatusCode::OK, m)),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e) => Ok(partial(StatusCode::OK, views::refusal(refused, &e.to_string()))),
    }
}

/// A refusal outside a form (a button), with a lock wait past its bound said in the path's own
/// `words` (as a form's `Words::busy`).
pub fn in_words(e: ServiceError, words: &'static str) -> AppError {
    app_error(e, Some(words))
}

/// A refusal outside a form (a Retry button, a form that could not be read).
impl From<ServiceError> for AppError {
    fn from(e: ServiceError) -> Self {
        app_error(e, None)
    }
}

fn app_error(e: ServiceError, busy: Option<&str>) -> AppError {
    match e {
        ServiceError::Invalid(problems) => AppError::Invalid(problems.into_iter().map(|(_, m)| m).collect()),
        ServiceError::NotFound(_) => AppError::NotFound,
        ServiceError::Refused(m) => AppError::Refused(m),
        ServiceError::ChangeInProgress => AppError::ChangeInProgress,
        ServiceError::Remote { sentence, transient: true } => AppError::Unavailable(sentence),
        ServiceError::Remote { sentence, transient: false } => AppError::Upstream(sentence),
        ServiceError::Db(DbError::LockNotAvailable) => match busy {
            Some(words) => AppError::Busy(words.to_string()),
            None => DbError::LockNotAvailable.into(),
        },
        ServiceError::Db(d) => d.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDS: Words = Words { done: "saved", busy: Some("The thing is busy.") };

    fn sent() -> Vec<(String, String)> {
        vec![("name".into(), "Gold".into())]
    }

    #[test]
    fn bad_input_is_422_with_each_message_beside_its_field() {
        let e = ServiceError::Invalid(vec![("name".into(), "Bad name.".into()), (String::new(), "Bad form.".into())]);
        let r = form(e, sent(), WORDS).unwrap();
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(r.form.errors, ["Nothing was saved: correct the fields marked below.", "Bad form."]);
        assert_eq!(r.form.field_errors, [("name".to_string(), "Bad name.".to_string())]);
        assert_eq!(r.form.value("name"), "Gold", "what was typed comes back");
    }

    #[test]
    fn a_conflict_and_another_change_are_409_and_not_found_is_the_404_page() {
        let r = form(ServiceError::Refused("Taken.".into()), sent(), WORDS).unwrap();
        assert_eq!((r.status, r.form.errors), (StatusCode::CONFLICT, vec!["Taken.".to_string()]));
        let r = form(ServiceError::ChangeInProgress, sent(), WORDS).unwrap();
        assert_eq!(r.status, StatusCode::CONFLICT);
        assert!(r.form.errors[0].starts_with("Another change is in progress. "), "{:?}", r.form.errors);
        assert!(matches!(form(ServiceError::NotFound("tier"), sent(), WORDS), Err(AppError::NotFound)));
    }

    #[test]
    fn a_lock_wait_off_the_change_paths_is_said_in_the_paths_words() {
        let busy = || ServiceError::Db(DbError::LockNotAvailable);
        assert!(matches!(form(busy(), sent(), WORDS), Err(AppError::Busy(m)) if m == "The thing is busy."));
        let general = Words { busy: None, ..WORDS };
        assert!(matches!(form(busy(), sent(), general), Err(AppError::Busy(m)) if m.contains("another request")));
        assert!(matches!(form(ServiceError::Db(DbError::DeadlinePassed), sent(), WORDS), Err(AppError::Timeout)));
    }

    fn request(htmx: bool) -> HttpRequest {
        let r = actix_web::test::TestRequest::post();
        if htmx { r.insert_header(("hx-request", "true")) } else { r }.to_http_request()
    }

    /// What was sent, as the drawn answer's body.
    async fn drawn(r: Refused) -> Result<HttpResponse, AppError> {
        Ok(HttpResponse::build(r.status).body(r.form.value("name").to_string()))
    }

    #[tokio::test]
    async fn a_posted_form_goes_on_after_success_and_is_drawn_again_with_what_was_sent_when_refused() {
        let done = posted(&request(false), Ok("/next".into()), sent(), WORDS, drawn).await.unwrap();
        assert_eq!(done.status(), StatusCode::SEE_OTHER);
        assert_eq!(done.headers().get("location").unwrap(), "/next");
        let htmx = request(true);
        let refused = posted(&htmx, Err(ServiceError::Refused("Taken.".into())), sent(), WORDS, drawn).await.unwrap();
        assert_eq!(refused.status(), StatusCode::CONFLICT);
        assert_eq!(actix_web::body::to_bytes(refused.into_body()).await.unwrap(), "Gold");
        let gone = posted(&request(false), Err(ServiceError::NotFound("tier")), sent(), WORDS, drawn).await;
        assert!(matches!(gone, Err(AppError::NotFound)));
    }

    #[tokio::test]
    async fn a_form_drawn_without_its_page_answers_htmx_alone_and_the_page_is_not_read() {
        let form = || views::refusal("Not deleted", "Still held.");
        let page = async || -> Result<Markup, AppError> { panic!("the page was read") };
        let answer = answer_reading(&request(true), StatusCode::CONFLICT, "Tiers", form, page).await.unwrap();
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        let body = actix_web::body::to_bytes(answer.into_body()).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("Still held."));
    }

    #[test]
    fn outside_a_form_each_refusal_keeps_its_status() {
        let status = |e: ServiceError| actix_web::ResponseError::status_code(&AppError::from(e));
        assert_eq!(status(ServiceError::invalid("x", "Bad.")), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status(ServiceError::Refused("No.".into())), StatusCode::CONFLICT);
        assert_eq!(status(ServiceError::ChangeInProgress), StatusCode::CONFLICT);
        assert_eq!(status(ServiceError::NotFound("act")), StatusCode::NOT_FOUND);
    }
}
