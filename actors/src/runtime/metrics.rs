//! Metrics through the `metrics` facade: plug in Prometheus, StatsD, OpenTelemetry… by installing
//! a recorder; without one every handle is a no-op.
//!
//! Handles are registered once per scope and per source and kept, so the call path never builds
//! label sets. Label values are bounded: scope and source names come from configuration, outcomes
//! and results from the fixed sets below — never call ids or tenants.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram};

use crate::outcome::AttemptVerdict;
use crate::ports::breaker::BreakerState;

use crate::machine::wait::{CapacityWait, WaitReason};

pub use super::labels::{
    ATTEMPT_RESULTS, CALL_OUTCOMES, CAPACITY_WAIT_REASONS, CONTINUATION_OUTCOMES, HEDGE_OUTCOMES,
};
use super::series::{unix_now, Book, ScopeSeries, SourceSeries};

/// Governed calls finished, by `scope` and `outcome` (`ok` or a failure kind).
///
/// ```
/// use polygateway_actors::runtime::metrics::{CALLS_TOTAL, CALL_OUTCOMES, METRICS};
/// assert_eq!(CALLS_TOTAL, "pgw_calls_total");
/// assert!(METRICS.contains(&(CALLS_TOTAL, "counter", "scope, outcome")));
/// assert_eq!(CALL_OUTCOMES[0], "ok");
/// ```
pub const CALLS_TOTAL: &str = "pgw_calls_total";
/// Wall time of governed calls, by `scope` (seconds).
///
/// ```
/// use polygateway_actors::runtime::metrics::{CALL_DURATION_SECONDS, METRICS};
/// assert!(CALL_DURATION_SECONDS.ends_with("_seconds"));
/// assert!(METRICS.contains(&(CALL_DURATION_SECONDS, "histogram", "scope")));
/// ```
pub const CALL_DURATION_SECONDS: &str = "pgw_call_duration_seconds";
/// Attempts finished, by `scope`, `source` and `result`.
///
/// ```
/// use polygateway_actors::runtime::metrics::{ATTEMPTS_TOTAL, ATTEMPT_RESULTS, METRICS};
/// assert!(METRICS.contains(&(ATTEMPTS_TOTAL, "counter", "scope, source, result")));
/// // `result` takes one of a fixed set of values, so the series count stays bounded.
/// assert!(ATTEMPT_RESULTS.contains(&"rate_limited"));
/// ```
pub const ATTEMPTS_TOTAL: &str = "pgw_attempts_total";
/// Attempts after the first within a call, by `scope`.
///
/// ```
/// use polygateway_actors::runtime::metrics::{METRICS, RETRIES_TOTAL};
/// assert_eq!(RETRIES_TOTAL, "pgw_retries_total");
/// assert!(METRICS.contains(&(RETRIES_TOTAL, "counter", "scope")));
/// ```
pub const RETRIES_TOTAL: &str = "pgw_retries_total";
/// Time one admission took to answer (the breaker and the six gates), by `scope` (seconds): the
/// governance backend's round trip, microseconds in memory, one script call with Redis. A
/// refusal answers at once, so waiting for capacity never shows here: that is
/// [`CAPACITY_WAIT_SECONDS`].
///
/// ```
/// use polygateway_actors::runtime::metrics::{ADMISSION_WAIT_SECONDS, METRICS};
/// assert_eq!(ADMISSION_WAIT_SECONDS, "pgw_admission_wait_seconds");
/// assert!(METRICS.contains(&(ADMISSION_WAIT_SECONDS, "histogram", "scope")));
/// ```
pub const ADMISSION_WAIT_SECONDS: &str = "pgw_admission_wait_seconds";
/// Time a call waited for capacity before its attempts were sent, by `scope` and `reason`
/// (seconds): one observation per finished call and reason it waited for, the call's total for
/// that reason. Reasons: [`CAPACITY_WAIT_REASONS`]. The back-off before retrying a transient
/// failure (5xx, network) is not waiting for capacity and is not counted.
///
/// ```
/// use polygateway_actors::runtime::metrics::{CAPACITY_WAIT_SECONDS, METRICS};
/// assert_eq!(CAPACITY_WAIT_SECONDS, "pgw_capacity_wait_seconds");
/// assert!(METRICS.contains(&(CAPACITY_WAIT_SECONDS, "histogram", "scope, reason")));
/// ```
pub const CAPACITY_WAIT_SECONDS: &str = "pgw_capacity_wait_seconds";
/// Attempts holding a pacer slot now, by `scope` and `source`.
///
/// ```
/// use polygateway_actors::runtime::metrics::{IN_FLIGHT, METRICS};
/// assert_eq!(IN_FLIGHT, "pgw_in_flight");
/// assert!(METRICS.contains(&(IN_FLIGHT, "gauge", "scope, source")));
/// ```
pub const IN_FLIGHT: &str = "pgw_in_flight";
/// The AIMD pacer's current limit, by `scope` and `source`.
///
/// ```
/// use polygateway_actors::runtime::metrics::{METRICS, PACER_LIMIT};
/// assert_eq!(PACER_LIMIT, "pgw_pacer_limit");
/// assert!(METRICS.contains(&(PACER_LIMIT, "gauge", "scope, source")));
/// ```
pub const PACER_LIMIT: &str = "pgw_pacer_limit";
/// Breaker state as the runtime last learned it (0 closed, 1 open, 2 half-open), by `scope`,
/// `source`: from every admission's answer and every settled attempt's, so a breaker an attempt
/// opened reads open before any caller is refused by it.
///
/// ```
/// use polygateway_actors::runtime::metrics::{BREAKER_STATE, METRICS};
/// assert_eq!(BREAKER_STATE, "pgw_breaker_state");
/// // A gauge: a dashboard reads its value as 0 = closed, 1 = open, 2 = half-open.
/// assert!(METRICS.contains(&(BREAKER_STATE, "gauge", "scope, source")));
/// ```
pub const BREAKER_STATE: &str = "pgw_breaker_state";
/// Changes of that state, by `scope`, `source` and `to`.
///
/// ```
/// use polygateway_actors::runtime::metrics::{BREAKER_STATE_CHANGES_TOTAL, METRICS};
/// use polygateway_actors::BreakerState;
/// assert!(METRICS.contains(&(BREAKER_STATE_CHANGES_TOTAL, "counter", "scope, source, to")));
/// // The `to` label is the new state's name.
/// assert_eq!(BreakerState::HalfOpen.as_str(), "half_open");
/// ```
pub const BREAKER_STATE_CHANGES_TOTAL: &str = "pgw_breaker_state_changes_total";
/// Hedges of first tokens, by `scope` and `outcome` ([`HEDGE_OUTCOMES`]): how each hedge that
/// was sent ended, and why each due one was not sent (docs/behaviour.md §5.9).
///
/// ```
/// use polygateway_actors::runtime::metrics::{HEDGES_TOTAL, METRICS};
/// assert_eq!(HEDGES_TOTAL, "pgw_hedges_total");
/// assert!(METRICS.contains(&(HEDGES_TOTAL, "counter", "scope, outcome")));
/// ```
pub const HEDGES_TOTAL: &str = "pgw_hedges_total";
/// Streams cut after content, by `scope` and `outcome` ([`CONTINUATION_OUTCOMES`]): continued
/// on another source, or why not (docs/behaviour.md §5.10).
///
/// ```
/// use polygateway_actors::runtime::metrics::{CONTINUATIONS_TOTAL, METRICS};
/// assert_eq!(CONTINUATIONS_TOTAL, "pgw_continuations_total");
/// assert!(METRICS.contains(&(CONTINUATIONS_TOTAL, "counter", "scope, outcome")));
/// ```
pub const CONTINUATIONS_TOTAL: &str = "pgw_continuations_total";

