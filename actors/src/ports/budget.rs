//! Spend budgets (docs/behaviour.md §5.8): the types of the budget gate the limiter port
//! ([`crate::GateBackend`]) carries beside its six rate gates.
//!
//! Contract shared by every backend (memory, Redis):
//! - amounts are integer **micro-units** of the pricing table's currency (1 = 0.000001), so
//!   sums are exact on every backend (Lua numbers are doubles: exact below 2^53 micro-units);
//! - `reserve_budget` checks every claim of a request atomically: all pass and each counts the
//!   estimate in its current window, or nothing is counted;
//! - a claim refuses when its window's spend has reached the limit, or when the estimate does
//!   not fit in what is left;
//! - `settle_budget(actual)` replaces the estimate with the real cost in the windows of the
//!   reservation, once (idempotent by lease id); a window that already rolled over is left
//!   alone. A reservation whose lease TTL passed unsettled stays counted at its estimate (the
//!   call may have run: a budget never under-counts it) and a late settle is a no-op;
//! - windows are calendar-aligned UTC: the hour, the day, the month (see [`BudgetPeriod`]).

use std::sync::Arc;
use std::time::Duration;

/// Milliseconds in an hour and a day (Unix time has no leap seconds, so UTC hours and days are
/// fixed-length slices of it; months are not).
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 86_400_000;

/// The window a budget is counted in.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::BudgetPeriod;
/// // 2026-02-14T10:30:00Z
/// let now = 1_771_065_000_000;
/// let day = BudgetPeriod::Day.window(now);
/// assert_eq!(day.end_ms - now, 13 * 3_600_000 + 30 * 60_000, "resets at midnight UTC");
/// let month = BudgetPeriod::Month.window(now);
/// assert_eq!(month.end_ms, 1_772_323_200_000, "2026-03-01T00:00:00Z");
/// // Tests use short fixed windows, aligned to the Unix epoch.
/// let w = BudgetPeriod::Fixed(Duration::from_secs(10)).window(1_005);
/// assert_eq!((w.index, w.end_ms), (0, 10_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetPeriod {
    /// The UTC hour.
    Hour,
    /// The UTC day (resets at 00:00 UTC).
    Day,
    /// The calendar month in UTC (resets at 00:00 UTC on the 1st).
    Month,
    /// Fixed windows of this length counted from the Unix epoch (tests; at least 1 ms).
    Fixed(Duration),
}

/// One window of a [`BudgetPeriod`]: its index (the same on every backend) and its end.
///
/// ```
/// use polygateway_actors::{BudgetPeriod, BudgetWindow};
/// let w: BudgetWindow = BudgetPeriod::Hour.window(7_200_001);
/// assert_eq!(w, BudgetWindow { index: 2, end_ms: 10_800_000 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetWindow {
    /// Hours / days since the epoch, months since year 0 (`year * 12 + month - 1`), or fixed
    /// windows since the epoch.
    pub index: u64,
    /// When the window ends (Unix ms).
    pub end_ms: u64,
}

impl BudgetPeriod {
    /// The window holding `now_unix_ms`.
    ///
    /// ```
    /// use polygateway_actors::BudgetPeriod;
    /// // 2024-02-29T23:59:59.999Z: still February of a leap year.
    /// let w = BudgetPeriod::Month.window(1_709_251_199_999);
    /// assert_eq!(w.index, 2024 * 12 + 1);
    /// assert_eq!(w.end_ms, 1_709_251_200_000);
    /// ```
    pub fn window(self, now_unix_ms: u64) -> BudgetWindow {
        let fixed = |len: u64| {
            let index = now_unix_ms / len;
            BudgetWindow {
                index,
                end_ms: (index + 1).saturating_mul(len),
            }
        };
        match self {
            BudgetPeriod::Hour => fixed(HOUR_MS),
            BudgetPeriod::Day => fixed(DAY_MS),
            BudgetPeriod::Fixed(len) => {
                fixed(u64::try_from(len.as_millis()).unwrap_or(u64::MAX).max(1))
            }
            BudgetPeriod::Month => {
                let (y, m, _) = civil_from_days(now_unix_ms / DAY_MS);
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                BudgetWindow {
                    index: y * 12 + (m - 1),
                    end_ms: days_from_civil(ny, nm, 1) * DAY_MS,
                }
            }
        }
    }

    /// The configuration word (`hour`, `day`, `month`), or `<n>ms` for a fixed window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::BudgetPeriod;
    /// assert_eq!(BudgetPeriod::Day.name(), "day");
    /// assert_eq!(BudgetPeriod::Fixed(Duration::from_secs(2)).name(), "2000ms");
    /// ```
    pub fn name(self) -> String {
        match self {
            BudgetPeriod::Hour => "hour".into(),
            BudgetPeriod::Day => "day".into(),
            BudgetPeriod::Month => "month".into(),
            BudgetPeriod::Fixed(len) => format!("{}ms", len.as_millis()),
        }
    }
}

/// Days since 1970-01-01 → (year, month 1..=12, day 1..=31), proleptic Gregorian (Howard
/// Hinnant's algorithm; `lua/budget.lua` has the same one). Only dates from 1970 on occur.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// (year ≥ 1970, month, day) → days since 1970-01-01 (inverse of [`civil_from_days`]).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One budget a call is counted against: a name (`scope:LLM`, `tenant:acme`, `vkey:ci`), its
/// limit per window and the window.
///
/// ```
/// use polygateway_actors::{BudgetClaim, BudgetPeriod};
/// // $25 a day for tenant acme.
/// let claim = BudgetClaim { key: "tenant:acme".into(), limit_micros: 25_000_000, period: BudgetPeriod::Day };
/// assert_eq!(claim.limit_micros / 1_000_000, 25);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetClaim {
    /// The budget's name; budgets with the same name share their spend.
    pub key: Arc<str>,
    /// Limit per window, in micro-units of the pricing currency.
    pub limit_micros: u64,
    /// The window.
    pub period: BudgetPeriod,
}

