//! A scope's handle: the cheap, cloneable way a service sends governed calls.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::clock::Clock;
use crate::ports::gate::Limits;
use crate::ports::transport::{EventSink, Transport};

use super::admission::AdmissionMsg;
use super::call::{CallFailure, CallOptions, Governed};
use super::observer::CallObserver;
use super::router::RouterMsg;
use super::shared::SourceShared;
use super::slot::ActorSlot;

/// Governance knobs of one scope (resolved from configuration).
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
}

impl ScopeConfig {
    /// Defaults of the library for a scope named `name` (3 attempts, backoff 1 s..30 s,
    /// wait on full quota, fail fast on open circuits, 300 s stall window, 1 s poll, 1500 s lease).
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
        }
    }
}

pub(crate) struct ScopeInner<T> {
    pub(crate) config: ScopeConfig,
    pub(crate) router: ActorSlot<RouterMsg<T>>,
    pub(crate) admission: ActorSlot<AdmissionMsg>,
    pub(crate) sources: Arc<[Arc<SourceShared<T>>]>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    /// Signalled whenever a pacer slot of this scope is freed.
    pub(crate) slot_freed: Arc<tokio::sync::Notify>,
    pub(crate) metrics: super::metrics::ScopeMetrics,
}

/// A handle to one scope of a running runtime. Cheap to clone, `Send + Sync`.
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
    pub async fn call(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
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
        let started = std::time::Instant::now();
        let result = call.instrument(span.clone()).await;
        let outcome = match &result {
            Ok(governed) => {
                span.record("attempts", governed.attempts);
                "ok"
            }
            Err(failure) => failure.kind(),
        };
        span.record("outcome", outcome);
        self.inner
            .metrics
            .call_finished(outcome, started.elapsed().as_secs_f64());
        result
    }

    /// The scope's configuration.
    pub fn config(&self) -> &ScopeConfig {
        &self.inner.config
    }

    /// The scope's sources, in configuration order.
    pub fn sources(&self) -> &[Arc<SourceShared<T>>] {
        &self.inner.sources
    }

    /// Chaos hook for supervision tests: make source `index`'s actor fail.
    pub fn crash_source(&self, index: usize, reason: &str) {
        self.inner
            .send_router(RouterMsg::CrashSource(index, reason.to_string()));
    }

    /// Chaos hook for supervision tests: make the admission actor fail.
    pub fn crash_admission(&self, reason: &str) {
        self.inner
            .send_admission(AdmissionMsg::Crash(reason.to_string()));
    }

    /// `Err(reason)` when the scope's router is down (escalated or shut down).
    pub fn router_status(&self) -> Result<(), String> {
        self.inner.router.get().map(|_| ())
    }
}
