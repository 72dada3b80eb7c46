//! Time as an injected value.
//!
//! Policies never read the OS clock: they take `now: Instant` as an argument (the quinn-proto
//! rule), so tests drive them deterministically. The runtime reads time through [`Clock`]; the
//! default [`TokioClock`] follows `tokio::time::pause`, so paused-time tests see the same clock.
//!
//! One time type: `Instant` everywhere in the call path (the machine, the pacers, the stall
//! clock, the driver). The one conversion is `millis_since`, where time is stored as a
//! number: the breaker and limiter state machines count milliseconds since their backend's
//! origin (the same machines run as Redis scripts, where time is milliseconds), and the cooldown
//! memo is an atomic millisecond count.

use std::fmt::Debug;
use std::time::Instant;

/// Milliseconds from `origin` to `now` (0 if `now` is earlier): the one conversion from
/// `Instant` to a stored millisecond count (see the module docs).
pub(crate) fn millis_since(origin: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(origin).as_millis()).unwrap_or(u64::MAX)
}

/// A source of "now" for the runtime.
///
/// ```
/// use polygateway_actors::{Clock, TokioClock};
/// let t = TokioClock.now();
/// assert!(TokioClock.now() >= t);
/// ```
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The tokio clock: real time normally, virtual time under `tokio::time::pause`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::{Clock, TokioClock};
/// // The runtime takes its clock as `Arc<dyn Clock>`; outside paused-time tests it is real time.
/// let clock: Arc<dyn Clock> = Arc::new(TokioClock);
/// let t0 = clock.now();
/// std::thread::sleep(Duration::from_millis(5));
/// assert!(clock.now() - t0 >= Duration::from_millis(5));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}
