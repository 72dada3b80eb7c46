//! The [`TelemetryWriter`]: what a user of the runtime holds to record rows — a bounded queue
//! callers push into and return at once, drained into a sink in batches by an actor the runtime
//! supervises. Restarted after a crash with the same queue and sink, so nothing accepted is lost.

use std::sync::Arc;
use std::time::Duration;

use super::actor::{FlushReport, TelemetryActor, TelemetryArgs, TelemetryConfig, TelemetryMsg};
use super::queue::TelemetryQueue;
use super::sink::{TelemetrySink, TelemetryStatus};
use crate::runtime::slot::ActorSlot;
use crate::runtime::{Runtime, RuntimeError};

/// A running telemetry writer: push rows, read its status, flush it before shutdown.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use polygateway_actors::runtime::{Runtime, RuntimeOptions};
/// use polygateway_actors::telemetry::{TelemetryConfig, TelemetrySink, TelemetryStatus, TelemetryWriter};
/// # use polygateway_actors::testkit::memory_governance;
///
/// #[derive(Default)]
/// struct Collect(Mutex<Vec<u32>>);
///
/// #[async_trait::async_trait]
/// impl TelemetrySink<u32> for Collect {
///     async fn write_batch(&self, rows: Vec<u32>) {
///         self.0.lock().unwrap().extend(rows);
///     }
///     fn status(&self) -> TelemetryStatus {
///         TelemetryStatus::default()
///     }
/// }
///
/// let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// let sink = Arc::new(Collect::default());
/// let writer = TelemetryWriter::start(&runtime, sink.clone(), TelemetryConfig::default(), 1_000)
///     .await
///     .unwrap();
/// assert!(writer.push(1)); // never waits: a full queue refuses and counts the row as dropped
/// assert!(writer.push(2));
/// let report = writer.flush(Duration::from_secs(2)).await.unwrap();
/// assert_eq!((report.rows, report.remaining), (2, 0));
/// assert_eq!(*sink.0.lock().unwrap(), vec![1, 2]);
/// assert_eq!(writer.accepted(), 2);
/// runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct TelemetryWriter<R> {
    args: TelemetryArgs<R>,
    actor: ActorSlot<TelemetryMsg>,
}

