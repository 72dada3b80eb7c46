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
//! intensity limit a child is left down and its [`ActorSlot`] says why, so callers get a clear
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

use super::admission::{AdmissionActor, AdmissionMsg, GovernanceFactory};
use super::metrics::{ScopeMetrics, SourceMetrics};
use super::restart::{stopped_child, RestartBudget, RestartDecision, RestartPolicy};
use super::router::{RouterArgs, RouterMsg, ScopeRouter};
use super::scope::{Scope, ScopeConfig, ScopeInner};
use super::shared::SourceShared;
use super::slot::ActorSlot;
use super::source::{PacerFactory, SourceArgs};

type SpawnFuture = Pin<Box<dyn Future<Output = Result<ActorCell, String>> + Send>>;

/// Spawns (again) one child linked to the supervisor cell it is given.
pub type Respawn = Arc<dyn Fn(ActorCell) -> SpawnFuture + Send + Sync>;

/// Messages of the runtime supervisor.
pub enum SupervisorMsg {
    /// Spawn and supervise a child.
    Adopt {
        /// Child name for logs and errors.
        name: String,
        /// How to (re)spawn it.
        respawn: Respawn,
        /// `None`: not restartable (escalation point).
        policy: Option<RestartPolicy>,
        /// Called when the child is given up on.
        on_down: Arc<dyn Fn(String) + Send + Sync>,
        /// Spawn result.
        reply: oneshot::Sender<Result<(), String>>,
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

struct Child {
    respawn: Respawn,
    budget: Option<RestartBudget>,
    on_down: Arc<dyn Fn(String) + Send + Sync>,
    current: Option<ActorCell>,
}

/// State of the runtime supervisor.
pub struct SupervisorState {
    children: HashMap<String, Child>,
    by_id: HashMap<ActorId, String>,
    clock: Arc<dyn Clock>,
}

/// The runtime supervisor actor.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeSupervisor;

impl RuntimeSupervisor {
    async fn spawn_child(
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: &str,
    ) -> Result<(), String> {
        let Some(child) = state.children.get_mut(name) else {
            return Err(format!("unknown child {name}"));
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
                    handle_child_down(&myself, state, name, e);
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
            (child.on_down)(format!("{name} is restarting after: {why}"));
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = me.cast(SupervisorMsg::Respawn(name));
            });
        }
        RestartDecision::Escalate => {
            tracing::error!(child = %name, reason = %why, "child given up (restart intensity exceeded or not restartable)");
            (child.on_down)(format!("{name} stopped: {why}"));
        }
    }
}

/// One source of a scope to build.
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
pub struct Runtime {
    supervisor: ActorRef<SupervisorMsg>,
    admission: ActorSlot<AdmissionMsg>,
    clock: Arc<dyn Clock>,
    restart: RestartPolicy,
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
    pub async fn start(
        governance: GovernanceFactory,
        options: RuntimeOptions,
    ) -> Result<Self, String> {
        let (supervisor, _) = Actor::spawn(None, RuntimeSupervisor, Arc::clone(&options.clock))
            .await
            .map_err(|e| format!("cannot start the runtime supervisor: {e}"))?;
        let runtime = Self {
            supervisor,
            admission: ActorSlot::down("admission actor starting"),
            clock: options.clock,
            restart: options.restart,
            shutdown: CancellationToken::new(),
        };
        let slot = runtime.admission.clone();
        runtime
            .adopt(
                "admission",
                || AdmissionActor,
                governance,
                Some(runtime.restart),
                slot,
            )
            .await?;
        Ok(runtime)
    }

