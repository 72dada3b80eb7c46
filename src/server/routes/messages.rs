//! Anthropic's Messages API: `POST /v1/messages` (streamed and not) and
//! `POST /v1/messages/count_tokens`. A request is translated into the canonical call (OpenAI-shaped
//! [`Message`]s and overlay, docs/behaviour.md §12.5) and then goes through exactly the governed
//! path of `/v1/chat/completions` — key, model → scope, key limits, one call of the scope's
//! handle; the answer is translated back into Anthropic's `message` object or its event stream.
//! Errors are in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`). Not the
//! upstream codec: what the source speaks is the transport's business.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::ScopeKind;
use crate::gateway::ChatEvent;
use crate::openai::request::options_for;
use crate::provider::Dialect;
use crate::server::call_order::with_call_order;
use crate::server::errors::ApiError;
use crate::server::json_pieces::{self, Piece};
use crate::server::routes::openai::body_bytes;
use crate::server::state::App;
use crate::types::native_body::NativeBody;
use crate::types::{
    Content, ContentPart, ImageUrl, LlmResponse, Message, Role, ThinkingBlock, ToolCall,
};

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // As `App::answer`, with the error in Anthropic's shape.
    let mut scope = None;
    let done = tokio::select! {
        done = create(&app, &headers, body, &mut scope) => done,
        () = app.stop.cancelled() => Err(ApiError::from(crate::GatewayError::Shutdown(
            "the server's drain timeout passed; the call was cancelled".into(),
        ))),
    };
    match done {
        Ok(response) => response,
        Err(e) => {
            if let Some(scope) = scope {
                app.errors.record(&scope, &e);
            }
            anthropic_error(e).into_response()
        }
    }
}

/// `POST /v1/messages/count_tokens`: the gateway's own estimate (not the provider's count),
/// said so in `x-pgw-token-estimate: chars/4` (four characters of text per token).
pub(crate) async fn count_tokens(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let counted = (|| {
        let key = authenticate(&app, &headers)?;
        let req: Value = parse(&body_bytes(body)?)?;
        let model = req.get("model").and_then(Value::as_str).unwrap_or_default();
        app.scope_for(key, model, ScopeKind::Chat)?;
        let call = to_canonical(&req)?;
        let mut chars: usize = call.messages.iter().map(|m| m.text().chars().count()).sum();
        chars += call.overlay.get("tools").map_or(0, |t| t.to_string().len());
        Ok::<_, ApiError>(chars.div_ceil(CHARS_PER_TOKEN))
    })();
    match counted {
        Ok(n) => {
            let mut r = axum::Json(json!({"input_tokens": n})).into_response();
            r.headers_mut()
                .insert("x-pgw-token-estimate", HeaderValue::from_static("chars/4"));
            r
        }
        Err(e) => anthropic_error(e).into_response(),
    }
}

/// The estimate `count_tokens` answers: characters of text (and tool definitions) per token.
const CHARS_PER_TOKEN: usize = 4;

/// The caller's virtual key: Anthropic SDKs send `x-api-key`, OpenAI-style clients
/// `Authorization: Bearer`.
fn authenticate<'a>(
    app: &'a App,
    headers: &HeaderMap,
) -> Result<&'a crate::server::VirtualKey, ApiError> {
    match headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        Some(presented) if !presented.trim().is_empty() => app
            .keys
            .authenticate(presented.trim())
            .ok_or_else(ApiError::unknown_key),
        _ => app.authenticate(headers),
    }
}

fn parse(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}"), None))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body must be a JSON object",
            None,
        ));
    }
    Ok(v)
}

/// An error answered in Anthropic's shape and status vocabulary.
pub(crate) struct AnthropicError(ApiError);

pub(crate) fn anthropic_error(e: ApiError) -> AnthropicError {
    AnthropicError(e)
}

/// Anthropic's error `type` and status for one of the server's errors: 529 `overloaded_error`
/// when no source could take the call (every one overloaded or unavailable: 503), 429
/// `rate_limit_error`, 401/403/404/400 by status, `api_error` otherwise.
pub(crate) fn anthropic_kind(status: u16) -> (u16, &'static str) {
    match status {
        400 | 413 | 422 => (status, "invalid_request_error"),
        401 => (401, "authentication_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        429 => (429, "rate_limit_error"),
        503 => (529, "overloaded_error"),
        504 => (504, "timeout_error"),
        _ => (status, "api_error"),
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let e = self.0;
        let (status, kind) = anthropic_kind(e.status);
        let retry_after = e.retry_after_s;
        let body = json!({"type": "error", "error": {"type": kind, "message": e.message}});
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, axum::Json(body)).into_response();
        if let Some(s) = retry_after {
            let secs = crate::error::retry_after_header_secs(s);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r
    }
}

/// The canonical form of an Anthropic request: messages and the overlay.
pub(crate) struct Canonical {
    pub(crate) model: String,
    pub(crate) messages: Vec<Message>,
    pub(crate) overlay: Map<String, Value>,
    pub(crate) stream: bool,
    pub(crate) user: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message, None)
}

