//! One chat answer assembled from the frames that carried it: text and reasoning (through the
//! think-tag splitter), tool calls put together by their `index` (the `id` and name usually come
//! in a call's first piece only, its arguments split across many; parallel calls interleave; a
//! whole call may come in one piece), the legacy `function_call`, a refusal, logprobs, the finish
//! reason, and the choices after the first when `n > 1`.
//!
//! Arguments are concatenated exactly as they arrived: never parsed, repaired or reordered. A
//! model that produced invalid JSON gets its invalid JSON back to the caller.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::exchange::ChatDelta;
use super::think::ThinkSplitter;
use super::wire::{ChoiceFrame, ChunkFrame, WireFunction, WireToolCall, WireUsage};
use crate::types::{Choice, FunctionCall, LlmResponse, ToolCall, ToolCallDelta};

/// What has arrived so far of one answer.
pub(crate) struct Assembly {
    pub(crate) model_reported: Option<String>,
    pub(crate) usage: Option<WireUsage>,
    system_fingerprint: Option<String>,
    strips_think: bool,
    /// Choice 0: its deltas go to the consumer.
    first: ChoiceAssembly,
    /// Choices 1.. of an `n > 1` request, assembled quietly.
    others: BTreeMap<u32, ChoiceAssembly>,
    /// Deltas of the other choices, absorbed and dropped (reused buffer).
    scratch: Vec<ChatDelta>,
}

