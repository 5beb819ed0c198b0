//! Recording events: every state change appends an `event` object (a full snapshot of the
//! object, plus `previous_attributes` on updates) and queues it for webhook delivery at the end
//! of the current act.

use serde_json::{Map, Value, json};

use crate::API_VERSION;
use crate::clock::real_now;
use crate::ids::new_id;
use crate::state::Inner;
use crate::status::EndpointStatus;

impl Inner {
    /// Record an event of `kind` about `object`; `previous` is the object before an update.
    pub fn emit(&mut self, kind: &str, object: &Value, previous: Option<&Value>) {
        self.event_seq += 1;
        let mut data = json!({ "object": object });
        if let Some(old) = previous {
            data["previous_attributes"] = previous_attributes(old, object);
        }
        let (request_id, idempotency_key) = match &self.current_request {
            Some((id, key)) => (json!(id), json!(key)),
            None => (Value::Null, Value::Null),
        };
        let pending = self.endpoints.oldest_first().filter(|e| endpoint_wants(e, kind)).count();
        let event = json!({
            "id": new_id("evt"),
            "object": "event",
            "api_version": API_VERSION,
            "created": real_now(),
            "data": data,
            "livemode": false,
            "pending_webhooks": pending,
            "request": { "id": request_id, "idempotency_key": idempotency_key },
            "type": kind,
        });
        self.events.insert(event.clone());
        self.batch.push(event);
    }
}

/// Whether a webhook endpoint subscribed to events of `kind`.
pub fn endpoint_wants(endpoint: &Value, kind: &str) -> bool {
    EndpointStatus::of(endpoint) == Some(EndpointStatus::Enabled)
        && endpoint["enabled_events"].as_array().is_some_and(|events| events.iter().any(|e| e == "*" || e == kind))
}

/// The top-level fields that changed, with their old values (`null` for fields that were added).
pub fn previous_attributes(old: &Value, new: &Value) -> Value {
    let mut prev = Map::new();
    if let (Some(old), Some(new)) = (old.as_object(), new.as_object()) {
        for (k, v) in old {
            if new.get(k) != Some(v) {
                prev.insert(k.clone(), v.clone());
            }
        }
        for k in new.keys() {
            if !old.contains_key(k) {
                prev.insert(k.clone(), Value::Null);
            }
        }
    }
    Value::Object(prev)
}
