//! The admission actor: the one door to the governance backends (limiter gates and breakers).
//!
//! Every attempt asks it for a `Permit`: the source's breaker first, then all six gates. With
//! in-memory backends the answer is computed inside the handler (no I/O, microseconds). With
//! network backends (Redis) each request runs in its own task so independent calls never queue
//! behind one round trip. Every backend call is bounded by a timeout; an error or timeout is
//! answered as `AdmitAnswer::BackendDown` — fail closed, never a pass (docs/behaviour.md §10.6).
//!
//! The actor holds no per-call state, so a restart loses nothing: the supervisor asks the
//! [`GovernanceFactory`] for the backends again, with backoff (the gateway's factory returns
//! clones of the same clients; a custom one may reconnect).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::ports::breaker::{
    BreakerAdmit, BreakerBackend, BreakerConfig, BreakerState, BreakerVerdict,
};
use crate::ports::gate::{Gate, GateBackend, GateDecision, GateRequest, Lease};
use crate::ports::BackendError;

/// The governance backends of a runtime.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// use polygateway_actors::runtime::Governance;
/// // Single-process governance: in-memory limiter and breakers, answered inline.
/// let governance = Governance {
///     gate: Arc::new(MemoryGate::default()),
///     breakers: Arc::new(MemoryBreakers::default()),
///     inline: true,
///     timeout: Duration::from_secs(3),
/// };
/// // Clones share the same backends (and so the same counters and breaker states).
/// let shared = governance.clone();
/// assert!(Arc::ptr_eq(&shared.gate, &governance.gate));
/// ```
#[derive(Debug, Clone)]
pub struct Governance {
    /// The six-gate limiter.
    pub gate: Arc<dyn GateBackend>,
    /// The breakers.
    pub breakers: Arc<dyn BreakerBackend>,
    /// `true` when both backends answer without I/O (memory): handled inline.
    pub inline: bool,
    /// Bound of every backend call.
    pub timeout: Duration,
}

/// Builds (or rebuilds after a restart) the governance backends.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use polygateway_actors::runtime::{GovernanceFactory, Runtime, RuntimeOptions};
/// use polygateway_actors::BackendError;
/// // A factory whose backend cannot be reached: the runtime refuses to start (fail closed).
/// let unreachable: GovernanceFactory =
///     Arc::new(|| Box::pin(async { Err(BackendError::new("redis: connection refused")) }));
/// let error = Runtime::start(unreachable, RuntimeOptions::default()).await.unwrap_err();
/// assert!(error.contains("connection refused"));
/// # }
/// ```
pub type GovernanceFactory = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Governance, BackendError>> + Send>>
        + Send
        + Sync,
>;

/// One admission request.
#[derive(Debug, Clone)]
pub(crate) struct AdmitRequest {
    /// The gates to pass.
    pub(crate) gate: GateRequest,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
}

/// A granted admission: breaker passed (or probe held) and a lease in every gate.
#[derive(Debug, Clone)]
pub(crate) struct Permit {
    /// The limiter lease.
    pub(crate) lease: Lease,
    /// Breaker epoch at admission (for fencing).
    pub(crate) epoch: u64,
    /// The half-open probe this attempt holds, if any.
    pub(crate) probe_id: Option<Arc<str>>,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
}

/// The answer to an admission request.
#[derive(Debug, Clone)]
pub(crate) enum AdmitAnswer {
    /// Go.
    Admitted(Permit),
    /// The source's breaker refused.
    BreakerRefused {
        /// Breaker state.
        state: BreakerState,
        /// Remaining cooldown (0 when half-open with the probe taken).
        retry_after: Duration,
    },
    /// A gate refused; nothing was counted.
    GateRefused {
        /// Which gate.
        gate: Gate,
        /// Wait hint.
        retry_after: Duration,
    },
    /// A backend failed or timed out: fail closed.
    BackendDown(String),
}

/// How a finished attempt settles with the backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerAction {
    /// Record a verdict (releases a held probe too).
    Record(BreakerVerdict),
    /// Open the breaker now (source dead); a held probe is released.
    ForceOpen,
    /// No verdict (cancelled, 429, local rejection): release a held probe.
    NoVerdict,
}

