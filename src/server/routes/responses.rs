//! OpenAI's Responses API: `POST /v1/responses` (streamed and not). A request — `input` as a
//! string or items (messages with `input_text`/`input_image` parts, `function_call`,
//! `function_call_output`), `instructions`, function tools, `tool_choice`, `reasoning`,
//! `text.format`, `max_output_tokens` — is translated into the canonical call and goes through
//! the governed path of `/v1/chat/completions`; the answer comes back as a `response` object or
//! the Responses event stream. Stateless: nothing is stored, so `previous_response_id` and
//! `GET /v1/responses/{id}` are refused with a 400 / 404 naming the alternative (send the whole
//! conversation as `input`). Errors are in OpenAI's shape.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::ScopeKind;
use crate::gateway::ChatEvent;
use crate::openai::completion::now_s;
use crate::openai::request::{options_for, response_format, Format};
use crate::server::call_order::with_call_order;
use crate::server::errors::ApiError;
use crate::server::json_pieces::{self, Piece};
use crate::server::routes::openai::body_bytes;
use crate::server::state::App;
use crate::types::{Content, ContentPart, ImageUrl, LlmResponse, Message, Role, ToolCall};

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(async |scope| create(&app, &headers, body, scope).await)
        .await
}

/// `GET /v1/responses/{id}`: nothing is stored.
pub(crate) async fn retrieve(Path(id): Path<String>) -> Response {
    let mut e = ApiError::not_found(&format!("/v1/responses/{id}"));
    e.0.message = format!(
        "response {id:?} was not stored: this gateway is stateless (store is never kept); \
         keep the output items you need and send the whole conversation as input"
    );
    e.into_response()
}

fn bad(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The canonical form of a Responses request.
pub(crate) struct Canonical {
    pub(crate) model: String,
    pub(crate) messages: Vec<Message>,
    pub(crate) overlay: Map<String, Value>,
    pub(crate) format: Option<Value>,
    pub(crate) stream: bool,
    pub(crate) user: Option<String>,
}

fn role_of(s: Option<&str>) -> Result<Role, ApiError> {
    Ok(match s {
        Some("user") | None => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        Some("developer") => Role::Developer,
        Some(other) => return Err(bad(format!("unknown role {other:?}"), "input")),
    })
}

fn part_of(part: &Value) -> ContentPart {
    match part["type"].as_str() {
        Some("input_text" | "output_text") => ContentPart::Text {
            text: part["text"].as_str().unwrap_or_default().to_string(),
        },
        Some("input_image") if part["image_url"].is_string() => ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: part["image_url"].as_str().unwrap_or_default().to_string(),
                detail: part["detail"].as_str().map(str::to_string),
            },
        },
        _ => ContentPart::Other(part.clone()),
    }
}

