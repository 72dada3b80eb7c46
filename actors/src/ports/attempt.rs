//! The attempt port: one attempt's whole governance as two operations — `admit` (the source's
//! breaker, then all six gates and the lease) and `finish` (breaker verdict, TPM settlement, lease
//! release, progress mark). A network backend answers each in one round trip (Redis: one script
//! call each, so a successful attempt costs two); [`ComposedAttempts`] builds both from any
//! [`GateBackend`] and [`BreakerBackend`] (the in-memory backends, or a mixed setup).
//!
//! Contract shared by every backend (tests/contract runs it on memory and Redis):
//! - `admit` is the breaker's `acquire` followed by the gates' `admit`: an OPEN breaker spends no
//!   quota; a probe taken for an attempt the gates refuse is given back; a refusal counts nothing.
//! - `finish` applies the breaker action, settles the lease at `tokens`, releases it, and marks
//!   progress when asked. Settlement and release are idempotent by lease id; a network backend,
//!   whose client may re-send a call after a reconnect, also makes a re-sent `finish` count its
//!   verdict once (the lease id is the verdict id).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::breaker::{BreakerAdmit, BreakerBackend, BreakerConfig, BreakerState, BreakerVerdict};
use super::gate::{Gate, GateBackend, GateDecision, GateRequest, Lease};
use super::BackendError;

/// A granted admission: the breaker passed (or this attempt holds the half-open probe) and the
/// lease holds a slot in every gate.
///
/// ```
/// use polygateway_actors::ports::attempt::AttemptPermit;
/// use polygateway_actors::Lease;
/// let lease = Lease {
///     scope: "LLM".into(), source: "openai_1".into(), id: "call-1/attempt-1".into(),
///     est_tokens: 300, window: 0,
/// };
/// let permit = AttemptPermit { lease, epoch: 0, probe_id: None };
/// assert!(permit.probe_id.is_none()); // the breaker was CLOSED
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptPermit {
    /// The limiter lease.
    pub lease: Lease,
    /// Breaker epoch at admission (fences a late verdict).
    pub epoch: u64,
    /// The half-open probe this attempt holds, if any.
    pub probe_id: Option<Arc<str>>,
}

/// The answer to [`AttemptBackend::admit`].
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::ports::attempt::AttemptAdmit;
/// use polygateway_actors::BreakerState;
/// let refused = AttemptAdmit::BreakerRefused {
///     state: BreakerState::Open,
///     retry_after: Duration::from_secs(12),
/// };
/// assert!(!matches!(refused, AttemptAdmit::Admitted(_)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptAdmit {
    /// Go.
    Admitted(AttemptPermit),
    /// The source's breaker refused; no gate was asked.
    BreakerRefused {
        /// Breaker state.
        state: BreakerState,
        /// Remaining cooldown (0 when half-open with the probe taken).
        retry_after: Duration,
    },
    /// A gate refused; nothing was counted and no probe is held.
    GateRefused {
        /// The first gate that refused.
        gate: Gate,
        /// How long until that gate is likely to pass.
        retry_after: Duration,
    },
}

/// What the breaker learns from a finished attempt.
///
/// ```
/// use polygateway_actors::ports::attempt::BreakerAction;
/// use polygateway_actors::BreakerVerdict;
/// // A cancelled attempt teaches the breaker nothing (a held probe is released).
/// let actions = [BreakerAction::Record(BreakerVerdict::Success), BreakerAction::NoVerdict];
/// assert_ne!(actions[0], actions[1]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerAction {
    /// Record a verdict (releases a held probe too).
    Record(BreakerVerdict),
    /// Open the breaker now (source dead); a held probe is released.
    ForceOpen,
    /// No verdict (cancelled, 429, local rejection): release a held probe.
    NoVerdict,
}

/// How an attempt ended, for [`AttemptBackend::finish`].
///
/// ```
/// use polygateway_actors::ports::attempt::{AttemptOutcome, BreakerAction};
/// use polygateway_actors::BreakerVerdict;
/// // A success that used 1 210 tokens: the scope made progress.
/// let outcome = AttemptOutcome {
///     action: BreakerAction::Record(BreakerVerdict::Success),
///     tokens: 1_210,
///     progress: true,
/// };
/// assert!(outcome.progress);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// What the breaker learns.
    pub action: BreakerAction,
    /// Tokens to settle the TPM gates at.
    pub tokens: u64,
    /// The attempt succeeded: mark the scope's progress (stall guard).
    pub progress: bool,
}

