//! Sink health bookkeeping shared by the SQLite and PostgreSQL sinks (docs/behaviour.md §8.5, §8.6): the
//! degraded/fatal state machine with its cooldown, dropped-row counting, and the log discipline —
//! one line on entering degraded state, one on recovering, a reminder every 100 dropped rows or
//! 300 s while degraded, and throttled warnings for row-level rejects.
//!
//! Not here: deciding which failure is environmental (each sink classifies its own errors).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use polygateway_actors::telemetry::TelemetryStatus;

/// The default cooldown after an environmental failure.
///
/// Both sinks start with it; lower it per sink through the options:
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(60);

const REMINDER_ROWS: u64 = 100;
const REMINDER_EVERY: Duration = Duration::from_secs(300);
const ROW_WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    degraded_since: Option<Instant>,
    retry_at: Option<Instant>,
    reason: Option<String>,
    fatal: Option<String>,
    reminder_at: Option<Instant>,
    reminder_rows: u64,
    row_warned_at: Option<Instant>,
    row_suppressed: u64,
}

/// Health of one sink.
#[derive(Debug)]
pub(crate) struct SinkHealth {
    backend: &'static str,
    cooldown: Duration,
    dropped: AtomicU64,
    state: Mutex<State>,
}

/// What the sink should do with a batch now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Try to write.
    Write,
    /// Skip: fatal, or degraded and the cooldown has not ended.
    Skip,
}

impl SinkHealth {
    pub(crate) fn new(backend: &'static str, cooldown: Duration) -> Self {
        Self {
            backend,
            cooldown,
            dropped: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn admit(&self, now: Instant) -> Admit {
        let st = self.lock();
        if st.fatal.is_some() {
            return Admit::Skip;
        }
        match st.retry_at {
            Some(at) if now < at => Admit::Skip,
            _ => Admit::Write,
        }
    }

    /// Permanent no-op from now on; logs once.
    pub(crate) fn set_fatal(&self, reason: String) {
        let mut st = self.lock();
        if st.fatal.is_none() {
            tracing::error!(
                backend = self.backend,
                reason = %reason,
                "telemetry disabled permanently: rows will be discarded"
            );
            st.fatal = Some(reason);
        }
    }

    /// An environmental failure: degrade (log on entering only) and restart the cooldown.
    pub(crate) fn degrade(&self, reason: String, now: Instant) {
        let mut st = self.lock();
        if st.degraded_since.is_none() {
            tracing::warn!(
                backend = self.backend,
                reason = %reason,
                cooldown_s = self.cooldown.as_secs_f64(),
                "telemetry degraded: rows are dropped until a retry succeeds"
            );
            st.degraded_since = Some(now);
            st.reminder_at = Some(now);
            st.reminder_rows = self.dropped.load(Ordering::Relaxed);
        }
        st.retry_at = Some(now + self.cooldown);
        st.reason = Some(reason);
    }

    /// A write succeeded: leave degraded state (log once).
    pub(crate) fn recover(&self, now: Instant) {
        let mut st = self.lock();
        if let Some(since) = st.degraded_since.take() {
            tracing::info!(
                backend = self.backend,
                degraded_for_s = now.saturating_duration_since(since).as_secs_f64(),
                dropped_rows = self.dropped.load(Ordering::Relaxed),
                "telemetry recovered"
            );
        }
        st.retry_at = None;
        st.reason = None;
    }

    /// Count lost rows; while degraded, remind every 100 rows or 300 s.
    pub(crate) fn drop_rows(&self, n: u64, now: Instant) {
        if n == 0 {
            return;
        }
        let total = self.dropped.fetch_add(n, Ordering::Relaxed) + n;
        let mut st = self.lock();
        if st.degraded_since.is_none() {
            return;
        }
        let due_rows = total >= st.reminder_rows + REMINDER_ROWS;
        let due_time = st
            .reminder_at
            .is_none_or(|at| now.saturating_duration_since(at) >= REMINDER_EVERY);
        if due_rows || due_time {
            tracing::warn!(
                backend = self.backend,
                dropped_rows = total,
                reason = st.reason.as_deref().unwrap_or(""),
                "telemetry still degraded"
            );
            st.reminder_at = Some(now);
            st.reminder_rows = total;
        }
    }

    /// One row rejected by the database (row-level class): counted, warned at most every 10 s.
    pub(crate) fn row_rejected(&self, detail: &str, now: Instant) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        let due = st
            .row_warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= ROW_WARN_EVERY);
        if due {
            tracing::warn!(
                backend = self.backend,
                error = %detail,
                suppressed = st.row_suppressed,
                "telemetry write failed (row dropped)"
            );
            st.row_warned_at = Some(now);
            st.row_suppressed = 0;
        } else {
            st.row_suppressed += 1;
        }
    }