/// Translate a Responses request body into the canonical call.
pub(crate) fn to_canonical(req: &Value) -> Result<Canonical, ApiError> {
    let model = req["model"]
        .as_str()
        .ok_or_else(|| bad("model: a string is required", "model"))?
        .to_string();
    if req
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(bad(
            "previous_response_id is not served: this gateway stores no responses; send the \
             whole conversation (the earlier input and output items) as input",
            "previous_response_id",
        ));
    }
    let mut messages = Vec::new();
    if let Some(i) = req["instructions"].as_str() {
        messages.push(Message::developer(i));
    }
    match &req["input"] {
        Value::String(s) => messages.push(Message::user(s.clone())),
        Value::Array(items) => {
            for item in items {
                match item["type"].as_str() {
                    Some("message") | None => {
                        let role = role_of(item["role"].as_str())?;
                        let content = match &item["content"] {
                            Value::String(s) => Content::Text(s.clone()),
                            Value::Array(parts) => {
                                let parts: Vec<ContentPart> = parts.iter().map(part_of).collect();
                                if role == Role::Assistant
                                    && parts.iter().all(|p| matches!(p, ContentPart::Text { .. }))
                                {
                                    Content::Text(
                                        parts
                                            .iter()
                                            .filter_map(|p| match p {
                                                ContentPart::Text { text } => Some(text.as_str()),
                                                _ => None,
                                            })
                                            .collect(),
                                    )
                                } else {
                                    Content::Parts(parts)
                                }
                            }
                            _ => return Err(bad("a message item needs content", "input")),
                        };
                        messages.push(Message::with_content(role, content));
                    }
                    Some("function_call") => {
                        let call = ToolCall::function(
                            item["call_id"].as_str().unwrap_or_default(),
                            item["name"].as_str().unwrap_or_default(),
                            item["arguments"].as_str().unwrap_or("{}"),
                        );
                        // Calls of one turn join the assistant message before them, its text
                        // included: one answer's `message` and `function_call` items are one
                        // assistant turn (as they are in chat and Anthropic's shapes).
                        match messages.last_mut() {
                            Some(m) if m.role == Role::Assistant => {
                                m.tool_calls.get_or_insert_with(Vec::new).push(call)
                            }
                            _ => messages.push(Message::assistant_tool_calls(vec![call])),
                        }
                    }
                    Some("function_call_output") => {
                        let output = match &item["output"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        messages.push(Message::tool_result(
                            item["call_id"].as_str().unwrap_or_default(),
                            output,
                        ));
                    }
                    // Reasoning items carry no signature a chat source could check: dropped.
                    Some("reasoning") => {}
                    Some(other) => {
                        return Err(bad(
                            format!("input item type {other:?} is not served"),
                            "input",
                        ))
                    }
                }
            }
        }
        _ => return Err(bad("input must be a string or an array of items", "input")),
    }
    let mut overlay = Map::new();
    if let Some(n) = req.get("max_output_tokens").filter(|v| !v.is_null()) {
        overlay.insert("max_tokens".into(), n.clone());
    }
    for k in ["temperature", "top_p", "parallel_tool_calls"] {
        if let Some(v) = req.get(k).filter(|v| !v.is_null()) {
            overlay.insert(k.into(), v.clone());
        }
    }
    if let Some(effort) = req["reasoning"]["effort"].as_str() {
        overlay.insert("reasoning_effort".into(), json!(effort));
    }
    if let Some(tools) = req["tools"].as_array() {
        let mut out = Vec::new();
        for t in tools {
            if t["type"] != "function" {
                return Err(bad(
                    format!("tool type {} is not served: only function tools", t["type"]),
                    "tools",
                ));
            }
            let mut function = json!({"name": t["name"],
                "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
            for k in ["description", "strict"] {
                if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                    function[k] = v.clone();
                }
            }
            out.push(json!({"type": "function", "function": function}));
        }
        overlay.insert("tools".into(), Value::Array(out));
    }
    if let Some(choice) = req.get("tool_choice").filter(|v| !v.is_null()) {
        let mapped = match choice {
            Value::String(_) => choice.clone(),
            _ if choice["type"] == "function" => {
                json!({"type": "function", "function": {"name": choice["name"]}})
            }
            _ => return Err(bad("tool_choice: a mode or a function", "tool_choice")),
        };
        overlay.insert("tool_choice".into(), mapped);
    }
    let format = match &req["text"]["format"] {
        Value::Null => None,
        f if f["type"] == "json_schema" => Some(json!({"type": "json_schema", "json_schema": {
            "name": f["name"], "schema": f["schema"], "strict": f["strict"]}})),
        f => Some(f.clone()),
    };
    Ok(Canonical {
        model,
        messages,
        overlay,
        format,
        stream: req["stream"] == true,
        user: req["user"].as_str().map(str::to_string),
    })
}

/// `[]` or `[x]`.
struct Seq01<T>(Option<T>);

impl<T: Serialize> Serialize for Seq01<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(usize::from(self.0.is_some())))?;
        if let Some(x) = &self.0 {
            seq.serialize_element(x)?;
        }
        seq.end()
    }
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

// The Responses objects and events below list their fields in sorted order: the order a
// `serde_json::Value` writes them in, so the bytes are what a `Value` of them would write
// (the tests compare both).

/// A reasoning item's summary part.
#[derive(Serialize)]
struct SummaryText<'a> {
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> SummaryText<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            kind: "summary_text",
        }
    }
}

/// A message item's text part.
#[derive(Serialize)]
struct OutputText<'a> {
    annotations: [(); 0],
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> OutputText<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            annotations: [],
            text,
            kind: "output_text",
        }
    }
}

/// An output item: whole, or as `response.output_item.added` shows it (in progress, empty).
#[derive(Serialize)]
#[serde(untagged)]
enum OutputItem<'a> {
    Reasoning {
        id: &'a str,
        summary: Seq01<SummaryText<'a>>,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Message {
        content: Seq01<OutputText<'a>>,
        id: &'a str,
        role: &'static str,
        status: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Call {
        arguments: &'a str,
        call_id: &'a str,
        id: &'a str,
        name: &'a str,
        status: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
}

impl<'a> OutputItem<'a> {
    /// A reasoning item, with its summary once it is done.
    fn reasoning(id: &'a str, summary: Option<&'a str>) -> Self {
        Self::Reasoning {
            id,
            summary: Seq01(summary.map(SummaryText::new)),
            kind: "reasoning",
        }
    }

    /// A message item, with its text once it is done.
    fn message(id: &'a str, text: Option<&'a str>) -> Self {
        Self::Message {
            status: if text.is_some() {
                "completed"
            } else {
                "in_progress"
            },
            content: Seq01(text.map(OutputText::new)),
            id,
            role: "assistant",
            kind: "message",
        }
    }

    /// A function call item, with its arguments once it is done.
    fn call(id: &'a str, call_id: &'a str, name: &'a str, arguments: Option<&'a str>) -> Self {
        Self::Call {
            status: if arguments.is_some() {
                "completed"
            } else {
                "in_progress"
            },
            arguments: arguments.unwrap_or_default(),
            call_id,
            id,
            name,
            kind: "function_call",
        }
    }
}

/// The output items of an answer (none while it is in progress): reasoning, the message,
/// function calls.
struct Outputs<'a> {
    id: &'a str,
    r: Option<&'a LlmResponse>,
}

