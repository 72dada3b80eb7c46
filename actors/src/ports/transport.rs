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
}

/// The consumer went away (dropped its stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream consumer went away")]
pub struct ConsumerGone;

/// A bounded channel to a streaming consumer that counts what it delivered.
///
/// Bounded on purpose: a slow consumer makes `emit` wait, which pauses the upstream read instead
/// of buffering without limit.
///
/// ```
/// # tokio_test_block(async {
/// use polygateway_actors::EventSink;
/// let (sink, mut rx) = EventSink::<u32>::channel(4);
/// sink.emit(7).await.unwrap();
/// assert_eq!(sink.delivered(), 1);
/// assert_eq!(rx.recv().await, Some(7));
/// # });
/// # fn tokio_test_block<F: std::future::Future>(f: F) { tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f); }
/// ```
#[derive(Debug)]
pub struct EventSink<E> {
    sender: mpsc::Sender<E>,
    delivered: AtomicU64,
}

impl<E: Send> EventSink<E> {
    /// A sink and its receiving end, holding at most `capacity` undelivered events.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<E>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        (Self::new(sender), receiver)
    }

    /// Wrap an existing bounded sender.
    pub fn new(sender: mpsc::Sender<E>) -> Self {
        Self {
            sender,
            delivered: AtomicU64::new(0),
        }
    }

    /// Deliver one event, waiting while the consumer is behind.
    pub async fn emit(&self, event: E) -> Result<(), ConsumerGone> {
        self.sender.send(event).await.map_err(|_| ConsumerGone)?;
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Events handed to the consumer so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// `true` once the consumer dropped its end.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// The underlying sender (to send a final event outside the counted deltas).
    pub fn sender(&self) -> &mpsc::Sender<E> {
        &self.sender
    }
}
