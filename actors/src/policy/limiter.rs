//! The six-gate limiter state machine (docs/behaviour.md §5.3), sans I/O: what [`crate::memory::MemoryGate`]
//! runs under its lock, and the reference the Redis script mirrors.
//!
//! Time is `now_ms`, milliseconds since an origin chosen by the backend. Rate windows are fixed:
//! window `index = now_ms / window_ms` (60 s by default; shorter in real-time tests).
//!
//! Rules:
//! - `admit` rolls the windows, reclaims expired leases (lazily, only once the earliest expiry
//!   has passed), then checks in order global/source concurrency, global/source RPM,
//!   global/source TPM. The first refusal returns with nothing counted; otherwise all six count.
//! - A re-sent admission with a lease id that already exists returns that lease unchanged.
//! - `release` frees both concurrency slots once; `settle(actual)` replaces the pre-deducted
//!   estimate in the admission window once (a window that already rolled over is left alone —
//!   it can no longer refuse anyone). An expired lease is forgotten when it is reclaimed: a later
//!   release/settle of it is a no-op and never frees a slot someone else now holds.
//!
//! Not for: waiting, polling or jitter (callers do that with the `retry_after` hint).

use std::sync::Arc;
use std::time::Duration;

use crate::policy::breaker::duration_ms;
use crate::policy::FastMap;
use crate::ports::gate::{Gate, GateDecision, GateRequest, Lease, Limits};

/// Default rate-window length (the "per minute" of RPM/TPM).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::{LimiterState, DEFAULT_WINDOW};
/// // The "per minute" of RPM and TPM.
/// assert_eq!(DEFAULT_WINDOW, Duration::from_secs(60));
/// assert_eq!(LimiterState::default().window(), DEFAULT_WINDOW);
/// ```
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Longest hint given for a full concurrency gate: slots usually free on release, long before
/// the earliest lease expiry.
pub(crate) const LEASE_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, Default)]
struct Window {
    index: u64,
    used: u64,
}

impl Window {
    fn roll(&mut self, index: u64) {
        if self.index != index {
            *self = Window { index, used: 0 };
        }
    }
}

/// Counters of one gate pair member (the scope-wide one or one source).
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    held: u64,
    rpm: Window,
    tpm: Window,
}

#[derive(Debug)]
struct LeaseRecord {
    source: Arc<str>,
    expires_ms: u64,
    est_tokens: u64,
    window: u64,
    held: bool,
    settled: bool,
}

#[derive(Debug)]
struct ScopeState {
    global: Counters,
    sources: FastMap<Arc<str>, Counters>,
    leases: FastMap<Arc<str>, LeaseRecord>,
    /// Earliest `expires_ms` among stored leases; `u64::MAX` when none.
    next_expiry_ms: u64,
    last_progress_ms: Option<u64>,
}

impl ScopeState {
    fn new() -> Self {
        Self {
            global: Counters::default(),
            sources: FastMap::default(),
            leases: FastMap::default(),
            next_expiry_ms: u64::MAX,
            last_progress_ms: None,
        }
    }

    /// Drop every lease whose TTL has passed, freeing the slots of those still held.
    fn reclaim(&mut self, now_ms: u64) {
        if now_ms < self.next_expiry_ms {
            return;
        }
        let Self {
            global,
            sources,
            leases,
            next_expiry_ms,
            ..
        } = self;
        let mut next = u64::MAX;
        leases.retain(|_, r| {
            if r.expires_ms > now_ms {
                next = next.min(r.expires_ms);
                return true;
            }
            if r.held {
                global.held = global.held.saturating_sub(1);
                if let Some(s) = sources.get_mut(&r.source) {
                    s.held = s.held.saturating_sub(1);
                }
            }
            false
        });
        *next_expiry_ms = next;
    }
}

