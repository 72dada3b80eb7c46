//! The OpenAI chat dialect's exchange (docs/behaviour.md §7.1): each SSE `data` is a
//! `chat.completion.chunk` ([`decode_chunk`]), `[DONE]` the end marker; a whole answer is a
//! `chat.completion` ([`decode_completion`]). The end of an answer is judged by
//! `WireDialect::verdict`'s default, `end_marker_verdict`: an empty completion, an early EOF, a
//! missing `[DONE]`.

use std::time::Instant;

use super::chat_exchange::{Reading, WireDialect};
use crate::error::TransportError;
use crate::transport::exchange::ChatDelta;
use crate::transport::sse::SseEvent;
use crate::transport::wire::{decode_chunk, decode_completion};
use crate::types::ThinkingBlock;

/// OpenAI's chat dialect: no state of its own besides the exchange's.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OpenAiChat;

impl WireDialect for OpenAiChat {
    fn read_event(
        &mut self,
        read: &mut Reading,
        event: SseEvent,
        now: Instant,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        match event {
            SseEvent::Done => read.end_marker(),
            SseEvent::Data(data) => read.apply(decode_chunk(&data)?, now, out),
        }
        Ok(())
    }

    fn read_answer(
        &mut self,
        read: &mut Reading,
        body: &str,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        read.acc.apply(decode_completion(body)?, out);
        read.complete = true;
        Ok(())
    }

    fn into_thinking(self) -> Vec<ThinkingBlock> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    //! The machine on virtual time: bytes at awkward boundaries, stall deadlines against a fake
    //! `now`, and the verdicts at the end of a stream.

    use polygateway_actors::{FailureClass, SourceReason};
    use serde_json::json;

    use super::*;
    use crate::config::MissingDone;
    use crate::transport::machine::chat_exchange::{BodyEnd, ChatExchange};
    use crate::transport::prefill::LeadTrim;
    use crate::transport::script::runs::{assert_same_at_every_split, config, content, ms, run};
    use crate::transport::watchdog::StallLayer;
    use crate::transport::TransportConfig;
    use crate::types::UsageSource;

