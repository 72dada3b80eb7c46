//! The runtime supervisor: root of one embedded runtime's actor tree.
//!
//! ```text
//! RuntimeSupervisor
//! ├── TelemetryActor      (restarted; its queue lives outside it)
//! ├── AdmissionActor      (restarted with backoff; rebuilds backends through its factory)
//! └── ScopeRouter × N     (escalation point of its sources: a router that fails takes its scope down)
//!     └── SourceActor × M (restarted by the router)
//! ```
//!
//! Restartable children are adopted with a respawn function and a [`RestartPolicy`]; past the
//! intensity limit a child is left down and its `ActorSlot` says why, so callers get a clear
//! error instead of a hang. The supervisor is a plain value's actor: many runtimes may coexist in
//! one process (no global names are registered).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, TokioClock};
use crate::policy::select::Selector;
use crate::ports::transport::Transport;

use super::admission::{AdmissionActor, AdmissionArgs, AdmissionSlot, GovernanceFactory};
use super::error::RuntimeError;
use super::metrics::{ScopeMetrics, SourceMetrics};
use super::restart::{stopped_child, RestartBudget, RestartDecision, RestartPolicy};
use super::router::{RouterArgs, RouterMsg, ScopeRouter};
use super::scope::{Scope, ScopeConfig, ScopeInner};
use super::shared::SourceShared;
use super::slot::ActorSlot;
use super::source::{PacerFactory, SourceArgs};
use super::waiting_room::WaitingRoom;

type SpawnFuture = Pin<Box<dyn Future<Output = Result<ActorCell, RuntimeError>> + Send>>;

/// Spawns (again) one child linked to the supervisor cell it is given.
pub(crate) type Respawn = Arc<dyn Fn(ActorCell) -> SpawnFuture + Send + Sync>;

/// Messages of the runtime supervisor.
pub(crate) enum SupervisorMsg {
    /// Spawn and supervise a child.
    Adopt {
        /// Child name for logs and errors.
        name: String,
        /// How to (re)spawn it.
        respawn: Respawn,
        /// `None`: not restartable (escalation point).
        policy: Option<RestartPolicy>,
        /// Called when the child goes down (restarting, given up on, or the runtime stopped).
        on_down: OnDown,
        /// Spawn result.
        reply: oneshot::Sender<Result<(), RuntimeError>>,
    },
    /// Respawn a child after its backoff.
    Respawn(String),
}

impl std::fmt::Debug for SupervisorMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SupervisorMsg::Adopt { name, .. } => write!(f, "Adopt({name})"),
            SupervisorMsg::Respawn(name) => write!(f, "Respawn({name})"),
        }
    }
}

/// Tells a child's slot why the child is down.
type OnDown = Arc<dyn Fn(RuntimeError) + Send + Sync>;

struct Child {
    respawn: Respawn,
    budget: Option<RestartBudget>,
    on_down: OnDown,
    current: Option<ActorCell>,
}

/// State of the runtime supervisor.
pub(crate) struct SupervisorState {
    children: HashMap<String, Child>,
    by_id: HashMap<ActorId, String>,
    clock: Arc<dyn Clock>,
}

/// The runtime supervisor actor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RuntimeSupervisor;

impl RuntimeSupervisor {
    async fn spawn_child(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
    ) -> Result<(), RuntimeError> {
        let Some(child) = state.children.get_mut(name) else {
            return Err(RuntimeError::NotStarted {
                actor: name.to_string(),
                cause: "no such child".into(),
            });
        };
        let cell = (child.respawn)(myself.get_cell()).await?;
        state.by_id.insert(cell.get_id(), name.to_string());
        child.current = Some(cell);
        Ok(())
    }
}

