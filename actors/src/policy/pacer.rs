//! Adaptive per-source concurrency (docs/behaviour.md §5.5): the [`Pacer`] trait, what it observes
//! ([`PacerObservation`]), and the two simple pacers — the original library's [`AimdPacer`] and
//! [`Unpaced`] (`PACER=off`). The default is [`AdaptivePacer`](super::adaptive_pacer::AdaptivePacer).
//!
//! A pacer caps how many attempts one source has in flight, independently of the configured
//! limiter gates: it finds the capacity the static limits do not describe (429 pushback, a
//! server that queues). Users pick one with `{SCOPE}__PACER` or inject their own [`Pacer`].
//!
//! Not for: RPM/TPM accounting (the limiter), failure accounting (the breaker).

use std::time::{Duration, Instant};

use crate::outcome::AttemptVerdict;

/// Starting limit of [`AimdPacer`].
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, AIMD_START};
/// let p = AimdPacer::new(0);
/// assert_eq!(f64::from(p.limit()), AIMD_START);
/// ```
pub const AIMD_START: f64 = 8.0;
/// Lowest limit of [`AimdPacer`].
pub(crate) const AIMD_FLOOR: f64 = 1.0;
/// Minimum ceiling of [`AimdPacer`] (raised to the source's `MAX_CONCURRENCY` when larger).
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, AIMD_MIN_CEILING};
/// assert_eq!(AimdPacer::new(0).ceiling(), AIMD_MIN_CEILING);
/// assert_eq!(AimdPacer::new(16).ceiling(), AIMD_MIN_CEILING);
/// assert_eq!(AimdPacer::new(256).ceiling(), 256);
/// ```
pub const AIMD_MIN_CEILING: u32 = 64;

// Read from an attempt's outcome, so it lives with the outcome classification (`Classify`
// returns it); re-exported here, where pacers read it.
pub use crate::outcome::RateLimitHint;

/// Everything a pacer learns from one finished attempt. Time comes in as a value (`now`): no
/// pacer reads the OS clock.
///
/// ```
/// use std::time::{Duration, Instant};
/// use polygateway_actors::policy::pacer::PacerObservation;
/// use polygateway_actors::AttemptVerdict;
/// let seen = PacerObservation {
///     latency: Duration::from_millis(180),
///     in_flight: 12,
///     ..PacerObservation::new(AttemptVerdict::Success, Instant::now())
/// };
/// assert_eq!(seen.retry_after, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacerObservation {
    /// How the attempt ended.
    pub verdict: AttemptVerdict,
    /// When it ended.
    pub now: Instant,
    /// How long the upstream took (send to answer).
    pub latency: Duration,
    /// Attempts of this source in flight when it ended (itself included).
    pub in_flight: u32,
    /// The upstream's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
    /// Rate-limit headers, when it sent them.
    pub rate_limit: Option<RateLimitHint>,
}

impl PacerObservation {
    /// An observation of `verdict` at `now` with nothing else known (zero latency, one in
    /// flight, no headers).
    ///
    /// ```
    /// use std::time::Instant;
    /// use polygateway_actors::policy::pacer::PacerObservation;
    /// use polygateway_actors::AttemptVerdict;
    /// let o = PacerObservation::new(AttemptVerdict::RateLimited, Instant::now());
    /// assert_eq!((o.in_flight, o.rate_limit), (1, None));
    /// ```
    pub fn new(verdict: AttemptVerdict, now: Instant) -> Self {
        Self {
            verdict,
            now,
            latency: Duration::ZERO,
            in_flight: 1,
            retry_after: None,
            rate_limit: None,
        }
    }
}

/// The last thing a pacer reacted to, for status pages (`sources()` snapshot).
///
/// ```
/// use polygateway_actors::policy::pacer::PacerSignal;
/// assert_eq!(PacerSignal::RateLimited.as_str(), "rate_limited");
/// assert_eq!(PacerSignal::default(), PacerSignal::None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PacerSignal {
    /// Nothing yet: growing from the start.
    #[default]
    None,
    /// A 429 pushback.
    RateLimited,
    /// Rate-limit headers said the quota is nearly spent (before any 429).
    QuotaLow,
    /// Latency rose above the baseline: the upstream queues.
    Queueing,
}

