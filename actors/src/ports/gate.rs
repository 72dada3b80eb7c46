//! The six-gate limiter port (docs/behaviour.md §5.3): global/source × concurrency/RPM/TPM.
//!
//! Contract shared by every backend (memory, Redis):
//! - `admit` checks all six gates atomically; all pass or nothing is counted.
//! - A concurrency slot is a lease with a TTL, reclaimed if its holder dies.
//! - TPM pre-deducts `est_tokens`; `settle(actual)` refunds or charges the difference in the window
//!   of admission. `release` and `settle` are idempotent by lease id.
//! - `mark_progress`/`progress_age` feed the stall guard (global per scope).
//! - Spend budgets (`reserve_budget`, `settle_budget`, `budget_spend`; contract in
//!   [`super::budget`]) are a gate of the same store, reserved once per call rather than per
//!   attempt. A backend without them keeps the default methods, which refuse (fail closed):
//!   configuring a budget over such a backend is an error at the first call, never a silent
//!   pass.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::budget::{BudgetClaim, BudgetDecision, BudgetLease, BudgetRequest, BudgetSpend};
use super::BackendError;

/// Limits of one gate pair. `0` means unlimited.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{Gate, GateDecision, GateRequest, Limits};
/// // Only RPM is capped: 0 leaves concurrency and TPM unlimited.
/// let per_source = Limits { rpm: 1, ..Limits::default() };
/// let mut req = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits::default(),
///     per_source,
///     est_tokens: 1_000_000,
///     lease_id: "1".into(),
///     lease_ttl: Duration::from_secs(60),
/// };
/// let mut limiter = LimiterState::default();
/// assert!(matches!(limiter.admit(&req, 0), GateDecision::Admitted(_)));
/// req.lease_id = "2".into();
/// assert!(matches!(limiter.admit(&req, 0), GateDecision::Refused { gate: Gate::SourceRpm, .. }));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Maximum concurrent leases.
    pub max_concurrency: u32,
    /// Requests per minute window.
    pub rpm: u32,
    /// Tokens per minute window.
    pub tpm: u64,
}

/// One admission request.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{GateRequest, Limits};
/// let req = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits { max_concurrency: 32, ..Limits::default() },
///     per_source: Limits { max_concurrency: 4, rpm: 500, tpm: 200_000 },
///     est_tokens: 1_500,
///     lease_id: "call-7/attempt-1".into(),
///     lease_ttl: Duration::from_secs(120),
/// };
/// let mut limiter = LimiterState::default();
/// let first = limiter.admit(&req, 0);
/// // Re-sending the same request (same lease id) returns the same lease and counts nothing more.
/// assert_eq!(limiter.admit(&req, 10), first);
/// assert_eq!(limiter.usage("LLM", Some("openai_1"), 10).requests, 1);
/// ```
#[derive(Debug, Clone)]
pub struct GateRequest {
    /// Scope name (the global gates are per scope).
    pub scope: Arc<str>,
    /// Source name (the source gates).
    pub source: Arc<str>,
    /// Scope-wide limits.
    pub global: Limits,
    /// This source's limits.
    pub per_source: Limits,
    /// `effective_est_tokens`, pre-deducted from both TPM gates.
    pub est_tokens: u64,
    /// Unique id of this lease; makes release/settle idempotent and re-sent scripts harmless.
    pub lease_id: Arc<str>,
    /// Lease time-to-live (`PGW_LEASE_TTL_S`).
    pub lease_ttl: Duration,
}

/// Which gate refused.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{Gate, GateDecision, GateRequest, Limits};
/// let per_source = Limits { max_concurrency: 0, rpm: 1, tpm: 100 };
/// let req = |id: &str| GateRequest {
///     scope: "LLM".into(), source: "openai_1".into(),
///     global: Limits::default(), per_source,
///     est_tokens: 60, lease_id: id.into(), lease_ttl: Duration::from_secs(60),
/// };
/// let mut limiter = LimiterState::default();
/// assert!(matches!(limiter.admit(&req("1"), 0), GateDecision::Admitted(_)));
/// // Source RPM and TPM are both full now: the first full gate in checking order is named.
/// let GateDecision::Refused { gate, .. } = limiter.admit(&req("2"), 0) else {
///     panic!("expected a refusal");
/// };
/// assert_eq!(gate, Gate::SourceRpm);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gate {
    /// Scope-wide concurrency.
    GlobalConcurrency,
    /// Source concurrency.
    SourceConcurrency,
    /// Scope-wide RPM.
    GlobalRpm,
    /// Source RPM.
    SourceRpm,
    /// Scope-wide TPM.
    GlobalTpm,
    /// Source TPM.
    SourceTpm,
}

impl Gate {
    /// `true` for the scope-wide gates: switching source cannot help.
    ///
    /// ```
    /// use polygateway_actors::Gate;
    /// let all = [
    ///     Gate::GlobalConcurrency, Gate::SourceConcurrency,
    ///     Gate::GlobalRpm, Gate::SourceRpm,
    ///     Gate::GlobalTpm, Gate::SourceTpm,
    /// ];
    /// let global: Vec<Gate> = all.into_iter().filter(|g| g.is_global()).collect();
    /// assert_eq!(global, [Gate::GlobalConcurrency, Gate::GlobalRpm, Gate::GlobalTpm]);
    /// ```
    pub fn is_global(self) -> bool {
        matches!(
            self,
            Gate::GlobalConcurrency | Gate::GlobalRpm | Gate::GlobalTpm
        )
    }
}