    /// Spawn and supervise a restartable child whose arguments can be cloned for restarts. The
    /// slot always points at its current incarnation (or says why it is down).
    pub async fn adopt<A, F>(
        &self,
        name: &str,
        make_actor: F,
        args: A::Arguments,
        policy: Option<RestartPolicy>,
        slot: ActorSlot<A::Msg>,
    ) -> Result<(), String>
    where
        A: Actor,
        A::Arguments: Clone + Sync,
        F: Fn() -> A + Send + Sync + 'static,
    {
        let set_slot = slot.clone();
        let respawn: Respawn = Arc::new(move |supervisor: ActorCell| {
            let actor = make_actor();
            let args = args.clone();
            let slot = set_slot.clone();
            Box::pin(async move {
                let (actor_ref, _) = Actor::spawn_linked(None, actor, args, supervisor)
                    .await
                    .map_err(|e| e.to_string())?;
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
        on_down: Arc<dyn Fn(String) + Send + Sync>,
    ) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.supervisor
            .cast(SupervisorMsg::Adopt {
                name: name.to_string(),
                respawn,
                policy,
                on_down,
                reply,
            })
            .map_err(|_| "runtime is shut down".to_string())?;
        answer
            .await
            .map_err(|_| "runtime is shut down".to_string())?
    }

    /// Build a scope: one router (an escalation point: not restarted) and one source actor per
    /// source (restarted by the router under the runtime's restart policy).
    pub async fn add_scope<T: Transport>(
        &self,
        config: ScopeConfig,
        sources: Vec<SourceSpec<T>>,
        selector: Box<dyn Selector>,
        pacer: PacerFactory,
    ) -> Result<Scope<T>, String> {
        let origin = self.clock.now();
        let slot_freed = Arc::new(tokio::sync::Notify::new());
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
                    Arc::clone(&slot_freed),
                    metrics,
                ))
            })
            .collect();
        let router_slot: ActorSlot<RouterMsg<T>> =
            ActorSlot::down(format!("scope {} starting", config.name));
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
        let scope_name = Arc::clone(&config.name);
        let respawn: Respawn = Arc::new(move |supervisor: ActorCell| {
            let args = once.lock().unwrap_or_else(|e| e.into_inner()).take();
            let slot = set_slot.clone();
            let scope_name = Arc::clone(&scope_name);
            Box::pin(async move {
                let args =
                    args.ok_or_else(|| format!("scope {scope_name} router is not restartable"))?;
                let (router, _) =
                    Actor::spawn_linked(None, ScopeRouter::<T>::default(), args, supervisor)
                        .await
                        .map_err(|e| e.to_string())?;
                let cell = router.get_cell();
                slot.set(router);
                Ok(cell)
            })
        });
        let down_slot = router_slot.clone();
        let name = format!("router:{}", config.name);
        self.adopt_raw(
            &name,
            respawn,
            None,
            Arc::new(move |reason| down_slot.set_down(reason)),
        )
        .await?;
        Ok(Scope::new(ScopeInner {
            config,
            router: router_slot,
            admission: self.admission.clone(),
            sources: shared.into(),
            clock: Arc::clone(&self.clock),
            shutdown: self.shutdown.clone(),
            slot_freed,
            metrics: scope_metrics,
        }))
    }

    /// The runtime's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The admission actor's slot.
    pub fn admission(&self) -> &ActorSlot<AdmissionMsg> {
        &self.admission
    }

    /// First half of a shutdown: calls in flight end with a shutdown error and hand back what
    /// they hold, and the admission actor finishes the backend work it started (Redis releases,
    /// force-opens). The tree keeps running, so the owner can flush telemetry afterwards.
    /// Bounded by `timeout`; idempotent.
    pub async fn quiesce(&self, timeout: Duration) {
        self.shutdown.cancel();
        // Interrupted calls hand back their permits by message; let those land first.
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Ok(admission) = self.admission.get() {
            let (reply, done) = oneshot::channel();
            if admission.cast(AdmissionMsg::Drain(reply)).is_ok() {
                let _ = tokio::time::timeout(timeout, done).await;
            }
        }
    }

    /// Stop the tree ([`Runtime::quiesce`] first if it was not called). Bounded by `timeout`;
    /// idempotent.
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

    /// `true` once [`Runtime::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}
