//! The attempt port: one attempt's whole governance as two operations — `admit` (the source's
//! breaker, then all six gates and the lease) and `finish` (breaker verdict, TPM settlement, lease
//! release, progress mark). A network backend answers each in one round trip (Redis: one script
//! call each, so a successful attempt costs at most two; a backend that
//! [carries finishes](AttemptBackend::carries_finishes) takes finishes nobody waits for along with
//! a later admission, for one round trip per attempt under load); [`ComposedAttempts`] builds both from any
//! [`GateBackend`] and [`BreakerBackend`] (the in-memory backends, or a mixed setup).
//!
//! Contract shared by every backend (tests/contract runs it on memory and Redis):
//! - `admit` is the breaker's `acquire` followed by the gates' `admit`: an OPEN breaker spends no
//!   quota; a probe taken for an attempt the gates refuse is given back; a refusal counts nothing.
//! - `finish` applies the breaker action, settles the lease at `tokens`, releases it, and marks
//!   progress when asked. Settlement and release are idempotent by lease id; a network backend,
//!   whose client may re-send a call after a reconnect, also makes a re-sent `finish` count its
//!   verdict once (the lease id is the verdict id).
//! - `finish` answers the source's breaker as it left it ([`BreakerStatus`]): the call learns in
//!   the same round trip that its own failure opened the breaker, so its `retry_after` hint never
//!   promises service before the cooldown ends (docs/behaviour.md §5.4).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::breaker::{
    BreakerAdmit, BreakerBackend, BreakerConfig, BreakerSnapshot, BreakerState, BreakerVerdict,
};
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

/// The source's breaker as a finished attempt left it: what the next admission will see.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::ports::attempt::BreakerStatus;
/// use polygateway_actors::BreakerState;
/// // The attempt's failure tripped the breaker: nobody is served for 30 s.
/// let tripped = BreakerStatus::Open { retry_after: Duration::from_secs(30) };
/// assert_eq!(tripped.retry_after(), Duration::from_secs(30));
/// assert_eq!(tripped.state(), BreakerState::Open);
/// assert_eq!(BreakerStatus::HalfOpen.retry_after(), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerStatus {
    /// Closed: the source serves.
    Closed,
    /// Half-open: the next admission may take the probe (or finds it taken).
    HalfOpen,
    /// Open: no admission before `retry_after` has passed.
    Open {
        /// Remaining cooldown.
        retry_after: Duration,
    },
}

impl BreakerStatus {
    /// How long until the breaker lets an attempt through (zero unless open).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::ports::attempt::BreakerStatus;
    /// assert_eq!(BreakerStatus::Closed.retry_after(), Duration::ZERO);
    /// ```
    pub fn retry_after(self) -> Duration {
        match self {
            BreakerStatus::Open { retry_after } => retry_after,
            BreakerStatus::Closed | BreakerStatus::HalfOpen => Duration::ZERO,
        }
    }

    /// The state without the cooldown.
    ///
    /// ```
    /// use polygateway_actors::ports::attempt::BreakerStatus;
    /// use polygateway_actors::BreakerState;
    /// assert_eq!(BreakerStatus::HalfOpen.state(), BreakerState::HalfOpen);
    /// ```
    pub fn state(self) -> BreakerState {
        match self {
            BreakerStatus::Closed => BreakerState::Closed,
            BreakerStatus::HalfOpen => BreakerState::HalfOpen,
            BreakerStatus::Open { .. } => BreakerState::Open,
        }
    }
}

