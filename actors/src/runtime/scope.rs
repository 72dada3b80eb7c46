//! A scope's handle: the cheap, cloneable way a service sends governed calls.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::clock::Clock;
use crate::machine::policy::CallPolicy;
use crate::policy::reserve::BatchReserve;
use crate::ports::gate::Limits;
use crate::ports::transport::{EventSink, Transport};

#[cfg(feature = "testkit")]
use super::admission::AdmissionMsg;
use super::admission::AdmissionSlot;
use super::error::RuntimeError;
use super::governed::{CallFailure, GovernOptions, Governed};
use super::observer::CallObserver;
use super::router::RouterMsg;
use super::shared::SourceShared;
use super::slot::ActorSlot;
use super::waiting_room::WaitingRoom;

/// Governance knobs of one scope (resolved from configuration).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::ScopeConfig;
/// use polygateway_actors::Limits;
/// let mut config = ScopeConfig::new("LLM");
/// config.global = Limits { max_concurrency: 32, rpm: 600, tpm: 200_000 };
/// config.quota_full_fails_fast = true; // QUOTA_FULL=fail_fast
/// config.circuit_open_waits = true; // CIRCUIT_OPEN=wait
/// // Knobs left alone keep the library defaults.
/// assert_eq!(config.stall_window, Duration::from_secs(300));
/// assert_eq!(config.max_attempts, 3);
/// ```
#[derive(Debug, Clone)]
pub struct ScopeConfig {
    /// Scope name.
    pub name: Arc<str>,
    /// Scope-wide limits.
    pub global: Limits,
    /// Attempts per call, first included.
    pub max_attempts: u32,
    /// Backoff base.
    pub backoff_base: Duration,
    /// Backoff cap.
    pub backoff_max: Duration,
    /// `QUOTA_FULL=fail_fast`.
    pub quota_full_fails_fast: bool,
    /// `CIRCUIT_OPEN=wait`.
    pub circuit_open_waits: bool,
    /// Stall window.
    pub stall_window: Duration,
    /// Quota-wait polling interval.
    pub poll_interval: Duration,
    /// Lease TTL.
    pub lease_ttl: Duration,
    /// The share of each gate batch calls leave to the higher classes (`BATCH_RESERVE`).
    pub batch_reserve: BatchReserve,
    /// Hedged first tokens (`HEDGE__*`; off by default).
    pub hedge: super::hedge::HedgeConfig,
    /// Mid-stream continuation on another source (`CONTINUE__*`; off by default).
    pub continuation: super::continuation::ContinueConfig,
}

impl ScopeConfig {
    /// The call machine's slice of this configuration.
    pub(crate) fn call_policy(&self) -> CallPolicy {
        CallPolicy {
            scope: Arc::clone(&self.name),
            max_attempts: self.max_attempts,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            quota_full_fails_fast: self.quota_full_fails_fast,
            circuit_open_waits: self.circuit_open_waits,
            stall_window: self.stall_window,
            poll_interval: self.poll_interval,
        }
    }
}

impl ScopeConfig {
    /// Defaults of the library for a scope named `name` (3 attempts, backoff 1 s..30 s,
    /// wait on full quota, fail fast on open circuits, 300 s stall window, 1 s poll, 1500 s lease,
    /// no batch reserve).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::runtime::ScopeConfig;
    /// let config = ScopeConfig::new("EMBED");
    /// assert_eq!(&*config.name, "EMBED");
    /// assert_eq!(config.max_attempts, 3);
    /// assert_eq!((config.backoff_base, config.backoff_max), (Duration::from_secs(1), Duration::from_secs(30)));
    /// assert!(!config.quota_full_fails_fast && !config.circuit_open_waits);
    /// assert_eq!(config.lease_ttl, Duration::from_secs(1500));
    /// ```
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self {
            name: name.into(),
            global: Limits::default(),
            max_attempts: 3,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            quota_full_fails_fast: false,
            circuit_open_waits: false,
            stall_window: Duration::from_secs(300),
            poll_interval: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(1500),
            batch_reserve: BatchReserve::default(),
            hedge: super::hedge::HedgeConfig::default(),
            continuation: super::continuation::ContinueConfig::default(),
        }
    }
}

