//! Gemini's exchange (docs/behaviour.md §7.5): each SSE `data` is a whole
//! `GenerateContentResponse`, read by the dialect's [`Decoder`]; thought pieces are merged into
//! signed thinking blocks. A stream has no end marker (a stray `[DONE]` is ignored): it is
//! complete when a candidate's `finishReason` arrived and the body ended. A whole answer is one
//! response.
//!
//! The end of an answer: a finish reason that withholds or botches the answer fails the attempt
//! by its class ([`finish_verdict`]); an answer without a finish reason is truncated (retried,
//! or salvaged under `MISSING_DONE=salvage`); a finished answer with nothing in it is an empty
//! completion, unless it ran out of tokens (`length`).

use std::time::Instant;

use polygateway_actors::SourceReason;

use super::chat_exchange::{Reading, StreamEnd, WireDialect};
use crate::config::MissingDone;
use crate::error::TransportError;
use crate::transport::dialect::gemini::{finish_verdict, merge_blocks, Decoder};
use crate::transport::exchange::ChatDelta;
use crate::transport::sse::SseEvent;
use crate::types::{ThinkingBlock, UsageSource};

/// Gemini's dialect: the decoder's state across frames and the thinking blocks so far.
#[derive(Debug, Default)]
pub(crate) struct GeminiContent {
    decoder: Decoder,
    blocks: Vec<ThinkingBlock>,
}

impl GeminiContent {
    fn read(
        &mut self,
        read: &mut Reading,
        data: &str,
    ) -> Result<crate::transport::wire::ChunkFrame<'static>, TransportError> {
        let frame = self.decoder.decode(data)?;
        merge_blocks(&mut self.blocks, frame.thinking_blocks);
        read.complete = self.decoder.finished();
        Ok(frame.frame)
    }
}

impl WireDialect for GeminiContent {
    fn read_event(
        &mut self,
        read: &mut Reading,
        event: SseEvent,
        now: Instant,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        // Gemini sends no `[DONE]`; one would be a stray line, not an ending.
        if let SseEvent::Data(data) = event {
            let frame = self.read(read, &data)?;
            read.apply(frame, now, out);
        }
        Ok(())
    }

    fn read_answer(
        &mut self,
        read: &mut Reading,
        body: &str,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        let frame = self.read(read, body)?;
        read.acc.apply(frame, out);
        Ok(())
    }

    fn verdict(
        &self,
        read: &Reading,
        missing_done: MissingDone,
    ) -> Result<UsageSource, TransportError> {
        let acc = &read.acc;
        let transient = |m: String| Err(TransportError::transient(SourceReason::NetworkError, m));
        let measured = if acc.usage.is_some() {
            UsageSource::Measured
        } else {
            UsageSource::Unavailable
        };
        let how = if read.ending == StreamEnd::ConnectionClosed {
            "connection closed"
        } else {
            "the body ended"
        };
        if read.complete {
            let reason = acc.finish_reason().unwrap_or("other");
            if let Some(e) = finish_verdict(reason) {
                return Err(e);
            }
            if !acc.has_answer() && reason != "length" {
                return transient(format!(
                    "empty completion: finishReason {reason} without content or function calls"
                ));
            }
            return Ok(measured);
        }
        if !acc.has_answer() {
            return transient(format!("early_eof: {how} before any content"));
        }
        match missing_done {
            MissingDone::Retry => transient(format!(
                "truncated stream: {how} after {} chars of content, without finishReason",
                acc.content_chars()
            )),
            MissingDone::Salvage => Ok(if acc.usage.is_some() {
                UsageSource::Estimated
            } else {
                UsageSource::Unavailable
            }),
        }
    }

    fn into_thinking(self) -> Vec<ThinkingBlock> {
        self.blocks
    }
}

#[cfg(test)]
mod tests {
    //! The machine on virtual time: frames split at awkward boundaries, the stall clock, and the
    //! end of a stream without an end marker.

    use polygateway_actors::FailureClass;
    use serde_json::{json, Value};

    use super::*;
    use crate::transport::machine::chat_exchange::{BodyEnd, ChatExchange};
    use crate::transport::prefill::LeadTrim;
    use crate::transport::script::runs::{assert_same_at_every_split, config, content, ms, run};
    use crate::transport::TransportConfig;
    use crate::types::LlmResponse;

