//! The control endpoint: the records and faults over HTTP, for the demo page's instructions, a
//! person with curl, and the tests. Every route is a test control, answered on the loopback
//! interface only (a caller elsewhere could otherwise verify any domain it likes).
//!
//! - `GET /_dns/records`: `[{"name": "...", "txt": ["..."]}]`, in name order.
//! - `PUT /_dns/records/{name}/txt` `{"values": ["..."]}`: replaces that name's TXT set (an
//!   empty list keeps the name with no TXT); answers the record.
//! - `DELETE /_dns/records/{name}/txt`: the name answers NXDOMAIN again; 204.
//! - `GET /_dns/faults`; `PUT /_dns/faults/{name}` `{"mode": "timeout" | "servfail"}`;
//!   `DELETE /_dns/faults/{name}`: 204.

use std::{net::TcpListener, sync::Arc};

use actix_web::{
    App, HttpRequest, HttpResponse, HttpServer,
    http::StatusCode,
    middleware::from_fn,
    web::{self, Bytes, Data, Path},
};
use serde::Deserialize;
use standin_http::{ApiError, ApiResult, json_body, loopback_only, method_not_allowed, no_route};

use crate::records::{FaultMode, Records, SetError};

pub fn build(listener: TcpListener, records: Arc<Records>) -> std::io::Result<actix_web::dev::Server> {
    let data = Data::from(records);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .service(
                web::scope("/_dns")
                    .wrap(from_fn(|req, next| loopback_only("The local DNS's", req, next)))
                    .service(web::resource("/records").get(list).default_service(web::to(method_not_allowed)))
                    .service(
                        web::resource("/records/{name}/txt")
                            .put(set_txt)
                            .delete(remove_txt)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .service(web::resource("/faults").get(faults).default_service(web::to(method_not_allowed)))
                    .service(
                        web::resource("/faults/{name}")
                            .put(set_fault)
                            .delete(clear_fault)
                            .default_service(web::to(method_not_allowed)),
                    )
                    .default_service(web::to(unknown)),
            )
            .default_service(web::to(unknown))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run())
}

async fn unknown(req: HttpRequest) -> HttpResponse {
    no_route("The local DNS", &req)
}

fn refused(e: SetError) -> ApiError {
    match e {
        SetError::Refused(r) => ApiError::bad_request(r.0),
        SetError::Io(e) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("The local DNS could not keep its records: {e}."))
        }
    }
}

async fn list(records: Data<Records>) -> HttpResponse {
    HttpResponse::Ok().json(records.list())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetTxt {
    values: Vec<String>,
}

async fn set_txt(records: Data<Records>, name: Path<String>, body: Bytes) -> ApiResult<HttpResponse> {
    let asked: SetTxt = json_body(&body, r#"{"values": ["the token"]}"#)?;
    let record = records.set_txt(&name, asked.values).map_err(refused)?;
    Ok(HttpResponse::Ok().json(record))
}

async fn remove_txt(records: Data<Records>, name: Path<String>) -> ApiResult<HttpResponse> {
    records.remove_txt(&name).map_err(refused)?;
    Ok(HttpResponse::NoContent().finish())
}

async fn faults(records: Data<Records>) -> HttpResponse {
    HttpResponse::Ok().json(records.faults())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFault {
    mode: FaultMode,
}

async fn set_fault(records: Data<Records>, name: Path<String>, body: Bytes) -> ApiResult<HttpResponse> {
    let asked: SetFault = json_body(&body, r#"{"mode": "timeout"} or {"mode": "servfail"}"#)?;
    let fault = records.set_fault(&name, asked.mode).map_err(|r| ApiError::bad_request(r.0))?;
    Ok(HttpResponse::Ok().json(fault))
}

async fn clear_fault(records: Data<Records>, name: Path<String>) -> ApiResult<HttpResponse> {
    records.clear_fault(&name).map_err(|r| ApiError::bad_request(r.0))?;
    Ok(HttpResponse::NoContent().finish())
}
