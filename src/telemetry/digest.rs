//! What a telemetry row stores instead of the raw call: messages with multimodal parts replaced by
//! their digest and text capped, the sampling parameters as canonical JSON, the error as
//! `ClassName: message`.
//!
//! Every function builds new values; the caller's messages are never mutated, so the cache key
//! (computed from the originals) is byte-identical with and without `PGW_TELEMETRY_TEXT_CAP`.
//! Not for the cache key itself (that is [`crate::cache`]), though the image digest is the same
//! sha256 of the URL.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::types::{Content, ContentPart, Message};

/// Cut `text` to `cap` characters, appending `…(N more chars omitted)`; unchanged when `cap` is
/// `None` or the text is short enough.
pub(crate) fn cap_text(text: &str, cap: Option<usize>) -> String {
    let Some(cap) = cap else {
        return text.to_owned();
    };
    match text.char_indices().nth(cap) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let omitted = text[cut..].chars().count();
            format!("{}…({omitted} more chars omitted)", &text[..cut])
        }
    }
}

/// The `messages` column: JSON array of `{role, content}` with every image part replaced by
/// `{"type":"image_url","image_url":{"sha256":…,"bytes":N}}` (sha256 of the URL as sent; `bytes`
/// = decoded payload size for base64 data URLs, else the URL length) and every text capped.
///
/// ```
/// use polygateway::{Message, telemetry::messages_json};
/// let msgs = vec![Message::user_with_images("look", [("image/png", &b"\x89PNG...."[..])])];
/// let json = messages_json(&msgs, None);
/// assert!(!json.contains("base64"));
/// assert!(json.contains(r#""bytes":8"#));
/// ```
pub fn messages_json(messages: &[Message], text_cap: Option<usize>) -> String {
    let arr: Vec<Value> = messages
        .iter()
        .map(|m| message_value(m, text_cap))
        .collect();
    Value::Array(arr).to_string()
}