impl Actor for RuntimeSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = Arc<dyn Clock>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            children: HashMap::new(),
            by_id: HashMap::new(),
            clock,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Adopt {
                name,
                respawn,
                policy,
                on_down,
                reply,
            } => {
                state.children.insert(
                    name.clone(),
                    Child {
                        respawn,
                        budget: policy.map(RestartBudget::new),
                        on_down,
                        current: None,
                    },
                );
                let result = Self::spawn_child(&myself, state, &name).await;
                if result.is_err() {
                    state.children.remove(&name);
                }
                let _ = reply.send(result);
            }
            SupervisorMsg::Respawn(name) => {
                if let Err(e) = Self::spawn_child(&myself, state, &name).await {
                    // A failed restart counts as another failure of the child.
                    tracing::warn!(child = %name, error = %e, "restart failed");
                    handle_child_down(&myself, state, name, e.to_string());
                } else {
                    tracing::info!(child = %name, "child restarted");
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, why)) = stopped_child(event) else {
            return Ok(());
        };
        if let Some(name) = state.by_id.remove(&cell.get_id()) {
            if let Some(child) = state.children.get_mut(&name) {
                child.current = None;
            }
            handle_child_down(&myself, state, name, why);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for child in state.children.values() {
            // Mark the slot first so nobody reads a stopped child as up (`Scope::router_status`).
            (child.on_down)(RuntimeError::ShutDown);
            if let Some(cell) = &child.current {
                cell.stop(Some("runtime shutdown".into()));
            }
        }
        Ok(())
    }
}

fn handle_child_down(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    name: String,
    why: String,
) {
    let now = state.clock.now();
    let Some(child) = state.children.get_mut(&name) else {
        return;
    };
    let decision = match child.budget.as_mut() {
        Some(budget) => budget.on_failure(now),
        None => RestartDecision::Escalate,
    };
    match decision {
        RestartDecision::Restart(delay) => {
            tracing::warn!(child = %name, reason = %why, ?delay, "child failed; restarting");
            (child.on_down)(RuntimeError::Restarting {
                actor: name.clone(),
                cause: why.clone(),
            });
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = me.cast(SupervisorMsg::Respawn(name));
            });
        }
        RestartDecision::Escalate => {
            tracing::error!(child = %name, reason = %why, "child given up (restart intensity exceeded or not restartable)");
            (child.on_down)(RuntimeError::Stopped {
                actor: name,
                cause: why,
            });
        }
    }
}

/// One source of a scope to build.
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{ScopeConfig, SourceSpec};
/// # use polygateway_actors::{BreakerConfig, Limits};
/// # use polygateway_actors::testkit::{start, Echo};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let spec = SourceSpec {
///     name: "openai_1".into(),
///     transport: Arc::new(Echo),
///     breaker: BreakerConfig { fail_threshold: 3, ..BreakerConfig::default() },
///     limits: Limits { max_concurrency: 8, rpm: 600, tpm: 100_000 },
///     est_tokens: 512,
/// };
/// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![spec]).await;
/// let source = &scope.sources()[0];
/// assert_eq!((&*source.name, source.est_tokens), ("openai_1", 512));
/// assert_eq!(source.breaker.fail_threshold, 3);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
pub struct SourceSpec<T> {
    /// Source name.
    pub name: Arc<str>,
    /// Its transport.
    pub transport: Arc<T>,
    /// Breaker parameters.
    pub breaker: crate::ports::breaker::BreakerConfig,
    /// Source limits.
    pub limits: crate::ports::gate::Limits,
    /// `effective_est_tokens`.
    pub est_tokens: u64,
}

/// A running runtime: the supervision tree plus the slots handles use to reach it.
///
/// Dropping it does not stop the actors; call [`Runtime::shutdown`].
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{GovernOptions, NoObserver, Runtime, RuntimeOptions, ScopeConfig};
/// # use polygateway_actors::testkit::{aimd, echo, memory_governance, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// let scope = runtime
///     .add_scope(ScopeConfig::new("LLM"), vec![echo("echo_1")], Box::new(LeastInflight), aimd())
///     .await
///     .unwrap();
/// let governed = scope.call(&"hi".to_string(), &NoObserver, None, GovernOptions::default()).await.unwrap();
/// assert_eq!(governed.response, "hi");
/// runtime.shutdown(Duration::from_secs(1)).await;
/// assert!(runtime.is_shut_down());
/// # }
/// ```
pub struct Runtime {
    supervisor: ActorRef<SupervisorMsg>,
    admission: AdmissionSlot,
    clock: Arc<dyn Clock>,
    pub(crate) restart: RestartPolicy,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("supervisor", &self.supervisor.get_id())
            .finish()
    }
}