/// A granted admission. Must be settled and released exactly once (idempotent either way).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{GateDecision, GateRequest, Limits};
/// let req = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits::default(),
///     per_source: Limits { tpm: 1_000, ..Limits::default() },
///     est_tokens: 300,
///     lease_id: "call-1/attempt-1".into(),
///     lease_ttl: Duration::from_secs(60),
/// };
/// let mut limiter = LimiterState::default(); // 60 s windows
/// let GateDecision::Admitted(lease) = limiter.admit(&req, 125_000) else {
///     panic!("nothing is full");
/// };
/// assert_eq!((&*lease.id, lease.est_tokens, lease.window), ("call-1/attempt-1", 300, 2));
/// // The call used 120 tokens: settling refunds the rest, releasing frees the slot.
/// limiter.settle(&lease, 120);
/// limiter.release(&lease);
/// assert_eq!(limiter.usage("LLM", Some("openai_1"), 125_000).tokens, 120);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Scope of the admission.
    pub scope: Arc<str>,
    /// Source of the admission.
    pub source: Arc<str>,
    /// The lease id from the request.
    pub id: Arc<str>,
    /// Tokens pre-deducted at admission.
    pub est_tokens: u64,
    /// The TPM window the tokens were deducted from (backend clock, minutes since epoch).
    pub window: u64,
}

/// The answer to an admission request.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{GateDecision, GateRequest, Limits};
/// fn next_step(decision: &GateDecision) -> String {
///     match decision {
///         GateDecision::Admitted(lease) => format!("send to {}", lease.source),
///         GateDecision::Refused { gate, retry_after } if gate.is_global() => {
///             format!("wait {retry_after:?}")
///         }
///         GateDecision::Refused { gate, .. } => format!("{gate:?} full: try another source"),
///     }
/// }
/// let req = |id: &str| GateRequest {
///     scope: "LLM".into(), source: "openai_1".into(),
///     global: Limits { rpm: 1, ..Limits::default() }, per_source: Limits::default(),
///     est_tokens: 0, lease_id: id.into(), lease_ttl: Duration::from_secs(60),
/// };
/// let mut limiter = LimiterState::default();
/// assert_eq!(next_step(&limiter.admit(&req("1"), 59_000)), "send to openai_1");
/// assert_eq!(next_step(&limiter.admit(&req("2"), 59_000)), "wait 1s");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum GateDecision {
    /// All six gates passed; the lease holds a concurrency slot in both concurrency gates.
    Admitted(Lease),
    /// A gate refused; nothing was counted.
    Refused {
        /// The first gate that refused.
        gate: Gate,
        /// How long until that gate is likely to pass.
        retry_after: Duration,
    },
}

/// The limiter backend. Implementations must be cheap to call concurrently.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::MemoryGate;
/// use polygateway_actors::{GateBackend, GateDecision, GateRequest, Limits};
/// let gate: Arc<dyn GateBackend> = Arc::new(MemoryGate::default());
/// let req = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits::default(),
///     per_source: Limits { max_concurrency: 1, rpm: 0, tpm: 10_000 },
///     est_tokens: 500,
///     lease_id: "call-1/attempt-1".into(),
///     lease_ttl: Duration::from_secs(120),
/// };
/// let GateDecision::Admitted(lease) = gate.admit(&req).await? else {
///     panic!("nothing is full");
/// };
/// assert_eq!(gate.leases_held("LLM").await?, 1);
/// // The attempt succeeded and used 42 tokens.
/// gate.settle(&lease, 42).await?;
/// gate.release(&lease).await?;
/// gate.mark_progress("LLM").await?;
/// assert_eq!(gate.leases_held("LLM").await?, 0);
/// assert!(gate.progress_age("LLM").await?.is_some());
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait GateBackend: Send + Sync + std::fmt::Debug + 'static {
    /// Check all six gates and count them all, or nothing.
    async fn admit(&self, request: &GateRequest) -> Result<GateDecision, BackendError>;
    /// Give back the concurrency slot. Idempotent.
    async fn release(&self, lease: &Lease) -> Result<(), BackendError>;
    /// Replace the pre-deducted estimate with `actual_tokens` in the admission window. Idempotent.
    async fn settle(&self, lease: &Lease, actual_tokens: u64) -> Result<(), BackendError>;
    /// Record that the scope made progress (a successful call).
    async fn mark_progress(&self, scope: &str) -> Result<(), BackendError>;
    /// Time since the scope last made progress; `None` if it never did.
    async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError>;
    /// Leases currently held in `scope` (global gate), for invariant checks and snapshots.
    async fn leases_held(&self, scope: &str) -> Result<u64, BackendError>;
    /// Reserve a call's estimated cost in every budget it counts against, or in none.
    async fn reserve_budget(
        &self,
        request: &BudgetRequest,
    ) -> Result<BudgetDecision, BackendError> {
        let _ = request;
        Err(no_budgets())
    }
    /// Replace a reservation's estimate with the call's real cost. Idempotent.
    async fn settle_budget(
        &self,
        lease: &BudgetLease,
        actual_micros: u64,
    ) -> Result<(), BackendError> {
        let _ = (lease, actual_micros);
        Err(no_budgets())
    }
    /// A budget's spend in its current window.
    async fn budget_spend(&self, claim: &BudgetClaim) -> Result<BudgetSpend, BackendError> {
        let _ = claim;
        Err(no_budgets())
    }
}

fn no_budgets() -> BackendError {
    BackendError::new("this limiter backend keeps no spend budgets (implement reserve_budget, settle_budget and budget_spend)")
}
