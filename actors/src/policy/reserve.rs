//! The share of each gate that batch calls leave to the higher classes (docs/behaviour.md §5.7,
//! "Across processes").
//!
//! Inside one process the waiting room serves higher classes first. Processes that share a gate
//! (the Redis backends) share no room: a batch job in one process can hold every slot of a
//! shared gate, and an interactive call in another process then waits for whichever process
//! happens to poll first when a slot frees. So a batch call is admitted against smaller limits:
//! each configured limit less its reserve, `ceil(share × limit)`, and never below 1, so batch
//! work always makes progress. The higher classes see the whole limit: the reserve is what they
//! always find free, whatever the batch processes hold. The gate scripts need no change — the
//! same counters, checked against a lower limit — so the rule holds across processes and
//! backends without a new key.
//!
//! What it costs: while a gate is the binding limit, batch work runs at most at `1 − share` of
//! it, whether or not higher-class traffic is about.

use crate::policy::wait_queue::Priority;
use crate::ports::gate::Limits;

/// The largest share a reserve may take: batch work must keep most of a gate.
const MAX_SHARE: f64 = 0.9;

/// The share of every configured limit that batch calls may not take (0 ≤ share ≤ 0.9). The
/// default reserves nothing.
///
/// ```
/// use polygateway_actors::policy::reserve::BatchReserve;
/// use polygateway_actors::policy::wait_queue::Priority;
/// use polygateway_actors::Limits;
/// let gate = Limits { max_concurrency: 10, rpm: 600, tpm: 0 };
/// assert_eq!(BatchReserve::default().limits(gate, Priority::Batch), gate);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchReserve(f64);

impl BatchReserve {
    /// A reserve of `share` of each limit; `None` outside `0.0..=0.9` (or not a number), so the
    /// caller can name the allowed range.
    ///
    /// ```
    /// use polygateway_actors::policy::reserve::BatchReserve;
    /// assert!(BatchReserve::new(0.2).is_some());
    /// assert!(BatchReserve::new(0.95).is_none());
    /// assert_eq!(BatchReserve::new(0.0), Some(BatchReserve::default()));
    /// ```
    pub fn new(share: f64) -> Option<Self> {
        (0.0..=MAX_SHARE).contains(&share).then_some(Self(share))
    }

    /// The limits a call of class `priority` is admitted against.
    ///
    /// ```
    /// use polygateway_actors::policy::reserve::BatchReserve;
    /// use polygateway_actors::policy::wait_queue::Priority;
    /// use polygateway_actors::Limits;
    /// let gate = Limits { max_concurrency: 10, rpm: 600, tpm: 0 };
    /// let reserve = BatchReserve::new(0.2).unwrap();
    /// // Batch calls get 8 slots and 480 requests a minute; an unlimited TPM stays unlimited.
    /// assert_eq!(
    ///     reserve.limits(gate, Priority::Batch),
    ///     Limits { max_concurrency: 8, rpm: 480, tpm: 0 }
    /// );
    /// // Every other class sees the whole gate.
    /// assert_eq!(reserve.limits(gate, Priority::Interactive), gate);
    /// // A gate of one slot cannot be split: batch keeps it (it must make progress).
    /// let one = Limits { max_concurrency: 1, ..Limits::default() };
    /// assert_eq!(reserve.limits(one, Priority::Batch), one);
    /// ```
    pub fn limits(self, limits: Limits, priority: Priority) -> Limits {
        if priority != Priority::Batch || self.0 == 0.0 {
            return limits;
        }
        Limits {
            max_concurrency: self.lower(u64::from(limits.max_concurrency)) as u32,
            rpm: self.lower(u64::from(limits.rpm)) as u32,
            tpm: self.lower(limits.tpm),
        }
    }

    /// `limit` less `ceil(share × limit)`, at least 1; 0 (unlimited) stays 0.
    fn lower(self, limit: u64) -> u64 {
        if limit == 0 {
            return 0;
        }
        // Less a hair before rounding up: 0.1 × 100 must reserve 10, not 11.
        let reserved = (self.0 * limit as f64 - 1e-9).ceil() as u64;
        limit.saturating_sub(reserved).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_limits_leave_the_reserve_and_never_reach_zero() {
        let r = BatchReserve::new(0.1).unwrap();
        for (limit, batch) in [(0, 0), (1, 1), (2, 1), (4, 3), (10, 9), (11, 9), (100, 90)] {
            assert_eq!(r.lower(limit), batch, "limit {limit}");
        }
        let most = BatchReserve::new(MAX_SHARE).unwrap();
        assert_eq!(most.lower(10), 1);
        assert_eq!(most.lower(1_000_000), 100_000);
    }

    #[test]
    fn no_reserve_and_other_classes_are_untouched() {
        let gate = Limits {
            max_concurrency: 7,
            rpm: 3,
            tpm: 12_345,
        };
        assert_eq!(BatchReserve::default().limits(gate, Priority::Batch), gate);
        let r = BatchReserve::new(0.5).unwrap();
        assert_eq!(r.limits(gate, Priority::Normal), gate);
        assert_eq!(r.limits(gate, Priority::Interactive), gate);
        assert_eq!(
            r.limits(gate, Priority::Batch),
            Limits {
                max_concurrency: 3,
                rpm: 1,
                tpm: 6_172
            }
        );
    }

    #[test]
    fn a_share_outside_the_range_is_refused() {
        for bad in [-0.1, 0.91, 1.0, f64::NAN, f64::INFINITY] {
            assert!(BatchReserve::new(bad).is_none(), "{bad}");
        }
        assert_eq!(BatchReserve::new(0.0), Some(BatchReserve::default()));
    }
}
