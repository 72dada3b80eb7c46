//! Governed streaming to the caller (`chat_stream`).
//!
//! The call runs in a task owned by the returned [`ChatStream`] on the same governed path as
//! `chat()`. Deltas reach the consumer through a bounded channel: a slow consumer makes the
//! transport's `emit` wait, which pauses the upstream read — nothing buffers without limit.
//! Until the first delta is delivered, failures retry and switch sources invisibly; after it, a
//! failure ends the stream with [`GatewayError::StreamInterrupted`] carrying how many deltas were
//! delivered — never a silent clean end. Dropping the stream aborts the task: the upstream request
//! is dropped (connection closed) and every permit, lease and probe is released.
//!
//! Mid-stream continuation on another source is deliberately not offered: an assistant-prefix
//! continuation is not supported uniformly by OpenAI-compatible providers, and splicing two
//! samplings would hand the caller text no single model produced, with usage that cannot be
//! attributed honestly.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use polygateway_actors::EventSink;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::handle::{Chat, ScopeHandle};
use crate::error::GatewayError;
use crate::transport::chat::ChatDelta;
use crate::types::{CallOptions, LlmResponse, Message};

/// Deltas buffered between the upstream reader and a slow consumer.
const STREAM_BUFFER: usize = 32;

/// One item of a chat stream.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::Reasoning).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("LLM", &mock.base_url())],
/// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
/// # );
/// use futures::StreamExt;
/// use polygateway::{CallOptions, ChatEvent, Message};
/// // The mock reasons first, then answers.
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// let mut stream = gw.chat_stream(vec![Message::user("Why is the sky blue?")], CallOptions::new())?;
/// let (mut reasoning, mut answer) = (String::new(), String::new());
/// while let Some(event) = stream.next().await {
///     match event? {
///         ChatEvent::Reasoning(delta) => reasoning.push_str(&delta),
///         ChatEvent::Content(delta) => answer.push_str(&delta),
///         ChatEvent::Done(resp) => {
///             assert_eq!((resp.thinking.as_str(), resp.content.as_str()), (&*reasoning, &*answer));
///         }
///         other => println!("not shown here: {other:?}"),
///     }
/// }
/// assert!(!reasoning.is_empty() && !answer.is_empty());
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChatEvent {
    /// Answer text as it arrives.
    Content(String),
    /// Reasoning text as it arrives.
    Reasoning(String),
    /// A piece of a tool call as it arrives (pieces of one call share its `index`; the first
    /// carries the id and name). The assembled calls are in the final response's `tool_calls`.
    ToolCall(crate::types::ToolCallDelta),
    /// A piece of the model's refusal as it arrives (the whole refusal is the final response's
    /// `refusal`).
    Refusal(String),
    /// A piece of the signature of the thinking block being streamed, as it arrives (after
    /// that block's `Reasoning`, before what follows it); the whole signature is in the final
    /// response's `thinking_blocks`. Only sources whose dialect signs thinking send it.
    ThinkingSignature(String),
    /// The complete response (usage, source, timings, cost). Always the last item of a clean
    /// stream.
    Done(Box<LlmResponse>),
}

impl From<ChatDelta> for ChatEvent {
    /// A transport's delta as the stream's consumer sees it.
    ///
    /// ```
    /// use polygateway::transport::chat::ChatDelta;
    /// use polygateway::ChatEvent;
    /// assert_eq!(ChatEvent::from(ChatDelta::Content("hi".into())), ChatEvent::Content("hi".into()));
    /// ```
    fn from(delta: ChatDelta) -> Self {
        match delta {
            ChatDelta::Content(text) => ChatEvent::Content(text),
            ChatDelta::Reasoning(text) => ChatEvent::Reasoning(text),
            ChatDelta::ToolCall(piece) => ChatEvent::ToolCall(piece),
            ChatDelta::Refusal(text) => ChatEvent::Refusal(text),
            ChatDelta::ThinkingSignature(piece) => ChatEvent::ThinkingSignature(piece),
        }
    }
}

/// A governed chat stream. Dropping it cancels the call.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::BlackHole).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("LLM", &mock.base_url())],
/// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
/// # );
/// use std::time::Duration;
/// use polygateway::{CallOptions, Message};
/// // The mock accepts the request and never answers.
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// let stream = gw.chat_stream(vec![Message::user("hi")], CallOptions::new())?;
/// for _ in 0..200 {
///     if mock.in_flight() == 1 {
///         break; // the request is upstream
///     }
///     tokio::time::sleep(Duration::from_millis(10)).await;
/// }
/// drop(stream); // the caller gave up: the upstream request is closed, the lease released
/// for _ in 0..200 {
///     if mock.in_flight() == 0 && gw.leases_held("LLM").await? == 0 {
///         break;
///     }
///     tokio::time::sleep(Duration::from_millis(10)).await;
/// }
/// assert_eq!((mock.in_flight(), gw.leases_held("LLM").await?), (0, 0));
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub struct ChatStream {
    deltas: mpsc::Receiver<ChatDelta>,
    result: Option<oneshot::Receiver<Result<LlmResponse, GatewayError>>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").finish_non_exhaustive()
    }
}

