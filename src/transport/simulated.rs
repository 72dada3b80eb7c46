//! The actors simulator's upstreams, read through this crate's decoders ([`DecodingWire`]).
//!
//! The simulator (`polygateway_actors::testkit::sim`) plans what each attempt's upstream sends.
//! This wire writes it as the source's provider does — OpenAI's chat completion chunks,
//! Anthropic's Messages events, Gemini's `streamGenerateContent` events, each API's error
//! statuses, bodies and headers — and reads it back with the production pieces: the dialect's
//! error classifier, or its exchange under the source's stall clock, run by the reading loop
//! every streamed attempt runs (`drive::read_answer`, over a [`Script`] on the simulator's
//! time). What the runtime then governs is what the decoders said.

use std::time::{Duration, Instant};

use polygateway_actors::testkit::sim::{Attempt, Failure, Read, Sent, Wire};
use polygateway_actors::Classify;
use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use serde_json::{json, Value};

use super::dialect::answer_reader;
use super::exchange::ChatDelta;
use super::machine::WireDialect;
use super::machine::{AnthropicMessages, BodyEnd, ChatExchange, GeminiContent, OpenAiChat};
use super::prefill::{stream_cut, LeadTrim};
use super::script::Script;
use super::{ChatWireRequest, TransportConfig};
use crate::config::{MissingDone, Secret};
use crate::error::TransportError;
use crate::provider::Dialect;
use crate::types::LlmResponse;

/// The simulator's [`Wire`] over this crate's decoders: source `i` of a seed speaks one of the
/// three dialects (rotated by the seed, so every dialect serves every position over seeds),
/// and every answer is written in it and read back by its production decoder.
///
/// ```
/// use std::sync::Arc;
/// use polygateway::transport::DecodingWire;
/// use polygateway_actors::testkit::sim::run_seed_through;
/// let report = run_seed_through(7, 50, false, false, Arc::new(DecodingWire::new(7)));
/// assert!(report.violations.is_empty(), "{:?}", report.violations);
/// ```
#[derive(Debug)]
pub struct DecodingWire {
    /// The instant the seed's virtual time counts from.
    base: Instant,
    /// The dialect of source 0 (`Dialect::ALL`'s index); source `i` speaks the next `i`-th.
    first: usize,
}

impl DecodingWire {
    /// The wire of seed `seed`.
    ///
    /// ```
    /// use polygateway::transport::DecodingWire;
    /// use polygateway_actors::testkit::sim::{meant, Attempt, Sent, Wire};
    /// use std::time::Duration;
    /// let wire = DecodingWire::new(1);
    /// let sent = Sent::RateLimited { retry_after: Some(Duration::from_secs(3)) };
    /// // Source 0, 1 and 2 speak three dialects; each reads a 429 with its hint as pushback.
    /// for source in 0..3 {
    ///     let attempt = Attempt {
    ///         source,
    ///         streaming: true,
    ///         started: Duration::ZERO,
    ///         after: Duration::from_millis(40),
    ///         timeout: Duration::from_secs(5),
    ///     };
    ///     assert_eq!(wire.read(sent, &attempt), meant(sent, true), "source {source}");
    /// }
    /// ```
    pub fn new(seed: u64) -> Self {
        Self {
            base: Instant::now(),
            first: (seed % 3) as usize,
        }
    }
}

impl Wire for DecodingWire {
    fn read(&self, sent: Sent, attempt: &Attempt) -> Read {
        let dialect = Dialect::ALL[(self.first + attempt.source) % Dialect::ALL.len()];
        let config = config(dialect, attempt.timeout);
        let start = self.base + attempt.started;
        let (events, end) = match written(dialect, sent) {
            Written::Error {
                status,
                headers,
                body,
            } => {
                let error = (answer_reader(dialect).error)(status, &headers, &body);
                return Read {
                    pieces: 0,
                    tool_call: false,
                    failure: Some(failure(&error)),
                };
            }
            Written::Stream { events, end } => (events, end),
        };
        let arrived = start + attempt.after;
        let chunks = events
            .into_iter()
            .map(|event| (arrived, event.into_bytes()));
        let end = end.map(|how| (arrived, how));
        let script = Script::new(start, chunks, end, attempt.streaming);
        let (handed, verdict) = match dialect {
            Dialect::Anthropic => decode(&config, start, AnthropicMessages::new(None), script),
            Dialect::Gemini => decode(&config, start, GeminiContent::default(), script),
            Dialect::OpenAi => decode(&config, start, OpenAiChat, script),
        };
        let pieces: Vec<_> = handed
            .iter()
            .filter(|d| matches!(d, ChatDelta::Content(_) | ChatDelta::ToolCall(_)))
            .collect();
        Read {
            pieces: pieces.len() as u64,
            tool_call: matches!(pieces.last(), Some(ChatDelta::ToolCall(_))),
            failure: verdict.err().as_ref().map(failure),
        }
    }
}

