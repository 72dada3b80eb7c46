//! A mock of Anthropic's Messages API (`POST /v1/messages`), written from Anthropic's API
//! reference rather than from this crate's translation: it checks a request as the API does
//! (the key as `x-api-key` or a bearer token, `anthropic-version`, a required `max_tokens`, alternating roles, every
//! `tool_result` answering a `tool_use` of the turn before, thinking blocks sent back with the
//! signature it gave them, a tool call of a thinking turn preceded by its thinking) and refuses
//! with the API's error shape and status; it answers with the API's message and its event
//! stream, counting prompt-cache writes and reads of the prefixes marked with `cache_control`.
//! A final `assistant` turn is a prefill, as the API documents: refused when it ends with
//! whitespace, else answered with the continuation only (the rest of the mock's text after it).
//! Structured outputs (`output_config.format` with a JSON schema) answer JSON text of the schema,
//! except on the Claude 3 models (`claude-3…`), which refuse them as the older models do.
//! Faults: the API's error statuses (`429 rate_limit_error` with `retry-after`, `529
//! overloaded_error`, `400`, `401`, `403`), an `error` event after content, a connection cut
//! mid-block, a stream that never sends `message_stop`, a slow first event.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The API key the mock accepts.
///
/// ```
/// use polygateway_testkit::mock_anthropic::MOCK_ANTHROPIC_KEY;
/// assert!(MOCK_ANTHROPIC_KEY.starts_with("sk-ant-"));
/// ```
pub const MOCK_ANTHROPIC_KEY: &str = "sk-ant-mock";

/// How the mock answers the requests that pass its checks.
///
/// ```
/// use polygateway_testkit::mock_anthropic::AnthropicFault;
/// assert_ne!(AnthropicFault::Overloaded, AnthropicFault::None);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AnthropicFault {
    /// Answer.
    None,
    /// `429 rate_limit_error` with `retry-after` (seconds).
    RateLimited(u64),
    /// `529 overloaded_error`.
    Overloaded,
    /// `500 api_error`.
    ApiError,
    /// `400 invalid_request_error` whatever the request.
    InvalidRequest,
    /// `401 authentication_error` whatever the key.
    Unauthorized,
    /// `403 permission_error`.
    Forbidden,
    /// Stream some text, then an `error` event (`overloaded_error`), then end.
    ErrorEventAfterContent,
    /// Stream some text, then close the connection in the middle of the block.
    CloseMidBlock,
    /// Stream the whole answer but never `message_stop`.
    NoMessageStop,
    /// Wait this long before the first event (or the whole answer).
    SlowFirstEvent(Duration),
}

/// One request the mock received: its headers of interest and its JSON body.
///
/// ```
/// use polygateway_testkit::mock_anthropic::AnthropicRequest;
/// let r = AnthropicRequest { api_key: Some("k".into()), version: None, beta: None, body: serde_json::json!({}) };
/// assert!(r.version.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicRequest {
    /// `x-api-key`.
    pub api_key: Option<String>,
    /// `anthropic-version`.
    pub version: Option<String>,
    /// `anthropic-beta`.
    pub beta: Option<String>,
    /// The body.
    pub body: Value,
}

struct Shared {
    fault: Mutex<AnthropicFault>,
    text: Mutex<String>,
    requests: Mutex<Vec<AnthropicRequest>>,
    /// Prefixes written to the prompt cache (digests).
    cached: Mutex<HashSet<String>>,
    /// `anthropic-ratelimit-requests-{limit,remaining}` to send, if any.
    rate_limit: Mutex<Option<(u64, u64)>>,
    seq: Mutex<u64>,
}