/// Text of a `tool_result` content (a string or blocks).
fn result_text(content: Option<&Value>) -> Content {
    match content {
        None | Some(Value::Null) => Content::Text(String::new()),
        Some(Value::String(s)) => Content::Text(s.clone()),
        Some(Value::Array(blocks)) => {
            Content::Parts(blocks.iter().map(|b| part_of(b.clone())).collect())
        }
        Some(other) => Content::Text(other.to_string()),
    }
}

/// A user content block as a canonical part: text stays text, a base64 or URL image becomes an
/// `image_url` part; anything else (documents, blocks with `cache_control`) is kept verbatim.
fn part_of(block: Value) -> ContentPart {
    let plain_keys = |allowed: &[&str]| {
        block
            .as_object()
            .is_some_and(|o| o.keys().all(|k| allowed.contains(&k.as_str())))
    };
    if block["type"] == "image" && plain_keys(&["type", "source"]) {
        let src = &block["source"];
        let url = match src["type"].as_str() {
            Some("base64") => Some(format!(
                "data:{};base64,{}",
                src["media_type"].as_str().unwrap_or("image/png"),
                src["data"].as_str().unwrap_or_default()
            )),
            Some("url") => src["url"].as_str().map(str::to_string),
            _ => None,
        };
        if let Some(url) = url {
            return ContentPart::ImageUrl {
                image_url: ImageUrl { url, detail: None },
            };
        }
    }
    serde_json::from_value(block.clone()).unwrap_or(ContentPart::Other(block))
}

fn system_message(system: &Value) -> Result<Option<Message>, ApiError> {
    Ok(match system {
        Value::Null => None,
        Value::String(s) => Some(Message::system(s.clone())),
        Value::Array(blocks) => Some(Message::with_content(
            Role::System,
            Content::Parts(blocks.iter().map(|b| part_of(b.clone())).collect()),
        )),
        _ => {
            return Err(invalid(
                "system must be a string or an array of text blocks",
            ))
        }
    })
}

