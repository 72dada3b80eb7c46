//! Per-source values the router reads without a round trip.
//!
//! The source actor is the only writer of its policy outputs (health score, pacer limit, mode and
//! last signal); the
//! router reads them to select. The cooldown memo is written with a fetch-max by the call that
//! learns of a refusal, so the next selection sees it at once. In-flight is the one counter written by call tasks: a
//! `SourceTicket` increments it when selection picks the source and decrements it on drop, so a
//! cancelled call can never leak a slot.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::clock::millis_since;
use crate::outcome::AttemptVerdict;
use crate::policy::pacer::{Pacer, PacerObservation, PacerSignal};

use super::metrics::SourceMetrics;
use super::slot::ActorSlot;
use super::source_msg::SourceMsg;
use super::waiting_room::WaitingRoom;

use crate::ports::breaker::BreakerConfig;

/// Counters of one source since the runtime started (monotonic).
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use std::sync::atomic::Ordering;
/// scope.call(&"one".to_string(), &NoObserver, None, GovernOptions::default()).await.unwrap();
/// // A caller that gives up mid-attempt leaves a cancelled attempt behind.
/// let hang = "hang".to_string();
/// let slow = scope.call(&hang, &NoObserver, None, GovernOptions::default());
/// assert!(tokio::time::timeout(Duration::from_millis(200), slow).await.is_err());
///
/// let counters = &scope.sources()[0].counters;
/// assert_eq!(counters.attempts.load(Ordering::Relaxed), 2);
/// assert_eq!(counters.cancelled.load(Ordering::Relaxed), 1);
/// assert_eq!(counters.breaker_refusals.load(Ordering::Relaxed), 0);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug, Default)]
pub struct SourceCounters {
    /// Attempts sent to the transport.
    pub attempts: AtomicU64,
    /// Successful attempts.
    pub successes: AtomicU64,
    /// Transient failures (429 excluded).
    pub failures: AtomicU64,
    /// 429 pushbacks.
    pub rate_limited: AtomicU64,
    /// Source-dead answers.
    pub dead: AtomicU64,
    /// Rejected or unusable answers (service alive).
    pub unusable: AtomicU64,
    /// Attempts cancelled by their caller.
    pub cancelled: AtomicU64,
    /// Admissions the breaker refused.
    pub breaker_refusals: AtomicU64,
    /// Breaker openings observed by this process (state changes to open).
    pub opens: AtomicU64,
    /// Hedges sent to this source (docs/behaviour.md §5.9).
    pub hedges: AtomicU64,
    /// Hedges sent to this source that produced the first token (and answered the call).
    pub hedges_won: AtomicU64,
    /// Streams cut on another source that this source continued (docs/behaviour.md §5.10).
    pub continuations: AtomicU64,
}

