//! JSON Schema for the "prevent" step (docs/behaviour.md §9.2 step 1): `schemars` 1.x output transformed for
//! OpenAI strict structured outputs, and the `response_format` bodies that carry it.
//!
//! Strict-mode transform, applied to every subschema:
//! - objects with `properties` (or `type: "object"` and no schema-valued
//!   `additionalProperties`) get `additionalProperties: false` and list every property as
//!   required — optional fields stay optional through their `null`-able type, as strict mode wants;
//! - `oneOf` becomes `anyOf` (strict mode has no `oneOf`);
//! - `$ref` loses its sibling keywords; `default`, `$schema` and formats strict mode does not know
//!   (schemars' `uint32`, `double`, …) are removed;
//! - `$defs` are kept (recursive types need them) and `$ref`s still point into them.
//!
//! Not handled (the provider will reject such a schema; use `json` mode or another type): maps
//! (`HashMap<String, T>` → schema-valued `additionalProperties`) and non-object roots.

use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{json, Map, Value};

/// Formats OpenAI strict mode accepts; other `format` values are dropped.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// The strict-mode JSON Schema of `T`.
///
/// ```
/// #[derive(schemars::JsonSchema, serde::Deserialize)]
/// struct Answer { city: String, population: Option<u64> }
/// let s = polygateway::structured::strict_schema::<Answer>();
/// assert_eq!(s["additionalProperties"], false);
/// assert_eq!(s["required"], serde_json::json!(["city", "population"]));
/// ```
pub fn strict_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut value {
        root.remove("$schema");
    }
    strictify(&mut value);
    value
}

/// `{"type":"json_schema","json_schema":{"name":…,"strict":true,"schema":…}}` for `T`.
/// `name` is sanitized to `[A-Za-z0-9_-]{1,64}`.
///
/// ```
/// use polygateway::structured::response_format_for;
/// #[derive(schemars::JsonSchema)]
/// struct Answer {
///     city: String,
/// }
/// let format = response_format_for::<Answer>("city answer!");
/// assert_eq!(format["type"], "json_schema");
/// assert_eq!(format["json_schema"]["name"], "city_answer_"); // sanitized
/// assert_eq!(format["json_schema"]["strict"], true);
/// assert_eq!(format["json_schema"]["schema"]["required"], serde_json::json!(["city"]));
/// ```
pub fn response_format_for<T: JsonSchema>(name: &str) -> Value {
    json_schema_format(&sanitize_name(name), &strict_schema::<T>())
}

/// `{"type":"json_schema","json_schema":{"name":…,"strict":true,"schema":…}}`: the strict
/// `response_format` body of [`response_format_for`] and of an attempt in
/// [`StructuredMode::JsonSchema`](super::StructuredMode::JsonSchema).
pub(crate) fn json_schema_format(name: &str, schema: &Value) -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": name,
            "strict": true,
            "schema": schema,
        }
    })
}

/// `{"type":"json_object"}` (JSON mode without a schema; OpenAI requires the word "JSON" in the
/// messages for it).
///
/// ```
/// use polygateway::structured::json_object_format;
/// let body = serde_json::json!({
///     "messages": [{"role": "user", "content": "Reply in JSON"}],
///     "response_format": json_object_format(),
/// });
/// assert_eq!(body["response_format"]["type"], "json_object");
/// ```
pub fn json_object_format() -> Value {
    json!({"type": "json_object"})
}

/// A schema name for `T` usable in `response_format` (`schemars`' name, sanitized).
///
/// ```
/// use polygateway::structured::schema_name;
/// #[derive(schemars::JsonSchema)]
/// struct Invoice {
///     total: u64,
/// }
/// assert_eq!(schema_name::<Invoice>(), "Invoice");
/// assert_eq!(schema_name::<Vec<Invoice>>(), "Array_of_Invoice");
/// ```
pub fn schema_name<T: JsonSchema>() -> String {
    sanitize_name(&T::schema_name())
}

pub(crate) fn sanitize_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "response".to_owned()
    } else {
        cleaned
    }
}

/// Keywords whose value is one subschema.
const SCHEMA_KEYS: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
];
/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAY_KEYS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
const SCHEMA_MAP_KEYS: &[&str] = &[
    "properties",
    "$defs",
    "definitions",
    "patternProperties",
    "dependentSchemas",
];

pub(crate) fn strictify(schema: &mut Value) {
    let Value::Object(obj) = schema else {
        return;
    };
    if obj.contains_key("$ref") {
        obj.retain(|k, _| k == "$ref");
        return;
    }
    obj.remove("default");
    if let Some(Value::String(f)) = obj.get("format") {
        if !STRICT_FORMATS.contains(&f.as_str()) {
            obj.remove("format");
        }
    }
    if let Some(one_of) = obj.remove("oneOf") {
        match obj.get_mut("anyOf") {
            Some(Value::Array(any)) => {
                if let Value::Array(more) = one_of {
                    any.extend(more);
                }
            }
            _ => {
                obj.insert("anyOf".into(), one_of);
            }
        }
    }
    close_object(obj);
    for key in SCHEMA_KEYS {
        if let Some(sub) = obj.get_mut(*key) {
            strictify(sub);
        }
    }
    for key in SCHEMA_ARRAY_KEYS {
        if let Some(Value::Array(subs)) = obj.get_mut(*key) {
            subs.iter_mut().for_each(strictify);
        }
    }
    for key in SCHEMA_MAP_KEYS {
        if let Some(Value::Object(subs)) = obj.get_mut(*key) {
            subs.values_mut().for_each(strictify);
        }
    }
}

