//! The Messages API request body from the canonical call (docs/behaviour.md §7.5).
//!
//! The canonical conversation is OpenAI-shaped; Anthropic's differs in ways that each need a
//! rule here: the system prompt is a top-level list of blocks, tool results are `tool_result`
//! blocks of a user turn, an assistant turn's tool calls are `tool_use` blocks with a parsed
//! `input`, turns alternate (consecutive turns of one role are merged), thinking blocks with
//! their signatures lead the assistant turn they belong to, and `max_tokens` is required.
//! Content parts this file does not model (`cache_control` on a text part, a `document`) pass
//! through as Anthropic blocks, exactly as the caller wrote them.

use serde_json::{json, Map, Value};

use crate::error::TransportError;
use crate::structured::{SchemaRequest, StructuredMode};
use crate::types::{Content, ContentPart, Message, Role};

/// `max_tokens` when the call gives none (the API requires it). The same default as LiteLLM's;
/// a call or a source's `EXTRA_BODY` sets its own.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 4096;
/// `thinking.budget_tokens` when `ENABLE_THINKING=true` and the call sets no `thinking` of its
/// own (Anthropic's minimum is 1,024); `max_tokens` then defaults to this plus
/// [`DEFAULT_MAX_TOKENS`], since the budget counts against it.
pub(crate) const THINKING_BUDGET: u64 = 2048;
/// The body key a call (or a source's `EXTRA_BODY`) uses for the `anthropic-beta` header.
pub(crate) const BETA_KEY: &str = "anthropic_beta";

/// OpenAI chat parameters Anthropic has no equivalent for: left out rather than refused by the
/// API, so one call runs on every dialect of a scope.
const OPENAI_ONLY: [&str; 15] = [
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "top_logprobs",
    "n",
    "seed",
    "logit_bias",
    "stream_options",
    "reasoning_effort",
    "modalities",
    "audio",
    "prediction",
    "store",
    "web_search_options",
    "verbosity",
];

/// What one attempt sends: the JSON body, the `anthropic-beta` header value if any, and the name
/// of the tool a typed call's answer is forced through (its input is the answer's text).
pub(crate) struct AnthropicRequest {
    pub(crate) body: Vec<u8>,
    pub(crate) beta: Option<String>,
    pub(crate) forced_tool: Option<String>,
}

