//! A shared, replaceable reference to a supervised actor.
//!
//! Supervisors restart children; handles must reach the *current* incarnation without a round trip
//! through the supervisor. The slot is written only by the supervisor and read on every call.

use std::sync::{Arc, RwLock};

use ractor::ActorRef;

/// The current incarnation of an actor, or `None` while it is down.
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
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
