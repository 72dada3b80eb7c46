//! Admission: the door to the governance backends (limiter gates and breakers).
//!
//! Every attempt asks for a `Permit`: the source's breaker first, then all six gates — one
//! [`AttemptBackend::admit`]; a finished attempt is one [`AttemptBackend::finish`] (verdict,
//! settlement, release, progress). With Redis each is one script call, so a successful attempt
//! costs at most two round trips — one when the scope is busy: a finish nobody waits for is held
//! (at most [`CARRY_WAIT`]) and rides on the scope's next admission ([`Held`]).
//!
//! The call's task reaches the backends directly, through the [`Door`] the admission actor
//! publishes when it starts: no mailbox hop on the hot path. Backend work runs in place while it
//! needs no I/O (in-memory backends answer in their first poll) and otherwise in a task of the
//! runtime's tracker, so shutdown can wait for it. An admission runs in the caller's task; a
//! caller that goes away before the answer hands the rest to a tracked task that gives back a
//! grant nobody will use. Every backend call is bounded by a timeout; an error or timeout is
//! answered as an error — fail closed, never a pass (docs/behaviour.md §10.6). A finish whose
//! caller asks for it is answered with the breaker state it left ([`BreakerStatus`]), for the
//! call's `retry_after` hint.
//!
//! The actor owns the door's lifetime: it builds the backends through the [`GovernanceFactory`]
//! in `pre_start` and withdraws the door when it stops, so while it is down (restarting with
//! backoff) admission answers with a backend error, and after a restart calls use the backends
//! the new incarnation built (the gateway's factory returns clones of the same clients; a custom
//! one may reconnect). It holds no per-call state, so a restart loses nothing.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::ports::attempt::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerAction, BreakerStatus,
    ComposedAttempts, PendingFinish,
};
use crate::ports::breaker::{BreakerBackend, BreakerConfig, BreakerVerdict};
use crate::ports::gate::{GateBackend, GateRequest};
use crate::ports::BackendError;

use super::metrics::BreakerGauge;
use super::slot::ActorSlot;

/// The governance backends of a runtime.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// use polygateway_actors::runtime::Governance;
/// // Single-process governance: in-memory limiter and breakers (answered without I/O, in the
/// // caller's task).
/// let governance = Governance {
///     gate: Arc::new(MemoryGate::default()),
///     breakers: Arc::new(MemoryBreakers::default()),
///     attempts: None, // composed from the two above
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
    /// Where the breaker state this admission, or the finish of its permit, learns is published.
    pub(crate) gauge: Arc<BreakerGauge>,
}

/// A granted admission: breaker passed (or probe held) and a lease in every gate.
#[derive(Debug, Clone)]
pub(crate) struct Permit {
    /// Lease, epoch and probe.
    pub(crate) attempt: AttemptPermit,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
    /// The source's breaker gauge: the finish publishes the state it left there.
    pub(crate) gauge: Arc<BreakerGauge>,
}

/// The answer to an admission request: the backend's, or the error that closes the door (a
/// backend that failed or timed out, an admission actor that is down).
pub(crate) type AdmitAnswer = Result<AttemptAdmit, BackendError>;

/// Messages of the admission actor. The call path does not message it (it goes through the
/// [`Door`] the actor publishes); shutdown waits on the runtime's task tracker directly.
#[derive(Debug)]
pub(crate) enum AdmissionMsg {
    /// Chaos hook: make the actor fail, to exercise supervision. Test builds only: without the
    /// `testkit` feature the actor takes no message at all (ractor's default `handle`).
    #[cfg(feature = "testkit")]
    Crash(String),
}

/// What a running admission actor publishes for the call path: the backends it built, their
/// bound, and the runtime's task tracker.
#[derive(Debug)]
pub(crate) struct Door {
    /// `governance.attempts`, or the composition of its gate and breakers.
    attempts: Arc<dyn AttemptBackend>,
    /// The limiter (the scope's progress clock).
    gate: Arc<dyn GateBackend>,
    /// Bound of a backend call the backend does not bound itself.
    timeout: Duration,
    /// Backend work that outlives the call that started it (network backends), so shutdown can
    /// let it finish. One tracker per runtime, shared by every incarnation of the actor.
    tasks: TaskTracker,
    /// Finishes held back for their scope's next admission to carry.
    held: Arc<Held>,
    /// Permits handed to calls and not finished yet: a finish is held only while others are
    /// outstanding (their calls admit again soon); the last one goes out at once, overlapping
    /// its caller's own work.
    outstanding: AtomicUsize,
}