fn is_object_type(obj: &Map<String, Value>) -> bool {
    match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    }
}

fn close_object(obj: &mut Map<String, Value>) {
    let has_props = obj.contains_key("properties");
    if !has_props && !is_object_type(obj) {
        return;
    }
    // A schema-valued additionalProperties is a map: leave it (strict mode cannot express it).
    if matches!(obj.get("additionalProperties"), Some(Value::Object(_))) {
        return;
    }
    obj.insert("additionalProperties".into(), Value::Bool(false));
    let names: Vec<Value> = match obj.get("properties") {
        Some(Value::Object(props)) => props.keys().cloned().map(Value::String).collect(),
        _ => Vec::new(),
    };
    if has_props {
        obj.insert("required".into(), Value::Array(names));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// A tree node (recursive: needs `$defs`).
    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Node {
        /// Label.
        label: String,
        children: Vec<Node>,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    enum Shape {
        Circle { r: f64 },
        Square(u32),
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct Doc {
        /// The root.
        root: Node,
        #[serde(default)]
        count: u32,
        shape: Shape,
        note: Option<String>,
    }

    /// Every object schema in `v` (recursively), with its JSON pointer.
    fn objects<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a Map<String, Value>)>) {
        match v {
            Value::Object(m) => {
                if m.contains_key("properties") {
                    out.push((at.clone(), m));
                }
                for (k, sub) in m {
                    objects(sub, format!("{at}/{k}"), out);
                }
            }
            Value::Array(items) => {
                for (i, sub) in items.iter().enumerate() {
                    objects(sub, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    fn walk_keys(v: &Value, f: &mut impl FnMut(&Map<String, Value>)) {
        match v {
            Value::Object(m) => {
                f(m);
                m.values().for_each(|s| walk_keys(s, f));
            }
            Value::Array(items) => items.iter().for_each(|s| walk_keys(s, f)),
            _ => {}
        }
    }

    #[test]
    fn every_object_is_closed_and_fully_required() {
        let s = strict_schema::<Doc>();
        let mut found = Vec::new();
        objects(&s, String::new(), &mut found);
        assert!(found.len() >= 3, "{s:#}");
        for (at, obj) in found {
            assert_eq!(obj["additionalProperties"], false, "at {at}");
            let props: Vec<&String> = obj["properties"].as_object().unwrap().keys().collect();
            let required: Vec<&str> = obj["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(props, required, "at {at}");
        }
    }

    #[test]
    fn refs_resolve_and_unsupported_keywords_are_gone() {
        let s = strict_schema::<Doc>();
        assert!(s.get("$schema").is_none());
        let defs = s["$defs"].as_object().expect("$defs kept");
        let mut refs = Vec::new();
        walk_keys(&s, &mut |m| {
            assert!(!m.contains_key("oneOf"), "oneOf left: {m:?}");
            assert!(!m.contains_key("default"), "default left: {m:?}");
            if let Some(Value::String(f)) = m.get("format") {
                assert!(STRICT_FORMATS.contains(&f.as_str()), "format {f}");
            }
            if let Some(Value::String(r)) = m.get("$ref") {
                assert_eq!(m.len(), 1, "$ref with siblings: {m:?}");
                refs.push(r.clone());
            }
        });
        assert!(!refs.is_empty());
        for r in refs {
            let name = r.strip_prefix("#/$defs/").expect("local $defs ref");
            assert!(defs.contains_key(name), "dangling {r}");
        }
        assert!(s["$defs"]["Shape"].get("anyOf").is_some());
    }

    #[test]
    fn response_format_shapes() {
        let rf = response_format_for::<Doc>("my doc/v1");
        assert_eq!(rf["type"], "json_schema");
        assert_eq!(rf["json_schema"]["name"], "my_doc_v1");
        assert_eq!(rf["json_schema"]["strict"], true);
        assert_eq!(rf["json_schema"]["schema"], strict_schema::<Doc>());
        assert_eq!(json_object_format(), json!({"type": "json_object"}));
        assert_eq!(schema_name::<Vec<Doc>>(), "Array_of_Doc");
        assert_eq!(sanitize_name(&"x".repeat(100)).len(), 64);
        assert_eq!(sanitize_name(""), "response");
    }

    #[test]
    fn maps_are_left_open() {
        let s = strict_schema::<std::collections::BTreeMap<String, u32>>();
        assert!(s["additionalProperties"].is_object(), "{s}");
    }
}
