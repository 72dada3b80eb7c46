//! One input line → one call, or the reason it cannot be one. Two forms are read, line by line:
//!
//! - OpenAI's Batch API input: `{"custom_id", "method": "POST", "url", "body"}` with `url`
//!   `/v1/chat/completions` or `/v1/embeddings`;
//! - the plain form: `{"custom_id", "messages", …}`, a chat body with its `custom_id`.
//!
//! The scope is the one `body.model` names (a scope name or a `PGW_SERVER_MODEL_ALIASES` alias,
//! as in `serve`), else the job's default scope. Parsing is deterministic, so a resumed run
//! finds the same errors and the same calls.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::config::ScopeKind;
use crate::openai::embedding::{input_texts, wants_base64};
use crate::openai::request::{options_for, response_format, ChatRequest, EmbeddingRequest, Format};
use crate::structured::SchemaRequest;
use crate::types::Priority;
use crate::types::{CallOptions, Message};

/// The two endpoints a line may name.
pub(crate) const CHAT_URL: &str = "/v1/chat/completions";
pub(crate) const EMBEDDINGS_URL: &str = "/v1/embeddings";

/// Where lines go: request `model` → scope, each scope's kind, and the fallback scope.
pub(crate) struct Routing {
    pub(crate) models: BTreeMap<String, String>,
    pub(crate) kinds: BTreeMap<String, ScopeKind>,
    pub(crate) default_scope: Option<String>,
    /// The JSON Schema answers of chat lines without a `response_format` must fit
    /// (`--schema FILE`): they go through the typed structured ladder.
    pub(crate) default_schema: Option<Value>,
}

/// A line that can be sent.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) custom_id: String,
    /// The scope that serves it.
    pub(crate) scope: String,
    /// `model` as the line named it (echoed in the answer body), else the scope's name.
    pub(crate) model: String,
    pub(crate) call: Call,
}

/// The governed call an item makes.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    Chat {
        messages: Vec<Message>,
        options: CallOptions,
        schema: Option<SchemaRequest>,
    },
    Embed {
        texts: Vec<String>,
        options: CallOptions,
        base64: bool,
    },
}

/// Why a line is not a call: OpenAI's batch `error` object (`code`, `message`), and the
/// `custom_id` when the line had one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LineError {
    pub(crate) custom_id: Option<String>,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// Parse line number `line_no` (1-based, for the messages).
pub(crate) fn parse_line(line: &str, line_no: u64, routing: &Routing) -> Result<Item, LineError> {
    let err = |custom_id: Option<String>, code, message: String| LineError {
        custom_id,
        code,
        message: format!("line {line_no}: {message}"),
    };
    let value: Value = serde_json::from_str(line).map_err(|e| {
        err(
            None,
            "invalid_json",
            format!("not a JSON object ({e}); each line must be one JSON object"),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err(err(
            None,
            "invalid_json",
            "not a JSON object; each line must be one JSON object".into(),
        ));
    };
    let custom_id = match object.remove("custom_id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        _ => {
            return Err(err(
                None,
                "missing_custom_id",
                "custom_id is missing or not a non-empty string; every line needs a unique one"
                    .into(),
            ))
        }
    };
    let id = Some(custom_id.clone());
    // OpenAI's form has `body`; the plain form is the body itself.
    let (url, body) = match object.remove("body") {
        Some(Value::Object(body)) => {
            if let Some(method) = object.get("method").and_then(Value::as_str) {
                if method != "POST" {
                    return Err(err(
                        id,
                        "invalid_method",
                        format!("method {method:?} is not served; the only method is POST"),
                    ));
                }
            }
            let url = object
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            (url, body)
        }
        Some(_) => {
            return Err(err(id, "invalid_body", "body must be a JSON object".into()));
        }
        None => (CHAT_URL.to_string(), object),
    };
    let kind = match url.as_str() {
        CHAT_URL => ScopeKind::Chat,
        EMBEDDINGS_URL => ScopeKind::Embeddings,
        other => {
            return Err(err(
                id,
                "invalid_url",
                format!("url {other:?} is not served; allowed: {CHAT_URL}, {EMBEDDINGS_URL}"),
            ))
        }
    };
    let (scope, model) =
        route(&body, kind, routing).map_err(|m| err(id.clone(), "model_not_found", m))?;
    let call = match kind {
        ScopeKind::Chat => chat_call(body, routing.default_schema.as_ref()),
        _ => embed_call(body),
    }
    .map_err(|m| err(id, "invalid_body", m))?;
    Ok(Item {
        custom_id,
        scope,
        model,
        call,
    })
}

/// The scope of a body: what its `model` names, else the default scope; of the right kind.
fn route(
    body: &Map<String, Value>,
    kind: ScopeKind,
    routing: &Routing,
) -> Result<(String, String), String> {
    let named = body.get("model").and_then(Value::as_str);
    let mapped = named.and_then(|m| routing.models.get(m));
    let scope = match (mapped, &routing.default_scope) {
        (Some(scope), _) => scope.clone(),
        (None, Some(default)) => default.clone(),
        (None, None) => {
            let served: Vec<&str> = routing
                .models
                .iter()
                .filter(|(_, s)| routing.kinds.get(*s) == Some(&kind))
                .map(|(m, _)| m.as_str())
                .collect();
            return Err(format!(
                "model {:?} names no scope (served: {}); name one in body.model or give the job a \
                 default scope (--scope)",
                named.unwrap_or(""),
                served.join(", ")
            ));
        }
    };
    if routing.kinds.get(&scope) != Some(&kind) {
        return Err(format!(
            "scope {scope} is not {} scope",
            match kind {
                ScopeKind::Chat => "a chat",
                ScopeKind::Embeddings => "an embeddings",
                ScopeKind::Ocr => "an OCR",
            }
        ));
    }
    Ok((scope.clone(), named.map_or(scope, str::to_string)))
}

fn chat_call(mut body: Map<String, Value>, default_schema: Option<&Value>) -> Result<Call, String> {
    // The scope decides the upstream model; the request's own is only echoed back.
    body.insert("model".into(), json!(""));
    let mut req: ChatRequest =
        serde_json::from_value(Value::Object(body)).map_err(|e| format!("chat body: {e}"))?;
    if req.messages.is_empty() {
        return Err("messages must not be empty".into());
    }
    if req.response_format.is_none() {
        if let Some(schema) = default_schema {
            req.response_format = Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": schema},
            }));
        }
    }
    // A batch answer is written whole: `stream` and `stream_options` are ignored.
    let Format {
        options, schema, ..
    } = response_format(
        req.response_format,
        options_for(None, req.user)
            .priority(Priority::Batch)
            .overlay(req.rest),
    )
    .map_err(|e| e.message)?;
    options.validate().map_err(|e| e.to_string())?;
    Ok(Call::Chat {
        messages: req.messages,
        options,
        schema,
    })
}