/// Finishes nobody waits for, held back per scope until the scope's next admission carries them
/// ([`AttemptBackend::admit_after`]) — so a network backend spends one round trip per attempt
/// instead of two — or, when no admission comes within [`CARRY_WAIT`], sent together on their
/// own. A scope has an entry exactly while a send of its queue is scheduled.
#[derive(Debug, Default)]
struct Held {
    queues: Mutex<HashMap<Arc<str>, Vec<PendingFinish>>>,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Vec<PendingFinish>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `pending`; true when its scope had nothing queued (the caller schedules the send).
    fn push(&self, pending: PendingFinish) -> bool {
        match self.lock().entry(Arc::clone(&pending.permit.lease.scope)) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push(pending);
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(vec![pending]);
                true
            }
        }
    }

    /// What an admission of `scope` carries (the scheduled send then finds less or nothing).
    fn take(&self, scope: &str) -> Vec<PendingFinish> {
        self.lock()
            .get_mut(scope)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// What the scheduled send of `scope` sends; a later finish schedules a new send.
    fn remove(&self, scope: &str) -> Vec<PendingFinish> {
        self.lock().remove(scope).unwrap_or_default()
    }
}

/// How long a held finish waits for an admission of its scope to carry it. Its slot stays taken
/// in the shared store that long for other processes (this process's admissions carry it, so they
/// never wait for it): short against any upstream call, long enough for a busy scope's next
/// admission to come.
const CARRY_WAIT: Duration = Duration::from_millis(5);

/// Whether a finish may be held back: nobody waits for its answer, and it changes nothing another
/// process must learn at once (a failure verdict, a forced opening and a probe's verdict are sent
/// at once).
fn may_hold(permit: &Permit, outcome: &AttemptOutcome, answer_wanted: bool) -> bool {
    !answer_wanted
        && permit.attempt.probe_id.is_none()
        && matches!(
            outcome.action,
            BreakerAction::Record(BreakerVerdict::Success) | BreakerAction::NoVerdict
        )
}

/// Where a runtime's scopes find admission: the actor (its down reason, the chaos hook), the door
/// it publishes while it runs, and the runtime's task tracker. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct AdmissionSlot {
    pub(crate) actor: ActorSlot<AdmissionMsg>,
    door: Arc<RwLock<Option<Arc<Door>>>>,
    tasks: TaskTracker,
}

impl AdmissionSlot {
    /// A slot whose actor is starting.
    pub(crate) fn starting() -> Self {
        Self {
            actor: ActorSlot::down("admission actor starting"),
            door: Arc::new(RwLock::new(None)),
            tasks: TaskTracker::new(),
        }
    }

    /// The door of the running actor, or why there is none (fail closed).
    pub(crate) fn door(&self) -> Result<Arc<Door>, BackendError> {
        if let Some(door) = &*self.door.read().unwrap_or_else(|e| e.into_inner()) {
            return Ok(Arc::clone(door));
        }
        Err(BackendError::new(match self.actor.get() {
            Err(reason) => reason,
            Ok(_) => "admission actor stopped".to_string(),
        }))
    }

    /// Publish `door` (the actor's `pre_start`); withdrawn when the returned guard drops.
    fn publish(&self, door: Arc<Door>) -> Published {
        *self.door.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&door));
        Published {
            slot: self.clone(),
            door,
        }
    }

    /// Wait — at most `timeout` — for the backend work already started (settlements, releases,
    /// force-opens, the compensation of abandoned admissions): on shutdown, so nothing a finished
    /// call owes the shared store is lost.
    pub(crate) async fn drain(&self, timeout: Duration) {
        self.tasks.close();
        let _ = tokio::time::timeout(timeout, self.tasks.wait()).await;
    }
}

/// A published door; dropping it (the actor stopped or failed) withdraws it, unless a newer
/// incarnation already replaced it.
#[derive(Debug)]
struct Published {
    slot: AdmissionSlot,
    door: Arc<Door>,
}

impl Drop for Published {
    fn drop(&mut self) {
        let mut current = self.slot.door.write().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(|d| Arc::ptr_eq(d, &self.door)) {
            *current = None;
        }
    }
}