/// Read-only counters of one scope or source at a given time.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::{GateRequest, Limits};
/// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
/// #     GateRequest {
/// #         scope: "LLM".into(), source: "openai_1".into(),
/// #         global: Limits::default(), per_source,
/// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
/// #     }
/// # }
/// use polygateway_actors::policy::limiter::{LimiterState, Usage};
/// let mut l = LimiterState::default();
/// l.admit(&req("1", Limits::default(), 400), 0);
/// let u: Usage = l.usage("LLM", Some("openai_1"), 0);
/// assert_eq!(u, Usage { leases: 1, requests: 1, tokens: 400 });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Concurrency leases held.
    pub leases: u64,
    /// Requests counted in the current window.
    pub requests: u64,
    /// Tokens counted in the current window.
    pub tokens: u64,
}

/// In-memory state of every scope's six gates.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::policy::limiter::LimiterState;
/// use polygateway_actors::{Gate, GateDecision, GateRequest, Limits};
///
/// let mut l = LimiterState::default();
/// let req = |id: &str| GateRequest {
///     scope: "LLM".into(), source: "a_1".into(),
///     global: Limits::default(),
///     per_source: Limits { max_concurrency: 1, rpm: 0, tpm: 0 },
///     est_tokens: 0, lease_id: Arc::from(id), lease_ttl: Duration::from_secs(60),
/// };
/// assert!(matches!(l.admit(&req("a"), 0), GateDecision::Admitted(_)));
/// assert!(matches!(
///     l.admit(&req("b"), 0),
///     GateDecision::Refused { gate: Gate::SourceConcurrency, .. }
/// ));
/// ```
#[derive(Debug)]
pub struct LimiterState {
    window_ms: u64,
    /// Latest `now_ms` seen by `admit`: time never runs backwards inside the state, so a caller
    /// that read its clock slightly earlier cannot roll a window back.
    last_now_ms: u64,
    scopes: FastMap<Arc<str>, ScopeState>,
}

impl Default for LimiterState {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW)
    }
}

fn refuse(gate: Gate, ms: u64) -> GateDecision {
    GateDecision::Refused {
        gate,
        retry_after: Duration::from_millis(ms.max(1)),
    }
}

/// Whether `gate` is full for `c` under `limits` if `est` more tokens were taken.
fn is_full(gate: Gate, c: &Counters, limits: &Limits, est: u64) -> bool {
    match gate {
        Gate::GlobalConcurrency | Gate::SourceConcurrency => {
            limits.max_concurrency > 0 && c.held >= u64::from(limits.max_concurrency)
        }
        Gate::GlobalRpm | Gate::SourceRpm => limits.rpm > 0 && c.rpm.used >= u64::from(limits.rpm),
        Gate::GlobalTpm | Gate::SourceTpm => {
            limits.tpm > 0 && c.tpm.used.saturating_add(est) > limits.tpm
        }
    }
}

/// The order of docs/behaviour.md §5.3: the first full gate in this order is reported.
const GATE_ORDER: [Gate; 6] = [
    Gate::GlobalConcurrency,
    Gate::SourceConcurrency,
    Gate::GlobalRpm,
    Gate::SourceRpm,
    Gate::GlobalTpm,
    Gate::SourceTpm,
];

fn count(c: &mut Counters, est: u64) {
    c.held += 1;
    c.rpm.used += 1;
    c.tpm.used = c.tpm.used.saturating_add(est);
}

impl LimiterState {
    /// Empty state with rate windows of `window` (clamped to ≥ 1 ms).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// use polygateway_actors::GateDecision;
    /// // One-second windows: an RPM of 1 becomes one request per second.
    /// let mut l = LimiterState::new(Duration::from_secs(1));
    /// let one = Limits { rpm: 1, ..Limits::default() };
    /// assert!(matches!(l.admit(&req("1", one, 0), 0), GateDecision::Admitted(_)));
    /// assert!(matches!(l.admit(&req("2", one, 0), 500), GateDecision::Refused { .. }));
    /// assert!(matches!(l.admit(&req("2", one, 0), 1_000), GateDecision::Admitted(_)));
    /// ```
    pub fn new(window: Duration) -> Self {
        Self {
            window_ms: duration_ms(window).max(1),
            last_now_ms: 0,
            scopes: FastMap::default(),
        }
    }