/// The mock server (stops when dropped).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_testkit::mock_anthropic::{MockAnthropic, MOCK_ANTHROPIC_KEY};
/// let mock = MockAnthropic::start().await;
/// let answer: serde_json::Value = reqwest::Client::new()
///     .post(format!("{}/messages", mock.base_url()))
///     .header("x-api-key", MOCK_ANTHROPIC_KEY)
///     .header("anthropic-version", "2023-06-01")
///     .json(&serde_json::json!({"model": "claude-mock", "max_tokens": 64,
///         "messages": [{"role": "user", "content": "Hi"}]}))
///     .send().await.unwrap().json().await.unwrap();
/// assert_eq!(answer["type"], "message");
/// assert_eq!(answer["content"][0]["text"], "Hello from Claude");
/// assert_eq!(mock.requests().len(), 1);
/// # }
/// ```
pub struct MockAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl MockAnthropic {
    /// A healthy mock on a free loopback port.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_anthropic::MockAnthropic::start().await;
    /// assert!(mock.requests().is_empty());
    /// # }
    /// ```
    pub async fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0 for the Anthropic mock");
        let addr = listener.local_addr().expect("the mock's address");
        let shared = Arc::new(Shared {
            fault: Mutex::new(AnthropicFault::None),
            text: Mutex::new("Hello from Claude".into()),
            requests: Mutex::new(Vec::new()),
            cached: Mutex::new(HashSet::new()),
            rate_limit: Mutex::new(None),
            seq: Mutex::new(0),
        });
        let cancel = CancellationToken::new();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(shared.clone());
        let stop = cancel.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        Self {
            addr,
            shared,
            cancel,
        }
    }

    /// The base URL a source names (`…/v1`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_anthropic::MockAnthropic::start().await;
    /// // LLM__ANTHROPIC__1__BASE_URL
    /// assert!(mock.base_url().ends_with("/v1"));
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answer every following request with `fault`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::mock_anthropic::{AnthropicFault, MockAnthropic};
    /// let mock = MockAnthropic::start().await;
    /// mock.set_fault(AnthropicFault::Overloaded);
    /// # }
    /// ```
    pub fn set_fault(&self, fault: AnthropicFault) {
        *lock(&self.shared.fault) = fault;
    }

    /// The text of a plain answer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_anthropic::MockAnthropic::start().await;
    /// mock.set_text("Bonjour");
    /// # }
    /// ```
    pub fn set_text(&self, text: &str) {
        *lock(&self.shared.text) = text.to_owned();
    }

    /// Send `anthropic-ratelimit-requests-limit` / `-remaining` (and a reset 1 s ahead).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_anthropic::MockAnthropic::start().await;
    /// mock.set_rate_limit_headers(50, 2);
    /// # }
    /// ```
    pub fn set_rate_limit_headers(&self, limit: u64, remaining: u64) {
        *lock(&self.shared.rate_limit) = Some((limit, remaining));
    }

    /// Every request received so far, in order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_anthropic::MockAnthropic::start().await;
    /// let _ = reqwest::Client::new()
    ///     .post(format!("{}/messages", mock.base_url()))
    ///     .body("{}")
    ///     .send()
    ///     .await;
    /// // Recorded even when refused (here: no key).
    /// assert_eq!(mock.requests().len(), 1);
    /// # }
    /// ```
    pub fn requests(&self) -> Vec<AnthropicRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The signature the mock gives a thinking block (and checks when it comes back).
    ///
    /// ```
    /// use polygateway_testkit::mock_anthropic::MockAnthropic;
    /// assert_ne!(MockAnthropic::signature("a"), MockAnthropic::signature("b"));
    /// ```
    pub fn signature(thinking: &str) -> String {
        hex::encode(Sha256::digest(format!("mock-signature:{thinking}")))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn error(status: u16, kind: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let parsed: Option<Value> = serde_json::from_str(&body).ok();
    lock(&shared.requests).push(AnthropicRequest {
        api_key: header("x-api-key"),
        version: header("anthropic-version"),
        beta: header("anthropic-beta"),
        body: parsed.clone().unwrap_or(Value::Null),
    });
    let fault = lock(&shared.fault).clone();
    match fault {
        AnthropicFault::RateLimited(secs) => {
            let mut r = error(
                429,
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            );
            r.headers_mut().insert("retry-after", secs.into());
            return r;
        }
        AnthropicFault::Overloaded => return error(529, "overloaded_error", "Overloaded"),
        AnthropicFault::ApiError => return error(500, "api_error", "Internal server error"),
        AnthropicFault::InvalidRequest => {
            return error(
                400,
                "invalid_request_error",
                "messages: roles must alternate",
            )
        }
        AnthropicFault::Unauthorized => {
            return error(401, "authentication_error", "invalid x-api-key")
        }
        AnthropicFault::Forbidden => {
            return error(
                403,
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            )
        }
        _ => {}
    }
    // The API takes the key as `x-api-key` or, as the official SDKs now send it, as a bearer
    // token.
    let bearer = header("authorization").and_then(|a| a.strip_prefix("Bearer ").map(str::to_owned));
    if header("x-api-key").or(bearer).as_deref() != Some(MOCK_ANTHROPIC_KEY) {
        return error(401, "authentication_error", "invalid x-api-key");
    }
    if header("anthropic-version").is_none() {
        return error(
            400,
            "invalid_request_error",
            "anthropic-version: header is required",
        );
    }
    let Some(request) = parsed else {
        return error(
            400,
            "invalid_request_error",
            "There was an error parsing the body",
        );
    };
    if let Err(why) = check(&request) {
        return error(400, "invalid_request_error", &why);
    }
    let message = {
        let mut seq = lock(&shared.seq);
        *seq += 1;
        answer(&shared, &request, *seq)
    };
    if let AnthropicFault::SlowFirstEvent(wait) = fault {
        tokio::time::sleep(wait).await;
    }
    let mut response = if request["stream"] == true {
        stream(message, &fault)
    } else {
        ([("content-type", "application/json")], message.to_string()).into_response()
    };
    if let Some((limit, remaining)) = *lock(&shared.rate_limit) {
        let reset = humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() + Duration::from_secs(1),
        )
        .to_string();
        let h = response.headers_mut();
        h.insert("anthropic-ratelimit-requests-limit", limit.into());
        h.insert("anthropic-ratelimit-requests-remaining", remaining.into());
        if let Ok(v) = reset.parse() {
            h.insert("anthropic-ratelimit-requests-reset", v);
        }
    }
    response
}

