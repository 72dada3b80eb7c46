//! The response-cache key (docs/behaviour.md §9.1).
//!
//! `key = "pgw:cache:" + hex(sha256(canonical_json(material)))` where the material is an object
//! with the model fingerprint, a digest of the messages, the namespace, the salt (only when
//! present — an empty string *is* a salt), the sampling overlay (only when non-empty) and, for
//! structured calls, what was asked (json, or the schema and the scope's structured modes).
//!
//! Deliberately *not* inputs (docs/behaviour.md §2.2): `tenant_id`, `meta`, `session_id`, `parent_call_id`,
//! `stream`. Two tenants asking the same question in the same namespace share an entry; tenants
//! that must not share use different namespaces (`cache_namespace`).
//!
//! Multimodal parts enter the material as the sha256 of their URL (streamed into the hasher), so
//! the material stays small however large an embedded base64 image is.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::SourceSettings;
use crate::types::{Content, ContentPart, ImageUrl, Message};

/// Prefix of every cache key.
pub(crate) const CACHE_KEY_PREFIX: &str = "pgw:cache:";

/// Everything that decides whether two chat calls may share a cached answer.
///
/// ```
/// use polygateway::cache::{cache_key, model_fingerprint, CacheKeyInput};
/// let model = model_fingerprint(&[("gpt-4o-mini".into(), serde_json::Map::new())]);
/// let messages = [polygateway::Message::user("What is 2 + 2?")];
/// let sampling = serde_json::Map::new();
/// let unsalted = CacheKeyInput {
///     model_fingerprint: &model,
///     messages: &messages,
///     namespace: "prod",
///     salt: None,
///     sampling: &sampling,
///     structured: None,
/// };
/// // An empty salt is still a salt: it selects a different entry than no salt at all.
/// let salted = CacheKeyInput { salt: Some(""), ..unsalted };
/// assert_ne!(cache_key(&unsalted), cache_key(&salted));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct CacheKeyInput<'a> {
    /// [`model_fingerprint`] of the scope's sources.
    pub model_fingerprint: &'a Value,
    /// The messages as sent.
    pub messages: &'a [Message],
    /// The effective namespace (per-call `cache_namespace` or the configured one).
    pub namespace: &'a str,
    /// The caller's `cache_salt`; `Some("")` differs from `None`.
    pub salt: Option<&'a str>,
    /// The sampling overlay of the call (temperature, seed, …) merged as sent.
    pub sampling: &'a Map<String, Value>,
    /// What a structured call asks for (json, or a typed call's schema and the modes its
    /// scope's sources send it in); `None` for a plain call. A plain answer, a json answer and
    /// answers of two different types never share an entry.
    pub structured: Option<&'a Value>,
}