fn embed_call(mut body: Map<String, Value>) -> Result<Call, String> {
    body.insert("model".into(), json!(""));
    let req: EmbeddingRequest =
        serde_json::from_value(Value::Object(body)).map_err(|e| format!("embeddings body: {e}"))?;
    let texts = input_texts(req.input)?;
    if req.dimensions.is_some() {
        return Err(
            "dimensions is not served: the scope's model and EXPECTED_DIM decide the dimension"
                .into(),
        );
    }
    let base64 = wants_base64(req.encoding_format.as_deref())?;
    Ok(Call::Embed {
        texts,
        options: options_for(None, req.user).priority(Priority::Batch),
        base64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routing(default: Option<&str>) -> Routing {
        Routing {
            models: [("LLM", "LLM"), ("EMBED", "EMBED"), ("gpt-4o-mini", "LLM")]
                .into_iter()
                .map(|(m, s)| (m.to_string(), s.to_string()))
                .collect(),
            kinds: [
                ("LLM".to_string(), ScopeKind::Chat),
                ("EMBED".to_string(), ScopeKind::Embeddings),
            ]
            .into_iter()
            .collect(),
            default_scope: default.map(str::to_string),
            default_schema: None,
        }
    }

    #[test]
    fn openai_lines_route_by_model_or_alias() {
        let line = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"temperature":0.1}}"#;
        let item = parse_line(line, 1, &routing(None)).unwrap();
        assert_eq!(
            (
                item.custom_id.as_str(),
                item.scope.as_str(),
                item.model.as_str()
            ),
            ("a", "LLM", "gpt-4o-mini")
        );
        let line = r#"{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"EMBED","input":["x","y"]}}"#;
        let item = parse_line(line, 2, &routing(None)).unwrap();
        assert!(matches!(item.call, Call::Embed { ref texts, .. } if texts.len() == 2));
    }

    #[test]
    fn plain_lines_use_the_default_scope() {
        let line = r#"{"custom_id":"p","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            parse_line(line, 1, &routing(Some("LLM"))).unwrap().scope,
            "LLM"
        );
        let e = parse_line(line, 1, &routing(None)).unwrap_err();
        assert_eq!(e.code, "model_not_found");
        assert!(
            e.message.contains("--scope") && e.message.contains("served: LLM, gpt-4o-mini"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_default_schema_applies_to_chat_lines_without_a_response_format() {
        let mut r = routing(Some("LLM"));
        r.default_schema = Some(json!({"type": "object", "required": ["score"]}));
        let item = parse_line(
            r#"{"custom_id":"s","messages":[{"role":"user","content":"x"}]}"#,
            1,
            &r,
        )
        .unwrap();
        let Call::Chat { schema, .. } = item.call else {
            panic!("a chat call")
        };
        assert_eq!(schema.unwrap().schema["required"][0], "score");
        let own = r#"{"custom_id":"t","messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}"#;
        let Call::Chat { schema, .. } = parse_line(own, 2, &r).unwrap().call else {
            panic!("a chat call")
        };
        assert!(schema.is_none(), "the line's own response_format wins");
    }

    #[test]
    fn bad_lines_say_what_is_wrong_and_what_is_allowed() {
        let r = routing(Some("LLM"));
        let e = parse_line("{not json", 3, &r).unwrap_err();
        assert_eq!((e.code, e.custom_id.clone()), ("invalid_json", None));
        assert!(e.message.starts_with("line 3: "), "{}", e.message);
        let e = parse_line(r#"{"messages":[]}"#, 1, &r).unwrap_err();
        assert_eq!(e.code, "missing_custom_id");
        let e = parse_line(
            r#"{"custom_id":"u","url":"/v1/completions","body":{}}"#,
            1,
            &r,
        )
        .unwrap_err();
        assert_eq!((e.code, e.custom_id.as_deref()), ("invalid_url", Some("u")));
        assert!(
            e.message.contains("/v1/chat/completions, /v1/embeddings"),
            "{}",
            e.message
        );
        let e = parse_line(r#"{"custom_id":"m","messages":[]}"#, 1, &r).unwrap_err();
        assert_eq!(e.code, "invalid_body");
        let e = parse_line(
            r#"{"custom_id":"k","url":"/v1/embeddings","body":{"model":"LLM","input":"x"}}"#,
            1,
            &r,
        )
        .unwrap_err();
        assert!(
            e.message.contains("scope LLM is not an embeddings scope"),
            "{}",
            e.message
        );
    }
}