/// The body for `model` from the canonical `messages` and merged body `params` (source
/// `EXTRA_BODY` < call overlay < `response_format`), a typed call's schema in `structured`.
pub(crate) fn build(
    model: &str,
    messages: &[Message],
    mut params: Map<String, Value>,
    stream: bool,
    structured: Option<(&SchemaRequest, StructuredMode)>,
    enable_thinking: Option<bool>,
) -> Result<AnthropicRequest, TransportError> {
    let beta = params.remove(BETA_KEY).map(|v| match v {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        Value::String(s) => s,
        other => other.to_string(),
    });
    let (system, turns) = conversation(messages);
    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_owned()));
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(turns));

    if let Some(on) = enable_thinking {
        params.entry("thinking").or_insert_with(|| {
            if on {
                json!({"type": "enabled", "budget_tokens": THINKING_BUDGET})
            } else {
                json!({"type": "disabled"})
            }
        });
    }
    let thinking_budget = params
        .get("thinking")
        .filter(|t| t["type"] == "enabled")
        .and_then(|t| t["budget_tokens"].as_u64())
        .unwrap_or(0);
    let max_tokens = params
        .remove("max_tokens")
        .or_else(|| params.remove("max_completion_tokens"))
        .unwrap_or_else(|| json!(DEFAULT_MAX_TOKENS + thinking_budget));
    params.remove("max_completion_tokens");
    body.insert("max_tokens".into(), max_tokens);

    if let Some(stop) = params.remove("stop") {
        let sequences = match stop {
            Value::String(s) => vec![Value::String(s)],
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            other => vec![other],
        };
        if !sequences.is_empty() {
            body.insert("stop_sequences".into(), Value::Array(sequences));
        }
    }
    if let Some(user) = params.remove("user") {
        params
            .entry("metadata")
            .or_insert_with(|| json!({ "user_id": user }));
    }
    let parallel = params.remove("parallel_tool_calls");
    let mut tools: Vec<Value> = match params.remove("tools") {
        Some(Value::Array(tools)) => tools.into_iter().map(tool).collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![other],
    };
    let mut choice = params.remove("tool_choice").and_then(tool_choice);
    if parallel == Some(Value::Bool(false)) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if let Some(obj) = c.as_object_mut() {
            obj.insert("disable_parallel_tool_use".into(), Value::Bool(true));
        }
    }
    // An explicit `response_format` with a schema is a typed call in all but name.
    let explicit = params
        .remove("response_format")
        .filter(|f| f["type"] == "json_schema")
        .map(|f| {
            let name = f["json_schema"]["name"]
                .as_str()
                .unwrap_or("answer")
                .to_owned();
            (name, f["json_schema"]["schema"].clone())
        });
    // A typed call: `json_schema` mode is Anthropic's structured outputs (the answer's text is
    // JSON of the schema, beside thinking too); `json_object` mode, a step down for the models
    // without them, forces a tool that carries the schema. An explicit `response_format` keeps
    // the forced tool, which every model has.
    let schema = match structured {
        Some((schema, StructuredMode::JsonSchema)) => {
            let mut config = match params.remove("output_config") {
                Some(Value::Object(config)) => config,
                _ => Map::new(),
            };
            config.insert(
                "format".into(),
                json!({"type": "json_schema", "schema": schema.schema}),
            );
            body.insert("output_config".into(), Value::Object(config));
            None
        }
        Some((schema, StructuredMode::JsonObject)) => {
            Some((schema.name.clone(), schema.schema.clone()))
        }
        _ => explicit,
    };
    let forced_tool = schema.map(|(name, schema)| {
        let name = tool_name(&name);
        tools.push(json!({
            "name": name,
            "description": "Give your answer as this tool's input: it is the reply, not a step.",
            "input_schema": schema,
        }));
        choice = Some(json!({"type": "tool", "name": name}));
        name
    });
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    for key in OPENAI_ONLY {
        params.remove(key);
    }
    // OpenAI's tiers (`default`, `flex`, `priority`) are not Anthropic's (`auto`,
    // `standard_only`); only a value Anthropic knows is sent.
    if params
        .get("service_tier")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "auto" && t != "standard_only")
    {
        params.remove("service_tier");
    }
    for (key, value) in params {
        body.entry(key).or_insert(value);
    }
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    let body = serde_json::to_vec(&Value::Object(body))
        .map_err(|e| TransportError::rejected(format!("request body not serialisable: {e}")))?;
    Ok(AnthropicRequest {
        body,
        beta: beta.filter(|b| !b.is_empty()),
        forced_tool,
    })
}

/// A name Anthropic accepts for a tool (`^[a-zA-Z0-9_-]{1,64}$`).
fn tool_name(name: &str) -> String {
    let clean: String = name
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
    if clean.is_empty() {
        "answer".into()
    } else {
        clean
    }
}

/// An OpenAI function tool as an Anthropic tool; anything else (Anthropic's own tool types,
/// a tool already in its shape) as it came.
fn tool(t: Value) -> Value {
    if t["type"] != "function" {
        return t;
    }
    let f = &t["function"];
    let mut out = Map::new();
    out.insert("name".into(), f["name"].clone());
    if let Some(d) = f.get("description").filter(|d| !d.is_null()) {
        out.insert("description".into(), d.clone());
    }
    let schema = f
        .get("parameters")
        .filter(|p| !p.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    out.insert("input_schema".into(), schema);
    if let Some(cache) = t.get("cache_control") {
        out.insert("cache_control".into(), cache.clone());
    }
    Value::Object(out)
}

/// OpenAI's `tool_choice` in Anthropic's shape; `None` leaves the API's default (`auto`).
fn tool_choice(c: Value) -> Option<Value> {
    match &c {
        Value::String(s) => match s.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "required" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            _ => None,
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("function").and_then(|f| f.get("name")).cloned()?;
            Some(json!({"type": "tool", "name": name}))
        }
        Value::Object(_) => Some(c),
        _ => None,
    }
}

/// The system blocks and the alternating turns of `messages`.
fn conversation(messages: &[Message]) -> (Vec<Value>, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System | Role::Developer => {
                let mut blocks = content_blocks(m.content.as_ref());
                mark_cache(&mut blocks, m);
                system.extend(blocks);
                continue;
            }
            Role::User => (Role::User, content_blocks(m.content.as_ref())),
            Role::Assistant => (Role::Assistant, assistant_blocks(m)),
            Role::Tool => (Role::User, vec![tool_result(m)]),
        };
        let mut blocks = blocks;
        mark_cache(&mut blocks, m);
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            // Turns alternate: a tool result followed by the user's words is one user turn.
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, content)| {
            let role = if role == Role::Assistant {
                "assistant"
            } else {
                "user"
            };
            json!({"role": role, "content": content})
        })
        .collect();
    (system, turns)
}