/// Messages of the admission actor.
#[derive(Debug)]
pub(crate) enum AdmissionMsg {
    /// Ask for a permit.
    Admit(AdmitRequest, oneshot::Sender<AdmitAnswer>),
    /// Settle a permit: breaker action, TPM settlement with `tokens`, lease release, and (for a
    /// success) the scope's progress mark — one message per finished attempt.
    Finish {
        /// The permit.
        permit: Permit,
        /// The attempt succeeded: mark the scope's progress (stall guard).
        progress: bool,
        /// What the breaker learns.
        action: BreakerAction,
        /// Tokens to settle the TPM gates at.
        tokens: u64,
    },
    /// How long since the scope last progressed.
    ProgressAge(
        Arc<str>,
        oneshot::Sender<Result<Option<Duration>, BackendError>>,
    ),
    /// Answer once the backend work already started (settlements, releases, force-opens) has
    /// finished — called on shutdown so nothing a finished call owes the shared store is lost.
    Drain(oneshot::Sender<()>),
    /// Chaos hook: make the actor fail, to exercise supervision.
    Crash(String),
}

/// The admission actor (state: the current [`Governance`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AdmissionActor;

/// State of the admission actor.
#[derive(Debug)]
pub(crate) struct AdmissionState {
    governance: Governance,
    /// Backend work running in tasks (network backends), so shutdown can let it finish.
    tasks: tokio_util::task::TaskTracker,
}

