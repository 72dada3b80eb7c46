//! How a script goes on the wire: SSE frames or a JSON body, and the chunked body that paces them
//! (and cuts them when the script ends abruptly).

use std::io;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::fixture::{MOCK_FINGERPRINT, MOCK_LOGPROB};
use super::script::{split_even, Ending, Script};
use super::shared::InFlight;
impl Script {
    /// The SSE frames with the delay before each.
    pub(super) fn frames(&self, model: &str, include_usage: bool) -> Vec<(Duration, Bytes)> {
        if let Some((chunks, _)) = &self.raw {
            let mut out: Vec<_> = chunks.iter().map(|c| (Duration::ZERO, frame(c))).collect();
            out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
            return out;
        }
        let chunk_of = |index: u32, delta: Value, finish: Value, logprobs: Value| {
            frame(&json!({
                "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                "system_fingerprint": MOCK_FINGERPRINT,
                "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]
            }))
        };
        let chunk = |delta: Value, finish: Value| chunk_of(0, delta, finish, Value::Null);
        let usage_frame = |usage: &Value| {
            frame(&json!({
                "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [], "usage": usage
            }))
        };
        // OpenAI opens a tool-call answer with `content: null`, a text answer with `""`.
        let opening = if self.tool_calls.is_empty() {
            json!("")
        } else {
            Value::Null
        };
        let mut out = vec![(
            Duration::ZERO,
            chunk(
                json!({"role": "assistant", "content": opening}),
                Value::Null,
            ),
        )];
        if matches!(
            self.ending,
            Ending::EarlyEof | Ending::Abrupt { content: false, .. }
        ) {
            return out;
        }
        let mut first = true;
        let mut delay = || {
            let d = if first { self.ttft } else { self.inter_token };
            first = false;
            d
        };
        for r in &self.reasoning {
            out.push((delay(), chunk(json!({"reasoning_content": r}), Value::Null)));
        }
        for (i, (name, arguments)) in self.tool_calls.iter().enumerate() {
            let first = json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                "function": {"name": name, "arguments": ""}}]});
            out.push((delay(), chunk(first, Value::Null)));
            for piece in split_even(arguments, 3) {
                let more = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
                out.push((delay(), chunk(more, Value::Null)));
            }
        }
        for (i, c) in self.content.iter().enumerate() {
            let d = delay();
            for index in 0..self.n {
                let text = choice_text(index, i, c);
                let logprobs = self.logprobs_of(&text);
                out.push((
                    d,
                    chunk_of(index, json!({"content": text}), Value::Null, logprobs),
                ));
            }
            if i == 0 {
                match self.ending {
                    Ending::Malformed => {
                        out.push((
                            Duration::ZERO,
                            Bytes::from_static(
                                b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n",
                            ),
                        ));
                        out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
                        return out;
                    }
                    Ending::InBandError => {
                        out.push((
                            Duration::ZERO,
                            frame(&json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}})),
                        ));
                        return out;
                    }
                    _ => {}
                }
            }
        }
        match self.ending {
            Ending::Truncated { with_usage } | Ending::Abrupt { with_usage, .. } => {
                if let (true, true, Some(u)) = (with_usage, include_usage, &self.usage) {
                    out.push((Duration::ZERO, usage_frame(u)));
                }
            }
            _ => {
                for index in 0..self.n {
                    let finish = json!(self.finish_reason);
                    out.push((
                        Duration::ZERO,
                        chunk_of(index, json!({}), finish, Value::Null),
                    ));
                }
                if let (true, Some(u)) = (include_usage, &self.usage) {
                    out.push((Duration::ZERO, usage_frame(u)));
                }
                out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
            }
        }
        out
    }

    /// The non-streaming answer.
    /// The non-streaming body.
    pub(super) fn completion(&self, model: &str) -> String {
        match self.ending {
            Ending::EarlyEof => String::new(),
            Ending::InBandError => json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}}).to_string(),
            _ if self.raw.is_some() => self.raw.as_ref().map(|(_, c)| c.to_string()).unwrap_or_default(),
            _ => {
                let choices: Vec<Value> = (0..self.n).map(|index| self.choice(index)).collect();
                let mut v = json!({
                    "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
                    "system_fingerprint": MOCK_FINGERPRINT, "choices": choices
                });
                if let Some(u) = &self.usage {
                    v["usage"] = u.clone();
                }
                let text = v.to_string();
                match self.ending {
                    Ending::Truncated { .. } | Ending::Abrupt { .. } => {
                        text[..text.len() / 2].to_string()
                    }
                    Ending::Malformed => text.replacen('{', "{{", 2),
                    _ => text,
                }
            }
        }
    }

    /// One whole choice of the non-streaming answer.
    pub(super) fn choice(&self, index: u32) -> Value {
        let text: String = self
            .content
            .iter()
            .enumerate()
            .map(|(i, c)| choice_text(index, i, c))
            .collect();
        let mut message = json!({"role": "assistant", "content": text, "refusal": null});
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = json!(self.reasoning.concat());
        }
        if !self.tool_calls.is_empty() {
            message["content"] = Value::Null;
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        let logprobs = self.logprobs_of(&text);
        json!({"index": index, "message": message, "logprobs": logprobs,
            "finish_reason": self.finish_reason})
    }

    /// The `logprobs` object of a piece of text when the request asked for them: one entry per
    /// character (so streamed pieces join into exactly the whole answer's list), a fixed
    /// logprob.
    pub(super) fn logprobs_of(&self, text: &str) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let tokens: Vec<Value> = text
            .chars()
            .map(|c| {
                let t = c.to_string();
                json!({"token": t, "logprob": MOCK_LOGPROB, "bytes": t.as_bytes(), "top_logprobs": []})
            })
            .collect();
        json!({"content": tokens, "refusal": null})
    }
}

