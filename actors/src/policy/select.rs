//! Source selection (docs/behaviour.md §5.5): the [`Selector`] trait and the three built-in selectors
//! [`HealthAware`] (default), [`RoundRobin`] and [`LeastInflight`].
//!
//! A selector sees one [`Candidate`] per configured source — health score, in-flight count and
//! whether it may be chosen at all (breaker/cooldown memo/pacer already applied by the caller) —
//! and returns the chosen candidate's `index`. Randomness is injected (`&mut dyn RngCore`) so
//! tests are seeded and the trait stays object-safe for user selectors.
//!
//! Not for: deciding eligibility (breaker, cooldown memo) or feeding health.

use rand::{Rng, RngCore};

/// What a selector knows about one source.
///
/// ```
/// use rand::{rngs::StdRng, SeedableRng};
/// use polygateway_actors::policy::select::{Candidate, RoundRobin, Selector};
/// let candidates = [
///     Candidate { index: 0, health: 1.0, in_flight: 0, eligible: false }, // breaker open
///     Candidate { index: 1, health: 0.7, in_flight: 2, eligible: true },
/// ];
/// let mut rng = StdRng::seed_from_u64(1);
/// assert_eq!(RoundRobin::default().select(&candidates, &mut rng), Some(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The source's index in its scope; returned by [`Selector::select`].
    pub index: usize,
    /// Success EWMA in `[0, 1]`.
    pub health: f64,
    /// Attempts in flight on this source.
    pub in_flight: u32,
    /// `false` if the source must not be chosen now (breaker refused, cooling, pacer full).
    pub eligible: bool,
}

/// Picks one eligible source per attempt. Implementations may keep state (round-robin cursor).
///
/// ```
/// use rand::{rngs::StdRng, RngCore, SeedableRng};
/// use polygateway_actors::policy::select::{Candidate, Selector};
///
/// // A user selector: a primary source with fallbacks, in configuration order.
/// #[derive(Debug)]
/// struct Primary;
///
/// impl Selector for Primary {
///     fn select(&mut self, candidates: &[Candidate], _rng: &mut dyn RngCore) -> Option<usize> {
///         candidates.iter().find(|c| c.eligible).map(|c| c.index)
///     }
/// }
///
/// let c = |index, eligible| Candidate { index, health: 1.0, in_flight: 0, eligible };
/// let mut selector: Box<dyn Selector> = Box::new(Primary);
/// let mut rng = StdRng::seed_from_u64(1);
/// assert_eq!(selector.select(&[c(0, true), c(1, true)], &mut rng), Some(0));
/// assert_eq!(selector.select(&[c(0, false), c(1, true)], &mut rng), Some(1));
/// assert_eq!(selector.select(&[c(0, false), c(1, false)], &mut rng), None);
/// ```
pub trait Selector: Send + std::fmt::Debug {
    /// The `index` of the chosen candidate, or `None` if no candidate is eligible.
    fn select(&mut self, candidates: &[Candidate], rng: &mut dyn RngCore) -> Option<usize>;
}

/// Default probability of exploring (a uniform pick among all eligible sources).
pub(crate) const DEFAULT_EXPLORATION: f64 = 0.05;
/// Default health below which a source is chosen by P2C only when no healthier one is eligible.
pub(crate) const DEFAULT_HEALTH_THRESHOLD: f64 = 0.2;

/// Health-aware power-of-two-choices.
///
/// - With probability `exploration` (0.05): a uniform pick among eligible sources — the
///   exploration floor that lets a degraded source earn its health back (health only moves on
///   attempts).
/// - Otherwise: the pool is the eligible sources with `health ≥ threshold` (all eligible ones if
///   none is that healthy); two distinct pool members are drawn at random and the higher
///   `health / (1 + in_flight)` wins (ties: fewer in flight, then lower position).
///
/// ```
/// use rand::{rngs::StdRng, SeedableRng};
/// use polygateway_actors::policy::select::{Candidate, HealthAware, Selector};
/// let mut sel = HealthAware { exploration: 0.0, ..HealthAware::default() };
/// let candidates = [
///     Candidate { index: 0, health: 1.0, in_flight: 3, eligible: true },
///     Candidate { index: 1, health: 0.9, in_flight: 0, eligible: true },
/// ];
/// let mut rng = StdRng::seed_from_u64(7);
/// // With two sources both are drawn every time, and 0.9 / (1 + 0) beats 1.0 / (1 + 3).
/// for _ in 0..10 {
///     assert_eq!(sel.select(&candidates, &mut rng), Some(1));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthAware {
    /// Exploration probability in `[0, 1]`.
    pub exploration: f64,
    /// Health threshold of the preferred pool.
    pub threshold: f64,
}