/// Every metric this crate emits: `(name, kind, labels)`.
///
/// ```
/// use polygateway_actors::runtime::metrics::METRICS;
/// assert_eq!(METRICS.len(), 12);
/// let (name, kind, labels) = METRICS[0];
/// assert_eq!((name, kind, labels), ("pgw_calls_total", "counter", "scope, outcome"));
/// assert!(METRICS.iter().all(|(name, _, _)| name.starts_with("pgw_")));
/// ```
pub const METRICS: &[(&str, &str, &str)] = &[
    (CALLS_TOTAL, "counter", "scope, outcome"),
    (CALL_DURATION_SECONDS, "histogram", "scope"),
    (ATTEMPTS_TOTAL, "counter", "scope, source, result"),
    (RETRIES_TOTAL, "counter", "scope"),
    (ADMISSION_WAIT_SECONDS, "histogram", "scope"),
    (CAPACITY_WAIT_SECONDS, "histogram", "scope, reason"),
    (IN_FLIGHT, "gauge", "scope, source"),
    (PACER_LIMIT, "gauge", "scope, source"),
    (BREAKER_STATE, "gauge", "scope, source"),
    (BREAKER_STATE_CHANGES_TOTAL, "counter", "scope, source, to"),
    (HEDGES_TOTAL, "counter", "scope, outcome"),
    (CONTINUATIONS_TOTAL, "counter", "scope, outcome"),
];