pub(crate) struct ScopeInner<T> {
    pub(crate) config: ScopeConfig,
    pub(crate) router: ActorSlot<RouterMsg<T>>,
    pub(crate) admission: AdmissionSlot,
    pub(crate) sources: Arc<[Arc<SourceShared<T>>]>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    /// Where calls wait for capacity, in order (docs/behaviour.md §5.7).
    pub(crate) room: Arc<WaitingRoom>,
    pub(crate) metrics: super::metrics::ScopeMetrics,
    /// Hedged first tokens, when the scope has them on.
    pub(crate) hedging: Option<super::hedge::Hedging>,
    /// Mid-stream continuation of cut streams, when the scope has it on.
    pub(crate) continuing: Option<super::continuation::Continuing>,
}

/// A handle to one scope of a running runtime. Cheap to clone, `Send + Sync`.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// // Each task gets its own clone of the handle; all of them share the scope's governance.
/// let mut tasks = Vec::new();
/// for i in 0..4 {
///     let scope = scope.clone();
///     tasks.push(tokio::spawn(async move {
///         let request = format!("request {i}");
///         scope.call(&request, &NoObserver, None, GovernOptions::default()).await.map(|g| g.response)
///     }));
/// }
/// for (i, task) in tasks.into_iter().enumerate() {
///     assert_eq!(task.await.unwrap().unwrap(), format!("request {i}"));
/// }
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
pub struct Scope<T> {
    inner: Arc<ScopeInner<T>>,
}

impl<T> Clone for Scope<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for Scope<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("name", &self.inner.config.name)
            .field("sources", &self.inner.sources.len())
            .finish()
    }
}