impl PacerSignal {
    /// The wire name.
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::PacerSignal;
    /// assert_eq!(PacerSignal::default().as_str(), "none");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            PacerSignal::None => "none",
            PacerSignal::RateLimited => "rate_limited",
            PacerSignal::QuotaLow => "quota_low",
            PacerSignal::Queueing => "queueing",
        }
    }

    /// A compact code (for an atomic).
    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    /// The signal of a [`PacerSignal::code`] (unknown codes read as `None`).
    pub(crate) fn from_code(code: u8) -> Self {
        match code {
            1 => PacerSignal::RateLimited,
            2 => PacerSignal::QuotaLow,
            3 => PacerSignal::Queueing,
            _ => PacerSignal::None,
        }
    }
}

/// A per-source in-flight cap that adapts to outcomes. One instance per source, owned by the
/// source actor, which publishes [`Pacer::limit`] after every observation. The in-flight count
/// it caps is not kept here: it is the number of live pacer tickets (`runtime::SourceTicket`),
/// released on drop, so a cancelled call can never leak a slot.
///
/// ```
/// use polygateway_actors::policy::pacer::{Pacer, PacerObservation};
/// use polygateway_actors::AttemptVerdict;
///
/// // A user pacer: a fixed cap that drops to 1 after any pushback.
/// #[derive(Debug)]
/// struct Cautious { cap: u32 }
///
/// impl Pacer for Cautious {
///     fn limit(&self) -> u32 {
///         self.cap
///     }
///     fn observe(&mut self, attempt: &PacerObservation) {
///         if attempt.verdict == AttemptVerdict::RateLimited {
///             self.cap = 1;
///         }
///     }
/// }
///
/// let mut pacer: Box<dyn Pacer> = Box::new(Cautious { cap: 4 });
/// pacer.observe(&PacerObservation::new(AttemptVerdict::Success, std::time::Instant::now()));
/// assert_eq!(pacer.limit(), 4);
/// pacer.observe(&PacerObservation::new(AttemptVerdict::RateLimited, std::time::Instant::now()));
/// assert_eq!(pacer.limit(), 1);
/// assert_eq!(pacer.mode(), "custom");
/// ```
pub trait Pacer: Send + std::fmt::Debug {
    /// The current cap (whole attempts, ≥ 1).
    fn limit(&self) -> u32;
    /// Adapt to a finished attempt.
    fn observe(&mut self, attempt: &PacerObservation);
    /// The pacer's name on status pages (`adaptive`, `aimd`, `off`; `custom` by default).
    fn mode(&self) -> &'static str {
        "custom"
    }
    /// The last signal the pacer reacted to.
    fn last_signal(&self) -> PacerSignal {
        PacerSignal::None
    }
}

/// The original library's pacer (`PACER=aimd`), constants unchanged: start 8, ×0.5 on 429
/// (floor 1), `+1/limit` per success (about +1 per limit's worth of successes), ceiling
/// `max(64, max_concurrency)`. Other verdicts leave the limit unchanged: only 429 is pushback.
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, PacerObservation};
/// use polygateway_actors::AttemptVerdict;
/// let mut p = AimdPacer::new(0);
/// assert_eq!(p.limit(), 8);
/// p.observe(&PacerObservation::new(AttemptVerdict::RateLimited, std::time::Instant::now()));
/// assert_eq!(p.limit(), 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AimdPacer {
    limit: f64,
    ceiling: f64,
    signal: PacerSignal,
}

impl AimdPacer {
    /// A pacer for a source whose `MAX_CONCURRENCY` is `max_concurrency` (0 = unlimited).
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
    /// // A source configured with MAX_CONCURRENCY=100 may grow up to 100, starting at 8.
    /// let p = AimdPacer::new(100);
    /// assert_eq!((p.limit(), p.ceiling()), (8, 100));
    /// ```
    pub fn new(max_concurrency: u32) -> Self {
        Self::with_bounds(AIMD_START, AIMD_MIN_CEILING.max(max_concurrency))
    }

