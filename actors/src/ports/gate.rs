//! The six-gate limiter port (SPEC §5.3): global/source × concurrency/RPM/TPM.
//!
//! Contract shared by every backend (memory, Redis):
//! - `admit` checks all six gates atomically; all pass or nothing is counted.
//! - A concurrency slot is a lease with a TTL, reclaimed if its holder dies.
//! - TPM pre-deducts `est_tokens`; `settle(actual)` refunds or charges the difference in the window
//!   of admission. `release` and `settle` are idempotent by lease id.
//! - `mark_progress`/`progress_age` feed the stall guard (global per scope).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::BackendError;

/// Limits of one gate pair. `0` means unlimited.
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
    pub fn is_global(self) -> bool {
        matches!(
            self,
            Gate::GlobalConcurrency | Gate::GlobalRpm | Gate::GlobalTpm
        )
    }
}

/// A granted admission. Must be settled and released exactly once (idempotent either way).
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
}
