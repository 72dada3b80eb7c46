//! What one attempt tells the governance about its source.
//!
//! The runtime never looks at status codes or bodies (SPEC §10.4): transports classify their own
//! errors into these classes, and every policy (retry, breaker, health, pacer) reads only this.

use std::time::Duration;

/// The four failure classes of SPEC §6.
///
/// ```
/// use polygateway_actors::FailureClass;
/// assert_eq!(FailureClass::Transient.as_str(), "Transient");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Timeout, 5xx, 429, network error, malformed or truncated stream, empty completion.
    Transient,
    /// 401, 403, 429 with `insufficient_quota`: the source cannot serve anything now.
    SourceDead,
    /// 400 or a local rejection: the request itself is wrong; retrying elsewhere will not help.
    RequestRejected,
    /// The call succeeded but its content is unusable.
    ResultInvalid,
}

impl FailureClass {
    /// The class name as it appears in telemetry (`Class: message`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "Transient",
            FailureClass::SourceDead => "SourceDead",
            FailureClass::RequestRejected => "RequestRejected",
            FailureClass::ResultInvalid => "ResultInvalid",
        }
    }
}

/// Why a source could not serve, as reported in `per_source_reasons` (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceReason {
    /// Connection refused/reset, 5xx, malformed or truncated stream, empty completion.
    NetworkError,
    /// Connect, TTFT, inter-token or total deadline.
    Timeout,
    /// 429 pushback.
    RateLimited,
    /// 401/403/insufficient quota.
    SourceDead,
    /// The breaker refused the source.
    CircuitOpen,
    /// The local cooldown memo skipped the source.
    Cooldown,
}

impl SourceReason {
    /// The wire name used in errors and telemetry.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceReason::NetworkError => "network_error",
            SourceReason::Timeout => "timeout",
            SourceReason::RateLimited => "rate_limited",
            SourceReason::SourceDead => "source_dead",
            SourceReason::CircuitOpen => "circuit_open",
            SourceReason::Cooldown => "cooldown",
        }
    }
}

/// How a transport error presents itself to governance. Implemented by every transport error.
pub trait Classify {
    /// The class that drives retry, switching and the breaker.
    fn class(&self) -> FailureClass;
    /// `true` for a 429 that is pushback (not `insufficient_quota`): it burns no retry budget and
    /// counts in neither breaker channel.
    fn is_rate_limited(&self) -> bool;
    /// The upstream's `Retry-After` hint (seconds form only).
    fn retry_after(&self) -> Option<Duration>;
    /// `true` when the upstream answered with a real non-2xx response that proves it is alive
    /// (e.g. 400): the breaker records a success.
    fn proves_alive(&self) -> bool {
        matches!(
            self.class(),
            FailureClass::RequestRejected | FailureClass::ResultInvalid
        )
    }
    /// The per-source reason reported when the call finally fails.
    fn source_reason(&self) -> SourceReason;
}

/// The verdict one finished attempt gives its source's breaker, health and pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptVerdict {
    /// Usable answer.
    Success,
    /// The service answered but the result was unusable, or it rejected the request: the breaker
    /// counts a success, health stays neutral.
    AliveButUnusable,
    /// 429 pushback: health bad, pacer halves, breaker untouched.
    RateLimited,
    /// Transient failure: health bad, breaker failure.
    Failure,
    /// Source dead: health bad, breaker force-opens.
    Dead,
}

impl AttemptVerdict {
    /// Derive the verdict of a failed attempt from its classified error.
    pub fn of_error<E: Classify + ?Sized>(error: &E) -> Self {
        if error.is_rate_limited() {
            return AttemptVerdict::RateLimited;
        }
        match error.class() {
            FailureClass::Transient => AttemptVerdict::Failure,
            FailureClass::SourceDead => AttemptVerdict::Dead,
            FailureClass::RequestRejected | FailureClass::ResultInvalid => {
                if error.proves_alive() {
                    AttemptVerdict::AliveButUnusable
                } else {
                    AttemptVerdict::Failure
                }
            }
        }
    }
}