    /// The rate-window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// assert_eq!(LimiterState::new(Duration::from_secs(10)).window(), Duration::from_secs(10));
    /// // Clamped: a zero window would divide by zero.
    /// assert_eq!(LimiterState::new(Duration::ZERO).window(), Duration::from_millis(1));
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// The window index at `now_ms` (what [`Lease::window`] holds).
    pub(crate) fn window_index(&self, now_ms: u64) -> u64 {
        now_ms / self.window_ms
    }

    /// Check all six gates; count all of them or nothing. See the module docs.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// use polygateway_actors::{Gate, GateDecision};
    /// let tpm = Limits { tpm: 1_000, ..Limits::default() };
    /// let mut l = LimiterState::default(); // 60 s windows
    /// let first = l.admit(&req("1", tpm, 600), 15_000);
    /// assert!(matches!(first, GateDecision::Admitted(_)));
    /// // 600 + 600 > 1 000: refused until the window ends, and nothing was counted.
    /// assert_eq!(
    ///     l.admit(&req("2", tpm, 600), 15_000),
    ///     GateDecision::Refused { gate: Gate::SourceTpm, retry_after: Duration::from_secs(45) }
    /// );
    /// assert_eq!(l.usage("LLM", None, 15_000).requests, 1);
    /// // A re-sent admission (same lease id) gets its lease back.
    /// assert_eq!(l.admit(&req("1", tpm, 600), 16_000), first);
    /// ```
    pub fn admit(&mut self, req: &GateRequest, now_ms: u64) -> GateDecision {
        let now_ms = now_ms.max(self.last_now_ms);
        self.last_now_ms = now_ms;
        let w = self.window_index(now_ms);
        let window_wait = (w + 1) * self.window_ms - now_ms;
        let scope = self
            .scopes
            .entry(req.scope.clone())
            .or_insert_with(ScopeState::new);
        scope.reclaim(now_ms);
        if let Some(r) = scope.leases.get(&req.lease_id) {
            return GateDecision::Admitted(Lease {
                scope: req.scope.clone(),
                source: r.source.clone(),
                id: req.lease_id.clone(),
                est_tokens: r.est_tokens,
                window: r.window,
            });
        }
        let lease_wait = scope
            .next_expiry_ms
            .saturating_sub(now_ms)
            .min(duration_ms(LEASE_POLL));
        let ScopeState {
            global,
            sources,
            leases,
            next_expiry_ms,
            ..
        } = scope;
        let source = sources.entry(req.source.clone()).or_default();
        for c in [&mut *global, &mut *source] {
            c.rpm.roll(w);
            c.tpm.roll(w);
        }
        let est = req.est_tokens;
        for gate in GATE_ORDER {
            let (c, limits) = if gate.is_global() {
                (&*global, &req.global)
            } else {
                (&*source, &req.per_source)
            };
            if is_full(gate, c, limits, est) {
                let wait = match gate {
                    Gate::GlobalConcurrency | Gate::SourceConcurrency => lease_wait,
                    _ => window_wait,
                };
                return refuse(gate, wait);
            }
        }
        count(global, est);
        count(source, est);
        let expires_ms = now_ms.saturating_add(duration_ms(req.lease_ttl));
        *next_expiry_ms = (*next_expiry_ms).min(expires_ms);
        leases.insert(
            req.lease_id.clone(),
            LeaseRecord {
                source: req.source.clone(),
                expires_ms,
                est_tokens: est,
                window: w,
                held: true,
                settled: false,
            },
        );
        GateDecision::Admitted(Lease {
            scope: req.scope.clone(),
            source: req.source.clone(),
            id: req.lease_id.clone(),
            est_tokens: est,
            window: w,
        })
    }

