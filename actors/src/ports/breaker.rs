//! The circuit-breaker port (SPEC §5.4). The state machine itself is
//! [`crate::policy::breaker::BreakerMachine`]; backends store it (in memory, or in Redis through a
//! script implementing the same transitions) so every process sees one breaker per source.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::BackendError;

/// Breaker parameters of one source (already resolved from configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// `FAIL_THRESHOLD`; the effective streak threshold is `max(this, 2 × max_concurrency)`.
    pub fail_threshold: u32,
    /// The source's `MAX_CONCURRENCY` (0 = unlimited, treated as 0 in the threshold formula).
    pub max_concurrency: u32,
    /// Base open duration.
    pub cooldown: Duration,
    /// Cap of the growing open duration.
    pub max_cooldown: Duration,
    /// Half-open probe lease TTL.
    pub probe_ttl: Duration,
    /// Minimum samples in the window for the rate channel.
    pub min_calls: u32,
    /// Failure rate that opens the rate channel.
    pub fail_rate: f64,
    /// Width of one of the two window buckets.
    pub bucket: Duration,
}

impl BreakerConfig {
    /// `max(fail_threshold, 2 × max_concurrency)`.
    pub fn effective_threshold(&self) -> u32 {
        self.fail_threshold.max(2 * self.max_concurrency)
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            fail_threshold: 5,
            max_concurrency: 0,
            cooldown: Duration::from_secs(30),
            max_cooldown: Duration::from_secs(300),
            probe_ttl: Duration::from_secs(120),
            min_calls: 10,
            fail_rate: 0.6,
            bucket: Duration::from_secs(30),
        }
    }
}

/// Breaker state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Traffic flows.
    Closed,
    /// Traffic refused until the cooldown ends.
    Open,
    /// One probe in flight decides.
    HalfOpen,
}

impl BreakerState {
    /// Lower-case name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// The answer to "may I send to this source?".
#[derive(Debug, Clone, PartialEq)]
pub enum BreakerAdmit {
    /// CLOSED: go. `retry_after` is 0 by contract.
    Pass {
        /// Epoch at admission; carried back with the verdict for fencing.
        epoch: u64,
    },
    /// HALF_OPEN and this caller holds the single probe.
    Probe {
        /// Epoch at admission.
        epoch: u64,
        /// The probe lease id (release it idempotently if no verdict comes).
        probe_id: Arc<str>,
    },
    /// Refused: OPEN (`retry_after` = remaining cooldown) or HALF_OPEN with the probe taken (0).
    Refused {
        /// State at refusal.
        state: BreakerState,
        /// Remaining cooldown; 0 when HALF_OPEN.
        retry_after: Duration,
    },
}

/// What a finished attempt reports to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerVerdict {
    /// Success (including real non-2xx answers that prove the service alive).
    Success,
    /// Failure (transient).
    Failure,
}

/// A read-only view of a breaker.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSnapshot {
    /// Current state.
    pub state: BreakerState,
    /// Opening epoch.
    pub epoch: u64,
    /// Remaining cooldown (0 unless OPEN).
    pub retry_after: Duration,
    /// Consecutive failures.
    pub consecutive_failures: u32,
    /// Open streak (grows the open duration).
    pub open_streak: u32,
    /// Whether a half-open probe is currently held.
    pub probe_held: bool,
    /// How many times it opened (monotonic, this backend's lifetime).
    pub opens: u64,
}

/// The breaker backend: one breaker per `(scope, source)`.
#[async_trait]
pub trait BreakerBackend: Send + Sync + std::fmt::Debug + 'static {
    /// May a request go to this source now?
    async fn acquire(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<BreakerAdmit, BackendError>;
    /// Report a verdict. Returns `applied = false` for a stale epoch (fencing).
    /// A verdict for a probe (`probe_id`) also releases it.
    async fn record(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
        epoch: u64,
        probe_id: Option<&str>,
        verdict: BreakerVerdict,
    ) -> Result<bool, BackendError>;
    /// Open at once (source dead). Increments the epoch.
    async fn force_open(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<(), BackendError>;
    /// Give a probe back without a verdict (cancelled, locally rejected, 429). Idempotent.
    async fn release_probe(
        &self,
        scope: &str,
        source: &str,
        probe_id: &str,
    ) -> Result<(), BackendError>;
    /// Read-only view.
    async fn snapshot(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<BreakerSnapshot, BackendError>;
}
