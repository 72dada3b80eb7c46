//! Adaptive per-source concurrency (docs/behaviour.md §5.5): the [`Pacer`] trait and the default
//! [`AimdPacer`].
//!
//! A pacer caps how many attempts one source has in flight, independently of the configured
//! limiter gates: it reacts to 429 pushback that the static limits did not prevent. It is a
//! library constant (no env key); users replace it by injecting their own [`Pacer`].
//!
//! Not for: RPM/TPM accounting (the limiter), failure accounting (the breaker).

use crate::outcome::AttemptVerdict;

/// Starting limit of [`AimdPacer`].
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, AIMD_START};
/// let p = AimdPacer::new(0);
/// assert_eq!(p.exact_limit(), AIMD_START);
/// assert_eq!(p.limit(), 8);
/// ```
pub const AIMD_START: f64 = 8.0;
/// Lowest limit of [`AimdPacer`].
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, AIMD_FLOOR};
/// use polygateway_actors::AttemptVerdict;
/// let mut p = AimdPacer::new(0);
/// for _ in 0..10 {
///     p.observe(AttemptVerdict::RateLimited);
/// }
/// // However hard the pushback, one attempt at a time still goes.
/// assert_eq!(p.exact_limit(), AIMD_FLOOR);
/// assert_eq!(p.limit(), 1);
/// ```
pub const AIMD_FLOOR: f64 = 1.0;
/// Minimum ceiling of [`AimdPacer`] (raised to the source's `MAX_CONCURRENCY` when larger).
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, AIMD_MIN_CEILING};
/// assert_eq!(AimdPacer::new(0).ceiling(), AIMD_MIN_CEILING);
/// assert_eq!(AimdPacer::new(16).ceiling(), AIMD_MIN_CEILING);
/// assert_eq!(AimdPacer::new(256).ceiling(), 256);
/// ```
pub const AIMD_MIN_CEILING: u32 = 64;

/// A per-source in-flight cap that adapts to outcomes. One instance per source, owned by the
/// source actor, which publishes [`Pacer::limit`] after every verdict. The in-flight count it
/// caps is not kept here: it is the number of live pacer tickets
/// (`runtime::SourceTicket`), released on drop, so a cancelled call can never leak a slot.
///
/// ```
/// use polygateway_actors::policy::pacer::Pacer;
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
///     fn observe(&mut self, verdict: AttemptVerdict) {
///         if verdict == AttemptVerdict::RateLimited {
///             self.cap = 1;
///         }
///     }
/// }
///
/// let mut pacer: Box<dyn Pacer> = Box::new(Cautious { cap: 4 });
/// pacer.observe(AttemptVerdict::Success);
/// assert_eq!(pacer.limit(), 4);
/// pacer.observe(AttemptVerdict::RateLimited);
/// assert_eq!(pacer.limit(), 1);
/// ```
pub trait Pacer: Send + std::fmt::Debug {
    /// The current cap (whole attempts, ≥ 1).
    fn limit(&self) -> u32;
    /// Adapt to a finished attempt.
    fn observe(&mut self, verdict: AttemptVerdict);
}

/// Additive-increase / multiplicative-decrease: start 8, ×0.5 on 429 (floor 1), `+1/limit` per
/// success (about +1 per limit's worth of successes), ceiling `max(64, max_concurrency)`.
/// Other verdicts leave the limit unchanged: only 429 is pushback.
///
/// ```
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// use polygateway_actors::AttemptVerdict;
/// let mut p = AimdPacer::new(0);
/// assert_eq!(p.limit(), 8);
/// p.observe(AttemptVerdict::RateLimited);
/// assert_eq!(p.limit(), 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AimdPacer {
    limit: f64,
    ceiling: f64,
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
        let ceiling = f64::from(AIMD_MIN_CEILING.max(max_concurrency));
        Self {
            limit: AIMD_START.min(ceiling),
            ceiling,
        }
    }

    /// The fractional limit (the integer cap is its floor).
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
    /// use polygateway_actors::AttemptVerdict;
    /// let mut p = AimdPacer::new(0);
    /// p.observe(AttemptVerdict::Success);
    /// // +1/8: the fraction accumulates while the integer cap stays put.
    /// assert_eq!(p.exact_limit(), 8.125);
    /// assert_eq!(p.limit(), 8);
    /// ```
    pub fn exact_limit(&self) -> f64 {
        self.limit
    }

    /// The ceiling.
    ///
    /// ```
    /// use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
    /// use polygateway_actors::AttemptVerdict;
    /// let mut p = AimdPacer::new(0);
    /// for _ in 0..10_000 {
    ///     p.observe(AttemptVerdict::Success);
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

    fn observe(&mut self, verdict: AttemptVerdict) {
        match verdict {
            AttemptVerdict::Success => {
                self.limit = (self.limit + 1.0 / self.limit).min(self.ceiling);
            }
            AttemptVerdict::RateLimited => {
                self.limit = (self.limit * 0.5).max(AIMD_FLOOR);
            }
            AttemptVerdict::AliveButUnusable | AttemptVerdict::Failure | AttemptVerdict::Dead => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_eight_and_halves_to_floor() {
        let mut p = AimdPacer::new(0);
        assert_eq!(p.limit(), 8);
        let mut seen = Vec::new();
        for _ in 0..5 {
            p.observe(AttemptVerdict::RateLimited);
            seen.push(p.limit());
        }
        assert_eq!(seen, vec![4, 2, 1, 1, 1]);
        assert_eq!(p.exact_limit(), 1.0);
    }

    #[test]
    fn additive_increase_is_about_one_per_window() {
        let mut p = AimdPacer::new(0);
        // 8 successes at limit 8 add ≈ 8 × 1/8.5 ≈ 0.95 (the limit grows along the way).
        for _ in 0..8 {
            p.observe(AttemptVerdict::Success);
        }
        assert_eq!(p.limit(), 8);
        assert!(
            (p.exact_limit() - 8.9506).abs() < 1e-3,
            "{}",
            p.exact_limit()
        );
        for _ in 0..2 {
            p.observe(AttemptVerdict::Success);
        }
        assert_eq!(p.limit(), 9);
    }

    #[test]
    fn ceiling_is_max_of_64_and_source_concurrency() {
        assert_eq!(AimdPacer::new(10).ceiling(), 64);
        assert_eq!(AimdPacer::new(200).ceiling(), 200);
        let mut p = AimdPacer::new(0);
        for _ in 0..100_000 {
            p.observe(AttemptVerdict::Success);
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
            p.observe(v);
        }
        assert_eq!(p.exact_limit(), 8.0);
    }

    #[test]
    fn usable_as_trait_object() {
        let mut p: Box<dyn Pacer> = Box::new(AimdPacer::new(0));
        p.observe(AttemptVerdict::RateLimited);
        assert_eq!(p.limit(), 4);
    }
}
