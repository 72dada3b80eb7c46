//! Shape check of a repaired value against a JSON Schema given at run time (the server's
//! `response_format: json_schema`), where there is no Rust type to deserialize into.
//!
//! The subset strict structured outputs use: `type` (one or several), `enum`, `const`,
//! `properties`, `required`, `additionalProperties` (`false` or a schema), `items`, `anyOf` /
//! `oneOf` (any branch), `allOf`, and local `$ref`s into `$defs` / `definitions`. Other keywords
//! (formats, ranges, patterns) are not checked: like [`super::validate`], this is shape, not
//! semantics. Errors carry a JSON path (`$.items[2].price: …`) for the re-ask.

use serde_json::{Map, Value};

use super::validate::clip;

/// Errors reported at most (the re-ask quotes a few).
const MAX_ERRORS: usize = 8;

/// The shape errors of `value` against `schema` (empty: it fits).
pub(crate) fn check(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    walk(schema, schema, value, "$", &mut errors, 0);
    errors.truncate(MAX_ERRORS);
    errors
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(wanted: &str, v: &Value) -> bool {
    match (wanted, v) {
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => wanted == type_name(v),
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn walk(root: &Value, schema: &Value, v: &Value, at: &str, out: &mut Vec<String>, depth: u32) {
    let Value::Object(s) = schema else {
        // `true` accepts anything, `false` nothing.
        if schema == &Value::Bool(false) {
            out.push(format!("{at}: no value is allowed here"));
        }
        return;
    };
    if depth > 64 || out.len() >= MAX_ERRORS {
        return;
    }
    if let Some(Value::String(r)) = s.get("$ref") {
        match resolve(root, r) {
            Some(target) => walk(root, target, v, at, out, depth + 1),
            None => out.push(format!("{at}: the schema's $ref {r} does not resolve")),
        }
        return;
    }
    if let Some(t) = s.get("type") {
        let wanted: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !wanted.is_empty() && !wanted.iter().any(|w| type_fits(w, v)) {
            out.push(clip(&format!(
                "{at}: expected {}, got {}",
                wanted.join(" or "),
                type_name(v)
            )));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum") {
        if !allowed.contains(v) {
            out.push(clip(&format!(
                "{at}: {v} is not one of {}",
                Value::Array(allowed.clone())
            )));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            out.push(clip(&format!("{at}: must be {c}")));
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            let fits = branches.iter().any(|b| {
                let mut errs = Vec::new();
                walk(root, b, v, at, &mut errs, depth + 1);
                errs.is_empty()
            });
            if !fits {
                out.push(format!("{at}: matches none of the {key} alternatives"));
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for b in all {
            walk(root, b, v, at, out, depth + 1);
        }
    }
    match v {
        Value::Object(obj) => object(root, s, obj, at, out, depth),
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(
                        root,
                        item_schema,
                        item,
                        &format!("{at}[{i}]"),
                        out,
                        depth + 1,
                    );
                }
            }
        }
        _ => {}
    }
}

fn object(
    root: &Value,
    s: &Map<String, Value>,
    obj: &Map<String, Value>,
    at: &str,
    out: &mut Vec<String>,
    depth: u32,
) {
    let props = s.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = s.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                out.push(clip(&format!("{at}: missing required property {name:?}")));
            }
        }
    }
    for (name, value) in obj {
        let path = format!("{at}.{name}");
        match (
            props.and_then(|p| p.get(name)),
            s.get("additionalProperties"),
        ) {
            (Some(sub), _) => walk(root, sub, value, &path, out, depth + 1),
            (None, Some(Value::Bool(false))) => {
                out.push(clip(&format!("{at}: unexpected property {name:?}")))
            }
            (None, Some(extra @ Value::Object(_))) => {
                walk(root, extra, value, &path, out, depth + 1)
            }
            (None, _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "kind": {"enum": ["a", "b"]},
                "child": {"$ref": "#/$defs/Child"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["name", "tags"],
            "additionalProperties": false,
            "$defs": {"Child": {"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"], "additionalProperties": false}},
        })
    }

    #[test]
    fn a_fitting_value_has_no_errors() {
        let v = json!({"name": "x", "tags": ["a"], "kind": "b", "child": {"n": 3}, "note": null});
        assert_eq!(check(&schema(), &v), Vec::<String>::new());
        assert!(check(&json!({"type": "integer"}), &json!(2.0)).is_empty());
    }

    #[test]
    fn each_mismatch_is_named_with_its_path() {
        let v = json!({"tags": ["a", 2], "kind": "c", "child": {"n": "3"}, "extra": 1});
        let errors = check(&schema(), &v);
        for expected in [
            "$: missing required property \"name\"",
            "$.tags[1]: expected string, got integer",
            "$.kind: \"c\" is not one of [\"a\",\"b\"]",
            "$.child.n: expected integer, got string",
            "$: unexpected property \"extra\"",
        ] {
            assert!(
                errors.iter().any(|e| e == expected),
                "{expected} not in {errors:?}"
            );
        }
        assert_eq!(
            check(&schema(), &json!([1])),
            ["$: expected object, got array"]
        );
    }

    #[test]
    fn alternatives_and_dangling_refs() {
        let s = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        assert!(check(&s, &json!(1)).is_empty());
        assert_eq!(
            check(&s, &json!(true)),
            ["$: matches none of the anyOf alternatives"]
        );
        let dangling = check(&json!({"$ref": "#/$defs/Nope"}), &json!(1));
        assert!(dangling[0].contains("does not resolve"), "{dangling:?}");
    }
}
