//! The telemetry sink port and its status snapshot (docs/behaviour.md §8.6).
//!
//! A sink owns its degrade logic: it never returns an error to the actor, it counts what it could
//! not write and reports through [`TelemetryStatus`]. The no-op [`NullSink`] serves
//! `PGW_TELEMETRY_BACKEND=none`.

use async_trait::async_trait;

/// Read-only telemetry health snapshot (docs/behaviour.md §8.6).
///
/// Pool saturation drops rows without setting `degraded`: watch both `degraded` and
/// `dropped_rows`.
///
/// ```
/// use polygateway_actors::telemetry::TelemetryStatus;
/// let healthy = TelemetryStatus::default();
/// assert!(!healthy.degraded && !healthy.fatal && healthy.reason.is_none());
/// let degraded = TelemetryStatus {
///     degraded: true,
///     reason: Some("connection refused".into()),
///     retry_after_s: 42.0,
///     ..TelemetryStatus::default()
/// };
/// assert_ne!(degraded, healthy);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TelemetryStatus {
    /// The backend is failing for environmental reasons; writes are skipped until the cooldown ends.
    pub degraded: bool,
    /// The backend can never work with this configuration (e.g. unparsable DSN); rows are discarded.
    pub fatal: bool,
    /// Why degraded or fatal, without secrets.
    pub reason: Option<String>,
    /// Seconds spent in the current degraded period (0 when healthy).
    pub degraded_for_s: f64,
    /// Rows lost since start: queue overflow, degraded periods, row-level rejects, saturation.
    pub dropped_rows: u64,
    /// Seconds until the next write attempt while degraded (0 when healthy).
    pub retry_after_s: f64,
}

/// Where telemetry rows go.
///
/// An implementation that keeps rows in memory and drops those over a limit:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Mutex;
/// use polygateway_actors::telemetry::{TelemetrySink, TelemetryStatus};
///
/// #[derive(Default)]
/// struct Memory {
///     rows: Mutex<Vec<String>>,
///     dropped: Mutex<u64>,
/// }
///
/// #[async_trait::async_trait]
/// impl TelemetrySink<String> for Memory {
///     async fn write_batch(&self, batch: Vec<String>) {
///         let mut rows = self.rows.lock().unwrap();
///         for row in batch {
///             if rows.len() < 2 {
///                 rows.push(row);
///             } else {
///                 *self.dropped.lock().unwrap() += 1; // counted, never an error
///             }
///         }
///     }
///     fn status(&self) -> TelemetryStatus {
///         TelemetryStatus { dropped_rows: *self.dropped.lock().unwrap(), ..TelemetryStatus::default() }
///     }
/// }
///
/// let sink = Memory::default();
/// sink.write_batch(vec!["a".into(), "b".into(), "c".into()]).await;
/// assert_eq!(sink.status().dropped_rows, 1);
/// sink.shutdown().await; // the default: nothing to release
/// # }
/// ```
#[async_trait]
pub trait TelemetrySink<R: Send + 'static>: Send + Sync + 'static {
    /// Write a batch. Never fails: rows that cannot be written are counted as dropped and the
    /// status updated. Must return within the sink's own write budget.
    async fn write_batch(&self, rows: Vec<R>);

    /// The current status. `dropped_rows` counts only what the sink dropped (the actor adds
    /// queue overflow).
    fn status(&self) -> TelemetryStatus;

    /// Release resources (connections, threads) within a bound. Idempotent. Default: nothing.
    async fn shutdown(&self) {}
}

/// A sink that records nothing (`PGW_TELEMETRY_BACKEND=none`). Discarded rows are deliberate, not
/// counted as dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::telemetry::{NullSink, TelemetrySink, TelemetryStatus};
/// NullSink.write_batch(vec![1, 2, 3]).await;
/// assert_eq!(TelemetrySink::<i32>::status(&NullSink), TelemetryStatus::default());
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

#[async_trait]
impl<R: Send + 'static> TelemetrySink<R> for NullSink {
    async fn write_batch(&self, _rows: Vec<R>) {}

    fn status(&self) -> TelemetryStatus {
        TelemetryStatus::default()
    }
}
