//! Entry validation (docs/behaviour.md §2.2): every rule, table-driven, through the public functions and
//! through `CallOptions::validate`.

use std::collections::BTreeMap;

use polygateway::types::{CallOptions, MetaValue, Structured};
use polygateway::validate::{
    meta_from_json, validate_meta, validate_overlay, validate_tenant_id, ValidationError,
};
use polygateway::GatewayError;
use serde_json::json;

/// A short name for the variant, so tables can state which rule must fire.
fn rule(e: &ValidationError) -> &'static str {
    match e {
        ValidationError::TenantIdEmpty => "tenant_empty",
        ValidationError::TenantIdTooLong { .. } => "tenant_too_long",
        ValidationError::TenantIdWhitespace { .. } => "tenant_whitespace",
        ValidationError::MetaTooManyKeys { .. } => "meta_too_many",
        ValidationError::MetaKeyInvalid { .. } => "meta_key_invalid",
        ValidationError::MetaKeyReserved { .. } => "meta_key_reserved",
        ValidationError::MetaValueType { .. } => "meta_value_type",
        ValidationError::MetaStringTooLong { .. } => "meta_string_too_long",
        ValidationError::MetaFloatNotFinite { .. } => "meta_float",
        ValidationError::ProtectedKey { .. } => "protected_key",
        _ => "other",
    }
}

#[test]
fn tenant_id_rules() {
    let long_129 = "t".repeat(129);
    let multibyte_128 = "租".repeat(128);
    let multibyte_129 = "租".repeat(129);
    let cases: Vec<(&str, Option<&str>)> = vec![
        ("t1", None),
        ("acme-corp/eu", None),
        (&multibyte_128, None),
        ("", Some("tenant_empty")),
        (&long_129, Some("tenant_too_long")),
        (&multibyte_129, Some("tenant_too_long")),
        (" t1", Some("tenant_whitespace")),
        ("t1 ", Some("tenant_whitespace")),
        ("\tt1", Some("tenant_whitespace")),
        ("t1\n", Some("tenant_whitespace")),
        ("\u{3000}t1", Some("tenant_whitespace")),
    ];
    for (value, expected) in cases {
        let got = validate_tenant_id(value).err();
        assert_eq!(got.as_ref().map(rule), expected, "tenant_id {value:?}");
    }
    // A 128-char ASCII id is the longest accepted.
    assert!(validate_tenant_id(&"t".repeat(128)).is_ok());
}

#[test]
fn tenant_id_messages_name_field_limit_and_value() {
    let e = validate_tenant_id(&"x".repeat(200)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("tenant_id"), "{msg}");
    assert!(msg.contains("128"), "{msg}");
    assert!(msg.contains("200"), "{msg}");
    // The value is shown, shortened to about 64 chars.
    assert!(msg.contains(&"x".repeat(64)), "{msg}");
    assert!(!msg.contains(&"x".repeat(65)), "{msg}");

    let msg = validate_tenant_id(" t1").unwrap_err().to_string();
    assert!(msg.contains("\" t1\""), "{msg}");
    assert!(msg.contains("whitespace"), "{msg}");
}

