//! The governed call's public values (its result, its failure, its options) and the production
//! effects of the call driver.
//!
//! A call runs in the caller's task (or, for streams, in a task the stream owns), so dropping the
//! caller's future is cancellation: every resource it holds is an RAII guard — the pacer slot
//! (`SourceTicket`), the admission `Permit` (lease and probe), timers — and is released on drop
//! with no verdict. Actors are messaged, never awaited on I/O.
//!
//! Per attempt: select (router) → breaker + six gates (admission) → transport → report
//! (source actor, admission, observer). `driver.rs` performs those steps in order through
//! [`CallEffects`]; this file implements them with tokio and the scope's actors. Every decision
//! (retry, switch, backoff, wait, stall, the `retry_after` hint) is made by the sans-I/O
//! `CallMachine`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::oneshot;

use crate::outcome::SourceReason;
use crate::policy::pacer::PacerObservation;
use crate::ports::attempt::{AttemptOutcome, BreakerStatus};
use crate::ports::transport::{EventSink, Transport};

#[cfg(feature = "testkit")]
use super::admission::AdmissionMsg;
use super::admission::{AdmitAnswer, AdmitRequest, Permit};
use super::driver::{self, CallEffects};
use super::ids::new_id;
use super::metrics::ScopeMetrics;
use super::observer::CallObserver;
use super::router::{RouterMsg, Selection};
use super::scope::{ScopeConfig, ScopeInner};
use super::shared::SourceShared;

/// Why a scope could not serve (docs/behaviour.md §6 scope-level reasons).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// // Worth retrying later: an open circuit or a full quota clears with time.
/// fn should_retry_later<E>(failure: &CallFailure<E>) -> Option<Duration> {
///     use ScopeReason::{CircuitOpen, QuotaExhausted};
///     match failure {
///         CallFailure::Unavailable { reason: CircuitOpen | QuotaExhausted, retry_after, .. } => {
///             Some(*retry_after)
///         }
///         _ => None,
///     }
/// }
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::QuotaExhausted,
///     retry_after: Duration::from_secs(2),
///     per_source: Default::default(),
///     last_error: None,
///     detail: "scope quota full".into(),
/// };
/// assert_eq!(should_retry_later(&failure), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeReason {
    /// Every breaker refused.
    CircuitOpen,
    /// The attempt budget is spent.
    RetryExhausted,
    /// Waited past the stall window while the scope made no progress.
    Stalled,
    /// A quota gate is full and the scope fails fast.
    QuotaExhausted,
    /// No sources configured.
    NoSources,
    /// The limiter or breaker backend is down.
    GovernanceBackendDown,
}

impl ScopeReason {
    /// The wire name (`circuit_open`, `retry_exhausted`, …).
    ///
    /// ```
    /// use polygateway_actors::runtime::ScopeReason;
    /// assert_eq!(ScopeReason::RetryExhausted.as_str(), "retry_exhausted");
    /// assert_eq!(ScopeReason::GovernanceBackendDown.as_str(), "governance_backend_down");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeReason::CircuitOpen => "circuit_open",
            ScopeReason::RetryExhausted => "retry_exhausted",
            ScopeReason::Stalled => "stalled",
            ScopeReason::QuotaExhausted => "quota_exhausted",
            ScopeReason::NoSources => "no_sources",
            ScopeReason::GovernanceBackendDown => "governance_backend_down",
        }
    }
}

/// How a governed call failed.
///
/// Scope-level failures carry the reason of every source that was tried:
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// use polygateway_actors::SourceReason;
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::RetryExhausted,
///     retry_after: Duration::ZERO,
///     per_source: [("openai_1".into(), SourceReason::Timeout)].into_iter().collect(),
///     last_error: Some(std::io::Error::other("deadline")),
///     detail: "3 attempt(s) failed".into(),
/// };
/// if let CallFailure::Unavailable { per_source, last_error, .. } = &failure {
///     assert_eq!(per_source["openai_1"], SourceReason::Timeout);
///     assert_eq!(last_error.as_ref().unwrap().to_string(), "deadline");
/// }
/// ```
#[derive(Debug)]
pub enum CallFailure<E> {
    /// The scope cannot serve now.
    Unavailable {
        /// Scope-level reason.
        reason: ScopeReason,
        /// When trying again makes sense (0 = now).
        retry_after: Duration,
        /// Why each source could not serve.
        per_source: BTreeMap<Arc<str>, SourceReason>,
        /// The last attempt error, if any attempt was made.
        last_error: Option<E>,
        /// Human detail (e.g. the backend's error).
        detail: String,
    },
    /// The request was rejected (no retry, no switch).
    Rejected(E),
    /// The answer was unusable.
    Invalid(E),
    /// A streaming attempt failed after deltas reached the consumer: it cannot be retried.
    StreamBroken {
        /// The failure.
        error: E,
        /// Deltas delivered before it.
        delivered: u64,
    },
    /// The runtime or the scope's actors are gone.
    Shutdown(String),
}

impl<E> CallFailure<E> {
    /// A short name of the failure for spans and metrics (`circuit_open`, `rejected`, …).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::runtime::{CallFailure, ScopeReason};
    /// let rejected = CallFailure::Rejected(std::io::Error::other("400 bad request"));
    /// assert_eq!(rejected.kind(), "rejected");
    /// // Scope-level failures are named by their reason.
    /// let open = CallFailure::<std::io::Error>::Unavailable {
    ///     reason: ScopeReason::CircuitOpen,
    ///     retry_after: Duration::from_secs(30),
    ///     per_source: Default::default(),
    ///     last_error: None,
    ///     detail: String::new(),
    /// };
    /// assert_eq!(open.kind(), "circuit_open");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Unavailable { reason, .. } => reason.as_str(),
            CallFailure::Rejected(_) => "rejected",
            CallFailure::Invalid(_) => "invalid",
            CallFailure::StreamBroken { .. } => "stream_broken",
            CallFailure::Shutdown(_) => "shutdown",
        }
    }
}