    /// Rows dropped because the pool had no free connection: counted, warned at most every 10 s,
    /// never degrading (docs/behaviour.md §8.6: consumers watch `dropped_rows` as well as `degraded`).
    #[cfg(feature = "postgres")] // only a pool saturates
    pub(crate) fn saturated(&self, rows: u64, now: Instant) {
        let total = self.dropped.fetch_add(rows, Ordering::Relaxed) + rows;
        let mut st = self.lock();
        let due = st
            .row_warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= ROW_WARN_EVERY);
        if due {
            tracing::warn!(
                backend = self.backend,
                rows,
                dropped_rows = total,
                "telemetry pool saturated: rows dropped"
            );
            st.row_warned_at = Some(now);
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn status(&self, now: Instant) -> TelemetryStatus {
        let st = self.lock();
        let degraded = st.degraded_since.is_some();
        TelemetryStatus {
            degraded,
            fatal: st.fatal.is_some(),
            reason: st.fatal.clone().or_else(|| st.reason.clone()),
            degraded_for_s: st
                .degraded_since
                .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64()),
            dropped_rows: self.dropped(),
            retry_after_s: st
                .retry_at
                .filter(|_| degraded)
                .map_or(0.0, |at| at.saturating_duration_since(now).as_secs_f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degrade_cooldown_then_recover() {
        let h = SinkHealth::new("test", Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(h.admit(t0), Admit::Write);
        h.degrade("connection refused".into(), t0);
        let s = h.status(t0 + Duration::from_secs(10));
        assert!(s.degraded && !s.fatal);
        assert_eq!(s.reason.as_deref(), Some("connection refused"));
        assert!((s.retry_after_s - 50.0).abs() < 1e-6);
        assert!((s.degraded_for_s - 10.0).abs() < 1e-6);
        assert_eq!(h.admit(t0 + Duration::from_secs(59)), Admit::Skip);
        assert_eq!(h.admit(t0 + Duration::from_secs(60)), Admit::Write);
        h.drop_rows(3, t0);
        h.recover(t0 + Duration::from_secs(61));
        let s = h.status(t0 + Duration::from_secs(61));
        assert!(!s.degraded);
        assert_eq!(s.retry_after_s, 0.0);
        assert_eq!(s.dropped_rows, 3);
    }

    #[test]
    fn fatal_is_permanent() {
        let h = SinkHealth::new("test", Duration::from_secs(1));
        h.set_fatal("unparsable DSN".into());
        let later = Instant::now() + Duration::from_secs(3600);
        assert_eq!(h.admit(later), Admit::Skip);
        h.recover(later);
        assert!(h.status(later).fatal);
    }

    #[test]
    fn row_rejects_count_without_degrading() {
        let h = SinkHealth::new("test", Duration::from_secs(1));
        let t = Instant::now();
        for _ in 0..5 {
            h.row_rejected("42703", t);
        }
        let s = h.status(t);
        assert_eq!(s.dropped_rows, 5);
        assert!(!s.degraded);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[cfg(all(feature = "postgres", feature = "sqlite"))]
    #[test]
    fn default_cooldown_example() {
        use super::DEFAULT_COOLDOWN;
        use crate::telemetry::{PostgresOptions, SqliteOptions};
        use std::time::Duration;
        assert_eq!(DEFAULT_COOLDOWN, Duration::from_secs(60));
        assert_eq!(PostgresOptions::new(None).cooldown, DEFAULT_COOLDOWN);
        let options = SqliteOptions {
            cooldown: Duration::from_secs(5),
            ..SqliteOptions::new(None)
        };
        assert!(options.cooldown < DEFAULT_COOLDOWN);
    }
}