/// Translate an Anthropic Messages request body into the canonical call.
pub(crate) fn to_canonical(req: &Value) -> Result<Canonical, ApiError> {
    let model = req["model"]
        .as_str()
        .ok_or_else(|| invalid("model: a string is required"))?
        .to_string();
    let mut messages: Vec<Message> = system_message(&req["system"])?.into_iter().collect();
    let turns = req["messages"]
        .as_array()
        .ok_or_else(|| invalid("messages: an array is required"))?;
    for turn in turns {
        let role = match turn["role"].as_str() {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => return Err(invalid(format!("messages: unknown role {other:?}"))),
        };
        let blocks = match &turn["content"] {
            Value::String(s) => {
                messages.push(Message::new(role, s.clone()));
                continue;
            }
            Value::Array(blocks) => blocks,
            _ => return Err(invalid("messages: content must be a string or an array")),
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        let mut thinking = Vec::new();
        for block in blocks {
            match block["type"].as_str() {
                Some("tool_use") if role == Role::Assistant => {
                    let mut call = ToolCall::function(
                        block["id"].as_str().unwrap_or_default(),
                        block["name"].as_str().unwrap_or_default(),
                        block.get("input").cloned().unwrap_or(json!({})).to_string(),
                    );
                    // A source's own fields of the call (Gemini's thought signature) come back
                    // as the answer gave them.
                    if let Some(f) = block.get(PROVIDER_FIELDS) {
                        call.extra.insert(PROVIDER_FIELDS.into(), f.clone());
                    }
                    calls.push(call);
                }
                Some("thinking" | "redacted_thinking") if role == Role::Assistant => thinking.push(
                    serde_json::from_value::<ThinkingBlock>(block.clone())
                        .map_err(|e| invalid(format!("messages: thinking block: {e}")))?,
                ),
                Some("tool_result") if role == Role::User => {
                    if !parts.is_empty() {
                        messages.push(Message::with_content(
                            role,
                            Content::Parts(std::mem::take(&mut parts)),
                        ));
                    }
                    let mut m =
                        Message::with_content(Role::Tool, result_text(block.get("content")));
                    m.tool_call_id = block["tool_use_id"].as_str().map(str::to_string);
                    if block["is_error"] == true {
                        m.extra.insert("is_error".into(), json!(true));
                    }
                    messages.push(m);
                }
                Some(_) => parts.push(part_of(block.clone())),
                None => return Err(invalid("messages: a content block needs a type")),
            }
        }
        if parts.is_empty() && calls.is_empty() && thinking.is_empty() {
            continue;
        }
        let mut m = Message::with_content(role, Content::Parts(parts));
        if role == Role::Assistant {
            // A plain-text assistant turn is sent as a string, as OpenAI sources expect.
            if let Some(Content::Parts(p)) = &m.content {
                if p.iter().all(|p| matches!(p, ContentPart::Text { .. })) {
                    let text: String = p
                        .iter()
                        .filter_map(|p| match p {
                            ContentPart::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    m.content = (!text.is_empty()).then_some(Content::Text(text));
                }
            }
            if !calls.is_empty() {
                m.tool_calls = Some(calls);
            }
            m.thinking_blocks = thinking;
        }
        messages.push(m);
    }
    let mut overlay = Map::new();
    if let Some(n) = req.get("max_tokens").filter(|v| !v.is_null()) {
        overlay.insert("max_tokens".into(), n.clone());
    }
    if let Some(stop) = req.get("stop_sequences").filter(|v| !v.is_null()) {
        overlay.insert("stop".into(), stop.clone());
    }
    for k in ["temperature", "top_p", "top_k", "thinking"] {
        if let Some(v) = req.get(k).filter(|v| !v.is_null()) {
            overlay.insert(k.into(), v.clone());
        }
    }
    if let Some(tools) = req["tools"].as_array() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut function = json!({
                    "name": t["name"],
                    "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                });
                if let Some(d) = t.get("description") {
                    function["description"] = d.clone();
                }
                let mut tool = json!({"type": "function", "function": function});
                if let Some(c) = t.get("cache_control") {
                    tool["cache_control"] = c.clone();
                }
                tool
            })
            .collect();
        overlay.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = req.get("tool_choice").filter(|v| !v.is_null()) {
        let mapped = match choice["type"].as_str() {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
            _ => return Err(invalid("tool_choice.type must be auto, any, tool or none")),
        };
        overlay.insert("tool_choice".into(), mapped);
        if choice["disable_parallel_tool_use"] == true {
            overlay.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    Ok(Canonical {
        model,
        messages,
        overlay,
        stream: req["stream"] == true,
        user: req["metadata"]["user_id"].as_str().map(str::to_string),
    })
}

/// Anthropic's `stop_reason` for a canonical `finish_reason`.
pub(crate) fn stop_reason(r: &LlmResponse) -> &str {
    match r.finish_reason.as_deref() {
        None | Some("stop") => {
            if r.tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            }
        }
        Some("length") => "max_tokens",
        Some("tool_calls") => "tool_use",
        Some("content_filter") => "refusal",
        Some(other) => other,
    }
}

/// Anthropic's `usage`: `input_tokens` are the uncached ones (all input less reads and writes).
/// Its fields in sorted order, as a `Value` writes them.
#[derive(Serialize)]
pub(crate) struct Usage {
    cache_creation: CacheCreation,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    input_tokens: u64,
    output_tokens: u64,
}

#[derive(Serialize)]
struct CacheCreation {
    ephemeral_1h_input_tokens: u64,
    ephemeral_5m_input_tokens: u64,
}

/// The `usage` of an answer.
pub(crate) fn usage(r: &LlmResponse) -> Usage {
    let reads = r.cached_prompt_tokens.unwrap_or(0);
    let w5 = r.cache_write_5m_tokens.unwrap_or(0);
    let w1 = r.cache_write_1h_tokens.unwrap_or(0);
    Usage {
        cache_creation: CacheCreation {
            ephemeral_1h_input_tokens: w1,
            ephemeral_5m_input_tokens: w5,
        },
        cache_creation_input_tokens: w5 + w1,
        cache_read_input_tokens: reads,
        input_tokens: r.prompt_tokens.saturating_sub(reads + w5 + w1),
        output_tokens: r.completion_tokens,
    }
}

fn thinking_blocks(r: &LlmResponse) -> Vec<Value> {
    if !r.thinking_blocks.is_empty() {
        r.thinking_blocks
            .iter()
            .map(|b| match b {
                ThinkingBlock::Thinking {
                    thinking,
                    signature,
                } => json!({
                    "type": "thinking", "thinking": thinking,
                    "signature": signature.clone().unwrap_or_default(),
                }),
                ThinkingBlock::Redacted { data } => {
                    json!({"type": "redacted_thinking", "data": data})
                }
            })
            .collect()
    } else if !r.thinking.is_empty() {
        vec![json!({"type": "thinking", "thinking": r.thinking, "signature": ""})]
    } else {
        Vec::new()
    }
}

/// Where a tool call keeps what its source needs back with it (Gemini's `thought_signature`,
/// LiteLLM's place for it): on the `tool_use` block, so a client that sends the turn back as it
/// got it sends it too.
const PROVIDER_FIELDS: &str = "provider_specific_fields";

fn tool_use(call: &ToolCall) -> Value {
    let input: Value = serde_json::from_str(&call.function.arguments).unwrap_or(json!({}));
    let mut block =
        json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input});
    if let Some(f) = call.extra.get(PROVIDER_FIELDS) {
        block[PROVIDER_FIELDS] = f.clone();
    }
    block
}

/// The content blocks of an answer: thinking, text, tool uses.
pub(crate) fn content_blocks(r: &LlmResponse) -> Vec<Value> {
    let mut blocks = thinking_blocks(r);
    if !r.content.is_empty() {
        blocks.push(json!({"type": "text", "text": r.content}));
    }
    blocks.extend(r.tool_calls.iter().map(tool_use));
    blocks
}

/// An answer as Anthropic's `message` object. `model` is what the caller asked for.
pub(crate) fn message_json(id: &str, model: &str, r: &LlmResponse) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(r),
        "stop_reason": stop_reason(r),
        "stop_sequence": Value::Null,
        "usage": usage(r),
    })
}

