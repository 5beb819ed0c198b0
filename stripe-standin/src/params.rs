//! Reading typed parameters out of a parsed form, with Stripe's 400 answers for bad ones,
//! and the list-page helper shared by every `GET /v1/<things>`.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

/// A string parameter; `None` when absent. Non-strings (nested objects) are a 400.
pub fn string(p: &Value, name: &str) -> ApiResult<Option<String>> {
    match p.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(name, format!("Invalid string: {name}"))),
    }
}

/// A list call's string filters (`customer`, `status`, ...): an object is listed when each one
/// given equals the object's field of the same name.
pub struct FieldsEqual(Vec<(&'static str, String)>);

pub fn fields_equal(p: &Value, names: &[&'static str]) -> ApiResult<FieldsEqual> {
    let mut given = Vec::new();
    for &name in names {
        if let Some(v) = string(p, name)? {
            given.push((name, v));
        }
    }
    Ok(FieldsEqual(given))
}

impl FieldsEqual {
    pub fn keeps(&self, object: &Value) -> bool {
        self.0.iter().all(|(name, v)| object[*name] == v.as_str())
    }
}

pub fn required(p: &Value, name: &str) -> ApiResult<String> {
    match string(p, name)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ApiError::required(name)),
    }
}

/// A string parameter where an empty value means "clear" (JSON null).
pub fn nullable(p: &Value, name: &str) -> ApiResult<Option<Value>> {
    Ok(string(p, name)?.map(|s| if s.is_empty() { Value::Null } else { json!(s) }))
}

pub fn integer(p: &Value, name: &str) -> ApiResult<Option<i64>> {
    match string(p, name)? {
        None => Ok(None),
        Some(s) => s.parse::<i64>().map(Some).map_err(|_| {
            let mut e = ApiError::invalid(name, format!("Invalid integer: {s}"));
            e.code = Some("parameter_invalid_integer");
            e
        }),
    }
}

pub fn boolean(p: &Value, name: &str) -> ApiResult<Option<bool>> {
    match string(p, name)?.as_deref() {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(ApiError::invalid(name, format!("Invalid boolean: {other}"))),
    }
}

/// Apply a `metadata` parameter to existing metadata the way Stripe does: keys merge, an
/// empty value deletes a key, and `metadata=` (empty) clears everything.
pub fn apply_metadata(p: &Value, name: &str, current: &mut Value) -> ApiResult<()> {
    let Some(given) = p.get(name) else { return Ok(()) };
    if !current.is_object() {
        *current = json!({});
    }
    match given {
        Value::String(s) if s.is_empty() => *current = json!({}),
        Value::Object(map) => {
            for (k, v) in map {
                let Value::String(v) = v else {
                    return Err(ApiError::invalid(&format!("{name}[{k}]"), "Metadata values must be strings."));
                };
                if v.is_empty() {
                    current.as_object_mut().map(|m| m.remove(k));
                } else {
                    current[k] = json!(v);
                }
            }
        }
        _ => return Err(ApiError::invalid(name, "Invalid metadata: must be a hash.")),
    }
    Ok(())
}

/// Fresh metadata for a new object.
pub fn metadata(p: &Value, name: &str) -> ApiResult<Value> {
    let mut m = json!({});
    apply_metadata(p, name, &mut m)?;
    Ok(m)
}

/// An array-of-hashes parameter such as `items[0][price]`.
pub fn array<'a>(p: &'a Value, name: &str) -> ApiResult<Vec<&'a Value>> {
    match p.get(name) {
        None => Ok(vec![]),
        Some(Value::Array(a)) => Ok(a.iter().collect()),
        Some(Value::String(s)) if s.is_empty() => Ok(vec![]),
        Some(_) => Err(ApiError::invalid(name, format!("Invalid array: {name}"))),
    }
}

/// Whether `ts` passes a range filter like `created[gte]=…` (or an exact `created=…`).
pub fn range_matches(p: &Value, name: &str, ts: i64) -> ApiResult<bool> {
    match p.get(name) {
        None => Ok(true),
        Some(Value::String(s)) => {
            let exact = s.parse::<i64>().map_err(|_| ApiError::invalid(name, "Invalid timestamp"))?;
            Ok(ts == exact)
        }
        Some(Value::Object(ops)) => {
            for (op, v) in ops {
                let bound = v
                    .as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| ApiError::invalid(&format!("{name}[{op}]"), "Invalid timestamp"))?;
                let ok = match op.as_str() {
                    "gt" => ts > bound,
                    "gte" => ts >= bound,
                    "lt" => ts < bound,
                    "lte" => ts <= bound,
                    _ => return Err(ApiError::invalid(&format!("{name}[{op}]"), "Unknown range operator")),
                };
                if !ok {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Some(_) => Err(ApiError::invalid(name, "Invalid range")),
    }
}

/// One page of a list answer from `items` (already filtered, newest first), honouring
/// `limit` (default 10, 1..=100), `starting_after` and `ending_before`.
pub fn list_page(p: &Value, url: &str, items: Vec<Value>) -> ApiResult {
    let limit = integer(p, "limit")?.unwrap_or(10);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::invalid("limit", "Invalid limit: must be between 1 and 100"));
    }
    let limit = limit as usize;
    let position = |param: &str| -> ApiResult<Option<usize>> {
        match string(p, param)? {
            None => Ok(None),
            Some(id) => items
                .iter()
                .position(|o| o["id"] == id.as_str())
                .map(Some)
                .ok_or_else(|| ApiError::missing("object", &id, param)),
        }
    };
    let (page, has_more) = if let Some(i) = position("starting_after")? {
        let rest = &items[i + 1..];
        (rest.iter().take(limit).cloned().collect::<Vec<_>>(), rest.len() > limit)
    } else if let Some(i) = position("ending_before")? {
        let before = &items[..i];
        let start = before.len().saturating_sub(limit);
        (before[start..].to_vec(), start > 0)
    } else {
        (items.iter().take(limit).cloned().collect(), items.len() > limit)
    };
    Ok(json!({ "object": "list", "data": page, "has_more": has_more, "url": url }))
}

/// Replace ids with full objects along `expand[]` paths (`customer`, `data.subscription`,
/// `latest_invoice.payments`…), using `lookup` to find objects by id.
pub fn expand(value: &mut Value, paths: &[String], lookup: &dyn Fn(&str) -> Option<Value>) {
    for path in paths {
        let segs: Vec<&str> = path.split('.').collect();
        expand_path(value, &segs, lookup);
    }
}

fn expand_path(value: &mut Value, segs: &[&str], lookup: &dyn Fn(&str) -> Option<Value>) {
    let Some((first, rest)) = segs.split_first() else { return };
    // Lists: `data.x` applies to every element.
    if *first == "data"
        && let Some(items) = value.get_mut("data").and_then(Value::as_array_mut)
    {
        for item in items {
            expand_path(item, rest, lookup);
        }
        return;
    }
    let Some(field) = value.as_object_mut().and_then(|m: &mut Map<String, Value>| m.get_mut(*first)) else {
        return;
    };
    if let Some(id) = field.as_str()
        && let Some(obj) = lookup(id)
    {
        *field = obj;
    }
    if !rest.is_empty() {
        expand_path(field, rest, lookup);
    }
}
