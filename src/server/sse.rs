//! OpenAI's streamed chat format over Server-Sent Events: one `chat.completion.chunk` per delta
//! as it arrives (`content`, `reasoning_content` for reasoning, `tool_calls` pieces with their
//! `index`, `refusal`), then what the answer holds whole — a legacy `function_call`, the choices
//! after the first (`n > 1`), each as one chunk with its own `finish_reason` — a last chunk with
//! the upstream's `finish_reason` and the joined `logprobs`, the usage chunk when
//! `stream_options.include_usage` asked for it, then `data: [DONE]`. A failure after the stream started is a `data: {"error": …}` frame and no
//! `[DONE]` (the OpenAI SDK raises it). Dropping the body — the client went away — drops the
//! governed stream, which cancels the call. Not for errors before the first delta: those are
//! answered with an HTTP status ([`super::errors`]).

use std::pin::Pin;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use serde::Serialize;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::auth::limits::KeyLease;
use super::errors::ApiError;
use super::json_pieces::{self, Piece};
use super::state::ErrorLog;
use crate::gateway::ChatEvent;
use crate::types::{Choice as AnswerChoice, LlmResponse, ToolCallDelta};

/// Bytes gathered into one write at most, when several deltas are ready at once.
const BATCH_BYTES: usize = 16 << 10;

/// What every chunk of one response repeats.
pub(crate) struct ChunkHead {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) created: u64,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [Choice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<&'a serde_json::Value>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<&'a crate::types::FunctionCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
}

/// A tool-call piece in OpenAI's chunk shape: `index` always, `id` and `type` with the piece
/// that names the call, `function.name` when the piece carries it, `function.arguments` always,
/// and the piece's unmodelled fields beside them.
fn tool_call_piece(piece: &ToolCallDelta) -> serde_json::Value {
    let mut function = serde_json::Map::new();
    if let Some(name) = &piece.name {
        function.insert("name".into(), name.as_str().into());
    }
    function.insert("arguments".into(), piece.arguments.as_str().into());
    let mut call = serde_json::Map::new();
    call.insert("index".into(), piece.index.into());
    if let Some(id) = &piece.id {
        call.insert("id".into(), id.as_str().into());
        call.insert("type".into(), "function".into());
    }
    call.insert("function".into(), function.into());
    // What the source sent with the piece and the call type does not model (Gemini's thought
    // signature in `provider_specific_fields`), where the whole answer's call carries it: a
    // client that sends the accumulated call back returns it to the source.
    for (key, value) in &piece.extra {
        call.entry(key.as_str()).or_insert_with(|| value.clone());
    }
    serde_json::Value::Array(vec![call.into()])
}

/// Whole tool calls (of a choice that arrives complete) in the chunk shape.
fn whole_tool_calls(calls: &[crate::types::ToolCall]) -> Option<serde_json::Value> {
    if calls.is_empty() {
        return None;
    }
    let pieces = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            v["index"] = i.into();
            v
        })
        .collect();
    Some(serde_json::Value::Array(pieces))
}

fn frame(out: &mut BytesMut, value: &impl Serialize) {
    out.put_slice(b"data: ");
    // Serialising plain structs of strings cannot fail.
    let _ = serde_json::to_writer((&mut *out).writer(), value);
    out.put_slice(b"\n\n");
}

impl ChunkHead {
    fn delta(&self, out: &mut BytesMut, delta: Delta<'_>, finish: Option<&str>) {
        self.choice(out, 0, delta, None, finish);
    }

