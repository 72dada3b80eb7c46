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
use super::source_msg::SourceMsg;

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

/// A source's adaptive policies — its pacer and health EWMA — and how one attempt moves them:
/// observe, then publish the derived values into the source's [`SourceShared`]. The source
/// actor owns one; the simulator drives the same code in virtual time.
#[derive(Debug)]
pub(crate) struct SourcePolicies {
    pub(crate) pacer: Box<dyn Pacer>,
    pub(crate) health: HealthEwma,
}

impl SourcePolicies {
    /// Fresh policies for `shared`, published at once.
    pub(crate) fn start<T>(factory: &PacerFactory, shared: &SourceShared<T>) -> Self {
        let policies = Self {
            pacer: factory(&shared.limits),
            health: HealthEwma::default(),
        };
        shared.publish_pacer(policies.pacer.as_ref());
        shared.publish_health(policies.health.value());
        policies
    }

    /// One finished attempt (the verdict counters were bumped by the call task).
    pub(crate) fn observe<T>(&mut self, shared: &SourceShared<T>, attempt: &PacerObservation) {
        self.pacer.observe(attempt);
        self.health.observe(attempt.verdict);
        shared.publish_pacer(self.pacer.as_ref());
        shared.publish_health(self.health.value());
    }
}

/// State of a source actor. A restart starts the pacer and health afresh (the reason for a
/// restart is that this state may be corrupt); the shared counters and in-flight survive.
pub(crate) struct SourceState<T> {
    shared: Arc<SourceShared<T>>,
    policies: SourcePolicies,
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
        let policies = SourcePolicies::start(&args.pacer, &args.shared);
        Ok(SourceState {
            shared: args.shared,
            policies,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SourceMsg::Report(attempt) => state.policies.observe(&state.shared, &attempt),
            #[cfg(feature = "testkit")]
            SourceMsg::Crash(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}