impl Serialize for Outputs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let Some(r) = self.r else {
            return s.serialize_seq(Some(0))?.end();
        };
        let id = self.id;
        // A `text.format` answer is the ladder's validated JSON, not the raw text it came in.
        let text = r
            .structured_data
            .as_ref()
            .map_or(std::borrow::Cow::Borrowed(r.content.as_str()), |v| {
                std::borrow::Cow::Owned(v.to_string())
            });
        let message = !text.is_empty() || r.tool_calls.is_empty();
        let thought = !r.thinking.is_empty();
        let len = usize::from(thought) + usize::from(message) + r.tool_calls.len();
        let mut seq = s.serialize_seq(Some(len))?;
        if thought {
            seq.serialize_element(&OutputItem::reasoning(
                &format!("rs_{id}"),
                Some(&r.thinking),
            ))?;
        }
        if message {
            seq.serialize_element(&OutputItem::message(&format!("msg_{id}"), Some(&text)))?;
        }
        for (i, c) in r.tool_calls.iter().enumerate() {
            let item_id = format!("fc_{id}_{i}");
            let call = OutputItem::call(
                &item_id,
                &c.id,
                &c.function.name,
                Some(&c.function.arguments),
            );
            seq.serialize_element(&call)?;
        }
        seq.end()
    }
}

/// The output items of an answer as values (what `response.output` holds).
#[cfg(test)]
pub(crate) fn output_items(id: &str, r: &LlmResponse) -> Vec<Value> {
    match serde_json::to_value(Outputs { id, r: Some(r) }) {
        Ok(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

/// The Responses `usage` of an answer.
#[derive(Serialize)]
struct Usage {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl Usage {
    fn of(r: &LlmResponse) -> Self {
        Self {
            input_tokens: r.prompt_tokens,
            input_tokens_details: CachedTokens {
                cached_tokens: r.cached_prompt_tokens.unwrap_or(0),
            },
            output_tokens: r.completion_tokens,
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: r.reasoning_tokens.unwrap_or(0),
            },
            total_tokens: r.prompt_tokens + r.completion_tokens,
        }
    }
}

#[derive(Serialize)]
struct Incomplete {
    reason: &'static str,
}

/// The `response` object.
#[derive(Serialize)]
struct ResponseObject<'a> {
    created_at: u64,
    error: Option<()>,
    #[serde(serialize_with = "response_id")]
    id: &'a str,
    incomplete_details: Option<Incomplete>,
    metadata: Empty,
    model: &'a str,
    object: &'static str,
    output: Outputs<'a>,
    parallel_tool_calls: bool,
    status: &'static str,
    store: bool,
    tool_choice: &'static str,
    tools: [(); 0],
    usage: Option<Usage>,
}

fn response_id<S: serde::Serializer>(id: &&str, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("resp_{id}"))
}

/// The `response` object; `r` is `None` while it is in progress.
fn response_object<'a>(
    id: &'a str,
    model: &'a str,
    created: u64,
    r: Option<&'a LlmResponse>,
) -> ResponseObject<'a> {
    let (status, incomplete) = match r.map(|r| r.finish_reason.as_deref()) {
        None => ("in_progress", None),
        Some(Some("length")) => ("incomplete", Some("max_output_tokens")),
        Some(Some("content_filter")) => ("incomplete", Some("content_filter")),
        Some(_) => ("completed", None),
    };
    ResponseObject {
        created_at: created,
        error: None,
        id,
        incomplete_details: incomplete.map(|reason| Incomplete { reason }),
        metadata: Empty {},
        model,
        object: "response",
        output: Outputs { id, r },
        parallel_tool_calls: true,
        status,
        store: false,
        tool_choice: "auto",
        tools: [],
        usage: r.map(Usage::of),
    }
}

/// The `response` object as a value.
fn response_json(id: &str, model: &str, created: u64, r: Option<&LlmResponse>) -> Value {
    serde_json::to_value(response_object(id, model, created, r)).unwrap_or_default()
}