/// A message-level `cache_control` (an unmodelled field of the message) marks its last block.
fn mark_cache(blocks: &mut [Value], m: &Message) {
    if let (Some(cache), Some(Value::Object(last))) =
        (m.extra.get("cache_control"), blocks.last_mut())
    {
        last.entry("cache_control").or_insert_with(|| cache.clone());
    }
}

fn content_blocks(content: Option<&Content>) -> Vec<Value> {
    match content {
        None => Vec::new(),
        Some(Content::Text(text)) if text.is_empty() => Vec::new(),
        Some(Content::Text(text)) => vec![json!({"type": "text", "text": text})],
        Some(Content::Parts(parts)) => parts.iter().filter_map(part_block).collect(),
    }
}

/// One content part as an Anthropic block; `None` for an empty text (the API refuses those).
fn part_block(part: &ContentPart) -> Option<Value> {
    match part {
        ContentPart::Text { text } if text.is_empty() => None,
        ContentPart::Text { text } => Some(json!({"type": "text", "text": text})),
        ContentPart::ImageUrl { image_url } => Some(image(&image_url.url, None)),
        ContentPart::Other(v) if v["type"] == "image_url" => {
            let url = v["image_url"]["url"].as_str().unwrap_or_default();
            Some(image(url, v.get("cache_control")))
        }
        ContentPart::Other(v) => Some(v.clone()),
    }
}

/// An image block: a data URL inline as base64, any other URL by reference.
fn image(url: &str, cache: Option<&Value>) -> Value {
    let source = match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((media_type, data)) => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        None => json!({"type": "url", "url": url}),
    };
    let mut block = json!({"type": "image", "source": source});
    if let Some(cache) = cache {
        block["cache_control"] = cache.clone();
    }
    block
}

/// An assistant turn: its thinking blocks first (replayed verbatim, signatures included), then
/// its text, then its tool calls as `tool_use` blocks.
fn assistant_blocks(m: &Message) -> Vec<Value> {
    let mut blocks: Vec<Value> = m
        .thinking_blocks
        .iter()
        .filter_map(|b| serde_json::to_value(b).ok())
        .collect();
    blocks.extend(content_blocks(m.content.as_ref()));
    for call in m.tool_calls.iter().flatten() {
        // The arguments are the model's exact string; Anthropic takes an object. A string that
        // is not a JSON object (a model's broken output) is kept under `arguments`.
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ if call.function.arguments.trim().is_empty() => json!({}),
            _ => json!({ "arguments": call.function.arguments }),
        };
        blocks.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.function.name,
            "input": input,
        }));
    }
    blocks
}

