//! The fixed label values of the runtime's metrics (`runtime::metrics` re-exports them): what
//! the `pgw_*` metrics and the dashboard's series (`runtime::series`) both count by, apart from
//! either so that neither imports the other for them.

/// The values of the `reason` label of `pgw_capacity_wait_seconds`: `pacer` (every eligible
/// source's pacer was full), `gate` (a quota gate refused: RPM, TPM, concurrency), `cooldown`
/// (every source was cooling down and `CIRCUIT_OPEN=wait`), `rate_limited` (after a 429, for its
/// `Retry-After` or the back-off).
///
/// ```
/// use polygateway_actors::runtime::metrics::CAPACITY_WAIT_REASONS;
/// assert_eq!(CAPACITY_WAIT_REASONS, ["pacer", "gate", "cooldown", "rate_limited"]);
/// ```
pub const CAPACITY_WAIT_REASONS: [&str; 4] = ["pacer", "gate", "cooldown", "rate_limited"];

/// The values of the `outcome` label of `pgw_calls_total`.
///
/// ```
/// use polygateway_actors::runtime::metrics::CALL_OUTCOMES;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// // A failed call's `kind()` is always one of the outcomes.
/// let failure = CallFailure::<std::io::Error>::Shutdown("stopped".into());
/// assert!(CALL_OUTCOMES.contains(&failure.kind()));
/// assert!(CALL_OUTCOMES.contains(&ScopeReason::Stalled.as_str()));
/// ```
pub const CALL_OUTCOMES: [&str; 11] = [
    "ok",
    "circuit_open",
    "retry_exhausted",
    "stalled",
    "quota_exhausted",
    "no_sources",
    "governance_backend_down",
    "rejected",
    "invalid",
    "stream_broken",
    "shutdown",
];

/// The values of the `result` label of `pgw_attempts_total`.
///
/// ```
/// use polygateway_actors::runtime::metrics::ATTEMPT_RESULTS;
/// // One value per attempt verdict, plus `cancelled` for attempts whose caller went away.
/// assert_eq!(ATTEMPT_RESULTS.len(), 6);
/// assert_eq!(ATTEMPT_RESULTS[5], "cancelled");
/// ```
pub const ATTEMPT_RESULTS: [&str; 6] = [
    "success",
    "failure",
    "rate_limited",
    "source_dead",
    "unusable",
    "cancelled",
];