    /// An AIMD pacer with an explicit start and ceiling (`PACER__START` / `PACER__CEILING`).
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
    /// let p = AimdPacer::with_bounds(32.0, 16);
    /// // The start never exceeds the ceiling.
    /// assert_eq!((p.limit(), p.ceiling()), (16, 16));
    /// ```
    pub fn with_bounds(start: f64, ceiling: u32) -> Self {
        let ceiling = f64::from(ceiling.max(1));
        Self {
            limit: start.clamp(AIMD_FLOOR, ceiling),
            ceiling,
            signal: PacerSignal::None,
        }
    }

    /// The fractional limit (the integer cap is its floor).
    #[cfg(test)]
    pub(crate) fn exact_limit(&self) -> f64 {
        self.limit
    }

    /// The ceiling.
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, PacerObservation};
    /// use polygateway_actors::AttemptVerdict;
    /// let mut p = AimdPacer::new(0);
    /// for _ in 0..10_000 {
    ///     p.observe(&PacerObservation::new(AttemptVerdict::Success, std::time::Instant::now()));
    /// }
    /// assert_eq!(p.limit(), p.ceiling());
    /// assert_eq!(p.ceiling(), 64);
    /// ```
    pub fn ceiling(&self) -> u32 {
        self.ceiling as u32
    }
}

impl Pacer for AimdPacer {
    fn limit(&self) -> u32 {
        self.limit as u32
    }

    fn observe(&mut self, attempt: &PacerObservation) {
        match attempt.verdict {
            AttemptVerdict::Success => {
                self.limit = (self.limit + 1.0 / self.limit).min(self.ceiling);
            }
            AttemptVerdict::RateLimited => {
                self.limit = (self.limit * 0.5).max(AIMD_FLOOR);
                self.signal = PacerSignal::RateLimited;
            }
            AttemptVerdict::AliveButUnusable | AttemptVerdict::Failure | AttemptVerdict::Dead => {}
        }
    }

    fn mode(&self) -> &'static str {
        "aimd"
    }

    fn last_signal(&self) -> PacerSignal {
        self.signal
    }
}

/// No pacing (`PACER=off`): the cap is the source's `MAX_CONCURRENCY`, or unbounded when unset.
/// Pushback is then handled only by the retry path (backoff, `Retry-After`, source switching).
///
/// ```
/// use polygateway_actors::policy::pacer::{Pacer, PacerObservation, Unpaced};
/// use polygateway_actors::AttemptVerdict;
/// let mut p = Unpaced::new(0);
/// p.observe(&PacerObservation::new(AttemptVerdict::RateLimited, std::time::Instant::now()));
/// assert_eq!(p.limit(), u32::MAX);
/// assert_eq!(Unpaced::new(50).limit(), 50);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpaced {
    cap: u32,
}

impl Unpaced {
    /// No pacing under `max_concurrency` (0 = unlimited).
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{Pacer, Unpaced};
    /// assert_eq!(Unpaced::new(8).mode(), "off");
    /// ```
    pub fn new(max_concurrency: u32) -> Self {
        Self {
            cap: if max_concurrency == 0 {
                u32::MAX
            } else {
                max_concurrency
            },
        }
    }
}

impl Pacer for Unpaced {
    fn limit(&self) -> u32 {
        self.cap
    }

    fn observe(&mut self, _attempt: &PacerObservation) {}

