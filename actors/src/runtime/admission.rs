//! The admission actor: the one door to the governance backends (limiter gates and breakers).
//!
//! Every attempt asks it for a `Permit`: the source's breaker first, then all six gates — one
//! [`AttemptBackend::admit`]; a finished attempt is one [`AttemptBackend::finish`] (verdict,
//! settlement, release, progress). With Redis each is one script call, so a successful attempt
//! costs two round trips. With in-memory backends the answer is computed inside the handler (no
//! I/O, microseconds). With network backends (Redis) each request runs in its own task so
//! independent calls never queue behind one round trip. Every backend call is bounded by a
//! timeout; an error or timeout is answered as an error — fail closed, never a pass
//! (docs/behaviour.md §10.6). A finish whose caller asks for it is answered with the breaker
//! state it left ([`BreakerStatus`]), for the call's `retry_after` hint.
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

use crate::ports::attempt::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerAction, BreakerStatus,
    ComposedAttempts,
};
use crate::ports::breaker::{BreakerBackend, BreakerConfig};
use crate::ports::gate::{GateBackend, GateRequest};
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
///     attempts: None, // composed from the two above
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
    /// Admission and finish of one attempt, when the store answers each in one call (Redis with
    /// both backends on one server). `None`: composed from `gate` and `breakers`
    /// ([`ComposedAttempts`], one call per step).
    pub attempts: Option<Arc<dyn AttemptBackend>>,
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
    /// Lease, epoch and probe.
    pub(crate) attempt: AttemptPermit,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
}

/// The answer to an admission request: the backend's, or the error that closes the door (a
/// backend that failed or timed out, an admission actor that stopped).
pub(crate) type AdmitAnswer = Result<AttemptAdmit, BackendError>;

/// Messages of the admission actor.
#[derive(Debug)]
pub(crate) enum AdmissionMsg {
    /// Ask for a permit.
    Admit(AdmitRequest, oneshot::Sender<AdmitAnswer>),
    /// Settle a permit: breaker action, TPM settlement with `tokens`, lease release, and (for a
    /// success) the scope's progress mark — one message per finished attempt.
    Finish {
        /// Where to send the breaker state the attempt left (`None` when the finish failed);
        /// `None`: nobody waits.
        reply: Option<oneshot::Sender<Option<BreakerStatus>>>,
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
    /// `governance.attempts`, or the composition of its gate and breakers.
    attempts: Arc<dyn AttemptBackend>,
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
        let attempts = match &governance.attempts {
            Some(attempts) => Arc::clone(attempts),
            None => Arc::new(
                ComposedAttempts::new(
                    Arc::clone(&governance.gate),
                    Arc::clone(&governance.breakers),
                )
                .with_step_timeout(governance.timeout),
            ),
        };
        Ok(AdmissionState {
            governance,
            attempts,
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
        let attempts = &state.attempts;
        match message {
            AdmissionMsg::Admit(request, reply) => {
                if gov.inline {
                    let answer = attempts.admit(&request.gate, &request.breaker).await;
                    deliver(attempts, &request, answer, reply).await;
                } else {
                    let attempts = Arc::clone(attempts);
                    state.tasks.spawn(async move {
                        let answer = attempts.admit(&request.gate, &request.breaker).await;
                        deliver(&attempts, &request, answer, reply).await;
                    });
                }
            }
            AdmissionMsg::Finish {
                reply,
                permit,
                progress,
                action,
                tokens,
            } => {
                let outcome = AttemptOutcome {
                    action,
                    tokens,
                    progress,
                };
                let answer = |status| {
                    if let Some(reply) = reply {
                        let _ = reply.send(status);
                    }
                };
                if gov.inline {
                    answer(finish(attempts, &permit, outcome).await);
                } else {
                    let attempts = Arc::clone(attempts);
                    state
                        .tasks
                        .spawn(async move { answer(finish(&attempts, &permit, outcome).await) });
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

/// Hand the answer of the admission (breaker first, then the six gates, in one backend call that
/// bounds its own I/O: cutting it short from outside would skip the compensation of a grant the
/// caller never learnt of) to the waiting call; if it went away meanwhile, undo the grant.
async fn deliver(
    attempts: &Arc<dyn AttemptBackend>,
    request: &AdmitRequest,
    answer: AdmitAnswer,
    reply: oneshot::Sender<AdmitAnswer>,
) {
    if let Err(Ok(AttemptAdmit::Admitted(attempt))) = reply.send(answer) {
        let outcome = AttemptOutcome {
            action: BreakerAction::NoVerdict,
            tokens: attempt.lease.est_tokens,
            progress: false,
        };
        let permit = Permit {
            attempt,
            breaker: request.breaker.clone(),
        };
        finish(attempts, &permit, outcome).await;
    }
}

/// Settle a permit; the breaker state it left, or `None` when the finish failed. A failure only
/// logs: the call's result (or its cancellation) already happened and must not be hidden by
/// bookkeeping (docs/behaviour.md §5.3 degrade direction); the lease and probe TTLs reclaim what
/// a failed finish could not give back.
async fn finish(
    attempts: &Arc<dyn AttemptBackend>,
    permit: &Permit,
    outcome: AttemptOutcome,
) -> Option<BreakerStatus> {
    // A finish is idempotent (its lease id is its verdict id), so a backend that is reconnecting
    // gets a few more tries before the slot is left to the lease TTL.
    let mut pause = FINISH_RETRY_FIRST;
    for tries_left in (0..FINISH_TRIES).rev() {
        match attempts
            .finish(&permit.attempt, &permit.breaker, outcome)
            .await
        {
            Ok(status) => return Some(status),
            Err(e) if tries_left == 0 => {
                let lease = &permit.attempt.lease;
                tracing::warn!(scope = %lease.scope, source = %lease.source, error = %e,
                    "finishing an attempt failed (the lease TTL reclaims its slot)");
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
    }
    None
}

/// Tries of one finish, and the pause before the first retry (doubling): about 1.75 s in all.
const FINISH_TRIES: u32 = 4;
const FINISH_RETRY_FIRST: Duration = Duration::from_millis(250);
