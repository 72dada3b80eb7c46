//! What a chat answer says ([`Script`]): its deltas, usage, tool calls and ending, from the
//! behaviour and from what the request asks (tools, prefill, `max_tokens`, `n`, logprobs).

use std::time::Duration;

use serde_json::{json, Value};

use super::behaviour::Behaviour;
use super::fixture::{
    MOCK_CACHED_TOKENS, MOCK_CONTENT, MOCK_PROMPT_TOKENS, MOCK_REASONING_TOKENS, MOCK_THINKING,
};
/// The deltas and ending of a chat answer, independent of streaming.
pub(super) struct Script {
    pub(super) ttft: Duration,
    pub(super) inter_token: Duration,
    pub(super) reasoning: Vec<String>,
    pub(super) content: Vec<String>,
    pub(super) usage: Option<Value>,
    pub(super) ending: Ending,
    /// Tool calls `(name, arguments)` (no content then).
    pub(super) tool_calls: Vec<(String, String)>,
    pub(super) finish_reason: &'static str,
    /// The request asked for `logprobs`: every content delta carries them.
    pub(super) logprobs: bool,
    /// The request's `n`: choices 1.. repeat the content with a `[i] ` prefix.
    pub(super) n: u32,
    /// Exact chunks and body ([`Behaviour::Raw`]).
    pub(super) raw: Option<(Vec<Value>, Value)>,
}

#[derive(PartialEq)]
pub(super) enum Ending {
    /// finish chunk, usage, `[DONE]`.
    Done,
    /// EOF after the deltas (usage chunk first when `with_usage`).
    Truncated { with_usage: bool },
    /// Role chunk only, then EOF.
    EarlyEof,
    /// Like `Truncated` (only the role chunk without `content`), then the socket is dropped
    /// mid-body.
    Abrupt { content: bool, with_usage: bool },
    /// A broken frame after the first delta, then `[DONE]`.
    Malformed,
    /// An error frame after the first delta, then EOF.
    InBandError,
}

pub(super) fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let n = n.clamp(1, chars.len());
    let per = chars.len().div_ceil(n);
    chars.chunks(per).map(|c| c.iter().collect()).collect()
}

impl Script {
    pub(super) fn of(b: &Behaviour) -> Script {
        let mut s = Script {
            ttft: Duration::ZERO,
            inter_token: Duration::ZERO,
            reasoning: Vec::new(),
            content: split_even(MOCK_CONTENT, 4),
            usage: None,
            ending: Ending::Done,
            tool_calls: Vec::new(),
            finish_reason: "stop",
            logprobs: false,
            n: 1,
            raw: None,
        };
        match b {
            Behaviour::Healthy {
                ttft,
                inter_token,
                chunks,
                content,
            } => {
                s.ttft = *ttft;
                s.inter_token = *inter_token;
                s.content = split_even(content, *chunks);
            }
            Behaviour::TruncatedStream { with_usage } => {
                s.ending = Ending::Truncated {
                    with_usage: *with_usage,
                }
            }
            Behaviour::EarlyEof => s.ending = Ending::EarlyEof,
            Behaviour::AbruptClose {
                content,
                with_usage,
            } => {
                s.ending = Ending::Abrupt {
                    content: *content,
                    with_usage: *with_usage,
                }
            }
            Behaviour::MalformedFrame => s.ending = Ending::Malformed,
            Behaviour::EmptyCompletion => s.content.clear(),
            Behaviour::Reasoning => s.reasoning = split_even(MOCK_THINKING, 3),
            Behaviour::ReasoningPaced { ttft, inter_token } => {
                s.reasoning = split_even(MOCK_THINKING, 3);
                s.ttft = *ttft;
                s.inter_token = *inter_token;
            }
            Behaviour::ThinkTags => {
                // Tags deliberately split across deltas.
                let mut c = vec![
                    "<thi".to_string(),
                    format!("nk>{MOCK_THINKING}</th"),
                    "ink>\n\n".to_string(),
                ];
                c.extend(split_even(MOCK_CONTENT, 4));
                s.content = c;
            }
            Behaviour::InBandError => s.ending = Ending::InBandError,
            Behaviour::ToolCalls(calls) => {
                s.content.clear();
                s.tool_calls = calls.clone();
                s.finish_reason = "tool_calls";
            }
            Behaviour::Length => {
                let half: String = MOCK_CONTENT
                    .chars()
                    .take(MOCK_CONTENT.chars().count() / 2)
                    .collect();
                s.content = split_even(&half, 2);
                s.finish_reason = "length";
            }
            Behaviour::Raw { chunks, completion } => {
                s.raw = Some((chunks.clone(), completion.clone()));
            }
            Behaviour::CutAfter { deltas, answer } => {
                s = Script::of(answer);
                s.content.truncate(*deltas);
                s.ending = Ending::Abrupt {
                    content: true,
                    with_usage: false,
                };
                return s;
            }
            _ => {}
        }
        let completion = (s.reasoning.len() + s.content.len() + s.tool_calls.len() * 4) as u64;
        s.usage = match b {
            Behaviour::NoUsage => None,
            Behaviour::UsageDetails => Some(json!({
                "prompt_tokens": MOCK_PROMPT_TOKENS,
                "completion_tokens": completion + MOCK_REASONING_TOKENS,
                "total_tokens": MOCK_PROMPT_TOKENS + completion + MOCK_REASONING_TOKENS,
                "prompt_tokens_details": {"cached_tokens": MOCK_CACHED_TOKENS},
                "completion_tokens_details": {"reasoning_tokens": MOCK_REASONING_TOKENS}
            })),
            _ => Some(json!({
                "prompt_tokens": MOCK_PROMPT_TOKENS,
                "completion_tokens": completion,
                "total_tokens": MOCK_PROMPT_TOKENS + completion
            })),
        };
        s
    }