impl Door {
    /// Ask for a permit: breaker first, then the six gates, in one backend call that bounds its
    /// own I/O. It runs in the caller's task; if the caller goes away before the answer (a
    /// cancelled call), the rest runs in a tracked task that undoes a grant nobody will use.
    pub(crate) fn admit(self: Arc<Self>, request: AdmitRequest) -> Admitting {
        let (breaker, gauge) = (request.breaker.clone(), Arc::clone(&request.gauge));
        let door = Arc::clone(&self);
        let carried = self.held.take(&request.gate.scope);
        Admitting {
            work: Some(Box::pin(async move {
                if carried.is_empty() {
                    return door.attempts.admit(&request.gate, &request.breaker).await;
                }
                let answer = door
                    .attempts
                    .admit_after(&carried, &request.gate, &request.breaker)
                    .await;
                if answer.is_err() {
                    // Applied or not, they are sent again (a finish counts once).
                    let attempts = Arc::clone(&door.attempts);
                    spawn_tracked(&door.tasks, async move {
                        finish_all(&attempts, &carried).await;
                    });
                }
                answer
            })),
            door: self,
            breaker,
            gauge,
        }
    }

    /// Settle a permit: breaker action, TPM settlement, lease release and (`progress`) the
    /// scope's progress mark. With `reply`, send the breaker state it left (`None` when the
    /// finish failed). Never waits: the work runs in place while it needs no I/O, the rest in a
    /// tracked task — or, with a backend that carries finishes, a success or a verdict-less end
    /// nobody waits for is held for the scope's next admission ([`Held`]).
    pub(crate) fn finish(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        reply: Option<oneshot::Sender<Option<BreakerStatus>>>,
    ) {
        // Saturating: a permit granted by a previous incarnation may end here.
        let others = self
            .outstanding
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .map_or(0, |n| n - 1);
        if others > 0
            && self.attempts.carries_finishes()
            && may_hold(&permit, &outcome, reply.is_some())
        {
            let scope = Arc::clone(&permit.attempt.lease.scope);
            let pending = PendingFinish {
                permit: permit.attempt,
                breaker: permit.breaker,
                outcome,
            };
            if self.held.push(pending) {
                let (held, attempts) = (Arc::clone(&self.held), Arc::clone(&self.attempts));
                spawn_tracked(&self.tasks, async move {
                    tokio::time::sleep(CARRY_WAIT).await;
                    finish_all(&attempts, &held.remove(&scope)).await;
                });
            }
            return;
        }
        let attempts = Arc::clone(&self.attempts);
        self.run(async move {
            let status = finish(&attempts, &permit, outcome).await;
            if let Some(reply) = reply {
                let _ = reply.send(status);
            }
        });
    }

    /// How long since `scope` last progressed, bounded by the governance timeout.
    pub(crate) async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError> {
        bounded(self.timeout, self.gate.progress_age(scope)).await
    }

    /// Run backend work that must complete whoever waits for it: polled once here (in-memory
    /// backends finish in that poll), handed to a tracked task if it has to wait for I/O.
    fn run(&self, work: impl Future<Output = ()> + Send + 'static) {
        if tokio::runtime::Handle::try_current().is_err() {
            // Backends time their calls with Tokio timers: without a runtime nothing can run.
            tracing::warn!("no runtime to run governance work on (lease TTL reclaims)");
            return;
        }
        let mut work = Box::pin(work);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if work.as_mut().poll(&mut cx).is_pending() {
            // The task's first poll registers its own waker (every poll does).
            spawn_tracked(&self.tasks, work);
        }
    }
}

/// Spawn on the tracker if a Tokio runtime is current (a call dropped while its runtime shuts
/// down has none: the lease and probe TTLs reclaim what it held).
fn spawn_tracked(tasks: &TaskTracker, work: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            tasks.spawn_on(work, &runtime);
        }
        Err(_) => tracing::warn!("no runtime to finish governance work on (lease TTL reclaims)"),
    }
}

type AdmitWork = Pin<Box<dyn Future<Output = AdmitAnswer> + Send>>;

/// An admission in flight, awaited by the call that asked for it ([`Door::admit`]). Dropped
/// before it answered, it hands its work to a tracked task that completes it and gives back a
/// grant nobody will use (settled at its estimate, no breaker verdict).
pub(crate) struct Admitting {
    work: Option<AdmitWork>,
    door: Arc<Door>,
    breaker: BreakerConfig,
    gauge: Arc<BreakerGauge>,
}

