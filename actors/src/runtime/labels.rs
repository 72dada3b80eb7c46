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

/// The values of the `outcome` label of `pgw_hedges_total` (docs/behaviour.md §5.9): how a
/// hedge that was sent ended — `won` (it produced the first token; the first attempt was
/// cancelled), `lost` (the first attempt did; the hedge was cancelled), `failed` (it failed
/// before any token) — or why a due hedge was not sent: `no_budget`, `capacity_wait` (calls of
/// the scope were waiting), `no_source` (no other source eligible, or admission refused),
/// `deadline`.
///
/// ```
/// use polygateway_actors::runtime::metrics::HEDGE_OUTCOMES;
/// assert_eq!(HEDGE_OUTCOMES[..3], ["won", "lost", "failed"]);
/// assert!(HEDGE_OUTCOMES.contains(&"no_budget"));
/// ```
pub const HEDGE_OUTCOMES: [&str; 7] = [
    "won",
    "lost",
    "failed",
    "no_budget",
    "capacity_wait",
    "no_source",
    "deadline",
];

/// The values of the `outcome` label of `pgw_continuations_total` (docs/behaviour.md §5.10):
/// how a stream cut after content ended — `continued` (another source carried it on; the caller
/// got one answer), `failed` (the continuation failed too) — or why it was not continued:
/// `not_eligible_tool_call`, `not_eligible_thinking`, `not_eligible_refusal` (the answer had
/// begun one), `not_eligible_structured` (a structured-output call), `no_source` (no other
/// source that takes a prefill was eligible, or admission refused), `deadline`.
///
/// ```
/// use polygateway_actors::runtime::metrics::CONTINUATION_OUTCOMES;
/// assert_eq!(CONTINUATION_OUTCOMES[..2], ["continued", "failed"]);
/// assert!(CONTINUATION_OUTCOMES.contains(&"not_eligible_tool_call"));
/// ```
pub const CONTINUATION_OUTCOMES: [&str; 8] = [
    "continued",
    "failed",
    "not_eligible_tool_call",
    "not_eligible_thinking",
    "not_eligible_refusal",
    "not_eligible_structured",
    "no_source",
    "deadline",
];
