//! The telemetry actor: drains the shared [`TelemetryQueue`] into a [`TelemetrySink`] in batches,
//! by size (woken when a batch is full) and by time (a periodic tick), and flushes on request.
//!
//! It is the queue's only consumer, so it writes inline: a message waits at most one batch write.
//! Its arguments are `Clone` and hold the queue and the sink by `Arc`, so a supervisor respawns it
//! with the same arguments and nothing accepted is lost. It never shuts the sink down: the owner of
//! the runtime flushes, then calls [`TelemetrySink::shutdown`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::queue::TelemetryQueue;
use super::sink::{TelemetrySink, TelemetryStatus};

/// Batching thresholds.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::telemetry::TelemetryConfig;
/// let config = TelemetryConfig { batch_size: 64, ..TelemetryConfig::default() };
/// assert_eq!(config.flush_interval, Duration::from_millis(200));
/// assert_eq!(TelemetryConfig::default().batch_size, 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Rows per write; reaching it wakes the actor at once.
    pub batch_size: usize,
    /// Longest time a row waits for a partial batch.
    pub flush_interval: Duration,
}

impl Default for TelemetryConfig {
    /// 256 rows or 200 ms, whichever comes first.
    fn default() -> Self {
        Self {
            batch_size: 256,
            flush_interval: Duration::from_millis(200),
        }
    }
}

/// What the actor is started (and restarted) with.
///
/// Cloning shares the queue and the sink, so a respawned actor drains the same rows.
pub(crate) struct TelemetryArgs<R> {
    /// The shared queue callers push into.
    pub(crate) queue: Arc<TelemetryQueue<R>>,
    /// Where batches go.
    pub(crate) sink: Arc<dyn TelemetrySink<R>>,
    /// Batching thresholds.
    pub(crate) config: TelemetryConfig,
}

impl<R> Clone for TelemetryArgs<R> {
    fn clone(&self) -> Self {
        Self {
            queue: Arc::clone(&self.queue),
            sink: Arc::clone(&self.sink),
            config: self.config,
        }
    }
}

impl<R: Send + 'static> TelemetryArgs<R> {
    /// Bundle a queue, a sink and thresholds.
    pub(crate) fn new(
        queue: Arc<TelemetryQueue<R>>,
        sink: Arc<dyn TelemetrySink<R>>,
        config: TelemetryConfig,
    ) -> Self {
        Self {
            queue,
            sink,
            config,
        }
    }

    /// The status snapshot: the sink's, with queue overflow added to `dropped_rows`.
    pub(crate) fn status(&self) -> TelemetryStatus {
        let mut status = self.sink.status();
        status.dropped_rows += self.queue.dropped();
        status
    }
}

