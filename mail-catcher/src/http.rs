//! The catcher's web side: a page for a person and JSON for a test.

use std::{net::TcpListener, sync::Arc};

use actix_web::{
    App, HttpRequest, HttpResponse, HttpServer,
    web::{self, Data, Path, Query},
};
use serde::Deserialize;
use standin_http::{ApiError, method_not_allowed, no_route};

use crate::store::{Mail, Store};

pub fn build(listener: TcpListener, store: Arc<Store>) -> std::io::Result<actix_web::dev::Server> {
    let data = Data::from(store);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .service(web::resource("/").get(page).default_service(web::to(method_not_allowed)))
            .service(web::resource("/messages/{id}").get(message_page).default_service(web::to(method_not_allowed)))
            .service(
                web::resource("/messages/{id}/html").get(message_html).default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/api/messages").get(list).delete(clear).default_service(web::to(method_not_allowed)),
            )
            .service(web::resource("/api/messages/{id}").get(one).default_service(web::to(method_not_allowed)))
            .default_service(web::to(|req: HttpRequest| async move { no_route("The mail catcher", &req) }))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run())
}

#[derive(Deserialize)]
struct ListQuery {
    to: Option<String>,
}

async fn list(store: Data<Store>, q: Query<ListQuery>) -> HttpResponse {
    HttpResponse::Ok().json(store.list(q.to.as_deref()))
}

fn found(store: &Store, id: &str) -> Result<Mail, ApiError> {
    id.parse().ok().and_then(|id| store.get(id)).ok_or_else(|| ApiError::not_found(format!("No message {id} is kept.")))
}

async fn one(store: Data<Store>, id: Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(found(&store, &id)?))
}

/// Forgetting is a test control: loopback callers only (reading is for anyone who reaches the
/// port, as the page is).
async fn clear(store: Data<Store>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if !req.peer_addr().is_some_and(|a| a.ip().is_loopback()) {
        return Err(ApiError::new(
            actix_web::http::StatusCode::FORBIDDEN,
            "The mail catcher's test controls answer only on the loopback interface.",
        ));
    }
    store.clear();
    Ok(HttpResponse::NoContent().finish())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn html_page(title: &str, body: &str) -> HttpResponse {
    HttpResponse::Ok().content_type("text/html; charset=utf-8").insert_header(("Cache-Control", "no-store")).body(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}\
         td,th{{text-align:left;padding:.3rem .6rem}}pre{{white-space:pre-wrap;background:#f6f6f6;padding:1rem}}</style>\
         </head><body>{body}</body></html>",
        escape(title)
    ))
}

async fn page(store: Data<Store>) -> HttpResponse {
    let mut rows = String::new();
    for m in store.list(None).iter().rev() {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td><a href=\"/messages/{}\">{}</a></td></tr>",
            m.received_at.format("%Y-%m-%d %H:%M:%S"),
            escape(&m.to.join(", ")),
            m.id,
            escape(if m.subject.is_empty() { "(no subject)" } else { &m.subject })
        ));
    }
    let body = if rows.is_empty() {
        "<h1>Mail</h1><p>No mail yet. Messages sent to this catcher's SMTP port show here.</p>".to_string()
    } else {
        format!("<h1>Mail</h1><table><tr><th>Received</th><th>To</th><th>Subject</th></tr>{rows}</table>")
    };
    html_page("Mail", &body)
}

async fn message_page(store: Data<Store>, id: Path<String>) -> Result<HttpResponse, ApiError> {
    let m = found(&store, &id)?;
    let html = if m.html.is_some() {
        format!("<p><a href=\"/messages/{}/html\">Open the HTML part</a></p>", m.id)
    } else {
        String::new()
    };
    let body = format!(
        "<p><a href=\"/\">All mail</a></p><h1>{}</h1><p>From {} to {}</p>{html}<pre>{}</pre>",
        escape(&m.subject),
        escape(&m.from),
        escape(&m.to.join(", ")),
        escape(m.text.as_deref().unwrap_or("(no text part)")),
    );
    Ok(html_page(&m.subject, &body))
}

/// The message's own HTML, with no script and nothing fetched: it is someone else's markup.
async fn message_html(store: Data<Store>, id: Path<String>) -> Result<HttpResponse, ApiError> {
    let m = found(&store, &id)?;
    let html = m.html.ok_or_else(|| ApiError::not_found(format!("Message {} has no HTML part.", m.id)))?;
    Ok(HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Content-Security-Policy", "sandbox; default-src 'none'; style-src 'unsafe-inline'"))
        .body(html))
}