async fn create(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let req: Value = serde_json::from_slice(&body_bytes(body)?)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}"), None))?;
    let call = to_canonical(&req)?;
    let scope = app.scope_for(key, &call.model, ScopeKind::Chat)?;
    *scope_out = Some(scope.clone());
    let Format {
        mut options,
        schema,
        structured,
    } = response_format(
        call.format,
        with_call_order(
            options_for(Some(key.tenant()), call.user).overlay(call.overlay),
            key,
            headers,
        )?,
    )?;
    options.key_budget = key.budget().map(|b| (key.name().to_string(), b));
    options.key_name = Some(key.shared_name());
    let lease = app.admit(key).await?;
    let handle = app.gw.chat_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let id = polygateway_actors::runtime::new_id();
    let created = now_s();
    let events: std::pin::Pin<Box<dyn Stream<Item = _> + Send>> = if !call.stream || structured {
        let answer = async {
            match schema {
                Some(schema) => {
                    handle
                        .chat_with_schema(call.messages, options, schema)
                        .await
                }
                None => handle.chat_with(call.messages, options).await,
            }
        };
        let mut response = tokio::time::timeout_at(deadline, answer)
            .await
            .map_err(|_| ApiError::timeout(timeout))??;
        if let Some(data) = &response.structured_data {
            response.content = data.to_string();
        }
        if !call.stream {
            drop(lease);
            return Ok(
                axum::Json(response_json(&id, &call.model, created, Some(&response)))
                    .into_response(),
            );
        }
        let events: Vec<_> = crate::gateway::whole_answer_deltas(&response)
            .into_iter()
            .map(|d| Ok(ChatEvent::from(d)))
            .chain([Ok(ChatEvent::Done(Box::new(response)))])
            .collect();
        Box::pin(futures::stream::iter(events))
    } else {
        let mut stream = handle.chat_stream(call.messages, options);
        let first = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(ApiError::timeout(timeout)),
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(Some(Ok(first))) => Some(first),
            Ok(None) => None,
        };
        Box::pin(futures::stream::iter(first.map(Ok)).chain(stream))
    };
    let writer = Writer {
        id,
        model: call.model,
        created,
        seq: 0,
        open: None,
        items: 0,
    };
    let relay = Relay {
        events,
        writer,
        started: false,
        finished: false,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        stop: app.stop.clone(),
        _lease: lease,
    };
    let body = futures::stream::unfold(relay, |mut relay| async move {
        let write = relay.next_write().await?;
        Some((Ok::<_, std::convert::Infallible>(write), relay))
    });
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

/// What one streamed answer's body holds between its writes.
struct Relay {
    events: std::pin::Pin<Box<dyn Stream<Item = Result<ChatEvent, crate::GatewayError>> + Send>>,
    writer: Writer,
    /// `response.created` and `response.in_progress` were written.
    started: bool,
    finished: bool,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    stop: tokio_util::sync::CancellationToken,
    _lease: Option<crate::server::auth::limits::KeyLease>,
}

impl Relay {
    /// Appends the frames of one item of the governed stream (`None`: it ended).
    fn encode(&mut self, next: Option<Result<ChatEvent, crate::GatewayError>>, out: &mut BytesMut) {
        self.finished = match next {
            Some(Ok(ev)) => self.writer.event(ev, out),
            None => {
                let w = &mut self.writer;
                w.error("server_error", "the stream ended without an answer", out);
                true
            }
            Some(Err(e)) => {
                let e = ApiError::from(e);
                self.writer.error(e.code, &e.message, out);
                true
            }
        };
    }

    /// The next write: every frame ready now, waiting for one at least.
    async fn next_write(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        // The first write holds the two head events (about 1 KiB) and often a short answer
        // whole (about 3.5 KiB): room for it rather than growing the buffer as it fills.
        let capacity = if self.started { 1024 } else { 4096 };
        let mut out = BytesMut::with_capacity(capacity);
        if !self.started {
            self.started = true;
            self.writer.start(&mut out);
        }
        let next = tokio::select! {
            biased;
            next = self.events.next() => next,
            () = self.stop.cancelled() => Some(Err(crate::GatewayError::Shutdown(
                "the server's drain timeout passed".into()))),
            () = &mut self.deadline => {
                self.finished = true;
                self.writer.error("request_timeout", "the request timed out", &mut out);
                return Some(out.freeze());
            }
        };
        self.encode(next, &mut out);
        // Events already waiting go out in the same write: fewer frames for hyper and the
        // client, no added wait (only what is ready is taken).
        while !self.finished && out.len() < BATCH_BYTES {
            match self.events.next().now_or_never() {
                Some(next) => self.encode(next, &mut out),
                None => break,
            }
        }
        Some(out.freeze())
    }
}

/// `response.created`, `.in_progress`, `.completed`, `.incomplete`.
#[derive(Serialize)]
struct ResponseEvent<'a> {
    response: &'a ResponseObject<'a>,
    sequence_number: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.output_item.added` and `.done`.
#[derive(Serialize)]
struct ItemEvent<'a> {
    item: OutputItem<'a>,
    output_index: u64,
    sequence_number: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.reasoning_summary_part.added` and `.done`.
#[derive(Serialize)]
struct SummaryPartEvent<'a> {
    item_id: &'a str,
    output_index: u64,
    part: SummaryText<'a>,
    sequence_number: u64,
    summary_index: u8,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.reasoning_summary_text.done`.
#[derive(Serialize)]
struct SummaryDone<'a> {
    item_id: &'a str,
    output_index: u64,
    sequence_number: u64,
    summary_index: u8,
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.function_call_arguments.done`.
#[derive(Serialize)]
struct ArgumentsDone<'a> {
    arguments: &'a str,
    item_id: &'a str,
    name: &'a str,
    output_index: u64,
    sequence_number: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `error`.