impl From<&BreakerSnapshot> for BreakerStatus {
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::ports::attempt::BreakerStatus;
    /// use polygateway_actors::{BreakerSnapshot, BreakerState};
    /// let snapshot = BreakerSnapshot {
    ///     state: BreakerState::Open, epoch: 1, retry_after: Duration::from_secs(9),
    ///     consecutive_failures: 0, open_streak: 1, probe_held: false, opens: 1,
    /// };
    /// assert_eq!(
    ///     BreakerStatus::from(&snapshot),
    ///     BreakerStatus::Open { retry_after: Duration::from_secs(9) }
    /// );
    /// ```
    fn from(snapshot: &BreakerSnapshot) -> Self {
        match snapshot.state {
            BreakerState::Closed => BreakerStatus::Closed,
            BreakerState::HalfOpen => BreakerStatus::HalfOpen,
            BreakerState::Open => BreakerStatus::Open {
                retry_after: snapshot.retry_after,
            },
        }
    }
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
///     AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerAction, BreakerStatus, ComposedAttempts,
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
/// let after = attempts.finish(&permit, &breaker, success).await?;
/// assert_eq!(after, BreakerStatus::Closed);
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
    /// Breaker action, settlement at `outcome.tokens`, release, progress mark; answers the
    /// source's breaker as the attempt left it (a re-sent finish answers it without counting).
    async fn finish(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> Result<BreakerStatus, BackendError>;

    /// Whether finishes nobody waits for are worth holding back for the scope's next admission
    /// to carry ([`Self::admit_after`]): true for a network backend that applies them in the
    /// admission's own round trip. The default, false, finishes each at once.
    fn carries_finishes(&self) -> bool {
        false
    }

    /// Apply `pending` (finishes of the request's scope, in order), then admit: one round trip
    /// for a backend that [carries finishes](Self::carries_finishes). On an error the caller
    /// cannot tell which finishes were applied and sends them again (a finish is idempotent).
    /// The default finishes each, then admits.
    async fn admit_after(
        &self,
        pending: &[PendingFinish],
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        self.finish_all(pending).await?;
        self.admit(request, breaker).await
    }

    /// Apply finishes nobody waits for (one scope's, in order). The default finishes each; a
    /// backend that [carries finishes](Self::carries_finishes) sends them together.
    async fn finish_all(&self, pending: &[PendingFinish]) -> Result<(), BackendError> {
        for p in pending {
            self.finish(&p.permit, &p.breaker, p.outcome).await?;
        }
        Ok(())
    }
}

/// A finish held back to ride on a later call ([`AttemptBackend::admit_after`],
/// [`AttemptBackend::finish_all`]): nobody waits for the breaker state it leaves.
///
/// ```
/// use polygateway_actors::ports::attempt::{
///     AttemptOutcome, AttemptPermit, BreakerAction, PendingFinish,
/// };
/// use polygateway_actors::{BreakerConfig, BreakerVerdict, Lease};
/// let lease = Lease {
///     scope: "LLM".into(), source: "openai_1".into(), id: "call-1/attempt-1".into(),
///     est_tokens: 300, window: 0,
/// };
/// let pending = PendingFinish {
///     permit: AttemptPermit { lease, epoch: 0, probe_id: None },
///     breaker: BreakerConfig::default(),
///     outcome: AttemptOutcome {
///         action: BreakerAction::Record(BreakerVerdict::Success), tokens: 120, progress: true,
///     },
/// };
/// assert_eq!(&*pending.permit.lease.scope, "LLM");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFinish {
    /// The permit the attempt held.
    pub permit: AttemptPermit,
    /// The source's breaker parameters.
    pub breaker: BreakerConfig,
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
}

/// [`AttemptBackend`] built from a gate and a breaker backend: one call per step, each bounded by
/// its own timeout (so a stuck breaker store cannot keep a lease from being released). `finish`
/// reads the breaker back with a snapshot after the verdict (free in memory; one more call on a
/// network breaker store).
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
        // A step that answers on its first poll (every in-memory backend) needs no timer: the
        // common case costs no timer registration, and a caller outside a tokio runtime (the
        // simulator, in virtual time) can drive the memory backends.
        let mut fut = std::pin::pin!(fut);
        if let std::task::Poll::Ready(result) = futures::poll!(fut.as_mut()) {
            return result;
        }
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
    ) -> Result<BreakerStatus, BackendError> {
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
        let status = self
            .bounded(self.breakers.snapshot(&lease.scope, &lease.source, breaker))
            .await
            .map(|snapshot| BreakerStatus::from(&snapshot));
        released
            .and(settled)
            .and(breaker_result)
            .and(progress)
            .and(status)
    }
}