fn message_value(message: &Message, cap: Option<usize>) -> Value {
    let mut obj = Map::new();
    obj.insert(
        "role".into(),
        serde_json::to_value(message.role).unwrap_or(Value::Null),
    );
    let content = match &message.content {
        None => Value::Null,
        Some(Content::Text(text)) => Value::String(cap_text(text, cap)),
        Some(Content::Parts(parts)) => {
            Value::Array(parts.iter().map(|p| part_value(p, cap)).collect())
        }
    };
    obj.insert("content".into(), content);
    if let Some(name) = &message.name {
        obj.insert("name".into(), Value::String(name.clone()));
    }
    if let Some(calls) = &message.tool_calls {
        // Names and ids tell what was called; arguments are capped like any text.
        let calls = calls
            .iter()
            .map(|c| {
                serde_json::json!({"id": c.id, "name": c.function.name,
                    "arguments": cap_text(&c.function.arguments, cap)})
            })
            .collect();
        obj.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &message.tool_call_id {
        obj.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    Value::Object(obj)
}

fn part_value(part: &ContentPart, cap: Option<usize>) -> Value {
    match part {
        ContentPart::Text { text } => {
            serde_json::json!({"type": "text", "text": cap_text(text, cap)})
        }
        ContentPart::ImageUrl { image_url } => {
            let url = image_url.url.as_str();
            let digest = hex::encode(Sha256::digest(url.as_bytes()));
            let mut image = Map::new();
            image.insert("sha256".into(), Value::String(digest));
            image.insert("bytes".into(), Value::from(payload_bytes(url)));
            if let Some(detail) = &image_url.detail {
                image.insert("detail".into(), Value::String(detail.clone()));
            }
            serde_json::json!({"type": "image_url", "image_url": Value::Object(image)})
        }
        // Audio and files can be megabytes: only their type is kept.
        ContentPart::Other(value) => serde_json::json!({"type": value.get("type")}),
    }
}

/// Decoded size of a `data:…;base64,` URL without decoding it; the URL length otherwise.
fn payload_bytes(url: &str) -> u64 {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((header, data)) = rest.split_once(',') {
            if header.ends_with(";base64") {
                let data = data.trim_end();
                let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
                return (data.len() / 4 * 3 + (data.len() % 4) * 3 / 4).saturating_sub(padding)
                    as u64;
            }
            return data.len() as u64;
        }
    }
    url.len() as u64
}

/// The `sampling` column: canonical JSON (keys sorted) of the source's effective `extra_body`
/// overlaid by the call's sampling overlay (the overlay wins), without `response_format`;
/// `None` when nothing is left.
pub(crate) fn sampling_json(
    overlay: Option<&Map<String, Value>>,
    extra_body: Option<&Map<String, Value>>,
) -> Option<String> {
    let mut merged = Map::new();
    for source in [extra_body, overlay].into_iter().flatten() {
        for (k, v) in source {
            merged.insert(k.clone(), v.clone());
        }
    }
    merged.remove("response_format");
    if merged.is_empty() {
        None
    } else {
        Some(crate::cache::canonical_json(&Value::Object(merged)))
    }
}

/// The `error` column: `ClassName: message`.
pub(crate) fn error_text(class_name: &str, message: &str) -> String {
    format!("{class_name}: {message}")
}

/// The original library's exception class of an attempt's failure class, the `error` column's
/// prefix (`TransientError: …`), so queries written against the original's table keep working.
pub(crate) fn failure_class_name(class: polygateway_actors::FailureClass) -> &'static str {
    use polygateway_actors::FailureClass::*;
    match class {
        Transient => "TransientError",
        SourceDead => "SourceDeadError",
        RequestRejected => "RequestRejectedError",
        ResultInvalid => "ResultInvalidError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ImageUrl, Role};

    #[test]
    fn cap_counts_chars_not_bytes() {
        assert_eq!(
            cap_text("héllo wörld", Some(5)),
            "héllo…(6 more chars omitted)"
        );
        assert_eq!(cap_text("", Some(0)), "");
        assert_eq!(cap_text("ab", Some(0)), "…(2 more chars omitted)");
    }

    #[test]
    fn images_become_digests_and_texts_are_capped_without_touching_the_input() {
        let png = vec![7u8; 1000];
        let msgs = vec![
            Message::system("s".repeat(50)),
            Message::user_with_images("t".repeat(30), [("image/png", png.as_slice())]),
        ];
        let before = msgs.clone();
        let json: Value = serde_json::from_str(&messages_json(&msgs, Some(10))).unwrap();
        assert_eq!(msgs, before, "caller's messages mutated");
        assert_eq!(json[0]["role"], "system");
        assert_eq!(
            json[0]["content"],
            format!("{}…(40 more chars omitted)", "s".repeat(10))
        );
        assert_eq!(
            json[1]["content"][0]["text"],
            format!("{}…(20 more chars omitted)", "t".repeat(10))
        );
        let image = &json[1]["content"][1];
        assert_eq!(image["type"], "image_url");
        assert_eq!(image["image_url"]["bytes"], 1000);
        let Some(Content::Parts(parts)) = &msgs[1].content else {
            unreachable!()
        };
        let ContentPart::ImageUrl { image_url } = &parts[1] else {
            unreachable!()
        };
        assert_eq!(
            image["image_url"]["sha256"],
            hex::encode(Sha256::digest(image_url.url.as_bytes()))
        );
        assert!(image["image_url"].get("url").is_none());
    }

    #[test]
    fn uncapped_text_is_kept_whole_and_http_urls_are_digested_too() {
        let msgs = vec![
            Message::with_content(
                Role::User,
                Content::Parts(vec![ContentPart::ImageUrl {
                    image_url: ImageUrl {
                        url: "https://example.invalid/a.png".into(),
                        detail: Some("low".into()),
                    },
                }]),
            ),
            Message::assistant("x".repeat(5000)),
        ];
        let json: Value = serde_json::from_str(&messages_json(&msgs, None)).unwrap();
        assert_eq!(json[0]["content"][0]["image_url"]["bytes"], 29);
        assert_eq!(json[0]["content"][0]["image_url"]["detail"], "low");
        assert_eq!(json[1]["content"].as_str().unwrap().len(), 5000);
    }

    #[test]
    fn base64_sizes_account_for_padding() {
        for n in 0..10usize {
            use base64::Engine;
            let data = base64::engine::general_purpose::STANDARD.encode(vec![1u8; n]);
            assert_eq!(
                payload_bytes(&format!("data:image/png;base64,{data}")),
                n as u64
            );
        }
    }

    #[test]
    fn sampling_is_null_when_only_response_format_is_set() {
        let overlay = serde_json::json!({"response_format": {"type": "json_object"}});
        assert_eq!(sampling_json(overlay.as_object(), None), None);
        let nested = serde_json::json!({"b": {"z": 1, "a": 2}, "a": [3]});
        assert_eq!(
            sampling_json(None, nested.as_object()).unwrap(),
            r#"{"a":[3],"b":{"a":2,"z":1}}"#
        );
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn cap_text_example() {
        use super::cap_text;
        assert_eq!(cap_text("abcdef", Some(4)), "abcd…(2 more chars omitted)");
        assert_eq!(cap_text("abc", Some(4)), "abc");
        assert_eq!(cap_text("abcdef", None), "abcdef");
    }

    #[test]
    fn sampling_json_example() {
        use super::sampling_json;
        let overlay =
            serde_json::json!({"temperature": 0.2, "response_format": {"type": "json_object"}});
        let extra = serde_json::json!({"top_p": 0.9, "temperature": 1.0});
        assert_eq!(
            sampling_json(overlay.as_object(), extra.as_object()).as_deref(),
            Some(r#"{"temperature":0.2,"top_p":0.9}"#)
        );
        assert_eq!(sampling_json(None, None), None);
    }

    #[test]
    fn error_text_example() {
        use super::error_text;
        assert_eq!(
            error_text("AllSourcesExhausted", "retry budget spent"),
            "AllSourcesExhausted: retry budget spent"
        );
    }
}
