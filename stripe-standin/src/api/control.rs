//! The stand-in's own control API under `/_standin/` (not Stripe's): delivery mode, injected
//! API faults, the webhook delivery log, and re-sending an event.

use serde_json::{Value, json};

use super::found;
use crate::error::{ApiError, ApiResult};
use crate::params;
use crate::state::{Fault, Inner};
use crate::webhooks::{DeliveryMode, Dispatcher};

/// `POST /_standin/delivery` `mode=in_order|duplicate|reverse`.
pub fn set_delivery(st: &mut Inner, p: &Value) -> ApiResult {
    let mode = params::required(p, "mode")?;
    st.delivery_mode = DeliveryMode::parse(&mode)
        .ok_or_else(|| ApiError::invalid("mode", "mode must be one of in_order, duplicate, reverse"))?;
    Ok(json!({ "object": "standin.delivery", "mode": mode }))
}

/// `POST /_standin/faults` `path_prefix=…&status=500&times=2` or `…&delay_ms=3000&times=1`;
/// optionally `method=POST` (only that method) and `skip=1` (let the first matching request by).
pub fn add_fault(st: &mut Inner, p: &Value) -> ApiResult {
    let path_prefix = params::required(p, "path_prefix")?;
    let status = params::integer(p, "status")?;
    if let Some(s) = status
        && !(400..=599).contains(&s)
    {
        return Err(ApiError::invalid("status", "status must be between 400 and 599"));
    }
    let delay_ms = params::integer(p, "delay_ms")?;
    if status.is_none() && delay_ms.is_none() {
        return Err(ApiError::required("status"));
    }
    let times = params::integer(p, "times")?.unwrap_or(1).clamp(0, i64::from(u32::MAX));
    let method = params::string(p, "method")?.map(|m| m.to_ascii_uppercase());
    let skip = params::integer(p, "skip")?.unwrap_or(0).clamp(0, i64::from(u32::MAX));
    st.faults.retain(|f| f.times > 0);
    st.faults.push(Fault {
        path_prefix: path_prefix.clone(),
        method,
        skip: skip as u32,
        status: status.map(|s| s as u16),
        delay_ms: delay_ms.map(|d| d.max(0) as u64),
        times: times as u32,
    });
    Ok(
        json!({ "object": "standin.fault", "path_prefix": path_prefix, "status": status, "delay_ms": delay_ms, "times": times }),
    )
}

/// `DELETE /_standin/faults`: drop every pending fault.
pub fn clear_faults(st: &mut Inner) -> ApiResult {
    st.faults.clear();
    Ok(json!({ "object": "standin.faults", "deleted": true }))
}

/// `GET /_standin/deliveries`: every delivery, oldest first.
pub fn deliveries(hooks: &Dispatcher) -> ApiResult {
    let log = serde_json::to_value(&*hooks.log.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or_default();
    Ok(json!({ "object": "list", "data": log, "has_more": false, "url": "/_standin/deliveries" }))
}

/// `POST /_standin/events/{id}/resend`: deliver an event again to every matching endpoint.
pub fn resend(st: &mut Inner, hooks: &Dispatcher, id: &str) -> ApiResult {
    let event = found(&st.events, id, "event")?.clone();
    hooks.send(st, &event);
    Ok(event)
}
