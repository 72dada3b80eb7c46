//! The spend-budget gate (docs/behaviour.md §5.8), sans I/O: what [`crate::memory::MemoryGate`]
//! runs under its lock, and the reference `lua/budget.lua` mirrors. The contract is in
//! [`crate::ports::budget`].
//!
//! Time is `now_unix_ms` (wall-clock Unix milliseconds), because budget windows are calendar
//! windows that every process must agree on.
//!
//! Like TPM: `reserve` counts the call's estimate in each claim's current window; `settle`
//! replaces it with the real cost in the same windows once. Unlike TPM the reservation lives per
//! *call*, not per attempt, and a budget refusal is final for the window (nothing frees
//! up before it resets, so there is nothing to wait for).
//!
//! Not for: pricing (the caller turns tokens into micro-units) or deciding which budgets apply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ports::budget::{
    BudgetClaim, BudgetDecision, BudgetExhausted, BudgetLease, BudgetRequest, BudgetSpend,
};

#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    index: u64,
    spent: u64,
}

#[derive(Debug)]
struct Reservation {
    lease: BudgetLease,
    expires_ms: u64,
}

/// Spend per budget and window, and the reservations not yet settled.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::budget::BudgetLedger;
/// use polygateway_actors::{BudgetClaim, BudgetDecision, BudgetPeriod, BudgetRequest};
/// let claim = BudgetClaim { key: "tenant:acme".into(), limit_micros: 1_000, period: BudgetPeriod::Hour };
/// let req = |id: &str| BudgetRequest {
///     claims: vec![claim.clone()], est_micros: 600,
///     lease_id: id.into(), lease_ttl: Duration::from_secs(60),
/// };
/// let mut ledger = BudgetLedger::default();
/// let BudgetDecision::Reserved(a) = ledger.reserve(&req("a"), 0) else { panic!() };
/// // 600 of 1 000 reserved: a second estimate of 600 does not fit.
/// let BudgetDecision::Exhausted(no) = ledger.reserve(&req("b"), 0) else { panic!() };
/// assert_eq!((no.remaining_micros(), no.retry_after), (400, Duration::from_secs(3_600)));
/// ledger.settle(&a, 100, 1); // it cost 100: 500 refunded
/// assert!(matches!(ledger.reserve(&req("b"), 2), BudgetDecision::Reserved(_)));
/// assert_eq!(ledger.spend(&claim, 2).spent_micros, 700);
/// ```
#[derive(Debug, Default)]
pub struct BudgetLedger {
    counters: HashMap<Arc<str>, Counter>,
    reservations: HashMap<Arc<str>, Reservation>,
    /// Earliest reservation expiry; `u64::MAX` when none.
    next_expiry_ms: u64,
}

impl BudgetLedger {
    /// Check every claim; count the estimate in all of them, or in none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::budget::BudgetLedger;
    /// use polygateway_actors::{BudgetClaim, BudgetDecision, BudgetPeriod, BudgetRequest};
    /// let scope = BudgetClaim { key: "scope:LLM".into(), limit_micros: 1_000, period: BudgetPeriod::Day };
    /// let tenant = BudgetClaim { key: "tenant:a".into(), limit_micros: 100, period: BudgetPeriod::Day };
    /// let req = BudgetRequest {
    ///     claims: vec![scope.clone(), tenant], est_micros: 150,
    ///     lease_id: "1".into(), lease_ttl: Duration::from_secs(60),
    /// };
    /// let mut ledger = BudgetLedger::default();
    /// let BudgetDecision::Exhausted(e) = ledger.reserve(&req, 0) else { panic!() };
    /// assert_eq!(&*e.key, "tenant:a");
    /// assert_eq!(ledger.spend(&scope, 0).spent_micros, 0, "the scope budget counted nothing");
    /// ```
    pub fn reserve(&mut self, request: &BudgetRequest, now_unix_ms: u64) -> BudgetDecision {
        self.reclaim(now_unix_ms);
        if let Some(r) = self.reservations.get(&request.lease_id) {
            // A re-sent reservation answers the first one and counts nothing.
            return BudgetDecision::Reserved(r.lease.clone());
        }
        let est = request.est_micros;
        let mut windows = Vec::with_capacity(request.claims.len());
        for claim in &request.claims {
            let w = claim.period.window(now_unix_ms);
            let c = self.counters.get(&claim.key).copied().unwrap_or_default();
            // A reader with an older clock than the last writer sees the newer window's spend
            // (never reopens an old window), as the rate gates do.
            let (index, spent) = if c.index >= w.index {
                (c.index, c.spent)
            } else {
                (w.index, 0)
            };
            if spent >= claim.limit_micros || spent.saturating_add(est) > claim.limit_micros {
                return BudgetDecision::Exhausted(BudgetExhausted {
                    key: Arc::clone(&claim.key),
                    limit_micros: claim.limit_micros,
                    spent_micros: spent,
                    retry_after: Duration::from_millis(w.end_ms.saturating_sub(now_unix_ms)),
                });
            }
            windows.push((Arc::clone(&claim.key), index));
        }
        for (key, index) in &windows {
            let c = self.counters.entry(Arc::clone(key)).or_default();
            if c.index != *index {
                *c = Counter {
                    index: *index,
                    spent: 0,
                };
            }
            c.spent = c.spent.saturating_add(est);
        }
        let lease = BudgetLease {
            id: Arc::clone(&request.lease_id),
            est_micros: est,
            windows,
        };
        let expires_ms = now_unix_ms
            .saturating_add(u64::try_from(request.lease_ttl.as_millis()).unwrap_or(u64::MAX));
        self.next_expiry_ms = self.next_expiry_ms.min(expires_ms);
        self.reservations.insert(
            Arc::clone(&request.lease_id),
            Reservation {
                lease: lease.clone(),
                expires_ms,
            },
        );
        BudgetDecision::Reserved(lease)
    }