async fn create(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = authenticate(app, headers)?;
    let req = parse(&body_bytes(body)?)?;
    let call = to_canonical(&req)?;
    let scope = app.scope_for(key, &call.model, ScopeKind::Chat)?;
    *scope_out = Some(scope.clone());
    let mut options = with_call_order(
        options_for(Some(key.tenant()), call.user).overlay(call.overlay),
        key,
        headers,
    )?;
    options.key_budget = key.budget().map(|b| (key.name().to_string(), b));
    // An Anthropic source is sent the request as the client wrote it (§12.5), every other
    // source the canonical call.
    if let Value::Object(body) = req {
        options.native = Some(NativeBody {
            dialect: Dialect::Anthropic,
            body: Arc::new(body),
            beta: headers
                .get("anthropic-beta")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
    }
    options.key_name = Some(key.shared_name());
    let lease = app.admit(key).await?;
    let handle = app.gw.chat_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let id = format!("msg_{}", polygateway_actors::runtime::new_id());
    if !call.stream {
        let response = tokio::time::timeout_at(deadline, handle.chat_with(call.messages, options))
            .await
            .map_err(|_| ApiError::timeout(timeout))??;
        drop(lease);
        let mut r = axum::Json(message_json(&id, &call.model, &response)).into_response();
        if let Ok(v) = response.source_name.parse() {
            r.headers_mut().insert("x-pgw-source", v);
        }
        return Ok(r);
    }
    let mut stream = handle.chat_stream(call.messages, options);
    let first = match tokio::time::timeout_at(deadline, stream.next()).await {
        Err(_) => return Err(ApiError::timeout(timeout)),
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(Some(Ok(first))) => Some(first),
        Ok(None) => None,
    };
    let events = futures::stream::iter(first.map(Ok)).chain(stream);
    let body = event_stream(id, call.model, events, deadline, app.stop.clone(), lease);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}

/// Bytes gathered into one write at most, when several events are ready at once (as the chat
/// ingress's relay does).
const BATCH_BYTES: usize = 16 << 10;

/// Silence after which a `ping` event is sent.
const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// One SSE frame, its data written straight into `out`. The event types below list their
/// fields in sorted order, the order `serde_json::Value` writes them in (tests check it).
fn frame(out: &mut BytesMut, event: &str, data: &impl Serialize) {
    out.put_slice(b"event: ");
    out.put_slice(event.as_bytes());
    out.put_slice(b"\ndata: ");
    // Serialising plain structs of strings and numbers cannot fail.
    let _ = serde_json::to_writer((&mut *out).writer(), data);
    out.put_slice(b"\n\n");
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct BlockStart<'a> {
    content_block: StartBlock<'a>,
    index: i64,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The block a `content_block_start` opens, empty.
#[derive(Serialize)]
#[serde(untagged)]
enum StartBlock<'a> {
    Thinking {
        signature: &'static str,
        thinking: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Text {
        text: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    ToolUse {
        id: &'a str,
        input: Empty,
        name: &'a str,
        /// What the source needs back with the call (Gemini's thought signature), as the
        /// non-streamed `tool_use` block carries it.
        #[serde(skip_serializing_if = "Option::is_none")]
        provider_specific_fields: Option<&'a Value>,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

/// A `content_block_delta`'s `delta`: its one field and its type (each field sorts before
/// `type`, as a `Value` writes them).
struct DeltaBody<'a> {
    /// `{"text":` and the like: the delta opened, its field's key.
    field: &'static str,
    value: &'a str,
    /// `,"type":"text_delta"},"index":` and the like: its type, the delta closed, the next key.
    kind: &'static str,
}

impl<'a> DeltaBody<'a> {
    fn thinking(value: &'a str) -> Self {
        Self {
            field: r#"{"thinking":"#,
            value,
            kind: r#","type":"thinking_delta"},"index":"#,
        }
    }

    fn text(value: &'a str) -> Self {
        Self {
            field: r#"{"text":"#,
            value,
            kind: r#","type":"text_delta"},"index":"#,
        }
    }

    fn json(value: &'a str) -> Self {
        Self {
            field: r#"{"partial_json":"#,
            value,
            kind: r#","type":"input_json_delta"},"index":"#,
        }
    }

    fn signature(value: &'a str) -> Self {
        Self {
            field: r#"{"signature":"#,
            value,
            kind: r#","type":"signature_delta"},"index":"#,
        }
    }
}

#[derive(Serialize)]
struct BlockStop {
    index: i64,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct MessageDelta<'a> {
    delta: StopDelta<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
    usage: Usage,
}

#[derive(Serialize)]
struct StopDelta<'a> {
    stop_reason: &'a str,
    stop_sequence: Option<()>,
}

/// An event that is its type alone (`message_stop`, `ping`).
#[derive(Serialize)]
struct Bare {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// Which content block is open in a stream.
#[derive(PartialEq, Clone, Copy)]
enum Open {
    None,
    Thinking,
    Text,
    Tool(u32),
}

/// The Anthropic event stream of one governed stream: `message_start`, then per block
/// `content_block_start` / deltas / `content_block_stop`, `message_delta` with the stop reason
/// and usage, `message_stop`; a `ping` every 10 s of silence; an `error` event on failure.
struct Writer {
    open: Open,
    index: i64,
    /// The open thinking block's signature was sent (as the source streamed it).
    signed: bool,
}

impl Writer {
    /// `message_start`: the message as far as it is known, usage all zero (the whole usage
    /// comes in `message_delta`, which the SDKs' accumulators merge). Written from its pieces
    /// (all but the id and model are constant), keys in sorted order as a `Value` writes them.
    fn start(id: &str, model: &str, out: &mut BytesMut) {
        json_pieces::write(
            out,
            &[
                Piece::Raw("event: message_start\ndata: {\"message\":{\"content\":[],\"id\":"),
                Piece::Str(id),
                Piece::Raw(",\"model\":"),
                Piece::Str(model),
                Piece::Raw(
                    ",\"role\":\"assistant\",\"stop_reason\":null,\"stop_sequence\":null,\
                     \"type\":\"message\",\"usage\":{\"cache_creation\":\
                     {\"ephemeral_1h_input_tokens\":0,\"ephemeral_5m_input_tokens\":0},\
                     \"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\
                     \"input_tokens\":0,\"output_tokens\":0}},\"type\":\"message_start\"}\n\n",
                ),
            ],
        );
    }

    fn switch(&mut self, to: Open, start: StartBlock<'_>, out: &mut BytesMut) {
        if self.open == to {
            return;
        }
        self.close(out);
        self.index += 1;
        self.open = to;
        self.signed = false;
        frame(
            out,
            "content_block_start",
            &BlockStart {
                content_block: start,
                index: self.index,
                kind: "content_block_start",
            },
        );
    }

    fn close(&mut self, out: &mut BytesMut) {
        if self.open != Open::None {
            frame(
                out,
                "content_block_stop",
                &BlockStop {
                    index: self.index,
                    kind: "content_block_stop",
                },
            );
            self.open = Open::None;
        }
    }

    /// A `content_block_delta` frame, written from its pieces: it is the one written per
    /// delta, so only its value is escaped ([`json_pieces`]).
    fn delta(&self, delta: DeltaBody<'_>, out: &mut BytesMut) {
        // The block index is never negative once a block is open.
        let index = u64::try_from(self.index).unwrap_or_default();
        json_pieces::write(
            out,
            &[
                Piece::Raw("event: content_block_delta\ndata: {\"delta\":"),
                Piece::Raw(delta.field),
                Piece::Str(delta.value),
                Piece::Raw(delta.kind),
                Piece::Num(index),
                Piece::Raw(",\"type\":\"content_block_delta\"}\n\n"),
            ],
        );
    }

    fn event(&mut self, ev: &ChatEvent, out: &mut BytesMut) {
        match ev {
            ChatEvent::Reasoning(t) => {
                let start = StartBlock::Thinking {
                    signature: "",
                    thinking: "",
                    kind: "thinking",
                };
                self.switch(Open::Thinking, start, out);
                self.delta(DeltaBody::thinking(t), out);
            }
            ChatEvent::Content(t) | ChatEvent::Refusal(t) => {
                let start = StartBlock::Text {
                    text: "",
                    kind: "text",
                };
                self.switch(Open::Text, start, out);
                self.delta(DeltaBody::text(t), out);
            }
            ChatEvent::ToolCall(d) => {
                let start = StartBlock::ToolUse {
                    id: d.id.as_deref().unwrap_or_default(),
                    input: Empty {},
                    name: d.name.as_deref().unwrap_or_default(),
                    provider_specific_fields: d.extra.get(PROVIDER_FIELDS),
                    kind: "tool_use",
                };
                self.switch(Open::Tool(d.index), start, out);
                if !d.arguments.is_empty() {
                    self.delta(DeltaBody::json(&d.arguments), out);
                }
            }
            // The signature as the source streamed it: the block's last delta, before the
            // next block, as Anthropic sends it (an answer with thinking then text or a tool
            // call keeps its signature through the stream).
            ChatEvent::ThinkingSignature(s) => {
                if self.open == Open::Thinking {
                    self.delta(DeltaBody::signature(s), out);
                    self.signed = true;
                }
            }
            ChatEvent::Done(r) => self.done(r, out),
        }
    }

    fn done(&mut self, r: &LlmResponse, out: &mut BytesMut) {
        // Signatures arrive with the whole answer: the open thinking block gets its own before
        // it closes; blocks the stream never showed (a replayed cache hit) are sent whole.
        if self.open == Open::Thinking && !self.signed {
            if let Some(ThinkingBlock::Thinking {
                signature: Some(s), ..
            }) = r.thinking_blocks.first()
            {
                self.delta(DeltaBody::signature(s), out);
            }
        }
        self.close(out);
        let delta = MessageDelta {
            delta: StopDelta {
                stop_reason: stop_reason(r),
                stop_sequence: None,
            },
            kind: "message_delta",
            usage: usage(r),
        };
        frame(out, "message_delta", &delta);
        frame(
            out,
            "message_stop",
            &Bare {
                kind: "message_stop",
            },
        );
    }
}

/// What one streamed answer's body holds between its writes.
struct Relay<S> {
    events: std::pin::Pin<Box<S>>,
    writer: Writer,
    /// `message_start`, still to be written (with the first event).
    head: Option<(String, String)>,
    finished: bool,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When the last event was written; a `ping` follows `PING_EVERY` of silence.
    quiet_since: tokio::time::Instant,
    ping: std::pin::Pin<Box<tokio::time::Sleep>>,
    stop: tokio_util::sync::CancellationToken,
    _lease: Option<crate::server::auth::limits::KeyLease>,
}

impl<S> Relay<S>
where
    S: Stream<Item = Result<ChatEvent, crate::GatewayError>> + Send + 'static,
{
    /// Appends the frames of one item of the governed stream (`None`: it ended).
    fn encode(&mut self, next: Option<Result<ChatEvent, crate::GatewayError>>, out: &mut BytesMut) {
        match next {
            Some(Ok(ev)) => {
                self.finished = matches!(ev, ChatEvent::Done(_));
                self.writer.event(&ev, out);
            }
            None => {
                self.finished = true;
                error_frame(out, "api_error", "the stream ended without an answer");
            }
            Some(Err(e)) => {
                self.finished = true;
                let e = ApiError::from(e);
                let (_, kind) = anthropic_kind(e.status);
                error_frame(out, kind, &e.message);
            }
        }
    }

    /// The next write: every frame ready now, waiting for one at least.
    async fn next_write(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        // The first write holds the head and often a short answer whole (about 1.3 KiB): room
        // for it rather than growing the buffer as it fills.
        let capacity = if self.head.is_some() { 2048 } else { 512 };
        let mut out = BytesMut::with_capacity(capacity);
        if let Some((id, model)) = self.head.take() {
            Writer::start(&id, &model, &mut out);
        }
        loop {
            let next = tokio::select! {
                biased;
                next = self.events.next() => next,
                () = self.stop.cancelled() => Some(Err(crate::GatewayError::Shutdown(
                    "the server's drain timeout passed".into()))),
                () = &mut self.deadline => {
                    self.finished = true;
                    error_frame(&mut out, "timeout_error", "the request timed out");
                    return Some(out.freeze());
                }
                () = &mut self.ping => {
                    let now = tokio::time::Instant::now();
                    if now >= self.quiet_since + PING_EVERY {
                        self.quiet_since = now;
                        self.ping.as_mut().reset(now + PING_EVERY);
                        frame(&mut out, "ping", &Bare { kind: "ping" });
                        return Some(out.freeze());
                    }
                    let at = self.quiet_since + PING_EVERY;
                    self.ping.as_mut().reset(at);
                    continue;
                }
            };
            self.encode(next, &mut out);
            break;
        }
        // Events already waiting go out in the same write: fewer frames for hyper and the
        // client, no added wait (only what is ready is taken).
        while !self.finished && out.len() < BATCH_BYTES {
            match self.events.next().now_or_never() {
                Some(next) => self.encode(next, &mut out),
                None => break,
            }
        }
        self.quiet_since = tokio::time::Instant::now();
        Some(out.freeze())
    }
}

fn event_stream(
    id: String,
    model: String,
    events: impl Stream<Item = Result<ChatEvent, crate::GatewayError>> + Send + 'static,
    deadline: tokio::time::Instant,
    stop: tokio_util::sync::CancellationToken,
    lease: Option<crate::server::auth::limits::KeyLease>,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
    let now = tokio::time::Instant::now();
    let relay = Relay {
        events: Box::pin(events),
        writer: Writer {
            open: Open::None,
            index: -1,
            signed: false,
        },
        head: Some((id, model)),
        finished: false,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        quiet_since: now,
        ping: Box::pin(tokio::time::sleep_until(now + PING_EVERY)),
        stop,
        _lease: lease,
    };
    futures::stream::unfold(relay, |mut relay| async move {
        let write = relay.next_write().await?;
        Some((Ok(write), relay))
    })
}

#[derive(Serialize)]
struct ErrorEvent<'a> {
    error: ErrorBody<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
}

fn error_frame(out: &mut BytesMut, kind: &str, message: &str) {
    let error = ErrorEvent {
        error: ErrorBody { message, kind },
        kind: "error",
    };
    frame(out, "error", &error);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_loop_request_becomes_canonical_messages() {
        let req = json!({
            "model": "LLM", "max_tokens": 64, "system": "be brief",
            "stop_sequences": ["END"], "tool_choice": {"type": "any"},
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "call w", "signature": "sig"},
                    {"type": "tool_use", "id": "tu_1", "name": "w", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": "rain"},
                    {"type": "text", "text": "and?", "cache_control": {"type": "ephemeral"}}]}
            ]
        });
        let c = to_canonical(&req).unwrap();
        assert_eq!(c.messages.len(), 5);
        assert_eq!(c.messages[0].role, Role::System);
        let call = &c.messages[2].tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.function.arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(c.messages[2].thinking_blocks.len(), 1);
        assert_eq!(c.messages[3].role, Role::Tool);
        assert_eq!(c.messages[3].tool_call_id.as_deref(), Some("tu_1"));
        // The cache_control block survives verbatim.
        let Some(Content::Parts(p)) = &c.messages[4].content else {
            panic!("parts")
        };
        assert!(
            matches!(&p[0], ContentPart::Other(v) if v["cache_control"]["type"] == "ephemeral")
        );
        assert_eq!(c.overlay["stop"], json!(["END"]));
        assert_eq!(c.overlay["tool_choice"], "required");
        assert_eq!(c.overlay["tools"][0]["function"]["name"], "w");
    }

    #[test]
    fn usage_splits_reads_and_writes_out_of_input() {
        let mut r = LlmResponse::new("hi");
        r.prompt_tokens = 100;
        r.cached_prompt_tokens = Some(30);
        r.cache_write_5m_tokens = Some(20);
        r.cache_write_1h_tokens = Some(10);
        r.completion_tokens = 5;
        let u = serde_json::to_value(usage(&r)).unwrap();
        assert_eq!(u["input_tokens"], 40);
        assert_eq!(u["cache_creation_input_tokens"], 30);
        assert_eq!(u["cache_read_input_tokens"], 30);
        assert_eq!(u["output_tokens"], 5);
        r.tool_calls = vec![ToolCall::function("t", "w", "{\"a\":1}")];
        r.finish_reason = Some("tool_calls".into());
        let m = message_json("msg_1", "LLM", &r);
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["content"][1]["input"]["a"], 1);
    }

    /// The frames of an event stream: (event, data).
    fn frames(out: &[u8]) -> Vec<(String, String)> {
        let text = std::str::from_utf8(out).unwrap();
        assert!(text.ends_with("\n\n"), "{text}");
        text.split_terminator("\n\n")
            .map(|f| {
                let (event, data) = f.split_once('\n').unwrap();
                let event = event.strip_prefix("event: ").unwrap();
                (
                    event.to_owned(),
                    data.strip_prefix("data: ").unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn stream_frames_are_written_as_a_json_value_writes_them() {
        let mut out = BytesMut::new();
        Writer::start("msg_1", "LLM \"quoted\"", &mut out);
        let mut w = Writer {
            open: Open::None,
            index: -1,
            signed: false,
        };
        let mut extra = Map::new();
        extra.insert(
            PROVIDER_FIELDS.into(),
            json!({"thought_signature": "sig-1"}),
        );
        let mut r = LlmResponse::new("he said \"hi\"\n");
        r.tool_calls = vec![ToolCall::function("t1", "w", "{\"a\":1}")];
        r.finish_reason = Some("tool_calls".into());
        r.prompt_tokens = 12;
        r.completion_tokens = 3;
        let events = [
            ChatEvent::Reasoning("hm".into()),
            ChatEvent::ThinkingSignature("s".into()),
            ChatEvent::Content("he said \"hi\"\n".into()),
            ChatEvent::ToolCall(crate::types::ToolCallDelta {
                index: 0,
                id: Some("t1".into()),
                name: Some("w".into()),
                arguments: "{\"a\"".into(),
                extra,
            }),
            ChatEvent::ToolCall(crate::types::ToolCallDelta {
                index: 0,
                arguments: ":1}".into(),
                ..Default::default()
            }),
            ChatEvent::Done(Box::new(r.clone())),
        ];
        for ev in &events {
            w.event(ev, &mut out);
        }
        error_frame(&mut out, "api_error", "the stream \"ended\"");
        frame(&mut out, "ping", &Bare { kind: "ping" });
        let frames = frames(&out);
        let kinds: Vec<&str> = frames.iter().map(|(e, _)| e.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "error",
                "ping",
            ]
        );
        let values: Vec<Value> = frames
            .iter()
            .map(|(event, data)| {
                let v: Value = serde_json::from_str(data).unwrap();
                // Byte for byte what a `Value` of the event writes (sorted keys).
                assert_eq!(&v.to_string(), data);
                assert_eq!(v["type"], event.as_str());
                v
            })
            .collect();
        assert_eq!(
            values[0],
            json!({"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "model": "LLM \"quoted\"",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0,
                          "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                             "ephemeral_1h_input_tokens": 0},
                          "output_tokens": 0}}})
        );
        assert_eq!(
            values[1]["content_block"],
            json!({"type": "thinking", "thinking": "", "signature": ""})
        );
        assert_eq!(
            values[3]["delta"],
            json!({"type": "signature_delta", "signature": "s"})
        );
        assert_eq!(
            values[6],
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "text_delta", "text": "he said \"hi\"\n"}})
        );
        // The call's start carries what its source needs back, as the whole answer's block.
        assert_eq!(
            values[8]["content_block"],
            json!({"type": "tool_use", "id": "t1", "name": "w", "input": {},
                   "provider_specific_fields": {"thought_signature": "sig-1"}})
        );
        assert_eq!(values[10]["delta"]["partial_json"], ":1}");
        assert_eq!(
            values[12],
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": usage(&r)})
        );
        assert_eq!(
            values[14],
            json!({"type": "error", "error": {"type": "api_error",
                                              "message": "the stream \"ended\""}})
        );
    }

    #[test]
    fn errors_map_to_anthropic_statuses() {
        assert_eq!(anthropic_kind(503), (529, "overloaded_error"));
        assert_eq!(anthropic_kind(401), (401, "authentication_error"));
        assert_eq!(anthropic_kind(429), (429, "rate_limit_error"));
    }
}
