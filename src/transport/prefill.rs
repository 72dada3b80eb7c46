//! Mid-stream continuation, the chat transport's side (docs/behaviour.md §5.10): reading a cut
//! stream's error as a [`StreamCut`], the request that continues it (the conversation plus the
//! delivered text as a prefill), the prefill as each dialect writes it, and the continuation's
//! answer spliced to the cut one.
//!
//! The decisions (may it be continued, on which source) are the runtime's; this file only says
//! what the answer had begun and how a prefill looks on the wire:
//! - OpenAI dialect (DeepSeek's chat prefix completion, Mistral): a final assistant message
//!   with `"prefix": true`; the answer is the continuation;
//! - Anthropic: a final `assistant` turn, which the API refuses when it ends with whitespace, so
//!   that whitespace is cut from the prefill and the same amount of leading whitespace is cut
//!   from the continuation ([`LeadTrim`]): the caller, who saw it already, does not see it twice.

use std::sync::Arc;

use polygateway_actors::StreamCut;

use super::exchange::{ChatDelta, ChatWireRequest};
use crate::error::TransportError;
use crate::types::{LlmResponse, Message, UsageSource};

/// A failed stream's `error`, with what it had said when it was cut (`partial`, built only
/// then): a transient failure after `output` (content, reasoning or a tool call's piece) reached
/// the consumer, which a continuation on another source may carry on. What a think-tag splitter
/// still holds never reached the consumer, so the assembly's text is what was delivered.
pub(crate) fn keep_cut(
    mut error: TransportError,
    output: bool,
    partial: impl FnOnce() -> LlmResponse,
) -> TransportError {
    if output && error.class == polygateway_actors::FailureClass::Transient {
        let mut partial = partial();
        partial.truncated = true;
        error.cut = Some(Box::new(partial));
    }
    error
}

/// What a failed attempt's error says of its cut, and the request that continues it: `None`
/// when it is not a stream cut after content.
pub(crate) fn stream_cut(
    request: &ChatWireRequest,
    error: &TransportError,
) -> Option<StreamCut<ChatWireRequest>> {
    let cut = error.cut.as_deref()?;
    let mut continuation = request.clone();
    // The canonical call carries the conversation to any dialect; a native body would reach
    // only its own, as written, without the prefill.
    continuation.native = None;
    continuation.prefill = Some(Arc::from(cut.content.as_str()));
    Some(StreamCut {
        tool_call: !cut.tool_calls.is_empty() || cut.function_call.is_some(),
        thinking: !cut.thinking.is_empty() || !cut.thinking_blocks.is_empty(),
        refusal: cut.refusal.is_some(),
        structured: structured(request),
        request: continuation,
    })
}

/// Whether the call asks for structured output, however it was written: a typed call's schema,
/// a `response_format` (explicit or in the sampling overlay, as the OpenAI ingress passes it),
/// or a native Anthropic body's `output_config`.
fn structured(request: &ChatWireRequest) -> bool {
    request.schema.is_some()
        || request.response_format.is_some()
        || request.overlay.contains_key("response_format")
        || request
            .native
            .as_ref()
            .is_some_and(|n| n.body.contains_key("output_config"))
}

/// The continuation joined to the cut answer in `error`: the delivered text then the
/// continuation's, the usage of both attempts, and where it was continued from.
///
/// A cut stream rarely reported its usage (OpenAI's usage frame comes last; Anthropic's
/// `message_start` gives the input): the sum then holds what the cut reported, and is
/// `estimated` rather than `measured`.
pub(crate) fn splice(
    error: &TransportError,
    mut continuation: LlmResponse,
    cut_source: &str,
) -> LlmResponse {
    continuation.continued_from = Some(cut_source.to_owned());
    let Some(cut) = error.cut.as_deref() else {
        return continuation;
    };
    continuation.content.insert_str(0, &cut.content);
    continuation.prompt_tokens += cut.prompt_tokens;
    continuation.completion_tokens += cut.completion_tokens;
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    continuation.cached_prompt_tokens =
        add(continuation.cached_prompt_tokens, cut.cached_prompt_tokens);
    continuation.cache_write_5m_tokens = add(
        continuation.cache_write_5m_tokens,
        cut.cache_write_5m_tokens,
    );
    continuation.cache_write_1h_tokens = add(
        continuation.cache_write_1h_tokens,
        cut.cache_write_1h_tokens,
    );
    continuation.reasoning_tokens = add(continuation.reasoning_tokens, cut.reasoning_tokens);
    continuation.usage_source = match (continuation.usage_source, cut.usage_source) {
        (UsageSource::Measured, UsageSource::Measured) => UsageSource::Measured,
        (UsageSource::Unavailable, _) => UsageSource::Unavailable,
        _ => UsageSource::Estimated,
    };
    continuation
}