/// Scope-level handles.
#[derive(Debug, Clone)]
pub(crate) struct ScopeMetrics {
    calls: Vec<Counter>,
    duration: Histogram,
    retries: Counter,
    admission_wait: Histogram,
    /// Indexed like [`WaitReason::ALL`].
    capacity_wait: Vec<Histogram>,
    /// The dashboard's series, fed by the same events.
    series: Arc<ScopeSeries>,
}

impl ScopeMetrics {
    /// Register the handles of scope `scope`.
    pub(crate) fn new(scope: &str) -> Self {
        let calls = CALL_OUTCOMES
            .iter()
            .map(|o| metrics::counter!(CALLS_TOTAL, "scope" => scope.to_string(), "outcome" => *o))
            .collect();
        Self {
            calls,
            duration: metrics::histogram!(CALL_DURATION_SECONDS, "scope" => scope.to_string()),
            retries: metrics::counter!(RETRIES_TOTAL, "scope" => scope.to_string()),
            admission_wait: metrics::histogram!(ADMISSION_WAIT_SECONDS, "scope" => scope.to_string()),
            capacity_wait: WaitReason::ALL
                .iter()
                .map(|r| metrics::histogram!(CAPACITY_WAIT_SECONDS, "scope" => scope.to_string(), "reason" => r.as_str()))
                .collect(),
            series: Book::global().scope(scope),
        }
    }

    pub(crate) fn call_finished(&self, outcome: &str, seconds: f64) {
        if let Some(i) = CALL_OUTCOMES.iter().position(|o| *o == outcome) {
            self.calls[i].increment(1);
        }
        self.duration.record(seconds);
        self.series.call(unix_now().0, outcome, seconds);
    }

    pub(crate) fn retry(&self) {
        self.retries.increment(1);
    }

    pub(crate) fn admission_waited(&self, seconds: f64) {
        self.admission_wait.record(seconds);
    }

    /// A call finished having waited `wait`: one observation per reason it waited for.
    pub(crate) fn capacity_waited(&self, wait: &CapacityWait) {
        let mut now = None;
        for (reason, histogram) in WaitReason::ALL.iter().zip(&self.capacity_wait) {
            let waited = wait.of(*reason);
            if !waited.is_zero() {
                histogram.record(waited.as_secs_f64());
                let now = *now.get_or_insert_with(|| unix_now().0);
                self.series
                    .waited(now, reason.as_str(), waited.as_secs_f64());
            }
        }
    }
}

/// Source-level handles.
#[derive(Debug, Clone)]
pub(crate) struct SourceMetrics {
    attempts: Vec<Counter>,
    in_flight: Gauge,
    pacer_limit: Gauge,
    pub(crate) breaker: Arc<BreakerGauge>,
    /// The dashboard's series, fed by the same events.
    series: Arc<SourceSeries>,
}

