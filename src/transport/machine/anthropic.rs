//! Anthropic's Messages dialect's exchange (docs/behaviour.md §7.5): each SSE `data` is one
//! event, read by the dialect's [`StreamState`] into the assembly's frames; `message_stop` is
//! the end marker (`[DONE]` is taken too); an `error` event ends the stream, judged like a cut;
//! a signature piece reaches the consumer as it arrives. A whole answer is one message
//! ([`decode_message`]). The end of an answer is judged as OpenAI's: `WireDialect::verdict`'s
//! default, `end_marker_verdict`.

use std::time::Instant;

use super::chat_exchange::{Reading, StreamEnd, WireDialect};
use crate::error::TransportError;
use crate::transport::dialect::anthropic::response::{decode_message, StreamState};
use crate::transport::exchange::ChatDelta;
use crate::transport::sse::SseEvent;
use crate::types::ThinkingBlock;

/// Anthropic's Messages dialect: the event state of a streamed answer, or the thinking blocks
/// of a whole one.
#[derive(Debug, Default)]
pub(crate) struct AnthropicMessages {
    stream: StreamState,
    /// A whole answer's thinking blocks.
    answered_thinking: Vec<ThinkingBlock>,
}

impl AnthropicMessages {
    /// An answer whose typed-call answer (if any) comes through `forced_tool`.
    pub(crate) fn new(forced_tool: Option<String>) -> Self {
        Self {
            stream: StreamState::new(forced_tool),
            answered_thinking: Vec::new(),
        }
    }
}

impl WireDialect for AnthropicMessages {
    fn read_event(
        &mut self,
        read: &mut Reading,
        event: SseEvent,
        now: Instant,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        let data = match event {
            SseEvent::Done => {
                read.end_marker();
                return Ok(());
            }
            SseEvent::Data(data) => data,
        };
        let fed = self.stream.feed(&data)?;
        if let Some(error) = fed.error {
            // The source gave up mid-answer: judged like a stream cut here.
            read.ending = StreamEnd::ErrorEvent(error);
            read.stop();
            return Ok(());
        }
        if let Some(frame) = fed.frame {
            read.apply(frame, now, out);
        }
        if let Some(piece) = self.stream.take_signature() {
            out.push(ChatDelta::ThinkingSignature(piece));
        }
        if fed.done {
            read.end_marker();
        }
        Ok(())
    }

    fn read_answer(
        &mut self,
        read: &mut Reading,
        body: &str,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        let (frame, thinking) = decode_message(body, self.stream.forced_tool())?;
        self.answered_thinking = thinking;
        read.acc.apply(frame, out);
        read.complete = true;
        Ok(())
    }

    fn into_thinking(self) -> Vec<ThinkingBlock> {
        // One of the two is empty: a streamed answer's blocks, or a whole one's.
        let mut thinking = self.stream.into_thinking();
        thinking.extend(self.answered_thinking);
        thinking
    }
}

#[cfg(test)]
mod tests {
    //! The machine on virtual time: events split at awkward boundaries, the stall clock, the
    //! error event and the stop reasons at the end of a stream.

    use polygateway_actors::{FailureClass, SourceReason};
    use serde_json::{json, Value};

    use super::*;
    use crate::transport::machine::chat_exchange::{BodyEnd, ChatExchange};
    use crate::transport::prefill::{assistant_turn, LeadTrim};
    use crate::transport::script::runs::{
        assert_same_at_every_split, config, content, ms, pieces, run,
    };
    use crate::transport::TransportConfig;
    use crate::types::LlmResponse;