/// The prefill as an OpenAI-dialect message: a final assistant message with `"prefix": true`.
pub(crate) fn prefix_message(text: &str) -> Message {
    let mut message = Message::assistant(text);
    message.extra.insert("prefix".into(), true.into());
    message
}

/// The prefill as Anthropic's final `assistant` turn (`None` when nothing but whitespace was
/// delivered: no turn is sent), and the whitespace cut from its end, which the continuation's
/// first characters must not repeat.
pub(crate) fn assistant_turn(text: &str) -> (Option<Message>, LeadTrim) {
    let kept = text.trim_end();
    let trim = LeadTrim {
        left: text[kept.len()..].chars().count(),
    };
    ((!kept.is_empty()).then(|| Message::assistant(kept)), trim)
}

/// Leading whitespace to cut from a continuation, up to the amount its prefill lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeadTrim {
    left: usize,
}

impl LeadTrim {
    /// Cut from the content deltas in `deltas`, in order, until the budget is spent or a
    /// character that is not whitespace comes; a delta left empty is dropped.
    pub(crate) fn deltas(&mut self, deltas: &mut Vec<ChatDelta>) {
        if self.left == 0 {
            return;
        }
        deltas.retain_mut(|delta| {
            let ChatDelta::Content(text) = delta else {
                return true;
            };
            if self.left == 0 {
                return true;
            }
            let cut = cut_leading(text, self.left);
            self.left = if cut.1 { 0 } else { self.left - cut.0 };
            !text.is_empty()
        });
    }

    /// Cut from a whole answer's text (what the deltas lost, once).
    pub(crate) fn text(self, text: &mut String) {
        cut_leading(text, self.left);
    }
}

