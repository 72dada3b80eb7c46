//! [`MemoryGate`]: the six-gate limiter port over [`LimiterState`] in process memory.
//!
//! Not for: several processes sharing quota (the Redis backend does that).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

use crate::clock::{Clock, TokioClock};
use crate::policy::budget::BudgetLedger;
use crate::policy::limiter::{LimiterState, Usage, DEFAULT_WINDOW};
use crate::ports::budget::{BudgetClaim, BudgetDecision, BudgetLease, BudgetRequest, BudgetSpend};
use crate::ports::gate::{GateBackend, GateDecision, GateRequest, Lease};
use crate::ports::BackendError;

use crate::clock::millis_since;

/// In-memory [`GateBackend`]. Windows are `window` long (60 s by default) and counted from the
/// gate's construction instant; [`Lease::window`] is the window index since then. Spend budgets
/// ([`crate::policy::budget::BudgetLedger`]) run on wall-clock Unix time, read once at
/// construction and advanced by `clock` from there (so a [`super::ManualClock`] drives them too).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{ManualClock, MemoryGate};
/// use polygateway_actors::{Gate, GateBackend, GateDecision, GateRequest, Limits};
/// let clock = Arc::new(ManualClock::new());
/// let gate = MemoryGate::new(clock.clone());
/// let req = |id: &str| GateRequest {
///     scope: "LLM".into(), source: "openai_1".into(),
///     global: Limits::default(), per_source: Limits { rpm: 1, ..Limits::default() },
///     est_tokens: 0, lease_id: id.into(), lease_ttl: Duration::from_secs(120),
/// };
/// assert!(matches!(gate.admit(&req("1")).await?, GateDecision::Admitted(_)));
/// clock.advance(Duration::from_secs(45));
/// assert_eq!(
///     gate.admit(&req("2")).await?,
///     GateDecision::Refused { gate: Gate::SourceRpm, retry_after: Duration::from_secs(15) }
/// );
/// clock.advance(Duration::from_secs(15)); // a new minute window
/// assert!(matches!(gate.admit(&req("2")).await?, GateDecision::Admitted(_)));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryGate {
    clock: Arc<dyn Clock>,
    origin: Instant,
    /// Unix ms at `origin`.
    origin_unix_ms: u64,
    state: Mutex<LimiterState>,
    budgets: Mutex<BudgetLedger>,
}

impl Default for MemoryGate {
    fn default() -> Self {
        Self::new(Arc::new(TokioClock))
    }
}

impl MemoryGate {
    /// A gate with 60 s rate windows reading time from `clock`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway_actors::BackendError> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{ManualClock, MemoryGate};
    /// use polygateway_actors::GateBackend;
    /// let clock = Arc::new(ManualClock::new());
    /// let gate = MemoryGate::new(clock.clone());
    /// assert_eq!(gate.window(), Duration::from_secs(60));
    /// gate.mark_progress("LLM").await?;
    /// clock.advance(Duration::from_millis(1_500));
    /// assert_eq!(gate.progress_age("LLM").await?, Some(Duration::from_millis(1_500)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_window(clock, DEFAULT_WINDOW)
    }

    /// A gate with rate windows of `window` (tests shorten it to observe roll-over in real time).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway_actors::BackendError> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{ManualClock, MemoryGate};
    /// use polygateway_actors::{GateBackend, GateDecision, GateRequest, Limits};
    /// let clock = Arc::new(ManualClock::new());
    /// let gate = MemoryGate::with_window(clock.clone(), Duration::from_secs(1));
    /// let req = GateRequest {
    ///     scope: "LLM".into(), source: "openai_1".into(),
    ///     global: Limits::default(), per_source: Limits::default(),
    ///     est_tokens: 0, lease_id: "1".into(), lease_ttl: Duration::from_secs(10),
    /// };
    /// clock.advance(Duration::from_millis(2_500));
    /// let GateDecision::Admitted(lease) = gate.admit(&req).await? else {
    ///     panic!("no limits set");
    /// };
    /// assert_eq!(lease.window, 2, "the third one-second window since construction");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_window(clock: Arc<dyn Clock>, window: Duration) -> Self {
        let origin = clock.now();
        let origin_unix_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            clock,
            origin,
            origin_unix_ms,
            state: Mutex::new(LimiterState::new(window)),
            budgets: Mutex::new(BudgetLedger::default()),
        }
    }

    /// The rate-window length.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{ManualClock, MemoryGate};
    /// let gate = MemoryGate::with_window(Arc::new(ManualClock::new()), Duration::from_secs(5));
    /// // A quota wait never needs to sleep longer than one window.
    /// let hint = Duration::from_secs(40);
    /// assert_eq!(hint.min(gate.window()), Duration::from_secs(5));
    /// ```
    pub fn window(&self) -> Duration {
        // The window never changes after construction, so a poisoned lock still holds it truly.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .window()
    }

    /// Current counters of `scope` (or one of its sources), for snapshots and invariants.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway_actors::BackendError> {
    /// use std::time::Duration;
    /// use polygateway_actors::memory::MemoryGate;
    /// use polygateway_actors::policy::limiter::Usage;
    /// use polygateway_actors::{GateBackend, GateRequest, Limits};
    /// let gate = MemoryGate::default();
    /// let req = GateRequest {
    ///     scope: "LLM".into(), source: "openai_1".into(),
    ///     global: Limits::default(), per_source: Limits::default(),
    ///     est_tokens: 250, lease_id: "1".into(), lease_ttl: Duration::from_secs(120),
    /// };
    /// gate.admit(&req).await?;
    /// assert_eq!(gate.usage("LLM", None)?, Usage { leases: 1, requests: 1, tokens: 250 });
    /// assert_eq!(gate.usage("LLM", Some("openai_2"))?, Usage::default());
    /// # Ok(())
    /// # }
    /// ```
    pub fn usage(&self, scope: &str, source: Option<&str>) -> Result<Usage, BackendError> {
        let mut s = self.lock()?;
        let now = self.now_ms();
        Ok(s.usage(scope, source, now))
    }

    fn now_ms(&self) -> u64 {
        millis_since(self.origin, self.clock.now())
    }

    fn now_unix_ms(&self) -> u64 {
        self.origin_unix_ms.saturating_add(self.now_ms())
    }

    fn budgets(&self) -> Result<MutexGuard<'_, BudgetLedger>, BackendError> {
        self.budgets
            .lock()
            .map_err(|_| BackendError::new("memory budget ledger poisoned by a panic"))
    }

    /// A poisoned lock means a panic mid-update: the counters are no longer trustworthy, so
    /// fail closed (docs/behaviour.md §10.6) instead of guessing.
    fn lock(&self) -> Result<MutexGuard<'_, LimiterState>, BackendError> {
        self.state
            .lock()
            .map_err(|_| BackendError::new("memory gate state poisoned by a panic"))
    }
}

