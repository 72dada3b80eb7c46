//! The Gemini dialect (`generateContent` / `streamGenerateContent?alt=sse`): the canonical,
//! OpenAI-shaped call model encoded as a Gemini request, Gemini answers decoded into the
//! assembly's frames, Gemini's error bodies classified (docs/behaviour.md §7.5).
//!
//! Pure codec: no I/O. The transport that sends these bodies (auth by the `x-goog-api-key`
//! header, never the `?key=` query string) plugs in at the dialect seam.
//!
//! Decisions, in one place:
//! - roles: `user` and `tool` turns are Gemini `user` turns, `assistant` turns are `model` turns;
//!   consecutive turns of one role are merged (Gemini wants them alternating, and puts parallel
//!   function responses in one turn); `system` / `developer` turns go to `systemInstruction`.
//! - a tool message names no function; its name is the one of the assistant tool call with the
//!   same id, searched backwards from the tool message. A tool result that is not a JSON object
//!   is sent as `{"result": …}` (Gemini's `functionResponse.response` is a `Struct`).
//! - thought signatures: a signature on a `functionCall` part is kept on that tool call, in
//!   `provider_specific_fields.thought_signature` (LiteLLM's place for it), and replayed on the
//!   same `functionCall` part; a signature on a thought or text part becomes a
//!   [`ThinkingBlock::Thinking`] (thought text, or empty for a text part) and is replayed as a
//!   thought part with its signature, or on the turn's first text part when it has no text.
//! - finish reasons: `STOP` → `stop` (`tool_calls` when the turn called functions), `MAX_TOKENS`
//!   → `length`; every other reason is kept visible, lower-cased (`safety`, `recitation`, …).
//!   [`finish_verdict`] says which of them reject the request (the safety family and recitation:
//!   like OpenAI's `content_filter`, a verdict on the request, not a fault of the source) and
//!   which are a malformed answer (`MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`: Transient,
//!   another attempt may succeed).

use std::time::Duration;

use polygateway_actors::SourceReason;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

use crate::error::{summarize_body, TransportError};
use crate::transport::http::{classify_status, AnswerReader};
use crate::transport::wire::{ChoiceFrame, ChunkFrame, WireFunction, WireToolCall, WireUsage};
use crate::transport::TransportConfig;
use crate::types::{Content, ContentPart, Message, Role, ThinkingBlock};

/// The header Gemini takes its key in (never the `?key=` query string, which reaches logs).
pub(crate) const KEY_HEADER: &str = "x-goog-api-key";

/// How Gemini answers are read besides their body: OpenAI-style rate-limit headers where a proxy
/// adds them, and Gemini's error bodies ([`classify_error`]).
pub(crate) const READER: AnswerReader = AnswerReader {
    rate_limit: crate::transport::http::parse_rate_limit,
    error: classify_error,
};

/// The source's model as Gemini's paths name it (`models/{id}`): the id, with a configured
/// `models/` prefix taken off.
pub(crate) fn model_id(config: &TransportConfig) -> &str {
    config.model.trim_start_matches("models/")
}

/// The signature Gemini's API documents for a function call it did not generate (a
/// conversation moved from another model): it skips the signature check of that call.
pub(crate) const FOREIGN_CALL_SIGNATURE: &str = "skip_thought_signature_validator";

/// Where a tool call's thought signature is kept (LiteLLM's field for provider extras).
const PROVIDER_FIELDS: &str = "provider_specific_fields";
const SIGNATURE_FIELD: &str = "thought_signature";

/// Thinking asked of a Gemini source: `ENABLE_THINKING` of the source, or the overlay's
/// `thinking` (`{"type": "enabled", "budget_tokens": N}`) / `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ThinkingAsk {
    /// Whether thought summaries are asked for (`includeThoughts`).
    pub(crate) include_thoughts: bool,
    /// `thinkingBudget` (0 switches thinking off on models that allow it; -1 is dynamic).
    pub(crate) budget: Option<i64>,
}