impl<R> std::fmt::Debug for TelemetryArgs<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryArgs")
            .field("queued", &"…")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Result of a flush ([`TelemetryWriter::flush`](super::TelemetryWriter::flush)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::runtime::{Runtime, RuntimeOptions};
/// use polygateway_actors::telemetry::{FlushReport, NullSink, TelemetryConfig, TelemetryWriter};
/// # use polygateway_actors::testkit::memory_governance;
/// let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// // No periodic tick during the example: only the flush writes.
/// let config = TelemetryConfig { flush_interval: Duration::from_secs(60), ..TelemetryConfig::default() };
/// let writer = TelemetryWriter::start(&runtime, Arc::new(NullSink), config, 100).await.unwrap();
/// // Nothing queued yet (this also waits for the writer's start-up drain).
/// let idle = writer.flush(Duration::from_secs(2)).await.unwrap();
/// assert_eq!(idle, FlushReport::default());
/// for row in 0..3 {
///     writer.push(row);
/// }
/// let report = writer.flush(Duration::from_secs(2)).await.unwrap();
/// assert_eq!(report, FlushReport { rows: 3, remaining: 0 });
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushReport {
    /// Rows handed to the sink during this flush. Rows a start-up drain or a `Tick` already
    /// wrote are not counted again, so this is not "rows pushed before the flush".
    pub rows: u64,
    /// Rows still queued when the flush ended (rows pushed concurrently may land here).
    pub remaining: usize,
}

/// Messages of the telemetry actor.
///
/// Callers normally send only [`TelemetryMsg::Flush`]; the actor schedules `Tick` (every
/// `flush_interval`) and `Drain` (when a batch is full) itself. Messages are served in order.
#[derive(Debug)]
pub(crate) enum TelemetryMsg {
    /// Periodic: write one (possibly partial) batch.
    Tick,
    /// A batch is full: write one batch.
    Drain,
    /// Write everything queued, then reply. Bound it on the caller's side (`call_t!` or a timeout).
    Flush(RpcReplyPort<FlushReport>),
}

/// The telemetry actor, generic over the row type.
///
/// Rows accepted by the queue while no actor runs are written as soon as one starts.
pub(crate) struct TelemetryActor<R>(PhantomData<fn() -> R>);

impl<R> TelemetryActor<R> {
    /// The actor value to pass to `Actor::spawn` / `spawn_linked`.
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<R> Default for TelemetryActor<R> {
    fn default() -> Self {
        Self::new()
    }
}

/// State of a running telemetry actor.
///
/// Built by the actor's `pre_start` and private to it; it only appears as
/// [`TelemetryActor`]'s `Actor::State`.
pub(crate) struct TelemetryState<R> {
    args: TelemetryArgs<R>,
    timer: JoinHandle<()>,
    waker: JoinHandle<()>,
}

impl<R: Send + 'static> TelemetryState<R> {
    /// Hand one batch to the sink; ask for another round if a full batch is still waiting.
    async fn step(&self, myself: &ActorRef<TelemetryMsg>) {
        let batch_size = self.args.config.batch_size.max(1);
        let rows = self.args.queue.drain(batch_size);
        if !rows.is_empty() {
            self.args.sink.write_batch(rows).await;
        }
        if self.args.queue.len() >= batch_size {
            // Back of the mailbox: other messages are served between batches.
            let _ = myself.cast(TelemetryMsg::Drain);
        }
    }
}

impl<R: Send + 'static> Actor for TelemetryActor<R> {
    type Msg = TelemetryMsg;
    type State = TelemetryState<R>;
    type Arguments = TelemetryArgs<R>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let batch_size = args.config.batch_size.max(1);
        args.queue.set_wake_at(batch_size);
        let queue = Arc::clone(&args.queue);
        let me = myself.clone();
        let waker = tokio::spawn(async move {
            loop {
                queue.wait_full().await;
                if me.cast(TelemetryMsg::Drain).is_err() {
                    // This incarnation is gone (killed: no post_stop); pass the wake-up on to the
                    // next one instead of swallowing it.
                    queue.wake_consumer();
                    break;
                }
            }
        });
        let timer = myself.send_interval(args.config.flush_interval, || TelemetryMsg::Tick);
        Ok(TelemetryState { args, timer, waker })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Rows accepted while no actor was running (or before a restart) are written at once.
        state.step(&myself).await;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.timer.abort();
        state.waker.abort();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            TelemetryMsg::Tick | TelemetryMsg::Drain => state.step(&myself).await,
            TelemetryMsg::Flush(reply) => {
                let batch_size = state.args.config.batch_size.max(1);
                let mut rows = 0u64;
                loop {
                    let batch = state.args.queue.drain(batch_size);
                    if batch.is_empty() {
                        break;
                    }
                    rows += batch.len() as u64;
                    state.args.sink.write_batch(batch).await;
                }
                let _ = reply.send(FlushReport {
                    rows,
                    remaining: state.args.queue.len(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::NullSink;
    use async_trait::async_trait;
    use std::sync::Mutex;

    /// Records every batch it is given.
    #[derive(Default)]
    struct Recorder {
        batches: Mutex<Vec<Vec<u32>>>,
    }

    impl Recorder {
        fn rows(&self) -> Vec<u32> {
            self.batches.lock().unwrap().concat()
        }
        fn batch_sizes(&self) -> Vec<usize> {
            self.batches.lock().unwrap().iter().map(Vec::len).collect()
        }
    }

    #[async_trait]
    impl TelemetrySink<u32> for Recorder {
        async fn write_batch(&self, rows: Vec<u32>) {
            self.batches.lock().unwrap().push(rows);
        }
        fn status(&self) -> TelemetryStatus {
            TelemetryStatus {
                dropped_rows: 5,
                ..TelemetryStatus::default()
            }
        }
    }

    fn args(
        capacity: usize,
        batch_size: usize,
        interval_ms: u64,
    ) -> (TelemetryArgs<u32>, Arc<Recorder>) {
        let sink = Arc::new(Recorder::default());
        let args = TelemetryArgs::new(
            Arc::new(TelemetryQueue::new(capacity)),
            sink.clone(),
            TelemetryConfig {
                batch_size,
                flush_interval: Duration::from_millis(interval_ms),
            },
        );
        (args, sink)
    }

    /// Spawn and wait until the actor has served its first message (its start-up drain is done).
    async fn start(args: &TelemetryArgs<u32>) -> (ActorRef<TelemetryMsg>, JoinHandle<()>) {
        let (actor, handle) = Actor::spawn(None, TelemetryActor::new(), args.clone())
            .await
            .unwrap();
        ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        (actor, handle)
    }

    /// Polls until `done` holds, failing after 2 s.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(2), async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    // Real time (the workspace's tokio has no `test-util`, so no paused clock); each test stays
    // well under a second.
    #[tokio::test]
    async fn a_full_batch_is_written_before_the_timer() {
        let (args, sink) = args(100, 3, 10_000);
        let (actor, handle) = start(&args).await;
        for i in 0..7 {
            args.queue.push(i);
        }
        eventually("two full batches", || sink.rows().len() >= 6).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Two full batches went out by size; the partial one waits for the 10 s tick.
        assert_eq!(sink.batch_sizes(), vec![3, 3]);
        let report = ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        assert_eq!(report.rows, 1);
        assert_eq!(sink.rows(), (0..7).collect::<Vec<_>>());
        actor.stop(None);
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn a_partial_batch_waits_for_the_interval() {
        let (args, sink) = args(100, 256, 300);
        let (actor, handle) = start(&args).await;
        let pushed = std::time::Instant::now();
        args.queue.push(1);
        args.queue.push(2);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(sink.rows().is_empty(), "written before the interval");
        eventually("the timed batch", || sink.rows().len() == 2).await;
        assert!(pushed.elapsed() >= Duration::from_millis(250));
        assert_eq!(sink.batch_sizes(), vec![2]);
        actor.stop(None);
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn flush_drains_everything_and_reports() {
        let (args, sink) = args(10_000, 100, 60_000);
        let (actor, handle) = Actor::spawn(None, TelemetryActor::new(), args.clone())
            .await
            .unwrap();
        for i in 0..1_050 {
            args.queue.push(i);
        }
        let report = ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        assert_eq!(report.remaining, 0);
        assert_eq!(sink.rows().len(), 1_050);
        assert!(sink.batch_sizes().iter().all(|&n| n <= 100));
        actor.stop(None);
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn a_restarted_actor_writes_rows_accepted_before_and_during_the_crash() {
        let (args, sink) = args(100, 256, 60_000);
        let (actor, handle) = Actor::spawn(None, TelemetryActor::new(), args.clone())
            .await
            .unwrap();
        args.queue.push(1);
        args.queue.push(2);
        actor.kill();
        handle.await.unwrap();
        args.queue.push(3); // accepted while no actor runs
        assert!(sink.rows().is_empty());

        let (actor, handle) = Actor::spawn(None, TelemetryActor::new(), args.clone())
            .await
            .unwrap();
        // The respawned actor drains on start, long before its 60 s tick.
        eventually("rows accepted across the restart", || {
            sink.rows().len() >= 3
        })
        .await;
        assert_eq!(sink.rows(), vec![1, 2, 3]);
        actor.stop(None);
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn status_adds_queue_overflow_to_sink_drops() {
        let (args, _sink) = args(1, 256, 60_000);
        args.queue.push(1);
        args.queue.push(2);
        args.queue.push(3);
        assert_eq!(args.status().dropped_rows, 5 + 2);
    }

    #[tokio::test]
    async fn null_sink_discards_without_counting() {
        let queue = Arc::new(TelemetryQueue::new(10));
        let args = TelemetryArgs::new(
            queue.clone(),
            Arc::new(NullSink) as Arc<dyn TelemetrySink<u32>>,
            TelemetryConfig::default(),
        );
        let (actor, handle) = start(&args).await;
        queue.push(1);
        let report = ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        assert_eq!(report.rows, 1);
        assert_eq!(args.status(), TelemetryStatus::default());
        actor.stop(None);
        handle.await.unwrap();
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use ractor::Actor;

    use super::*;
    use crate::telemetry::NullSink;

    #[test]
    fn cloned_args_share_the_queue_a_respawn_drains() {
        let args: TelemetryArgs<String> = TelemetryArgs::new(
            Arc::new(TelemetryQueue::new(10_000)),
            Arc::new(NullSink),
            TelemetryConfig::default(),
        );
        let respawn_with = args.clone();
        args.queue.push("row".to_string());
        assert_eq!(respawn_with.queue.len(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_tick_writes_the_partial_batch_before_a_flush_behind_it() {
        let queue = Arc::new(TelemetryQueue::new(100));
        let config = TelemetryConfig {
            batch_size: 100,
            flush_interval: Duration::from_secs(60),
        };
        let args = TelemetryArgs::new(Arc::clone(&queue), Arc::new(NullSink), config);
        let (actor, handle) = Actor::spawn(None, TelemetryActor::<&str>::new(), args)
            .await
            .unwrap();
        // Bound every call on the caller's side (here 2 s).
        ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        queue.push("a");
        queue.push("b");
        // A tick writes the partial batch at once...
        actor.cast(TelemetryMsg::Tick).unwrap();
        // ...so the flush behind it finds nothing left to write.
        let report = ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        assert_eq!((report.rows, report.remaining), (0, 0));
        assert_eq!(queue.len(), 0);
        actor.stop(None);
        handle.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rows_queued_before_the_actor_starts_are_written() {
        #[derive(Default)]
        struct Collect(Mutex<Vec<u32>>);

        #[async_trait::async_trait]
        impl TelemetrySink<u32> for Collect {
            async fn write_batch(&self, rows: Vec<u32>) {
                self.0.lock().unwrap().extend(rows);
            }
            fn status(&self) -> TelemetryStatus {
                TelemetryStatus::default()
            }
        }

        let sink = Arc::new(Collect::default());
        let queue = Arc::new(TelemetryQueue::new(100));
        queue.push(1); // before the actor exists
        let args = TelemetryArgs::new(Arc::clone(&queue), sink.clone(), TelemetryConfig::default());
        let (actor, handle) = Actor::spawn(None, TelemetryActor::new(), args)
            .await
            .unwrap();
        queue.push(2);
        ractor::call_t!(actor, TelemetryMsg::Flush, 2_000).unwrap();
        assert_eq!(*sink.0.lock().unwrap(), vec![1, 2]);
        actor.stop(None);
        handle.await.unwrap();
    }
}
