//! A live, read-only view of every source of a scope: breaker, health, pacer, counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::policy::pacer::PacerSignal;
use polygateway_actors::runtime::{Scope, SourceShared};
use polygateway_actors::{BreakerConfig, BreakerState};

use super::{Core, ScopeEntry};
use crate::structured::StructuredMode;

/// The state of one source at one moment.
///
/// The counters are updated by the source's actor just after each attempt, so a snapshot taken
/// the instant a call returns may not count it yet:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::Scripted(vec![Behaviour::ServerError(503), Behaviour::healthy()])).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("LLM", &mock.base_url())],
/// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
/// # );
/// use std::time::Duration;
/// use polygateway::Message;
/// // The mock fails the first request with a 503, then answers.
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// gw.chat(vec![Message::user("hi")]).await?; // retried once, invisibly
/// let mut snap = gw.sources("LLM").await?.remove(0);
/// for _ in 0..100 {
///     if snap.successes + snap.failures == 2 {
///         break;
///     }
///     tokio::time::sleep(Duration::from_millis(10)).await;
///     snap = gw.sources("LLM").await?.remove(0);
/// }
/// assert_eq!((snap.attempts, snap.failures, snap.successes), (2, 1, 1));
/// assert_eq!(snap.in_flight, 0);
/// // The default pacer, still in slow start: a 503 is no pacing signal.
/// assert_eq!((snap.pacer_mode, snap.pacer_signal.as_str()), ("adaptive", "none"));
/// assert!(snap.health > 0.0 && snap.health <= 1.0);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SourceSnapshot {
    /// Source name.
    pub name: String,
    /// Breaker state (`None` if the breaker backend could not be read).
    pub breaker: Option<BreakerState>,
    /// Breaker epoch (number of openings in the store's lifetime).
    pub epoch: u64,
    /// Remaining breaker cooldown.
    pub breaker_retry_after: Duration,
    /// Whether a half-open probe is held right now.
    pub probe_held: bool,
    /// Remaining local cooldown memo.
    pub cooling_for: Duration,
    /// Health score in `[0, 1]`.
    pub health: f64,
    /// Calls currently holding a pacer slot.
    pub in_flight: u32,
    /// The pacer's current limit.
    pub pacer_limit: u32,
    /// The pacer's mode (`adaptive`, `aimd`, `off`, `custom`).
    pub pacer_mode: &'static str,
    /// The last signal the pacer reacted to (`none`, `rate_limited`, `quota_low`, `queueing`).
    pub pacer_signal: PacerSignal,
    /// Attempts sent.
    pub attempts: u64,
    /// Successful attempts.
    pub successes: u64,
    /// Transient failures.
    pub failures: u64,
    /// 429 pushbacks.
    pub rate_limited: u64,
    /// Source-dead answers.
    pub dead: u64,
    /// Cancelled attempts (hedge losers included).
    pub cancelled: u64,
    /// Hedges of first tokens sent to this source (docs/behaviour.md §5.9).
    pub hedges: u64,
    /// Of those, the ones that produced the first token and answered their call.
    pub hedges_won: u64,
    /// Streams cut on another source that this source continued (docs/behaviour.md §5.10).
    pub continuations: u64,
    /// Admissions refused by the breaker.
    pub breaker_refusals: u64,
    /// The structured mode typed calls are sent in now (chat sources; `None` otherwise).
    /// Weaker than [`SourceSnapshot::structured_mode_configured`] after the source refused a
    /// mode and fell back.
    pub structured_mode: Option<StructuredMode>,
    /// The mode the source was configured with (`STRUCTURED_MODE`, else its provider's).
    pub structured_mode_configured: Option<StructuredMode>,
    /// Requests re-sent at once on a fresh connection because the pooled one had been closed by
    /// the upstream before any answer (chat sources; not attempts, not failures).
    pub resends: u64,
    /// How long an idle pooled connection to the source is kept now: `POOL_IDLE_TIMEOUT_S`, or
    /// lower once the upstream announced a shorter `Keep-Alive: timeout=` (chat and embedding
    /// sources whose client the gateway built; `None` otherwise).
    pub pool_idle_timeout: Option<Duration>,
}