impl Default for HealthAware {
    fn default() -> Self {
        Self {
            exploration: DEFAULT_EXPLORATION,
            threshold: DEFAULT_HEALTH_THRESHOLD,
        }
    }
}

fn score(c: &Candidate) -> f64 {
    let h = if c.health.is_nan() {
        0.0
    } else {
        c.health.max(0.0)
    };
    h / (1.0 + f64::from(c.in_flight))
}

/// The `k`-th candidate (0-based) satisfying `pred`, without allocating.
fn nth_where(cands: &[Candidate], k: usize, pred: impl Fn(&Candidate) -> bool) -> &Candidate {
    cands
        .iter()
        .filter(|c| pred(c))
        .nth(k)
        .expect("k below the count of matching candidates")
}

impl Selector for HealthAware {
    fn select(&mut self, cands: &[Candidate], rng: &mut dyn RngCore) -> Option<usize> {
        let eligible = cands.iter().filter(|c| c.eligible).count();
        if eligible == 0 {
            return None;
        }
        if rng.random::<f64>() < self.exploration {
            let k = rng.random_range(0..eligible);
            return Some(nth_where(cands, k, |c| c.eligible).index);
        }
        let threshold = self.threshold;
        let healthy = cands
            .iter()
            .filter(|c| c.eligible && c.health >= threshold)
            .count();
        let (pool, strict) = if healthy > 0 {
            (healthy, true)
        } else {
            (eligible, false)
        };
        let in_pool = |c: &Candidate| c.eligible && (!strict || c.health >= threshold);
        if pool == 1 {
            return Some(nth_where(cands, 0, in_pool).index);
        }
        let i = rng.random_range(0..pool);
        let mut j = rng.random_range(0..pool - 1);
        if j >= i {
            j += 1;
        }
        let (first, second) = (i.min(j), i.max(j));
        let a = nth_where(cands, first, in_pool);
        let b = nth_where(cands, second, in_pool);
        let (sa, sb) = (score(a), score(b));
        let pick_b = sb > sa || (sb == sa && b.in_flight < a.in_flight);
        Some(if pick_b { b.index } else { a.index })
    }
}

/// Cycles through sources in order, skipping ineligible ones.
///
/// ```
/// use rand::{rngs::StdRng, SeedableRng};
/// use polygateway_actors::policy::select::{Candidate, RoundRobin, Selector};
/// let c = |index, eligible| Candidate { index, health: 1.0, in_flight: 0, eligible };
/// let candidates = [c(0, true), c(1, false), c(2, true)];
/// let mut rr = RoundRobin::default();
/// let mut rng = StdRng::seed_from_u64(1);
/// let picks: Vec<usize> = (0..3).filter_map(|_| rr.select(&candidates, &mut rng)).collect();
/// assert_eq!(picks, [0, 2, 0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundRobin {
    next: usize,
}

impl Selector for RoundRobin {
    fn select(&mut self, cands: &[Candidate], _rng: &mut dyn RngCore) -> Option<usize> {
        let n = cands.len();
        (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&pos| cands[pos].eligible)
            .map(|pos| {
                self.next = (pos + 1) % n;
                cands[pos].index
            })
    }
}

/// The eligible source with the fewest attempts in flight; ties broken uniformly at random so
/// an idle scope still spreads load.
///
/// ```
/// use std::collections::HashSet;
/// use rand::{rngs::StdRng, SeedableRng};
/// use polygateway_actors::policy::select::{Candidate, LeastInflight, Selector};
/// let c = |index, in_flight, eligible| Candidate { index, health: 1.0, in_flight, eligible };
/// let mut rng = StdRng::seed_from_u64(3);
/// let busy = [c(0, 0, false), c(1, 5, true), c(2, 2, true)];
/// assert_eq!(LeastInflight.select(&busy, &mut rng), Some(2));
/// // Idle sources tie: picks spread over all of them.
/// let idle = [c(0, 0, true), c(1, 0, true)];
/// let picked: HashSet<usize> =
///     (0..50).filter_map(|_| LeastInflight.select(&idle, &mut rng)).collect();
/// assert_eq!(picked.len(), 2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeastInflight;