impl SourceMetrics {
    /// Register the handles of source `source` in scope `scope`.
    pub(crate) fn new(scope: &str, source: &str) -> Self {
        let labels = |extra: (&'static str, &'static str)| {
            [
                ("scope", scope.to_string()),
                ("source", source.to_string()),
                (extra.0, extra.1.to_string()),
            ]
        };
        Self {
            attempts: ATTEMPT_RESULTS
                .iter()
                .map(|r| metrics::counter!(ATTEMPTS_TOTAL, &labels(("result", r))))
                .collect(),
            in_flight: metrics::gauge!(IN_FLIGHT, "scope" => scope.to_string(), "source" => source.to_string()),
            pacer_limit: metrics::gauge!(PACER_LIMIT, "scope" => scope.to_string(), "source" => source.to_string()),
            breaker: Arc::new(BreakerGauge::new(scope, source)),
            series: Book::global().source(scope, source),
        }
    }

    /// One more (`1`) or one fewer (`-1`) attempt holds a pacer slot.
    pub(crate) fn in_flight(&self, delta: i32) {
        self.in_flight.increment(f64::from(delta));
        self.series.in_flight(unix_now().0, delta);
    }

    /// An attempt took `seconds` from being sent to being answered (the dashboard's per-source
    /// latency; no metric of its own: `pgw_call_duration_seconds` is per call).
    pub(crate) fn attempt_took(&self, seconds: f64) {
        self.series.attempt_took(unix_now().0, seconds);
    }

    /// The pacer's limit is `limit` now.
    pub(crate) fn pacer_limit(&self, limit: u32) {
        self.pacer_limit.set(f64::from(limit));
        self.series.pacer(unix_now().0, limit);
    }

    pub(crate) fn attempt(&self, result: Option<AttemptVerdict>) {
        let index = match result {
            Some(AttemptVerdict::Success) => 0,
            Some(AttemptVerdict::Failure) => 1,
            Some(AttemptVerdict::RateLimited) => 2,
            Some(AttemptVerdict::Dead) => 3,
            Some(AttemptVerdict::AliveButUnusable) => 4,
            None => 5,
        };
        self.attempts[index].increment(1);
        self.series.attempt(unix_now().0, ATTEMPT_RESULTS[index]);
    }
}

/// The breaker state the runtime last learned for one source, as the `pgw_breaker_state` gauge
/// and its change counter. Fed by whatever learns the state — an admission's answer (pass, probe,
/// refusal, including a breaker another process opened through a shared backend) and the answer
/// of every settled attempt (the failure that opened it, the probe that closed it) — so the gauge
/// follows the state calls act on, not only the states a later admission happens to see.
#[derive(Debug)]
pub(crate) struct BreakerGauge {
    /// Last state published (`u8::MAX` = none yet, so the first one is not counted as a change).
    last: AtomicU8,
    state: Gauge,
    /// Indexed by [`BreakerGauge::code`].
    changes: [Counter; 3],
    series: Arc<SourceSeries>,
}

impl BreakerGauge {
    pub(crate) fn new(scope: &str, source: &str) -> Self {
        let change = |to: BreakerState| {
            metrics::counter!(BREAKER_STATE_CHANGES_TOTAL,
                "scope" => scope.to_string(), "source" => source.to_string(), "to" => to.as_str())
        };
        Self {
            last: AtomicU8::new(u8::MAX),
            state: metrics::gauge!(BREAKER_STATE, "scope" => scope.to_string(), "source" => source.to_string()),
            changes: [
                change(BreakerState::Closed),
                change(BreakerState::Open),
                change(BreakerState::HalfOpen),
            ],
            series: Book::global().source(scope, source),
        }
    }

    /// The breaker is in `state` now; count a change when it differs from the last one published.
    pub(crate) fn seen(&self, state: BreakerState) {
        let code = Self::code(state);
        self.state.set(f64::from(code));
        let previous = self.last.swap(code, Ordering::AcqRel);
        if previous != u8::MAX && previous != code {
            self.changes[usize::from(code)].increment(1);
            self.series.breaker(unix_now().1, state.as_str());
        }
    }

    /// The gauge's value of `state`.
    fn code(state: BreakerState) -> u8 {
        match state {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_wait_reasons_are_the_ones_the_runtime_labels() {
        let labels: Vec<_> = WaitReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, CAPACITY_WAIT_REASONS);
    }
}
