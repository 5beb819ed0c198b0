//! `/v1/webhook_endpoints`: registering where events are delivered. Creating one starts its
//! delivery task; the signing secret is shown only in the create answer, as in Stripe.

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

pub fn delete(st: &mut Inner, hooks: &Dispatcher, id: &str) -> ApiResult {
    found(&st.endpoints, id, "webhook_endpoint")?;
    st.endpoints.remove(id);
    hooks.remove_endpoint(id);
    Ok(json!({ "id": id, "object": "webhook_endpoint", "deleted": true }))
}