/// A scope seen without its transport type: enough for snapshots and chaos hooks.
pub(crate) trait ErasedScope: Send + Sync {
    fn scope_name(&self) -> &str;
    fn source_names(&self) -> Vec<Arc<str>>;
    /// One source's shared values, as a snapshot without the breaker part.
    fn source_view(&self, index: usize, now: std::time::Instant)
        -> (SourceSnapshot, BreakerConfig);
    #[cfg(feature = "test-util")]
    fn crash_source(&self, index: usize);
    #[cfg(feature = "test-util")]
    fn crash_admission(&self);
}

impl<T: polygateway_actors::Transport> ErasedScope for Scope<T> {
    fn scope_name(&self) -> &str {
        &self.config().name
    }

    fn source_names(&self) -> Vec<Arc<str>> {
        self.sources().iter().map(|s| Arc::clone(&s.name)).collect()
    }

    fn source_view(
        &self,
        index: usize,
        now: std::time::Instant,
    ) -> (SourceSnapshot, BreakerConfig) {
        let source = &self.sources()[index];
        (view(source, now), source.breaker.clone())
    }

    #[cfg(feature = "test-util")]
    fn crash_source(&self, index: usize) {
        Scope::crash_source(self, index, "injected failure");
    }

    #[cfg(feature = "test-util")]
    fn crash_admission(&self) {
        Scope::crash_admission(self, "injected failure");
    }
}

pub(crate) async fn collect(core: &Core, entry: &ScopeEntry) -> Vec<SourceSnapshot> {
    let scope = entry.erased();
    let now = core.runtime.clock().now();
    let mut out = Vec::new();
    for index in 0..scope.source_names().len() {
        let (mut snapshot, config) = scope.source_view(index, now);
        if let Ok(b) = core
            .governance
            .breakers
            .snapshot(scope.scope_name(), &snapshot.name, &config)
            .await
        {
            snapshot.breaker = Some(b.state);
            snapshot.epoch = b.epoch;
            snapshot.breaker_retry_after = b.retry_after;
            snapshot.probe_held = b.probe_held;
        }
        if let ScopeEntry::Chat(chat) = entry {
            let mode = chat.scope.sources()[index].transport.source_mode();
            snapshot.structured_mode = Some(mode.current());
            snapshot.structured_mode_configured = Some(mode.configured());
            snapshot.resends = chat.scope.sources()[index].transport.resends();
            snapshot.pool_idle_timeout = chat.scope.sources()[index].transport.pool_idle_timeout();
        }
        if let ScopeEntry::Embeddings(embed) = entry {
            snapshot.pool_idle_timeout = embed.scope.sources()[index].transport.pool_idle_timeout();
        }
        out.push(snapshot);
    }
    out
}

fn view<T>(source: &SourceShared<T>, now: std::time::Instant) -> SourceSnapshot {
    let c = &source.counters;
    SourceSnapshot {
        name: source.name.to_string(),
        breaker: None,
        epoch: 0,
        breaker_retry_after: Duration::ZERO,
        probe_held: false,
        cooling_for: source
            .cooling_until(now)
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now)),
        health: source.health(),
        in_flight: source.in_flight(),
        pacer_limit: source.pacer_limit(),
        pacer_mode: source.pacer_mode(),
        pacer_signal: source.pacer_signal(),
        attempts: c.attempts.load(Ordering::Relaxed),
        successes: c.successes.load(Ordering::Relaxed),
        failures: c.failures.load(Ordering::Relaxed),
        rate_limited: c.rate_limited.load(Ordering::Relaxed),
        dead: c.dead.load(Ordering::Relaxed),
        cancelled: c.cancelled.load(Ordering::Relaxed),
        hedges: c.hedges.load(Ordering::Relaxed),
        hedges_won: c.hedges_won.load(Ordering::Relaxed),
        continuations: c.continuations.load(Ordering::Relaxed),
        breaker_refusals: c.breaker_refusals.load(Ordering::Relaxed),
        structured_mode: None,
        structured_mode_configured: None,
        resends: 0,
        pool_idle_timeout: None,
    }
}