#[derive(Serialize)]
struct ErrorEvent<'a> {
    code: &'a str,
    message: &'a str,
    param: Option<()>,
    sequence_number: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn frame(out: &mut BytesMut, kind: &str, data: &impl Serialize) {
    out.put_slice(b"event: ");
    out.put_slice(kind.as_bytes());
    out.put_slice(b"\ndata: ");
    // Serialising maps of strings and numbers cannot fail.
    let _ = serde_json::to_writer((&mut *out).writer(), data);
    out.put_slice(b"\n\n");
}

/// The item open in a stream and what it has gathered.
enum Item {
    Reasoning {
        id: String,
        text: String,
    },
    Text {
        id: String,
        text: String,
    },
    Call {
        index: u32,
        id: String,
        call_id: String,
        name: String,
        args: String,
    },
}

/// Writes the Responses event sequence of one governed stream.
struct Writer {
    id: String,
    model: String,
    created: u64,
    seq: u64,
    open: Option<Item>,
    items: u64,
}

impl Writer {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// `response.created` and `response.in_progress`: the response in progress.
    fn start(&mut self, out: &mut BytesMut) {
        // The object is the same in both events: serialised once.
        let response = response_object(&self.id, &self.model, self.created, None);
        let response = serde_json::to_string(&response).unwrap_or_default();
        for kind in ["response.created", "response.in_progress"] {
            let sequence_number = self.next_seq();
            json_pieces::write(
                out,
                &[
                    Piece::Raw("event: "),
                    Piece::Raw(kind),
                    Piece::Raw("\ndata: {\"response\":"),
                    Piece::Raw(&response),
                    Piece::Raw(",\"sequence_number\":"),
                    Piece::Num(sequence_number),
                    Piece::Raw(",\"type\":\""),
                    Piece::Raw(kind),
                    Piece::Raw("\"}\n\n"),
                ],
            );
        }
    }

    fn output_index(&self) -> u64 {
        self.items - 1
    }

    fn item_event(&mut self, kind: &'static str, item: OutputItem<'_>, out: &mut BytesMut) {
        let event = ItemEvent {
            item,
            output_index: self.output_index(),
            sequence_number: self.seq,
            kind,
        };
        frame(out, kind, &event);
        self.seq += 1;
    }

    /// `response.content_part.added` and `.done` of the open message item: written from their
    /// pieces, as the deltas between them are.
    fn text_part(&mut self, kind: &'static str, item_id: &str, text: &str, out: &mut BytesMut) {
        let output_index = self.output_index();
        let sequence_number = self.next_seq();
        json_pieces::write(
            out,
            &[
                Piece::Raw("event: "),
                Piece::Raw(kind),
                Piece::Raw("\ndata: {\"content_index\":0,\"item_id\":"),
                Piece::Str(item_id),
                Piece::Raw(",\"output_index\":"),
                Piece::Num(output_index),
                Piece::Raw(",\"part\":{\"annotations\":[],\"text\":"),
                Piece::Str(text),
                Piece::Raw(",\"type\":\"output_text\"},\"sequence_number\":"),
                Piece::Num(sequence_number),
                Piece::Raw(",\"type\":\""),
                Piece::Raw(kind),
                Piece::Raw("\"}\n\n"),
            ],
        );
    }

    fn close(&mut self, out: &mut BytesMut) {
        let Some(item) = self.open.take() else { return };
        let output_index = self.output_index();
        match &item {
            Item::Reasoning { id, text } => {
                let kind = "response.reasoning_summary_text.done";
                let done = SummaryDone {
                    item_id: id,
                    output_index,
                    sequence_number: self.next_seq(),
                    summary_index: 0,
                    text,
                    kind,
                };
                frame(out, kind, &done);
                let kind = "response.reasoning_summary_part.done";
                let done = SummaryPartEvent {
                    item_id: id,
                    output_index,
                    part: SummaryText::new(text),
                    sequence_number: self.next_seq(),
                    summary_index: 0,
                    kind,
                };
                frame(out, kind, &done);
                let item = OutputItem::reasoning(id, Some(text));
                self.item_event("response.output_item.done", item, out);
            }
            Item::Text { id, text } => {
                json_pieces::write(
                    out,
                    &[
                        Piece::Raw(
                            "event: response.output_text.done\n\
                             data: {\"content_index\":0,\"item_id\":",
                        ),
                        Piece::Str(id),
                        Piece::Raw(",\"logprobs\":[],\"output_index\":"),
                        Piece::Num(output_index),
                        Piece::Raw(",\"sequence_number\":"),
                        Piece::Num(self.next_seq()),
                        Piece::Raw(",\"text\":"),
                        Piece::Str(text),
                        Piece::Raw(",\"type\":\"response.output_text.done\"}\n\n"),
                    ],
                );
                self.text_part("response.content_part.done", id, text, out);
                let item = OutputItem::message(id, Some(text));
                self.item_event("response.output_item.done", item, out);
            }
            Item::Call {
                id,
                call_id,
                name,
                args,
                ..
            } => {
                let kind = "response.function_call_arguments.done";
                let done = ArgumentsDone {
                    arguments: args,
                    item_id: id,
                    name,
                    output_index,
                    sequence_number: self.next_seq(),
                    kind,
                };
                frame(out, kind, &done);
                let item = OutputItem::call(id, call_id, name, Some(args));
                self.item_event("response.output_item.done", item, out);
            }
        }
    }