/// The request checks the API makes that a translation can get wrong.
fn check(request: &Value) -> Result<(), String> {
    if !request["model"].is_string() {
        return Err("model: Field required".into());
    }
    if request["max_tokens"].as_u64().is_none_or(|n| n < 1) {
        return Err("max_tokens: Field required".into());
    }
    let turns = request["messages"]
        .as_array()
        .filter(|t| !t.is_empty())
        .ok_or("messages: at least one message is required")?;
    let thinking_on = request["thinking"]["type"] == "enabled";
    let mut previous_tool_uses: Vec<String> = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        let role = turn["role"].as_str().unwrap_or_default();
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            return Err(format!(
                "messages: roles must alternate between \"user\" and \"assistant\", starting with \"user\"; messages.{i} is \"{role}\""
            ));
        }
        let blocks: Vec<Value> = match &turn["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let mut tool_uses = Vec::new();
        let mut seen_thinking = false;
        for (j, block) in blocks.iter().enumerate() {
            match block["type"].as_str().unwrap_or_default() {
                "text" if block["text"].as_str().is_none_or(str::is_empty) => {
                    return Err(format!(
                        "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                    ));
                }
                "tool_result" => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    if !previous_tool_uses.iter().any(|u| u == id) {
                        return Err(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                "thinking" => {
                    let thinking = block["thinking"].as_str().unwrap_or_default();
                    if block["signature"].as_str()
                        != Some(MockAnthropic::signature(thinking).as_str())
                    {
                        return Err(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        ));
                    }
                    seen_thinking = true;
                }
                "redacted_thinking" => seen_thinking = true,
                "tool_use" => {
                    if thinking_on && role == "assistant" && !seen_thinking {
                        return Err(format!(
                            "messages.{i}.content.{j}: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block"
                        ));
                    }
                    tool_uses.push(block["id"].as_str().unwrap_or_default().to_owned());
                }
                _ => {}
            }
        }
        previous_tool_uses = tool_uses;
        // A final assistant turn is a prefill, which may not end with whitespace.
        let last_text = blocks.last().and_then(|b| b["text"].as_str());
        if i + 1 == turns.len()
            && role == "assistant"
            && last_text.is_some_and(|t| t.ends_with(char::is_whitespace))
        {
            return Err(
                "messages: final assistant content cannot end with trailing whitespace".into(),
            );
        }
    }
    if thinking_on && request["tool_choice"]["type"] == "tool" {
        return Err("Thinking may not be enabled when tool_choice forces tool use.".into());
    }
    if let Some(format) = request.get("output_config").and_then(|c| c.get("format")) {
        // Structured outputs (`output_config.format`): a JSON schema, on the models that have
        // them (the Claude 3 family does not).
        let model = request["model"].as_str().unwrap_or_default();
        if model.starts_with("claude-3") {
            return Err(format!(
                "output_config.format: structured outputs are not supported by {model}"
            ));
        }
        if format["type"] != "json_schema" || !format["schema"].is_object() {
            return Err(
                "output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}"
                    .into(),
            );
        }
    }
    Ok(())
}

/// A rough token count: words and punctuation runs.
fn tokens(text: &str) -> u64 {
    text.split_whitespace().count().max(1) as u64
}

/// The message the mock answers `request` with.
fn answer(shared: &Shared, request: &Value, seq: u64) -> Value {
    let turns = request["messages"].as_array().cloned().unwrap_or_default();
    let last = turns.last().cloned().unwrap_or(Value::Null);
    let last_blocks: Vec<Value> = match &last["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => Vec::new(),
    };
    let last_text: String = last_blocks
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let tool_result = last_blocks.iter().find(|b| b["type"] == "tool_result");
    // A final assistant turn is a prefill: the answer continues it and holds only the
    // continuation.
    let prefill = (last["role"] == "assistant").then_some(&last_text);
    let mut content = Vec::new();
    if request["thinking"]["type"] == "enabled" {
        let thinking = format!("Let me think about: {last_text}");
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": MockAnthropic::signature(&thinking)}));
    }
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    let forced = request["tool_choice"]["name"].as_str();
    let call_tool =
        tool_result.is_none() && !tools.is_empty() && request["tool_choice"]["type"] != "none";
    let stop_reason;
    if let Some(result) = tool_result {
        let said = match &result["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        content.push(json!({"type": "text", "text": format!("tool said: {said}")}));
        stop_reason = "end_turn";
    } else if let Some(prefix) = prefill {
        // The mock's answer after the prefix (a model's continuation of a prefix it would not
        // have written is its whole answer here).
        let text = lock(&shared.text).clone();
        let rest = text.strip_prefix(prefix.as_str()).unwrap_or(&text);
        content.push(json!({"type": "text", "text": rest}));
        stop_reason = "end_turn";
    } else if call_tool {
        let tool = forced
            .and_then(|name| tools.iter().find(|t| t["name"] == name))
            .unwrap_or(&tools[0]);
        let input = fill(&tool["input_schema"], &last_text);
        content.push(
            json!({"type": "tool_use", "id": format!("toolu_mock_{seq}"),
            "name": tool["name"], "input": input}),
        );
        stop_reason = "tool_use";
    } else if let Some(schema) = request.pointer("/output_config/format/schema") {
        // Structured outputs: the answer's text is JSON of the schema.
        content.push(json!({"type": "text", "text": fill(schema, &last_text).to_string()}));
        stop_reason = "end_turn";
    } else {
        content.push(json!({"type": "text", "text": *lock(&shared.text)}));
        stop_reason = "end_turn";
    }
    let (input, written, read, ttl_1h) = prompt_usage(shared, request);
    let output: u64 = content.iter().map(|b| tokens(&b.to_string())).sum();
    let mut creation = json!({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0});
    creation[if ttl_1h {
        "ephemeral_1h_input_tokens"
    } else {
        "ephemeral_5m_input_tokens"
    }] = json!(written);
    json!({
        "id": format!("msg_mock_{seq}"),
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": input,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "cache_creation": creation,
            "output_tokens": output,
        }
    })
}

/// An object for a tool's input schema: each property filled by its type.
fn fill(schema: &Value, text: &str) -> Value {
    let mut out = Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let value = match prop["type"].as_str() {
                Some("integer") | Some("number") => json!(42),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!(text),
            };
            out.insert(name.clone(), value);
        }
    } else {
        out.insert("query".into(), json!(text));
    }
    Value::Object(out)
}