    /// Free the lease's concurrency slots. Idempotent; unknown or reclaimed leases are no-ops.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// use polygateway_actors::GateDecision;
    /// let one_at_a_time = Limits { max_concurrency: 1, ..Limits::default() };
    /// let mut l = LimiterState::default();
    /// let GateDecision::Admitted(a) = l.admit(&req("a", one_at_a_time, 0), 0) else { panic!() };
    /// assert!(matches!(l.admit(&req("b", one_at_a_time, 0), 0), GateDecision::Refused { .. }));
    /// l.release(&a);
    /// assert!(matches!(l.admit(&req("b", one_at_a_time, 0), 0), GateDecision::Admitted(_)));
    /// // Releasing `a` again does not free the slot `b` holds.
    /// l.release(&a);
    /// assert_eq!(l.leases_held("LLM", 0), 1);
    /// ```
    pub fn release(&mut self, lease: &Lease) {
        let Some(scope) = self.scopes.get_mut(&lease.scope) else {
            return;
        };
        let ScopeState {
            global,
            sources,
            leases,
            ..
        } = scope;
        let Some(r) = leases.get_mut(&lease.id) else {
            return;
        };
        if r.held {
            r.held = false;
            global.held = global.held.saturating_sub(1);
            if let Some(s) = sources.get_mut(&r.source) {
                s.held = s.held.saturating_sub(1);
            }
        }
        if r.settled {
            leases.remove(&lease.id);
        }
    }

    /// Replace the lease's pre-deducted estimate with `actual_tokens` in its admission window
    /// (both TPM gates). Idempotent; unknown or reclaimed leases are no-ops.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// use polygateway_actors::GateDecision;
    /// let tpm = Limits { tpm: 1_000, ..Limits::default() };
    /// let mut l = LimiterState::default();
    /// let GateDecision::Admitted(a) = l.admit(&req("a", tpm, 800), 0) else { panic!() };
    /// assert!(matches!(l.admit(&req("b", tpm, 800), 0), GateDecision::Refused { .. }));
    /// // The call only used 150 tokens: the 650 refunded make room for `b`.
    /// l.settle(&a, 150);
    /// l.settle(&a, 150); // idempotent
    /// assert!(matches!(l.admit(&req("b", tpm, 800), 0), GateDecision::Admitted(_)));
    /// assert_eq!(l.usage("LLM", None, 0).tokens, 950);
    /// ```
    pub fn settle(&mut self, lease: &Lease, actual_tokens: u64) {
        let Some(scope) = self.scopes.get_mut(&lease.scope) else {
            return;
        };
        let ScopeState {
            global,
            sources,
            leases,
            ..
        } = scope;
        let Some(r) = leases.get_mut(&lease.id) else {
            return;
        };
        if !r.settled {
            r.settled = true;
            let adjust = |c: &mut Counters| {
                if c.tpm.index == r.window {
                    c.tpm.used = c
                        .tpm
                        .used
                        .saturating_sub(r.est_tokens)
                        .saturating_add(actual_tokens);
                }
            };
            adjust(global);
            if let Some(s) = sources.get_mut(&r.source) {
                adjust(s);
            }
        }
        if !r.held {
            leases.remove(&lease.id);
        }
    }

    /// Record that `scope` made progress at `now_ms`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// let mut l = LimiterState::default();
    /// l.mark_progress("LLM", 1_000);
    /// assert_eq!(l.progress_age("LLM", 5_000), Some(Duration::from_secs(4)));
    /// l.mark_progress("LLM", 5_000); // another call succeeded
    /// assert_eq!(l.progress_age("LLM", 5_000), Some(Duration::ZERO));
    /// ```
    pub fn mark_progress(&mut self, scope: &str, now_ms: u64) {
        match self.scopes.get_mut(scope) {
            Some(s) => s.last_progress_ms = Some(now_ms),
            None => {
                let mut s = ScopeState::new();
                s.last_progress_ms = Some(now_ms);
                self.scopes.insert(Arc::from(scope), s);
            }
        }
    }