/// The answer read by `dialect`'s exchange, started at `start` under `config`'s deadlines.
fn decode<D: WireDialect>(
    config: &TransportConfig,
    start: Instant,
    dialect: D,
    script: Script,
) -> (Vec<ChatDelta>, Result<LlmResponse, TransportError>) {
    let mut exchange = ChatExchange::new(config, start, dialect, false, LeadTrim::default());
    script.run(&mut exchange)
}

/// A failed attempt as the runtime reads it: its classification, and whether it is a cut
/// another source may continue (the transport's own `stream_cut`).
fn failure(error: &TransportError) -> Failure {
    let request = ChatWireRequest::new(Vec::new());
    Failure {
        class: error.class(),
        reason: error.source_reason(),
        rate_limited: error.is_rate_limited(),
        retry_after: error.retry_after(),
        cut: stream_cut(&request, error).map(|cut| cut.tool_call),
    }
}

/// A source in `dialect` whose stall limits (first piece, between pieces, in all) are `timeout`.
fn config(dialect: Dialect, timeout: Duration) -> TransportConfig {
    TransportConfig {
        name: "simulated".into(),
        provider: dialect.as_str().into(),
        base_url: "http://127.0.0.1:9".into(),
        api_key: Secret::new("sk-simulated"),
        model: "simulated-model".into(),
        timeout,
        ttft_timeout: timeout,
        inter_token_timeout: timeout,
        enable_thinking: None,
        missing_done: MissingDone::default(),
        trust_env: false,
        stream: true,
        structured_mode: None,
        dialect: Some(dialect),
        pool_idle_timeout: Duration::from_secs(90),
        extra_body: serde_json::Map::new(),
    }
}

/// An answer as a provider writes it.
enum Written {
    /// A 2xx head, then these events, then the body's end (`None`: nothing more ever comes).
    Stream {
        events: Vec<String>,
        end: Option<BodyEnd>,
    },
    /// An error answer: its status, headers and body.
    Error {
        status: u16,
        headers: HeaderMap,
        body: String,
    },
}

impl Written {
    fn error(status: u16, body: Value, retry_after: Option<Duration>) -> Self {
        let mut headers = HeaderMap::new();
        if let Some(hint) = retry_after {
            // Retry-After is whole seconds (RFC 9110 §10.2.3); the simulator's hints are.
            headers.insert(RETRY_AFTER, HeaderValue::from(hint.as_secs()));
        }
        Self::Error {
            status,
            headers,
            body: body.to_string(),
        }
    }
}

/// What `sent` is in `dialect`, as its API reference documents its answers.
fn written(dialect: Dialect, sent: Sent) -> Written {
    match sent {
        Sent::Answer { pieces } => Written::Stream {
            events: stream(dialect, pieces, false, true),
            end: Some(BodyEnd::Finished),
        },
        Sent::Cut { pieces, tool_call } => Written::Stream {
            events: stream(dialect, pieces, tool_call, false),
            end: Some(BodyEnd::Closed),
        },
        Sent::Silent => Written::Stream {
            events: Vec::new(),
            end: None,
        },
        Sent::RateLimited { .. }
        | Sent::Overloaded
        | Sent::Unavailable { .. }
        | Sent::KeyRefused
        | Sent::Rejected => {
            let (status, body, header_hint) = error_answer(dialect, sent);
            Written::error(status, body, header_hint)
        }
    }
}