    /// Replace the lease's estimate with `actual_micros` in its windows. Idempotent; a
    /// reservation that expired (kept at its estimate) or is unknown is left alone.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::budget::BudgetLedger;
    /// use polygateway_actors::{BudgetClaim, BudgetDecision, BudgetPeriod, BudgetRequest};
    /// let claim = BudgetClaim { key: "vkey:ci".into(), limit_micros: 1_000, period: BudgetPeriod::Hour };
    /// let req = BudgetRequest {
    ///     claims: vec![claim.clone()], est_micros: 100,
    ///     lease_id: "1".into(), lease_ttl: Duration::from_secs(60),
    /// };
    /// let mut ledger = BudgetLedger::default();
    /// let BudgetDecision::Reserved(lease) = ledger.reserve(&req, 0) else { panic!() };
    /// ledger.settle(&lease, 900, 10); // the call cost more than estimated: charged
    /// ledger.settle(&lease, 900, 10); // idempotent
    /// assert_eq!(ledger.spend(&claim, 10).spent_micros, 900);
    /// ```
    pub fn settle(&mut self, lease: &BudgetLease, actual_micros: u64, now_unix_ms: u64) {
        self.reclaim(now_unix_ms);
        let Some(r) = self.reservations.remove(&lease.id) else {
            return;
        };
        for (key, index) in &r.lease.windows {
            if let Some(c) = self.counters.get_mut(key) {
                if c.index == *index {
                    c.spent = c
                        .spent
                        .saturating_sub(r.lease.est_micros)
                        .saturating_add(actual_micros);
                }
            }
        }
    }

    /// The budget's spend (settled plus reserved) in its current window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::budget::BudgetLedger;
    /// use polygateway_actors::{BudgetClaim, BudgetPeriod};
    /// let claim = BudgetClaim {
    ///     key: "scope:LLM".into(), limit_micros: 10, period: BudgetPeriod::Fixed(Duration::from_secs(1)),
    /// };
    /// let spend = BudgetLedger::default().spend(&claim, 250);
    /// assert_eq!((spend.spent_micros, spend.resets_in), (0, Duration::from_millis(750)));
    /// ```
    pub fn spend(&self, claim: &BudgetClaim, now_unix_ms: u64) -> BudgetSpend {
        let w = claim.period.window(now_unix_ms);
        let spent = self
            .counters
            .get(&claim.key)
            .filter(|c| c.index >= w.index)
            .map_or(0, |c| c.spent);
        BudgetSpend {
            spent_micros: spent,
            resets_in: Duration::from_millis(w.end_ms.saturating_sub(now_unix_ms)),
        }
    }

    /// Forget the reservations whose TTL passed: their estimate stays counted.
    fn reclaim(&mut self, now_unix_ms: u64) {
        if now_unix_ms < self.next_expiry_ms {
            return;
        }
        let mut next = u64::MAX;
        self.reservations.retain(|_, r| {
            let keep = r.expires_ms > now_unix_ms;
            if keep {
                next = next.min(r.expires_ms);
            }
            keep
        });
        self.next_expiry_ms = next;
    }