    fn mode(&self) -> &'static str {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saw(p: &mut impl Pacer, verdict: AttemptVerdict) {
        p.observe(&PacerObservation::new(verdict, std::time::Instant::now()));
    }

    #[test]
    fn starts_at_eight_and_halves_to_floor() {
        let mut p = AimdPacer::new(0);
        assert_eq!(p.limit(), 8);
        let mut seen = Vec::new();
        for _ in 0..5 {
            saw(&mut p, AttemptVerdict::RateLimited);
            seen.push(p.limit());
        }
        assert_eq!(seen, vec![4, 2, 1, 1, 1]);
        assert_eq!(p.exact_limit(), 1.0);
        assert_eq!(p.last_signal(), PacerSignal::RateLimited);
    }

    #[test]
    fn additive_increase_is_about_one_per_window() {
        let mut p = AimdPacer::new(0);
        // 8 successes at limit 8 add ≈ 8 × 1/8.5 ≈ 0.95 (the limit grows along the way).
        for _ in 0..8 {
            saw(&mut p, AttemptVerdict::Success);
        }
        assert_eq!(p.limit(), 8);
        assert!(
            (p.exact_limit() - 8.9506).abs() < 1e-3,
            "{}",
            p.exact_limit()
        );
        for _ in 0..2 {
            saw(&mut p, AttemptVerdict::Success);
        }
        assert_eq!(p.limit(), 9);
    }

    #[test]
    fn ceiling_is_max_of_64_and_source_concurrency() {
        assert_eq!(AimdPacer::new(10).ceiling(), 64);
        assert_eq!(AimdPacer::new(200).ceiling(), 200);
        let mut p = AimdPacer::new(0);
        for _ in 0..100_000 {
            saw(&mut p, AttemptVerdict::Success);
        }
        assert_eq!(p.limit(), 64);
    }

    #[test]
    fn other_verdicts_do_not_move_the_limit() {
        let mut p = AimdPacer::new(0);
        for v in [
            AttemptVerdict::Failure,
            AttemptVerdict::Dead,
            AttemptVerdict::AliveButUnusable,
        ] {
            saw(&mut p, v);
        }
        assert_eq!(p.exact_limit(), 8.0);
        assert_eq!(p.last_signal(), PacerSignal::None);
    }

    #[test]
    fn usable_as_trait_object() {
        let mut p: Box<dyn Pacer> = Box::new(AimdPacer::new(0));
        p.observe(&PacerObservation::new(
            AttemptVerdict::RateLimited,
            std::time::Instant::now(),
        ));
        assert_eq!((p.limit(), p.mode()), (4, "aimd"));
    }

    #[test]
    fn header_rate_needs_all_three_parts() {
        let h = RateLimitHint {
            limit: Some(100),
            remaining: Some(50),
            reset: None,
        };
        assert_eq!(h.refill_per_s(), None);
        let h = RateLimitHint {
            reset: Some(Duration::from_secs(5)),
            ..h
        };
        assert_eq!(h.refill_per_s(), Some(10.0));
        // 600 spent requests come back in 600 ms: 1,000 a second.
        let h = RateLimitHint {
            limit: Some(1000),
            remaining: Some(400),
            reset: Some(Duration::from_millis(600)),
        };
        assert_eq!(h.refill_per_s(), Some(1000.0));
        // Nothing spent: no rate to learn.
        let full = RateLimitHint {
            limit: Some(60),
            remaining: Some(60),
            reset: Some(Duration::ZERO),
        };
        assert_eq!(full.refill_per_s(), None);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn aimd_floor_example() {
        use crate::policy::pacer::{AimdPacer, Pacer, PacerObservation, AIMD_FLOOR};
        use crate::AttemptVerdict;
        let mut p = AimdPacer::new(0);
        for _ in 0..10 {
            p.observe(&PacerObservation::new(
                AttemptVerdict::RateLimited,
                std::time::Instant::now(),
            ));
        }
        // However hard the pushback, one attempt at a time still goes.
        assert_eq!(p.exact_limit(), AIMD_FLOOR);
        assert_eq!(p.limit(), 1);
    }

    /// A signal is coded for an atomic: no signal is 0, every code reads back as its signal, and
    /// a code nobody wrote reads as no signal.
    #[test]
    fn a_signal_round_trips_through_its_code() {
        use crate::policy::pacer::PacerSignal;
        assert_eq!(PacerSignal::None.code(), 0);
        assert_eq!(
            PacerSignal::from_code(PacerSignal::Queueing.code()),
            PacerSignal::Queueing
        );
        assert_eq!(PacerSignal::from_code(2), PacerSignal::QuotaLow);
        assert_eq!(PacerSignal::from_code(200), PacerSignal::None);
    }

    #[test]
    fn the_fraction_accumulates_below_the_integer_cap() {
        use crate::policy::pacer::{AimdPacer, Pacer, PacerObservation};
        use crate::AttemptVerdict;
        let mut p = AimdPacer::new(0);
        p.observe(&PacerObservation::new(
            AttemptVerdict::Success,
            std::time::Instant::now(),
        ));
        // +1/8: the fraction accumulates while the integer cap stays put.
        assert_eq!(p.exact_limit(), 8.125);
        assert_eq!(p.limit(), 8);
    }
}