/// The model fingerprint: every source's `(model, extra_body)`, sorted and deduplicated, so the
/// key does not depend on source order and changes when any source's model or body changes.
///
/// ```
/// use polygateway::cache::model_fingerprint;
/// use serde_json::Map;
/// let a = model_fingerprint(&[("m2".into(), Map::new()), ("m1".into(), Map::new())]);
/// let b = model_fingerprint(&[("m1".into(), Map::new()), ("m2".into(), Map::new()), ("m1".into(), Map::new())]);
/// assert_eq!(a, b);
/// ```
pub fn model_fingerprint(sources: &[(String, Map<String, Value>)]) -> Value {
    let mut entries: Vec<(String, Value)> = sources
        .iter()
        .map(|(model, extra)| {
            let mut obj = Map::new();
            obj.insert("extra_body".into(), Value::Object(extra.clone()));
            obj.insert("model".into(), Value::String(model.clone()));
            let v = Value::Object(obj);
            (canonical_json(&v), v)
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    Value::Array(entries.into_iter().map(|(_, v)| v).collect())
}

/// [`model_fingerprint`] of configured sources.
pub(crate) fn fingerprint_sources(sources: &[SourceSettings]) -> Value {
    let pairs: Vec<(String, Map<String, Value>)> = sources
        .iter()
        .map(|s| (s.model.clone(), s.extra_body.clone()))
        .collect();
    model_fingerprint(&pairs)
}

/// The canonical material the key hashes (exposed for tests and debugging).
///
/// ```
/// use polygateway::cache::{cache_key_material, model_fingerprint, CacheKeyInput};
/// let model = model_fingerprint(&[("m".into(), serde_json::Map::new())]);
/// let material = cache_key_material(&CacheKeyInput {
///     model_fingerprint: &model,
///     messages: &[polygateway::Message::user("hi")],
///     namespace: "prod",
///     salt: None,
///     sampling: &serde_json::Map::new(),
///     structured: None,
/// });
/// // No salt and no sampling overlay: neither appears in the material.
/// assert_eq!(
///     material,
///     r#"{"messages":[{"content":"hi","role":"user"}],"model":[{"extra_body":{},"model":"m"}],"namespace":"prod"}"#
/// );
/// ```
pub fn cache_key_material(input: &CacheKeyInput<'_>) -> String {
    let mut obj = Map::new();
    obj.insert("model".into(), input.model_fingerprint.clone());
    obj.insert(
        "messages".into(),
        Value::Array(input.messages.iter().map(message_digest).collect()),
    );
    obj.insert(
        "namespace".into(),
        Value::String(input.namespace.to_owned()),
    );
    if let Some(salt) = input.salt {
        obj.insert("salt".into(), Value::String(salt.to_owned()));
    }
    if !input.sampling.is_empty() {
        obj.insert("sampling".into(), Value::Object(input.sampling.clone()));
    }
    if let Some(structured) = input.structured {
        obj.insert("structured".into(), structured.clone());
    }
    canonical_json(&Value::Object(obj))
}

/// The cache key: `pgw:cache:` + hex sha256 of [`cache_key_material`].
///
/// ```
/// use polygateway::cache::{cache_key, model_fingerprint, CacheKeyInput};
/// let model = model_fingerprint(&[("gpt-4o-mini".into(), serde_json::Map::new())]);
/// let messages = [polygateway::Message::user("Summarise the report")];
/// let sampling = serde_json::Map::new();
/// let key_in = |namespace: &str| {
///     cache_key(&CacheKeyInput {
///         model_fingerprint: &model,
///         messages: &messages,
///         namespace,
///         salt: None,
///         sampling: &sampling,
///         structured: None,
///     })
/// };
/// // Deterministic, and tenants in different namespaces never share an entry.
/// assert_eq!(key_in("tenant-a"), key_in("tenant-a"));
/// assert_ne!(key_in("tenant-a"), key_in("tenant-b"));
/// ```
pub fn cache_key(input: &CacheKeyInput<'_>) -> String {
    let material = cache_key_material(input);
    let digest = Sha256::digest(material.as_bytes());
    format!("{CACHE_KEY_PREFIX}{}", hex::encode(digest))
}

/// One message as it enters the material. Destructured exhaustively so that a new field on
/// `Message` or a new `ContentPart` variant fails to compile here until the key accounts for it.
/// Fields a message does not carry are left out, so a plain message's key is what it was before
/// messages carried tool calls.
fn message_digest(message: &Message) -> Value {
    let Message {
        role,
        content,
        name,
        tool_calls,
        function_call,
        tool_call_id,
        refusal,
        thinking_blocks,
        extra,
    } = message;
    let content = match content {
        None => Value::Null,
        Some(Content::Text(text)) => Value::String(text.clone()),
        Some(Content::Parts(parts)) => Value::Array(parts.iter().map(part_digest).collect()),
    };
    let mut obj = Map::new();
    obj.insert(
        "role".into(),
        serde_json::to_value(role).unwrap_or(Value::Null),
    );
    obj.insert("content".into(), content);
    let mut add = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            obj.insert(key.into(), v);
        }
    };
    add("name", name.clone().map(Value::String));
    add(
        "tool_calls",
        tool_calls
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok()),
    );
    add(
        "function_call",
        function_call
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok()),
    );
    add("tool_call_id", tool_call_id.clone().map(Value::String));
    add("refusal", refusal.clone().map(Value::String));
    // Replayed thinking is part of what the source reads (and signs): a turn with other
    // thinking is another conversation.
    add(
        "thinking_blocks",
        (!thinking_blocks.is_empty())
            .then(|| serde_json::to_value(thinking_blocks).ok())
            .flatten(),
    );
    add(
        "extra",
        (!extra.is_empty()).then(|| Value::Object(extra.clone())),
    );
    Value::Object(obj)
}