fn meta_of(entries: &[(&str, MetaValue)]) -> BTreeMap<String, MetaValue> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn meta_rules() {
    let sixteen: Vec<(String, MetaValue)> = (0..16)
        .map(|i| (format!("k{i}"), MetaValue::from(i)))
        .collect();
    let seventeen: Vec<(String, MetaValue)> = (0..17)
        .map(|i| (format!("k{i}"), MetaValue::from(i)))
        .collect();
    let key_64 = "k".repeat(64);
    let key_65 = "k".repeat(65);
    let cases: Vec<(BTreeMap<String, MetaValue>, Option<&str>)> = vec![
        (BTreeMap::new(), None),
        (sixteen.into_iter().collect(), None),
        (seventeen.into_iter().collect(), Some("meta_too_many")),
        (meta_of(&[("batch_id", "b-17".into())]), None),
        (meta_of(&[("run.v2_x", 3.into())]), None),
        (meta_of(&[(&key_64, true.into())]), None),
        (meta_of(&[(&key_65, true.into())]), Some("meta_key_invalid")),
        (meta_of(&[("", true.into())]), Some("meta_key_invalid")),
        (meta_of(&[("Batch", true.into())]), Some("meta_key_invalid")),
        (
            meta_of(&[("batch-id", true.into())]),
            Some("meta_key_invalid"),
        ),
        (meta_of(&[("a b", true.into())]), Some("meta_key_invalid")),
        (meta_of(&[("pg_x", true.into())]), Some("meta_key_reserved")),
        (meta_of(&[("pg_", 1.into())]), Some("meta_key_reserved")),
        (meta_of(&[("pgx", 1.into())]), None),
        (meta_of(&[("s", "v".repeat(256).into())]), None),
        (meta_of(&[("s", "值".repeat(256).into())]), None),
        (
            meta_of(&[("s", "v".repeat(257).into())]),
            Some("meta_string_too_long"),
        ),
        (meta_of(&[("f", 0.5.into())]), None),
        (meta_of(&[("f", f64::NAN.into())]), Some("meta_float")),
        (meta_of(&[("f", f64::INFINITY.into())]), Some("meta_float")),
        (
            meta_of(&[("f", f64::NEG_INFINITY.into())]),
            Some("meta_float"),
        ),
        (meta_of(&[("i", MetaValue::Int(i64::MIN))]), None),
    ];
    for (meta, expected) in cases {
        let got = validate_meta(&meta).err();
        assert_eq!(got.as_ref().map(rule), expected, "meta {meta:?}");
    }
}