    /// A healthy answer follows what the request asks, the way an OpenAI-compatible server
    /// does:
    /// - `tools` offered and the conversation ends with a user-side turn: the model calls the
    ///   first tool (the first two when there are several and `parallel_tool_calls` is not
    ///   `false`) with `{"query": <the last message's text>}`;
    /// - the conversation ends with a `tool` message: the content is `tool said: <its text>`;
    /// - `max_tokens` / `max_completion_tokens` below the number of content deltas: the answer
    ///   is cut there with `finish_reason: "length"`;
    /// - `logprobs: true`: every content delta carries logprobs; `n`: that many choices (≤ 8).
    pub(super) fn answer_the_request(&mut self, body: &Value) {
        self.logprobs = body["logprobs"].as_bool() == Some(true);
        self.n = body["n"]
            .as_u64()
            .map_or(1, |n| u32::try_from(n.clamp(1, 8)).unwrap_or(1));
        let messages = body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let last = messages.last();
        let text_of = |m: &Value| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        // A prefill (DeepSeek's chat prefix completion, Mistral): a final assistant message with
        // `"prefix": true` is the beginning of the answer, and the answer is only its
        // continuation — the rest of the text when the prefix begins it — with the prefix billed
        // as input.
        if let Some(prefix) = last
            .filter(|m| m["role"] == "assistant" && m["prefix"] == true)
            .map(text_of)
        {
            self.continue_after(&prefix);
            return;
        }
        let tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        match last.and_then(|m| m["role"].as_str()) {
            Some("tool") => {
                let said = last.map(text_of).unwrap_or_default();
                self.content = split_even(&format!("tool said: {said}"), 4);
            }
            Some(_) if !tools.is_empty() && body["tool_choice"] != "none" => {
                let parallel = body["parallel_tool_calls"] != false;
                let take = if parallel { 2 } else { 1 };
                let query = json!({"query": last.map(text_of).unwrap_or_default()}).to_string();
                self.tool_calls = tools
                    .iter()
                    .take(take)
                    .map(|t| {
                        let name = t["function"]["name"].as_str().unwrap_or("tool");
                        (name.to_string(), query.clone())
                    })
                    .collect();
                self.content.clear();
                self.finish_reason = "tool_calls";
            }
            _ => {}
        }
        let limit = body["max_completion_tokens"]
            .as_u64()
            .or_else(|| body["max_tokens"].as_u64());
        if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) {
            if limit < self.content.len() {
                self.content.truncate(limit);
                self.finish_reason = "length";
            }
        }
    }

    /// Answer the continuation of `prefix`: the pieces it covers are dropped (the rest of a
    /// piece it ends inside is kept), and its words are billed as prompt tokens.
    pub(super) fn continue_after(&mut self, prefix: &str) {
        let whole = self.content.concat();
        if let Some(rest) = whole.strip_prefix(prefix) {
            let mut covered = 0;
            let mut pieces = Vec::new();
            for piece in &self.content {
                let start = covered;
                covered += piece.len();
                if covered > prefix.len() {
                    pieces.push(whole[start.max(prefix.len())..covered].to_string());
                }
            }
            debug_assert_eq!(pieces.concat(), rest);
            self.content = pieces;
        }
        if let Some(usage) = self.usage.as_mut() {
            let prompt = MOCK_PROMPT_TOKENS + prefix.split_whitespace().count() as u64;
            let completion = self.content.len() as u64;
            usage["prompt_tokens"] = json!(prompt);
            usage["completion_tokens"] = json!(completion);
            usage["total_tokens"] = json!(prompt + completion);
        }
    }
}
