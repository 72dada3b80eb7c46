//! The bounded telemetry queue.
//!
//! Callers push rows and return at once; the telemetry actor drains. The queue is shared through an
//! `Arc` and kept outside the actor's state, so a restarted actor finds every row that was accepted
//! before the crash (docs/behaviour.md §1.1). Overflow is counted, never waited on (docs/behaviour.md §8.3).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

/// A bounded multi-producer queue of telemetry rows.
#[derive(Debug)]
pub(crate) struct TelemetryQueue<R> {
    rows: Mutex<VecDeque<R>>,
    capacity: usize,
    dropped: AtomicU64,
    accepted: AtomicU64,
    /// Queue length at which the consumer is woken (its batch size); 0 = never woken early.
    wake_at: AtomicUsize,
    wake: Notify,
}

impl<R> TelemetryQueue<R> {
    /// A queue holding at most `capacity` rows (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            rows: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            wake_at: AtomicUsize::new(0),
            wake: Notify::new(),
        }
    }

    /// Enqueue a row without waiting. Returns `false` (and counts the row as dropped) when full.
    pub(crate) fn push(&self, row: R) -> bool {
        let len = {
            let mut rows = self.lock();
            if rows.len() >= self.capacity {
                drop(rows);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            rows.push_back(row);
            rows.len()
        };
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let wake_at = self.wake_at.load(Ordering::Relaxed);
        // Signal on the crossing only: one wake-up per full batch, not one per row.
        if wake_at > 0 && len == wake_at {
            self.wake.notify_one();
        }
        true
    }

    /// Take up to `max` rows from the front, oldest first.
    pub(crate) fn drain(&self, max: usize) -> Vec<R> {
        let mut rows = self.lock();
        let n = max.min(rows.len());
        rows.drain(..n).collect()
    }

    /// Rows waiting.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Rows refused because the queue was full, since creation.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Rows accepted, since creation.
    pub(crate) fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Ask to be woken (through `wait_full`) when the queue reaches `len` rows.
    pub(crate) fn set_wake_at(&self, len: usize) {
        self.wake_at.store(len, Ordering::Relaxed);
    }

    /// Resolves once the queue has reached the wake-up length since the last call (a permit is
    /// stored if nobody was waiting): a consumer loop drains one batch per wake-up.
    pub(crate) async fn wait_full(&self) {
        self.wake.notified().await;
    }

    /// Wake the consumer now (used when a wake-up reached a consumer that is gone).
    pub(crate) fn wake_consumer(&self) {
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<R>> {
        // A panic while holding this lock cannot leave the deque inconsistent (push/drain are
        // single std calls), so a poisoned lock is still safe to use.
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The consumer side's examples (crate-private since issue #50: only the telemetry actor
    // waits on the queue).
    #[tokio::test]
    async fn the_consumer_is_woken_once_a_batch_is_in() {
        use std::time::Duration;
        let q = TelemetryQueue::new(100);
        q.set_wake_at(2);
        q.push(1);
        let early = tokio::time::timeout(Duration::from_millis(10), q.wait_full()).await;
        assert!(early.is_err(), "one row is not a batch yet");
        q.push(2);
        assert!(tokio::time::timeout(Duration::from_secs(1), q.wait_full())
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn a_consumer_loop_drains_one_batch_per_wake_up() {
        use std::sync::Arc;
        let q = Arc::new(TelemetryQueue::new(100));
        q.set_wake_at(3);
        let consumer = tokio::spawn({
            let q = Arc::clone(&q);
            async move {
                q.wait_full().await;
                q.drain(3)
            }
        });
        for row in ["a", "b", "c"] {
            q.push(row);
        }
        assert_eq!(consumer.await.unwrap(), vec!["a", "b", "c"]);
    }

    #[tokio::test]
    async fn waking_the_consumer_stores_a_permit() {
        use std::time::Duration;
        let q: TelemetryQueue<u32> = TelemetryQueue::new(100);
        q.set_wake_at(50);
        q.wake_consumer(); // stores a permit: the next wait returns at once
        assert!(tokio::time::timeout(Duration::from_secs(1), q.wait_full())
            .await
            .is_ok());
    }

    #[test]
    fn overflow_is_counted_and_never_blocks() {
        let q = TelemetryQueue::new(3);
        for i in 0..10 {
            q.push(i);
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped(), 7);
        assert_eq!(q.accepted(), 3);
        assert_eq!(q.drain(2), vec![0, 1]);
        assert!(q.push(10));
        assert_eq!(q.drain(100), vec![2, 10]);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn wakes_once_the_batch_size_is_reached() {
        let q = std::sync::Arc::new(TelemetryQueue::new(100));
        q.set_wake_at(3);
        q.push(1);
        q.push(2);
        let early = tokio::time::timeout(std::time::Duration::from_millis(20), q.wait_full()).await;
        assert!(early.is_err(), "woken before the batch was full");
        q.push(3);
        tokio::time::timeout(std::time::Duration::from_secs(1), q.wait_full())
            .await
            .expect("not woken at the batch size");
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    use super::TelemetryQueue;

    #[test]
    fn a_capacity_of_zero_is_raised_to_one() {
        let q: TelemetryQueue<String> = TelemetryQueue::new(0);
        assert!(q.push("one".into()));
        assert!(!q.push("two".into()));
    }

    #[test]
    fn the_capacity_holds_exactly_that_many() {
        let q = TelemetryQueue::new(3);
        for row in 0..3 {
            assert!(q.push(row));
        }
        assert!(!q.push(99));
    }

    #[test]
    fn a_full_queue_refuses_and_counts() {
        let q = TelemetryQueue::new(2);
        assert!(q.push(1));
        assert!(q.push(2));
        assert!(!q.push(3)); // full: dropped and counted
        assert_eq!(q.dropped(), 1);
        assert_eq!(q.drain(10), vec![1, 2]);
    }

    #[test]
    fn a_push_onto_a_full_queue_is_refused_at_once() {
        let q = TelemetryQueue::new(1);
        assert!(q.push("first"));
        assert!(!q.push("second")); // full: refused at once, never waited on
        assert_eq!((q.accepted(), q.dropped()), (1, 1));
    }

    #[test]
    fn drain_takes_the_oldest_first() {
        let q = TelemetryQueue::new(10);
        for row in 1..=5 {
            q.push(row);
        }
        assert_eq!(q.drain(2), vec![1, 2]);
        assert_eq!(q.drain(100), vec![3, 4, 5]);
        assert!(q.drain(100).is_empty());
    }

    #[test]
    fn len_counts_rows_waiting() {
        let q = TelemetryQueue::new(10);
        q.push('a');
        q.push('b');
        assert_eq!(q.len(), 2);
        q.drain(1);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn dropped_is_a_running_total() {
        let q = TelemetryQueue::new(2);
        for row in 0..5 {
            q.push(row);
        }
        assert_eq!(q.dropped(), 3);
        q.drain(2);
        assert_eq!(q.dropped(), 3); // a running total: draining does not reset it
    }

    #[test]
    fn accepted_counts_rows_ever_accepted() {
        let q = TelemetryQueue::new(2);
        q.push(1);
        q.push(2);
        q.drain(2);
        q.push(3);
        assert_eq!(q.accepted(), 3); // counts rows ever accepted, not rows waiting
        assert_eq!(q.len(), 1);
    }
}
