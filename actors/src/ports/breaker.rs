//! The circuit-breaker port (docs/behaviour.md §5.4). The state machine itself is
//! [`crate::policy::breaker::BreakerMachine`]; backends store it (in memory, or in Redis through a
//! script implementing the same transitions) so every process sees one breaker per source.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::BackendError;

/// Breaker parameters of one source (already resolved from configuration).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerConfig, BreakerVerdict};
/// let cfg = BreakerConfig {
///     fail_threshold: 3,
///     cooldown: Duration::from_secs(10),
///     ..BreakerConfig::default()
/// };
/// let mut b = BreakerMachine::new();
/// for now_ms in 0..3 {
///     b.record(now_ms, &cfg, 0, None, BreakerVerdict::Failure);
/// }
/// // The third consecutive failure opened it for one cooldown.
/// assert_eq!(b.snapshot(2).retry_after, Duration::from_secs(10));
/// ```
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
    ///
    /// ```
    /// use polygateway_actors::BreakerConfig;
    /// let cfg =
    ///     BreakerConfig { fail_threshold: 5, max_concurrency: 4, ..BreakerConfig::default() };
    /// // Four parallel attempts can fail together: the streak needs 2 × 4 failures.
    /// assert_eq!(cfg.effective_threshold(), 8);
    /// assert_eq!(BreakerConfig { max_concurrency: 0, ..cfg }.effective_threshold(), 5);
    /// ```
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
///
/// ```
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerConfig, BreakerState};
/// let cfg = BreakerConfig::default(); // 30 s cooldown
/// let mut b = BreakerMachine::new();
/// assert_eq!(b.snapshot(0).state, BreakerState::Closed);
/// b.force_open(0, &cfg);
/// assert_eq!(b.snapshot(29_999).state, BreakerState::Open);
/// assert_eq!(b.snapshot(30_000).state, BreakerState::HalfOpen);
/// ```
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
    ///
    /// ```
    /// use polygateway_actors::BreakerState;
    /// let states = [BreakerState::Closed, BreakerState::Open, BreakerState::HalfOpen];
    /// assert_eq!(states.map(BreakerState::as_str), ["closed", "open", "half_open"]);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// The answer to "may I send to this source?".
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState};
/// let cfg = BreakerConfig::default(); // 30 s cooldown
/// let mut b = BreakerMachine::new();
/// assert_eq!(b.acquire(0, &cfg, || "p1".into()), BreakerAdmit::Pass { epoch: 0 });
/// b.force_open(0, &cfg);
/// assert_eq!(
///     b.acquire(12_000, &cfg, || "p1".into()),
///     BreakerAdmit::Refused { state: BreakerState::Open, retry_after: Duration::from_secs(18) }
/// );
/// let BreakerAdmit::Probe { epoch, probe_id } = b.acquire(30_000, &cfg, || "p1".into()) else {
///     panic!("the cooldown is over: expected the probe");
/// };
/// assert_eq!((epoch, &*probe_id), (1, "p1"));
/// ```
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
///
/// ```
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerConfig, BreakerVerdict};
/// let cfg = BreakerConfig::default();
/// let mut b = BreakerMachine::new();
/// use BreakerVerdict::{Failure, Success};
/// for v in [Failure, Failure, Success, Failure] {
///     assert!(b.record(0, &cfg, 0, None, v));
/// }
/// // The success broke the streak.
/// assert_eq!(b.snapshot(0).consecutive_failures, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerVerdict {
    /// Success (including real non-2xx answers that prove the service alive).
    Success,
    /// Failure (transient).
    Failure,
}

/// A read-only view of a breaker.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerConfig, BreakerState, BreakerVerdict};
/// let cfg = BreakerConfig { fail_threshold: 2, ..BreakerConfig::default() };
/// let mut b = BreakerMachine::new();
/// b.record(0, &cfg, 0, None, BreakerVerdict::Failure);
/// let s = b.snapshot(0);
/// assert_eq!((s.state, s.consecutive_failures, s.opens), (BreakerState::Closed, 1, 0));
/// b.record(5, &cfg, 0, None, BreakerVerdict::Failure);
/// let s = b.snapshot(1_005);
/// assert_eq!((s.state, s.epoch, s.opens), (BreakerState::Open, 1, 1));
/// assert_eq!(s.retry_after, Duration::from_secs(29));
/// ```
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
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use std::sync::Arc;
/// use polygateway_actors::memory::MemoryBreakers;
/// use polygateway_actors::{
///     BreakerAdmit, BreakerBackend, BreakerConfig, BreakerState, BreakerVerdict,
/// };
/// let breakers: Arc<dyn BreakerBackend> = Arc::new(MemoryBreakers::default());
/// let cfg = BreakerConfig::default();
/// let BreakerAdmit::Pass { epoch } = breakers.acquire("LLM", "openai_1", &cfg).await? else {
///     panic!("a new breaker is closed");
/// };
/// // The attempt failed transiently: report it under the epoch of its admission.
/// assert!(breakers.record("LLM", "openai_1", &cfg, epoch, None, BreakerVerdict::Failure).await?);
/// // Another attempt found the key revoked.
/// breakers.force_open("LLM", "openai_1", &cfg).await?;
/// let s = breakers.snapshot("LLM", "openai_1", &cfg).await?;
/// assert_eq!((s.state, s.epoch), (BreakerState::Open, 1));
/// // A late verdict from before the opening is fenced off.
/// assert!(!breakers.record("LLM", "openai_1", &cfg, epoch, None, BreakerVerdict::Success).await?);
/// # Ok(())
/// # }
/// ```
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