fn part_digest(part: &ContentPart) -> Value {
    let mut obj = Map::new();
    match part {
        ContentPart::Text { text } => {
            obj.insert("type".into(), Value::String("text".into()));
            obj.insert("text".into(), Value::String(text.clone()));
        }
        ContentPart::ImageUrl {
            image_url: ImageUrl { url, detail },
        } => {
            // Hash the URL in place: a 5 MB data URL is never copied into the material.
            let mut hasher = Sha256::new();
            hasher.update(url.as_bytes());
            obj.insert("type".into(), Value::String("image_url".into()));
            obj.insert(
                "sha256".into(),
                Value::String(hex::encode(hasher.finalize())),
            );
            if let Some(detail) = detail {
                obj.insert("detail".into(), Value::String(detail.clone()));
            }
        }
        // Kept whole: an unmodelled part is hashed as the caller sent it.
        ContentPart::Other(value) => return value.clone(),
    }
    Value::Object(obj)
}

/// Canonical JSON: object keys sorted (byte order, recursively), no whitespace, strings escaped
/// as `serde_json` does, numbers in `serde_json`'s shortest form. Independent of the
/// `preserve_order` feature of `serde_json`.
///
/// ```
/// use polygateway::cache::canonical_json;
/// let v = serde_json::json!({"b": 1, "a": {"d": [true, null], "c": "x"}});
/// assert_eq!(canonical_json(&v), r#"{"a":{"c":"x","d":[true,null]},"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's string escaping is deterministic and cannot fail for a &str.
    match serde_json::to_string(s) {
        Ok(escaped) => out.push_str(&escaped),
        Err(_) => out.push_str("\"\""),
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn fingerprint_sources_example() {
        use crate::cache::key::fingerprint_sources;
        use crate::cache::model_fingerprint;
        let a = crate::test_support::source_settings("http://127.0.0.1:9/v1");
        let b = crate::config::SourceSettings {
            name: "openai_2".into(),
            ..a.clone()
        };
        // Two sources serving the same model with the same body are one fingerprint entry.
        let fp = fingerprint_sources(&[a, b]);
        assert_eq!(
            fp,
            model_fingerprint(&[("test-model".into(), serde_json::Map::new())])
        );
        assert_eq!(fp.as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn cache_key_prefix_example() {
        use crate::cache::key::CACHE_KEY_PREFIX;
        use crate::cache::{cache_key, model_fingerprint, CacheKeyInput};
        let model = model_fingerprint(&[("gpt-4o-mini".into(), serde_json::Map::new())]);
        let key = cache_key(&CacheKeyInput {
            model_fingerprint: &model,
            messages: &[crate::Message::user("hi")],
            namespace: "prod",
            salt: None,
            sampling: &serde_json::Map::new(),
            structured: None,
        });
        // The prefix, then 64 hex digits of sha256: easy to find (and flush) in a shared Redis.
        assert!(key.starts_with(CACHE_KEY_PREFIX));
        assert_eq!(key.len(), CACHE_KEY_PREFIX.len() + 64);
    }
}