    /// Reservations not yet settled.
    #[cfg(test)]
    fn reservations(&self) -> usize {
        self.reservations.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::budget::BudgetPeriod;

    const SEC: Duration = Duration::from_secs(1);

    fn claim(key: &str, limit: u64) -> BudgetClaim {
        BudgetClaim {
            key: key.into(),
            limit_micros: limit,
            period: BudgetPeriod::Fixed(Duration::from_secs(10)),
        }
    }

    fn req(id: &str, claims: Vec<BudgetClaim>, est: u64) -> BudgetRequest {
        BudgetRequest {
            claims,
            est_micros: est,
            lease_id: id.into(),
            lease_ttl: SEC,
        }
    }

    fn reserved(d: BudgetDecision) -> BudgetLease {
        match d {
            BudgetDecision::Reserved(l) => l,
            other => panic!("expected a reservation, got {other:?}"),
        }
    }

    fn exhausted(d: BudgetDecision) -> BudgetExhausted {
        match d {
            BudgetDecision::Exhausted(e) => e,
            other => panic!("expected exhaustion, got {other:?}"),
        }
    }

    #[test]
    fn a_refusal_counts_nothing_in_any_claim() {
        let (a, b) = (claim("a", 100), claim("b", 50));
        let mut l = BudgetLedger::default();
        reserved(l.reserve(&req("1", vec![a.clone(), b.clone()], 40), 0));
        let e = exhausted(l.reserve(&req("2", vec![a.clone(), b.clone()], 40), 0));
        assert_eq!((&*e.key, e.spent_micros, e.limit_micros), ("b", 40, 50));
        assert_eq!(e.retry_after, Duration::from_secs(10));
        assert_eq!(
            (l.spend(&a, 0).spent_micros, l.spend(&b, 0).spent_micros),
            (40, 40)
        );
        assert_eq!(l.reservations(), 1);
    }

    #[test]
    fn an_exhausted_budget_refuses_even_a_zero_estimate() {
        let a = claim("a", 100);
        let mut l = BudgetLedger::default();
        let lease = reserved(l.reserve(&req("1", vec![a.clone()], 10), 0));
        l.settle(&lease, 100, 0);
        exhausted(l.reserve(&req("2", vec![a.clone()], 0), 0));
        // An overshoot reads as spent, never wraps.
        let lease = reserved(l.reserve(&req("3", vec![claim("a", 1_000)], 0), 0));
        l.settle(&lease, 5_000, 0);
        assert_eq!(l.spend(&a, 0).spent_micros, 5_100);
    }

    #[test]
    fn windows_reset_and_late_settles_leave_the_new_window_alone() {
        let a = claim("a", 100);
        let mut l = BudgetLedger::default();
        let old = reserved(l.reserve(&req("1", vec![a.clone()], 100), 9_999));
        exhausted(l.reserve(&req("2", vec![a.clone()], 1), 9_999));
        let new = reserved(l.reserve(&req("2", vec![a.clone()], 30), 10_000));
        assert_eq!(new.windows, vec![(Arc::from("a"), 1)]);
        l.settle(&old, 0, 10_001);
        assert_eq!(l.spend(&a, 10_001).spent_micros, 30);
        // A reader whose clock lags does not reopen window 0.
        assert_eq!(l.spend(&a, 9_000).spent_micros, 30);
        exhausted(l.reserve(&req("3", vec![a.clone()], 71), 9_000));
    }

    #[test]
    fn an_expired_reservation_stays_at_its_estimate() {
        let a = claim("a", 100);
        let mut l = BudgetLedger::default();
        let lease = reserved(l.reserve(&req("1", vec![a.clone()], 60), 0));
        l.settle(&lease, 0, 1_000); // TTL (1 s) passed: too late
        assert_eq!(l.spend(&a, 1_000).spent_micros, 60);
        assert_eq!(l.reservations(), 0);
    }

    #[test]
    fn a_resent_reservation_is_not_counted_twice() {
        let a = claim("a", 100);
        let mut l = BudgetLedger::default();
        let first = reserved(l.reserve(&req("1", vec![a.clone()], 60), 0));
        assert_eq!(
            reserved(l.reserve(&req("1", vec![a.clone()], 60), 5)),
            first
        );
        assert_eq!(l.spend(&a, 5).spent_micros, 60);
    }

    #[test]
    fn overshoot_is_bounded_by_the_calls_in_flight() {
        // Ten calls estimated at 10 each fit a budget of 100; each really costs 15. Once they
        // settle the budget is 50 over — exactly what was in flight beyond the estimates —
        // and nothing more is admitted.
        let a = claim("a", 100);
        let mut l = BudgetLedger::default();
        let leases: Vec<_> = (0..10)
            .map(|i| reserved(l.reserve(&req(&i.to_string(), vec![a.clone()], 10), 0)))
            .collect();
        exhausted(l.reserve(&req("late", vec![a.clone()], 10), 0));
        for lease in &leases {
            l.settle(lease, 15, 1);
        }
        assert_eq!(l.spend(&a, 1).spent_micros, 150);
        exhausted(l.reserve(&req("after", vec![a.clone()], 0), 1));
    }
}