impl Selector for LeastInflight {
    fn select(&mut self, cands: &[Candidate], rng: &mut dyn RngCore) -> Option<usize> {
        let mut best: Option<&Candidate> = None;
        let mut ties = 0u32;
        for c in cands.iter().filter(|c| c.eligible) {
            match best {
                Some(b) if c.in_flight > b.in_flight => {}
                Some(b) if c.in_flight == b.in_flight => {
                    // Reservoir sampling over the tied minimum.
                    ties += 1;
                    if rng.random_range(0..ties) == 0 {
                        best = Some(c);
                    }
                }
                _ => {
                    best = Some(c);
                    ties = 1;
                }
            }
        }
        best.map(|c| c.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    pub(super) fn c(index: usize, health: f64, in_flight: u32, eligible: bool) -> Candidate {
        Candidate {
            index,
            health,
            in_flight,
            eligible,
        }
    }

    fn counts(sel: &mut dyn Selector, cands: &[Candidate], n: usize) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(7);
        let max = cands.iter().map(|c| c.index).max().unwrap_or(0);
        let mut out = vec![0; max + 1];
        for _ in 0..n {
            out[sel.select(cands, &mut rng).expect("eligible")] += 1;
        }
        out
    }

    #[test]
    fn none_when_nothing_is_eligible() {
        let cands = [c(0, 1.0, 0, false), c(1, 1.0, 0, false)];
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(HealthAware::default().select(&cands, &mut rng), None);
        assert_eq!(RoundRobin::default().select(&cands, &mut rng), None);
        assert_eq!(LeastInflight.select(&cands, &mut rng), None);
        assert_eq!(HealthAware::default().select(&[], &mut rng), None);
        assert_eq!(RoundRobin::default().select(&[], &mut rng), None);
    }

    #[test]
    fn p2c_prefers_the_healthy_source() {
        let cands = [c(0, 1.0, 0, true), c(1, 0.5, 0, true), c(2, 0.1, 0, true)];
        let got = counts(&mut HealthAware::default(), &cands, 20_000);
        // P2C within {0, 1} always picks 0; exploration spreads 5 % uniformly over all three.
        assert!(got[0] > 18_800, "{got:?}");
        assert!(got[1] > 200 && got[1] < 500, "{got:?}");
        assert!(got[2] > 200 && got[2] < 500, "{got:?}");
    }

    #[test]
    fn p2c_among_many_weights_by_health() {
        let cands: Vec<_> = (0..4)
            .map(|i| c(i + 10, [1.0, 0.9, 0.6, 0.3][i], 0, true))
            .collect();
        let got = counts(
            &mut HealthAware {
                exploration: 0.0,
                threshold: 0.2,
            },
            &cands,
            12_000,
        );
        // Pairs drawn uniformly: the best wins 3/6 pairs, the next 2/6, then 1/6, the worst 0.
        assert_eq!(got[13], 0);
        assert!((5_600..6_400).contains(&got[10]), "{got:?}");
        assert!((3_600..4_400).contains(&got[11]), "{got:?}");
        assert!((1_700..2_300).contains(&got[12]), "{got:?}");
    }

    #[test]
    fn in_flight_discounts_health() {
        let cands = [c(0, 1.0, 3, true), c(1, 0.6, 0, true)];
        let got = counts(
            &mut HealthAware {
                exploration: 0.0,
                threshold: 0.2,
            },
            &cands,
            1_000,
        );
        assert_eq!(got, vec![0, 1_000], "1/(1+3) < 0.6");
    }

    #[test]
    fn unhealthy_sources_only_when_nothing_healthier() {
        let sel = &mut HealthAware {
            exploration: 0.0,
            threshold: 0.2,
        };
        let cands = [c(0, 0.1, 0, true), c(1, 0.3, 9, true), c(2, 0.05, 0, true)];
        assert_eq!(counts(sel, &cands, 500), vec![0, 500, 0]);
        let cands = [c(0, 0.1, 0, true), c(1, 0.9, 0, false), c(2, 0.05, 0, true)];
        let got = counts(sel, &cands, 1_000);
        assert_eq!(got, vec![1_000, 0, 0], "best of the unhealthy");
    }

    #[test]
    fn exploration_reaches_ineligible_never() {
        let cands = [c(0, 1.0, 0, true), c(1, 0.0, 0, false)];
        let got = counts(
            &mut HealthAware {
                exploration: 1.0,
                threshold: 0.2,
            },
            &cands,
            1_000,
        );
        assert_eq!(got, vec![1_000, 0]);
    }

    #[test]
    fn nan_health_scores_zero() {
        let cands = [c(0, f64::NAN, 0, true), c(1, 0.01, 0, true)];
        let got = counts(
            &mut HealthAware {
                exploration: 0.0,
                threshold: 0.2,
            },
            &cands,
            100,
        );
        assert_eq!(got, vec![0, 100]);
    }

    #[test]
    fn round_robin_cycles_and_skips() {
        let mut rr = RoundRobin::default();
        let mut rng = StdRng::seed_from_u64(0);
        let cands = [c(5, 1.0, 0, true), c(6, 1.0, 0, false), c(7, 0.0, 0, true)];
        let picks: Vec<_> = (0..5)
            .map(|_| rr.select(&cands, &mut rng).unwrap())
            .collect();
        assert_eq!(picks, vec![5, 7, 5, 7, 5]);
    }

    #[test]
    fn least_inflight_picks_minimum_and_spreads_ties() {
        let cands = [c(0, 1.0, 2, true), c(1, 0.1, 1, true), c(2, 1.0, 0, false)];
        assert_eq!(counts(&mut LeastInflight, &cands, 100), vec![0, 100, 0]);
        let tied = [c(0, 1.0, 1, true), c(1, 1.0, 1, true), c(2, 1.0, 1, true)];
        let got = counts(&mut LeastInflight, &tied, 3_000);
        assert!(got.iter().all(|&n| (850..1_150).contains(&n)), "{got:?}");
    }

    #[test]
    fn selectors_are_object_safe() {
        let mut all: Vec<Box<dyn Selector>> = vec![
            Box::new(HealthAware::default()),
            Box::new(RoundRobin::default()),
            Box::new(LeastInflight),
        ];
        let mut rng = StdRng::seed_from_u64(3);
        let cands = [c(4, 1.0, 0, true)];
        for s in &mut all {
            assert_eq!(s.select(&cands, &mut rng), Some(4));
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn default_exploration_example() {
        use crate::policy::select::tests::c;
        use crate::policy::select::{HealthAware, Selector, DEFAULT_EXPLORATION};
        use rand::{rngs::StdRng, SeedableRng};
        let mut sel = HealthAware::default();
        assert_eq!(sel.exploration, DEFAULT_EXPLORATION);
        let healthy = c(0, 1.0, 0, true);
        let degraded = c(1, 0.0, 0, true);
        let mut rng = StdRng::seed_from_u64(42);
        // Only exploration ever picks the degraded source: about 5 % × 1/2 of the time.
        let explored = (0..2_000)
            .filter(|_| sel.select(&[healthy, degraded], &mut rng) == Some(1))
            .count();
        assert!((10..200).contains(&explored), "{explored}");
    }

    #[test]
    fn default_health_threshold_example() {
        use crate::policy::select::tests::c;
        use crate::policy::select::{Candidate, HealthAware, Selector, DEFAULT_HEALTH_THRESHOLD};
        use rand::{rngs::StdRng, SeedableRng};
        let mut sel = HealthAware {
            exploration: 0.0,
            ..HealthAware::default()
        };
        assert_eq!(sel.threshold, DEFAULT_HEALTH_THRESHOLD);
        let weak = c(0, 0.1, 0, true);
        let strong = c(1, 0.5, 9, true);
        let mut rng = StdRng::seed_from_u64(1);
        // Below the threshold, the idle source loses to a busy but healthy one...
        assert_eq!(sel.select(&[weak, strong], &mut rng), Some(1));
        // ...and is still used when nothing healthier is eligible.
        let strong_refused = Candidate {
            eligible: false,
            ..strong
        };
        assert_eq!(sel.select(&[weak, strong_refused], &mut rng), Some(0));
    }
}