    fn choice(
        &self,
        out: &mut BytesMut,
        index: u32,
        delta: Delta<'_>,
        logprobs: Option<&serde_json::Value>,
        finish: Option<&str>,
    ) {
        let choices = [Choice {
            index,
            delta,
            logprobs,
            finish_reason: finish,
        }];
        frame(
            out,
            &Chunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: &choices,
                usage: None,
            },
        );
    }

    /// A choice after the first, whole, in one chunk.
    fn other_choice(&self, out: &mut BytesMut, c: &AnswerChoice) {
        let delta = Delta {
            role: Some("assistant"),
            content: Some(&c.content),
            reasoning_content: Some(c.thinking.as_str()).filter(|t| !t.is_empty()),
            tool_calls: whole_tool_calls(&c.tool_calls),
            function_call: c.function_call.as_ref(),
            refusal: c.refusal.as_deref(),
        };
        let finish = c.finish_reason.as_deref().or(Some("stop"));
        self.choice(out, c.index, delta, c.logprobs.as_ref(), finish);
    }

    /// The end of a completed stream: what the first choice holds whole (the legacy function
    /// call), the other choices, the finish chunk (the upstream's reason, `stop` when it gave
    /// none; the joined logprobs), the usage chunk if asked, `[DONE]`.
    fn finish(&self, out: &mut BytesMut, response: &LlmResponse, include_usage: bool) {
        if let Some(call) = &response.function_call {
            let delta = Delta {
                function_call: Some(call),
                ..Delta::default()
            };
            self.delta(out, delta, None);
        }
        for other in &response.other_choices {
            self.other_choice(out, other);
        }
        let finish = response.finish_reason.as_deref().or(Some("stop"));
        self.choice(out, 0, Delta::default(), response.logprobs.as_ref(), finish);
        if include_usage {
            frame(
                out,
                &Chunk {
                    id: &self.id,
                    object: "chat.completion.chunk",
                    created: self.created,
                    model: &self.model,
                    choices: &[],
                    usage: Some(crate::openai::completion::usage_json(response)),
                },
            );
        }
        out.put_slice(b"data: [DONE]\n\n");
    }
}

/// One in-flight relay: the governed stream, its first event (already pulled, to answer errors
/// before any delta with a status), and what must live as long as the body.
pub(crate) struct Relay {
    pub(crate) head: ChunkHead,
    pub(crate) stream:
        std::pin::Pin<Box<dyn Stream<Item = Result<ChatEvent, crate::GatewayError>> + Send>>,
    pub(crate) first: Option<ChatEvent>,
    pub(crate) include_usage: bool,
    pub(crate) deadline: Instant,
    pub(crate) timeout: std::time::Duration,
    pub(crate) errors: ErrorLog,
    /// The server's hard stop (drain timeout passed).
    pub(crate) stop: tokio_util::sync::CancellationToken,
    pub(crate) scope: String,
    /// The key's lease, released when the body is dropped.
    pub(crate) _lease: Option<KeyLease>,
}