    /// Time since `scope` last made progress; `None` if it never did.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// let mut l = LimiterState::default();
    /// assert_eq!(l.progress_age("LLM", 0), None, "never progressed");
    /// l.mark_progress("LLM", 0);
    /// let age = l.progress_age("LLM", 400_000);
    /// assert_eq!(age, Some(Duration::from_secs(400)));
    /// ```
    pub fn progress_age(&self, scope: &str, now_ms: u64) -> Option<Duration> {
        let last = self.scopes.get(scope)?.last_progress_ms?;
        Some(Duration::from_millis(now_ms.saturating_sub(last)))
    }

    /// Leases held in `scope` after reclaiming expired ones.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::LimiterState;
    /// let mut l = LimiterState::default();
    /// l.admit(&req("1", Limits::default(), 0), 0); // 120 s lease TTL
    /// assert_eq!(l.leases_held("LLM", 119_999), 1);
    /// // The holder never released: its lease is reclaimed once the TTL has passed.
    /// assert_eq!(l.leases_held("LLM", 120_000), 0);
    /// ```
    pub fn leases_held(&mut self, scope: &str, now_ms: u64) -> u64 {
        self.scopes.get_mut(scope).map_or(0, |s| {
            s.reclaim(now_ms);
            s.global.held
        })
    }

