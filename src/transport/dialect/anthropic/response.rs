//! Anthropic's answers as the assembly's frames (docs/behaviour.md §7.5): the streamed events
//! (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta`,
//! `message_stop`, `ping`, `error`) one at a time, and a whole non-streamed message.
//!
//! Text deltas become content, `thinking_delta` reasoning, `tool_use` blocks tool-call pieces
//! (numbered by their order among the tool calls, not by their block index), so the consumer sees
//! the same deltas as from an OpenAI source. Thinking blocks are collected with their signatures
//! for the answer's `thinking_blocks`. A typed call's forced tool is not a tool call: its input
//! is the answer's text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use polygateway_actors::SourceReason;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{summarize_body, TransportError};
use crate::transport::wire::{ChoiceFrame, ChunkFrame, WireFunction, WireToolCall, WireUsage};
use crate::types::ThinkingBlock;

/// What one streamed event did.
#[derive(Debug, Default)]
pub(crate) struct Fed {
    /// Pieces for the assembly.
    pub(crate) frame: Option<ChunkFrame<'static>>,
    /// `message_stop`: the answer is complete.
    pub(crate) done: bool,
    /// An `error` event: the stream ends here, cut (its type and message).
    pub(crate) error: Option<String>,
}

/// A content block of the answer, by its index in the message.
#[derive(Debug)]
enum Block {
    Text,
    /// A tool call, numbered among the answer's tool calls.
    ToolUse(u32),
    /// The forced tool of a typed call: its input is the answer's text.
    Answer,
    /// A thinking block, by its place in `thinking`.
    Thinking(usize),
    /// Anything else (redacted thinking is complete at its start; server tools' blocks).
    Other,
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    forced_tool: Option<String>,
    /// The blocks started so far by the event's `index`: a map, not a vector sized by it, so
    /// that a hostile or broken upstream's `index: 4000000000` costs one entry, not the memory.
    blocks: BTreeMap<u64, Block>,
    tool_calls: u32,
    thinking: Vec<ThinkingBlock>,
    usage: UsageParts,
    /// The signature piece of the last event, not yet passed on as a delta.
    signature: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct UsageParts {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation: Option<CacheCreation>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct CacheCreation {
    #[serde(default)]
    ephemeral_5m_input_tokens: Option<u64>,
    #[serde(default)]
    ephemeral_1h_input_tokens: Option<u64>,
}

impl UsageParts {
    /// Later counts replace earlier ones (`message_delta` repeats some of `message_start`'s,
    /// cumulatively).
    fn merge(&mut self, later: UsageParts) {
        let keep = |a: &mut Option<u64>, b: Option<u64>| {
            if b.is_some() {
                *a = b;
            }
        };
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(
            &mut self.cache_creation_input_tokens,
            later.cache_creation_input_tokens,
        );
        keep(
            &mut self.cache_read_input_tokens,
            later.cache_read_input_tokens,
        );
        if later.cache_creation.is_some() {
            self.cache_creation = later.cache_creation;
        }
    }

    /// The canonical usage: every prompt token counted in `prompt_tokens` (Anthropic's
    /// `input_tokens` is only the part neither read from nor written to the cache).
    fn canonical(self) -> WireUsage {
        let written = self.cache_creation_input_tokens;
        let (w5, w1) = match (self.cache_creation, written) {
            (Some(c), _)
                if c.ephemeral_5m_input_tokens.is_some()
                    || c.ephemeral_1h_input_tokens.is_some() =>
            {
                (
                    c.ephemeral_5m_input_tokens.or(Some(0)),
                    c.ephemeral_1h_input_tokens.or(Some(0)),
                )
            }
            // No breakdown: the API's default lifetime, 5 minutes.
            (_, Some(n)) => (Some(n), None),
            _ => (None, None),
        };
        WireUsage {
            prompt_tokens: self.input_tokens.unwrap_or(0)
                + written.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_prompt_tokens: self.cache_read_input_tokens,
            cache_write_5m_tokens: w5,
            cache_write_1h_tokens: w1,
            reasoning_tokens: None,
        }
    }
}

/// Anthropic's stop reasons in OpenAI's vocabulary where one means the same; the others
/// (`refusal`, `pause_turn`, `model_context_window_exceeded`, …) as Anthropic said them.
pub(crate) fn finish_reason(stop_reason: &str, forced: bool) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" => "length",
        // The forced tool of a typed call is its answer, not a call.
        "tool_use" if forced => "stop",
        "tool_use" => "tool_calls",
        other => other,
    }
    .to_owned()
}

