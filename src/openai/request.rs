//! The `chat.completions` and `embeddings` request bodies, and the parts of a chat body that are
//! not passed through as the call's overlay: `response_format` (the structured ladder) and
//! `user` (telemetry meta).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::ErrorShape;
use crate::structured::SchemaRequest;
use crate::types::{CallOptions, Message, Structured};

// Without `server`, only batch jobs read these bodies, and they route by the raw `model` and
// write answers whole (no `stream`): those fields are then parsed (validated) but not read.
#[cfg_attr(not(feature = "server"), allow(dead_code))]
#[derive(Deserialize)]
pub(crate) struct ChatRequest {
    pub(crate) model: String,
    pub(crate) messages: Vec<Message>,
    #[serde(default)]
    pub(crate) stream: bool,
    #[serde(default)]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub(crate) response_format: Option<Value>,
    #[serde(default)]
    pub(crate) user: Option<String>,
    /// Sampling parameters, tools, `n`, logprobs and anything else: the call's overlay
    /// (docs/behaviour.md §2.2), passed through to the upstream.
    #[serde(flatten)]
    pub(crate) rest: Map<String, Value>,
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
#[derive(Deserialize, Default)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub(crate) include_usage: bool,
}

#[cfg_attr(not(feature = "server"), allow(dead_code))]
#[derive(Deserialize)]
pub(crate) struct EmbeddingRequest {
    pub(crate) model: String,
    pub(crate) input: Value,
    #[serde(default)]
    pub(crate) encoding_format: Option<String>,
    #[serde(default)]
    pub(crate) dimensions: Option<Value>,
    #[serde(default)]
    pub(crate) user: Option<String>,
}

/// What `response_format` asks of the call: the options (json mode sets `Structured::Json` and
/// passes the format upstream), the caller's schema for `json_schema`, and whether the answer
/// is structured at all (the server streams structured answers as one delta; batch answers are
/// always whole).
#[cfg_attr(not(feature = "server"), allow(dead_code))]
pub(crate) struct Format {
    pub(crate) options: CallOptions,
    pub(crate) schema: Option<SchemaRequest>,
    pub(crate) structured: bool,
}

/// Apply `response_format` (`text`, `json_object` or `json_schema`) to `options`.
pub(crate) fn response_format(
    format: Option<Value>,
    options: CallOptions,
) -> Result<Format, ErrorShape> {
    let Some(format) = format else {
        return Ok(Format {
            options,
            schema: None,
            structured: false,
        });
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(Format {
            options,
            schema: None,
            structured: false,
        }),
        // The model is asked for JSON by the caller's own format; the answer is repaired into
        // valid JSON (or refused as invalid) by the ladder.
        Some("json_object") => Ok(Format {
            options: options
                .overlay_param("response_format", format)
                .structured(Structured::Json),
            schema: None,
            structured: true,
        }),
        Some("json_schema") => Ok(Format {
            options,
            schema: Some(schema_request(&format)?),
            structured: true,
        }),
        _ => Err(ErrorShape::bad_request(
            "response_format.type must be text, json_object or json_schema",
            Some("response_format"),
        )),
    }
}

/// The schema of `response_format: {"type": "json_schema", "json_schema": {"name", "schema"}}`.
fn schema_request(format: &Value) -> Result<SchemaRequest, ErrorShape> {
    let invalid = |what: &str| {
        ErrorShape::bad_request(
            format!("response_format.json_schema{what}"),
            Some("response_format"),
        )
    };
    let spec = format
        .get("json_schema")
        .ok_or_else(|| invalid(" is required"))?;
    let schema = spec
        .get("schema")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or_else(|| invalid(".schema must be a JSON Schema object"))?;
    let name: String = spec
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("response")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    Ok(SchemaRequest { name, schema })
}

/// The call options of a request from `tenant` (none: unattributed), with OpenAI's `user` as
/// telemetry meta `user`.
pub(crate) fn options_for(tenant: Option<&str>, user: Option<String>) -> CallOptions {
    let options = match tenant {
        Some(tenant) => CallOptions::new().tenant_id(tenant),
        None => CallOptions::new(),
    };
    match user {
        Some(user) => options.meta_entry("user", user),
        None => options,
    }
}