/// Input tokens not cached, written to the cache, read from it, and whether the write was for
/// 1 h: the prefix up to the last block marked `cache_control` (tools, then system, then
/// messages, the API's order) is written the first time and read afterwards.
fn prompt_usage(shared: &Shared, request: &Value) -> (u64, u64, u64, bool) {
    let mut parts: Vec<Value> = Vec::new();
    parts.extend(request["tools"].as_array().cloned().unwrap_or_default());
    match &request["system"] {
        Value::String(s) => parts.push(json!({"type": "text", "text": s})),
        Value::Array(b) => parts.extend(b.iter().cloned()),
        _ => {}
    }
    for turn in request["messages"].as_array().into_iter().flatten() {
        match &turn["content"] {
            Value::String(s) => parts.push(json!({"type": "text", "text": s})),
            Value::Array(b) => parts.extend(b.iter().cloned()),
            _ => {}
        }
    }
    let total: u64 = parts.iter().map(|p| tokens(&p.to_string())).sum();
    let Some(mark) = parts.iter().rposition(|p| p.get("cache_control").is_some()) else {
        return (total, 0, 0, false);
    };
    let prefix = &parts[..=mark];
    let prefix_tokens: u64 = prefix.iter().map(|p| tokens(&p.to_string())).sum();
    let ttl_1h = prefix[mark]["cache_control"]["ttl"] == "1h";
    let digest = hex::encode(Sha256::digest(Value::Array(prefix.to_vec()).to_string()));
    let fresh = lock(&shared.cached).insert(digest);
    let rest = total - prefix_tokens;
    if fresh {
        (rest, prefix_tokens, 0, ttl_1h)
    } else {
        (rest, 0, prefix_tokens, false)
    }
}