impl SourceCounters {
    /// One more attempt that ended with `verdict`.
    fn count(&self, verdict: AttemptVerdict) {
        let counter = match verdict {
            AttemptVerdict::Success => &self.successes,
            AttemptVerdict::RateLimited => &self.rate_limited,
            AttemptVerdict::Failure => &self.failures,
            AttemptVerdict::Dead => &self.dead,
            AttemptVerdict::AliveButUnusable => &self.unusable,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the router and handles can read about one source without messaging its actor.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::ScopeConfig;
/// # use polygateway_actors::Limits;
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut spec = echo("openai_1");
/// spec.limits = Limits { max_concurrency: 4, rpm: 600, tpm: 0 };
/// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![spec]).await;
/// // A status page reads every source without a round trip to its actor.
/// for source in scope.sources() {
///     assert_eq!((source.index, &*source.name), (0, "openai_1"));
///     assert_eq!(source.limits.rpm, 600);
///     assert_eq!(source.in_flight(), 0);
/// }
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct SourceShared<T> {
    /// Position in the scope's source list.
    pub index: usize,
    /// Source name.
    pub name: Arc<str>,
    /// The source's transport (used by call tasks directly).
    pub transport: Arc<T>,
    /// Breaker parameters of this source.
    pub breaker: BreakerConfig,
    /// Source limits (concurrency / RPM / TPM).
    pub limits: crate::ports::gate::Limits,
    /// `effective_est_tokens` of this source.
    pub est_tokens: u64,
    in_flight: AtomicU32,
    pacer_limit: AtomicU32,
    pacer_mode: std::sync::OnceLock<&'static str>,
    pacer_signal: AtomicU8,
    health_bits: AtomicU64,
    cooling_until_ms: AtomicU64,
    origin: Instant,
    /// Told whenever a pacer slot of this source is freed (the scope's waiting room).
    freed: Arc<WaitingRoom>,
    /// The shortest time recent successful attempts took, in µs (`u64::MAX`: none yet).
    attempt_floor_us: AtomicU64,
    /// The source actor's current incarnation (kept by its supervisor, the router), so call
    /// tasks report to it in one hop.
    actor: ActorSlot<SourceMsg>,
    pub(crate) metrics: SourceMetrics,
    /// Monotonic counters.
    pub counters: SourceCounters,
    /// Time to first token, as hedging learns it (`hedge.rs`).
    pub(crate) first_token: super::hedge::FirstTokenLatency,
}

impl<T> SourceShared<T> {
    /// Shared values of a fresh source. `origin` anchors the millisecond clock of the cooldown
    /// memo (any instant before the first use); `freed` is told when a pacer slot comes back
    /// (the scope's waiting room, one per scope, shared by its sources).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        name: Arc<str>,
        transport: Arc<T>,
        breaker: BreakerConfig,
        limits: crate::ports::gate::Limits,
        est_tokens: u64,
        initial_pacer_limit: u32,
        origin: Instant,
        freed: Arc<WaitingRoom>,
        metrics: SourceMetrics,
    ) -> Self {
        metrics.pacer_limit(initial_pacer_limit);
        let actor = ActorSlot::starting(format!("source actor {name}"));
        Self {
            index,
            name,
            transport,
            breaker,
            limits,
            est_tokens,
            in_flight: AtomicU32::new(0),
            pacer_limit: AtomicU32::new(initial_pacer_limit),
            pacer_mode: std::sync::OnceLock::new(),
            pacer_signal: AtomicU8::new(PacerSignal::None.code()),
            health_bits: AtomicU64::new(1.0f64.to_bits()),
            cooling_until_ms: AtomicU64::new(0),
            origin,
            freed,
            attempt_floor_us: AtomicU64::new(u64::MAX),
            actor,
            metrics,
            counters: SourceCounters::default(),
            first_token: super::hedge::FirstTokenLatency::default(),
        }
    }

    /// Calls currently holding a ticket for this source.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// let source = &scope.sources()[0];
    /// let hang = "hang".to_string();
    /// let mut call = Box::pin(scope.call(&hang, &NoObserver, None, GovernOptions::default()));
    /// // While its attempt runs, the call holds one pacer slot …
    /// assert!(tokio::time::timeout(Duration::from_millis(200), &mut call).await.is_err());
    /// assert_eq!(source.in_flight(), 1);
    /// // … and dropping the call gives it back.
    /// drop(call);
    /// assert_eq!(source.in_flight(), 0);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The pacer's current concurrency limit.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::ScopeConfig;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use polygateway_actors::policy::pacer::AIMD_START;
    /// // A fresh source starts at its pacer's starting limit (the testkit runs the AIMD pacer).
    /// assert_eq!(scope.sources()[0].pacer_limit(), AIMD_START as u32);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn pacer_limit(&self) -> u32 {
        self.pacer_limit.load(Ordering::Acquire)
    }

    /// The pacer's mode (`adaptive`, `aimd`, `off`, `custom`; `starting` before its actor ran).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::ScopeConfig;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use polygateway_actors::policy::pacer::PacerSignal;
    /// let source = &scope.sources()[0];
    /// assert_eq!(source.pacer_mode(), "aimd");
    /// // Nothing has pushed back yet.
    /// assert_eq!(source.pacer_signal(), PacerSignal::None);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn pacer_mode(&self) -> &'static str {
        self.pacer_mode.get().copied().unwrap_or("starting")
    }