/// The body of a `generateContent` / `streamGenerateContent` request.
pub(crate) fn encode_request(
    messages: &[Message],
    overlay: &Map<String, Value>,
    thinking: Option<ThinkingAsk>,
) -> Result<Value, TransportError> {
    let mut body = Map::new();
    let mut system_parts: Vec<Value> = Vec::new();
    let mut contents: Vec<Value> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        match message.role {
            Role::System | Role::Developer => {
                let text = message.text();
                if !text.is_empty() {
                    system_parts.push(json!({"text": text}));
                }
            }
            Role::User => push_turn(&mut contents, "user", user_parts(message)?),
            Role::Assistant => push_turn(&mut contents, "model", model_parts(message)?),
            Role::Tool => {
                let part = function_response(messages, at)?;
                push_turn(&mut contents, "user", vec![part]);
            }
        }
    }
    if contents.is_empty() {
        return Err(TransportError::rejected(
            "gemini: the conversation has no user or model turn",
        ));
    }
    if !system_parts.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": system_parts}));
    }
    body.insert("contents".into(), Value::Array(contents));
    if let Some(tools) = overlay.get("tools").and_then(Value::as_array) {
        let declarations = tools
            .iter()
            .filter_map(function_declaration)
            .collect::<Vec<_>>();
        if !declarations.is_empty() {
            body.insert(
                "tools".into(),
                json!([{ "functionDeclarations": declarations }]),
            );
        }
    }
    if let Some(choice) = overlay.get("tool_choice") {
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": function_calling_config(choice)}),
        );
    }
    let generation = generation_config(overlay, thinking);
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    Ok(Value::Object(body))
}

/// Append parts as a turn of `role`, merged into the previous turn when it has the same role.
fn push_turn(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut() {
        if last["role"] == role {
            if let Some(existing) = last["parts"].as_array_mut() {
                existing.extend(parts);
                return;
            }
        }
    }
    contents.push(json!({"role": role, "parts": parts}));
}

fn user_parts(message: &Message) -> Result<Vec<Value>, TransportError> {
    match &message.content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(vec![json!({"text": text})]),
        Some(Content::Parts(parts)) => parts.iter().map(content_part).collect(),
    }
}

fn content_part(part: &ContentPart) -> Result<Value, TransportError> {
    match part {
        ContentPart::Text { text } => Ok(json!({"text": text})),
        ContentPart::ImageUrl { image_url } => Ok(media_part(&image_url.url)),
        ContentPart::Other(raw) => Err(TransportError::rejected(format!(
            "gemini: content part of type {} has no Gemini form",
            raw.get("type").and_then(Value::as_str).unwrap_or("unknown")
        ))),
    }
}

/// A data URL becomes `inlineData`, any other URL `fileData`.
fn media_part(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((meta, data)) = rest.split_once(',') {
            let mime = meta.strip_suffix(";base64").unwrap_or(meta);
            return json!({"inlineData": {"mimeType": mime, "data": data}});
        }
    }
    let mime = guess_mime(url);
    json!({"fileData": {"mimeType": mime, "fileUri": url}})
}

fn guess_mime(url: &str) -> &'static str {
    let path = url
        .split(['?', '#'])
        .next()
        .unwrap_or(url)
        .to_ascii_lowercase();
    match path.rsplit('.').next() {
        Some("png") => "image/png",
        Some("webp") => "image/webp",
        Some("gif") => "image/gif",
        Some("pdf") => "application/pdf",
        _ => "image/jpeg",
    }
}

