//! The stall guard of one call (docs/behaviour.md §5.2).
//!
//! A call is `stalled` only when BOTH hold:
//! - (A) the call itself has spent ≥ `window` in non-productive waiting (429 backoff, quota-wait
//!   polling, breaker-cooldown waiting) — time inside real attempts is never added;
//! - (B) its scope has made no progress for ≥ `window`: `progress_age ≥ window`, or the scope
//!   never progressed at all (`None`). A scope that never progressed counts as stale because
//!   there is no evidence that waiting helps; (A) still guarantees the call waited a full window.
//!
//! Not for: attempt budgets (`MAX_ATTEMPTS` is counted by the retry loop), sleeping, or reading
//! the scope's progress (that is the limiter's `progress_age`).

use std::time::{Duration, Instant};

/// Accumulated non-productive waiting of one call, against its stall window. (Not the
/// transport's `StallClock`, which times one attempt's tokens: this one counts a call's waits.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StallWindow {
    window: Duration,
    started: Instant,
    waited: Duration,
    wait_began: Option<Instant>,
}

impl StallWindow {
    /// A clock for a call that started at `now` with `STALL_WINDOW_S = window`.
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        Self {
            window,
            started: now,
            waited: Duration::ZERO,
            wait_began: None,
        }
    }

    /// The stall window.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// When the call started.
    #[cfg(test)]
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Non-productive waiting accounted so far (an open wait is not included).
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }

    /// Add a finished non-productive wait.
    pub(crate) fn record_wait(&mut self, waited: Duration) {
        self.waited = self.waited.saturating_add(waited);
    }

    /// Mark the start of a non-productive wait (e.g. before sleeping). A second call while a
    /// wait is open keeps the first start.
    #[cfg(test)]
    pub(crate) fn begin_wait(&mut self, now: Instant) {
        self.wait_began.get_or_insert(now);
    }

    /// Close the wait opened by [`StallWindow::begin_wait`] and account it. No-op if none is
    /// open, so a cancelled sleep that never began adds nothing.
    #[cfg(test)]
    pub(crate) fn end_wait(&mut self, now: Instant) {
        if let Some(began) = self.wait_began.take() {
            self.record_wait(now.saturating_duration_since(began));
        }
    }

    /// Condition (A) and (B) of the module docs. `progress_age` is the scope's
    /// `progress_age()` (None = never progressed).
    pub(crate) fn is_stalled(&self, progress_age: Option<Duration>) -> bool {
        self.waited >= self.window && progress_age.is_none_or(|age| age >= self.window)
    }

    /// How much more this call may wait before (A) holds: clamp every sleep to this.
    pub(crate) fn remaining_budget(&self) -> Duration {
        self.window.saturating_sub(self.waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(300);

    #[test]
    fn needs_both_conditions() {
        let t0 = Instant::now();
        let mut s = StallWindow::new(W, t0);
        assert!(!s.is_stalled(None), "no waiting yet");
        assert!(!s.is_stalled(Some(Duration::from_secs(10_000))));
        s.record_wait(Duration::from_secs(299));
        assert!(!s.is_stalled(None));
        s.record_wait(Duration::from_secs(1));
        assert!(s.is_stalled(None), "never progressed counts as stale");
        assert!(s.is_stalled(Some(W)));
        assert!(
            !s.is_stalled(Some(W - Duration::from_millis(1))),
            "fresh progress elsewhere"
        );
    }

    #[test]
    fn remaining_budget_shrinks_to_zero() {
        let mut s = StallWindow::new(W, Instant::now());
        assert_eq!(s.remaining_budget(), W);
        s.record_wait(Duration::from_secs(100));
        assert_eq!(s.remaining_budget(), Duration::from_secs(200));
        s.record_wait(Duration::from_secs(1000));
        assert_eq!(s.remaining_budget(), Duration::ZERO);
    }

    #[test]
    fn begin_end_accounts_only_waiting_time() {
        let t0 = Instant::now();
        let mut s = StallWindow::new(W, t0);
        // An attempt from t0 to t0+50 s is not waiting; a wait from 50 s to 80 s is.
        s.end_wait(t0 + Duration::from_secs(50));
        assert_eq!(s.waited(), Duration::ZERO);
        s.begin_wait(t0 + Duration::from_secs(50));
        s.begin_wait(t0 + Duration::from_secs(60));
        s.end_wait(t0 + Duration::from_secs(80));
        s.end_wait(t0 + Duration::from_secs(90));
        assert_eq!(s.waited(), Duration::from_secs(30));
        assert_eq!(s.started(), t0);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn stall_clock_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut s = StallWindow::new(Duration::from_secs(300), t0);
        s.record_wait(Duration::from_secs(300));
        assert!(s.is_stalled(None));
        assert!(!s.is_stalled(Some(Duration::from_secs(5))));
    }

    #[test]
    fn stall_clock_new_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let s = StallWindow::new(Duration::from_secs(300), Instant::now());
        assert_eq!(s.waited(), Duration::ZERO);
        assert!(
            !s.is_stalled(None),
            "a call that has not waited yet is never stalled"
        );
    }

    #[test]
    fn stall_clock_window_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        // STALL_WINDOW_S=120
        let s = StallWindow::new(Duration::from_secs(120), Instant::now());
        assert_eq!(s.window(), Duration::from_secs(120));
        assert_eq!(s.remaining_budget(), s.window());
    }

    #[test]
    fn stall_clock_started_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let s = StallWindow::new(Duration::from_secs(300), t0);
        // The call's total age, for the error report when it gives up.
        let now = t0 + Duration::from_secs(90);
        assert_eq!(now.duration_since(s.started()), Duration::from_secs(90));
    }

    #[test]
    fn stall_clock_waited_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut s = StallWindow::new(Duration::from_secs(300), t0);
        s.begin_wait(t0 + Duration::from_secs(10));
        assert_eq!(
            s.waited(),
            Duration::ZERO,
            "the open wait is not counted yet"
        );
        s.end_wait(t0 + Duration::from_secs(25));
        assert_eq!(s.waited(), Duration::from_secs(15));
    }

    #[test]
    fn stall_clock_record_wait_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let mut s = StallWindow::new(Duration::from_secs(300), Instant::now());
        // Two 429 backoff sleeps, measured by the caller.
        s.record_wait(Duration::from_secs(2));
        s.record_wait(Duration::from_secs(4));
        assert_eq!(s.waited(), Duration::from_secs(6));
    }

    #[test]
    fn stall_clock_begin_wait_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut s = StallWindow::new(Duration::from_secs(300), t0);
        s.begin_wait(t0 + Duration::from_secs(10));
        s.begin_wait(t0 + Duration::from_secs(20)); // already waiting: the first start is kept
        s.end_wait(t0 + Duration::from_secs(30));
        assert_eq!(s.waited(), Duration::from_secs(20));
    }

    #[test]
    fn stall_clock_end_wait_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut s = StallWindow::new(Duration::from_secs(300), t0);
        s.end_wait(t0 + Duration::from_secs(5)); // no wait open: nothing added
        assert_eq!(s.waited(), Duration::ZERO);
        s.begin_wait(t0 + Duration::from_secs(5));
        s.end_wait(t0 + Duration::from_secs(8));
        s.end_wait(t0 + Duration::from_secs(60)); // already closed
        assert_eq!(s.waited(), Duration::from_secs(3));
    }

    #[test]
    fn stall_clock_is_stalled_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let window = Duration::from_secs(300);
        let mut s = StallWindow::new(window, Instant::now());
        s.record_wait(window); // (A) holds
                               // (B): another call in the scope succeeded 10 s ago, so waiting still pays off.
        assert!(!s.is_stalled(Some(Duration::from_secs(10))));
        assert!(s.is_stalled(Some(Duration::from_secs(300))));
    }

    #[test]
    fn stall_clock_remaining_budget_example() {
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let mut s = StallWindow::new(Duration::from_secs(300), Instant::now());
        s.record_wait(Duration::from_secs(280));
        // The backoff asks for 60 s; the call may only wait 20 s more.
        let sleep = Duration::from_secs(60).min(s.remaining_budget());
        assert_eq!(sleep, Duration::from_secs(20));
    }

    #[test]
    fn a_full_wait_in_a_scope_the_limiter_reports_stale_is_stalled() {
        use crate::policy::limiter::LimiterState;
        use crate::policy::stall::StallWindow;
        use std::time::{Duration, Instant};
        let mut limiter = LimiterState::default();
        limiter.mark_progress("LLM", 0);
        let age = limiter.progress_age("LLM", 400_000);
        let window = Duration::from_secs(300);
        let mut call = StallWindow::new(window, Instant::now());
        call.record_wait(window);
        assert!(call.is_stalled(age));
    }
}