    /// Closes the open item and opens `item`: `response.output_item.added`, and the added
    /// part of a message or reasoning item.
    fn open(&mut self, item: Item, out: &mut BytesMut) {
        self.close(out);
        self.items += 1;
        let output_index = self.output_index();
        match &item {
            Item::Reasoning { id, .. } => {
                self.item_event(
                    "response.output_item.added",
                    OutputItem::reasoning(id, None),
                    out,
                );
                let kind = "response.reasoning_summary_part.added";
                let added = SummaryPartEvent {
                    item_id: id,
                    output_index,
                    part: SummaryText::new(""),
                    sequence_number: self.next_seq(),
                    summary_index: 0,
                    kind,
                };
                frame(out, kind, &added);
            }
            Item::Text { id, .. } => {
                self.item_event(
                    "response.output_item.added",
                    OutputItem::message(id, None),
                    out,
                );
                self.text_part("response.content_part.added", id, "", out);
            }
            Item::Call {
                id, call_id, name, ..
            } => {
                let added = OutputItem::call(id, call_id, name, None);
                self.item_event("response.output_item.added", added, out);
            }
        }
        self.open = Some(item);
    }

    /// One canonical event; true when the stream is over.
    fn event(&mut self, ev: ChatEvent, out: &mut BytesMut) -> bool {
        match ev {
            ChatEvent::Reasoning(t) => {
                if !matches!(self.open, Some(Item::Reasoning { .. })) {
                    let id = format!("rs_{}_{}", self.id, self.items);
                    let item = Item::Reasoning {
                        id,
                        text: String::new(),
                    };
                    self.open(item, out);
                }
                let output_index = self.output_index();
                let sequence_number = self.seq;
                if let Some(Item::Reasoning { id, text }) = &mut self.open {
                    text.push_str(&t);
                    json_pieces::write(
                        out,
                        &[
                            Piece::Raw(
                                "event: response.reasoning_summary_text.delta\ndata: {\"delta\":",
                            ),
                            Piece::Str(&t),
                            Piece::Raw(",\"item_id\":"),
                            Piece::Str(id),
                            Piece::Raw(",\"output_index\":"),
                            Piece::Num(output_index),
                            Piece::Raw(",\"sequence_number\":"),
                            Piece::Num(sequence_number),
                            Piece::Raw(
                                ",\"summary_index\":0,\
                                 \"type\":\"response.reasoning_summary_text.delta\"}\n\n",
                            ),
                        ],
                    );
                    self.seq += 1;
                }
            }
            ChatEvent::Content(t) | ChatEvent::Refusal(t) => {
                if !matches!(self.open, Some(Item::Text { .. })) {
                    let id = format!("msg_{}_{}", self.id, self.items);
                    let item = Item::Text {
                        id,
                        text: String::new(),
                    };
                    self.open(item, out);
                }
                let output_index = self.output_index();
                let sequence_number = self.seq;
                if let Some(Item::Text { id, text }) = &mut self.open {
                    text.push_str(&t);
                    json_pieces::write(
                        out,
                        &[
                            Piece::Raw(
                                "event: response.output_text.delta\n\
                                 data: {\"content_index\":0,\"delta\":",
                            ),
                            Piece::Str(&t),
                            Piece::Raw(",\"item_id\":"),
                            Piece::Str(id),
                            Piece::Raw(",\"logprobs\":[],\"output_index\":"),
                            Piece::Num(output_index),
                            Piece::Raw(",\"sequence_number\":"),
                            Piece::Num(sequence_number),
                            Piece::Raw(",\"type\":\"response.output_text.delta\"}\n\n"),
                        ],
                    );
                    self.seq += 1;
                }
            }
            ChatEvent::ToolCall(d) => {
                if !matches!(&self.open, Some(Item::Call { index, .. }) if *index == d.index) {
                    let item = Item::Call {
                        index: d.index,
                        id: format!("fc_{}_{}", self.id, self.items),
                        call_id: d.id.clone().unwrap_or_default(),
                        name: d.name.clone().unwrap_or_default(),
                        args: String::new(),
                    };
                    self.open(item, out);
                }
                let output_index = self.output_index();
                let sequence_number = self.seq;
                if let Some(Item::Call { id, args, .. }) = &mut self.open {
                    if !d.arguments.is_empty() {
                        args.push_str(&d.arguments);
                        json_pieces::write(
                            out,
                            &[
                                Piece::Raw(
                                    "event: response.function_call_arguments.delta\n\
                                     data: {\"delta\":",
                                ),
                                Piece::Str(&d.arguments),
                                Piece::Raw(",\"item_id\":"),
                                Piece::Str(id),
                                Piece::Raw(",\"output_index\":"),
                                Piece::Num(output_index),
                                Piece::Raw(",\"sequence_number\":"),
                                Piece::Num(sequence_number),
                                Piece::Raw(
                                    ",\"type\":\"response.function_call_arguments.delta\"}\n\n",
                                ),
                            ],
                        );
                        self.seq += 1;
                    }
                }
            }
            // Responses has no signed reasoning to send it in.
            ChatEvent::ThinkingSignature(_) => {}
            ChatEvent::Done(r) => {
                self.close(out);
                let sequence_number = self.next_seq();
                let response = response_object(&self.id, &self.model, self.created, Some(&r));
                let kind = if response.status == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                let event = ResponseEvent {
                    response: &response,
                    sequence_number,
                    kind,
                };
                frame(out, kind, &event);
                return true;
            }
        }
        false
    }

