//! The OpenAI-compatible endpoints: `POST /v1/chat/completions` (streamed and not),
//! `POST /v1/embeddings` and `GET /v1/models`. Each request is authenticated by its virtual key,
//! mapped to a scope by its `model`, admitted by the key's limits, and then is one call of the
//! gateway's handles — the same governed path as any embedded caller; nothing here retries,
//! selects or limits upstreams. Not OCR ([`super::ocr`]) and not the operational endpoints.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::config::ScopeKind;
use crate::server::errors::ApiError;
use crate::server::sse::{self, ChunkHead, Relay};
use crate::server::state::App;
use crate::structured::SchemaRequest;
use crate::types::{CallOptions, LlmResponse, Message, Structured};

#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<Message>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    /// Sampling parameters, tools, `n`, logprobs and anything else: the call's overlay
    /// (docs/behaviour.md §2.2), passed through to the upstream.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct EmbeddingRequest {
    model: String,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<Value>,
    #[serde(default)]
    user: Option<String>,
}

pub(crate) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// OpenAI's `usage` object of an answer.
pub(crate) fn usage_json(r: &LlmResponse) -> Value {
    let mut usage = json!({
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
    });
    if let Some(cached) = r.cached_prompt_tokens {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if let Some(reasoning) = r.reasoning_tokens {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// The request body, or a 413/400 in OpenAI's shape.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        let mut err = ApiError::bad_request(format!("could not read the request body: {e}"), None);
        err.status = e.status();
        err
    })
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}"), None))
}

fn options_for(tenant: &str, user: Option<String>) -> CallOptions {
    let options = CallOptions::new().tenant_id(tenant);
    match user {
        Some(user) => options.meta_entry("user", user),
        None => options,
    }
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(async |scope| chat(&app, &headers, body, scope).await)
        .await
}

async fn chat(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let req: ChatRequest = parse(&body_bytes(body)?)?;
    let scope = app.scope_for(key, &req.model, ScopeKind::Chat)?;
    *scope_out = Some(scope.clone());
    let mut options = options_for(key.tenant(), req.user).overlay(req.rest);
    let mut structured = false;
    let mut schema = None;
    if let Some(format) = req.response_format {
        match format.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                // The model is asked for JSON by the caller's own format; the answer is
                // repaired into valid JSON (or refused as invalid) by the ladder.
                options = options
                    .overlay_param("response_format", format)
                    .structured(Structured::Json);
                structured = true;
            }
            Some("json_schema") => {
                schema = Some(schema_request(&format)?);
                structured = true;
            }
            _ => {
                return Err(ApiError::bad_request(
                    "response_format.type must be text, json_object or json_schema",
                    Some("response_format"),
                ));
            }
        }
    }
    let lease = app.admit(key).await?;
    let handle = app.gw.chat_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let head = ChunkHead {
        id: format!("chatcmpl-{}", polygateway_actors::assembly::new_id()),
        model: req.model,
        created: now_s(),
    };
    let include_usage = req.stream_options.unwrap_or_default().include_usage;

    if !req.stream || structured {
        // Structured answers come out of the ladder whole; a streamed request gets them as one
        // delta, the way a cache hit is replayed.
        let call = async {
            match schema {
                Some(schema) => handle.chat_with_schema(req.messages, options, schema).await,
                None => handle.chat_with(req.messages, options).await,
            }
        };
        let response = tokio::time::timeout_at(deadline, call)
            .await
            .map_err(|_| ApiError::timeout(timeout))??;
        if !req.stream {
            drop(lease);
            return Ok(completion(&head, &response));
        }
        let events: Vec<_> = crate::gateway::whole_answer_deltas(&response)
            .into_iter()
            .map(|d| Ok(crate::ChatEvent::from(d)))
            .chain([Ok(crate::ChatEvent::Done(Box::new(response)))])
            .collect();
        let stream = futures::stream::iter(events);
        let relay = Relay {
            head,
            stream: Box::pin(stream),
            first: None,
            include_usage,
            deadline,
            timeout,
            errors: app.errors.clone(),
            stop: app.stop.clone(),
            scope,
            _lease: lease,
        };
        return Ok(sse_response(relay));
    }

    let mut stream = handle.chat_stream(req.messages, options);
    // Until the first delta, failures are retried inside the call; the one that ends it is
    // answered with a proper status rather than inside a 200 stream.
    let first = match tokio::time::timeout_at(deadline, stream.next()).await {
        Err(_) => return Err(ApiError::timeout(timeout)),
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(first) => first.and_then(Result::ok),
    };
    let relay = Relay {
        head,
        stream: Box::pin(stream),
        first,
        include_usage,
        deadline,
        timeout,
        errors: app.errors.clone(),
        stop: app.stop.clone(),
        scope,
        _lease: lease,
    };
    Ok(sse_response(relay))
}

