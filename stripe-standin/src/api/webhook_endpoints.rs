//! `/v1/webhook_endpoints`: registering where events are delivered. Creating one starts its
//! delivery task; the signing secret is shown only in the create answer, as in Stripe (and kept
//! beside the endpoint, so a restarted stand-in signs with it again).

use serde_json::{Value, json};

use super::found;
use crate::API_VERSION;
use crate::clock::real_now;
use crate::error::{ApiError, ApiResult};
use crate::ids::{new_id, random_string};
use crate::params;
use crate::state::Inner;
use crate::status::EndpointStatus;
use crate::webhooks::Dispatcher;

pub fn create(st: &mut Inner, hooks: &Dispatcher, p: &Value) -> ApiResult {
    let url = params::required(p, "url")?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ApiError::invalid("url", format!("Invalid URL: {url}")));
    }
    let events: Vec<String> =
        params::array(p, "enabled_events")?.into_iter().filter_map(|e| e.as_str().map(str::to_string)).collect();
    if events.is_empty() {
        return Err(ApiError::required("enabled_events"));
    }
    let id = new_id("we");
    let secret = format!("whsec_{}", random_string(32));
    let endpoint = json!({
        "id": id,
        "object": "webhook_endpoint",
        "api_version": params::string(p, "api_version")?.unwrap_or_else(|| API_VERSION.to_string()),
        "application": null,
        "created": real_now(),
        "description": params::string(p, "description")?,
        "enabled_events": events,
        "livemode": false,
        "metadata": params::metadata(p, "metadata")?,
        "status": EndpointStatus::Enabled,
        "url": url,
    });
    st.endpoints.insert(endpoint.clone());
    st.endpoint_secrets.insert(id.clone(), secret.clone());
    hooks.add_endpoint(&id, &url, &secret);
    let mut answer = endpoint;
    answer["secret"] = json!(secret);
    Ok(answer)
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.endpoints, id, "webhook_endpoint")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let items = st.endpoints.newest_first().cloned().collect();
    params::list_page(p, "/v1/webhook_endpoints", items)
}

/// `POST /v1/webhook_endpoints/{id}`: `url`, `enabled_events`, `description`, `metadata`,
/// `disabled`. A new URL is delivered to from now on, signed with the same secret.
pub fn update(st: &mut Inner, hooks: &Dispatcher, id: &str, p: &Value) -> ApiResult {
    let mut endpoint = found(&st.endpoints, id, "webhook_endpoint")?.clone();
    if let Some(url) = params::string(p, "url")? {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ApiError::invalid("url", format!("Invalid URL: {url}")));
        }
        endpoint["url"] = json!(url);
    }
    if p.get("enabled_events").is_some() {
        let events: Vec<String> =
            params::array(p, "enabled_events")?.into_iter().filter_map(|e| e.as_str().map(str::to_string)).collect();
        if events.is_empty() {
            return Err(ApiError::required("enabled_events"));
        }
        endpoint["enabled_events"] = json!(events);
    }
    if let Some(description) = params::string(p, "description")? {
        endpoint["description"] = json!(description);
    }
    params::apply_metadata(p, "metadata", &mut endpoint["metadata"])?;
    if let Some(disabled) = params::string(p, "disabled")? {
        let status = if disabled == "true" { EndpointStatus::Disabled } else { EndpointStatus::Enabled };
        endpoint["status"] = json!(status);
    }
    st.endpoints.insert(endpoint.clone());
    let (url, secret) = (endpoint["url"].as_str().unwrap_or_default(), st.endpoint_secrets.get(id));
    if let Some(secret) = secret {
        hooks.remove_endpoint(id);
        hooks.add_endpoint(id, url, secret);
    }
    Ok(endpoint)
}

pub fn delete(st: &mut Inner, hooks: &Dispatcher, id: &str) -> ApiResult {
    found(&st.endpoints, id, "webhook_endpoint")?;
    st.endpoints.remove(id);
    st.endpoint_secrets.remove(id);
    hooks.remove_endpoint(id);
    Ok(json!({ "id": id, "object": "webhook_endpoint", "deleted": true }))
}