    fn error(&mut self, code: &str, message: &str, out: &mut BytesMut) {
        let event = ErrorEvent {
            code,
            message,
            param: None,
            sequence_number: self.next_seq(),
            kind: "error",
        };
        frame(out, "error", &event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_canonical_messages_and_previous_response_id_is_refused() {
        let req = json!({"model": "LLM", "instructions": "be brief", "max_output_tokens": 9,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "rain"}],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "w"}});
        let c = to_canonical(&req).unwrap();
        assert_eq!(c.messages.len(), 4);
        assert_eq!(c.messages[0].role, Role::Developer);
        assert_eq!(c.messages[2].tool_calls.as_ref().unwrap()[0].id, "c1");
        assert_eq!(c.messages[3].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(c.overlay["max_tokens"], 9);
        assert_eq!(c.overlay["tools"][0]["function"]["name"], "w");
        let mut req = req;
        req["previous_response_id"] = json!("resp_1");
        let e = to_canonical(&req).err().unwrap();
        assert_eq!(e.param, Some("previous_response_id"));
        assert!(e.message.contains("whole conversation"));
    }

    #[test]
    fn stream_events_are_numbered_and_written_as_a_json_value_writes_them() {
        let mut w = Writer {
            id: "abc".into(),
            model: "LLM".into(),
            created: 7,
            seq: 0,
            open: None,
            items: 0,
        };
        let mut out = BytesMut::new();
        w.start(&mut out);
        let mut r = LlmResponse::new("he said \"hi\"");
        r.thinking = "hm".into();
        r.tool_calls = vec![ToolCall::function("c1", "w", "{\"a\":1}")];
        let events = [
            ChatEvent::Reasoning("hm".into()),
            ChatEvent::Content("he said ".into()),
            ChatEvent::Content("\"hi\"".into()),
            ChatEvent::ToolCall(crate::types::ToolCallDelta {
                index: 0,
                id: Some("c1".into()),
                name: Some("w".into()),
                arguments: "{\"a\"".into(),
                ..Default::default()
            }),
            ChatEvent::ToolCall(crate::types::ToolCallDelta {
                index: 0,
                arguments: ":1}".into(),
                ..Default::default()
            }),
        ];
        for ev in events {
            assert!(!w.event(ev, &mut out));
        }
        assert!(w.event(ChatEvent::Done(Box::new(r)), &mut out));
        w.error("server_error", "x", &mut out);
        let text = std::str::from_utf8(&out).unwrap();
        let frames: Vec<(&str, Value)> = text
            .split_terminator("\n\n")
            .map(|f| {
                let (event, data) = f.split_once('\n').unwrap();
                let data = data.strip_prefix("data: ").unwrap();
                let v: Value = serde_json::from_str(data).unwrap();
                // Byte for byte what a `Value` of the event writes (sorted keys).
                assert_eq!(v.to_string(), data);
                (event.strip_prefix("event: ").unwrap(), v)
            })
            .collect();
        for (n, (event, v)) in frames.iter().enumerate() {
            assert_eq!(v["type"], *event);
            assert_eq!(v["sequence_number"], n as u64, "{v}");
        }
        let (created, in_progress) = (&frames[0].1, &frames[1].1);
        assert_eq!(created["response"], in_progress["response"]);
        assert_eq!(created["response"]["status"], "in_progress");
        assert_eq!(created["response"]["id"], "resp_abc");
        let deltas: Vec<&Value> = frames
            .iter()
            .filter(|(e, _)| *e == "response.output_text.delta")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(deltas.len(), 2);
        assert_eq!(deltas[1]["delta"], "\"hi\"");
        assert_eq!(deltas[1]["logprobs"], json!([]));
        assert_eq!(deltas[1]["content_index"], 0);
        assert!(frames
            .iter()
            .any(|(e, v)| *e == "response.reasoning_summary_text.delta"
                && v["summary_index"] == 0
                && v["delta"] == "hm"));
        assert!(frames
            .iter()
            .any(|(e, v)| *e == "response.function_call_arguments.delta" && v["delta"] == ":1}"));
        // The message item's events written from their pieces carry its id, index and text.
        let of = |kind: &str| &frames.iter().find(|(e, _)| *e == kind).unwrap().1;
        let item_id = &deltas[0]["item_id"];
        let part = json!({"annotations": [], "text": "", "type": "output_text"});
        let added = of("response.content_part.added");
        assert_eq!((&added["item_id"], &added["part"]), (item_id, &part));
        assert_eq!(added["output_index"], deltas[0]["output_index"]);
        let done = of("response.output_text.done");
        assert_eq!(
            (&done["item_id"], &done["text"]),
            (item_id, &json!("he said \"hi\""))
        );
        assert_eq!(done["logprobs"], json!([]));
        let part_done = of("response.content_part.done");
        assert_eq!(part_done["part"]["text"], "he said \"hi\"");
        assert_eq!(part_done["output_index"], deltas[0]["output_index"]);
        let (last, error) = (&frames[frames.len() - 2], &frames[frames.len() - 1]);
        assert_eq!(last.0, "response.completed");
        assert_eq!(last.1["response"]["output"].as_array().unwrap().len(), 3);
        assert_eq!(error.1["code"], "server_error");
    }

