//! A live, read-only view of every source of a scope: breaker, health, pacer, counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::runtime::{Scope, SourceShared};
use polygateway_actors::{BreakerSnapshot, BreakerState};

use super::{Core, ScopeEntry};

/// The state of one source at one moment.
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
    /// The AIMD pacer's current limit.
    pub pacer_limit: u32,
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
    /// Cancelled attempts.
    pub cancelled: u64,
    /// Admissions refused by the breaker.
    pub breaker_refusals: u64,
}

pub(crate) async fn collect(core: &Core, scope: &str) -> Vec<SourceSnapshot> {
    match core.scopes.get(scope) {
        Some(ScopeEntry::Chat(s)) => of_scope(core, &s.scope).await,
        Some(ScopeEntry::Embeddings(s)) => of_scope(core, &s.scope).await,
        Some(ScopeEntry::Ocr(s)) => of_scope(core, &s.scope).await,
        None => Vec::new(),
    }
}

async fn of_scope<T: polygateway_actors::Transport>(
    core: &Core,
    scope: &Scope<T>,
) -> Vec<SourceSnapshot> {
    let mut out = Vec::with_capacity(scope.sources().len());
    for source in scope.sources() {
        let breaker = core
            .governance
            .breakers
            .snapshot(&scope.config().name, &source.name, &source.breaker)
            .await
            .ok();
        out.push(one(core, source, breaker));
    }
    out
}

fn one<T>(
    core: &Core,
    source: &Arc<SourceShared<T>>,
    breaker: Option<BreakerSnapshot>,
) -> SourceSnapshot {
    let now = core.runtime.clock().now();
    let c = &source.counters;
    SourceSnapshot {
        name: source.name.to_string(),
        breaker: breaker.as_ref().map(|b| b.state),
        epoch: breaker.as_ref().map_or(0, |b| b.epoch),
        breaker_retry_after: breaker.as_ref().map_or(Duration::ZERO, |b| b.retry_after),
        probe_held: breaker.as_ref().is_some_and(|b| b.probe_held),
        cooling_for: source
            .cooling_until(now)
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now)),
        health: source.health(),
        in_flight: source.in_flight(),
        pacer_limit: source.pacer_limit(),
        attempts: c.attempts.load(Ordering::Relaxed),
        successes: c.successes.load(Ordering::Relaxed),
        failures: c.failures.load(Ordering::Relaxed),
        rate_limited: c.rate_limited.load(Ordering::Relaxed),
        dead: c.dead.load(Ordering::Relaxed),
        cancelled: c.cancelled.load(Ordering::Relaxed),
        breaker_refusals: c.breaker_refusals.load(Ordering::Relaxed),
    }
}