struct RelayState {
    relay: Relay,
    role_sent: bool,
    done: bool,
    /// The text every text delta's chunk starts with, up to its delta's first field.
    text_prefix: Vec<u8>,
    /// The request's deadline and the server's hard stop, each waited on by one future for the
    /// whole stream: not a timer and a waiter registered anew for every delta.
    deadline: Pin<Box<Sleep>>,
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// `data: ` and a chunk of `head` up to the fields of choice 0's delta: what every text delta
/// of the response repeats, written once (its strings escaped once, not per delta).
fn text_prefix(head: &ChunkHead) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(128 + head.id.len() + head.model.len());
    json_pieces::write(
        &mut out,
        &[
            Piece::Raw(r#"data: {"id":"#),
            Piece::Str(&head.id),
            Piece::Raw(r#","object":"chat.completion.chunk","created":"#),
            Piece::Num(head.created),
            Piece::Raw(r#","model":"#),
            Piece::Str(&head.model),
            Piece::Raw(r#","choices":[{"index":0,"delta":{"#),
        ],
    );
    out.to_vec()
}

/// The text fields of a delta, in [`Delta`]'s order.
#[derive(Clone, Copy)]
enum TextField {
    Content,
    Reasoning,
    Refusal,
}

/// The chunk of one text delta (`content`, `reasoning_content` or `refusal`; the role with the
/// first), written from its pieces: the bytes `frame` writes for the same `Chunk` (a test holds
/// them equal), without serde_json scanning every key and constant for characters to escape.
fn text_delta(
    out: &mut BytesMut,
    prefix: &[u8],
    role: Option<&'static str>,
    field: TextField,
    text: &str,
) {
    let key = match field {
        TextField::Content => r#""content":"#,
        TextField::Reasoning => r#""reasoning_content":"#,
        TextField::Refusal => r#""refusal":"#,
    };
    out.put_slice(prefix);
    if let Some(role) = role {
        json_pieces::write(
            out,
            &[Piece::Raw(r#""role":"#), Piece::Str(role), Piece::Raw(",")],
        );
    }
    json_pieces::write(
        out,
        &[
            Piece::Raw(key),
            Piece::Str(text),
            Piece::Raw("},\"logprobs\":null,\"finish_reason\":null}]}\n\n"),
        ],
    );
}

impl RelayState {
    /// Appends the frames of one event of the governed stream (`None`: it ended).
    fn encode(
        &mut self,
        event: Option<Result<ChatEvent, crate::GatewayError>>,
        out: &mut BytesMut,
    ) {
        let role = (!self.role_sent).then_some("assistant");
        self.role_sent = true;
        match event {
            Some(Ok(ChatEvent::Content(text))) => {
                text_delta(out, &self.text_prefix, role, TextField::Content, &text);
            }
            Some(Ok(ChatEvent::Reasoning(text))) => {
                text_delta(out, &self.text_prefix, role, TextField::Reasoning, &text);
            }
            Some(Ok(ChatEvent::Refusal(text))) => {
                text_delta(out, &self.text_prefix, role, TextField::Refusal, &text);
            }
            Some(Ok(ChatEvent::ToolCall(piece))) => {
                let delta = Delta {
                    role,
                    tool_calls: Some(tool_call_piece(&piece)),
                    ..Delta::default()
                };
                self.relay.head.delta(out, delta, None);
            }
            // OpenAI's chunks have no place for a signature (it is in the final response's
            // thinking blocks); nothing is sent, so the role is still to be said.
            Some(Ok(ChatEvent::ThinkingSignature(_))) => self.role_sent = role.is_none(),
            Some(Ok(ChatEvent::Done(response))) => {
                if role.is_some() {
                    // An answer without text deltas still tells the client who spoke.
                    text_delta(out, &self.text_prefix, role, TextField::Content, "");
                }
                self.relay
                    .head
                    .finish(out, &response, self.relay.include_usage);
                self.done = true;
            }
            Some(Err(e)) => {
                let e = ApiError::from(e);
                self.relay.errors.record(&self.relay.scope, &e);
                frame(out, &e.body());
                self.done = true;
            }
            // The governed stream always ends with `Done` or an error; a bare end is reported
            // rather than dressed up as a clean end.
            None => {
                let e = ApiError::from(crate::GatewayError::StreamInterrupted {
                    message: "the governed stream ended without a final event".into(),
                    delivered: 0,
                });
                frame(out, &e.body());
                self.done = true;
            }
        }
    }
}

/// The SSE body of `relay`.
pub(crate) fn body(relay: Relay) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let state = RelayState {
        text_prefix: text_prefix(&relay.head),
        deadline: Box::pin(tokio::time::sleep_until(relay.deadline)),
        stopped: Box::pin(relay.stop.clone().cancelled_owned()),
        relay,
        role_sent: false,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out = BytesMut::with_capacity(256);
        let event = match st.relay.first.take() {
            Some(event) => Some(Ok(event)),
            None => {
                let next = tokio::select! {
                    // An event ready when the deadline passes is still relayed, as before.
                    biased;
                    next = st.relay.stream.next() => Ok(next),
                    () = st.deadline.as_mut() => Err(ApiError::timeout(st.relay.timeout)),
                    () = st.stopped.as_mut() => Err(ApiError::from(
                        crate::GatewayError::Shutdown(
                            "the server's drain timeout passed; the stream was cancelled".into(),
                        ),
                    )),
                };
                match next {
                    Ok(next) => next,
                    Err(e) => {
                        st.relay.errors.record(&st.relay.scope, &e);
                        frame(&mut out, &e.body());
                        st.done = true;
                        return Some((Ok(out.freeze()), st));
                    }
                }
            }
        };
        st.encode(event, &mut out);
        // Deltas already waiting go out in the same write: fewer frames for hyper, fewer
        // syscalls, no added wait (only what is ready is taken).
        while !st.done && out.len() < BATCH_BYTES {
            match st.relay.stream.next().now_or_never() {
                Some(event) => st.encode(event, &mut out),
                None => break,
            }
        }
        Some((Ok(out.freeze()), st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream still running at its deadline, or when the server's hard stop comes, ends with
    /// that error's frame and nothing after it (the relay waits on both for the whole stream).
    #[tokio::test(start_paused = true)]
    async fn a_stream_at_its_deadline_or_the_stop_ends_with_an_error_frame() {
        for stop_first in [false, true] {
            let stop = tokio_util::sync::CancellationToken::new();
            let relay = Relay {
                head: ChunkHead {
                    id: "chatcmpl-1".into(),
                    model: "LLM".into(),
                    created: 0,
                },
                stream: Box::pin(futures::stream::pending()),
                first: Some(ChatEvent::Content("hi".into())),
                include_usage: false,
                deadline: Instant::now() + std::time::Duration::from_secs(5),
                timeout: std::time::Duration::from_secs(5),
                errors: ErrorLog::default(),
                stop: stop.clone(),
                scope: "LLM".into(),
                _lease: None,
            };
            let mut body = Box::pin(body(relay));
            let first = body.next().await.unwrap().unwrap();
            assert!(std::str::from_utf8(&first)
                .unwrap()
                .contains(r#""content":"hi""#));
            let started = Instant::now();
            if stop_first {
                stop.cancel();
            }
            let last = body.next().await.unwrap().unwrap();
            let last = std::str::from_utf8(&last).unwrap();
            let (code, after) = match stop_first {
                true => ("shutting_down", 0),
                false => ("request_timeout", 5),
            };
            assert!(last.contains(code), "{last}");
            assert_eq!(started.elapsed().as_secs(), after);
            assert!(body.next().await.is_none());
        }
    }

    /// A text delta's chunk written from its pieces is the chunk serde_json writes for the same
    /// `Chunk`, byte for byte: every text field, with and without the role, strings to escape.
    #[test]
    fn a_text_delta_is_the_serialized_chunk() {
        let head = ChunkHead {
            id: "chatcmpl-\"1\"".into(),
            model: "LLM\\x".into(),
            created: 1_796_545_041,
        };
        let prefix = text_prefix(&head);
        for text in ["Hello ", "", "say \"hi\"\n\u{1}é</script>"] {
            for role in [Some("assistant"), None] {
                for field in [TextField::Content, TextField::Reasoning, TextField::Refusal] {
                    let delta = match field {
                        TextField::Content => Delta {
                            role,
                            content: Some(text),
                            ..Delta::default()
                        },
                        TextField::Reasoning => Delta {
                            role,
                            reasoning_content: Some(text),
                            ..Delta::default()
                        },
                        TextField::Refusal => Delta {
                            role,
                            refusal: Some(text),
                            ..Delta::default()
                        },
                    };
                    let mut serialized = BytesMut::new();
                    head.delta(&mut serialized, delta, None);
                    let mut pieces = BytesMut::new();
                    text_delta(&mut pieces, &prefix, role, field, text);
                    assert_eq!(
                        std::str::from_utf8(&pieces).unwrap(),
                        std::str::from_utf8(&serialized).unwrap()
                    );
                }
            }
        }
    }
}