impl<T: Transport> Scope<T> {
    pub(crate) fn new(inner: ScopeInner<T>) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Run one governed call: selection, breaker, gates, transport, retries.
    ///
    /// Dropping the returned future cancels the call and releases everything it holds.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::EventSink;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// // A streaming call: deltas go to the sink while the attempt runs.
    /// let (sink, mut deltas) = EventSink::channel(16);
    /// let request = "hello governed world".to_string();
    /// let governed = scope.call(&request, &NoObserver, Some(&sink), GovernOptions::default()).await.unwrap();
    /// assert_eq!(governed.response, "hello governed world");
    /// assert_eq!(sink.delivered(), 3);
    /// assert_eq!(deltas.recv().await.as_deref(), Some("hello"));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn call(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: GovernOptions,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        let span = tracing::info_span!(
            "pgw.call",
            scope = %self.inner.config.name,
            outcome = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        let call = async {
            tokio::select! {
                biased;
                _ = self.inner.shutdown.cancelled() => Err(CallFailure::Shutdown("runtime shut down".into())),
                result = self.inner.run(request, observer, events, options) => result,
            }
        };
        let started = self.inner.clock.now();
        let result = call.instrument(span.clone()).await;
        let outcome = match &result {
            Ok(governed) => {
                span.record("attempts", governed.attempts);
                "ok"
            }
            Err(failure) => failure.kind(),
        };
        span.record("outcome", outcome);
        self.inner.metrics.call_finished(
            outcome,
            self.inner
                .clock
                .now()
                .saturating_duration_since(started)
                .as_secs_f64(),
        );
        result
    }

    /// The scope's configuration.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::ScopeConfig;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mut config = ScopeConfig::new("EMBED");
    /// config.max_attempts = 2;
    /// let (runtime, scope) = start(config, vec![echo("e5_1")]).await;
    /// assert_eq!(&*scope.config().name, "EMBED");
    /// assert_eq!(scope.config().max_attempts, 2);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn config(&self) -> &ScopeConfig {
        &self.inner.config
    }

    /// The scope's sources, in configuration order.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::ScopeConfig;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("openai_1"), echo("vllm_1")]).await;
    /// let names: Vec<&str> = scope.sources().iter().map(|s| &*s.name).collect();
    /// assert_eq!(names, ["openai_1", "vllm_1"]);
    /// assert_eq!(scope.sources()[1].index, 1);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn sources(&self) -> &[Arc<SourceShared<T>>] {
        &self.inner.sources
    }

    /// Chaos hook for supervision tests: make source `index`'s actor fail (feature `testkit`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// scope.crash_source(0, "chaos test");
    /// // The router restarts the source actor; the scope keeps serving meanwhile.
    /// let governed = scope.call(&"still here".to_string(), &NoObserver, None, GovernOptions::default()).await;
    /// assert_eq!(governed.unwrap().response, "still here");
    /// assert_eq!(scope.router_status(), Ok(()));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    #[cfg(feature = "testkit")]
    pub fn crash_source(&self, index: usize, reason: &str) {
        self.inner
            .send_router(RouterMsg::CrashSource(index, reason.to_string()));
    }

    /// Chaos hook for supervision tests: make the admission actor fail (feature `testkit`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// scope.crash_admission("chaos test");
    /// // The runtime supervisor restarts it after a short backoff (50 ms by default) …
    /// tokio::time::sleep(Duration::from_millis(500)).await;
    /// // … and calls are admitted again.
    /// let governed = scope.call(&"admitted".to_string(), &NoObserver, None, GovernOptions::default()).await;
    /// assert_eq!(governed.unwrap().response, "admitted");
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    #[cfg(feature = "testkit")]
    pub fn crash_admission(&self, reason: &str) {
        self.inner
            .send_admission(AdmissionMsg::Crash(reason.to_string()));
    }

    /// `Err(why)` when the scope's router is down: starting, escalated after its sources
    /// exceeded their restart intensity, or stopped by the runtime's shutdown.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::policy::select::LeastInflight;
    /// # use polygateway_actors::runtime::{Runtime, RuntimeOptions, ScopeConfig};
    /// # use polygateway_actors::testkit::{aimd, echo, memory_governance, start};
    /// use polygateway_actors::runtime::RuntimeError;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_actors::runtime::RestartPolicy;
    /// // No restarts allowed: the first failure of a source actor makes its router escalate.
    /// let restart = RestartPolicy { max_restarts: 0, ..RestartPolicy::default() };
    /// let options = RuntimeOptions { restart, ..RuntimeOptions::default() };
    /// let runtime = Runtime::start(memory_governance(), options).await.unwrap();
    /// let sources = vec![echo("echo_1")];
    /// let scope = runtime.add_scope(ScopeConfig::new("LLM"), sources, Box::new(LeastInflight), aimd()).await.unwrap();
    /// assert_eq!(scope.router_status(), Ok(()));
    ///
    /// scope.crash_source(0, "chaos test");
    /// tokio::time::sleep(Duration::from_millis(300)).await;
    /// let reason = scope.router_status().unwrap_err();
    /// assert!(matches!(reason, RuntimeError::Stopped { .. }), "{reason:?}");
    /// assert!(reason.to_string().contains("exceeded its restart intensity"), "{reason}");
    ///
    /// // A healthy scope reads as down once its runtime has shut down.
    /// let (other_runtime, healthy) = start(ScopeConfig::new("EMBED"), vec![echo("echo_2")]).await;
    /// assert_eq!(healthy.router_status(), Ok(()));
    /// other_runtime.shutdown(Duration::from_secs(1)).await;
    /// assert_eq!(healthy.router_status(), Err(RuntimeError::ShutDown));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn router_status(&self) -> Result<(), RuntimeError> {
        self.inner.router.get().map(|_| ())
    }

    /// How many first-token hedges ended with each outcome, and how many due ones were not sent
    /// and why (`pgw_hedges_total`'s outcomes, docs/behaviour.md §5.9); `None` when the scope
    /// does not hedge.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{HedgeConfig, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// assert!(scope.hedges().is_none()); // off by default
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// let mut config = ScopeConfig::new("LLM");
    /// config.hedge = HedgeConfig { enabled: true, ..HedgeConfig::default() };
    /// let (runtime, scope) = start(config, vec![echo("echo_1"), echo("echo_2")]).await;
    /// let hedges = scope.hedges().unwrap();
    /// assert_eq!(hedges[0], ("won", 0));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn hedges(&self) -> Option<Vec<(&'static str, u64)>> {
        self.inner.hedging.as_ref().map(|h| h.counts().to_vec())
    }

    /// How many streams cut after content were continued on another source, and why the others
    /// were not (`pgw_continuations_total`'s outcomes, docs/behaviour.md §5.10); `None` when the
    /// scope does not continue cut streams.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{ContinueConfig, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// assert!(scope.continuations().is_none()); // off by default
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// let mut config = ScopeConfig::new("LLM");
    /// config.continuation = ContinueConfig { enabled: true };
    /// let (runtime, scope) = start(config, vec![echo("echo_1"), echo("echo_2")]).await;
    /// assert_eq!(scope.continuations().unwrap()[0], ("continued", 0));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn continuations(&self) -> Option<Vec<(&'static str, u64)>> {
        self.inner.continuing.as_ref().map(|c| c.counts().to_vec())
    }

    /// Whether calls wait in the scope's room (tests of the waiting room).
    #[cfg(test)]
    pub(crate) fn room_busy(&self) -> bool {
        self.inner.room.busy()
    }
}