impl StreamState {
    /// A stream whose typed-call answer (if any) comes through `forced_tool`.
    pub(crate) fn new(forced_tool: Option<String>) -> Self {
        Self {
            forced_tool,
            ..Self::default()
        }
    }

    /// The name of a typed call's answer tool, if the call has one.
    pub(crate) fn forced_tool(&self) -> Option<&str> {
        self.forced_tool.as_deref()
    }

    /// The signature piece the last event brought, if any (passed on as a delta once).
    pub(crate) fn take_signature(&mut self) -> Option<String> {
        self.signature.take()
    }

    /// The thinking blocks, with their signatures, as they arrived.
    pub(crate) fn into_thinking(self) -> Vec<ThinkingBlock> {
        self.thinking
    }

    /// One event's `data`.
    pub(crate) fn feed(&mut self, data: &str) -> Result<Fed, TransportError> {
        let event: Value = serde_json::from_str(data).map_err(|e| {
            TransportError::transient(
                SourceReason::NetworkError,
                format!("malformed SSE event: {e}: {}", summarize_body(data)),
            )
        })?;
        let mut fed = Fed::default();
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &event["message"];
                if let Ok(usage) = UsageParts::deserialize(&message["usage"]) {
                    self.usage.merge(usage);
                }
                let mut frame = ChunkFrame {
                    model: message["model"]
                        .as_str()
                        .filter(|m| !m.is_empty())
                        .map(|m| Cow::Owned(m.to_owned())),
                    ..ChunkFrame::default()
                };
                frame.usage = Some(self.usage.canonical());
                fed.frame = Some(frame);
            }
            "content_block_start" => {
                let block = &event["content_block"];
                let (kind, choice) = self.start_block(block);
                self.set_block(event["index"].as_u64(), kind);
                fed.frame = choice.map(frame_of);
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap_or(0);
                fed.frame = self.delta(index, &event["delta"]).map(frame_of);
            }
            "message_delta" => {
                if let Ok(usage) = UsageParts::deserialize(&event["usage"]) {
                    self.usage.merge(usage);
                }
                let forced = self.blocks.values().any(|b| matches!(b, Block::Answer));
                let choice = ChoiceFrame {
                    finish_reason: event["delta"]["stop_reason"]
                        .as_str()
                        .map(|r| finish_reason(r, forced)),
                    ..ChoiceFrame::default()
                };
                let mut frame = frame_of(choice);
                frame.usage = Some(self.usage.canonical());
                fed.frame = Some(frame);
            }
            "message_stop" => fed.done = true,
            "error" => {
                let error = &event["error"];
                fed.error = Some(format!(
                    "{}: {}",
                    error["type"].as_str().unwrap_or("error"),
                    error["message"].as_str().unwrap_or_default()
                ));
            }
            // `ping`, `content_block_stop` and event types added later carry nothing to assemble.
            _ => {}
        }
        Ok(fed)
    }

    fn set_block(&mut self, index: Option<u64>, kind: Block) {
        let index = index.unwrap_or(self.blocks.len() as u64);
        self.blocks.insert(index, kind);
    }

    /// A block's start: what it is, and what it already carries.
    fn start_block(&mut self, block: &Value) -> (Block, Option<ChoiceFrame>) {
        match block["type"].as_str().unwrap_or_default() {
            "text" => {
                let text = block["text"].as_str().unwrap_or_default();
                let choice = (!text.is_empty()).then(|| ChoiceFrame {
                    content: Some(text.to_owned()),
                    ..ChoiceFrame::default()
                });
                (Block::Text, choice)
            }
            "tool_use" if self.forced_tool.as_deref() == block["name"].as_str() => {
                (Block::Answer, None)
            }
            "tool_use" => {
                let ordinal = self.tool_calls;
                self.tool_calls += 1;
                let piece = WireToolCall {
                    index: Some(ordinal),
                    id: block["id"].as_str().map(str::to_owned),
                    kind: Some("function".into()),
                    function: Some(WireFunction {
                        name: block["name"].as_str().map(str::to_owned),
                        arguments: Some(String::new()),
                    }),
                    ..WireToolCall::default()
                };
                let choice = ChoiceFrame {
                    tool_calls: vec![piece],
                    ..ChoiceFrame::default()
                };
                (Block::ToolUse(ordinal), Some(choice))
            }
            "thinking" => {
                let thinking = block["thinking"].as_str().unwrap_or_default().to_owned();
                let choice = (!thinking.is_empty()).then(|| ChoiceFrame {
                    reasoning: Some(thinking.clone()),
                    ..ChoiceFrame::default()
                });
                self.thinking.push(ThinkingBlock::Thinking {
                    thinking,
                    signature: block["signature"]
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                });
                (Block::Thinking(self.thinking.len() - 1), choice)
            }
            "redacted_thinking" => {
                self.thinking.push(ThinkingBlock::Redacted {
                    data: block["data"].as_str().unwrap_or_default().to_owned(),
                });
                (Block::Other, None)
            }
            _ => (Block::Other, None),
        }
    }

    fn delta(&mut self, index: u64, delta: &Value) -> Option<ChoiceFrame> {
        let text = |key: &str| delta[key].as_str().map(str::to_owned);
        match (self.blocks.get(&index)?, delta["type"].as_str()?) {
            (Block::Text, "text_delta") => Some(ChoiceFrame {
                content: text("text"),
                ..ChoiceFrame::default()
            }),
            (Block::Answer, "input_json_delta") => Some(ChoiceFrame {
                content: text("partial_json"),
                ..ChoiceFrame::default()
            }),
            (Block::ToolUse(ordinal), "input_json_delta") => Some(ChoiceFrame {
                tool_calls: vec![WireToolCall {
                    index: Some(*ordinal),
                    function: Some(WireFunction {
                        name: None,
                        arguments: text("partial_json"),
                    }),
                    ..WireToolCall::default()
                }],
                ..ChoiceFrame::default()
            }),
            (Block::Thinking(at), "thinking_delta") => {
                let piece = text("thinking")?;
                if let Some(ThinkingBlock::Thinking { thinking, .. }) = self.thinking.get_mut(*at) {
                    thinking.push_str(&piece);
                }
                Some(ChoiceFrame {
                    reasoning: Some(piece),
                    ..ChoiceFrame::default()
                })
            }
            (Block::Thinking(at), "signature_delta") => {
                let piece = delta["signature"].as_str().unwrap_or_default();
                if let Some(ThinkingBlock::Thinking { signature, .. }) = self.thinking.get_mut(*at)
                {
                    signature.get_or_insert_with(String::new).push_str(piece);
                }
                if !piece.is_empty() {
                    self.signature = Some(piece.to_owned());
                }
                None
            }
            _ => None,
        }
    }
}

