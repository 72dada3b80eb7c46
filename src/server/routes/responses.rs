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

/// The Responses `usage` of an answer.
pub(crate) fn usage(r: &LlmResponse) -> Value {
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
pub(crate) fn output_items(id: &str, r: &LlmResponse) -> Vec<Value> {
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
fn response_json(id: &str, model: &str, created: u64, r: Option<&LlmResponse>) -> Value {
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
    options.key_name = Some(std::sync::Arc::from(key.name()));
    let lease = app.admit(key).await?;
    let handle = app.gw.chat_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let id = polygateway_actors::assembly::new_id();
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
        let mut out = BytesMut::with_capacity(1024);
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

/// An event's data with its `sequence_number` and `type`, written among the data's own keys in
/// sorted order (as a `serde_json::Value` writes them).
struct Tagged<'a> {
    data: &'a Map<String, Value>,
    seq: u64,
    kind: &'a str,
}

impl Serialize for Tagged<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.data.len() + 2))?;
        // 0: both to write, 1: `type` to write, 2: both written.
        let mut written = 0;
        for (k, v) in self.data {
            if written == 0 && k.as_str() > "sequence_number" {
                map.serialize_entry("sequence_number", &self.seq)?;
                written = 1;
            }
            if written == 1 && k.as_str() > "type" {
                map.serialize_entry("type", self.kind)?;
                written = 2;
            }
            map.serialize_entry(k, v)?;
        }
        if written == 0 {
            map.serialize_entry("sequence_number", &self.seq)?;
        }
        if written < 2 {
            map.serialize_entry("type", self.kind)?;
        }
        map.end()
    }
}