    /// The last signal the pacer reacted to (429, low quota headers, queueing).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use polygateway_actors::policy::pacer::PacerSignal;
    /// scope.call(&"hi".to_string(), &NoObserver, None, GovernOptions::default()).await.unwrap();
    /// // A success is no signal: the pacer still reports none (429s would say `rate_limited`).
    /// assert_eq!(scope.sources()[0].pacer_signal(), PacerSignal::None);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn pacer_signal(&self) -> PacerSignal {
        PacerSignal::from_code(self.pacer_signal.load(Ordering::Acquire))
    }

    /// The health score in `[0, 1]`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::ScopeConfig;
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// // A new source is presumed healthy; failures pull the score down, successes back up.
    /// assert_eq!(scope.sources()[0].health(), 1.0);
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn health(&self) -> f64 {
        f64::from_bits(self.health_bits.load(Ordering::Acquire))
    }

    /// When the local cooldown memo ends (`None` if not cooling at `now`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
    /// # use polygateway_actors::testkit::{echo, start};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
    /// use std::time::Instant;
    /// use polygateway_actors::runtime::{CallFailure, ScopeReason};
    /// let source = &scope.sources()[0];
    /// assert_eq!(source.cooling_until(Instant::now()), None);
    /// // The source answers "dead": it is skipped for its breaker cooldown.
    /// let failure = scope.call(&"dead".to_string(), &NoObserver, None, GovernOptions::default()).await;
    /// assert!(matches!(failure, Err(CallFailure::Unavailable { reason: ScopeReason::CircuitOpen, .. })));
    /// let now = Instant::now();
    /// assert!(source.cooling_until(now).is_some_and(|until| until > now));
    /// # runtime.shutdown(Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub fn cooling_until(&self, now: Instant) -> Option<Instant> {
        let until = self.cooling_until_ms.load(Ordering::Acquire);
        let now_ms = self.millis(now);
        (until > now_ms).then(|| self.origin + std::time::Duration::from_millis(until))
    }

    /// Try to take a pacer slot: succeeds while in-flight is below the pacer limit.
    pub(crate) fn try_enter(self: &Arc<Self>) -> Option<SourceTicket<T>> {
        let limit = self.pacer_limit();
        let mut current = self.in_flight.load(Ordering::Acquire);
        loop {
            if current >= limit {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.metrics.in_flight(1);
                    return Some(SourceTicket {
                        source: Arc::clone(self),
                    });
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Count how an attempt ended and tell the source actor. The counter is bumped here, in the
    /// call's task, so a snapshot read after the call returned already includes its attempt (the
    /// actor handles the cast later). The cast is lost while the actor restarts: its policies
    /// start afresh anyway; the counters are not lost.
    pub(crate) fn report(&self, attempt: PacerObservation) {
        self.counters.count(attempt.verdict);
        if attempt.verdict == AttemptVerdict::Success {
            self.note_success_latency(attempt.latency);
        }
        if let Ok(actor) = self.actor.get() {
            let _ = actor.cast(SourceMsg::Report(attempt));
        }
    }

    /// The shortest time an attempt on this source is expected to take: a floor that follows
    /// the fastest recent successes (zero while none is known). A call whose deadline leaves
    /// less does not start an attempt here (docs/behaviour.md §5.7).
    pub(crate) fn attempt_floor(&self) -> std::time::Duration {
        match self.attempt_floor_us.load(Ordering::Acquire) {
            u64::MAX => std::time::Duration::ZERO,
            us => std::time::Duration::from_micros(us),
        }
    }

    /// A faster success lowers the floor at once; slower ones raise it by 1/16 of the gap, so
    /// the floor follows a source that got slower without trusting one slow answer.
    fn note_success_latency(&self, latency: std::time::Duration) {
        let sample = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX - 1);
        let _ = self
            .attempt_floor_us
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |floor| {
                Some(if floor == u64::MAX || sample <= floor {
                    sample
                } else {
                    floor + (sample - floor) / 16
                })
            });
    }

    /// Skip this source locally until `until` (its breaker refused or it is dead). Written here,
    /// not through the actor: the very next selection of the same call must already see it, and
    /// a fetch-max never moves the memo backwards whoever writes it.
    pub(crate) fn cool_until(&self, until: Instant) {
        self.publish_cooling_until(until);
    }

    pub(crate) fn actor_slot(&self) -> &ActorSlot<SourceMsg> {
        &self.actor
    }

    pub(crate) fn publish_pacer(&self, pacer: &dyn Pacer) {
        let limit = pacer.limit().max(1);
        self.pacer_limit.store(limit, Ordering::Release);
        self.pacer_signal
            .store(pacer.last_signal().code(), Ordering::Release);
        let _ = self.pacer_mode.set(pacer.mode());
        self.metrics.pacer_limit(limit);
    }

    pub(crate) fn publish_health(&self, score: f64) {
        self.health_bits.store(score.to_bits(), Ordering::Release);
    }

    /// Extend the cooldown memo to `until`; it never moves backwards.
    fn publish_cooling_until(&self, until: Instant) {
        self.cooling_until_ms
            .fetch_max(self.millis(until), Ordering::AcqRel);
    }

    fn millis(&self, t: Instant) -> u64 {
        millis_since(self.origin, t)
    }
}

