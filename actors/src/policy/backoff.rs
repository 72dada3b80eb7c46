//! Retry delay (docs/behaviour.md §5.1): `min(base·2^attempt, max) · uniform(0.5, 1.5)`, and at least the
//! upstream's Retry-After hint.
//!
//! The jitter draw is an argument (`u` in `[0, 1)`) so the formula is exact in tests; callers
//! pass `rng.random::<f64>()`.
//!
//! Not for: deciding whether to retry (error classes do) or sleeping.

use std::time::Duration;

/// Exponential backoff parameters (`BACKOFF_BASE_S`, `BACKOFF_MAX_S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Delay before the first retry (before jitter).
    pub(crate) base: Duration,
    /// Cap of the exponential part (before jitter).
    pub(crate) max: Duration,
}

impl Backoff {
    /// Build from base and cap.
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// Delay before retry number `attempt` (0 = the first retry): the capped exponential times
    /// `0.5 + u` (`u` clamped into `[0, 1]`, so the factor is in `[0.5, 1.5]`), then raised to
    /// `retry_after` when that is longer. Jitter may take the delay above `max` (up to 1.5×).
    pub(crate) fn delay(&self, attempt: u32, u: f64, retry_after: Option<Duration>) -> Duration {
        let factor = 2f64.powi(attempt.min(1023) as i32);
        let exp = self.base.as_secs_f64() * factor;
        let capped = exp.min(self.max.as_secs_f64());
        let u = if u.is_finite() {
            u.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let jittered = Duration::from_secs_f64((capped * (0.5 + u)).max(0.0));
        match retry_after {
            Some(hint) if hint > jittered => hint,
            _ => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Backoff {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(8))
    }

    #[test]
    fn exponential_then_capped() {
        let got: Vec<u128> = (0..7)
            .map(|a| b().delay(a, 0.5, None).as_millis())
            .collect();
        assert_eq!(got, vec![500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(b().delay(u32::MAX, 0.5, None), Duration::from_secs(8));
    }

    #[test]
    fn jitter_spans_half_to_one_and_a_half() {
        assert_eq!(b().delay(1, 0.0, None), Duration::from_millis(500));
        assert_eq!(b().delay(1, 0.999_999, None).as_millis(), 1499);
        assert_eq!(
            b().delay(4, 0.75, None),
            Duration::from_secs(10),
            "above max by jitter"
        );
        assert_eq!(b().delay(1, f64::NAN, None), Duration::from_secs(1));
        assert_eq!(b().delay(1, -3.0, None), Duration::from_millis(500));
    }

    #[test]
    fn retry_after_is_a_floor_not_a_cap() {
        assert_eq!(
            b().delay(0, 0.5, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            b().delay(3, 0.5, Some(Duration::from_secs(1))),
            Duration::from_secs(4)
        );
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn backoff_example() {
        use crate::policy::backoff::Backoff;
        use std::time::Duration;
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(b.delay(2, 0.5, None), Duration::from_secs(4));
        assert_eq!(
            b.delay(2, 0.5, Some(Duration::from_secs(9))),
            Duration::from_secs(9)
        );
    }

    #[test]
    fn backoff_new_example() {
        use crate::policy::backoff::Backoff;
        use std::time::Duration;
        // BACKOFF_BASE_S=0.5, BACKOFF_MAX_S=8
        let b = Backoff::new(Duration::from_millis(500), Duration::from_secs(8));
        assert_eq!(
            b,
            Backoff {
                base: Duration::from_millis(500),
                max: Duration::from_secs(8)
            }
        );
    }

    #[test]
    fn backoff_delay_example() {
        use crate::policy::backoff::Backoff;
        use std::time::Duration;
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        // Retry 10 would wait 1 024 s: capped at 30 s, then jittered between ×0.5 and ×1.5.
        assert_eq!(b.delay(10, 0.0, None), Duration::from_secs(15));
        assert_eq!(b.delay(10, 1.0, None), Duration::from_secs(45));
        // A longer Retry-After hint wins; a shorter one does not shorten the delay.
        assert_eq!(
            b.delay(0, 0.5, Some(Duration::from_secs(20))),
            Duration::from_secs(20)
        );
        assert_eq!(
            b.delay(3, 0.5, Some(Duration::from_secs(2))),
            Duration::from_secs(8)
        );
    }
}