/// Remove up to `budget` leading whitespace characters of `text`; how many, and whether a
/// character that is not whitespace was reached (no more to cut after it).
fn cut_leading(text: &mut String, budget: usize) -> (usize, bool) {
    let mut cut = 0;
    let mut bytes = 0;
    let mut stopped = false;
    for c in text.chars() {
        if cut == budget {
            break;
        }
        if !c.is_whitespace() {
            stopped = true;
            break;
        }
        cut += 1;
        bytes += c.len_utf8();
    }
    text.drain(..bytes);
    (cut, stopped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolCall;

    fn cut_error(partial: LlmResponse) -> TransportError {
        let mut error = TransportError::transient(
            polygateway_actors::SourceReason::NetworkError,
            "truncated stream",
        );
        error.cut = Some(Box::new(partial));
        error
    }

    #[test]
    fn an_error_without_a_cut_is_no_stream_cut() {
        let request = ChatWireRequest::new(vec![Message::user("hi")]);
        let error = TransportError::transient(polygateway_actors::SourceReason::Timeout, "ttft");
        assert!(stream_cut(&request, &error).is_none());
    }

    #[test]
    fn a_text_cut_continues_the_canonical_call_with_the_delivered_text() {
        let request = ChatWireRequest::new(vec![Message::user("hi")]);
        let cut = stream_cut(&request, &cut_error(LlmResponse::new("Hello, wor"))).unwrap();
        assert!(!cut.tool_call && !cut.thinking && !cut.refusal && !cut.structured);
        assert_eq!(cut.request.prefill.as_deref(), Some("Hello, wor"));
        assert_eq!(cut.request.messages, request.messages);
        assert!(cut.request.native.is_none());
    }

    #[test]
    fn what_the_answer_had_begun_is_read_off_the_partial_answer() {
        let mut request = ChatWireRequest::new(vec![Message::user("hi")]);
        let mut partial = LlmResponse::new("Let me call");
        partial.tool_calls = vec![ToolCall::function("call_0", "search", "{\"q\":")];
        let cut = stream_cut(&request, &cut_error(partial)).unwrap();
        assert!(cut.tool_call);
        let mut partial = LlmResponse::new("");
        partial.thinking = "Hmm".into();
        assert!(stream_cut(&request, &cut_error(partial)).unwrap().thinking);
        let mut partial = LlmResponse::new("");
        partial.refusal = Some("I can".into());
        assert!(stream_cut(&request, &cut_error(partial)).unwrap().refusal);
        request.response_format = Some(crate::structured::json_object_format());
        let cut = stream_cut(&request, &cut_error(LlmResponse::new("{\"a\""))).unwrap();
        assert!(cut.structured);
    }

    #[test]
    fn splice_joins_text_and_sums_usage() {
        let mut partial = LlmResponse::new("Hello, wor");
        partial.prompt_tokens = 12;
        partial.usage_source = UsageSource::Measured;
        partial.cached_prompt_tokens = Some(4);
        let mut rest = LlmResponse::new("ld.");
        rest.prompt_tokens = 15;
        rest.completion_tokens = 2;
        rest.usage_source = UsageSource::Measured;
        let joined = splice(&cut_error(partial.clone()), rest.clone(), "m1");
        assert_eq!(joined.content, "Hello, world.");
        assert_eq!((joined.prompt_tokens, joined.completion_tokens), (27, 2));
        assert_eq!(joined.cached_prompt_tokens, Some(4));
        assert_eq!(joined.usage_source, UsageSource::Measured);
        assert_eq!(joined.continued_from.as_deref(), Some("m1"));
        // A cut that reported nothing: the sum is what is known, estimated.
        partial.usage_source = UsageSource::Unavailable;
        let joined = splice(&cut_error(partial), rest.clone(), "m1");
        assert_eq!(joined.usage_source, UsageSource::Estimated);
        rest.usage_source = UsageSource::Unavailable;
        let joined = splice(&cut_error(LlmResponse::new("a")), rest, "m1");
        assert_eq!(joined.usage_source, UsageSource::Unavailable);
    }

    #[test]
    fn openai_prefill_is_a_prefix_message() {
        let json = serde_json::to_value(prefix_message("Hello ")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"role": "assistant", "content": "Hello ", "prefix": true})
        );
    }

    #[test]
    fn anthropic_prefill_loses_its_trailing_whitespace_and_the_continuation_its_repeat() {
        let (turn, mut trim) = assistant_turn("Hello, \n");
        assert_eq!(turn.unwrap().text(), "Hello,");
        // The continuation starts with the whitespace the caller has seen: cut, over deltas.
        let mut deltas = vec![
            ChatDelta::Content(" ".into()),
            ChatDelta::Content(" wor".into()),
            ChatDelta::Content("  ld".into()),
        ];
        trim.deltas(&mut deltas);
        assert_eq!(
            deltas,
            [
                ChatDelta::Content("wor".into()),
                ChatDelta::Content("  ld".into())
            ]
        );
        // A continuation without it keeps every character.
        let (_, mut trim) = assistant_turn("Hello, ");
        let mut deltas = vec![ChatDelta::Content("world".into())];
        trim.deltas(&mut deltas);
        assert_eq!(deltas, [ChatDelta::Content("world".into())]);
        let (_, trim) = assistant_turn("Hello,  ");
        let mut text = " \tworld".to_string();
        trim.text(&mut text);
        assert_eq!(text, "world");
        // Nothing but whitespace delivered: no turn at all.
        assert!(assistant_turn(" \n").0.is_none());
    }
}
