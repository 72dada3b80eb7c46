//! Per-source values the router reads without a round trip.
//!
//! The source actor is the only writer of its policy outputs (health score, pacer limit); the
//! router reads them to select. The cooldown memo is written with a fetch-max by the call that
//! learns of a refusal, so the next selection sees it at once. In-flight is the one counter written by call tasks: a
//! [`SourceTicket`] increments it when selection picks the source and decrements it on drop, so a
//! cancelled call can never leak a slot.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use crate::outcome::AttemptVerdict;
use crate::ports::breaker::BreakerState;

use super::metrics::SourceMetrics;
use super::slot::ActorSlot;
use super::source::SourceMsg;

use crate::ports::breaker::BreakerConfig;

/// Counters of one source since the runtime started (monotonic).
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
}

/// What the router and handles can read about one source without messaging its actor.
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
    health_bits: AtomicU64,
    cooling_until_ms: AtomicU64,
    origin: Instant,
    /// Scope-wide signal: a pacer slot was freed somewhere in the scope.
    slot_freed: Arc<Notify>,
    /// The source actor's current incarnation (kept by its supervisor, the router), so call
    /// tasks report to it in one hop.
    actor: ActorSlot<SourceMsg>,
    /// Breaker state the last admission saw (`u8::MAX` = none yet), for the metrics.
    breaker_seen: AtomicU8,
    pub(crate) metrics: SourceMetrics,
    /// Monotonic counters.
    pub counters: SourceCounters,
}

impl<T> SourceShared<T> {
    /// Shared values of a fresh source. `origin` anchors the millisecond clock of the cooldown
    /// memo (any instant before the first use); `slot_freed` is the scope's signal that a pacer
    /// slot came back (one per scope, shared by its sources).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        name: Arc<str>,
        transport: Arc<T>,
        breaker: BreakerConfig,
        limits: crate::ports::gate::Limits,
        est_tokens: u64,
        initial_pacer_limit: u32,
        origin: Instant,
        slot_freed: Arc<Notify>,
        metrics: SourceMetrics,
    ) -> Self {
        metrics.pacer_limit.set(f64::from(initial_pacer_limit));
        Self {
            index,
            name,
            transport,
            breaker,
            limits,
            est_tokens,
            in_flight: AtomicU32::new(0),
            pacer_limit: AtomicU32::new(initial_pacer_limit),
            health_bits: AtomicU64::new(1.0f64.to_bits()),
            cooling_until_ms: AtomicU64::new(0),
            origin,
            slot_freed,
            actor: ActorSlot::down("source actor starting"),
            breaker_seen: AtomicU8::new(u8::MAX),
            metrics,
            counters: SourceCounters::default(),
        }
    }

    /// Calls currently holding a ticket for this source.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The pacer's current concurrency limit.
    pub fn pacer_limit(&self) -> u32 {
        self.pacer_limit.load(Ordering::Acquire)
    }

    /// The health score in `[0, 1]`.
    pub fn health(&self) -> f64 {
        f64::from_bits(self.health_bits.load(Ordering::Acquire))
    }

    /// When the local cooldown memo ends (`None` if not cooling at `now`).
    pub fn cooling_until(&self, now: Instant) -> Option<Instant> {
        let until = self.cooling_until_ms.load(Ordering::Acquire);
        let now_ms = self.millis(now);
        (until > now_ms).then(|| self.origin + std::time::Duration::from_millis(until))
    }

    /// Try to take a pacer slot: succeeds while in-flight is below the pacer limit.
    pub fn try_enter(self: &Arc<Self>) -> Option<SourceTicket<T>> {
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
                    self.metrics.in_flight.increment(1.0);
                    return Some(SourceTicket {
                        source: Arc::clone(self),
                    });
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Tell the source actor how an attempt ended. Lost while the actor restarts: its policies
    /// start afresh anyway.
    pub(crate) fn report(&self, verdict: AttemptVerdict) {
        if let Ok(actor) = self.actor.get() {
            let _ = actor.cast(SourceMsg::Report(verdict));
        }
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

    pub(crate) fn publish_pacer_limit(&self, limit: u32) {
        self.pacer_limit.store(limit.max(1), Ordering::Release);
        self.metrics.pacer_limit.set(f64::from(limit.max(1)));
    }

    /// An admission saw the breaker in `state` (metrics only).
    pub(crate) fn breaker_seen(&self, state: BreakerState) {
        let code = match state {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        };
        let previous = match self.breaker_seen.swap(code, Ordering::AcqRel) {
            0 => Some(BreakerState::Closed),
            1 => Some(BreakerState::Open),
            2 => Some(BreakerState::HalfOpen),
            _ => None,
        };
        self.metrics.breaker_seen(previous, state);
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
        t.saturating_duration_since(self.origin).as_millis() as u64
    }
}

/// A pacer slot on one source, held for the whole attempt. Dropping it frees the slot.
#[derive(Debug)]
pub struct SourceTicket<T> {
    source: Arc<SourceShared<T>>,
}

impl<T> SourceTicket<T> {
    /// The source this ticket is for.
    pub fn source(&self) -> &Arc<SourceShared<T>> {
        &self.source
    }
}

impl<T> Drop for SourceTicket<T> {
    fn drop(&mut self) {
        self.source.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.source.metrics.in_flight.decrement(1.0);
        // One freed slot wakes one call waiting on a full pacer (or is remembered for the next).
        self.source.slot_freed.notify_one();
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
            Arc::new(Notify::new()),
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