impl<R: Send + 'static> TelemetryWriter<R> {
    /// Start a writer under `runtime`'s supervisor (restarted with the runtime's restart policy)
    /// that drains a queue of at most `capacity` rows into `sink`, `config.batch_size` rows at a
    /// time or every `config.flush_interval`. Fails when the runtime has shut down.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::time::Duration;
    /// use std::sync::Arc;
    /// use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetryWriter};
    /// # use polygateway_actors::testkit::memory_governance;
    /// let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let writer: TelemetryWriter<String> =
    ///     TelemetryWriter::start(&runtime, Arc::new(NullSink), TelemetryConfig::default(), 2)
    ///         .await
    ///         .unwrap();
    /// assert!(writer.push("a".into()) && writer.push("b".into()));
    /// // Nothing written yet (the batch of 256 is not full, the 200 ms tick not due): the
    /// // third row finds the queue full.
    /// assert!(!writer.push("c".into()));
    /// assert_eq!(writer.status().dropped_rows, 1);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn start(
        runtime: &Runtime,
        sink: Arc<dyn TelemetrySink<R>>,
        config: TelemetryConfig,
        capacity: usize,
    ) -> Result<Self, RuntimeError> {
        let queue = Arc::new(TelemetryQueue::new(capacity));
        let args = TelemetryArgs::new(queue, sink, config);
        let actor = ActorSlot::starting("telemetry writer");
        runtime
            .adopt(
                "telemetry",
                TelemetryActor::<R>::new,
                args.clone(),
                Some(runtime.restart),
                actor.clone(),
            )
            .await?;
        Ok(Self { args, actor })
    }

    /// Queue `row` without waiting; `false` (the row counted as dropped) when the queue is full.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::{sync::Arc, time::Duration};
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetryWriter};
    /// # let runtime = Runtime::start(polygateway_actors::testkit::memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let writer = TelemetryWriter::start(&runtime, Arc::new(NullSink), TelemetryConfig::default(), 1)
    ///     .await
    ///     .unwrap();
    /// assert!(writer.push(7));
    /// assert!(!writer.push(8));
    /// assert_eq!((writer.accepted(), writer.status().dropped_rows), (1, 1));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn push(&self, row: R) -> bool {
        self.args.queue.push(row)
    }

    /// Rows accepted since the start (written or still queued); refused rows are not counted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::{sync::Arc, time::Duration};
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetryWriter};
    /// # let runtime = Runtime::start(polygateway_actors::testkit::memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let writer = TelemetryWriter::start(&runtime, Arc::new(NullSink), TelemetryConfig::default(), 10)
    ///     .await
    ///     .unwrap();
    /// writer.push("row");
    /// writer.flush(Duration::from_secs(2)).await.unwrap();
    /// writer.push("row");
    /// assert_eq!(writer.accepted(), 2); // a running total: writing does not reset it
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn accepted(&self) -> u64 {
        self.args.queue.accepted()
    }

    /// The sink's status, with the rows the full queue refused added to `dropped_rows` (loss,
    /// not a sink failure: `degraded` stays the sink's own).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::{sync::Arc, time::Duration};
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetryWriter};
    /// # let runtime = Runtime::start(polygateway_actors::testkit::memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let writer = TelemetryWriter::start(&runtime, Arc::new(NullSink), TelemetryConfig::default(), 1)
    ///     .await
    ///     .unwrap();
    /// writer.push(1);
    /// writer.push(2); // the queue is full: dropped
    /// let status = writer.status();
    /// assert_eq!(status.dropped_rows, 1);
    /// assert!(!status.degraded);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn status(&self) -> TelemetryStatus {
        self.args.status()
    }

    /// Write everything queued, waiting at most `within`; `Err` says why it did not: the writer
    /// is down (starting, restarting, stopped with the runtime) or the sink was slower than
    /// `within` ([`RuntimeError::TimedOut`]). Rows pushed meanwhile may remain
    /// ([`FlushReport::remaining`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::{sync::Arc, time::Duration};
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::telemetry::{FlushReport, NullSink, TelemetryConfig, TelemetryWriter};
    /// use polygateway_actors::runtime::RuntimeError;
    /// # let runtime = Runtime::start(polygateway_actors::testkit::memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let writer = TelemetryWriter::start(&runtime, Arc::new(NullSink), TelemetryConfig::default(), 10)
    ///     .await
    ///     .unwrap();
    /// writer.push(1);
    /// assert_eq!(writer.flush(Duration::from_secs(2)).await, Ok(FlushReport { rows: 1, remaining: 0 }));
    /// runtime.shutdown(Duration::from_secs(1)).await;
    /// assert_eq!(writer.flush(Duration::from_secs(2)).await, Err(RuntimeError::ShutDown));
    /// # }
    /// ```
    pub async fn flush(&self, within: Duration) -> Result<FlushReport, RuntimeError> {
        let actor = self.actor.get()?;
        match tokio::time::timeout(within, async { ractor::call!(actor, TelemetryMsg::Flush) })
            .await
        {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(e)) => Err(RuntimeError::Stopped {
                actor: "telemetry writer".into(),
                cause: e.to_string(),
            }),
            Err(_) => Err(RuntimeError::TimedOut(within)),
        }
    }

    /// The sink the rows go to (its owner shuts it down after the last flush).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::{sync::Arc, time::Duration};
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetrySink, TelemetryWriter};
    /// # let runtime = Runtime::start(polygateway_actors::testkit::memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// let sink: Arc<dyn TelemetrySink<u8>> = Arc::new(NullSink);
    /// let writer = TelemetryWriter::start(&runtime, Arc::clone(&sink), TelemetryConfig::default(), 10)
    ///     .await
    ///     .unwrap();
    /// writer.flush(Duration::from_secs(2)).await.unwrap();
    /// assert!(Arc::ptr_eq(writer.sink(), &sink));
    /// writer.sink().shutdown().await;
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn sink(&self) -> &Arc<dyn TelemetrySink<R>> {
        &self.args.sink
    }
}