/// A `role: tool` message as a `tool_result` block (its `is_error`, when given, kept).
fn tool_result(m: &Message) -> Value {
    let content = match &m.content {
        None => Value::String(String::new()),
        Some(Content::Text(text)) => Value::String(text.clone()),
        Some(Content::Parts(_)) => Value::Array(content_blocks(m.content.as_ref())),
    };
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
        "content": content,
    });
    if let Some(is_error) = m.extra.get("is_error") {
        block["is_error"] = is_error.clone();
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ThinkingBlock, ToolCall};

    fn sent(messages: &[Message], params: Value) -> Value {
        let params = params.as_object().cloned().unwrap_or_default();
        let r = build("claude-test", messages, params, true, None, None).unwrap();
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn system_tool_results_and_turns_take_anthropics_shape() {
        let mut turn = Message::assistant_tool_calls(vec![ToolCall::function(
            "toolu_1",
            "weather",
            r#"{"city":"Paris"}"#,
        )]);
        turn.thinking_blocks.push(ThinkingBlock::Thinking {
            thinking: "Look it up.".into(),
            signature: Some("sig-1".into()),
        });
        let messages = vec![
            Message::system("Be brief."),
            Message::user("Weather in Paris?"),
            turn,
            Message::tool_result("toolu_1", "18 C"),
            Message::user("And tomorrow?"),
        ];
        let body = sent(
            &messages,
            json!({"temperature": 0.2, "seed": 7, "stop": "END"}),
        );
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Be brief."}])
        );
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["stream"], true);
        assert_eq!(body["temperature"], 0.2);
        assert!(
            body.get("seed").is_none(),
            "OpenAI-only parameters are left out"
        );
        assert_eq!(body["stop_sequences"], json!(["END"]));
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 3, "{turns:?}");
        assert_eq!(turns[1]["role"], "assistant");
        assert_eq!(
            turns[1]["content"],
            json!([
                {"type": "thinking", "thinking": "Look it up.", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
            ])
        );
        // The tool result and the next question are one user turn.
        assert_eq!(
            turns[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {"type": "text", "text": "And tomorrow?"}
            ])
        );
    }

    #[test]
    fn cache_breakpoints_and_unmodelled_parts_pass_unchanged() {
        let cached_text = json!({"type": "text", "text": "A long document.", "cache_control": {"type": "ephemeral", "ttl": "1h"}});
        let document = json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}});
        let user: Message = serde_json::from_value(json!({
            "role": "user",
            "content": [cached_text, document, {"type": "text", "text": "Summarise."}]
        }))
        .unwrap();
        let system: Message = serde_json::from_value(json!({
            "role": "system", "content": "Rules.", "cache_control": {"type": "ephemeral"}
        }))
        .unwrap();
        let tools = json!([{
            "type": "function",
            "function": {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}},
            "cache_control": {"type": "ephemeral"}
        }]);
        let body = sent(
            &[system, user],
            json!({"tools": tools, "tool_choice": "required"}),
        );
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(body["messages"][0]["content"][0], cached_text);
        assert_eq!(body["messages"][0]["content"][1], document);
        assert_eq!(
            body["tools"],
            json!([{"name": "lookup", "description": "Look up.", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
    }

    #[test]
    fn images_thinking_beta_and_a_typed_call() {
        let user = Message::user_with_images("What is this?", [("image/png", &b"\x89PNG"[..])]);
        let params =
            json!({"anthropic_beta": ["a-2025", "b-2025"], "max_tokens": 100, "user": "u1"});
        let schema = SchemaRequest {
            name: "Answer.v1".into(),
            schema: json!({"type": "object"}),
        };
        let r = build(
            "claude-test",
            &[user],
            params.as_object().cloned().unwrap(),
            false,
            Some((&schema, StructuredMode::JsonSchema)),
            Some(true),
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(r.beta.as_deref(), Some("a-2025,b-2025"));
        assert!(body.get("anthropic_beta").is_none());
        assert!(body.get("stream").is_none());
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["metadata"], json!({"user_id": "u1"}));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": THINKING_BUDGET})
        );
        assert_eq!(
            body["messages"][0]["content"][1]["source"]["type"],
            "base64"
        );
        assert_eq!(
            body["messages"][0]["content"][1]["source"]["media_type"],
            "image/png"
        );
        // The schema mode is structured outputs: no forced tool, thinking allowed beside it.
        assert_eq!(r.forced_tool, None);
        assert!(body.get("tool_choice").is_none());
        assert_eq!(
            body["output_config"]["format"],
            json!({"type": "json_schema", "schema": {"type": "object"}})
        );
        // The object mode (a step down) forces a tool carrying the schema; an `output_config`
        // the caller gave (`effort`) keeps its other fields in the schema mode.
        let forced = build(
            "claude-test",
            &[Message::user("hi")],
            Map::new(),
            false,
            Some((&schema, StructuredMode::JsonObject)),
            None,
        )
        .unwrap();
        let forced_body: Value = serde_json::from_slice(&forced.body).unwrap();
        assert_eq!(forced.forced_tool.as_deref(), Some("Answer_v1"));
        assert_eq!(
            forced_body["tool_choice"],
            json!({"type": "tool", "name": "Answer_v1"})
        );
        assert_eq!(
            forced_body["tools"][0]["input_schema"],
            json!({"type": "object"})
        );
        assert!(forced_body.get("output_config").is_none());
        let effort = build(
            "claude-test",
            &[Message::user("hi")],
            json!({"output_config": {"effort": "low"}})
                .as_object()
                .cloned()
                .unwrap(),
            false,
            Some((&schema, StructuredMode::JsonSchema)),
            None,
        )
        .unwrap();
        let effort_body: Value = serde_json::from_slice(&effort.body).unwrap();
        assert_eq!(effort_body["output_config"]["effort"], "low");
        assert_eq!(
            effort_body["output_config"]["format"]["type"],
            "json_schema"
        );
    }
}
