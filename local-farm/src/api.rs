//! The farm API (`/api/...`, bearer token checked by the gate in `server`). See docs/farm-api.md.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use crate::farm::Created;
use crate::server::AppState;
use crate::state::{Site, Status, format_time};
use standin_http::{ApiError, ApiResult, json_body};

/// `PUT /api/sites/{domain}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSite {
    owner: String,
    /// How the wiki names its owner; optional.
    #[serde(default)]
    owner_name: Option<String>,
    #[serde(deserialize_with = "known_status")]
    status: Option<Status>,
}

/// `PUT /api/sites/{domain}/status`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetStatus {
    #[serde(deserialize_with = "known_status")]
    status: Option<Status>,
}

/// A status as a body names it: None for a text that is no status, which the route refuses in
/// its own words (a missing or non-text status is the body's JSON error, as any other field's).
fn known_status<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Status>, D::Error> {
    Ok(Status::parse(&String::deserialize(d)?))
}

#[derive(Serialize)]
struct SiteList {
    listed_at: String,
    sites: Vec<Site>,
    /// With `limit`: the domain to ask `after` for the next page, or null at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<Option<String>>,
}

/// `GET /api/sites[?after=<domain>&limit=<n>]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// The most a page may hold.
const MAX_PAGE: usize = 10_000;

/// `GET /api/sites`: the sites by domain (all of them, or a page of `limit` after `after`), with
/// the farm's time taken before reading them.
pub async fn list(app: web::Data<AppState>, q: web::Query<ListQuery>) -> ApiResult<HttpResponse> {
    let after = q.after.as_deref().unwrap_or("");
    let Some(limit) = q.limit else {
        if !after.is_empty() {
            return Err(ApiError::bad_request("`after` goes with `limit`."));
        }
        let (listed_at, sites) = app.farm.list();
        return Ok(HttpResponse::Ok().json(SiteList { listed_at: format_time(&listed_at), sites, next: None }));
    };
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!("`limit` must be 1 to {MAX_PAGE}.")));
    }
    let (listed_at, sites, more) = app.farm.page(after, limit);
    let next = more.then(|| sites.last().map(|s| s.domain.clone())).flatten();
    Ok(HttpResponse::Ok().json(SiteList { listed_at: format_time(&listed_at), sites, next: Some(next) }))
}

/// `GET /api/sites/{domain}`.
pub async fn show(app: web::Data<AppState>, domain: web::Path<String>) -> ApiResult<HttpResponse> {
    Ok(HttpResponse::Ok().json(app.farm.get(&domain)?))
}

/// `PUT /api/sites/{domain}`: 201 when created, 200 when the same owner already holds it.
pub async fn create(app: web::Data<AppState>, domain: web::Path<String>, body: web::Bytes) -> ApiResult<HttpResponse> {
    let domain = app.farm.parse_domain(&domain)?;
    let asked: CreateSite = json_body(&body, r#"{"owner": "...", "owner_name": "Acme", "status": "active"}"#)?;
    if asked.owner.trim().is_empty() {
        return Err(ApiError::bad_request("The owner must not be empty."));
    }
    let owner_name = asked.owner_name.as_deref().map(str::trim);
    if owner_name.is_some_and(|n| n.is_empty() || n.chars().count() > 200 || n.chars().any(char::is_control)) {
        return Err(ApiError::bad_request(
            "The owner's name must be 1 to 200 characters with no control characters (or left out).",
        ));
    }
    let status = match asked.status {
        Some(s @ (Status::Active | Status::Parked)) => s,
        _ => return Err(ApiError::bad_request("A new site's status must be \"active\" or \"parked\".")),
    };
    let answer = match app.farm.create(&domain, &asked.owner, owner_name, status)? {
        Created::New(site) => HttpResponse::Created().json(site),
        Created::Existing(site) => HttpResponse::Ok().json(site),
    };
    Ok(answer)
}

/// `PUT /api/sites/{domain}/status`.
pub async fn set_status(
    app: web::Data<AppState>,
    domain: web::Path<String>,
    body: web::Bytes,
) -> ApiResult<HttpResponse> {
    let asked: SetStatus = json_body(&body, r#"{"status": "parked"}"#)?;
    let Some(status) = asked.status else {
        return Err(ApiError::bad_request("The status must be \"active\", \"parked\" or \"archived\"."));
    };
    Ok(HttpResponse::Ok().json(app.farm.set_status(&domain, status)?))
}

/// `DELETE /api/sites/{domain}`: 204 whether or not it existed.
pub async fn delete(app: web::Data<AppState>, domain: web::Path<String>) -> ApiResult<HttpResponse> {
    app.farm.delete(&domain)?;
    Ok(HttpResponse::NoContent().finish())
}