fn model_parts(message: &Message) -> Result<Vec<Value>, TransportError> {
    let mut parts = Vec::new();
    // A signature without thought text rides on the turn's first text part.
    let mut loose_signature: Option<&str> = None;
    for block in &message.thinking_blocks {
        match block {
            ThinkingBlock::Thinking {
                thinking,
                signature,
            } if !thinking.is_empty() => {
                let mut part = json!({"text": thinking, "thought": true});
                if let Some(sig) = signature {
                    part["thoughtSignature"] = json!(sig);
                }
                parts.push(part);
            }
            ThinkingBlock::Thinking {
                signature: Some(sig),
                ..
            } => loose_signature = loose_signature.or(Some(sig)),
            // Anthropic's redacted thinking has no Gemini form; it is not Gemini's to check.
            _ => {}
        }
    }
    let text = message.text();
    if !text.is_empty() {
        let mut part = json!({"text": text});
        if let Some(sig) = loose_signature.take() {
            part["thoughtSignature"] = json!(sig);
        }
        parts.push(part);
    }
    for (n, call) in message.tool_calls.iter().flatten().enumerate() {
        let args = parse_args(&call.function.arguments)?;
        let mut part = json!({"functionCall": {"name": call.function.name, "args": args}});
        let signature = call
            .extra
            .get(PROVIDER_FIELDS)
            .and_then(|f| f.get(SIGNATURE_FIELD))
            .and_then(Value::as_str);
        match signature {
            Some(sig) => part["thoughtSignature"] = json!(sig),
            // The turn's first call carries the step's signature. A call Gemini did not make
            // (the turn was answered by another dialect's source, or written by the caller) has
            // none, and Gemini 3 refuses an unsigned call: the API's documented stand-in for a
            // foreign call's signature lets the conversation cross over.
            None if n == 0 => part["thoughtSignature"] = json!(FOREIGN_CALL_SIGNATURE),
            None => {}
        }
        parts.push(part);
    }
    if let Some(sig) = loose_signature {
        // No text part to carry it: a bare signature-bearing empty thought keeps it.
        parts.insert(
            0,
            json!({"text": "", "thought": true, "thoughtSignature": sig}),
        );
    }
    Ok(parts)
}

fn parse_args(arguments: &str) -> Result<Value, TransportError> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(arguments).map_err(|e| {
        TransportError::rejected(format!(
            "gemini: tool call arguments are not JSON ({e}); Gemini takes them as an object"
        ))
    })
}

/// The `functionResponse` part of the tool message at `at`.
fn function_response(messages: &[Message], at: usize) -> Result<Value, TransportError> {
    let message = &messages[at];
    let id = message.tool_call_id.as_deref().unwrap_or_default();
    let name = messages[..at]
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.tool_calls.iter().flatten())
        .find(|c| c.id == id)
        .map(|c| c.function.name.clone())
        .or_else(|| message.name.clone())
        .ok_or_else(|| {
            TransportError::rejected(format!(
                "gemini: tool result {id:?} answers no earlier tool call (Gemini needs the function's name)"
            ))
        })?;
    let text = message.text();
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(o)) => Value::Object(o),
        Ok(other) => json!({"result": other}),
        Err(_) => json!({"result": text}),
    };
    Ok(json!({"functionResponse": {"name": name, "response": response}}))
}

/// One OpenAI tool (`{"type": "function", "function": {...}}`) as a Gemini function declaration.
/// The schema goes as `parametersJsonSchema` (JSON Schema as is) — the OpenAPI-subset
/// `parameters` field refuses `additionalProperties`, `$ref` and more.
fn function_declaration(tool: &Value) -> Option<Value> {
    let function = tool.get("function")?;
    let name = function.get("name")?.as_str()?;
    let mut declaration = json!({"name": name});
    if let Some(description) = function.get("description") {
        declaration["description"] = description.clone();
    }
    if let Some(parameters) = function.get("parameters") {
        declaration["parametersJsonSchema"] = parameters.clone();
    }
    Some(declaration)
}

fn function_calling_config(choice: &Value) -> Value {
    match choice {
        Value::String(s) if s == "none" => json!({"mode": "NONE"}),
        Value::String(s) if s == "required" => json!({"mode": "ANY"}),
        Value::Object(o) => match o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            None => json!({"mode": "AUTO"}),
        },
        _ => json!({"mode": "AUTO"}),
    }
}