/// An error `sent` in `dialect`, one line per API: its status, its body, and the hint its
/// `retry-after` header carries. OpenAI's and Anthropic's 429 and 503 hints are that header;
/// Gemini's 429 hint is the `google.rpc.RetryInfo` detail of its body, and Gemini reports a bad
/// key as 400 `INVALID_ARGUMENT` naming `API_KEY_INVALID`.
fn error_answer(dialect: Dialect, sent: Sent) -> (u16, Value, Option<Duration>) {
    use Dialect::{Anthropic, Gemini, OpenAi};
    let none = || json!([]);
    match (sent, dialect) {
        (Sent::RateLimited { retry_after }, OpenAi) => (
            429,
            openai_error(
                "requests",
                Some("rate_limit_exceeded"),
                "Rate limit reached for requests.",
            ),
            retry_after,
        ),
        (Sent::RateLimited { retry_after }, Anthropic) => (
            429,
            anthropic_error(
                "rate_limit_error",
                "Number of requests has exceeded your rate limit.",
            ),
            retry_after,
        ),
        (Sent::RateLimited { retry_after }, Gemini) => {
            let retry_info = retry_after.map(|hint| {
                json!({
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": format!("{}s", hint.as_secs())
                })
            });
            let details = Value::Array(retry_info.into_iter().collect());
            let message = "Resource has been exhausted (e.g. check quota).";
            (
                429,
                gemini_error(429, "RESOURCE_EXHAUSTED", message, details),
                None,
            )
        }
        (Sent::Overloaded, OpenAi) => (
            503,
            openai_error("server_error", None, "The engine is currently overloaded."),
            None,
        ),
        (Sent::Overloaded, Anthropic) => {
            (529, anthropic_error("overloaded_error", "Overloaded"), None)
        }
        (Sent::Overloaded, Gemini) => (
            503,
            gemini_error(503, "UNAVAILABLE", "The model is overloaded.", none()),
            None,
        ),
        (Sent::Unavailable { retry_after }, OpenAi) => (
            503,
            openai_error("server_error", None, "Service unavailable."),
            retry_after,
        ),
        (Sent::Unavailable { retry_after }, Anthropic) => (
            503,
            anthropic_error("api_error", "Service unavailable"),
            retry_after,
        ),
        (Sent::Unavailable { retry_after }, Gemini) => (
            503,
            gemini_error(503, "UNAVAILABLE", "Service unavailable.", none()),
            retry_after,
        ),
        (Sent::KeyRefused, OpenAi) => (
            401,
            openai_error(
                "invalid_request_error",
                Some("invalid_api_key"),
                "Incorrect API key provided.",
            ),
            None,
        ),
        (Sent::KeyRefused, Anthropic) => (
            401,
            anthropic_error("authentication_error", "invalid x-api-key"),
            None,
        ),
        (Sent::KeyRefused, Gemini) => {
            let details = json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com"
            }]);
            let message = "API key not valid. Please pass a valid API key.";
            (
                400,
                gemini_error(400, "INVALID_ARGUMENT", message, details),
                None,
            )
        }
        (Sent::Rejected, OpenAi) => (
            400,
            openai_error(
                "invalid_request_error",
                None,
                "'messages' is a required property",
            ),
            None,
        ),
        (Sent::Rejected, Anthropic) => (
            400,
            anthropic_error("invalid_request_error", "messages: field required"),
            None,
        ),
        (Sent::Rejected, Gemini) => (
            400,
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "Invalid JSON payload received.",
                none(),
            ),
            None,
        ),
        (Sent::Answer { .. } | Sent::Cut { .. } | Sent::Silent, _) => {
            unreachable!("{sent:?} is a 2xx stream, not an error answer")
        }
    }
}

