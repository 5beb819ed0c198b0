//! Stripe's bracket-notation form encoding (`a[b][0][c]=v`, `list[]=x`), parsed into a nested
//! `serde_json::Value` so handlers can read parameters the way Stripe documents them.
//!
//! Rules, as Stripe applies them:
//! - `key[sub]=v` nests objects; `key[]=v` appends to an array; `key[0][f]=v` indexes an array
//!   (indices need not be contiguous, order follows the index).
//! - Every leaf is a string; an empty value (`pause_collection=`) stays `""`, which handlers read
//!   as "clear this field".
//! - Keys and values are percent-decoded (`+` is a space) before brackets are read, so clients
//!   that encode the brackets (`items%5B0%5D%5Bprice%5D`) work too.

use serde_json::{Map, Value};

/// Why a body could not be parsed; turned into a 400 by the caller.
#[derive(Debug, PartialEq)]
pub struct FormError(pub String);

/// Parse an urlencoded body or query string into a JSON object.
pub fn parse(input: &str) -> Result<Value, FormError> {
    let mut root = Value::Object(Map::new());
    for pair in input.split('&').filter(|p| !p.is_empty()) {
        let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(raw_key)?;
        let value = decode(raw_value)?;
        let path = split_key(&key)?;
        insert(&mut root, &path, value, &key)?;
    }
    Ok(finish(root))
}

/// One step of a key path: a named field, an explicit index, or `[]` (append).
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Name(String),
    Append,
}

fn split_key(key: &str) -> Result<Vec<Seg>, FormError> {
    let bad = || FormError(format!("Invalid parameter name: {key}"));
    let (head, mut rest) = match key.find('[') {
        Some(i) => (&key[..i], &key[i..]),
        None => (key, ""),
    };
    if head.is_empty() {
        return Err(bad());
    }
    let mut path = vec![Seg::Name(head.to_string())];
    while !rest.is_empty() {
        if !rest.starts_with('[') {
            return Err(bad());
        }
        let close = rest.find(']').ok_or_else(bad)?;
        let inner = &rest[1..close];
        path.push(if inner.is_empty() { Seg::Append } else { Seg::Name(inner.to_string()) });
        rest = &rest[close + 1..];
    }
    Ok(path)
}

/// Arrays are built as objects keyed by index (explicit) or by a running counter (`[]`), and
/// turned into real arrays in `finish`, which lets `a[1]` arrive before `a[0]`.
fn insert(node: &mut Value, path: &[Seg], value: String, key: &str) -> Result<(), FormError> {
    let conflict = || FormError(format!("Conflicting values for parameter {key}"));
    let Value::Object(map) = node else { return Err(conflict()) };
    let name = match &path[0] {
        Seg::Name(n) => n.clone(),
        // `[]` on an object: next free slot, marked so `finish` knows it is a list.
        Seg::Append => format!("\u{0}{:010}", map.len()),
    };
    if path.len() == 1 {
        if map.contains_key(&name) && matches!(path[0], Seg::Name(_)) {
            // Stripe takes the last value for a repeated scalar key.
            if map.get(&name).is_some_and(|v| !v.is_string()) {
                return Err(conflict());
            }
        }
        map.insert(name, Value::String(value));
        return Ok(());
    }
    let child = map.entry(name).or_insert_with(|| Value::Object(Map::new()));
    if child.is_string() {
        return Err(conflict());
    }
    insert(child, &path[1..], value, key)
}

/// Turn objects whose keys are all indices (or append slots) into arrays, recursively.
fn finish(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let is_list = !map.is_empty() && map.keys().all(|k| k.starts_with('\u{0}') || k.parse::<usize>().is_ok());
            if is_list {
                let mut entries: Vec<(u64, Value)> = map
                    .into_iter()
                    .map(|(k, v)| (k.trim_start_matches('\u{0}').parse::<u64>().unwrap_or(0), finish(v)))
                    .collect();
                entries.sort_by_key(|(i, _)| *i);
                Value::Array(entries.into_iter().map(|(_, v)| v).collect())
            } else {
                Value::Object(map.into_iter().map(|(k, v)| (k, finish(v))).collect())
            }
        }
        other => other,
    }
}

/// Percent-decoding with `+` as space; invalid escapes or UTF-8 are errors, not panics.
fn decode(s: &str) -> Result<String, FormError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| FormError(format!("Invalid percent-encoding in {s}")))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| FormError("Parameters must be valid UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_objects_indexed_arrays_appends_and_empty_values_parse() {
        let v = parse(
            "line_items[1][price]=price_b&line_items[0][price]=price_a&line_items[0][quantity]=2\
             &metadata[organization_id]=7&expand[]=subscription&expand[]=customer\
             &pause_collection=&name=Ada+Lovelace&items%5B0%5D%5Bid%5D=si_1",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({
                "line_items": [{"price": "price_a", "quantity": "2"}, {"price": "price_b"}],
                "metadata": {"organization_id": "7"},
                "expand": ["subscription", "customer"],
                "pause_collection": "",
                "name": "Ada Lovelace",
                "items": [{"id": "si_1"}],
            })
        );
    }

    #[test]
    fn malformed_keys_and_conflicts_are_errors_not_panics() {
        assert!(parse("a[b=1").is_err());
        assert!(parse("[x]=1").is_err());
        assert!(parse("a=1&a[b]=2").is_err());
        assert!(parse("a=%zz").is_err());
        assert_eq!(parse("").unwrap(), json!({}));
    }
}