/// The text of choice `index`'s piece `piece`: choices after the first are told apart by a
/// `[index] ` prefix on their first piece.
pub(super) fn choice_text(index: u32, piece: usize, text: &str) -> String {
    if index > 0 && piece == 0 {
        format!("[{index}] {text}")
    } else {
        text.to_string()
    }
}

pub(super) fn frame(v: &Value) -> Bytes {
    let mut s = String::with_capacity(128);
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

/// Largest body chunk the mock hands to the server at once: consecutive frames without delay are
/// merged up to this size. Bounded so a large answer still flows chunk by chunk under TCP
/// backpressure (one huge chunk would be taken whole, and the body would end at once).
pub(super) const MAX_BATCH_BYTES: usize = 64 * 1024;

/// What a streamed body carries.
#[derive(Clone, Copy)]
pub(super) enum BodyKind {
    EventStream,
    Json,
}

/// Pause before an abrupt close, so the chunks already handed to the server reach the socket
/// first (the server drops its unflushed buffer with the connection).
pub(super) const ABRUPT_CLOSE_PAUSE: Duration = Duration::from_millis(30);

/// A chunked body: frames after their delays; consecutive frames without delay go out together
/// in chunks of up to [`MAX_BATCH_BYTES`]. The in-flight guard lives with the body, so it drops
/// when the client goes away or the last chunk has been taken. With `abrupt`, the body then
/// fails: the server drops the connection without the chunked encoding's final chunk.
pub(super) fn body_response(
    guard: InFlight,
    cancel: CancellationToken,
    frames: Vec<(Duration, Bytes)>,
    kind: BodyKind,
    abrupt: bool,
) -> Response {
    let mut batches: Vec<(Duration, Vec<u8>)> = Vec::new();
    for (delay, bytes) in frames {
        match batches.last_mut() {
            Some((_, buf)) if delay.is_zero() && buf.len() < MAX_BATCH_BYTES => {
                buf.extend_from_slice(&bytes)
            }
            _ => batches.push((delay, bytes.to_vec())),
        }
    }
    let stream = futures::stream::unfold(
        (batches.into_iter(), guard, cancel, abrupt),
        |(mut it, guard, cancel, abrupt)| async move {
            let Some((delay, bytes)) = it.next() else {
                if !abrupt {
                    return None;
                }
                tokio::select! {
                    _ = tokio::time::sleep(ABRUPT_CLOSE_PAUSE) => {},
                    _ = cancel.cancelled() => return None,
                }
                let cut = io::Error::new(io::ErrorKind::ConnectionAborted, "mock: abrupt close");
                return Some((Err(cut), (it, guard, cancel, false)));
            };
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {},
                    _ = cancel.cancelled() => return None,
                }
            }
            Some((Ok(Bytes::from(bytes)), (it, guard, cancel, abrupt)))
        },
    );
    let builder = Response::builder().status(StatusCode::OK);
    let builder = match kind {
        BodyKind::EventStream => builder
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache"),
        BodyKind::Json => builder.header(header::CONTENT_TYPE, "application/json"),
    };
    builder
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
