//! Why a scope could not serve a call: the machine's scope-level reasons (docs/behaviour.md §6).

/// Why a scope could not serve (docs/behaviour.md §6 scope-level reasons).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// // Worth retrying later: an open circuit or a full quota clears with time.
/// fn should_retry_later<E>(failure: &CallFailure<E>) -> Option<Duration> {
///     use ScopeReason::{CircuitOpen, QuotaExhausted};
///     match failure {
///         CallFailure::Unavailable { reason: CircuitOpen | QuotaExhausted, retry_after, .. } => {
///             Some(*retry_after)
///         }
///         _ => None,
///     }
/// }
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::QuotaExhausted,
///     retry_after: Duration::from_secs(2),
///     per_source: Default::default(),
///     last_error: None,
///     detail: "scope quota full".into(),
/// };
/// assert_eq!(should_retry_later(&failure), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeReason {
    /// Every breaker refused.
    CircuitOpen,
    /// The attempt budget is spent.
    RetryExhausted,
    /// Waited past the stall window while the scope made no progress.
    Stalled,
    /// A quota gate is full and the scope fails fast.
    QuotaExhausted,
    /// No sources configured.
    NoSources,
    /// The limiter or breaker backend is down.
    GovernanceBackendDown,
    /// The call's deadline passed before it could be served (nothing was sent after it).
    DeadlineExceeded,
}

impl ScopeReason {
    /// The wire name (`circuit_open`, `retry_exhausted`, …).
    ///
    /// ```
    /// use polygateway_actors::runtime::ScopeReason;
    /// assert_eq!(ScopeReason::RetryExhausted.as_str(), "retry_exhausted");
    /// assert_eq!(ScopeReason::GovernanceBackendDown.as_str(), "governance_backend_down");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeReason::CircuitOpen => "circuit_open",
            ScopeReason::RetryExhausted => "retry_exhausted",
            ScopeReason::Stalled => "stalled",
            ScopeReason::QuotaExhausted => "quota_exhausted",
            ScopeReason::NoSources => "no_sources",
            ScopeReason::GovernanceBackendDown => "governance_backend_down",
            ScopeReason::DeadlineExceeded => "deadline_exceeded",
        }
    }
}