impl Drop for ChatStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for ChatStream {
    type Item = Result<ChatEvent, GatewayError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Deltas first; the channel ends only when the call task dropped its sender, after which
        // the final result is (or is about to be) in the oneshot.
        match self.deltas.poll_recv(cx) {
            Poll::Ready(Some(delta)) => return Poll::Ready(Some(Ok(ChatEvent::from(delta)))),
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {}
        }
        let Some(result) = self.result.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(result).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(outcome) => {
                self.result = None;
                Poll::Ready(Some(match outcome {
                    Ok(Ok(response)) => Ok(ChatEvent::Done(Box::new(response))),
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(GatewayError::Shutdown("the stream's task ended".into())),
                }))
            }
        }
    }
}

use std::future::Future;

impl ScopeHandle<Chat> {
    /// Stream a governed chat call: content and reasoning deltas as they arrive, then
    /// [`ChatEvent::Done`] with the complete response — or one error item. A cache hit is replayed
    /// as one content event and the final event. See the module docs for the retry semantics.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use futures::StreamExt;
    /// use polygateway::{CallOptions, ChatEvent, Message};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// let events: Vec<_> = llm.chat_stream(vec![Message::user("hi")], CallOptions::new()).collect().await;
    /// // Several content deltas, then exactly one final event with the whole response.
    /// let Some(Ok(ChatEvent::Done(resp))) = events.last() else { panic!("{events:?}") };
    /// assert!(events.len() > 2);
    /// assert!(resp.ttft_ms.is_some(), "time to first token is measured when streaming");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn chat_stream(&self, messages: Vec<Message>, options: CallOptions) -> ChatStream {
        let (delta_tx, deltas) = mpsc::channel(STREAM_BUFFER);
        let (result_tx, result) = oneshot::channel();
        let handle = self.clone();
        let task = tokio::spawn(async move {
            let outcome = handle.stream_call(messages, options, delta_tx).await;
            let _ = result_tx.send(outcome);
        });
        ChatStream {
            deltas,
            result: Some(result),
            task,
        }
    }

    async fn stream_call(
        &self,
        messages: Vec<Message>,
        mut options: CallOptions,
        delta_tx: mpsc::Sender<ChatDelta>,
    ) -> Result<LlmResponse, GatewayError> {
        options.stream = true;
        let sink = EventSink::new(delta_tx);
        let response = self
            .scope()
            .stack
            .stream(messages, &mut options, &sink)
            .await?;
        if response.cache_hit {
            // A hit arrives whole: replayed as its text, refusal and tool calls.
            for delta in whole_answer_deltas(&response) {
                let _ = sink.emit(delta).await;
            }
        }
        Ok(response)
    }
}

/// The deltas of an answer that arrived whole (a cache hit, a structured answer): its text as
/// one delta, its refusal as one, then each tool call as one piece.
pub(crate) fn whole_answer_deltas(response: &LlmResponse) -> Vec<ChatDelta> {
    let text = (!response.content.is_empty()).then(|| ChatDelta::Content(response.content.clone()));
    let refusal = response
        .refusal
        .clone()
        .filter(|r| !r.is_empty())
        .map(ChatDelta::Refusal);
    let calls = response.tool_calls.iter().enumerate().map(|(i, c)| {
        ChatDelta::ToolCall(crate::types::ToolCallDelta {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            id: Some(c.id.clone()),
            name: Some(c.function.name.clone()),
            arguments: c.function.arguments.clone(),
            extra: c.extra.clone(),
        })
    });
    text.into_iter().chain(refusal).chain(calls).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The task `chat_stream` spawns is moved whole on each spawn: a large value kept across an
    /// await of the call path (a 1.4 KiB answer pair did, issue #45) costs every streamed call.
    #[tokio::test]
    async fn a_streamed_call_future_stays_small() {
        // Never sent: the call is measured, not run.
        let settings = crate::test_support::chat_settings("http://127.0.0.1:9/v1");
        let gw = crate::Gateway::from_settings(settings, "LLM")
            .await
            .unwrap();
        let llm = gw.chat_scope("LLM").unwrap();
        let (tx, _rx) = mpsc::channel(1);
        let call = llm.stream_call(vec![Message::user("hi")], CallOptions::new(), tx);
        // 7.6 KiB in a debug build; 8.8 KiB with the pair kept.
        let size = std::mem::size_of_val(&call);
        assert!(
            size <= 8 * 1024,
            "a streamed call's future is {size} bytes: box a large, rarely taken branch"
        );
        drop(call);
        gw.shutdown().await;
    }
}
