//! `_native.ChatStream`: a governed chat stream read from Python in batches.
//!
//! Each `next_batch` crossing waits for the next event, then takes every event already queued
//! without waiting, and hands Python the concatenated content and reasoning of the batch (plus
//! the final response when the stream ended in it). A consumer slower than the upstream therefore
//! pays one crossing per batch, not per delta; a fast one sees deltas as they come. Dropping or
//! closing it cancels the call like dropping the Rust `ChatStream`.
//!
//! Not for: the non-streaming answer path (`client.rs`), which never crosses per delta.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use pyo3::prelude::*;
use tokio::sync::Mutex;

use polygateway::{ChatEvent, ChatStream, GatewayError, LlmResponse};

use crate::bridge::{spawn, Bridge};
use crate::runtime::OnRuntime;
use crate::{convert, errors};

struct State {
    stream: Option<ChatStream>,
    /// An error met while draining a batch, reported by the next crossing.
    pending: Option<GatewayError>,
}

/// One batch: content and reasoning text, tool-call pieces `(index, id, name, arguments)`, and
/// the response if the stream ended in this batch.
#[derive(Default)]
struct Batch {
    content: String,
    thinking: String,
    refusal: String,
    tool_calls: Vec<(u32, Option<String>, Option<String>, String)>,
    done: Option<LlmResponse>,
}

impl Batch {
    fn add(&mut self, event: ChatEvent) {
        match event {
            ChatEvent::Content(text) => self.content.push_str(&text),
            ChatEvent::Reasoning(text) => self.thinking.push_str(&text),
            ChatEvent::ToolCall(p) => self.tool_calls.push((p.index, p.id, p.name, p.arguments)),
            ChatEvent::Refusal(text) => self.refusal.push_str(&text),
            ChatEvent::Done(response) => self.done = Some(*response),
            _ => {}
        }
    }
}

/// A chat stream being read from Python.
#[pyclass(module = "polygateway._native", frozen)]
pub(crate) struct NativeChatStream {
    state: OnRuntime<Arc<Mutex<State>>>,
}

impl NativeChatStream {
    pub(crate) fn new(stream: ChatStream, generation: u64) -> Self {
        let state = State {
            stream: Some(stream),
            pending: None,
        };
        Self {
            state: OnRuntime::new(Arc::new(Mutex::new(state)), generation),
        }
    }
}

async fn next_batch(state: Arc<Mutex<State>>) -> Result<Option<Batch>, GatewayError> {
    let mut state = state.lock().await;
    if let Some(error) = state.pending.take() {
        state.stream = None;
        return Err(error);
    }
    let Some(stream) = state.stream.as_mut() else {
        return Ok(None);
    };
    let mut batch = Batch::default();
    match stream.next().await {
        None => {
            state.stream = None;
            return Ok(None);
        }
        Some(Err(error)) => {
            state.stream = None;
            return Err(error);
        }
        Some(Ok(event)) => batch.add(event),
    }
    // Everything already queued joins this crossing.
    while batch.done.is_none() {
        match stream.next().now_or_never() {
            Some(Some(Ok(event))) => batch.add(event),
            Some(Some(Err(error))) => {
                state.pending = Some(error);
                break;
            }
            Some(None) | None => break,
        }
    }
    Ok(Some(batch))
}

#[pymethods]
impl NativeChatStream {
    /// Resolve `future` with `(content, thinking, response_or_None, tool_call_pieces, refusal)`
    /// for the next batch, or `None` once the stream has ended.
    fn next_batch(&self, bridge: &Bridge, future: &Bound<'_, PyAny>) -> PyResult<()> {
        let (state, runtime) = self.state.get()?;
        let state = state.clone();
        spawn(
            &runtime,
            bridge,
            future,
            next_batch(state),
            |py, out| match out.map_err(|e| errors::to_py(py, e))? {
                None => Ok(py.None()),
                Some(batch) => {
                    let response = match batch.done {
                        Some(r) => convert::llm_response(py, r)?,
                        None => py.None(),
                    };
                    Ok((
                        batch.content,
                        batch.thinking,
                        response,
                        batch.tool_calls,
                        batch.refusal,
                    )
                        .into_pyobject(py)?
                        .into_any()
                        .unbind())
                }
            },
        )
    }

    /// Cancel the call (the upstream request is closed, permits released). Idempotent.
    fn close(&self) -> PyResult<()> {
        let (state, runtime) = self.state.get()?;
        let state = state.clone();
        runtime.spawn(async move {
            state.lock().await.stream = None;
        });
        Ok(())
    }
}