/// Options of a runtime.
///
/// ```
/// use std::sync::Arc;
/// use polygateway_actors::memory::ManualClock;
/// use polygateway_actors::runtime::{RestartPolicy, RuntimeOptions};
/// let options = RuntimeOptions {
///     clock: Arc::new(ManualClock::new()), // tests drive time by hand
///     restart: RestartPolicy { max_restarts: 3, ..RestartPolicy::default() },
/// };
/// assert_eq!(options.restart.max_restarts, 3);
/// assert_eq!(RuntimeOptions::default().restart, RestartPolicy::default());
/// ```
#[derive(Clone)]
pub struct RuntimeOptions {
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Restart policy of supervised children.
    pub restart: RestartPolicy,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(TokioClock),
            restart: RestartPolicy::default(),
        }
    }
}

impl Runtime {
    /// Start a runtime: the supervisor and its admission actor (built through `governance`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
    /// use polygateway_actors::runtime::{Governance, GovernanceFactory, Runtime, RuntimeOptions};
    /// let governance = Governance {
    ///     gate: Arc::new(MemoryGate::default()),
    ///     breakers: Arc::new(MemoryBreakers::default()),
    ///     attempts: None,
    ///     timeout: Duration::from_secs(1),
    /// };
    /// // Called at start and again whenever the admission actor is restarted.
    /// let factory: GovernanceFactory = Arc::new(move || {
    ///     let governance = governance.clone();
    ///     Box::pin(async move { Ok(governance) })
    /// });
    /// let runtime = Runtime::start(factory, RuntimeOptions::default()).await.unwrap();
    /// assert!(!runtime.is_shut_down());
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn start(
        governance: GovernanceFactory,
        options: RuntimeOptions,
    ) -> Result<Self, RuntimeError> {
        let (supervisor, _) = Actor::spawn(None, RuntimeSupervisor, Arc::clone(&options.clock))
            .await
            .map_err(|e| RuntimeError::NotStarted {
                actor: "runtime supervisor".into(),
                cause: e.to_string(),
            })?;
        let runtime = Self {
            supervisor,
            admission: AdmissionSlot::starting(),
            clock: options.clock,
            restart: options.restart,
            shutdown: CancellationToken::new(),
        };
        let args = AdmissionArgs {
            factory: governance,
            slot: runtime.admission.clone(),
        };
        runtime
            .adopt(
                "admission",
                || AdmissionActor,
                args,
                Some(runtime.restart),
                runtime.admission.actor.clone(),
            )
            .await?;
        Ok(runtime)
    }

    /// Spawn and supervise a restartable child whose arguments can be cloned for restarts. The
    /// slot always points at its current incarnation (or says why it is down).
    pub(crate) async fn adopt<A, F>(
        &self,
        name: &str,
        make_actor: F,
        args: A::Arguments,
        policy: Option<RestartPolicy>,
        slot: ActorSlot<A::Msg>,
    ) -> Result<(), RuntimeError>
    where
        A: Actor,
        A::Arguments: Clone + Sync,
        F: Fn() -> A + Send + Sync + 'static,
    {
        let set_slot = slot.clone();
        let child = name.to_string();
        let respawn: Respawn = Arc::new(move |supervisor: ActorCell| {
            let actor = make_actor();
            let args = args.clone();
            let slot = set_slot.clone();
            let child = child.clone();
            Box::pin(async move {
                let (actor_ref, _) = Actor::spawn_linked(None, actor, args, supervisor)
                    .await
                    .map_err(|e| RuntimeError::NotStarted {
                        actor: child,
                        cause: e.to_string(),
                    })?;
                let cell = actor_ref.get_cell();
                slot.set(actor_ref);
                Ok(cell)
            })
        });
        let down_slot = slot.clone();
        self.adopt_raw(
            name,
            respawn,
            policy,
            Arc::new(move |reason| down_slot.set_down(reason)),
        )
        .await
    }