    fn exchange(config: &TransportConfig, t0: Instant) -> ChatExchange<'_, OpenAiChat> {
        ChatExchange::new(config, t0, OpenAiChat, true, LeadTrim::default())
    }

    fn frame(delta: serde_json::Value, finish: Option<&str>) -> String {
        let chunk = json!({"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    }

    /// A stream with everything a real one sends: a role chunk, a keep-alive, CRLF and LF line
    /// ends, `data:` without its space, multi-byte text, a `<think>` block in content, a finish
    /// chunk, a usage chunk with no choices, `[DONE]`.
    fn rich_stream() -> String {
        let mut body = String::from(": keep-alive\r\n\r\n");
        body += &frame(json!({"role": "assistant", "content": ""}), None).replace('\n', "\r\n");
        body += &frame(json!({"content": "<think>Ein Gedanke – ü"}), None);
        body += &frame(json!({"content": "ber alles</think>Grüße, "}), None)
            .replacen("data: ", "data:", 1);
        body += &frame(json!({"content": "世界 🌍"}), None);
        body += &frame(json!({}), Some("stop"));
        body +=
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\n";
        body + "data: [DONE]\n\n"
    }

    #[test]
    fn bytes_split_anywhere_give_the_same_deltas_and_answer() {
        let s = config();
        let t0 = Instant::now();
        let body = rich_stream();
        let end = (t0 + ms(20), BodyEnd::Finished);
        let (whole_deltas, whole) = run(exchange(&s, t0), &[(t0 + ms(10), body.as_bytes())], end);
        let whole = whole.unwrap();
        assert_eq!(whole.content, "Grüße, 世界 🌍");
        assert_eq!(whole.thinking, "Ein Gedanke – über alles");
        assert_eq!(content(&whole_deltas), whole.content);
        assert_eq!(whole.finish_reason.as_deref(), Some("stop"));
        assert_eq!(whole.usage_source, UsageSource::Measured);
        assert_eq!((whole.prompt_tokens, whole.completion_tokens), (3, 5));
        assert!(!whole.truncated);
        assert_eq!(whole.ttft_ms, Some(10.0));
        assert_eq!(whole.latency_ms, 20.0);
        // Every piece size, down to one byte: inside UTF-8 characters, between CR and LF,
        // inside `<think>` tags and `[DONE]`.
        assert_same_at_every_split(
            || exchange(&s, t0),
            &body,
            t0 + ms(10),
            end,
            &(whole_deltas, whole),
        );
    }

    #[test]
    fn nothing_after_done_is_read() {
        let s = config();
        let t0 = Instant::now();
        let mut x = exchange(&s, t0);
        let mut body = frame(json!({"content": "hi"}), Some("stop")) + "data: [DONE]\n\n";
        body += "data: {not json at all\n\n";
        x.on_bytes(body.as_bytes()).unwrap();
        let mut out = Vec::new();
        while x.poll_deltas(t0, &mut out).unwrap() {}
        assert!(x.is_over());
        assert_eq!(out, vec![ChatDelta::Content("hi".into())]);
        assert_eq!(x.finish(t0).unwrap().content, "hi");
    }

    #[test]
    fn the_first_token_deadline_fires_on_a_fake_clock() {
        let s = config();
        let t0 = Instant::now();
        let mut x = exchange(&s, t0);
        assert_eq!(x.deadline(), (t0 + ms(100), StallLayer::Ttft));
        assert!(x.on_timeout(t0 + ms(99)).is_none(), "early: keep waiting");
        // A role chunk and a keep-alive are not tokens: the TTFT deadline stays.
        x.on_bytes(frame(json!({"role": "assistant", "content": ""}), None).as_bytes())
            .unwrap();
        x.on_bytes(b": ping\n\n").unwrap();
        let mut out = Vec::new();
        while x.poll_deltas(t0 + ms(60), &mut out).unwrap() {}
        assert!(out.is_empty());
        assert_eq!(x.deadline(), (t0 + ms(100), StallLayer::Ttft));
        let stall = x.on_timeout(t0 + ms(100)).expect("due");
        assert_eq!(stall.class, FailureClass::Transient);
        assert_eq!(stall.reason, SourceReason::Timeout);
        assert_eq!(stall.message, "watchdog: ttft deadline of 0.100s exceeded");
        // Nothing was delivered: nothing to continue.
        assert!(x.cut(stall).cut.is_none());
    }

    #[test]
    fn an_inter_token_stall_is_a_cut_carrying_what_was_delivered() {
        let s = config();
        let t0 = Instant::now();
        let first = frame(json!({"content": "Hello"}), None);
        let late = frame(json!({"content": " world"}), None);
        let chunks = [
            (t0 + ms(50), first.as_bytes()),
            // 40 ms after the last token: past the 30 ms inter-token deadline.
            (t0 + ms(90), late.as_bytes()),
        ];
        let (deltas, verdict) = run(exchange(&s, t0), &chunks, (t0 + ms(95), BodyEnd::Finished));
        assert_eq!(content(&deltas), "Hello");
        let e = verdict.unwrap_err();
        assert_eq!(
            e.message,
            "watchdog: inter_token deadline of 0.030s exceeded"
        );
        let cut = e.cut.as_deref().expect("a cut after content");
        assert_eq!(cut.content, "Hello");
        assert!(cut.truncated);
        assert_eq!(cut.source_name, "openai_1");
        // Tokens every 25 ms never stall between tokens, but the total deadline ends it.
        let mut s = config();
        s.timeout = ms(120);
        let token = frame(json!({"content": "x"}), None);
        let chunks: Vec<_> = (1..=6)
            .map(|i| (t0 + ms(25 * i), token.as_bytes()))
            .collect();
        let (deltas, verdict) = run(exchange(&s, t0), &chunks, (t0 + ms(200), BodyEnd::Finished));
        assert_eq!(deltas.len(), 4, "tokens at 25, 50, 75, 100 ms");
        let e = verdict.unwrap_err();
        assert_eq!(e.message, "watchdog: total deadline of 0.120s exceeded");
    }

    #[test]
    fn timings_come_from_the_instants_given() {
        let s = config();
        let t0 = Instant::now();
        let a = frame(json!({"content": "a"}), None);
        let b = frame(json!({"reasoning_content": "b"}), None);
        let c = frame(json!({"content": "c"}), Some("stop")) + "data: [DONE]\n\n";
        let chunks = [
            (t0 + ms(40), a.as_bytes()),
            (t0 + ms(45), b.as_bytes()),
            (t0 + ms(70), c.as_bytes()),
        ];
        let (_, verdict) = run(exchange(&s, t0), &chunks, (t0 + ms(80), BodyEnd::Finished));
        let answer = verdict.unwrap();
        assert_eq!(answer.ttft_ms, Some(40.0));
        assert_eq!(answer.max_inter_token_ms, Some(25.0));
        // The body was not awaited to its end after `[DONE]`: latency is the verdict's instant.
        assert_eq!(answer.latency_ms, 80.0);
        assert_eq!(answer.content, "ac");
        assert_eq!(answer.thinking, "b");
    }

    /// The verdict on a stream of `frames`, ended by `how`, under `missing_done`.
    fn verdict_of(
        frames: &[&str],
        how: BodyEnd,
        missing_done: MissingDone,
    ) -> Result<crate::types::LlmResponse, TransportError> {
        let mut s = config();
        s.missing_done = missing_done;
        let t0 = Instant::now();
        let chunks: Vec<_> = frames.iter().map(|f| (t0 + ms(5), f.as_bytes())).collect();
        run(exchange(&s, t0), &chunks, (t0 + ms(10), how)).1
    }

    #[test]
    fn the_end_of_a_stream_is_judged() {
        let done = "data: [DONE]\n\n".to_string();
        let text = frame(json!({"content": "partial answer"}), None);
        let usage =
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2}}\n\n"
                .to_string();
        let retry = MissingDone::Retry;

        // Truncated: content, no `[DONE]`.
        let e = verdict_of(&[&text], BodyEnd::Finished, retry).unwrap_err();
        assert_eq!(e.class, FailureClass::Transient);
        assert_eq!(e.reason, SourceReason::NetworkError);
        assert_eq!(
            e.message,
            "truncated stream: ended without [DONE] after 14 chars of content"
        );
        assert_eq!(
            e.cut.as_deref().map(|c| c.content.as_str()),
            Some("partial answer")
        );
        let e = verdict_of(&[&text], BodyEnd::Closed, retry).unwrap_err();
        assert_eq!(
            e.message,
            "truncated stream: connection closed after 14 chars of content, without [DONE]"
        );
        // Salvaged: the answer, marked truncated; usage estimated only if a usage frame came.
        let salvaged = verdict_of(&[&text], BodyEnd::Closed, MissingDone::Salvage).unwrap();
        assert!(salvaged.truncated);
        assert_eq!(salvaged.usage_source, UsageSource::Unavailable);
        let salvaged =
            verdict_of(&[&text, &usage], BodyEnd::Finished, MissingDone::Salvage).unwrap();
        assert_eq!(salvaged.usage_source, UsageSource::Estimated);
        assert_eq!(salvaged.prompt_tokens, 2);

        // Early EOF: nothing said, however it ended.
        let e = verdict_of(&[], BodyEnd::Finished, MissingDone::Salvage).unwrap_err();
        assert_eq!(e.message, "early_eof: the stream ended before any content");
        assert!(e.cut.is_none());
        let e = verdict_of(&[&usage], BodyEnd::Closed, retry).unwrap_err();
        assert_eq!(e.message, "early_eof: connection closed before any content");

        // Finish reasons of a complete stream that said nothing.
        let finished = |reason: &str| {
            verdict_of(
                &[&frame(json!({}), Some(reason)), &done],
                BodyEnd::Finished,
                retry,
            )
        };
        let length = finished("length").unwrap();
        assert_eq!(length.finish_reason.as_deref(), Some("length"));
        assert_eq!(length.content, "");
        let e = finished("content_filter").unwrap_err();
        assert_eq!(e.class, FailureClass::RequestRejected);
        assert_eq!(
            e.message,
            "content_filter: the stream finished was withheld by the provider's content filter"
        );
        let e = finished("stop").unwrap_err();
        assert_eq!(e.class, FailureClass::Transient);
        assert_eq!(
            e.message,
            "empty completion: the stream finished without content, tool calls or refusal"
        );

        // A tool call and a refusal are answers, with no text.
        let call = frame(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "lookup", "arguments": "{\"q\":"}}]}),
            None,
        );
        let more = frame(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            Some("tool_calls"),
        );
        let answer = verdict_of(&[&call, &more, &done], BodyEnd::Finished, retry).unwrap();
        assert_eq!(answer.tool_calls.len(), 1);
        assert_eq!(answer.tool_calls[0].function.arguments, "{\"q\":1}");
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        let refusal = frame(json!({"refusal": "I can't help with that."}), Some("stop"));
        let answer = verdict_of(&[&refusal, &done], BodyEnd::Finished, retry).unwrap();
        assert_eq!(answer.refusal.as_deref(), Some("I can't help with that."));
        assert_eq!(answer.content, "");
    }

    #[test]
    fn a_whole_answer_is_judged_before_its_deltas_are_handed_on() {
        let s = config();
        let t0 = Instant::now();
        let body = json!({"model": "m", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "<think>hm</think>Paris"},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}});
        let mut x = exchange(&s, t0);
        let mut out = Vec::new();
        x.on_answer(body.to_string().as_bytes(), &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                ChatDelta::Reasoning("hm".into()),
                ChatDelta::Content("Paris".into())
            ]
        );
        let answer = x.finish(t0 + ms(30)).unwrap();
        assert_eq!(answer.content, "Paris");
        assert_eq!(answer.latency_ms, 30.0);
        assert_eq!(answer.ttft_ms, None);
        assert!(!answer.truncated);
        assert_eq!(answer.usage_source, UsageSource::Measured);
        // Said nothing: an empty completion, and no delta is handed on.
        let empty = json!({"choices": [{"index": 0, "message": {"role": "assistant",
            "content": null}, "finish_reason": "stop"}]});
        let mut x = exchange(&s, t0);
        let mut out = Vec::new();
        let e = x
            .on_answer(empty.to_string().as_bytes(), &mut out)
            .unwrap_err();
        assert_eq!(
            e.message,
            "empty completion: the answer without content, tool calls or refusal"
        );
    }
}