/// The message as the API streams it, with `fault` applied.
fn stream(message: Value, fault: &AnthropicFault) -> Response {
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    events.push((
        "message_start".into(),
        json!({"type": "message_start", "message": start}),
    ));
    events.push(("ping".into(), json!({"type": "ping"})));
    let mut cut = false;
    for (index, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let kind = block["type"].as_str().unwrap_or_default();
        let empty = match kind {
            "text" => json!({"type": "text", "text": ""}),
            "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
            "tool_use" => {
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
            }
            _ => block.clone(),
        };
        events.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index, "content_block": empty}),
        ));
        let delta = |d: Value| {
            (
                "content_block_delta".to_string(),
                json!({"type": "content_block_delta", "index": index, "delta": d}),
            )
        };
        match kind {
            "text" => {
                let text = block["text"].as_str().unwrap_or_default();
                let (a, b) = text.split_at(text.len() / 2);
                events.push(delta(json!({"type": "text_delta", "text": a})));
                if matches!(fault, AnthropicFault::ErrorEventAfterContent) {
                    events.push(("error".into(), json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})));
                    cut = true;
                    break;
                }
                if matches!(fault, AnthropicFault::CloseMidBlock) {
                    cut = true;
                    break;
                }
                events.push(delta(json!({"type": "text_delta", "text": b})));
            }
            "thinking" => {
                events.push(delta(
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                ));
                events.push(delta(
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ));
            }
            "tool_use" => {
                let input = block["input"].to_string();
                let (a, b) = input.split_at(input.len() / 2);
                events.push(delta(
                    json!({"type": "input_json_delta", "partial_json": a}),
                ));
                events.push(delta(
                    json!({"type": "input_json_delta", "partial_json": b}),
                ));
            }
            _ => {}
        }
        events.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if !cut {
        events.push((
            "message_delta".into(),
            json!({"type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
            "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        ));
        if !matches!(fault, AnthropicFault::NoMessageStop) {
            events.push(("message_stop".into(), json!({"type": "message_stop"})));
        }
    }
    let close_abruptly = matches!(fault, AnthropicFault::CloseMidBlock);
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = events
        .into_iter()
        .map(|(name, data)| {
            Ok(bytes::Bytes::from(format!(
                "event: {name}\ndata: {data}\n\n"
            )))
        })
        .collect();
    // A cut comes after what was sent has had time to leave: the client reads the first
    // events, then the connection breaks (not a refused request).
    let cut = futures::stream::iter(close_abruptly.then_some(())).then(|()| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "cut mid-block",
        ))
    });
    let body = Body::from_stream(futures::stream::iter(chunks).chain(cut));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
