//! The transport port: how one attempt reaches one source.
//!
//! A transport owns its source's HTTP client and speaks the wire protocol; it classifies every
//! failure itself ([`Classify`]). The runtime only sees requests, responses and classes — it knows
//! nothing of OpenAI, SSE or multipart.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::outcome::Classify;

/// One source's transport. `send` is called from per-call tasks, never from an actor handler.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use async_trait::async_trait;
/// use polygateway_actors::{EventSink, Transport};
/// # use polygateway_actors::{Classify, FailureClass, SourceReason};
///
/// // A transport that streams its request back word by word.
/// struct Echo;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("echo failed")]
/// struct EchoError;
/// # impl Classify for EchoError {
/// #     fn class(&self) -> FailureClass { FailureClass::Transient }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<std::time::Duration> { None }
/// #     fn source_reason(&self) -> SourceReason { SourceReason::NetworkError }
/// # }
///
/// #[async_trait]
/// impl Transport for Echo {
///     type Request = String;
///     type Response = String;
///     type Event = String;
///     type Error = EchoError;
///
///     async fn send(
///         &self,
///         request: &String,
///         events: Option<&EventSink<String>>,
///     ) -> Result<String, EchoError> {
///         if let Some(sink) = events {
///             for word in request.split_whitespace() {
///                 sink.emit(word.to_owned()).await.map_err(|_| EchoError)?;
///             }
///         }
///         Ok(request.clone())
///     }
///
///     fn tokens_used(response: &String) -> Option<u64> {
///         Some(response.split_whitespace().count() as u64)
///     }
/// }
///
/// let (sink, mut rx) = EventSink::channel(8);
/// let answer = Echo.send(&"hello there".to_owned(), Some(&sink)).await.unwrap();
/// assert_eq!(Echo::tokens_used(&answer), Some(2));
/// assert_eq!(sink.delivered(), 2);
/// assert_eq!(rx.recv().await.as_deref(), Some("hello"));
/// # }
/// ```
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// What a call asks for (built once per call, reused by every attempt).
    type Request: Send + Sync + 'static;
    /// A successful answer.
    type Response: Send + 'static;
    /// An incremental event delivered to a streaming consumer (token delta).
    type Event: Send + 'static;
    /// A classified failure.
    type Error: Classify + std::error::Error + Send + Sync + 'static;

    /// Perform one attempt. When `events` is given, deltas are pushed to it as they arrive; the
    /// sink remembers whether anything reached the consumer (after which the call cannot retry).
    async fn send(
        &self,
        request: &Self::Request,
        events: Option<&EventSink<Self::Event>>,
    ) -> Result<Self::Response, Self::Error>;

    /// Tokens actually used, for TPM settlement; `None` when the upstream did not report usage
    /// (the attempt then settles at its estimate).
    fn tokens_used(response: &Self::Response) -> Option<u64>;

    /// Rate-limit headers that came with a successful answer (none by default): the pacer's
    /// early signal that a quota is nearly spent.
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::RateLimitHint;
    /// use polygateway_actors::testkit::Echo;
    /// use polygateway_actors::Transport;
    /// // The echo transport sends no headers.
    /// assert_eq!(Echo::rate_limit_hint(&"hi".to_string()), None::<RateLimitHint>);
    /// ```
    fn rate_limit_hint(_response: &Self::Response) -> Option<crate::policy::pacer::RateLimitHint> {
        None
    }

    /// Whether this source continues an answer it is handed the beginning of (a prefill: the
    /// conversation ends with an assistant turn the source carries on), as its API documents.
    /// Only such sources are picked to continue a stream cut on another one (docs/behaviour.md
    /// §5.10). None by default.
    ///
    /// ```
    /// use polygateway_actors::testkit::Echo;
    /// use polygateway_actors::Transport;
    /// assert!(!Echo.prefill());
    /// ```
    fn prefill(&self) -> bool {
        false
    }

    /// Read a failed streamed attempt as a cut after content (docs/behaviour.md §5.10): `None`
    /// when `error` is not one (or the transport does not continue answers); else what the
    /// answer had begun besides text and the request that continues it on another source — the
    /// conversation with the text delivered so far as the final assistant turn. None by default.
    ///
    /// ```
    /// use polygateway_actors::testkit::{Echo, EchoError};
    /// use polygateway_actors::Transport;
    /// assert!(Echo::stream_cut(&"hi".to_string(), &EchoError(polygateway_actors::FailureClass::Transient)).is_none());
    /// ```
    fn stream_cut(
        _request: &Self::Request,
        _error: &Self::Error,
    ) -> Option<StreamCut<Self::Request>> {
        None
    }

    /// The answer of a continuation joined to the cut attempt it continues (`error`, read by
    /// [`Transport::stream_cut`]): one answer whose text is the delivered prefix and then the
    /// continuation, whose usage is both attempts', and which names `cut_source` as where it
    /// was continued from. The continuation as it is by default.
    ///
    /// ```
    /// use polygateway_actors::testkit::{Echo, EchoError};
    /// use polygateway_actors::Transport;
    /// let joined = Echo::splice(&EchoError(polygateway_actors::FailureClass::Transient), "rest".to_string(), "echo_1");
    /// assert_eq!(joined, "rest");
    /// ```
    fn splice(
        _error: &Self::Error,
        continuation: Self::Response,
        _cut_source: &str,
    ) -> Self::Response {
        continuation
    }
}