#[async_trait]
impl GateBackend for MemoryGate {
    async fn admit(&self, request: &GateRequest) -> Result<GateDecision, BackendError> {
        let mut s = self.lock()?;
        // Time read under the lock: admissions see non-decreasing time.
        let now = self.now_ms();
        Ok(s.admit(request, now))
    }

    async fn release(&self, lease: &Lease) -> Result<(), BackendError> {
        self.lock()?.release(lease);
        Ok(())
    }

    async fn settle(&self, lease: &Lease, actual_tokens: u64) -> Result<(), BackendError> {
        self.lock()?.settle(lease, actual_tokens);
        Ok(())
    }

    async fn mark_progress(&self, scope: &str) -> Result<(), BackendError> {
        let mut s = self.lock()?;
        let now = self.now_ms();
        s.mark_progress(scope, now);
        Ok(())
    }

    async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError> {
        let s = self.lock()?;
        Ok(s.progress_age(scope, self.now_ms()))
    }

    async fn leases_held(&self, scope: &str) -> Result<u64, BackendError> {
        let mut s = self.lock()?;
        let now = self.now_ms();
        Ok(s.leases_held(scope, now))
    }

    async fn reserve_budget(
        &self,
        request: &BudgetRequest,
    ) -> Result<BudgetDecision, BackendError> {
        let mut b = self.budgets()?;
        let now = self.now_unix_ms();
        Ok(b.reserve(request, now))
    }

    async fn settle_budget(
        &self,
        lease: &BudgetLease,
        actual_micros: u64,
    ) -> Result<(), BackendError> {
        let mut b = self.budgets()?;
        let now = self.now_unix_ms();
        b.settle(lease, actual_micros, now);
        Ok(())
    }

    async fn budget_spend(&self, claim: &BudgetClaim) -> Result<BudgetSpend, BackendError> {
        let b = self.budgets()?;
        Ok(b.spend(claim, self.now_unix_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::ManualClock;
    use crate::ports::gate::{Gate, Limits};

    fn req(id: &str) -> GateRequest {
        GateRequest {
            scope: "S".into(),
            source: "a".into(),
            global: Limits::default(),
            per_source: Limits {
                max_concurrency: 1,
                rpm: 2,
                tpm: 0,
            },
            est_tokens: 0,
            lease_id: id.into(),
            lease_ttl: Duration::from_secs(10),
        }
    }

    #[tokio::test]
    async fn follows_the_injected_clock() {
        let clock = Arc::new(ManualClock::new());
        let gate = MemoryGate::with_window(clock.clone(), Duration::from_secs(60));
        let GateDecision::Admitted(_) = gate.admit(&req("1")).await.unwrap() else {
            panic!()
        };
        let refused = gate.admit(&req("2")).await.unwrap();
        assert!(matches!(
            refused,
            GateDecision::Refused {
                gate: Gate::SourceConcurrency,
                ..
            }
        ));
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            gate.leases_held("S").await.unwrap(),
            0,
            "lease expired with the clock"
        );
        let GateDecision::Admitted(b) = gate.admit(&req("2")).await.unwrap() else {
            panic!()
        };
        gate.release(&b).await.unwrap();
        assert_eq!(
            gate.admit(&req("3")).await.unwrap(),
            GateDecision::Refused {
                gate: Gate::SourceRpm,
                retry_after: Duration::from_secs(50)
            }
        );
        clock.advance(Duration::from_secs(50));
        assert!(matches!(
            gate.admit(&req("3")).await.unwrap(),
            GateDecision::Admitted(_)
        ));
    }

    #[tokio::test]
    async fn progress_age_follows_the_clock() {
        let clock = Arc::new(ManualClock::new());
        let gate = MemoryGate::new(clock.clone());
        assert_eq!(gate.progress_age("S").await.unwrap(), None);
        gate.mark_progress("S").await.unwrap();
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(
            gate.progress_age("S").await.unwrap(),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(gate.window(), DEFAULT_WINDOW);
    }

    #[tokio::test]
    async fn usage_reports_counters() {
        let gate = MemoryGate::default();
        let GateDecision::Admitted(_) = gate.admit(&req("1")).await.unwrap() else {
            panic!()
        };
        assert_eq!(
            gate.usage("S", Some("a")).unwrap(),
            Usage {
                leases: 1,
                requests: 1,
                tokens: 0
            }
        );
        assert_eq!(gate.usage("nope", None).unwrap(), Usage::default());
    }
}
