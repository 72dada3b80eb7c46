//! An idle worker gives its jemalloc thread cache back (feature `jemalloc`).
//!
//! jemalloc keeps the objects a thread freed in that thread's cache and flushes it only when the
//! thread allocates again, so what the workers cached when a burst of requests ended pins pages
//! no purge can return: a server's RSS stayed above idle long after the load was gone
//! (ARCHITECTURE.md, "What a request in flight holds, and the binary's allocator"). Tokio calls
//! [`on_park`] when a worker runs out of work; at most once a second per worker it turns the
//! thread's cache off and on again, which hands every cached object back to its arena (whose
//! background thread then purges the pages that emptied). A busy worker seldom parks, and an
//! idle one is woken at least by the telemetry writer's tick, so the flush follows the end of a
//! burst within about a second.

use std::cell::Cell;
use std::time::{Duration, Instant};

use tikv_jemalloc_ctl::{Access, AsName};

/// Least time between two flushes of one worker's cache: one per second costs nothing at any
/// load (a flush is a few microseconds), and parks under load come far more often.
const EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static LAST_FLUSH: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// `tokio::runtime::Builder::on_thread_park`'s hook: flush this worker's cache if its last flush
/// is older than [`EVERY`].
pub(crate) fn on_park() {
    LAST_FLUSH.with(|last| {
        let now = Instant::now();
        if last.get().is_some_and(|at| now.duration_since(at) < EVERY) {
            return;
        }
        last.set(Some(now));
        // Turning a thread's cache off flushes it into the arenas; on again, the thread gets a
        // fresh, empty one. An error (a jemalloc built without thread caches) leaves it be.
        let enabled = b"thread.tcache.enabled\0".name();
        if enabled.write(false).is_ok() {
            let _ = enabled.write(true);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_park_flushes_at_most_once_a_second_and_leaves_the_cache_on() {
        let enabled = b"thread.tcache.enabled\0".name();
        assert!(Access::<bool>::read(enabled).unwrap());
        on_park();
        let flushed = LAST_FLUSH.with(Cell::get).expect("the first park flushes");
        // Turned off to flush, on again after.
        assert!(Access::<bool>::read(enabled).unwrap());
        on_park();
        assert_eq!(
            LAST_FLUSH.with(Cell::get),
            Some(flushed),
            "a second park within a second leaves the cache be"
        );
    }
}
