//! A shared, replaceable reference to a supervised actor.
//!
//! Supervisors restart children; handles must reach the *current* incarnation without a round trip
//! through the supervisor. The slot is written only by the supervisor and read on every call.

use std::sync::{Arc, RwLock};

use ractor::ActorRef;

use super::error::RuntimeError;

/// The current incarnation of an actor, or why it is down.
#[derive(Debug)]
pub(crate) struct ActorSlot<M> {
    inner: Arc<RwLock<SlotState<M>>>,
}

#[derive(Debug)]
enum SlotState<M> {
    Up(ActorRef<M>),
    Down(RuntimeError),
}

impl<M> Clone for ActorSlot<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M: Send + 'static> ActorSlot<M> {
    /// The current actor, or why there is none.
    pub(crate) fn get(&self) -> Result<ActorRef<M>, RuntimeError> {
        match &*self.inner.read().unwrap_or_else(|e| e.into_inner()) {
            SlotState::Up(actor) => Ok(actor.clone()),
            SlotState::Down(reason) => Err(reason.clone()),
        }
    }

    /// Point the slot at a new incarnation.
    pub(crate) fn set(&self, actor: ActorRef<M>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = SlotState::Up(actor);
    }

    /// Mark the actor as down with a reason callers will see.
    pub(crate) fn set_down(&self, reason: RuntimeError) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = SlotState::Down(reason);
    }

    /// A slot whose actor, named `actor` in what callers see, has not started yet.
    pub(crate) fn starting(actor: impl Into<String>) -> Self {
        let starting = RuntimeError::Starting {
            actor: actor.into(),
        };
        Self {
            inner: Arc::new(RwLock::new(SlotState::Down(starting))),
        }
    }
}

#[cfg(all(test, feature = "testkit"))]
mod examples {
    //! Usage cases of the slot and of `Runtime::adopt` (they were doc examples while both were
    //! public).

    use std::time::Duration;

    use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

    use super::ActorSlot;
    use crate::runtime::{RestartPolicy, Runtime, RuntimeError, RuntimeOptions};
    use crate::testkit::memory_governance;

    struct Doubler;

    enum DoublerMsg {
        Double(u32, RpcReplyPort<u32>),
    }

    impl Actor for Doubler {
        type Msg = DoublerMsg;
        type State = ();
        type Arguments = ();
        async fn pre_start(
            &self,
            _: ActorRef<DoublerMsg>,
            _: (),
        ) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
        async fn handle(
            &self,
            _: ActorRef<DoublerMsg>,
            msg: DoublerMsg,
            _: &mut (),
        ) -> Result<(), ActorProcessingErr> {
            let DoublerMsg::Double(n, reply) = msg;
            let _ = reply.send(n * 2);
            Ok(())
        }
    }

    async fn double(slot: &ActorSlot<DoublerMsg>, n: u32) -> Result<u32, String> {
        let doubler = slot.get().map_err(|e| e.to_string())?; // why the actor is down, if it is
        ractor::call!(doubler, DoublerMsg::Double, n).map_err(|_| "doubler stopped".to_string())
    }

    /// Restartable or not, an adopted actor is reached through its slot once up; before, the
    /// slot says it is starting, and after the runtime's shutdown that it shut down.
    #[tokio::test(flavor = "current_thread")]
    async fn a_slot_says_why_until_the_adopted_actor_is_up() {
        for policy in [None, Some(RestartPolicy::default())] {
            let runtime = Runtime::start(memory_governance(), RuntimeOptions::default())
                .await
                .unwrap();
            let slot = ActorSlot::starting("doubler");
            assert_eq!(double(&slot, 2).await, Err("doubler starting".to_string()));
            runtime
                .adopt("doubler", || Doubler, (), policy, slot.clone())
                .await
                .unwrap();
            assert_eq!(double(&slot, 21).await, Ok(42));
            runtime.shutdown(Duration::from_secs(1)).await;
            assert_eq!(slot.get().unwrap_err(), RuntimeError::ShutDown);
        }
    }

    #[test]
    fn a_slot_made_down_says_why() {
        let slot: ActorSlot<String> = ActorSlot::starting("telemetry actor");
        assert_eq!(
            slot.get().unwrap_err().to_string(),
            "telemetry actor starting"
        );
    }
}