fn openai_error(kind: &str, code: Option<&str>, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn gemini_error(code: u16, status: &str, message: &str, details: Value) -> Value {
    json!({"error": {"code": code, "message": message, "status": status, "details": details}})
}

/// A streamed answer's events in `dialect`: `pieces` pieces (the last a tool call's first when
/// `tool_call`), then its end when `complete`.
fn stream(dialect: Dialect, pieces: u64, tool_call: bool, complete: bool) -> Vec<String> {
    let text = |i: u64| format!("piece {i}. ");
    let texts = pieces - u64::from(tool_call);
    let sse = |data: Value| format!("data: {data}\n\n");
    let named = |event: &str, data: Value| format!("event: {event}\ndata: {data}\n\n");
    let mut events = Vec::new();
    match dialect {
        Dialect::Anthropic => {
            events.push(named(
                "message_start",
                json!({"type": "message_start", "message": {
                "id": "msg_sim", "type": "message", "role": "assistant", "content": [],
                "model": "simulated-model", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 1}}}),
            ));
            events.push(named("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
            for i in 0..texts {
                events.push(named("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text(i)}})));
            }
            events.push(named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            if tool_call {
                events.push(named("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_sim", "name": "lookup", "input": {}}})));
            }
            if complete {
                events.push(named("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": pieces}})));
                events.push(named("message_stop", json!({"type": "message_stop"})));
            }
        }
        Dialect::Gemini => {
            let chunk = |parts: Value, finish: Option<&str>| {
                let mut candidate =
                    json!({"content": {"parts": parts, "role": "model"}, "index": 0});
                if let Some(reason) = finish {
                    candidate["finishReason"] = reason.into();
                }
                sse(json!({"candidates": [candidate], "modelVersion": "simulated-model"}))
            };
            for i in 0..texts {
                let last = complete && i + 1 == texts;
                events.push(chunk(json!([{"text": text(i)}]), last.then_some("STOP")));
            }
            if tool_call {
                events.push(chunk(
                    json!([{"functionCall": {"name": "lookup", "args": {}}}]),
                    None,
                ));
            }
        }
        Dialect::OpenAi => {
            let chunk = |delta: Value, finish: Option<&str>| {
                sse(
                    json!({"id": "chatcmpl-sim", "object": "chat.completion.chunk", "created": 0,
                    "model": "simulated-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
                )
            };
            events.push(chunk(json!({"role": "assistant", "content": ""}), None));
            for i in 0..texts {
                events.push(chunk(json!({"content": text(i)}), None));
            }
            if tool_call {
                events.push(chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_sim", "type": "function",
                    "function": {"name": "lookup", "arguments": ""}}]}),
                    None,
                ));
            }
            if complete {
                events.push(chunk(json!({}), Some("stop")));
                events.push("data: [DONE]\n\n".into());
            }
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use polygateway_actors::testkit::sim::{
        meant, run_seed, run_seed_over_network, run_seed_through,
    };

    use super::*;

    /// Everything an upstream may send, with and without hints, pieces and tool calls.
    fn every_sent() -> Vec<Sent> {
        let hints = [
            None,
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(7)),
        ];
        let mut all = vec![
            Sent::Silent,
            Sent::Overloaded,
            Sent::KeyRefused,
            Sent::Rejected,
        ];
        for retry_after in hints {
            all.push(Sent::RateLimited { retry_after });
            all.push(Sent::Unavailable { retry_after });
        }
        for pieces in 1..=4 {
            all.push(Sent::Answer { pieces });
            all.push(Sent::Cut {
                pieces,
                tool_call: false,
            });
            all.push(Sent::Cut {
                pieces,
                tool_call: true,
            });
        }
        all.push(Sent::Cut {
            pieces: 0,
            tool_call: false,
        });
        all
    }

    #[test]
    fn every_dialect_reads_every_answer_as_it_was_meant() {
        let wire = DecodingWire::new(0);
        for source in 0..Dialect::ALL.len() {
            for sent in every_sent() {
                for streaming in [true, false] {
                    let attempt = Attempt {
                        source,
                        streaming,
                        started: Duration::from_secs(3),
                        after: Duration::from_millis(250),
                        timeout: Duration::from_secs(2),
                    };
                    let got = wire.read(sent, &attempt);
                    let dialect = Dialect::ALL[source];
                    assert_eq!(
                        got,
                        meant(sent, streaming),
                        "{dialect:?} read {sent:?} (streaming {streaming})"
                    );
                }
            }
        }
    }

    #[test]
    fn an_answer_later_than_the_first_piece_deadline_is_a_stall() {
        let wire = DecodingWire::new(0);
        for source in 0..Dialect::ALL.len() {
            let attempt = Attempt {
                source,
                streaming: true,
                started: Duration::ZERO,
                after: Duration::from_secs(2),
                timeout: Duration::from_secs(2),
            };
            let late = wire.read(Sent::Answer { pieces: 2 }, &attempt);
            assert_eq!(late, meant(Sent::Silent, true), "source {source}");
        }
    }

    /// Every answer of 60 seeds, in memory and over a network, read by the decoders as it was
    /// meant: no violation, and the same schedule as the seed read without them.
    #[test]
    fn seeds_read_through_the_decoders_keep_every_invariant() {
        let mut read = 0;
        for seed in 0..60 {
            for over_network in [false, true] {
                let wire = Arc::new(DecodingWire::new(seed));
                let report = run_seed_through(seed, 60, over_network, false, wire);
                assert!(
                    report.violations.is_empty(),
                    "seed {seed} (network {over_network}): {:?}",
                    report.violations
                );
                let meant = match over_network {
                    true => run_seed_over_network(seed, 60, false),
                    false => run_seed(seed, 60, false),
                };
                assert_eq!(report.trace_hash, meant.trace_hash, "seed {seed}");
                read += report.answers_read;
            }
        }
        assert!(read > 60 * 2 * 60, "only {read} answers read");
    }
}