    async fn adopt_raw(
        &self,
        name: &str,
        respawn: Respawn,
        policy: Option<RestartPolicy>,
        on_down: OnDown,
    ) -> Result<(), RuntimeError> {
        let (reply, answer) = oneshot::channel();
        self.supervisor
            .cast(SupervisorMsg::Adopt {
                name: name.to_string(),
                respawn,
                policy,
                on_down,
                reply,
            })
            .map_err(|_| RuntimeError::ShutDown)?;
        answer.await.map_err(|_| RuntimeError::ShutDown)?
    }

    /// Build a scope: one router (an escalation point: not restarted) and one source actor per
    /// source (restarted by the router under the runtime's restart policy).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, PacerFactory, Runtime, RuntimeOptions, ScopeConfig};
    /// # use polygateway_actors::Limits;
    /// # use polygateway_actors::testkit::{echo, memory_governance, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// use polygateway_actors::policy::select::RoundRobin;
    /// let pacer: PacerFactory =
    ///     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>);
    /// let scope = runtime
    ///     .add_scope(ScopeConfig::new("LLM"), vec![echo("a_1"), echo("b_1")], Box::new(RoundRobin::default()), pacer)
    ///     .await
    ///     .unwrap();
    /// assert_eq!(scope.sources().len(), 2);
    /// let governed = scope.call(&"hi".to_string(), &NoObserver, None, GovernOptions::default()).await.unwrap();
    /// assert!(["a_1", "b_1"].contains(&&*governed.source));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn add_scope<T: Transport>(
        &self,
        config: ScopeConfig,
        sources: Vec<SourceSpec<T>>,
        selector: Box<dyn Selector>,
        pacer: PacerFactory,
    ) -> Result<Scope<T>, RuntimeError> {
        let origin = self.clock.now();
        let room = Arc::new(WaitingRoom::new(Arc::clone(&self.clock)));
        let scope_metrics = ScopeMetrics::new(&config.name);
        let shared: Vec<Arc<SourceShared<T>>> = sources
            .into_iter()
            .enumerate()
            .map(|(index, spec)| {
                let initial = pacer(&spec.limits).limit();
                let metrics = SourceMetrics::new(&config.name, &spec.name);
                Arc::new(SourceShared::new(
                    index,
                    spec.name,
                    spec.transport,
                    spec.breaker,
                    spec.limits,
                    spec.est_tokens,
                    initial,
                    origin,
                    room.clone(),
                    metrics,
                ))
            })
            .collect();
        let name = format!("router:{}", config.name);
        let router_slot: ActorSlot<RouterMsg<T>> = ActorSlot::starting(name.clone());
        let args = RouterArgs {
            scope: Arc::clone(&config.name),
            sources: shared
                .iter()
                .map(|s| SourceArgs {
                    shared: Arc::clone(s),
                    pacer: Arc::clone(&pacer),
                })
                .collect(),
            selector,
            restart: self.restart,
            clock: Arc::clone(&self.clock),
        };
        // Routers are spawned once: their arguments hold the selector, which is not cloneable,
        // and a router only fails by escalation, which must not be undone by a restart.
        let once = std::sync::Mutex::new(Some(args));
        let set_slot = router_slot.clone();
        let router_name = name.clone();
        let respawn: Respawn = Arc::new(move |supervisor: ActorCell| {
            let args = once.lock().unwrap_or_else(|e| e.into_inner()).take();
            let slot = set_slot.clone();
            let actor = router_name.clone();
            Box::pin(async move {
                let not_started = |cause: String| RuntimeError::NotStarted { actor, cause };
                let Some(args) = args else {
                    return Err(not_started("not restartable".into()));
                };
                let (router, _) =
                    Actor::spawn_linked(None, ScopeRouter::<T>::default(), args, supervisor)
                        .await
                        .map_err(|e| not_started(e.to_string()))?;
                let cell = router.get_cell();
                slot.set(router);
                Ok(cell)
            })
        });
        let down_slot = router_slot.clone();
        self.adopt_raw(
            &name,
            respawn,
            None,
            Arc::new(move |reason| down_slot.set_down(reason)),
        )
        .await?;
        let hedging = super::hedge::Hedging::of(&config.name, &config.hedge);
        let continuing = super::continuation::Continuing::of(&config.name, &config.continuation);
        Ok(Scope::new(ScopeInner {
            hedging,
            continuing,
            config,
            router: router_slot,
            admission: self.admission.clone(),
            sources: shared.into(),
            clock: Arc::clone(&self.clock),
            shutdown: self.shutdown.clone(),
            room,
            metrics: scope_metrics,
        }))
    }

    /// The runtime's clock.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::testkit::{memory_governance, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::memory::ManualClock;
    /// use polygateway_actors::Clock;
    /// let clock = Arc::new(ManualClock::new());
    /// let options = RuntimeOptions { clock: clock.clone(), ..RuntimeOptions::default() };
    /// let runtime = Runtime::start(memory_governance(), options).await.unwrap();
    /// let t0 = runtime.clock().now();
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(runtime.clock().now() - t0, Duration::from_secs(5));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// First half of a shutdown: calls in flight end with a shutdown error and hand back what
    /// they hold, and the governance work already started finishes (Redis releases, force-opens,
    /// the compensation of abandoned admissions). The tree keeps running, so the owner can flush telemetry afterwards.
    /// Bounded by `timeout`; idempotent.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use polygateway_actors::runtime::CallFailure;
    /// runtime.quiesce(Duration::from_secs(1)).await;
    /// // New calls end at once with a shutdown error …
    /// let late = scope.call(&"late".to_string(), &NoObserver, None, GovernOptions::default()).await;
    /// assert!(matches!(late, Err(CallFailure::Shutdown(_))));
    /// // … while the tree keeps running, so telemetry can still be flushed before `shutdown`.
    /// assert_eq!(scope.router_status(), Ok(()));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn quiesce(&self, timeout: Duration) {
        self.shutdown.cancel();
        // Interrupted calls hand back their permits as they unwind; let them run first.
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.admission.drain(timeout).await;
    }

    /// Stop the tree ([`Runtime::quiesce`] first if it was not called). Bounded by `timeout`;
    /// idempotent.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use polygateway_actors::runtime::CallFailure;
    /// runtime.shutdown(Duration::from_secs(1)).await;
    /// let late = scope.call(&"late".to_string(), &NoObserver, None, GovernOptions::default()).await;
    /// assert!(matches!(late, Err(CallFailure::Shutdown(_))));
    /// assert!(runtime.is_shut_down());
    /// // A second shutdown is a no-op.
    /// runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) {
        if !self.shutdown.is_cancelled() {
            self.quiesce(timeout / 2).await;
        }
        let _ = tokio::time::timeout(
            timeout,
            self.supervisor
                .stop_and_wait(Some("runtime shutdown".into()), Some(timeout)),
        )
        .await;
    }

    /// `true` once [`Runtime::quiesce`] or [`Runtime::shutdown`] was called.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
    /// # use polygateway_actors::testkit::{memory_governance, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
    /// assert!(!runtime.is_shut_down());
    /// // Already true after the first half of a shutdown.
    /// runtime.quiesce(Duration::from_secs(1)).await;
    /// assert!(runtime.is_shut_down());
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}