/// A reservation request: every claim must fit `est_micros`.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::memory::MemoryGate;
/// use polygateway_actors::{BudgetClaim, BudgetPeriod, BudgetRequest};
/// let request = BudgetRequest {
///     claims: vec![BudgetClaim { key: "scope:LLM".into(), limit_micros: 5_000_000, period: BudgetPeriod::Hour }],
///     est_micros: 1_200,
///     lease_id: "call-1".into(),
///     lease_ttl: Duration::from_secs(600),
/// };
/// assert_eq!(request.claims.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct BudgetRequest {
    /// The budgets the call counts against (none: nothing to reserve).
    pub claims: Vec<BudgetClaim>,
    /// The call's estimated cost, reserved in every claim.
    pub est_micros: u64,
    /// Unique id: makes settle idempotent and a re-sent reservation harmless.
    pub lease_id: Arc<str>,
    /// How long the reservation waits for its settle before it is kept at the estimate.
    pub lease_ttl: Duration,
}

/// A granted reservation: settle it exactly once with the real cost (idempotent).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use std::time::Duration;
/// use polygateway_actors::memory::MemoryGate;
/// use polygateway_actors::{BudgetClaim, BudgetDecision, BudgetPeriod, BudgetRequest, GateBackend};
/// let gate = MemoryGate::default();
/// let claim = BudgetClaim { key: "tenant:acme".into(), limit_micros: 10_000, period: BudgetPeriod::Day };
/// let request = BudgetRequest {
///     claims: vec![claim.clone()], est_micros: 4_000,
///     lease_id: "call-1".into(), lease_ttl: Duration::from_secs(60),
/// };
/// let BudgetDecision::Reserved(lease) = gate.reserve_budget(&request).await? else { panic!() };
/// assert_eq!(gate.budget_spend(&claim).await?.spent_micros, 4_000);
/// gate.settle_budget(&lease, 2_500).await?; // the call cost less: the rest is refunded
/// assert_eq!(gate.budget_spend(&claim).await?.spent_micros, 2_500);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetLease {
    /// The lease id from the request.
    pub id: Arc<str>,
    /// Reserved at admission in every claim.
    pub est_micros: u64,
    /// Each claim's key and the window index the estimate was counted in, in claim order.
    pub windows: Vec<(Arc<str>, u64)>,
}

/// Why a reservation was refused: the first claim (in request order) that had no room.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::BudgetExhausted;
/// let e = BudgetExhausted {
///     key: "vkey:ci".into(), limit_micros: 1_000_000, spent_micros: 999_000,
///     retry_after: Duration::from_secs(3_600),
/// };
/// assert_eq!(e.remaining_micros(), 1_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetExhausted {
    /// The budget that refused.
    pub key: Arc<str>,
    /// Its limit per window.
    pub limit_micros: u64,
    /// Spent (and reserved) in the current window.
    pub spent_micros: u64,
    /// Until the window resets.
    pub retry_after: Duration,
}

impl BudgetExhausted {
    /// What is left of the budget in this window (less than the call's estimate).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::BudgetExhausted;
    /// let over = BudgetExhausted {
    ///     key: "scope:LLM".into(), limit_micros: 10, spent_micros: 12, retry_after: Duration::ZERO,
    /// };
    /// assert_eq!(over.remaining_micros(), 0, "an overshoot leaves nothing, not a negative");
    /// ```
    pub fn remaining_micros(&self) -> u64 {
        self.limit_micros.saturating_sub(self.spent_micros)
    }
}

/// The answer to a reservation.
///
/// ```
/// use polygateway_actors::BudgetDecision;
/// fn admitted(d: &BudgetDecision) -> bool {
///     matches!(d, BudgetDecision::Reserved(_))
/// }
/// # let _ = admitted;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetDecision {
    /// Every claim had room; the estimate is counted in each.
    Reserved(BudgetLease),
    /// A claim had no room; nothing was counted.
    Exhausted(BudgetExhausted),
}

/// Spend of one budget in its current window.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use polygateway_actors::memory::MemoryGate;
/// use polygateway_actors::{BudgetClaim, BudgetPeriod, GateBackend};
/// let gate = MemoryGate::default();
/// let claim = BudgetClaim { key: "scope:LLM".into(), limit_micros: 1, period: BudgetPeriod::Month };
/// let spend = gate.budget_spend(&claim).await?;
/// assert_eq!(spend.spent_micros, 0);
/// assert!(spend.resets_in.as_secs() <= 31 * 86_400);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSpend {
    /// Spent (settled) plus reserved (in flight) in the current window, micro-units.
    pub spent_micros: u64,
    /// Until the window resets.
    pub resets_in: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trips_over_centuries() {
        for days in (0..200_000).step_by(7) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn month_windows_end_on_the_first() {
        // 2026-12-31T23:00:00Z → January 2027.
        let w = BudgetPeriod::Month.window(1_798_758_000_000);
        assert_eq!(w.index, 2026 * 12 + 11);
        assert_eq!(w.end_ms, days_from_civil(2027, 1, 1) * DAY_MS);
        let next = BudgetPeriod::Month.window(w.end_ms);
        assert_eq!(next.index, w.index + 1);
    }

    #[test]
    fn fixed_windows_are_never_empty() {
        let w = BudgetPeriod::Fixed(Duration::ZERO).window(5);
        assert_eq!((w.index, w.end_ms), (5, 6));
    }
}