/// A successful governed call.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{CallOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use polygateway_actors::runtime::Governed;
/// let Governed { response, source, attempts, attempt_id, capacity_wait } = scope
///     .call(&"hello".to_string(), &NoObserver, None, CallOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(response, "hello");
/// assert_eq!(&*source, "echo_1");
/// assert_eq!(attempts, 1);
/// assert!(!attempt_id.is_empty());
/// // An idle scope had capacity at once.
/// assert_eq!(capacity_wait, Duration::ZERO);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct Governed<R> {
    /// The transport's answer.
    pub response: R,
    /// Id of the attempt that produced it.
    pub attempt_id: String,
    /// Source that answered.
    pub source: Arc<str>,
    /// Attempts made (all, including 429 pushbacks).
    pub attempts: u32,
    /// Time the call waited for capacity before its attempts were sent: a pacer slot, a quota
    /// gate, sources cooling down, a 429 pushback. The back-off before retrying a transient
    /// failure is not counted (it is the retry's, not a wait for capacity).
    pub capacity_wait: Duration,
}

/// Options of one governed call.
///
/// ```
/// use polygateway_actors::runtime::CallOptions;
/// // An ordinary call feeds its verdict to the breaker …
/// assert!(!CallOptions::default().breaker_exempt);
/// // … a re-ask after unusable structured output does not.
/// let reask = CallOptions { breaker_exempt: true };
/// assert!(reask.breaker_exempt);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions {
    /// A structured-output re-ask: its verdict never counts toward the breaker (docs/behaviour.md §9.2).
    pub breaker_exempt: bool,
}

/// Production effects: tokio and the scope's actors. The router actor selects, the admission
/// actor's door admits and settles, the source actor hears each attempt (a cast), timers are
/// tokio's, and time is the scope's `Clock`.
impl<T: Transport> CallEffects<T> for ScopeInner<T> {
    type BreakerAnswer = oneshot::Receiver<Option<BreakerStatus>>;

    fn config(&self) -> &ScopeConfig {
        &self.config
    }

    fn sources(&self) -> &[Arc<SourceShared<T>>] {
        &self.sources
    }

    fn metrics(&self) -> &ScopeMetrics {
        &self.metrics
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn rng(&self) -> SmallRng {
        SmallRng::from_rng(&mut rand::rng())
    }

    fn new_id(&self) -> String {
        new_id()
    }

    async fn select(
        &self,
        exclude: Vec<usize>,
        avoid: Option<usize>,
    ) -> Result<Selection<T>, String> {
        let stopped = || format!("scope {} router stopped", self.config.name);
        let (reply, answer) = oneshot::channel();
        let router = self.router.get()?;
        router
            .cast(RouterMsg::Select {
                exclude,
                avoid,
                reply,
            })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }

    async fn admit(&self, request: AdmitRequest) -> AdmitAnswer {
        self.admission.door()?.admit(request).await
    }

    fn send<'a>(
        &'a self,
        source: &'a SourceShared<T>,
        request: &'a T::Request,
        events: Option<&'a EventSink<T::Event>>,
    ) -> impl Future<Output = Result<T::Response, T::Error>> + 'a {
        source.transport.send(request, events)
    }

    fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<Self::BreakerAnswer> {
        let (reply, receiver) = match answer {
            true => {
                let (reply, receiver) = oneshot::channel();
                (Some(reply), Some(receiver))
            }
            false => (None, None),
        };
        match self.admission.door() {
            Ok(door) => door.finish(permit, outcome, reply),
            Err(e) => tracing::warn!(scope = %self.config.name, reason = %e.message,
                "admission down; bookkeeping dropped (lease TTL reclaims)"),
        }
        receiver
    }

    async fn breaker_after(&self, answer: Self::BreakerAnswer) -> Option<BreakerStatus> {
        answer.await.ok().flatten()
    }

    fn report(&self, source: &SourceShared<T>, observation: PacerObservation) {
        source.report(observation);
    }

    async fn backoff(&self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }

    async fn wait(&self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }

    async fn await_slot(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.slot_freed.notified()).await;
    }

    async fn progress(&self) -> Option<Duration> {
        let door = self.admission.door().ok()?;
        door.progress_age(&self.config.name).await.ok()?
    }
}

impl<T: Transport> ScopeInner<T> {
    /// Run one governed call through the driver with the production effects.
    pub(crate) async fn run(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        driver::run(self, request, observer, events, options).await
    }

    /// The chaos hooks' way to the scope's actors (test builds only: calls never message them).
    #[cfg(feature = "testkit")]
    pub(crate) fn send_router(&self, message: RouterMsg<T>) {
        if let Ok(router) = self.router.get() {
            let _ = router.cast(message);
        }
    }

    #[cfg(feature = "testkit")]
    pub(crate) fn send_admission(&self, message: AdmissionMsg) {
        match self.admission.actor.get() {
            Ok(admission) => {
                if admission.cast(message).is_err() {
                    tracing::warn!(scope = %self.config.name, "admission actor gone; message dropped");
                }
            }
            Err(reason) => {
                tracing::warn!(scope = %self.config.name, %reason, "admission actor down; message dropped");
            }
        }
    }
}
