//! Per-source health score (docs/behaviour.md §5.5): an exponentially weighted moving average of success.
//!
//! Fed by every attempt's [`AttemptVerdict`]: `Success` pulls it toward 1; `Failure`,
//! `RateLimited` and `Dead` toward 0; `AliveButUnusable` (ResultInvalid, real non-2xx) is
//! neutral. Selection reads it (see [`crate::policy::select`]).
//!
//! Not for: opening circuits (the breaker decides that from its own channels) or pacing.

use crate::outcome::AttemptVerdict;

/// Default smoothing factor: each observation moves the score by 10 % of the gap.
pub(crate) const DEFAULT_ALPHA: f64 = 0.1;

/// A success EWMA in `[0, 1]`, starting at 1.0 (a new source is presumed healthy).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HealthEwma {
    value: f64,
    alpha: f64,
}

impl Default for HealthEwma {
    fn default() -> Self {
        Self::new(DEFAULT_ALPHA)
    }
}

impl HealthEwma {
    /// A score at 1.0 with smoothing `alpha`, clamped into `(0, 1]`.
    pub(crate) fn new(alpha: f64) -> Self {
        let alpha = if alpha.is_finite() {
            alpha.clamp(f64::MIN_POSITIVE, 1.0)
        } else {
            DEFAULT_ALPHA
        };
        Self { value: 1.0, alpha }
    }

    /// The current score.
    pub(crate) fn value(&self) -> f64 {
        self.value
    }

    /// Fold one attempt's verdict in.
    pub(crate) fn observe(&mut self, verdict: AttemptVerdict) {
        let sample = match verdict {
            AttemptVerdict::Success => 1.0,
            AttemptVerdict::Failure | AttemptVerdict::RateLimited | AttemptVerdict::Dead => 0.0,
            AttemptVerdict::AliveButUnusable => return,
        };
        self.value += self.alpha * (sample - self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_healthy_and_decays_geometrically() {
        let mut h = HealthEwma::default();
        assert_eq!(h.value(), 1.0);
        for _ in 0..10 {
            h.observe(AttemptVerdict::Failure);
        }
        assert!((h.value() - 0.9f64.powi(10)).abs() < 1e-12);
    }

    #[test]
    fn every_bad_verdict_counts_and_unusable_is_neutral() {
        for v in [
            AttemptVerdict::Failure,
            AttemptVerdict::RateLimited,
            AttemptVerdict::Dead,
        ] {
            let mut h = HealthEwma::default();
            h.observe(v);
            assert!((h.value() - 0.9).abs() < 1e-12, "{v:?}");
        }
        let mut h = HealthEwma::default();
        h.observe(AttemptVerdict::Failure);
        h.observe(AttemptVerdict::AliveButUnusable);
        assert!((h.value() - 0.9).abs() < 1e-12);
    }

    #[test]
    fn recovers_toward_one_on_success() {
        let mut h = HealthEwma::new(0.5);
        h.observe(AttemptVerdict::Failure);
        h.observe(AttemptVerdict::Failure);
        assert_eq!(h.value(), 0.25);
        h.observe(AttemptVerdict::Success);
        assert_eq!(h.value(), 0.625);
    }

    #[test]
    fn alpha_is_clamped() {
        let mut h = HealthEwma::new(7.0);
        h.observe(AttemptVerdict::Failure);
        assert_eq!(h.value(), 0.0);
        assert_eq!(HealthEwma::new(f64::NAN), HealthEwma::new(DEFAULT_ALPHA));
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn default_alpha_example() {
        use crate::policy::health::{HealthEwma, DEFAULT_ALPHA};
        use crate::AttemptVerdict;
        let mut h = HealthEwma::default();
        assert_eq!(h, HealthEwma::new(DEFAULT_ALPHA));
        // One failure from full health costs exactly `alpha`.
        h.observe(AttemptVerdict::Failure);
        assert!((h.value() - (1.0 - DEFAULT_ALPHA)).abs() < 1e-12);
    }

    #[test]
    fn health_ewma_example() {
        use crate::policy::health::HealthEwma;
        use crate::AttemptVerdict;
        let mut h = HealthEwma::default();
        h.observe(AttemptVerdict::Failure);
        assert!((h.value() - 0.9).abs() < 1e-12);
    }

    #[test]
    fn health_ewma_new_example() {
        use crate::policy::health::HealthEwma;
        use crate::AttemptVerdict;
        let mut fast = HealthEwma::new(0.5);
        fast.observe(AttemptVerdict::Failure);
        assert_eq!(fast.value(), 0.5);
        // Out of range: clamped to 1, so one observation replaces the score.
        let mut instant = HealthEwma::new(7.0);
        instant.observe(AttemptVerdict::Dead);
        assert_eq!(instant.value(), 0.0);
    }

    #[test]
    fn health_ewma_value_example() {
        use crate::policy::health::HealthEwma;
        use crate::AttemptVerdict;
        let mut h = HealthEwma::new(0.5);
        assert_eq!(h.value(), 1.0, "a new source is presumed healthy");
        h.observe(AttemptVerdict::RateLimited);
        h.observe(AttemptVerdict::RateLimited);
        assert_eq!(h.value(), 0.25);
    }

    #[test]
    fn health_ewma_observe_example() {
        use crate::policy::health::HealthEwma;
        use crate::AttemptVerdict;
        let mut h = HealthEwma::new(0.5);
        h.observe(AttemptVerdict::Failure); // halfway to 0
        h.observe(AttemptVerdict::AliveButUnusable); // neutral
        assert_eq!(h.value(), 0.5);
        h.observe(AttemptVerdict::Success); // halfway back to 1
        assert_eq!(h.value(), 0.75);
    }

    #[test]
    fn unusable_is_neutral_and_rate_limited_lowers_health() {
        use crate::policy::health::HealthEwma;
        use crate::AttemptVerdict;
        let mut health = HealthEwma::default();
        health.observe(AttemptVerdict::AliveButUnusable);
        health.observe(AttemptVerdict::RateLimited);
        assert!((health.value() - 0.9).abs() < 1e-12);
    }
}