fn generation_config(
    overlay: &Map<String, Value>,
    thinking: Option<ThinkingAsk>,
) -> Map<String, Value> {
    let mut g = Map::new();
    let max = overlay
        .get("max_completion_tokens")
        .or_else(|| overlay.get("max_tokens"));
    if let Some(max) = max {
        g.insert("maxOutputTokens".into(), max.clone());
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ] {
        if let Some(v) = overlay.get(from) {
            g.insert(to.into(), v.clone());
        }
    }
    match overlay.get("stop") {
        Some(Value::String(s)) => {
            g.insert("stopSequences".into(), json!([s]));
        }
        Some(Value::Array(a)) => {
            g.insert("stopSequences".into(), Value::Array(a.clone()));
        }
        _ => {}
    }
    match overlay.get("response_format") {
        Some(f) if f["type"] == "json_object" => {
            g.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(f) if f["type"] == "json_schema" => {
            g.insert("responseMimeType".into(), json!("application/json"));
            if let Some(schema) = f.pointer("/json_schema/schema") {
                g.insert("responseJsonSchema".into(), schema.clone());
            }
        }
        _ => {}
    }
    let from_overlay = overlay.get("thinking").map(|t| {
        let enabled = t.get("type").and_then(Value::as_str) != Some("disabled");
        ThinkingAsk {
            include_thoughts: enabled,
            budget: if enabled {
                t.get("budget_tokens").and_then(Value::as_i64)
            } else {
                Some(0)
            },
        }
    });
    if let Some(ask) = from_overlay.or(thinking) {
        let mut config = Map::new();
        if ask.include_thoughts {
            config.insert("includeThoughts".into(), json!(true));
        }
        if let Some(budget) = ask.budget {
            config.insert("thinkingBudget".into(), json!(budget));
        }
        if !config.is_empty() {
            g.insert("thinkingConfig".into(), Value::Object(config));
        }
    }
    g
}

/// Decodes a Gemini answer, one `GenerateContentResponse` at a time (a stream sends a whole
/// one per SSE `data`; a non-streaming answer is one). Keeps what spans frames: the tool-call
/// counter (ids and `index`es stay unique over the answer) and whether a turn called functions.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    calls: u32,
    called: bool,
    finished: bool,
}

/// What one Gemini frame carried, in the assembly's terms, plus what the OpenAI frame cannot
/// hold: thinking blocks with their signatures.
#[derive(Debug, Default)]
pub(crate) struct GeminiFrame {
    pub(crate) frame: ChunkFrame<'static>,
    pub(crate) thinking_blocks: Vec<ThinkingBlock>,
}