impl Actor for AdmissionActor {
    type Msg = AdmissionMsg;
    type State = AdmissionState;
    type Arguments = GovernanceFactory;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        factory: GovernanceFactory,
    ) -> Result<Self::State, ActorProcessingErr> {
        let governance = factory().await.map_err(|e| format!("{e}"))?;
        Ok(AdmissionState {
            governance,
            tasks: tokio_util::task::TaskTracker::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let gov = &state.governance;
        match message {
            AdmissionMsg::Admit(request, reply) => {
                if gov.inline {
                    let answer = admit(gov, &request).await;
                    deliver(gov, answer, reply).await;
                } else {
                    let gov = gov.clone();
                    state.tasks.spawn(async move {
                        let answer = admit(&gov, &request).await;
                        deliver(&gov, answer, reply).await;
                    });
                }
            }
            AdmissionMsg::Finish {
                permit,
                progress,
                action,
                tokens,
            } => {
                if gov.inline {
                    finish(gov, &permit, action, tokens, progress).await;
                } else {
                    let gov = gov.clone();
                    state.tasks.spawn(async move {
                        finish(&gov, &permit, action, tokens, progress).await
                    });
                }
            }
            AdmissionMsg::ProgressAge(scope, reply) => {
                let gov = gov.clone();
                let work = async move {
                    let age = bounded(gov.timeout, gov.gate.progress_age(&scope)).await;
                    let _ = reply.send(age);
                };
                if state.governance.inline {
                    work.await
                } else {
                    state.tasks.spawn(work);
                }
            }
            AdmissionMsg::Drain(reply) => {
                let tasks = state.tasks.clone();
                tokio::spawn(async move {
                    tasks.close();
                    tasks.wait().await;
                    let _ = reply.send(());
                });
            }
            AdmissionMsg::Crash(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}

/// Run a backend call under the governance timeout; a timeout is a backend error.
async fn bounded<R>(
    timeout: Duration,
    fut: impl Future<Output = Result<R, BackendError>>,
) -> Result<R, BackendError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::new(format!(
            "governance backend did not answer within {timeout:?}"
        ))),
    }
}

/// Breaker first (cheap refusal, no quota spent on an open source), then the six gates. A probe
/// taken for an attempt the gates refuse is handed back without a verdict.
async fn admit(gov: &Governance, request: &AdmitRequest) -> AdmitAnswer {
    let g = &request.gate;
    let breaker = match bounded(
        gov.timeout,
        gov.breakers.acquire(&g.scope, &g.source, &request.breaker),
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return AdmitAnswer::BackendDown(e.message),
    };
    let (epoch, probe_id) = match breaker {
        BreakerAdmit::Pass { epoch } => (epoch, None),
        BreakerAdmit::Probe { epoch, probe_id } => (epoch, Some(probe_id)),
        BreakerAdmit::Refused { state, retry_after } => {
            return AdmitAnswer::BreakerRefused { state, retry_after }
        }
    };
    let give_back_probe = || async {
        if let Some(probe) = &probe_id {
            if let Err(e) = bounded(
                gov.timeout,
                gov.breakers.release_probe(&g.scope, &g.source, probe),
            )
            .await
            {
                tracing::warn!(source = %g.source, error = %e, "release_probe failed");
            }
        }
    };
    match bounded(gov.timeout, gov.gate.admit(g)).await {
        Ok(GateDecision::Admitted(lease)) => AdmitAnswer::Admitted(Permit {
            lease,
            epoch,
            probe_id,
            breaker: request.breaker.clone(),
        }),
        Ok(GateDecision::Refused { gate, retry_after }) => {
            give_back_probe().await;
            AdmitAnswer::GateRefused { gate, retry_after }
        }
        Err(e) => {
            give_back_probe().await;
            AdmitAnswer::BackendDown(e.message)
        }
    }
}

/// Hand the answer to the waiting call; if it went away meanwhile, undo the grant.
async fn deliver(gov: &Governance, answer: AdmitAnswer, reply: oneshot::Sender<AdmitAnswer>) {
    if let Err(AdmitAnswer::Admitted(permit)) = reply.send(answer) {
        let tokens = permit.lease.est_tokens;
        finish(gov, &permit, BreakerAction::NoVerdict, tokens, false).await;
    }
}

/// Settle a permit. Failures only log: the call's result (or its cancellation) already happened
/// and must not be hidden by bookkeeping (docs/behaviour.md §10.6 degrade direction).
async fn finish(
    gov: &Governance,
    permit: &Permit,
    action: BreakerAction,
    tokens: u64,
    progress: bool,
) {
    let lease = &permit.lease;
    if progress {
        if let Err(e) = bounded(gov.timeout, gov.gate.mark_progress(&lease.scope)).await {
            tracing::warn!(scope = %lease.scope, error = %e, "mark_progress failed");
        }
    }
    let breaker_result = match action {
        BreakerAction::Record(verdict) => bounded(
            gov.timeout,
            gov.breakers.record(
                &lease.scope,
                &lease.source,
                &permit.breaker,
                permit.epoch,
                permit.probe_id.as_deref(),
                verdict,
            ),
        )
        .await
        .map(|_applied| ()),
        BreakerAction::ForceOpen => {
            let opened = bounded(
                gov.timeout,
                gov.breakers
                    .force_open(&lease.scope, &lease.source, &permit.breaker),
            )
            .await;
            match (&permit.probe_id, opened) {
                (Some(probe), Ok(())) => {
                    bounded(
                        gov.timeout,
                        gov.breakers
                            .release_probe(&lease.scope, &lease.source, probe),
                    )
                    .await
                }
                (_, result) => result,
            }
        }
        BreakerAction::NoVerdict => match &permit.probe_id {
            Some(probe) => {
                bounded(
                    gov.timeout,
                    gov.breakers
                        .release_probe(&lease.scope, &lease.source, probe),
                )
                .await
            }
            None => Ok(()),
        },
    };
    if let Err(e) = breaker_result {
        tracing::warn!(source = %lease.source, error = %e, "breaker bookkeeping failed");
    }
    if let Err(e) = bounded(gov.timeout, gov.gate.settle(lease, tokens)).await {
        tracing::warn!(source = %lease.source, error = %e, "settle failed");
    }
    if let Err(e) = bounded(gov.timeout, gov.gate.release(lease)).await {
        tracing::warn!(source = %lease.source, error = %e, "lease release failed (the lease TTL reclaims it)");
    }
}