/// A stream cut after content, as its transport reads it ([`Transport::stream_cut`]): what the
/// answer had begun besides text — any of which keeps it from being continued
/// (docs/behaviour.md §5.10) — and the request that would continue it.
///
/// ```
/// use polygateway_actors::StreamCut;
/// let cut = StreamCut { tool_call: true, ..StreamCut::text("continue: Hel") };
/// assert!(cut.tool_call && !cut.thinking && !cut.structured);
/// assert_eq!(cut.request, "continue: Hel");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamCut<R> {
    /// A tool call had begun (a piece of one reached the consumer).
    pub tool_call: bool,
    /// A thinking block (reasoning) had begun.
    pub thinking: bool,
    /// A refusal had begun.
    pub refusal: bool,
    /// The call asks for structured output (a schema or a `response_format`).
    pub structured: bool,
    /// The conversation with the delivered text as the final assistant turn.
    pub request: R,
}

impl<R> StreamCut<R> {
    /// A cut of plain text, continued by `request`.
    ///
    /// ```
    /// use polygateway_actors::StreamCut;
    /// let cut = StreamCut::text(());
    /// assert!(!cut.tool_call && !cut.thinking && !cut.refusal && !cut.structured);
    /// ```
    pub fn text(request: R) -> Self {
        Self {
            tool_call: false,
            thinking: false,
            refusal: false,
            structured: false,
            request,
        }
    }
}

/// The consumer went away (dropped its stream).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::{ConsumerGone, EventSink};
/// let (sink, rx) = EventSink::channel(4);
/// drop(rx); // the caller dropped its stream
/// let err = sink.emit("late delta").await.unwrap_err();
/// assert_eq!(err, ConsumerGone);
/// assert_eq!(err.to_string(), "the stream consumer went away");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream consumer went away")]
pub struct ConsumerGone;

/// A bounded channel to a streaming consumer that counts what it delivered.
///
/// Bounded on purpose: a slow consumer makes `emit` wait, which pauses the upstream read instead
/// of buffering without limit.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::EventSink;
/// let (sink, mut rx) = EventSink::<u32>::channel(4);
/// sink.emit(7).await.unwrap();
/// assert_eq!(sink.delivered(), 1);
/// assert_eq!(rx.recv().await, Some(7));
/// # }
/// ```
#[derive(Debug)]
pub struct EventSink<E> {
    sender: mpsc::Sender<E>,
    delivered: AtomicU64,
}

impl<E: Send> EventSink<E> {
    /// A sink and its receiving end, holding at most `capacity` undelivered events.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::EventSink;
    /// let (sink, mut rx) = EventSink::channel(2);
    /// sink.emit("a").await.unwrap();
    /// sink.emit("b").await.unwrap();
    /// // Two undelivered events fill it: a third `emit` would wait for the consumer.
    /// assert_eq!(sink.sender().capacity(), 0);
    /// assert_eq!(rx.recv().await, Some("a"));
    /// assert_eq!(sink.sender().capacity(), 1);
    /// // A capacity of 0 is raised to 1.
    /// assert_eq!(EventSink::<u8>::channel(0).0.sender().max_capacity(), 1);
    /// # }
    /// ```
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<E>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self::new(sender), receiver)
    }

    /// Wrap an existing bounded sender.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::EventSink;
    /// let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    /// let sink = EventSink::new(tx);
    /// assert_eq!(sink.delivered(), 0);
    /// sink.emit("delta").await.unwrap();
    /// assert_eq!(rx.recv().await, Some("delta"));
    /// # }
    /// ```
    pub fn new(sender: mpsc::Sender<E>) -> Self {
        Self {
            sender,
            delivered: AtomicU64::new(0),
        }
    }

    /// Deliver one event, waiting while the consumer is behind.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::EventSink;
    /// let (sink, mut rx) = EventSink::channel(1);
    /// let consumer = tokio::spawn(async move {
    ///     let mut seen = Vec::new();
    ///     while let Some(delta) = rx.recv().await {
    ///         seen.push(delta);
    ///     }
    ///     seen
    /// });
    /// // Three events through a one-slot channel: each `emit` waits until the consumer catches up.
    /// for delta in ["Hel", "lo", "!"] {
    ///     sink.emit(delta).await.unwrap();
    /// }
    /// drop(sink);
    /// assert_eq!(consumer.await.unwrap(), ["Hel", "lo", "!"]);
    /// # }
    /// ```
    pub async fn emit(&self, event: E) -> Result<(), ConsumerGone> {
        self.sender.send(event).await.map_err(|_| ConsumerGone)?;
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Events handed to the consumer so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::EventSink;
    /// let (sink, _rx) = EventSink::channel(8);
    /// assert_eq!(sink.delivered(), 0); // nothing reached the consumer: the call may still retry
    /// sink.emit("Hel").await.unwrap();
    /// sink.emit("lo").await.unwrap();
    /// assert_eq!(sink.delivered(), 2); // a retry now would repeat text the consumer has seen
    /// # }
    /// ```
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// `true` once the consumer dropped its end.
    pub(crate) fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// The underlying sender (to send a final event outside the counted deltas).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::EventSink;
    /// #[derive(Debug, PartialEq)]
    /// enum Event { Delta(&'static str), Done }
    /// let (sink, mut rx) = EventSink::channel(4);
    /// sink.emit(Event::Delta("Hi")).await.unwrap();
    /// sink.sender().send(Event::Done).await.unwrap();
    /// // Only the delta counts as delivered text.
    /// assert_eq!(sink.delivered(), 1);
    /// assert_eq!(rx.recv().await, Some(Event::Delta("Hi")));
    /// assert_eq!(rx.recv().await, Some(Event::Done));
    /// # }
    /// ```
    pub fn sender(&self) -> &mpsc::Sender<E> {
        &self.sender
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn event_sink_is_closed_example() {
        use crate::EventSink;
        let (sink, rx) = EventSink::<String>::channel(8);
        assert!(!sink.is_closed());
        drop(rx);
        // Nobody is listening: stop reading the upstream.
        assert!(sink.is_closed());
    }
}