impl Future for Admitting {
    type Output = AdmitAnswer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AdmitAnswer> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(Err(BackendError::new("admission polled after its answer")));
        };
        let answer = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        if let Ok(AttemptAdmit::Admitted(_)) = &answer {
            self.door.outstanding.fetch_add(1, Ordering::Relaxed);
        }
        Poll::Ready(answer)
    }
}

impl Drop for Admitting {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        let attempts = Arc::clone(&self.door.attempts);
        let (breaker, gauge) = (self.breaker.clone(), Arc::clone(&self.gauge));
        spawn_tracked(&self.door.tasks, async move {
            if let Ok(AttemptAdmit::Admitted(attempt)) = work.await {
                let outcome = AttemptOutcome {
                    action: BreakerAction::NoVerdict,
                    tokens: attempt.lease.est_tokens,
                    progress: false,
                };
                let permit = Permit {
                    attempt,
                    breaker,
                    gauge,
                };
                finish(&attempts, &permit, outcome).await;
            }
        });
    }
}

/// Arguments of the admission actor: how to build the backends, and where to publish them.
#[derive(Clone)]
pub(crate) struct AdmissionArgs {
    pub(crate) factory: GovernanceFactory,
    pub(crate) slot: AdmissionSlot,
}

/// The admission actor: builds the backends and publishes them as a [`Door`] while it runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AdmissionActor;

/// State of the admission actor: the door it published (withdrawn when the state drops).
#[derive(Debug)]
pub(crate) struct AdmissionState {
    // Held for its drop; only the crash hook of test builds reads it (to withdraw it first).
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    published: Option<Published>,
}

impl Actor for AdmissionActor {
    type Msg = AdmissionMsg;
    type State = AdmissionState;
    type Arguments = AdmissionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: AdmissionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let governance = (args.factory)().await.map_err(|e| format!("{e}"))?;
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
        let door = Door {
            attempts,
            gate: governance.gate,
            timeout: governance.timeout,
            tasks: args.slot.tasks.clone(),
            held: Arc::default(),
            outstanding: AtomicUsize::new(0),
        };
        Ok(AdmissionState {
            published: Some(args.slot.publish(Arc::new(door))),
        })
    }

    #[cfg(feature = "testkit")]
    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            AdmissionMsg::Crash(reason) => {
                // Withdraw the door before the supervisor hears of the failure.
                state.published = None;
                Err(reason.into())
            }
        }
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

/// Settle a permit; the breaker state it left (published to the source's gauge), or `None` when
/// the finish failed. A failure only
/// logs: the call's result (or its cancellation) already happened and must not be hidden by
/// bookkeeping (docs/behaviour.md §5.3 degrade direction); the lease and probe TTLs reclaim what
/// a failed finish could not give back.
async fn finish(
    attempts: &Arc<dyn AttemptBackend>,
    permit: &Permit,
    outcome: AttemptOutcome,
) -> Option<BreakerStatus> {
    let finished = retrying(|| attempts.finish(&permit.attempt, &permit.breaker, outcome)).await;
    match finished {
        Ok(status) => {
            permit.gauge.seen(status.state());
            Some(status)
        }
        Err(e) => {
            let lease = &permit.attempt.lease;
            tracing::warn!(scope = %lease.scope, source = %lease.source, error = %e,
                "finishing an attempt failed (the lease TTL reclaims its slot)");
            None
        }
    }
}

/// Apply held finishes (one scope's) nobody waits for; a failure only logs, as in [`finish`].
async fn finish_all(attempts: &Arc<dyn AttemptBackend>, pending: &[PendingFinish]) {
    let Some(first) = pending.first() else {
        return;
    };
    if let Err(e) = retrying(|| attempts.finish_all(pending)).await {
        tracing::warn!(scope = %first.permit.lease.scope, finishes = pending.len(), error = %e,
            "finishing attempts failed (the lease TTL reclaims their slots)");
    }
}

/// Run a finish: it is idempotent (its lease id is its verdict id), so a backend that is
/// reconnecting gets a few more tries before the slot is left to the lease TTL.
async fn retrying<R, Fut>(mut call: impl FnMut() -> Fut) -> Result<R, BackendError>
where
    Fut: Future<Output = Result<R, BackendError>>,
{
    let mut pause = FINISH_RETRY_FIRST;
    let mut tries_left = FINISH_TRIES;
    loop {
        tries_left -= 1;
        match call().await {
            Err(_) if tries_left > 0 => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            done => return done,
        }
    }
}