impl Decoder {
    /// Whether a candidate's `finishReason` has arrived (a stream that ends before is truncated).
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Decode one `GenerateContentResponse`. A prompt blocked by `promptFeedback.blockReason`
    /// is a rejection of the request; an `error` object in band is classified like an HTTP one.
    pub(crate) fn decode(&mut self, data: &str) -> Result<GeminiFrame, TransportError> {
        let raw: Value = serde_json::from_str(data).map_err(|e| {
            let mut t = TransportError::transient(
                SourceReason::NetworkError,
                format!("malformed gemini frame ({e}): {}", summarize_body(data)),
            );
            t.body_text = summarize_body(data);
            t
        })?;
        if let Some(error) = raw.get("error") {
            let status = error.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
            let mut e = classify_error(status, &HeaderMap::new(), data);
            e.status = None;
            e.message = format!("in-band stream error: {}", e.body_text);
            return Err(e);
        }
        let candidates = raw
            .get("candidates")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if candidates.is_empty() {
            if let Some(reason) = raw
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                self.finished = true;
                return Err(TransportError::rejected(format!(
                    "gemini blocked the prompt: blockReason {reason}"
                )));
            }
        }
        let mut out = GeminiFrame::default();
        out.frame.model = raw
            .get("modelVersion")
            .and_then(Value::as_str)
            .map(|m| m.to_owned().into());
        out.frame.usage = raw.get("usageMetadata").map(usage);
        let response_id = raw.get("responseId").and_then(Value::as_str);
        for candidate in candidates {
            let index = candidate.get("index").and_then(Value::as_u64).unwrap_or(0) as u32;
            let mut choice = ChoiceFrame {
                index,
                ..ChoiceFrame::default()
            };
            let parts = candidate
                .pointer("/content/parts")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for part in parts {
                self.part(
                    part,
                    index,
                    response_id,
                    &mut choice,
                    &mut out.thinking_blocks,
                );
            }
            if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
                if index == 0 {
                    self.finished = true;
                }
                choice.finish_reason = Some(finish_reason(reason, self.called).to_owned());
            }
            out.frame.choices.push(choice);
        }
        Ok(out)
    }

    fn part(
        &mut self,
        part: &Value,
        index: u32,
        response_id: Option<&str>,
        choice: &mut ChoiceFrame,
        blocks: &mut Vec<ThinkingBlock>,
    ) {
        let signature = part
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(call) = part.get("functionCall") {
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
            let id = match call.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => match response_id {
                    Some(r) => format!("call_{r}_{}", self.calls),
                    None => format!("call_{index}_{}", self.calls),
                },
            };
            let mut extra = Map::new();
            if let Some(sig) = signature {
                extra.insert(PROVIDER_FIELDS.into(), json!({ SIGNATURE_FIELD: sig }));
            }
            choice.tool_calls.push(WireToolCall {
                index: Some(self.calls),
                id: Some(id),
                kind: Some("function".into()),
                function: Some(WireFunction {
                    name: Some(name.to_owned()),
                    arguments: Some(args.to_string()),
                }),
                extra,
            });
            self.calls += 1;
            if index == 0 {
                self.called = true;
            }
            return;
        }
        let Some(text) = part.get("text").and_then(Value::as_str) else {
            return;
        };
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        if thought {
            choice
                .reasoning
                .get_or_insert_with(String::new)
                .push_str(text);
        } else {
            choice
                .content
                .get_or_insert_with(String::new)
                .push_str(text);
        }
        if index != 0 {
            return;
        }
        if thought || signature.is_some() {
            blocks.push(ThinkingBlock::Thinking {
                thinking: if thought {
                    text.to_owned()
                } else {
                    String::new()
                },
                signature,
            });
        }
    }
}

/// Merge the thinking blocks of a stream's frames: consecutive thought pieces without a
/// signature are one block, a signature closes the block it arrives on.
pub(crate) fn merge_blocks(into: &mut Vec<ThinkingBlock>, more: Vec<ThinkingBlock>) {
    for block in more {
        match (into.last_mut(), block) {
            (
                Some(ThinkingBlock::Thinking {
                    thinking,
                    signature: sig @ None,
                }),
                ThinkingBlock::Thinking {
                    thinking: t,
                    signature,
                },
            ) => {
                thinking.push_str(&t);
                *sig = signature;
            }
            (_, block) => into.push(block),
        }
    }
}

/// Canonical usage from `usageMetadata`: prompt = `promptTokenCount` (cached tokens included)
/// plus `toolUsePromptTokenCount`; completion = `candidatesTokenCount` plus `thoughtsTokenCount`
/// (thinking is billed as output); cached = `cachedContentTokenCount`; reasoning =
/// `thoughtsTokenCount`.
fn usage(meta: &Value) -> WireUsage {
    let n = |k: &str| meta.get(k).and_then(Value::as_u64);
    WireUsage {
        prompt_tokens: n("promptTokenCount").unwrap_or(0)
            + n("toolUsePromptTokenCount").unwrap_or(0),
        completion_tokens: n("candidatesTokenCount").unwrap_or(0)
            + n("thoughtsTokenCount").unwrap_or(0),
        cached_prompt_tokens: n("cachedContentTokenCount"),
        cache_write_5m_tokens: None,
        cache_write_1h_tokens: None,
        reasoning_tokens: n("thoughtsTokenCount"),
    }
}