    fn exchange(config: &TransportConfig, t0: Instant) -> ChatExchange<'_, GeminiContent> {
        ChatExchange::new(
            config,
            t0,
            GeminiContent::default(),
            false,
            LeadTrim::default(),
        )
    }

    fn data(frame: Value) -> String {
        format!("data: {frame}\r\n\r\n")
    }

    fn text(part: Value, finish: Option<&str>) -> String {
        let mut candidate = json!({"index": 0, "content": {"role": "model", "parts": [part]}});
        if let Some(reason) = finish {
            candidate["finishReason"] = reason.into();
        }
        data(json!({"candidates": [candidate], "modelVersion": "gemini-test"}))
    }

    fn usage() -> String {
        data(
            json!({"candidates": [], "usageMetadata": {"promptTokenCount": 4,
            "candidatesTokenCount": 3, "thoughtsTokenCount": 2}}),
        )
    }

    fn verdict_of(
        body: &str,
        how: BodyEnd,
        missing_done: MissingDone,
    ) -> (Vec<ChatDelta>, Result<LlmResponse, TransportError>) {
        let mut s = config();
        s.missing_done = missing_done;
        let t0 = Instant::now();
        run(
            exchange(&s, t0),
            &[(t0 + ms(5), body.as_bytes())],
            (t0 + ms(10), how),
        )
    }

    #[test]
    fn frames_split_anywhere_give_the_same_deltas_and_answer() {
        let s = config();
        let t0 = Instant::now();
        let body = text(json!({"text": "Denke …", "thought": true}), None)
            + &text(
                json!({"text": "nach.", "thought": true, "thoughtSignature": "c2ln"}),
                None,
            )
            + &text(json!({"text": "Grüße, "}), None)
            + &text(json!({"text": "世界 🌍"}), Some("STOP"))
            + &usage();
        let end = (t0 + ms(20), BodyEnd::Finished);
        let (whole_deltas, whole) = run(exchange(&s, t0), &[(t0 + ms(10), body.as_bytes())], end);
        let whole = whole.unwrap();
        assert_eq!(whole.content, "Grüße, 世界 🌍");
        assert_eq!(whole.thinking, "Denke …nach.");
        assert_eq!(
            whole.thinking_blocks,
            vec![ThinkingBlock::Thinking {
                thinking: "Denke …nach.".into(),
                signature: Some("c2ln".into()),
            }]
        );
        assert_eq!(content(&whole_deltas), whole.content);
        assert_eq!(whole.finish_reason.as_deref(), Some("stop"));
        assert_eq!((whole.prompt_tokens, whole.completion_tokens), (4, 5));
        assert!(!whole.truncated);
        assert_same_at_every_split(
            || exchange(&s, t0),
            &body,
            t0 + ms(10),
            end,
            &(whole_deltas, whole),
        );
    }

    #[test]
    fn the_stream_is_read_to_its_end_and_stalls_are_cuts() {
        let s = config();
        let t0 = Instant::now();
        let mut x = exchange(&s, t0);
        let mut out = Vec::new();
        // A finish reason is no end marker: the body is read to its end.
        x.on_bytes(text(json!({"text": "Hi"}), Some("STOP")).as_bytes())
            .unwrap();
        x.on_bytes(b"data: [DONE]\n\n").unwrap();
        while x.poll_deltas(t0 + ms(5), &mut out).unwrap() {}
        assert!(!x.is_over());
        x.on_end(BodyEnd::Finished).unwrap();
        while x.poll_deltas(t0 + ms(6), &mut out).unwrap() {}
        assert!(x.is_over());
        assert_eq!(x.finish(t0 + ms(7)).unwrap().content, "Hi");
        // A gap past the inter-token deadline: a cut with what was delivered.
        let first = text(json!({"text": "Half"}), None);
        let late = text(json!({"text": " more"}), None);
        let chunks = [
            (t0 + ms(40), first.as_bytes()),
            (t0 + ms(80), late.as_bytes()),
        ];
        let (_, verdict) = run(exchange(&s, t0), &chunks, (t0 + ms(90), BodyEnd::Finished));
        let e = verdict.unwrap_err();
        assert_eq!(
            e.message,
            "watchdog: inter_token deadline of 0.030s exceeded"
        );
        assert_eq!(e.cut.as_deref().map(|c| c.content.as_str()), Some("Half"));
    }

    #[test]
    fn the_end_of_a_stream_is_judged() {
        let retry = MissingDone::Retry;
        // No finish reason: truncated, however the body ended.
        let (_, verdict) = verdict_of(
            &text(json!({"text": "Half"}), None),
            BodyEnd::Finished,
            retry,
        );
        let e = verdict.unwrap_err();
        assert_eq!(
            e.message,
            "truncated stream: the body ended after 4 chars of content, without finishReason"
        );
        assert!(e.cut.is_some());
        let (_, verdict) = verdict_of(&text(json!({"text": "Half"}), None), BodyEnd::Closed, retry);
        assert_eq!(
            verdict.unwrap_err().message,
            "truncated stream: connection closed after 4 chars of content, without finishReason"
        );
        let (_, verdict) = verdict_of(
            &(text(json!({"text": "Half"}), None) + &usage()),
            BodyEnd::Closed,
            MissingDone::Salvage,
        );
        let salvaged = verdict.unwrap();
        assert!(salvaged.truncated);
        assert_eq!(salvaged.usage_source, UsageSource::Estimated);
        let (_, verdict) = verdict_of(&usage(), BodyEnd::Finished, retry);
        assert_eq!(
            verdict.unwrap_err().message,
            "early_eof: the body ended before any content"
        );
        // Finish reasons: safety withholds the answer (the request's), a malformed call is a
        // slip (transient), MAX_TOKENS with nothing said is complete, STOP with nothing is empty.
        let (_, verdict) = verdict_of(
            &text(json!({"text": ""}), Some("SAFETY")),
            BodyEnd::Finished,
            retry,
        );
        assert_eq!(verdict.unwrap_err().class, FailureClass::RequestRejected);
        let (_, verdict) = verdict_of(
            &text(json!({"text": ""}), Some("MALFORMED_FUNCTION_CALL")),
            BodyEnd::Finished,
            retry,
        );
        assert_eq!(verdict.unwrap_err().class, FailureClass::Transient);
        let (_, verdict) = verdict_of(
            &text(json!({"text": "", "thought": true}), Some("MAX_TOKENS")),
            BodyEnd::Finished,
            retry,
        );
        assert_eq!(verdict.unwrap().finish_reason.as_deref(), Some("length"));
        let (_, verdict) = verdict_of(
            &text(json!({"text": ""}), Some("STOP")),
            BodyEnd::Finished,
            retry,
        );
        assert_eq!(
            verdict.unwrap_err().message,
            "empty completion: finishReason stop without content or function calls"
        );
        // A function call alone is an answer.
        let call = text(
            json!({"functionCall": {"name": "weather", "args": {"city": "Paris"}}}),
            Some("STOP"),
        );
        let (deltas, verdict) = verdict_of(&call, BodyEnd::Finished, retry);
        let answer = verdict.unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(answer.tool_calls[0].function.name, "weather");
        assert!(matches!(deltas.as_slice(), [ChatDelta::ToolCall(_)]));
    }

    #[test]
    fn a_whole_answer_is_one_response() {
        let s = config();
        let t0 = Instant::now();
        let body = json!({"candidates": [{"index": 0, "finishReason": "STOP",
            "content": {"role": "model", "parts": [{"text": "Paris."}]}}],
            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1}});
        let mut x = exchange(&s, t0);
        let mut out = Vec::new();
        x.on_answer(body.to_string().as_bytes(), &mut out).unwrap();
        assert_eq!(content(&out), "Paris.");
        let answer = x.finish(t0 + ms(15)).unwrap();
        assert_eq!(answer.content, "Paris.");
        assert!(!answer.truncated);
        assert_eq!(answer.latency_ms, 15.0);
        // Without a finish reason, a whole answer is judged like a truncated stream.
        let unfinished = json!({"candidates": [{"index": 0,
            "content": {"role": "model", "parts": [{"text": "Par"}]}}]});
        let mut x = exchange(&s, t0);
        let e = x
            .on_answer(unfinished.to_string().as_bytes(), &mut Vec::new())
            .unwrap_err();
        assert_eq!(
            e.message,
            "truncated stream: the body ended after 3 chars of content, without finishReason"
        );
    }
}
