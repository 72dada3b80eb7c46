//! Telemetry before the journal: an item's journal row is committed only after the telemetry
//! rows of its attempts are written (docs/behaviour.md §13.2).
//!
//! The telemetry actor writes in batches; a `kill -9` loses the batch it had not written yet.
//! Were the journal committed first, a killed job's journal could hold answered items the
//! telemetry never saw, and the job's cost in the journal would exceed the telemetry's. The
//! rows of an attempt are queued before its call returns, so a telemetry flush that *starts*
//! after the call returned covers them.
//!
//! Flushes are coalesced: items that finish while a flush runs wait for the next one, which one
//! of them starts for all — at most two flushes per wave of finishing items, not one per item.

use tokio::sync::Mutex;

use crate::Gateway;

/// Waits until a telemetry flush that started after the call covers the caller's rows.
pub(crate) struct TelemetryBarrier {
    gw: Gateway,
    /// Flushes started and finished, counted from 1; only the lock holder flushes.
    flushes: Mutex<Flushes>,
    /// Mirror of `Flushes::started`, read without the lock when an item arrives.
    started: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Flushes {
    started: u64,
    finished: u64,
}

impl TelemetryBarrier {
    pub(crate) fn new(gw: Gateway) -> Self {
        Self {
            gw,
            flushes: Mutex::new(Flushes::default()),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Returns once every telemetry row queued before this call is written (or the telemetry
    /// is unavailable: the gateway has logged why, and the journal must not wait forever).
    pub(crate) async fn passed(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let arrived = self.started.load(SeqCst);
        let mut flushes = self.flushes.lock().await;
        if flushes.finished > arrived {
            // A flush that started after this item's rows were queued has finished.
            return;
        }
        flushes.started += 1;
        self.started.store(flushes.started, SeqCst);
        self.gw.flush_telemetry().await;
        flushes.finished = flushes.started;
    }
}