impl Assembly {
    pub(crate) fn new(strips_think: bool) -> Self {
        Self {
            model_reported: None,
            usage: None,
            system_fingerprint: None,
            strips_think,
            first: ChoiceAssembly::new(strips_think),
            others: BTreeMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Fold one frame in; the first choice's new deltas are appended to `out`. Returns `true`
    /// when the frame carried a token (text, reasoning, tool-call or refusal output).
    pub(crate) fn apply(&mut self, frame: ChunkFrame<'_>, out: &mut Vec<ChatDelta>) -> bool {
        if self.model_reported.is_none() {
            self.model_reported = frame.model.map(Cow::into_owned);
        }
        if frame.usage.is_some() {
            self.usage = frame.usage;
        }
        // The last one reported wins; copied only when it changes.
        if let Some(fingerprint) = frame.system_fingerprint {
            if self.system_fingerprint.as_deref() != Some(&*fingerprint) {
                self.system_fingerprint = Some(fingerprint.into_owned());
            }
        }
        let mut token = false;
        for choice in frame.choices {
            if choice.index == 0 {
                token |= self.first.apply(choice, out);
            } else {
                let strips = self.strips_think;
                let other = self
                    .others
                    .entry(choice.index)
                    .or_insert_with(|| ChoiceAssembly::new(strips));
                token |= other.apply(choice, &mut self.scratch);
                self.scratch.clear();
            }
        }
        token
    }

    /// Flush what the think splitters hold back.
    pub(crate) fn finish(&mut self, out: &mut Vec<ChatDelta>) {
        self.first.finish(out);
        for other in self.others.values_mut() {
            other.finish(&mut self.scratch);
            self.scratch.clear();
        }
    }

    /// Whether any choice says something: text, a tool call, a function call or a refusal.
    pub(crate) fn has_answer(&self) -> bool {
        self.first.has_answer() || self.others.values().any(ChoiceAssembly::has_answer)
    }

    /// Whether anything reached the consumer's side: an answer, or reasoning.
    pub(crate) fn has_output(&self) -> bool {
        self.has_answer() || !self.first.thinking.is_empty()
    }

    /// The first choice's finish reason.
    pub(crate) fn finish_reason(&self) -> Option<&str> {
        self.first.finish_reason.as_deref()
    }

    /// Characters of text of the first choice (for error messages).
    pub(crate) fn content_chars(&self) -> usize {
        self.first.content.chars().count()
    }

    /// The response's answer fields (the caller fills source, usage and timings).
    pub(crate) fn into_response(self) -> LlmResponse {
        let first = self.first;
        let mut r = LlmResponse::new(first.content);
        r.thinking = first.thinking;
        r.tool_calls = first.tool_calls.into_calls();
        r.function_call = first.function_call;
        r.refusal = first.refusal;
        r.finish_reason = first.finish_reason;
        r.logprobs = first.logprobs;
        r.model_reported = self.model_reported;
        r.system_fingerprint = self.system_fingerprint;
        r.other_choices = self
            .others
            .into_iter()
            .map(|(index, c)| Choice {
                index,
                content: c.content,
                thinking: c.thinking,
                tool_calls: c.tool_calls.into_calls(),
                function_call: c.function_call,
                refusal: c.refusal,
                finish_reason: c.finish_reason,
                logprobs: c.logprobs,
            })
            .collect();
        r
    }
}

/// One choice being assembled.
struct ChoiceAssembly {
    content: String,
    thinking: String,
    splitter: Option<ThinkSplitter>,
    tool_calls: ToolCallAssembly,
    function_call: Option<FunctionCall>,
    refusal: Option<String>,
    logprobs: Option<Value>,
    finish_reason: Option<String>,
}

impl ChoiceAssembly {
    fn new(strips_think: bool) -> Self {
        Self {
            content: String::new(),
            thinking: String::new(),
            splitter: strips_think.then(ThinkSplitter::new),
            tool_calls: ToolCallAssembly::default(),
            function_call: None,
            refusal: None,
            logprobs: None,
            finish_reason: None,
        }
    }

    fn apply(&mut self, choice: ChoiceFrame, out: &mut Vec<ChatDelta>) -> bool {
        if choice.finish_reason.is_some() {
            self.finish_reason = choice.finish_reason;
        }
        if let Some(piece) = choice.logprobs {
            merge_logprobs(&mut self.logprobs, piece);
        }
        let start = out.len();
        let mut token = false;
        if let Some(r) = choice.reasoning.filter(|r| !r.is_empty()) {
            token = true;
            out.push(ChatDelta::Reasoning(r));
        }
        if let Some(c) = choice.content.filter(|c| !c.is_empty()) {
            token = true;
            match &mut self.splitter {
                Some(s) => s.push(&c, out),
                None => out.push(ChatDelta::Content(c)),
            }
        }
        self.absorb(start, out);
        for (position, call) in choice.tool_calls.into_iter().enumerate() {
            token = true;
            out.push(ChatDelta::ToolCall(self.tool_calls.add(position, call)));
        }
        if let Some(piece) = choice.function_call {
            token = true;
            let call = self.function_call.get_or_insert_with(FunctionCall::default);
            append_function(call, piece);
        }
        if let Some(r) = choice.refusal.filter(|r| !r.is_empty()) {
            token = true;
            self.refusal.get_or_insert_with(String::new).push_str(&r);
            out.push(ChatDelta::Refusal(r));
        }
        token
    }

    fn finish(&mut self, out: &mut Vec<ChatDelta>) {
        let start = out.len();
        if let Some(s) = &mut self.splitter {
            s.finish(out);
        }
        self.absorb(start, out);
    }

    /// Take the text and reasoning of the deltas from `start` on into the answer.
    fn absorb(&mut self, start: usize, deltas: &[ChatDelta]) {
        for d in &deltas[start..] {
            match d {
                ChatDelta::Content(c) => self.content.push_str(c),
                ChatDelta::Reasoning(r) => self.thinking.push_str(r),
                // Assembled from the wire piece itself, which also keeps its unmodelled fields;
                // a refusal is taken where it is read.
                ChatDelta::ToolCall(_)
                | ChatDelta::Refusal(_)
                | ChatDelta::ThinkingSignature(_) => {}
            }
        }
    }

    fn has_answer(&self) -> bool {
        !self.content.trim().is_empty()
            || !self.tool_calls.calls.is_empty()
            || self.function_call.is_some()
            || self.refusal.is_some()
    }
}

/// Tool calls put together by `index`, in order of first appearance until the end, then by
/// index.
#[derive(Default)]
struct ToolCallAssembly {
    calls: Vec<(u32, ToolCall)>,
}

impl ToolCallAssembly {
    /// Add one piece (`position`: its place in the frame's array, the index of a call that
    /// names none) and return the piece as a consumer sees it.
    fn add(&mut self, position: usize, piece: WireToolCall) -> ToolCallDelta {
        let index = match piece.index {
            Some(index) => index,
            // Without an index, a piece with a new id is a new call; otherwise it continues the
            // call at its position (non-streaming answers list whole calls without index).
            None => {
                let at = u32::try_from(position).unwrap_or(u32::MAX);
                let clash = piece.id.as_ref().is_some_and(|id| {
                    self.find(at)
                        .is_some_and(|c| !c.id.is_empty() && &c.id != id)
                });
                if clash {
                    self.calls.iter().map(|(i, _)| i + 1).max().unwrap_or(0)
                } else {
                    at
                }
            }
        };
        let WireToolCall {
            id,
            kind,
            function,
            extra,
            ..
        } = piece;
        let function = function.unwrap_or_default();
        let delta = ToolCallDelta {
            index,
            id: id.clone().filter(|i| !i.is_empty()),
            name: function.name.clone().filter(|n| !n.is_empty()),
            arguments: function.arguments.clone().unwrap_or_default(),
            extra: extra.clone(),
        };
        let slot = match self.calls.iter().position(|(i, _)| *i == index) {
            Some(at) => &mut self.calls[at].1,
            None => {
                self.calls.push((index, ToolCall::function("", "", "")));
                let last = self.calls.len() - 1;
                &mut self.calls[last].1
            }
        };
        if let Some(id) = id.filter(|i| !i.is_empty()) {
            if slot.id.is_empty() {
                slot.id = id;
            }
        }
        if let Some(kind) = kind.filter(|k| !k.is_empty()) {
            slot.kind = kind;
        }
        merge_extra(&mut slot.extra, extra);
        append_function(&mut slot.function, function);
        delta
    }

    fn find(&self, index: u32) -> Option<&ToolCall> {
        self.calls.iter().find(|(i, _)| *i == index).map(|(_, c)| c)
    }

    fn into_calls(mut self) -> Vec<ToolCall> {
        self.calls.sort_by_key(|(i, _)| *i);
        self.calls.into_iter().map(|(_, c)| c).collect()
    }
}

/// A function piece: the name is set once (some providers repeat it in every piece), the
/// arguments are appended as they came.
fn append_function(call: &mut FunctionCall, piece: WireFunction) {
    if let Some(name) = piece.name.filter(|n| !n.is_empty()) {
        if call.name.is_empty() {
            call.name = name;
        }
    }
    if let Some(arguments) = piece.arguments {
        call.arguments.push_str(&arguments);
    }
}

fn merge_extra(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (k, v) in from {
        into.entry(k).or_insert(v);
    }
}

/// Streamed logprobs come as one object per chunk whose arrays (`content`, `refusal`) continue
/// each other: arrays are joined, anything else is taken from the latest piece.
fn merge_logprobs(into: &mut Option<Value>, piece: Value) {
    let Some(Value::Object(acc)) = into else {
        *into = Some(piece);
        return;
    };
    let Value::Object(piece) = piece else {
        return;
    };
    for (k, v) in piece {
        match (acc.get_mut(&k), v) {
            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
            // A later piece's `null` does not erase what earlier pieces said.
            (Some(_), Value::Null) => {}
            (_, v) => {
                acc.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::wire::decode_chunk;
    use serde_json::json;

    fn assemble(frames: &[&str]) -> (LlmResponse, Vec<ChatDelta>) {
        let mut acc = Assembly::new(false);
        let mut out = Vec::new();
        for f in frames {
            acc.apply(decode_chunk(f).unwrap(), &mut out);
        }
        acc.finish(&mut out);
        (acc.into_response(), out)
    }

    #[test]
    fn streamed_logprobs_are_joined() {
        let (r, _) = assemble(&[
            r#"{"choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a"}],"refusal":null}}]}"#,
            r#"{"choices":[{"delta":{"content":"b"},"logprobs":{"content":[{"token":"b"}],"refusal":null}}]}"#,
        ]);
        assert_eq!(
            r.logprobs,
            Some(json!({"content": [{"token": "a"}, {"token": "b"}], "refusal": null}))
        );
    }

    #[test]
    fn a_call_without_index_and_a_new_id_is_a_new_call() {
        let (r, out) = assemble(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"[]"}}]}}]}"#,
        ]);
        let ids: Vec<_> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(r.tool_calls[1].function.arguments, "[]");
        assert!(matches!(&out[1], ChatDelta::ToolCall(d) if d.index == 1));
    }

    #[test]
    fn other_choices_are_assembled_apart() {
        let (r, out) = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"content":"Paris"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"Lyon"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{},"finish_reason":"length"},{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(
            (r.content.as_str(), r.finish_reason.as_deref()),
            ("Paris", Some("stop"))
        );
        assert_eq!(r.other_choices.len(), 1);
        assert_eq!(r.other_choices[0].content, "Lyon");
        assert_eq!(r.other_choices[0].finish_reason.as_deref(), Some("length"));
        // Only the first choice's deltas reach the consumer.
        assert_eq!(out, vec![ChatDelta::Content("Paris".into())]);
    }
}
