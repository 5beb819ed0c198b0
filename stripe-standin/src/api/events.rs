//! `/v1/events`: newest first, filterable by `type` (with `*` wildcards) and `created`.

use serde_json::Value;

use super::found;
use crate::error::ApiResult;
use crate::params;
use crate::state::Inner;

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.events, id, "event")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let mut types: Vec<String> =
        params::array(p, "types")?.into_iter().filter_map(|t| t.as_str().map(str::to_string)).collect();
    if let Some(t) = params::string(p, "type")? {
        types.push(t);
    }
    let mut out = vec![];
    for ev in st.events.newest_first() {
        let kind = ev["type"].as_str().unwrap_or_default();
        if !types.is_empty() && !types.iter().any(|t| type_matches(t, kind)) {
            continue;
        }
        if !params::range_matches(p, "created", ev["created"].as_i64().unwrap_or(0))? {
            continue;
        }
        out.push(ev.clone());
    }
    params::list_page(p, "/v1/events", out)
}

/// `invoice.*` matches every invoice event, as Stripe's `type` filter allows.
fn type_matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}
