//! The source actor: one per upstream source, the sole owner of its adaptive policies.
//!
//! It owns the pacer and the health EWMA; after every attempt it publishes the derived values
//! (pacer limit and last signal, health score) into the source's [`SourceShared`] so the router
//! selects without a round trip. Call tasks report each
//! finished attempt with a cast; nothing here awaits I/O, so a source actor never serialises calls.
//! The breaker state lives behind the breaker port (memory or Redis) so every process shares it;
//! the admission actor consults it.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::policy::health::HealthEwma;
use crate::policy::pacer::{Pacer, PacerObservation};

use super::shared::SourceShared;

/// Builds a fresh pacer for a source (injectable; the gateway's default follows `{SCOPE}__PACER`).
///
/// ```
/// use std::sync::Arc;
/// use polygateway_actors::policy::pacer::{Pacer, PacerObservation};
/// use polygateway_actors::runtime::PacerFactory;
/// use polygateway_actors::Limits;
/// /// A pacer that never adapts: the configured concurrency, or 1.
/// #[derive(Debug)]
/// struct Fixed(u32);
/// impl Pacer for Fixed {
///     fn limit(&self) -> u32 { self.0 }
///     fn observe(&mut self, _attempt: &PacerObservation) {}
/// }
/// let fixed: PacerFactory =
///     Arc::new(|limits: &Limits| Box::new(Fixed(limits.max_concurrency.max(1))) as Box<dyn Pacer>);
/// assert_eq!(fixed(&Limits { max_concurrency: 4, ..Limits::default() }).limit(), 4);
/// assert_eq!(fixed(&Limits::default()).limit(), 1);
/// ```
pub type PacerFactory = Arc<dyn Fn(&crate::ports::gate::Limits) -> Box<dyn Pacer> + Send + Sync>;

/// Messages of a source actor.
#[derive(Debug)]
pub(crate) enum SourceMsg {
    /// One attempt finished.
    Report(PacerObservation),
    /// Chaos hook: make the actor fail, to exercise supervision (test builds only).
    #[cfg(feature = "testkit")]
    Crash(String),
}

/// The source actor.
pub(crate) struct SourceActor<T> {
    _transport: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for SourceActor<T> {
    fn default() -> Self {
        Self {
            _transport: std::marker::PhantomData,
        }
    }
}

/// Arguments (kept by the router to respawn the actor after a failure).
pub(crate) struct SourceArgs<T> {
    /// The source's shared values (survive restarts: in-flight tickets stay accounted).
    pub(crate) shared: Arc<SourceShared<T>>,
    /// Pacer constructor.
    pub(crate) pacer: PacerFactory,
}

impl<T> Clone for SourceArgs<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            pacer: Arc::clone(&self.pacer),
        }
    }
}

/// State of a source actor. A restart starts the pacer and health afresh (the reason for a
/// restart is that this state may be corrupt); the shared counters and in-flight survive.
pub(crate) struct SourceState<T> {
    shared: Arc<SourceShared<T>>,
    pacer: Box<dyn Pacer>,
    health: HealthEwma,
}

impl<T: Send + Sync + 'static> Actor for SourceActor<T> {
    type Msg = SourceMsg;
    type State = SourceState<T>;
    type Arguments = SourceArgs<T>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SourceArgs<T>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let pacer = (args.pacer)(&args.shared.limits);
        let health = HealthEwma::default();
        args.shared.publish_pacer(pacer.as_ref());
        args.shared.publish_health(health.value());
        Ok(SourceState {
            shared: args.shared,
            pacer,
            health,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SourceMsg::Report(attempt) => {
                let verdict = attempt.verdict;
                // The verdict counters were bumped by the call task (`SourceShared::report`).
                state.pacer.observe(&attempt);
                state.health.observe(verdict);
                state.shared.publish_pacer(state.pacer.as_ref());
                state.shared.publish_health(state.health.value());
            }
            #[cfg(feature = "testkit")]
            SourceMsg::Crash(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}
