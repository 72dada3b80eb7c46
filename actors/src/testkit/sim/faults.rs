//! The fault world: what a source's upstream may do ([`Faults`], drawn per seed) and the
//! provider errors it answers with ([`SimError`], classified as real ones are).

use std::time::Duration;

use crate::outcome::{Classify, FailureClass, SourceReason};

use super::params::Ms;
#[derive(Debug)]
pub(super) struct Faults {
    pub(super) latency: (Ms, Ms),
    pub(super) slow_first_token: f64,
    pub(super) transient: f64,
    pub(super) rate_limited: f64,
    /// Share of 429s and 503s that carry Retry-After.
    pub(super) retry_after: f64,
    pub(super) black_hole: f64,
    pub(super) truncate: f64,
    pub(super) rejected: f64,
    pub(super) invalid: f64,
    /// The key is dead in `[from, until)`, then recovers.
    pub(super) dead: Option<(Ms, Ms)>,
    /// Every answer is a 429 in `[from, until)` (a quota exhausted for a while).
    pub(super) pushback: Option<(Ms, Ms)>,
    /// Every answer is a fast `529 overloaded_error` in `[from, until)` (a provider too busy to
    /// serve: transient, no Retry-After).
    pub(super) overloaded: Option<(Ms, Ms)>,
    /// The source takes a prefill: a continuation of a stream cut elsewhere may be sent to it.
    pub(super) prefill: bool,
}

impl Faults {
    /// An upstream that answers every attempt in `latency` and never fails (what scripted and
    /// hand-built tests start from).
    #[cfg(test)]
    pub(super) fn quiet(latency: Ms) -> Self {
        Self {
            latency: (latency, latency),
            slow_first_token: 0.0,
            transient: 0.0,
            rate_limited: 0.0,
            retry_after: 0.0,
            black_hole: 0.0,
            truncate: 0.0,
            rejected: 0.0,
            invalid: 0.0,
            dead: None,
            pushback: None,
            overloaded: None,
            prefill: false,
        }
    }
}

/// How an attempt of a scripted schedule answers.
pub(super) type Answer = Result<(), SimError>;

/// A simulated transport failure, classified as a real provider error would be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SimError {
    pub(super) class: FailureClass,
    pub(super) reason: SourceReason,
    pub(super) rate_limited: bool,
    pub(super) retry_after: Option<Duration>,
    /// A stream cut after content: the source that cut it, and whether its last delta was a
    /// tool call's first piece.
    pub(super) cut: Option<(usize, bool)>,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulated {} ({})",
            self.class.as_str(),
            self.reason.as_str()
        )
    }
}

impl std::error::Error for SimError {}

impl Classify for SimError {
    fn class(&self) -> FailureClass {
        self.class
    }
    fn is_rate_limited(&self) -> bool {
        self.rate_limited
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn source_reason(&self) -> SourceReason {
        self.reason
    }
}
