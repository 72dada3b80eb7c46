//! The admission actor's lifecycle: it builds the backends in `pre_start` and publishes them as
//! a [`Door`] in the runtime's [`AdmissionSlot`], withdrawn when it stops, so while it is down
//! (restarting) admission fails closed and after a restart calls use what the new incarnation
//! built.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::task::TaskTracker;

use crate::ports::attempt::ComposedAttempts;
use crate::ports::BackendError;

use super::super::slot::ActorSlot;
use super::door::Door;
use super::governance::GovernanceFactory;
use super::tasks::TrackedTasks;

/// Messages of the admission actor. The call path does not message it (it goes through the
/// [`Door`] the actor publishes); shutdown waits on the runtime's task tracker directly.
#[derive(Debug)]
pub(crate) enum AdmissionMsg {
    /// Chaos hook: make the actor fail, to exercise supervision. Test builds only: without the
    /// `testkit` feature the actor takes no message at all (ractor's default `handle`).
    #[cfg(feature = "testkit")]
    Crash(String),
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
            actor: ActorSlot::starting("admission actor"),
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
            Err(reason) => reason.to_string(),
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
        let tasks = Arc::new(TrackedTasks(args.slot.tasks.clone()));
        let door = Door::new(attempts, governance.gate, governance.timeout, tasks);
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