/// `response.output_text.delta` (fields in sorted order, as a `Value` writes them).
#[derive(Serialize)]
struct TextDelta<'a> {
    content_index: u8,
    delta: &'a str,
    item_id: &'a str,
    logprobs: [(); 0],
    output_index: u64,
    sequence_number: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.reasoning_summary_text.delta`.
#[derive(Serialize)]
struct SummaryDelta<'a> {
    delta: &'a str,
    item_id: &'a str,
    output_index: u64,
    sequence_number: u64,
    summary_index: u8,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `response.function_call_arguments.delta`.
#[derive(Serialize)]
struct ArgumentsDelta<'a> {
    delta: &'a str,
    item_id: &'a str,
    output_index: u64,
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
    fn emit(&mut self, kind: &str, data: Value, out: &mut BytesMut) {
        let empty = Map::new();
        let data = match &data {
            Value::Object(map) => map,
            _ => &empty,
        };
        let seq = self.next_seq();
        frame(out, kind, &Tagged { data, seq, kind });
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// `response.created` and `response.in_progress`: the response in progress, written once
    /// and sent in both.
    fn start(&mut self, out: &mut BytesMut) {
        let head = response_json(&self.id, &self.model, self.created, None).to_string();
        for kind in ["response.created", "response.in_progress"] {
            let seq = self.next_seq();
            out.put_slice(b"event: ");
            out.put_slice(kind.as_bytes());
            out.put_slice(b"\ndata: {\"response\":");
            out.put_slice(head.as_bytes());
            out.put_slice(b",\"sequence_number\":");
            out.put_slice(seq.to_string().as_bytes());
            out.put_slice(b",\"type\":\"");
            out.put_slice(kind.as_bytes());
            out.put_slice(b"\"}\n\n");
        }
    }

    fn output_index(&self) -> u64 {
        self.items - 1
    }

    fn close(&mut self, out: &mut BytesMut) {
        let Some(item) = self.open.take() else { return };
        let oi = self.output_index();
        match item {
            Item::Reasoning { id, text } => {
                let at = json!({"item_id": id, "output_index": oi, "summary_index": 0});
                let mut d = at.clone();
                d["text"] = json!(text);
                self.emit("response.reasoning_summary_text.done", d, out);
                let mut d = at;
                d["part"] = json!({"type": "summary_text", "text": text});
                self.emit("response.reasoning_summary_part.done", d, out);
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": oi, "item": reasoning_item(&id, &text)}),
                    out,
                );
            }
            Item::Text { id, text } => {
                let at = json!({"item_id": id, "output_index": oi, "content_index": 0});
                let mut d = at.clone();
                d["text"] = json!(text);
                d["logprobs"] = json!([]);
                self.emit("response.output_text.done", d, out);
                let mut d = at;
                d["part"] = json!({"type": "output_text", "text": text, "annotations": []});
                self.emit("response.content_part.done", d, out);
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": oi, "item": message_item(&id, &text)}),
                    out,
                );
            }
            Item::Call {
                id,
                call_id,
                name,
                args,
                ..
            } => {
                self.emit(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": oi, "name": name, "arguments": args}),
                    out,
                );
                let call = ToolCall::function(call_id, name, args);
                self.emit(
                    "response.output_item.done",
                    json!({"output_index": oi, "item": call_item(&id, &call)}),
                    out,
                );
            }
        }
    }

    fn open(&mut self, item: Item, added: Value, out: &mut BytesMut) {
        self.close(out);
        self.items += 1;
        let oi = self.output_index();
        self.emit(
            "response.output_item.added",
            json!({"output_index": oi, "item": added}),
            out,
        );
        self.open = Some(item);
    }

    /// One canonical event; true when the stream is over.
    fn event(&mut self, ev: ChatEvent, out: &mut BytesMut) -> bool {
        match ev {
            ChatEvent::Reasoning(t) => {
                if !matches!(self.open, Some(Item::Reasoning { .. })) {
                    let id = format!("rs_{}_{}", self.id, self.items);
                    self.open(
                        Item::Reasoning {
                            id: id.clone(),
                            text: String::new(),
                        },
                        json!({"type": "reasoning", "id": id, "summary": []}),
                        out,
                    );
                    self.emit(
                        "response.reasoning_summary_part.added",
                        json!({"item_id": id, "output_index": self.output_index(),
                               "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
                        out,
                    );
                }
                let oi = self.output_index();
                let seq = self.seq;
                if let Some(Item::Reasoning { id, text }) = &mut self.open {
                    text.push_str(&t);
                    let kind = "response.reasoning_summary_text.delta";
                    let d = SummaryDelta {
                        delta: &t,
                        item_id: id,
                        output_index: oi,
                        sequence_number: seq,
                        summary_index: 0,
                        kind,
                    };
                    frame(out, kind, &d);
                    self.seq += 1;
                }
            }
            ChatEvent::Content(t) | ChatEvent::Refusal(t) => {
                if !matches!(self.open, Some(Item::Text { .. })) {
                    let id = format!("msg_{}_{}", self.id, self.items);
                    self.open(
                        Item::Text {
                            id: id.clone(),
                            text: String::new(),
                        },
                        json!({"type": "message", "id": id, "status": "in_progress",
                               "role": "assistant", "content": []}),
                        out,
                    );
                    self.emit(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": self.output_index(),
                               "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                        out,
                    );
                }
                let oi = self.output_index();
                let seq = self.seq;
                if let Some(Item::Text { id, text }) = &mut self.open {
                    text.push_str(&t);
                    let kind = "response.output_text.delta";
                    let d = TextDelta {
                        content_index: 0,
                        delta: &t,
                        item_id: id,
                        logprobs: [],
                        output_index: oi,
                        sequence_number: seq,
                        kind,
                    };
                    frame(out, kind, &d);
                    self.seq += 1;
                }
            }
            ChatEvent::ToolCall(d) => {
                if !matches!(&self.open, Some(Item::Call { index, .. }) if *index == d.index) {
                    let id = format!("fc_{}_{}", self.id, self.items);
                    let call_id = d.id.clone().unwrap_or_default();
                    let name = d.name.clone().unwrap_or_default();
                    self.open(
                        Item::Call {
                            index: d.index,
                            id: id.clone(),
                            call_id: call_id.clone(),
                            name: name.clone(),
                            args: String::new(),
                        },
                        json!({"type": "function_call", "id": id, "call_id": call_id,
                               "name": name, "arguments": "", "status": "in_progress"}),
                        out,
                    );
                }
                let oi = self.output_index();
                let seq = self.seq;
                if let Some(Item::Call { id, args, .. }) = &mut self.open {
                    if !d.arguments.is_empty() {
                        args.push_str(&d.arguments);
                        let kind = "response.function_call_arguments.delta";
                        let e = ArgumentsDelta {
                            delta: &d.arguments,
                            item_id: id,
                            output_index: oi,
                            sequence_number: seq,
                            kind,
                        };
                        frame(out, kind, &e);
                        self.seq += 1;
                    }
                }
            }
            // Responses has no signed reasoning to send it in.
            ChatEvent::ThinkingSignature(_) => {}
            ChatEvent::Done(r) => {
                self.close(out);
                let done = response_json(&self.id, &self.model, self.created, Some(&r));
                let kind = if done["status"] == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.emit(kind, json!({"response": done}), out);
                return true;
            }
        }
        false
    }

    fn error(&mut self, code: &str, message: &str, out: &mut BytesMut) {
        self.emit(
            "error",
            json!({"code": code, "message": message, "param": Value::Null}),
            out,
        );
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
        let (last, error) = (&frames[frames.len() - 2], &frames[frames.len() - 1]);
        assert_eq!(last.0, "response.completed");
        assert_eq!(last.1["response"]["output"].as_array().unwrap().len(), 3);
        assert_eq!(error.1["code"], "server_error");
    }
}
