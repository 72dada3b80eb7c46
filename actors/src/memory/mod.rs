//! In-memory governance backends: [`MemoryGate`] (six-gate limiter) and [`MemoryBreakers`]
//! (one breaker per `(scope, source)`), for single-process runtimes and tests.
//!
//! They wrap the sans-I/O machines of [`crate::policy`] behind a `std::sync::Mutex` (never held
//! across an `.await`) and read time from an injected [`Clock`], converted to milliseconds since
//! the backend's construction. State is per backend value: share it between scopes or runtimes
//! only by sharing the value (docs/behaviour.md §2). Also here: [`ManualClock`], a hand-driven clock for
//! deterministic tests of anything that takes an `Arc<dyn Clock>`.
//!
//! Not for: multi-process deployments (use the Redis backends of the `polygateway` crate).

pub mod breaker;
pub mod gate;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::Clock;

pub use breaker::MemoryBreakers;
pub use gate::MemoryGate;

/// A clock that only moves when told to: deterministic tests of clock-driven components.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::memory::ManualClock;
/// use polygateway_actors::Clock;
/// let c = ManualClock::new();
/// let t0 = c.now();
/// c.advance(Duration::from_secs(5));
/// assert_eq!(c.now() - t0, Duration::from_secs(5));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    offset: Mutex<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock frozen at the current instant.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::memory::ManualClock;
    /// use polygateway_actors::Clock;
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// std::thread::sleep(Duration::from_millis(5));
    /// assert_eq!(clock.now(), t0, "real time passing does not move it");
    /// ```
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        }
    }

    /// Move the clock forward by `by`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::ManualClock;
    /// use polygateway_actors::Clock;
    /// let clock = Arc::new(ManualClock::new());
    /// // The component under test holds the same clock as `Arc<dyn Clock>`.
    /// let seen_by_component: Arc<dyn Clock> = clock.clone();
    /// let t0 = seen_by_component.now();
    /// clock.advance(Duration::from_millis(250));
    /// clock.advance(Duration::from_millis(250));
    /// assert_eq!(seen_by_component.now() - t0, Duration::from_millis(500));
    /// ```
    pub fn advance(&self, by: Duration) {
        let mut o = self.offset.lock().unwrap_or_else(|e| e.into_inner());
        *o = o.saturating_add(by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }
}