fn frame_of(choice: ChoiceFrame) -> ChunkFrame<'static> {
    ChunkFrame {
        choices: vec![choice],
        ..ChunkFrame::default()
    }
}

/// A whole non-streamed message: its frame and its thinking blocks.
pub(crate) fn decode_message(
    body: &str,
    forced_tool: Option<&str>,
) -> Result<(ChunkFrame<'static>, Vec<ThinkingBlock>), TransportError> {
    let message: Value = serde_json::from_str(body).map_err(|e| {
        TransportError::transient(
            SourceReason::NetworkError,
            format!("malformed message body: {e}: {}", summarize_body(body)),
        )
    })?;
    let mut state = StreamState::new(forced_tool.map(str::to_owned));
    let mut choice = ChoiceFrame::default();
    let append = |into: &mut Option<String>, piece: &str| {
        into.get_or_insert_with(String::new).push_str(piece);
    };
    for block in message["content"].as_array().into_iter().flatten() {
        let (kind, _) = state.start_block(block);
        match kind {
            Block::Text => append(
                &mut choice.content,
                block["text"].as_str().unwrap_or_default(),
            ),
            Block::Answer => append(&mut choice.content, &block["input"].to_string()),
            Block::ToolUse(ordinal) => choice.tool_calls.push(WireToolCall {
                index: Some(ordinal),
                id: block["id"].as_str().map(str::to_owned),
                kind: Some("function".into()),
                function: Some(WireFunction {
                    name: block["name"].as_str().map(str::to_owned),
                    arguments: Some(block["input"].to_string()),
                }),
                ..WireToolCall::default()
            }),
            Block::Thinking(_) => append(
                &mut choice.reasoning,
                block["thinking"].as_str().unwrap_or_default(),
            ),
            Block::Other => {}
        }
        state.set_block(None, kind);
    }
    let forced = state.blocks.values().any(|b| matches!(b, Block::Answer));
    choice.finish_reason = message["stop_reason"]
        .as_str()
        .map(|r| finish_reason(r, forced));
    let usage = UsageParts::deserialize(&message["usage"]).ok();
    let frame = ChunkFrame {
        model: message["model"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(|m| Cow::Owned(m.to_owned())),
        usage: usage.map(UsageParts::canonical),
        choices: vec![choice],
        ..ChunkFrame::default()
    };
    Ok((frame, state.into_thinking()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::assembly::Assembly;

    /// Feed `events` through a stream state and an assembly, as the transport does.
    fn assemble(
        events: &[Value],
        forced: Option<&str>,
    ) -> (crate::LlmResponse, bool, Vec<ThinkingBlock>) {
        let mut state = StreamState::new(forced.map(str::to_owned));
        let mut acc = Assembly::new(false);
        let mut deltas = Vec::new();
        let mut done = false;
        for e in events {
            let fed = state.feed(&e.to_string()).unwrap();
            if let Some(frame) = fed.frame {
                acc.apply(frame, &mut deltas);
            }
            done |= fed.done;
        }
        acc.finish(&mut deltas);
        let usage = acc.usage;
        let mut r = acc.into_response();
        if let Some(u) = usage {
            (r.prompt_tokens, r.completion_tokens) = (u.prompt_tokens, u.completion_tokens);
            r.cached_prompt_tokens = u.cached_prompt_tokens;
            r.cache_write_5m_tokens = u.cache_write_5m_tokens;
            r.cache_write_1h_tokens = u.cache_write_1h_tokens;
        }
        (r, done, state.into_thinking())
    }

    fn start(usage: Value) -> Value {
        serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-test", "content": [], "stop_reason": null, "usage": usage}})
    }

    #[test]
    fn a_block_index_from_far_away_costs_one_entry() {
        use serde_json::json;
        let far = 4_000_000_000u64;
        let events = [
            start(json!({"input_tokens": 5, "output_tokens": 1})),
            json!({"type": "content_block_start", "index": far, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": far, "delta": {"type": "text_delta", "text": "still read"}}),
            json!({"type": "content_block_start", "index": u64::MAX, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop"}),
        ];
        let (answer, done, _) = assemble(&events, None);
        assert!(done);
        assert_eq!(answer.content, "still read");
    }

    #[test]
    fn thinking_text_and_a_tool_call_stream_with_usage_and_signatures() {
        use serde_json::json;
        let events = [
            start(
                json!({"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000,
                "cache_creation": {"ephemeral_5m_input_tokens": 40, "ephemeral_1h_input_tokens": 60}, "output_tokens": 1}),
            ),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Call the tool."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking."}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": " \"Paris\"}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ];
        let (r, done, thinking) = assemble(&events, None);
        assert!(done);
        assert_eq!(r.content, "Checking.");
        assert_eq!(r.thinking, "Call the tool.");
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "toolu_1");
        assert_eq!(r.tool_calls[0].function.arguments, "{\"city\": \"Paris\"}");
        assert_eq!(
            thinking,
            [ThinkingBlock::Thinking {
                thinking: "Call the tool.".into(),
                signature: Some("sig==".into())
            }]
        );
        // Every prompt token counted: 10 plain + 100 written + 1000 read.
        assert_eq!((r.prompt_tokens, r.completion_tokens), (1110, 42));
        assert_eq!(r.cached_prompt_tokens, Some(1000));
        assert_eq!(
            (r.cache_write_5m_tokens, r.cache_write_1h_tokens),
            (Some(40), Some(60))
        );
    }

    #[test]
    fn an_error_event_ends_the_stream_and_a_forced_tool_is_the_answer() {
        use serde_json::json;
        let mut state = StreamState::new(None);
        let fed = state
            .feed(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
            .unwrap();
        assert_eq!(fed.error.as_deref(), Some("overloaded_error: Overloaded"));
        let events = [
            start(json!({"input_tokens": 5, "output_tokens": 1})),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "Answer", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": 1}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ];
        let (r, _, _) = assemble(&events, Some("Answer"));
        assert_eq!(r.content, "{\"a\": 1}");
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            r.cache_write_5m_tokens, None,
            "no cache counts reported, none invented"
        );
    }

    #[test]
    fn a_whole_message_decodes_like_its_stream() {
        let body = serde_json::json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "s1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Paris."},
                {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {"x": 1}}
            ],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 9, "cache_creation_input_tokens": 8, "cache_read_input_tokens": 0}
        });
        let (frame, thinking) = decode_message(&body.to_string(), None).unwrap();
        let choice = &frame.choices[0];
        assert_eq!(choice.content.as_deref(), Some("Paris."));
        assert_eq!(choice.reasoning.as_deref(), Some("Hmm."));
        assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            choice.tool_calls[0]
                .function
                .as_ref()
                .unwrap()
                .arguments
                .as_deref(),
            Some("{\"x\":1}")
        );
        assert_eq!(thinking.len(), 2);
        let usage = frame.usage.unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.cached_prompt_tokens),
            (11, Some(0))
        );
        // No lifetime breakdown: the writes had the default 5 minutes.
        assert_eq!(
            (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens),
            (Some(8), None)
        );
    }
}
