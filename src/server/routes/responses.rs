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
use futures::{Stream, StreamExt};
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
    let mut writer = Writer {
        id,
        model: call.model,
        created,
        seq: 0,
        open: None,
        items: 0,
    };
    let mut start = Vec::new();
    let head = response_json(&writer.id, &writer.model, created, None);
    writer.emit("response.created", json!({"response": head}), &mut start);
    writer.emit(
        "response.in_progress",
        json!({"response": head}),
        &mut start,
    );
    let stop = app.stop.clone();
    let body = futures::stream::unfold(
        (events, writer, false, lease),
        move |(mut events, mut w, finished, lease)| {
            let stop = stop.clone();
            async move {
                if finished {
                    return None;
                }
                let mut out = Vec::new();
                let next = tokio::select! {
                    next = tokio::time::timeout_at(deadline, events.next()) => next,
                    () = stop.cancelled() => Ok(Some(Err(crate::GatewayError::Shutdown(
                        "the server's drain timeout passed".into())))),
                };
                let done = match next {
                    Ok(Some(Ok(ev))) => w.event(ev, &mut out),
                    Ok(None) => {
                        w.error(
                            "server_error",
                            "the stream ended without an answer",
                            &mut out,
                        );
                        true
                    }
                    Ok(Some(Err(e))) => {
                        let e = ApiError::from(e);
                        w.error(e.code, &e.message, &mut out);
                        true
                    }
                    Err(_) => {
                        w.error("request_timeout", "the request timed out", &mut out);
                        true
                    }
                };
                Some((out, (events, w, done, lease)))
            }
        },
    );
    let body = futures::stream::iter(start)
        .chain(body.flat_map(futures::stream::iter))
        .map(Ok::<_, std::convert::Infallible>);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
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
    fn emit(&mut self, kind: &str, mut data: Value, out: &mut Vec<Bytes>) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
    }

    fn output_index(&self) -> u64 {
        self.items - 1
    }

    fn close(&mut self, out: &mut Vec<Bytes>) {
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

    fn open(&mut self, item: Item, added: Value, out: &mut Vec<Bytes>) {
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
    fn event(&mut self, ev: ChatEvent, out: &mut Vec<Bytes>) -> bool {
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
                if let Some(Item::Reasoning { id, text }) = &mut self.open {
                    text.push_str(&t);
                    let d = json!({"item_id": id, "output_index": oi, "summary_index": 0,
                                   "delta": t});
                    self.emit("response.reasoning_summary_text.delta", d, out);
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
                if let Some(Item::Text { id, text }) = &mut self.open {
                    text.push_str(&t);
                    let d = json!({"item_id": id, "output_index": oi, "content_index": 0,
                                   "delta": t, "logprobs": []});
                    self.emit("response.output_text.delta", d, out);
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
                if let Some(Item::Call { id, args, .. }) = &mut self.open {
                    if !d.arguments.is_empty() {
                        args.push_str(&d.arguments);
                        let e = json!({"item_id": id, "output_index": oi, "delta": d.arguments});
                        self.emit("response.function_call_arguments.delta", e, out);
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

    fn error(&mut self, code: &str, message: &str, out: &mut Vec<Bytes>) {
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
}