/// The schema of `response_format: {"type": "json_schema", "json_schema": {"name", "schema"}}`.
fn schema_request(format: &Value) -> Result<SchemaRequest, ApiError> {
    let invalid = |what: &str| {
        ApiError::bad_request(
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

fn sse_response(relay: Relay) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(sse::body(relay)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The assistant message of one choice, as OpenAI writes it: `content` is `null` beside tool
/// calls, a function call or a refusal when there is no text; `refusal` is always present.
fn message_json(
    content: &str,
    thinking: &str,
    tool_calls: &[crate::types::ToolCall],
    function_call: Option<&crate::types::FunctionCall>,
    refusal: Option<&str>,
) -> Value {
    let said_otherwise = !tool_calls.is_empty() || function_call.is_some() || refusal.is_some();
    let content = if content.is_empty() && said_otherwise {
        Value::Null
    } else {
        json!(content)
    };
    let mut message = json!({"role": "assistant", "content": content, "refusal": refusal});
    if !thinking.is_empty() {
        message["reasoning_content"] = json!(thinking);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    if let Some(call) = function_call {
        message["function_call"] = json!(call);
    }
    message
}

fn completion(head: &ChunkHead, r: &LlmResponse) -> Response {
    let first = json!({
        "index": 0,
        "message": message_json(&r.content, &r.thinking, &r.tool_calls, r.function_call.as_ref(),
            r.refusal.as_deref()),
        "logprobs": r.logprobs,
        "finish_reason": r.finish_reason.as_deref().unwrap_or("stop"),
    });
    let others = r.other_choices.iter().map(|c| {
        json!({
            "index": c.index,
            "message": message_json(&c.content, &c.thinking, &c.tool_calls,
                c.function_call.as_ref(), c.refusal.as_deref()),
            "logprobs": c.logprobs,
            "finish_reason": c.finish_reason.as_deref().unwrap_or("stop"),
        })
    });
    let choices: Vec<Value> = std::iter::once(first).chain(others).collect();
    let body = json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": choices,
        "usage": usage_json(r),
        "system_fingerprint": r.system_fingerprint,
    });
    let mut response = axum::Json(body).into_response();
    if let Ok(v) = r.source_name.parse() {
        response.headers_mut().insert("x-pgw-source", v);
    }
    response
}

/// `POST /v1/embeddings`.
pub(crate) async fn embeddings(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(async |scope| embed(&app, &headers, body, scope).await)
        .await
}

async fn embed(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let req: EmbeddingRequest = parse(&body_bytes(body)?)?;
    let scope = app.scope_for(key, &req.model, ScopeKind::Embeddings)?;
    *scope_out = Some(scope.clone());
    let texts: Vec<String> = match req.input {
        Value::String(s) => vec![s],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => {
            return Err(ApiError::bad_request(
                "input must be a string or an array of strings (token arrays are not served)",
                Some("input"),
            ))
        }
    };
    if texts.is_empty() {
        return Err(ApiError::bad_request(
            "input must not be empty",
            Some("input"),
        ));
    }
    if req.dimensions.is_some() {
        return Err(ApiError::bad_request(
            "dimensions is not served: the scope's model and EXPECTED_DIM decide the dimension",
            Some("dimensions"),
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "encoding_format must be float or base64",
                Some("encoding_format"),
            ))
        }
    };
    let lease = app.admit(key).await?;
    let handle = app.gw.embedding_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let out = tokio::time::timeout(
        timeout,
        handle.embed(texts, options_for(key.tenant(), req.user)),
    )
    .await
    .map_err(|_| ApiError::timeout(timeout))??;
    drop(lease);
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens},
    }))
    .into_response())
}

/// `GET /v1/models`: the scope names and aliases the key may use.
pub(crate) async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let key = match app.authenticate(&headers) {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    let data: Vec<Value> = app
        .models
        .iter()
        .filter(|(_, scope)| key.may_use(scope))
        .map(|(model, scope)| {
            json!({"id": model, "object": "model", "created": 0, "owned_by": "polygateway",
                   "scope": scope})
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