    /// The `Value` builders the typed objects replaced, kept as the reference they must equal.
    mod reference {
        use super::*;

        /// The Responses `usage` of an answer (the `Value` shapes the typed writer replaced).
        fn usage(r: &LlmResponse) -> Value {
            json!({
                "input_tokens": r.prompt_tokens,
                "input_tokens_details": {"cached_tokens": r.cached_prompt_tokens.unwrap_or(0)},
                "output_tokens": r.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": r.reasoning_tokens.unwrap_or(0)},
                "total_tokens": r.prompt_tokens + r.completion_tokens,
            })
        }

        fn message_item(id: &str, text: &str) -> Value {
            json!({"type": "message", "id": id, "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }

        fn call_item(id: &str, call: &ToolCall) -> Value {
            json!({"type": "function_call", "id": id, "call_id": call.id, "name": call.function.name,
               "arguments": call.function.arguments, "status": "completed"})
        }

        fn reasoning_item(id: &str, text: &str) -> Value {
            json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]})
        }

        /// The output items of an answer: reasoning, the message, function calls.
        pub(super) fn output_items(id: &str, r: &LlmResponse) -> Vec<Value> {
            let mut out = Vec::new();
            if !r.thinking.is_empty() {
                out.push(reasoning_item(&format!("rs_{id}"), &r.thinking));
            }
            // A `text.format` answer is the ladder's validated JSON, not the raw text it came in.
            let text = r
                .structured_data
                .as_ref()
                .map_or_else(|| r.content.clone(), Value::to_string);
            if !text.is_empty() || r.tool_calls.is_empty() {
                out.push(message_item(&format!("msg_{id}"), &text));
            }
            for (i, c) in r.tool_calls.iter().enumerate() {
                out.push(call_item(&format!("fc_{id}_{i}"), c));
            }
            out
        }

        /// The `response` object; `r` is `None` while it is in progress.
        pub(super) fn response_json(
            id: &str,
            model: &str,
            created: u64,
            r: Option<&LlmResponse>,
        ) -> Value {
            let (status, incomplete) = match r.and_then(|r| r.finish_reason.as_deref()) {
                _ if r.is_none() => ("in_progress", Value::Null),
                Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
                Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
                _ => ("completed", Value::Null),
            };
            json!({
                "id": format!("resp_{id}"), "object": "response", "created_at": created,
                "status": status, "model": model, "error": Value::Null,
                "incomplete_details": incomplete,
                "output": r.map(|r| output_items(id, r)).unwrap_or_default(),
                "usage": r.map(usage),
                "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "store": false,
                "metadata": {},
            })
        }
    }

    fn answers() -> Vec<LlmResponse> {
        let plain = LlmResponse::new("he said \"hi\"\n");
        let mut rich = LlmResponse::new("");
        rich.thinking = "hm…".into();
        rich.tool_calls = vec![
            ToolCall::function("c1", "w", "{\"a\":1}"),
            ToolCall::function("c2", "x", ""),
        ];
        rich.prompt_tokens = 120;
        rich.completion_tokens = 7;
        rich.cached_prompt_tokens = Some(100);
        rich.reasoning_tokens = Some(3);
        let mut cut = LlmResponse::new("partial");
        cut.finish_reason = Some("length".into());
        let mut filtered = LlmResponse::new("");
        filtered.finish_reason = Some("content_filter".into());
        let mut structured = LlmResponse::new("{ \"raw\": 1 }");
        structured.structured_data = Some(json!({"b": [1, 2], "a": "x"}));
        structured.finish_reason = Some("stop".into());
        vec![plain, rich, cut, filtered, structured]
    }

    #[test]
    fn typed_objects_equal_the_value_shapes_byte_for_byte() {
        let expected = reference::response_json("abc", "LLM", 7, None);
        let typed = serde_json::to_string(&response_object("abc", "LLM", 7, None)).unwrap();
        assert_eq!(typed, expected.to_string());
        for r in answers() {
            let expected = reference::response_json("abc", "L\"M", 7, Some(&r));
            let typed = response_object("abc", "L\"M", 7, Some(&r));
            assert_eq!(serde_json::to_string(&typed).unwrap(), expected.to_string());
            assert_eq!(response_json("abc", "L\"M", 7, Some(&r)), expected);
            assert_eq!(output_items("abc", &r), reference::output_items("abc", &r));
        }
    }
}