    /// Current counters of `scope` (source `None`) or of one source, after reclaiming expired
    /// leases; windows that have rolled over read as empty.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use polygateway_actors::{GateRequest, Limits};
    /// # fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
    /// #     GateRequest {
    /// #         scope: "LLM".into(), source: "openai_1".into(),
    /// #         global: Limits::default(), per_source,
    /// #         est_tokens, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
    /// #     }
    /// # }
    /// use polygateway_actors::policy::limiter::{LimiterState, Usage};
    /// let mut l = LimiterState::default(); // 60 s windows
    /// l.admit(&req("1", Limits::default(), 400), 1_000);
    /// assert_eq!(l.usage("LLM", None, 1_000), Usage { leases: 1, requests: 1, tokens: 400 });
    /// // A minute later the rate windows rolled over; the lease is still held.
    /// assert_eq!(l.usage("LLM", None, 61_000), Usage { leases: 1, requests: 0, tokens: 0 });
    /// assert_eq!(l.usage("LLM", Some("other"), 1_000), Usage::default());
    /// ```
    pub fn usage(&mut self, scope: &str, source: Option<&str>, now_ms: u64) -> Usage {
        let w = self.window_index(now_ms);
        let Some(s) = self.scopes.get_mut(scope) else {
            return Usage::default();
        };
        s.reclaim(now_ms);
        let c = match source {
            None => Some(&s.global),
            Some(name) => s.sources.get(name),
        };
        c.map_or(Usage::default(), |c| Usage {
            leases: c.held,
            requests: if c.rpm.index == w { c.rpm.used } else { 0 },
            tokens: if c.tpm.index == w { c.tpm.used } else { 0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(100);

    fn limits(c: u32, rpm: u32, tpm: u64) -> Limits {
        Limits {
            max_concurrency: c,
            rpm,
            tpm,
        }
    }

    fn req(source: &str, id: &str, global: Limits, per_source: Limits, est: u64) -> GateRequest {
        GateRequest {
            scope: "S".into(),
            source: source.into(),
            global,
            per_source,
            est_tokens: est,
            lease_id: id.into(),
            lease_ttl: TTL,
        }
    }

    fn admitted(d: GateDecision) -> Lease {
        match d {
            GateDecision::Admitted(l) => l,
            other => panic!("expected admission, got {other:?}"),
        }
    }

    fn refused(d: GateDecision) -> (Gate, Duration) {
        match d {
            GateDecision::Refused { gate, retry_after } => (gate, retry_after),
            other => panic!("expected refusal, got {other:?}"),
        }
    }

    #[test]
    fn each_gate_refuses_and_names_itself() {
        let none = Limits::default();
        let cases = [
            (limits(1, 0, 0), none, Gate::GlobalConcurrency),
            (none, limits(1, 0, 0), Gate::SourceConcurrency),
            (limits(0, 1, 0), none, Gate::GlobalRpm),
            (none, limits(0, 1, 0), Gate::SourceRpm),
            (limits(0, 0, 15), none, Gate::GlobalTpm),
            (none, limits(0, 0, 15), Gate::SourceTpm),
        ];
        for (g, s, gate) in cases {
            let mut l = LimiterState::default();
            admitted(l.admit(&req("a", "1", g, s, 10), 1_000));
            assert_eq!(refused(l.admit(&req("a", "2", g, s, 10), 1_000)).0, gate);
        }
    }

    #[test]
    fn refusal_counts_nothing() {
        let mut l = LimiterState::default();
        let g = limits(10, 10, 1_000);
        // Source TPM (the last gate) refuses: nothing of the five earlier gates may move.
        admitted(l.admit(&req("a", "1", g, limits(5, 5, 100), 60), 0));
        let before = (l.usage("S", None, 0), l.usage("S", Some("a"), 0));
        for i in 0..5 {
            let (gate, _) =
                refused(l.admit(&req("a", &format!("r{i}"), g, limits(5, 5, 100), 60), 0));
            assert_eq!(gate, Gate::SourceTpm);
        }
        assert_eq!((l.usage("S", None, 0), l.usage("S", Some("a"), 0)), before);
        assert_eq!(
            before.0,
            Usage {
                leases: 1,
                requests: 1,
                tokens: 60
            }
        );
    }

    #[test]
    fn concurrency_checked_before_rates() {
        let mut l = LimiterState::default();
        let s = limits(1, 1, 0);
        admitted(l.admit(&req("a", "1", limits(0, 1, 0), s, 0), 0));
        // Both source concurrency and global RPM are full: concurrency is reported.
        assert_eq!(
            refused(l.admit(&req("a", "2", limits(0, 1, 0), s, 0), 0)).0,
            Gate::SourceConcurrency
        );
    }

    #[test]
    fn global_gates_are_shared_by_sources() {
        let mut l = LimiterState::default();
        let g = limits(2, 0, 0);
        admitted(l.admit(&req("a", "1", g, limits(1, 0, 0), 0), 0));
        assert_eq!(
            refused(l.admit(&req("a", "2", g, limits(1, 0, 0), 0), 0)).0,
            Gate::SourceConcurrency
        );
        admitted(l.admit(&req("b", "3", g, limits(1, 0, 0), 0), 0));
        assert_eq!(
            refused(l.admit(&req("c", "4", g, limits(1, 0, 0), 0), 0)).0,
            Gate::GlobalConcurrency
        );
        assert_eq!(l.leases_held("S", 0), 2);
    }

    #[test]
    fn rate_hint_is_time_to_window_end_and_window_rolls() {
        let mut l = LimiterState::new(Duration::from_secs(60));
        let s = limits(0, 2, 0);
        for id in ["1", "2"] {
            let lease = admitted(l.admit(&req("a", id, Limits::default(), s, 0), 59_000));
            assert_eq!(lease.window, 0);
            l.release(&lease);
        }
        let (gate, wait) = refused(l.admit(&req("a", "3", Limits::default(), s, 0), 59_000));
        assert_eq!((gate, wait), (Gate::SourceRpm, Duration::from_secs(1)));
        let lease = admitted(l.admit(&req("a", "3", Limits::default(), s, 0), 60_000));
        assert_eq!(lease.window, 1);
        assert_eq!(l.usage("S", Some("a"), 60_000).requests, 1);
    }

    #[test]
    fn short_window_is_honoured() {
        let mut l = LimiterState::new(Duration::from_millis(500));
        assert_eq!(l.window(), Duration::from_millis(500));
        admitted(l.admit(&req("a", "1", Limits::default(), limits(0, 1, 0), 0), 100));
        assert_eq!(
            refused(l.admit(&req("a", "2", Limits::default(), limits(0, 1, 0), 0), 499)).1,
            Duration::from_millis(1)
        );
        admitted(l.admit(&req("a", "2", Limits::default(), limits(0, 1, 0), 0), 500));
    }

    #[test]
    fn settle_refunds_and_charges_in_the_admission_window() {
        let mut l = LimiterState::default();
        let s = limits(0, 0, 100);
        let g = limits(0, 0, 1_000);
        let a = admitted(l.admit(&req("a", "1", g, s, 60), 0));
        assert_eq!(
            refused(l.admit(&req("a", "2", g, s, 60), 0)).0,
            Gate::SourceTpm
        );
        l.settle(&a, 10);
        assert_eq!(l.usage("S", Some("a"), 0).tokens, 10);
        assert_eq!(l.usage("S", None, 0).tokens, 10);
        let b = admitted(l.admit(&req("a", "2", g, s, 60), 1));
        l.settle(&b, 90);
        assert_eq!(l.usage("S", Some("a"), 1).tokens, 100);
        assert_eq!(
            refused(l.admit(&req("a", "3", g, s, 1), 2)).0,
            Gate::SourceTpm
        );
    }

    #[test]
    fn settle_after_roll_over_leaves_the_new_window_alone() {
        let mut l = LimiterState::default();
        let s = limits(0, 0, 100);
        let a = admitted(l.admit(&req("a", "1", Limits::default(), s, 60), 59_999));
        let b = admitted(l.admit(&req("a", "2", Limits::default(), s, 60), 60_000));
        l.settle(&a, 0);
        assert_eq!(
            l.usage("S", Some("a"), 60_000).tokens,
            60,
            "window 1 keeps b's estimate"
        );
        l.settle(&b, 5);
        assert_eq!(l.usage("S", Some("a"), 60_000).tokens, 5);
    }

    #[test]
    fn release_and_settle_are_idempotent() {
        let mut l = LimiterState::default();
        let g = limits(2, 0, 0);
        let s = limits(0, 0, 100);
        let a = admitted(l.admit(&req("a", "1", g, s, 40), 0));
        let _b = admitted(l.admit(&req("a", "2", g, s, 40), 0));
        l.release(&a);
        l.release(&a);
        assert_eq!(l.leases_held("S", 0), 1);
        l.settle(&a, 10);
        l.settle(&a, 10);
        assert_eq!(l.usage("S", Some("a"), 0).tokens, 50);
        l.release(&a);
        l.settle(&a, 0);
        assert_eq!(
            l.usage("S", Some("a"), 0),
            Usage {
                leases: 1,
                requests: 2,
                tokens: 50
            }
        );
    }

    #[test]
    fn settle_before_release_keeps_the_slot_until_release() {
        let mut l = LimiterState::default();
        let a = admitted(l.admit(&req("a", "1", limits(1, 0, 0), limits(0, 0, 100), 40), 0));
        l.settle(&a, 1);
        assert_eq!(l.leases_held("S", 0), 1);
        l.release(&a);
        assert_eq!(l.leases_held("S", 0), 0);
        l.release(&a);
        assert_eq!(l.usage("S", Some("a"), 0).tokens, 1);
    }

    #[test]
    fn expired_leases_are_reclaimed_and_forgotten() {
        let mut l = LimiterState::default();
        let s = limits(1, 0, 0);
        let a = admitted(l.admit(&req("a", "1", Limits::default(), s, 0), 0));
        let (gate, wait) = refused(l.admit(&req("a", "2", Limits::default(), s, 0), 1_000));
        assert_eq!((gate, wait), (Gate::SourceConcurrency, LEASE_POLL));
        let (_, wait) = refused(l.admit(&req("a", "2", Limits::default(), s, 0), 99_900));
        assert_eq!(
            wait,
            Duration::from_millis(100),
            "earliest expiry when sooner than the poll"
        );
        let b = admitted(l.admit(&req("a", "2", Limits::default(), s, 0), 100_000));
        // The dead holder's late release must not free b's slot.
        l.release(&a);
        assert_eq!(l.leases_held("S", 100_000), 1);
        l.release(&b);
        assert_eq!(l.leases_held("S", 100_000), 0);
    }

    #[test]
    fn leases_held_reclaims_lazily() {
        let mut l = LimiterState::default();
        admitted(l.admit(&req("a", "1", Limits::default(), Limits::default(), 0), 0));
        assert_eq!(l.leases_held("S", 99_999), 1);
        assert_eq!(l.leases_held("S", 100_000), 0);
        assert_eq!(l.leases_held("other", 0), 0);
    }

    #[test]
    fn resent_admission_is_not_counted_twice() {
        let mut l = LimiterState::default();
        let r = req("a", "same", Limits::default(), limits(0, 0, 100), 30);
        let a = admitted(l.admit(&r, 0));
        let again = admitted(l.admit(&r, 10));
        assert_eq!(a, again);
        assert_eq!(
            l.usage("S", Some("a"), 10),
            Usage {
                leases: 1,
                requests: 1,
                tokens: 30
            }
        );
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut l = LimiterState::default();
        let s = limits(0, 1, 0);
        admitted(l.admit(&req("a", "1", Limits::default(), s, 0), 60_000));
        // A late reader with an older clock must not reopen window 0.
        assert_eq!(
            refused(l.admit(&req("a", "2", Limits::default(), s, 0), 59_000)).0,
            Gate::SourceRpm
        );
    }

    #[test]
    fn progress_is_per_scope() {
        let mut l = LimiterState::default();
        assert_eq!(l.progress_age("S", 0), None);
        l.mark_progress("S", 1_000);
        assert_eq!(
            l.progress_age("S", 4_500),
            Some(Duration::from_millis(3_500))
        );
        assert_eq!(l.progress_age("T", 4_500), None);
        l.mark_progress("S", 5_000);
        assert_eq!(l.progress_age("S", 5_000), Some(Duration::ZERO));
    }

    #[test]
    fn unlimited_gates_never_refuse() {
        let mut l = LimiterState::default();
        for i in 0..1_000 {
            admitted(l.admit(
                &req(
                    "a",
                    &i.to_string(),
                    Limits::default(),
                    Limits::default(),
                    1 << 40,
                ),
                0,
            ));
        }
        assert_eq!(l.leases_held("S", 0), 1_000);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn lease_poll_example() {
        use crate::{GateRequest, Limits};
        use std::time::Duration;
        fn req(id: &str, per_source: Limits, est_tokens: u64) -> GateRequest {
            GateRequest {
                scope: "LLM".into(),
                source: "openai_1".into(),
                global: Limits::default(),
                per_source,
                est_tokens,
                lease_id: id.into(),
                lease_ttl: Duration::from_secs(120),
            }
        }
        use crate::policy::limiter::{LimiterState, LEASE_POLL};
        use crate::{Gate, GateDecision};
        let one_at_a_time = Limits {
            max_concurrency: 1,
            ..Limits::default()
        };
        let mut l = LimiterState::default();
        assert!(matches!(
            l.admit(&req("1", one_at_a_time, 0), 0),
            GateDecision::Admitted(_)
        ));
        // The held lease expires in 119 s, but the caller is told to look again much sooner.
        assert_eq!(
            l.admit(&req("2", one_at_a_time, 0), 1_000),
            GateDecision::Refused {
                gate: Gate::SourceConcurrency,
                retry_after: LEASE_POLL
            }
        );
    }

    #[test]
    fn limiter_state_window_index_example() {
        use crate::policy::limiter::LimiterState;
        let l = LimiterState::default(); // 60 s windows
        let at = [0, 59_999, 60_000, 125_000].map(|now_ms| l.window_index(now_ms));
        assert_eq!(at, [0, 0, 1, 2]);
    }
}