    fn exchange(config: &TransportConfig, t0: Instant) -> ChatExchange<'_, AnthropicMessages> {
        ChatExchange::new(
            config,
            t0,
            AnthropicMessages::new(None),
            false,
            LeadTrim::default(),
        )
    }

    fn event(data: Value) -> String {
        let name = data["type"].as_str().unwrap_or("message").to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    }

    fn start() -> String {
        event(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 7, "output_tokens": 1}}}),
        )
    }

    fn text_block(index: u64, pieces: &[&str]) -> String {
        let mut out = event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}));
        for piece in pieces {
            out += &event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}}));
        }
        out + &event(json!({"type": "content_block_stop", "index": index}))
    }

    fn stop(reason: &str) -> String {
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": reason},
            "usage": {"output_tokens": 9}}),
        ) + &event(json!({"type": "message_stop"}))
    }

    fn thinking_block(index: u64) -> String {
        event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            + &event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "thinking_delta", "thinking": "Überlegung"}}))
            + &event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "signature_delta", "signature": "c2ln"}}))
            + &event(json!({"type": "content_block_stop", "index": index}))
    }

    fn verdict_of(
        body: &str,
        how: BodyEnd,
    ) -> (Vec<ChatDelta>, Result<LlmResponse, TransportError>) {
        let s = config();
        let t0 = Instant::now();
        run(
            exchange(&s, t0),
            &[(t0 + ms(5), body.as_bytes())],
            (t0 + ms(10), how),
        )
    }

    #[test]
    fn events_split_anywhere_give_the_same_deltas_and_answer() {
        let s = config();
        let t0 = Instant::now();
        let body = start()
            + &event(json!({"type": "ping"}))
            + &thinking_block(0)
            + &text_block(1, &["Grüße ", "aus ", "Köln 🌧"])
            + &stop("end_turn");
        let end = (t0 + ms(20), BodyEnd::Finished);
        let (whole_deltas, whole) = run(exchange(&s, t0), &[(t0 + ms(10), body.as_bytes())], end);
        let whole = whole.unwrap();
        assert_eq!(whole.content, "Grüße aus Köln 🌧");
        assert_eq!(whole.thinking, "Überlegung");
        assert_eq!(
            whole.thinking_blocks,
            vec![ThinkingBlock::Thinking {
                thinking: "Überlegung".into(),
                signature: Some("c2ln".into()),
            }]
        );
        assert!(whole_deltas.contains(&ChatDelta::ThinkingSignature("c2ln".into())));
        assert_eq!(content(&whole_deltas), whole.content);
        assert_eq!(whole.finish_reason.as_deref(), Some("stop"));
        assert_eq!((whole.prompt_tokens, whole.completion_tokens), (7, 9));
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
    fn pings_are_no_tokens_and_the_first_token_deadline_fires() {
        let s = config();
        let t0 = Instant::now();
        let body = start() + &event(json!({"type": "ping"}));
        let chunks = [
            (t0 + ms(20), body.as_bytes()),
            (
                t0 + ms(150),
                b"event: ping\ndata: {\"type\":\"ping\"}\n\n".as_slice(),
            ),
        ];
        let (deltas, verdict) = run(exchange(&s, t0), &chunks, (t0 + ms(200), BodyEnd::Finished));
        assert!(deltas.is_empty());
        let e = verdict.unwrap_err();
        assert_eq!(e.reason, SourceReason::Timeout);
        assert_eq!(e.message, "watchdog: ttft deadline of 0.100s exceeded");
    }

    #[test]
    fn an_error_event_ends_the_stream() {
        let overloaded = event(json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}}));
        // Before any content: the source's failure.
        let (_, verdict) = verdict_of(&(start() + &overloaded), BodyEnd::Finished);
        let e = verdict.unwrap_err();
        assert_eq!(e.class, FailureClass::Transient);
        assert_eq!(e.reason, SourceReason::ServerError);
        assert_eq!(
            e.message,
            "the stream's error event before any content: overloaded_error: Overloaded"
        );
        // After content: a truncated stream, cut with what was delivered; nothing after the
        // error event is read.
        let body =
            start() + &text_block(0, &["Half an "]) + &overloaded + &text_block(1, &["answer"]);
        let (deltas, verdict) = verdict_of(&body, BodyEnd::Finished);
        assert_eq!(content(&deltas), "Half an ");
        let e = verdict.unwrap_err();
        assert_eq!(
            e.message,
            "truncated stream: an error event after 8 chars of content: overloaded_error: Overloaded"
        );
        assert_eq!(
            e.cut.as_deref().map(|c| c.content.as_str()),
            Some("Half an ")
        );
    }

    #[test]
    fn stop_reasons_and_truncation_are_judged() {
        // Cut before `message_stop`.
        let (_, verdict) = verdict_of(&(start() + &text_block(0, &["Hi"])), BodyEnd::Closed);
        let e = verdict.unwrap_err();
        assert_eq!(
            e.message,
            "truncated stream: connection closed after 2 chars of content, without [DONE]"
        );
        // A refusal with nothing said is the request's: rejected, not the source's fault.
        let (_, verdict) = verdict_of(&(start() + &stop("refusal")), BodyEnd::Finished);
        let e = verdict.unwrap_err();
        assert_eq!(e.class, FailureClass::RequestRejected);
        // With something said, a refusal is an answer.
        let (_, verdict) = verdict_of(
            &(start() + &text_block(0, &["No."]) + &stop("refusal")),
            BodyEnd::Finished,
        );
        assert_eq!(verdict.unwrap().finish_reason.as_deref(), Some("refusal"));
        // `max_tokens` with nothing said (all spent thinking) is a complete answer.
        let (_, verdict) = verdict_of(
            &(start() + &thinking_block(0) + &stop("max_tokens")),
            BodyEnd::Finished,
        );
        let answer = verdict.unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("length"));
        assert_eq!(answer.thinking, "Überlegung");
        // A tool call alone is an answer.
        let tool = event(
            json!({"type": "content_block_start", "index": 0, "content_block":
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
        ) + &event(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{\"city\":\"Paris\"}"}}));
        let (_, verdict) = verdict_of(&(start() + &tool + &stop("tool_use")), BodyEnd::Finished);
        let answer = verdict.unwrap();
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            answer.tool_calls[0].function.arguments,
            "{\"city\":\"Paris\"}"
        );
    }

    #[test]
    fn a_continuation_loses_the_whitespace_its_prefill_lost() {
        let s = config();
        let t0 = Instant::now();
        let (_, trim) = assistant_turn("The answer is \n");
        let x = ChatExchange::new(&s, t0, AnthropicMessages::new(None), false, trim);
        let body = start() + &text_block(0, &[" ", " 4", "2."]) + &stop("end_turn");
        let (deltas, verdict) = run(
            x,
            &pieces(body.as_bytes(), 7, t0 + ms(5)),
            (t0 + ms(9), BodyEnd::Finished),
        );
        assert_eq!(content(&deltas), "42.");
        // The whole text is the transport's to trim, once (`ChatTransport::send`).
        assert_eq!(verdict.unwrap().content, "  42.");
    }

    #[test]
    fn a_whole_message_is_one_answer() {
        let s = config();
        let t0 = Instant::now();
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-test", "stop_reason": "end_turn",
            "content": [{"type": "thinking", "thinking": "hm", "signature": "c2ln"},
                        {"type": "text", "text": "Paris."}],
            "usage": {"input_tokens": 3, "output_tokens": 2}});
        let mut x = exchange(&s, t0);
        let mut out = Vec::new();
        x.on_answer(message.to_string().as_bytes(), &mut out)
            .unwrap();
        assert_eq!(content(&out), "Paris.");
        let answer = x.finish(t0 + ms(12)).unwrap();
        assert_eq!(answer.content, "Paris.");
        assert_eq!(answer.thinking_blocks.len(), 1);
        assert_eq!(answer.latency_ms, 12.0);
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
    }
}