/// The canonical finish reason of a Gemini `finishReason`.
pub(crate) fn finish_reason(reason: &str, called_functions: bool) -> &'static str {
    match reason {
        "STOP" if called_functions => "tool_calls",
        "STOP" => "stop",
        "MAX_TOKENS" => "length",
        "SAFETY" => "safety",
        "RECITATION" => "recitation",
        "LANGUAGE" => "language",
        "BLOCKLIST" => "blocklist",
        "PROHIBITED_CONTENT" => "prohibited_content",
        "SPII" => "spii",
        "IMAGE_SAFETY" => "image_safety",
        "MALFORMED_FUNCTION_CALL" => "malformed_function_call",
        "UNEXPECTED_TOOL_CALL" => "unexpected_tool_call",
        "TOO_MANY_TOOL_CALLS" => "too_many_tool_calls",
        _ => "other",
    }
}

/// What a finished answer's canonical finish reason means for the call: `None` is an answer;
/// the safety family and recitation reject the request (the provider withheld the answer: a
/// verdict on the request, not a fault of the source, like OpenAI's `content_filter`); a
/// malformed or unexpected function call is Transient (the model's slip, another attempt may
/// produce a valid one); `other` is Transient too (Gemini gives no reason).
pub(crate) fn finish_verdict(reason: &str) -> Option<TransportError> {
    match reason {
        "stop" | "tool_calls" | "length" => None,
        "safety" | "recitation" | "blocklist" | "prohibited_content" | "spii" | "image_safety"
        | "language" => Some(TransportError::rejected(format!(
            "gemini finishReason {}: the answer was withheld by the provider",
            reason.to_ascii_uppercase()
        ))),
        _ => Some(TransportError::transient(
            SourceReason::NetworkError,
            format!(
                "gemini finishReason {}: no usable answer",
                reason.to_ascii_uppercase()
            ),
        )),
    }
}

/// Classify a Gemini error answer: `{"error": {"code", "message", "status", "details"}}`.
/// The generic status rules apply (429 pushback, 401/403 dead, 400 rejected, 5xx transient),
/// then Gemini's own: a 429's `google.rpc.RetryInfo.retryDelay` is its Retry-After; a 400
/// `FAILED_PRECONDITION` (e.g. billing not enabled in the region) is rejected as any 400; a 403
/// `PERMISSION_DENIED` and a 400 naming an invalid API key (`API_KEY_INVALID`) are a dead source.
pub(crate) fn classify_error(status: u16, headers: &HeaderMap, body: &str) -> TransportError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let details = error
        .and_then(|e| e.get("details"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let key_invalid = details
        .iter()
        .any(|d| d.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID"));
    let mut e = if status == 400 && key_invalid {
        classify_status(401, headers, body)
    } else {
        classify_status(status, headers, body)
    };
    e.status = Some(status);
    if e.rate_limited && e.retry_after.is_none() {
        e.retry_after = details
            .iter()
            .filter(|d| {
                d.get("@type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
            })
            .find_map(|d| {
                d.get("retryDelay")
                    .and_then(Value::as_str)
                    .and_then(parse_delay)
            });
    }
    e
}

/// `true` when a 400 refuses the structured output the request asked (`responseJsonSchema`,
/// `responseMimeType`): the source's structured mode steps down.
pub(crate) fn refuses_structured(error: &TransportError) -> bool {
    if error.status != Some(400) {
        return false;
    }
    let body = error.body_text.to_ascii_lowercase();
    [
        "response_json_schema",
        "responsejsonschema",
        "response_mime_type",
        "responsemimetype",
        "response_schema",
    ]
    .iter()
    .any(|needle| body.contains(needle))
}

/// A protobuf `Duration` in JSON: `"12s"`, `"1.5s"`.
fn parse_delay(raw: &str) -> Option<Duration> {
    let secs: f64 = raw.trim().strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

pub(crate) mod embed;
pub(crate) mod send;
#[cfg(test)]
mod tests;