/// Tries of one finish, and the pause before the first retry (doubling): about 1.75 s in all.
const FINISH_TRIES: u32 = 4;
const FINISH_RETRY_FIRST: Duration = Duration::from_millis(250);

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    use super::*;
    use crate::memory::{MemoryBreakers, MemoryGate};
    use crate::policy::select::LeastInflight;
    use crate::ports::attempt::AttemptPermit;
    use crate::runtime::{
        CallFailure, CallOptions, NoObserver, Runtime, RuntimeOptions, Scope, ScopeConfig,
        ScopeReason,
    };
    use crate::testkit::{aimd, echo, Echo};

    /// In-memory backends that count admissions and answer them `delay` after granting them (a
    /// stand-in for a reply still on the network).
    /// With `carries`, it takes held finishes as a network backend does, counting the finishes
    /// it was sent alone, carried on an admission, and sent together; `fail_carrying` makes an
    /// admission that carries finishes fail after applying them (a reply lost on the way back).
    #[derive(Debug, Default)]
    struct Counted {
        inner: Option<ComposedAttempts>,
        gate: Arc<MemoryGate>,
        admits: AtomicUsize,
        delay: Duration,
        carries: bool,
        alone: AtomicUsize,
        carried: AtomicUsize,
        together: AtomicUsize,
        fail_carrying: AtomicBool,
    }

    impl Counted {
        fn new(delay: Duration) -> Arc<Self> {
            let gate = Arc::new(MemoryGate::default());
            let inner = ComposedAttempts::new(gate.clone(), Arc::new(MemoryBreakers::default()));
            Arc::new(Self {
                inner: Some(inner),
                gate,
                delay,
                ..Self::default()
            })
        }

        fn carrying() -> Arc<Self> {
            let mut counted = Arc::into_inner(Self::new(Duration::ZERO)).unwrap();
            counted.carries = true;
            Arc::new(counted)
        }

        fn inner(&self) -> &ComposedAttempts {
            self.inner.as_ref().expect("built by new")
        }
    }

    #[async_trait::async_trait]
    impl AttemptBackend for Counted {
        async fn admit(
            &self,
            request: &GateRequest,
            breaker: &BreakerConfig,
        ) -> Result<AttemptAdmit, BackendError> {
            self.admits.fetch_add(1, Ordering::SeqCst);
            let answer = self.inner().admit(request, breaker).await;
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            answer
        }

        async fn finish(
            &self,
            permit: &AttemptPermit,
            breaker: &BreakerConfig,
            outcome: AttemptOutcome,
        ) -> Result<BreakerStatus, BackendError> {
            self.alone.fetch_add(1, Ordering::SeqCst);
            self.inner().finish(permit, breaker, outcome).await
        }

        fn carries_finishes(&self) -> bool {
            self.carries
        }

        async fn admit_after(
            &self,
            pending: &[PendingFinish],
            request: &GateRequest,
            breaker: &BreakerConfig,
        ) -> Result<AttemptAdmit, BackendError> {
            self.carried.fetch_add(pending.len(), Ordering::SeqCst);
            self.inner().finish_all(pending).await?;
            if self.fail_carrying.load(Ordering::SeqCst) {
                return Err(BackendError::new("reply lost"));
            }
            self.admit(request, breaker).await
        }

        async fn finish_all(&self, pending: &[PendingFinish]) -> Result<(), BackendError> {
            self.together.fetch_add(1, Ordering::SeqCst);
            self.inner().finish_all(pending).await
        }
    }

    fn door(backend: &Arc<Counted>, tasks: &TaskTracker) -> Arc<Door> {
        Arc::new(Door {
            attempts: Arc::clone(backend) as Arc<dyn AttemptBackend>,
            gate: backend.gate.clone(),
            timeout: Duration::from_secs(1),
            tasks: tasks.clone(),
            held: Arc::default(),
            outstanding: AtomicUsize::new(0),
        })
    }

    fn ask(source: &str) -> AdmitRequest {
        AdmitRequest {
            gate: GateRequest {
                scope: "LLM".into(),
                source: source.into(),
                global: Default::default(),
                per_source: Default::default(),
                est_tokens: 10,
                lease_id: crate::runtime::ids::new_id().into(),
                lease_ttl: Duration::from_secs(60),
            },
            breaker: BreakerConfig::default(),
            gauge: Arc::new(BreakerGauge::new("LLM", source)),
        }
    }

    async fn granted(door: &Arc<Door>, source: &str) -> Permit {
        let request = ask(source);
        match Arc::clone(door).admit(request.clone()).await {
            Ok(AttemptAdmit::Admitted(attempt)) => Permit {
                attempt,
                breaker: request.breaker,
                gauge: request.gauge,
            },
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn ended(verdict: Option<BreakerVerdict>) -> AttemptOutcome {
        AttemptOutcome {
            action: verdict.map_or(BreakerAction::NoVerdict, BreakerAction::Record),
            tokens: 5,
            progress: verdict.is_some(),
        }
    }

    async fn held(backend: &Counted) -> u64 {
        backend.gate.leases_held("LLM").await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_finish_is_held_while_others_are_outstanding_and_rides_on_the_next_admission() {
        let (backend, tasks) = (Counted::carrying(), TaskTracker::new());
        let door = door(&backend, &tasks);
        let (a, b) = (granted(&door, "s1").await, granted(&door, "s1").await);
        door.finish(a, ended(Some(BreakerVerdict::Success)), None);
        assert_eq!(
            held(&backend).await,
            2,
            "a's success is held: b is outstanding"
        );
        let c = granted(&door, "s1").await;
        assert_eq!(
            backend.carried.load(Ordering::SeqCst),
            1,
            "c's admission carried it"
        );
        assert_eq!(held(&backend).await, 2, "b and c");
        door.finish(b, ended(None), None);
        assert_eq!(
            held(&backend).await,
            2,
            "b's verdict-less end is held: c is outstanding"
        );
        door.finish(c, ended(Some(BreakerVerdict::Success)), None);
        assert_eq!(
            held(&backend).await,
            1,
            "the last one out goes at once; b's still waits"
        );
        assert_eq!(backend.alone.load(Ordering::SeqCst), 1);
        // No admission comes: b's finish goes on its own after CARRY_WAIT.
        tokio::time::sleep(CARRY_WAIT * 2).await;
        assert_eq!(held(&backend).await, 0);
        assert_eq!(backend.together.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_probes_and_awaited_finishes_are_never_held() {
        let (backend, tasks) = (Counted::carrying(), TaskTracker::new());
        let door = door(&backend, &tasks);
        let _outstanding = granted(&door, "s1").await;
        let failed = granted(&door, "s1").await;
        door.finish(failed, ended(Some(BreakerVerdict::Failure)), None);
        let mut probe = granted(&door, "s1").await;
        probe.attempt.probe_id = Some(probe.attempt.lease.id.clone());
        door.finish(probe, ended(Some(BreakerVerdict::Success)), None);
        let answered = granted(&door, "s1").await;
        let (reply, status) = oneshot::channel();
        door.finish(answered, ended(Some(BreakerVerdict::Success)), Some(reply));
        assert_eq!(status.await.unwrap(), Some(BreakerStatus::Closed));
        assert_eq!(
            backend.alone.load(Ordering::SeqCst),
            3,
            "each went out at once"
        );
        assert_eq!(
            held(&backend).await,
            1,
            "only the outstanding one holds a slot"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn finishes_carried_by_a_failed_admission_are_sent_again_and_drain_waits_for_held_ones() {
        let (backend, tasks) = (Counted::carrying(), TaskTracker::new());
        let door = door(&backend, &tasks);
        let (a, b) = (granted(&door, "s1").await, granted(&door, "s1").await);
        door.finish(a, ended(Some(BreakerVerdict::Success)), None);
        backend.fail_carrying.store(true, Ordering::SeqCst);
        let answer = Arc::clone(&door).admit(ask("s1")).await;
        assert!(answer.is_err(), "the carrying admission failed");
        tasks.close();
        tasks.wait().await;
        assert_eq!(
            backend.together.load(Ordering::SeqCst),
            1,
            "a's finish was sent again"
        );
        backend.fail_carrying.store(false, Ordering::SeqCst);
        // A held finish is a tracked task: draining waits for it.
        let tasks = TaskTracker::new();
        let door = super::tests::door(&backend, &tasks);
        let c = granted(&door, "s1").await;
        door.outstanding.fetch_add(1, Ordering::SeqCst); // b, granted by the old door
        door.finish(c, ended(Some(BreakerVerdict::Success)), None);
        assert_eq!(held(&backend).await, 2, "b and c's held slot");
        tasks.close();
        tasks.wait().await;
        assert_eq!(
            held(&backend).await,
            1,
            "c's finish went out before the drain ended"
        );
        drop(b);
    }

    /// A runtime whose factory builds new [`Counted`] backends on every (re)start, listed in
    /// build order.
    async fn runtime(delay: Duration) -> (Runtime, Scope<Echo>, Arc<Mutex<Vec<Arc<Counted>>>>) {
        let built: Arc<Mutex<Vec<Arc<Counted>>>> = Arc::default();
        let list = Arc::clone(&built);
        let factory: GovernanceFactory = Arc::new(move || {
            let counted = Counted::new(delay);
            list.lock().unwrap().push(Arc::clone(&counted));
            Box::pin(async move {
                Ok(Governance {
                    gate: counted.gate.clone(),
                    breakers: Arc::new(MemoryBreakers::default()),
                    attempts: Some(counted),
                    timeout: Duration::from_secs(1),
                })
            })
        });
        let runtime = Runtime::start(factory, RuntimeOptions::default())
            .await
            .unwrap();
        let scope = runtime
            .add_scope(
                ScopeConfig::new("LLM"),
                vec![echo("echo_1")],
                Box::new(LeastInflight),
                aimd(),
            )
            .await
            .unwrap();
        (runtime, scope, built)
    }

    async fn call(scope: &Scope<Echo>) -> Result<(), CallFailure<std::io::Error>> {
        match scope
            .call(&"hi".to_string(), &NoObserver, None, CallOptions::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(CallFailure::Unavailable { reason, detail, .. }) => Err(CallFailure::Unavailable {
                reason,
                retry_after: Duration::ZERO,
                per_source: Default::default(),
                last_error: None,
                detail,
            }),
            Err(other) => panic!("unexpected failure {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_restarted_admission_actor_admits_through_the_backends_it_built() {
        let (runtime, scope, built) = runtime(Duration::ZERO).await;
        call(&scope).await.unwrap();
        let first = Arc::clone(&built.lock().unwrap()[0]);
        assert_eq!(first.admits.load(Ordering::SeqCst), 1);

        scope.crash_admission("chaos test");
        let mut saw_down = false;
        let mut recovered = false;
        for _ in 0..200 {
            match call(&scope).await {
                Err(CallFailure::Unavailable { reason, .. }) => {
                    assert_eq!(reason, ScopeReason::GovernanceBackendDown);
                    saw_down = true;
                }
                Err(_) => unreachable!(),
                Ok(()) if saw_down => {
                    recovered = true;
                    break;
                }
                Ok(()) => {}
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            saw_down && recovered,
            "down {saw_down}, recovered {recovered}"
        );
        let second = Arc::clone(&built.lock().unwrap()[1]);
        let before_restart = first.admits.load(Ordering::SeqCst);
        call(&scope).await.unwrap();
        assert_eq!(built.lock().unwrap().len(), 2, "one restart, one rebuild");
        assert_eq!(second.admits.load(Ordering::SeqCst), 2);
        assert_eq!(
            first.admits.load(Ordering::SeqCst),
            before_restart,
            "the old backends see no admission after the restart"
        );
        assert_eq!(second.gate.leases_held("LLM").await.unwrap(), 0);
        runtime.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_call_dropped_during_its_admission_gives_the_grant_back_and_shutdown_waits_for_it() {
        let (runtime, scope, built) = runtime(Duration::from_millis(200)).await;
        let backend = Arc::clone(&built.lock().unwrap()[0]);
        let cut = tokio::time::timeout(Duration::from_millis(50), call(&scope)).await;
        assert!(
            cut.is_err(),
            "the call was dropped while its admission was in flight"
        );
        assert_eq!(backend.admits.load(Ordering::SeqCst), 1);
        assert_eq!(backend.gate.leases_held("LLM").await.unwrap(), 1, "granted");
        // The admission still completes (in a tracked task) and is given back; draining waits
        // for it.
        runtime.quiesce(Duration::from_secs(2)).await;
        assert_eq!(backend.gate.leases_held("LLM").await.unwrap(), 0);
        runtime.shutdown(Duration::from_secs(1)).await;
    }
}