/// One attempt's governance in two operations. Implementations must be cheap to call
/// concurrently and bound every I/O they do themselves (a store that cannot answer is an error,
/// never a hang): the caller does not cut them short, which could skip their compensation of a
/// grant whose answer was lost.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// use polygateway_actors::ports::attempt::{
///     AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerAction, ComposedAttempts,
/// };
/// use polygateway_actors::{BreakerConfig, BreakerVerdict, GateBackend, GateRequest, Limits};
/// let gate = Arc::new(MemoryGate::default());
/// let attempts = ComposedAttempts::new(gate.clone(), Arc::new(MemoryBreakers::default()));
/// let request = GateRequest {
///     scope: "LLM".into(), source: "openai_1".into(),
///     global: Limits::default(), per_source: Limits { max_concurrency: 1, ..Limits::default() },
///     est_tokens: 500, lease_id: "call-1/attempt-1".into(), lease_ttl: Duration::from_secs(60),
/// };
/// let breaker = BreakerConfig::default();
/// let AttemptAdmit::Admitted(permit) = attempts.admit(&request, &breaker).await? else {
///     panic!("nothing is full and the breaker is closed");
/// };
/// assert_eq!(gate.leases_held("LLM").await?, 1);
/// let success = AttemptOutcome {
///     action: BreakerAction::Record(BreakerVerdict::Success), tokens: 42, progress: true,
/// };
/// attempts.finish(&permit, &breaker, success).await?;
/// assert_eq!(gate.leases_held("LLM").await?, 0);
/// assert!(gate.progress_age("LLM").await?.is_some());
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait AttemptBackend: Send + Sync + std::fmt::Debug + 'static {
    /// The source's breaker, then all six gates: a permit, or the first refusal.
    async fn admit(
        &self,
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError>;
    /// Breaker action, settlement at `outcome.tokens`, release, progress mark.
    async fn finish(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> Result<(), BackendError>;
}

/// [`AttemptBackend`] built from a gate and a breaker backend: one call per step, each bounded by
/// its own timeout (so a stuck breaker store cannot keep a lease from being released).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// use polygateway_actors::ports::attempt::ComposedAttempts;
/// let attempts = ComposedAttempts::new(
///     Arc::new(MemoryGate::default()),
///     Arc::new(MemoryBreakers::default()),
/// )
/// .with_step_timeout(Duration::from_secs(1));
/// # drop(attempts);
/// ```
#[derive(Debug, Clone)]
pub struct ComposedAttempts {
    gate: Arc<dyn GateBackend>,
    breakers: Arc<dyn BreakerBackend>,
    step_timeout: Duration,
}

impl ComposedAttempts {
    /// Compose `gate` and `breakers`; each step is bounded by 3 s.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
    /// use polygateway_actors::ports::attempt::ComposedAttempts;
    /// let gate = Arc::new(MemoryGate::default());
    /// let attempts = ComposedAttempts::new(gate, Arc::new(MemoryBreakers::default()));
    /// # drop(attempts);
    /// ```
    pub fn new(gate: Arc<dyn GateBackend>, breakers: Arc<dyn BreakerBackend>) -> Self {
        Self {
            gate,
            breakers,
            step_timeout: Duration::from_secs(3),
        }
    }

    /// Bound each step (breaker call, gate call) by `timeout`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
    /// use polygateway_actors::ports::attempt::ComposedAttempts;
    /// let attempts = ComposedAttempts::new(Arc::new(MemoryGate::default()), Arc::new(MemoryBreakers::default()))
    ///     .with_step_timeout(Duration::from_millis(500));
    /// # drop(attempts);
    /// ```
    pub fn with_step_timeout(mut self, timeout: Duration) -> Self {
        self.step_timeout = timeout;
        self
    }

    async fn bounded<R>(
        &self,
        fut: impl std::future::Future<Output = Result<R, BackendError>>,
    ) -> Result<R, BackendError> {
        match tokio::time::timeout(self.step_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(BackendError::new(format!(
                "governance backend did not answer within {:?}",
                self.step_timeout
            ))),
        }
    }

    /// Give a probe back; a failure only logs (the probe TTL reclaims it).
    async fn release_probe(&self, lease: &Lease, probe: Option<&str>) -> Result<(), BackendError> {
        match probe {
            Some(probe) => {
                self.bounded(
                    self.breakers
                        .release_probe(&lease.scope, &lease.source, probe),
                )
                .await
            }
            None => Ok(()),
        }
    }
}

#[async_trait]
impl AttemptBackend for ComposedAttempts {
    async fn admit(
        &self,
        g: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        let (epoch, probe_id) = match self
            .bounded(self.breakers.acquire(&g.scope, &g.source, breaker))
            .await?
        {
            BreakerAdmit::Pass { epoch } => (epoch, None),
            BreakerAdmit::Probe { epoch, probe_id } => (epoch, Some(probe_id)),
            BreakerAdmit::Refused { state, retry_after } => {
                return Ok(AttemptAdmit::BreakerRefused { state, retry_after })
            }
        };
        let decision = self.bounded(self.gate.admit(g)).await;
        if !matches!(decision, Ok(GateDecision::Admitted(_))) {
            if let Some(probe) = &probe_id {
                if let Err(e) = self
                    .bounded(self.breakers.release_probe(&g.scope, &g.source, probe))
                    .await
                {
                    tracing::warn!(source = %g.source, error = %e, "release_probe failed");
                }
            }
        }
        Ok(match decision? {
            GateDecision::Admitted(lease) => AttemptAdmit::Admitted(AttemptPermit {
                lease,
                epoch,
                probe_id,
            }),
            GateDecision::Refused { gate, retry_after } => {
                AttemptAdmit::GateRefused { gate, retry_after }
            }
        })
    }

    /// Every step runs even when an earlier one failed; the first error is returned.
    async fn finish(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> Result<(), BackendError> {
        let lease = &permit.lease;
        let probe = permit.probe_id.as_deref();
        // The slot first: it is what other calls wait for (the order is otherwise free).
        let released = self.bounded(self.gate.release(lease)).await;
        let settled = self.bounded(self.gate.settle(lease, outcome.tokens)).await;
        let breaker_result = match outcome.action {
            BreakerAction::Record(verdict) => self
                .bounded(self.breakers.record(
                    &lease.scope,
                    &lease.source,
                    breaker,
                    permit.epoch,
                    probe,
                    verdict,
                ))
                .await
                .map(|_applied| ()),
            BreakerAction::ForceOpen => {
                let opened = self
                    .bounded(
                        self.breakers
                            .force_open(&lease.scope, &lease.source, breaker),
                    )
                    .await;
                opened.and(self.release_probe(lease, probe).await)
            }
            BreakerAction::NoVerdict => self.release_probe(lease, probe).await,
        };
        let progress = match outcome.progress {
            true => self.bounded(self.gate.mark_progress(&lease.scope)).await,
            false => Ok(()),
        };
        released.and(settled).and(breaker_result).and(progress)
    }
}