/// A pacer slot on one source, held for the whole attempt. Dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct SourceTicket<T> {
    source: Arc<SourceShared<T>>,
}

impl<T> SourceTicket<T> {
    /// The source this ticket is for.
    pub(crate) fn source(&self) -> &Arc<SourceShared<T>> {
        &self.source
    }
}

impl<T> Drop for SourceTicket<T> {
    fn drop(&mut self) {
        self.source.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.source.metrics.in_flight(-1);
        // A freed slot gives the next waiting call its turn (two atomic operations when
        // nobody waits).
        self.source.freed.capacity_freed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn shared(limit: u32) -> Arc<SourceShared<()>> {
        Arc::new(SourceShared::new(
            0,
            "a_1".into(),
            Arc::new(()),
            BreakerConfig::default(),
            Default::default(),
            0,
            limit,
            Instant::now(),
            Arc::new(WaitingRoom::new(Arc::new(crate::clock::TokioClock))),
            SourceMetrics::new("test", "a_1"),
        ))
    }

    #[test]
    fn tickets_respect_the_pacer_limit_and_free_on_drop() {
        let s = shared(2);
        let a = s.try_enter().unwrap();
        let _b = s.try_enter().unwrap();
        assert!(s.try_enter().is_none());
        drop(a);
        assert_eq!(s.in_flight(), 1);
        assert!(s.try_enter().is_some());
    }

    /// The counters include an attempt as soon as its call returned: the issue saw
    /// `attempts=100 ok=99` right after every call had returned, because the source actor bumped
    /// them when it got round to the report.
    #[cfg(feature = "testkit")]
    #[tokio::test(flavor = "current_thread")]
    async fn counters_include_an_attempt_when_its_call_returns() {
        use crate::runtime::{GovernOptions, NoObserver, ScopeConfig};
        use crate::testkit::{echo, start};
        let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
        let call = |text: &str| {
            let text = text.to_string();
            let scope = scope.clone();
            async move {
                scope
                    .call(&text, &NoObserver, None, GovernOptions::default())
                    .await
            }
        };
        let counters = &scope.sources()[0].counters;
        for n in 1..=5u64 {
            call("one").await.unwrap();
            // Read without yielding: nothing else ran since the call's future resolved.
            assert_eq!(counters.attempts.load(Ordering::Relaxed), n);
            assert_eq!(counters.successes.load(Ordering::Relaxed), n);
        }
        call("reject").await.unwrap_err();
        assert_eq!(counters.unusable.load(Ordering::Relaxed), 1);
        runtime.shutdown(Duration::from_secs(1)).await;
    }

    #[test]
    fn the_attempt_floor_follows_the_fastest_successes() {
        let s = shared(1);
        assert_eq!(s.attempt_floor(), Duration::ZERO);
        s.note_success_latency(Duration::from_millis(200));
        s.note_success_latency(Duration::from_millis(100));
        assert_eq!(s.attempt_floor(), Duration::from_millis(100));
        // One slow answer moves it up by a sixteenth of the gap only.
        s.note_success_latency(Duration::from_millis(1700));
        assert_eq!(s.attempt_floor(), Duration::from_millis(200));
    }

    #[test]
    fn cooldown_memo_never_moves_backwards() {
        let s = shared(1);
        let now = Instant::now();
        s.publish_cooling_until(now + Duration::from_secs(10));
        s.publish_cooling_until(now + Duration::from_secs(5));
        let until = s.cooling_until(now).unwrap();
        assert!(until >= now + Duration::from_millis(9_999));
        assert!(s.cooling_until(now + Duration::from_secs(11)).is_none());
    }
}