#[test]
fn meta_messages_name_field_limit_and_value() {
    let too_many: BTreeMap<String, MetaValue> = (0..17)
        .map(|i| (format!("k{i}"), MetaValue::from(i)))
        .collect();
    let msg = validate_meta(&too_many).unwrap_err().to_string();
    assert!(
        msg.contains("meta") && msg.contains("17") && msg.contains("16"),
        "{msg}"
    );

    let msg = validate_meta(&meta_of(&[("s", "v".repeat(257).into())]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("257") && msg.contains("256") && msg.contains("\"s\""),
        "{msg}"
    );

    let msg = validate_meta(&meta_of(&[("pg_x", 1.into())]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("pg_x") && msg.contains("pg_"), "{msg}");

    let msg = validate_meta(&meta_of(&[("f", f64::NAN.into())]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("NaN") && msg.contains("finite"), "{msg}");

    let msg = validate_meta(&meta_of(&[("Bad-Key", 1.into())]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("Bad-Key") && msg.contains("[a-z0-9_.]{1,64}"),
        "{msg}"
    );
}

#[test]
fn meta_from_json_rejects_non_scalar_values() {
    let cases = [
        (json!({"a": null}), Some("meta_value_type")),
        (json!({"a": [1]}), Some("meta_value_type")),
        (json!({"a": {"b": 1}}), Some("meta_value_type")),
        (json!({"a": 1, "b": 2.5, "c": "x", "d": false}), None),
        (json!({"pg_a": 1}), Some("meta_key_reserved")),
    ];
    for (value, expected) in cases {
        let got = meta_from_json(value.as_object().unwrap()).err();
        assert_eq!(got.as_ref().map(rule), expected, "{value}");
    }
    let msg = meta_from_json(json!({"tags": ["a"]}).as_object().unwrap())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("tags") && msg.contains("array"), "{msg}");

    let converted = meta_from_json(json!({"n": 7, "x": 1.5}).as_object().unwrap()).unwrap();
    assert_eq!(converted["n"], MetaValue::Int(7));
    assert_eq!(converted["x"], MetaValue::Float(1.5));
}

#[test]
fn meta_value_serde_is_untagged() {
    let meta = meta_of(&[
        ("a", 1.into()),
        ("b", 2.5.into()),
        ("c", "x".into()),
        ("d", true.into()),
    ]);
    let text = serde_json::to_string(&meta).unwrap();
    assert_eq!(text, r#"{"a":1,"b":2.5,"c":"x","d":true}"#);
    let back: BTreeMap<String, MetaValue> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, meta);
    // null is not a meta value.
    assert!(serde_json::from_str::<MetaValue>("null").is_err());
}

#[test]
fn overlay_protected_keys() {
    let cases = [
        (json!({}), None),
        (
            json!({"temperature": 0.2, "top_p": 0.9, "max_tokens": 64}),
            None,
        ),
        (json!({"model": "x"}), Some("model")),
        (json!({"messages": []}), Some("messages")),
        (json!({"stream": true}), Some("stream")),
        (
            json!({"stream_options": {"include_usage": false}}),
            Some("stream_options"),
        ),
        (json!({"temperature": 1, "stream": false}), Some("stream")),
    ];
    for (body, expected) in cases {
        let got = validate_overlay("overlay", body.as_object().unwrap()).err();
        match (got, expected) {
            (None, None) => {}
            (Some(ValidationError::ProtectedKey { field, key }), Some(k)) => {
                assert_eq!(field, "overlay");
                assert_eq!(key, k);
            }
            (got, expected) => panic!("{body}: got {got:?}, expected {expected:?}"),
        }
    }
    let msg = validate_overlay("extra_body", json!({"model": 1}).as_object().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("extra_body") && msg.contains("\"model\""),
        "{msg}"
    );
}

#[test]
fn call_options_validate_runs_every_rule() {
    assert!(CallOptions::new().validate().is_ok());
    let cases: Vec<(CallOptions, &str)> = vec![
        (CallOptions::new().tenant_id(""), "tenant_empty"),
        (CallOptions::new().tenant_id(" t1"), "tenant_whitespace"),
        (
            CallOptions::new().tenant_id("x".repeat(129)),
            "tenant_too_long",
        ),
        (
            CallOptions::new().meta_entry("pg_x", 1),
            "meta_key_reserved",
        ),
        (CallOptions::new().meta_entry("f", f64::NAN), "meta_float"),
        (
            CallOptions::new().meta_entry("s", "v".repeat(257)),
            "meta_string_too_long",
        ),
        (
            (0..17).fold(CallOptions::new(), |o, i| o.meta_entry(format!("k{i}"), i)),
            "meta_too_many",
        ),
        (
            CallOptions::new().overlay_param("messages", json!([])),
            "protected_key",
        ),
    ];
    for (opts, expected) in cases {
        let err = opts.validate().unwrap_err();
        assert_eq!(rule(&err), expected, "{opts:?}");
        // Entry errors reach callers as InvalidInput, outside the unavailable family.
        let gateway: GatewayError = err.into();
        assert_eq!(gateway.class_name(), "InvalidInput");
        assert!(!gateway.is_unavailable());
    }
}

#[test]
fn call_options_defaults_and_builder() {
    let d = CallOptions::default();
    assert_eq!(d, CallOptions::new());
    assert!(d.stream);
    assert_eq!(d.structured, Structured::None);
    assert_eq!(d.tenant(), "");
    assert_eq!(d.tenant_id, None);
    assert!(d.cache_salt.is_none() && d.cache_namespace.is_none());
    assert!(!d.bypass_cache);

    let o = CallOptions::new()
        .session_id("s")
        .parent_call_id("p")
        .cache_salt("")
        .cache_namespace("tenant-a")
        .structured(Structured::Json)
        .stream(false)
        .overlay(json!({"temperature": 0.1}).as_object().unwrap().clone())
        .overlay_param("top_p", 0.5)
        .tenant_id("acme")
        .meta_entry("run", 1)
        .bypass_cache(true);
    assert!(o.validate().is_ok());
    assert_eq!(o.session_id.as_deref(), Some("s"));
    assert_eq!(o.parent_call_id.as_deref(), Some("p"));
    // The empty salt is a salt, distinct from no salt.
    assert_eq!(o.cache_salt.as_deref(), Some(""));
    assert_eq!(o.cache_namespace.as_deref(), Some("tenant-a"));
    assert_eq!(o.structured, Structured::Json);
    assert!(!o.stream);
    assert_eq!(o.overlay.len(), 2);
    assert_eq!(o.tenant(), "acme");
    assert_eq!(o.meta["run"], MetaValue::Int(1));
    assert!(o.bypass_cache);
}
