//! A shared, replaceable reference to a supervised actor.
//!
//! Supervisors restart children; handles must reach the *current* incarnation without a round trip
//! through the supervisor. The slot is written only by the supervisor and read on every call.

use std::sync::{Arc, RwLock};

use ractor::ActorRef;

/// The current incarnation of an actor, or `None` while it is down.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{Runtime, RuntimeOptions};
/// # use polygateway_actors::Transport;
/// # use polygateway_actors::testkit::{memory_governance, start};
/// # use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
/// # struct Doubler;
/// # enum DoublerMsg { Double(u32, RpcReplyPort<u32>) }
/// # impl Actor for Doubler {
/// #     type Msg = DoublerMsg;
/// #     type State = ();
/// #     type Arguments = ();
/// #     async fn pre_start(&self, _: ActorRef<DoublerMsg>, _: ()) -> Result<(), ActorProcessingErr> { Ok(()) }
/// #     async fn handle(&self, _: ActorRef<DoublerMsg>, msg: DoublerMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
/// #         let DoublerMsg::Double(n, reply) = msg;
/// #         let _ = reply.send(n * 2);
/// #         Ok(())
/// #     }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// use polygateway_actors::runtime::ActorSlot;
/// async fn double(slot: &ActorSlot<DoublerMsg>, n: u32) -> Result<u32, String> {
///     let doubler = slot.get()?; // why the actor is down, if it is
///     ractor::call!(doubler, DoublerMsg::Double, n).map_err(|_| "doubler stopped".to_string())
/// }
/// let slot = ActorSlot::down("doubler starting");
/// assert_eq!(double(&slot, 2).await, Err("doubler starting".to_string()));
/// runtime.adopt("doubler", || Doubler, (), None, slot.clone()).await.unwrap();
/// assert_eq!(double(&slot, 2).await, Ok(4));
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct ActorSlot<M> {
    inner: Arc<RwLock<SlotState<M>>>,
}

#[derive(Debug)]
enum SlotState<M> {
    Up(ActorRef<M>),
    Down(String),
}

impl<M> Clone for ActorSlot<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M: Send + 'static> ActorSlot<M> {
    /// A slot holding `actor`.
    ///
    /// ```
    /// # use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
    /// # struct Doubler;
    /// # enum DoublerMsg { Double(u32, RpcReplyPort<u32>) }
    /// # impl Actor for Doubler {
    /// #     type Msg = DoublerMsg;
    /// #     type State = ();
    /// #     type Arguments = ();
    /// #     async fn pre_start(&self, _: ActorRef<DoublerMsg>, _: ()) -> Result<(), ActorProcessingErr> { Ok(()) }
    /// #     async fn handle(&self, _: ActorRef<DoublerMsg>, msg: DoublerMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
    /// #         let DoublerMsg::Double(n, reply) = msg;
    /// #         let _ = reply.send(n * 2);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::runtime::ActorSlot;
    /// let (doubler, _handle) = Actor::spawn(None, Doubler, ()).await.unwrap();
    /// let slot = ActorSlot::new(doubler.clone());
    /// assert_eq!(slot.get().unwrap().get_id(), doubler.get_id());
    /// # doubler.stop(None);
    /// # }
    /// ```
    pub fn new(actor: ActorRef<M>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(SlotState::Up(actor))),
        }
    }

    /// The current actor, or why there is none.
    ///
    /// ```
    /// # use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
    /// # struct Doubler;
    /// # enum DoublerMsg { Double(u32, RpcReplyPort<u32>) }
    /// # impl Actor for Doubler {
    /// #     type Msg = DoublerMsg;
    /// #     type State = ();
    /// #     type Arguments = ();
    /// #     async fn pre_start(&self, _: ActorRef<DoublerMsg>, _: ()) -> Result<(), ActorProcessingErr> { Ok(()) }
    /// #     async fn handle(&self, _: ActorRef<DoublerMsg>, msg: DoublerMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
    /// #         let DoublerMsg::Double(n, reply) = msg;
    /// #         let _ = reply.send(n * 2);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::runtime::ActorSlot;
    /// let (doubler, _handle) = Actor::spawn(None, Doubler, ()).await.unwrap();
    /// let slot = ActorSlot::new(doubler);
    /// let current = slot.get().unwrap();
    /// assert!(matches!(ractor::call!(current, DoublerMsg::Double, 5), Ok(10)));
    /// # current.stop(None);
    /// # }
    /// ```
    pub fn get(&self) -> Result<ActorRef<M>, String> {
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
    pub(crate) fn set_down(&self, reason: impl Into<String>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = SlotState::Down(reason.into());
    }
}

impl<M: Send + 'static> ActorSlot<M> {
    /// A slot whose actor is not (yet) running.
    ///
    /// ```
    /// use polygateway_actors::runtime::ActorSlot;
    /// let slot: ActorSlot<String> = ActorSlot::down("telemetry actor starting");
    /// assert_eq!(slot.get().unwrap_err(), "telemetry actor starting");
    /// ```
    pub fn down(reason: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(SlotState::Down(reason.into()))),
        }
    }
}
