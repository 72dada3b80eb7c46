//! The admission's tests: the carry policy against a counting backend, a restarted actor's
//! door, the compensation of an admission dropped mid-flight, and a grant that came back after
//! its call's deadline (the call's own attempt's, and a hedge's).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use super::carry::CARRY_WAIT;
use super::door::Door;
use super::tasks::TrackedTasks;
use super::{AdmitRequest, Governance, GovernanceFactory, Permit};
use crate::memory::{MemoryBreakers, MemoryGate};
use crate::outcome::FailureClass;
use crate::policy::select::LeastInflight;
use crate::ports::attempt::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerAction, BreakerStatus,
    ComposedAttempts, PendingFinish,
};
use crate::ports::breaker::{BreakerConfig, BreakerVerdict};
use crate::ports::gate::{GateBackend, GateRequest};
use crate::ports::transport::{EventSink, Transport};
use crate::ports::BackendError;
use crate::runtime::metrics::BreakerGauge;
use crate::runtime::{
    CallFailure, GovernOptions, HedgeConfig, NoObserver, Runtime, RuntimeOptions, Scope,
    ScopeConfig, ScopeReason, SourceSpec,
};
use crate::testkit::{aimd, echo, Echo, EchoError};

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
    /// The first this many admissions answer at once, whatever `delay` says.
    quick: usize,
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
        let earlier = self.admits.fetch_add(1, Ordering::SeqCst);
        let answer = self.inner().admit(request, breaker).await;
        if !self.delay.is_zero() && earlier >= self.quick {
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
    Arc::new(Door::new(
        Arc::clone(backend) as Arc<dyn AttemptBackend>,
        backend.gate.clone(),
        Duration::from_secs(1),
        Arc::new(TrackedTasks(tasks.clone())),
    ))
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

/// Governance over the [`Counted`] backend `next` gives on every (re)start of the admission
/// actor.
fn counted_governance(
    next: impl Fn() -> Arc<Counted> + Send + Sync + 'static,
) -> GovernanceFactory {
    Arc::new(move || {
        let counted = next();
        Box::pin(async move {
            Ok(Governance {
                gate: counted.gate.clone(),
                breakers: Arc::new(MemoryBreakers::default()),
                attempts: Some(counted),
                timeout: Duration::from_secs(1),
            })
        })
    })
}

/// A runtime whose factory builds new [`Counted`] backends on every (re)start, listed in
/// build order.
async fn runtime(delay: Duration) -> (Runtime, Scope<Echo>, Arc<Mutex<Vec<Arc<Counted>>>>) {
    let built: Arc<Mutex<Vec<Arc<Counted>>>> = Arc::default();
    let list = Arc::clone(&built);
    let factory = counted_governance(move || {
        let counted = Counted::new(delay);
        list.lock().unwrap().push(Arc::clone(&counted));
        counted
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
        .call(
            &"hi".to_string(),
            &NoObserver,
            None,
            GovernOptions::default(),
        )
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

#[tokio::test]
async fn an_admission_granted_after_the_call_deadline_is_given_back_unsent() {
    // Admission answers 200 ms after it was asked; the call's deadline is 50 ms away.
    let (runtime, scope, built) = runtime(Duration::from_millis(200)).await;
    let backend = Arc::clone(&built.lock().unwrap()[0]);
    let options = GovernOptions {
        deadline: Some(Duration::from_millis(50)),
        ..GovernOptions::default()
    };
    match scope
        .call(&"hi".to_string(), &NoObserver, None, options)
        .await
    {
        Err(CallFailure::Unavailable { reason, detail, .. }) => {
            assert_eq!(reason, ScopeReason::DeadlineExceeded);
            assert!(
                detail.contains("before its admission was granted"),
                "{detail}"
            );
        }
        other => panic!("expected deadline_exceeded, got {other:?}"),
    }
    assert_eq!(backend.admits.load(Ordering::SeqCst), 1);
    assert_eq!(
        backend.alone.load(Ordering::SeqCst),
        1,
        "one finish: the give-back"
    );
    assert_eq!(backend.gate.leases_held("LLM").await.unwrap(), 0);
    runtime.shutdown(Duration::from_secs(1)).await;
}

/// A source that fails transiently `after` its request was sent, counting what it was sent.
#[derive(Debug, Default)]
struct FailsLate {
    after: Duration,
    sent: AtomicUsize,
}

#[async_trait::async_trait]
impl Transport for FailsLate {
    type Request = String;
    type Response = String;
    type Event = String;
    type Error = EchoError;

    async fn send(&self, _: &String, _: Option<&EventSink<String>>) -> Result<String, EchoError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.after).await;
        Err(EchoError(FailureClass::Transient))
    }

    fn tokens_used(_: &String) -> Option<u64> {
        None
    }
}

#[tokio::test]
async fn a_hedge_granted_after_the_call_deadline_is_given_back_unsent() {
    // The call's own admission answers at once; the hedge's, asked when the hedge is due
    // (20 ms), answers 800 ms later — past the call's 400 ms deadline. The first source fails
    // at 200 ms, so the race is still waiting for the hedge when its grant comes back. (Wide
    // margins: a loaded CI host may run a timer late by tens of milliseconds.)
    let backend = Counted::new(Duration::from_millis(800));
    let backend = {
        let mut counted = Arc::into_inner(backend).unwrap();
        counted.quick = 1;
        Arc::new(counted)
    };
    let governance = Arc::clone(&backend);
    let factory = counted_governance(move || Arc::clone(&governance));
    let runtime = Runtime::start(factory, RuntimeOptions::default())
        .await
        .unwrap();
    let sources: Vec<Arc<FailsLate>> = (0..2)
        .map(|_| {
            Arc::new(FailsLate {
                after: Duration::from_millis(200),
                ..FailsLate::default()
            })
        })
        .collect();
    let specs = sources
        .iter()
        .enumerate()
        .map(|(i, transport)| {
            let echo = echo(&format!("late_{i}"));
            SourceSpec {
                name: echo.name,
                transport: Arc::clone(transport),
                breaker: echo.breaker,
                limits: echo.limits,
                est_tokens: echo.est_tokens,
            }
        })
        .collect();
    let mut config = ScopeConfig::new("LLM");
    config.hedge = HedgeConfig {
        enabled: true,
        floor: Duration::from_millis(20),
        ceiling: Duration::from_millis(20),
        budget: 1.0,
    };
    let scope = runtime
        .add_scope(config, specs, Box::new(LeastInflight), aimd())
        .await
        .unwrap();
    let options = GovernOptions {
        deadline: Some(Duration::from_millis(400)),
        ..GovernOptions::default()
    };
    let (sink, _events) = EventSink::channel(8);
    let answer = scope
        .call(&"hi".to_string(), &NoObserver, Some(&sink), options)
        .await;
    match answer {
        Err(CallFailure::Unavailable { reason, .. }) => {
            assert_eq!(reason, ScopeReason::DeadlineExceeded)
        }
        other => panic!("expected deadline_exceeded, got {other:?}"),
    }
    let hedges = scope.hedges().unwrap();
    assert!(hedges.contains(&("deadline", 1)), "{hedges:?}");
    assert_eq!(
        backend.admits.load(Ordering::SeqCst),
        2,
        "the call's and the hedge's"
    );
    let sent: Vec<usize> = sources
        .iter()
        .map(|s| s.sent.load(Ordering::SeqCst))
        .collect();
    assert_eq!(
        sent.iter().sum::<usize>(),
        1,
        "only the call's own attempt was sent: {sent:?}"
    );
    assert_eq!(
        backend.alone.load(Ordering::SeqCst),
        2,
        "two finishes: the attempt's and the hedge's give-back"
    );
    assert_eq!(backend.gate.leases_held("LLM").await.unwrap(), 0);
    runtime.shutdown(Duration::from_secs(1)).await;
}
