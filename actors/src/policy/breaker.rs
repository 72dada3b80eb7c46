//! The circuit-breaker state machine of docs/behaviour.md §5.4, sans I/O.
//!
//! [`BreakerMachine`] is one source's breaker. It never reads a clock: every method takes
//! `now_ms`, milliseconds since an origin chosen by the backend (the memory backend uses its
//! construction instant, a Redis script uses `TIME`). All state is plain integers so a Lua script
//! can mirror it field by field; the per-method docs spell out the exact transitions.
//!
//! Not for: storing breakers (see [`crate::memory::breaker`] and the Redis backend), deciding
//! what counts as a failure (that is [`crate::outcome::AttemptVerdict`]), or waiting.
//!
//! Transitions:
//! - CLOSED → OPEN when a failure makes either channel trip: (rate) the two-bucket window holds
//!   ≥ `min_calls` samples with failure rate ≥ `fail_rate` — grows the streak; or (streak)
//!   consecutive failures ≥ `effective_threshold()`, unless the window is healthy (≥ `min_calls`
//!   samples and rate < `fail_rate`) — does not grow the streak.
//! - OPEN lasts `cooldown × 2^(streak−1)` (streak taken as ≥ 1) capped at
//!   `max(max_cooldown, cooldown)`, then reads as HALF_OPEN.
//! - HALF_OPEN grants one probe lease (`probe_ttl`); an expired lease frees the slot. The
//!   current probe's success closes, its failure re-opens and grows the streak.
//! - Every opening increments `epoch`; verdicts carrying another epoch are not applied.
//! - CLOSED stable for `2 × open duration of the current streak` → the next success resets the
//!   streak to 0.

use std::sync::Arc;
use std::time::Duration;

use crate::ports::breaker::{
    BreakerAdmit, BreakerConfig, BreakerSnapshot, BreakerState, BreakerVerdict,
};

/// Milliseconds of a duration, saturating at `u64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One of the two window buckets: bucket `index = now_ms / bucket_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bucket {
    index: u64,
    successes: u32,
    failures: u32,
}

/// The half-open probe lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Probe {
    id: Arc<str>,
    expires_ms: u64,
}

/// One source's breaker (docs/behaviour.md §5.4). See the module docs for the transitions.
///
/// ```
/// use polygateway_actors::policy::breaker::BreakerMachine;
/// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState, BreakerVerdict};
///
/// let cfg = BreakerConfig { fail_threshold: 2, ..BreakerConfig::default() };
/// let mut b = BreakerMachine::new();
/// for _ in 0..2 {
///     assert!(b.record(1_000, &cfg, 0, None, BreakerVerdict::Failure));
/// }
/// assert_eq!(b.state(), BreakerState::Open);
/// assert!(matches!(b.acquire(1_000, &cfg, || "p".into()), BreakerAdmit::Refused { .. }));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerMachine {
    state: BreakerState,
    epoch: u64,
    consecutive_failures: u32,
    open_streak: u32,
    open_until_ms: u64,
    closed_since_ms: u64,
    probe: Option<Probe>,
    buckets: [Bucket; 2],
    opens: u64,
}

impl Default for BreakerMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl BreakerMachine {
    /// A CLOSED breaker at epoch 0 with empty counters.
    ///
    /// ```
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState};
    /// let mut b = BreakerMachine::new();
    /// let s = b.snapshot(0);
    /// assert_eq!((s.state, s.epoch, s.opens), (BreakerState::Closed, 0, 0));
    /// let admit = b.acquire(0, &BreakerConfig::default(), || "p".into());
    /// assert_eq!(admit, BreakerAdmit::Pass { epoch: 0 });
    /// ```
    pub fn new() -> Self {
        Self {
            state: BreakerState::Closed,
            epoch: 0,
            consecutive_failures: 0,
            open_streak: 0,
            open_until_ms: 0,
            closed_since_ms: 0,
            probe: None,
            buckets: [Bucket::default(); 2],
            opens: 0,
        }
    }

    /// The stored state (an OPEN breaker past its cooldown still reads OPEN here until the next
    /// call with a `now`; [`BreakerMachine::snapshot`] shows the effective state).
    ///
    /// ```
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerConfig, BreakerState};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg);
    /// // Past the cooldown the stored state stays OPEN until a call brings a `now`.
    /// assert_eq!(b.state(), BreakerState::Open);
    /// assert_eq!(b.snapshot(31_000).state, BreakerState::HalfOpen);
    /// b.acquire(31_000, &cfg, || "probe-1".into());
    /// assert_eq!(b.state(), BreakerState::HalfOpen);
    /// ```
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// The opening epoch (incremented by every opening).
    ///
    /// ```
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState, BreakerVerdict};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// let slow_call = b.epoch(); // a slow call is admitted at epoch 0...
    /// b.force_open(0, &cfg); // ...then another one finds the source dead
    /// assert_eq!(b.epoch(), 1);
    /// let BreakerAdmit::Probe { epoch, probe_id } = b.acquire(30_000, &cfg, || "p".into()) else {
    ///     panic!("the cooldown is over: expected the probe");
    /// };
    /// assert!(b.record(30_500, &cfg, epoch, Some(&probe_id), BreakerVerdict::Success));
    /// // The slow call's late failure belongs to epoch 0: fenced off, the breaker stays closed.
    /// assert!(!b.record(31_000, &cfg, slow_call, None, BreakerVerdict::Failure));
    /// assert_eq!(b.state(), BreakerState::Closed);
    /// ```
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The open duration for `streak`: `cooldown × 2^(max(streak,1)−1)` capped at
    /// `max(max_cooldown, cooldown)`, in milliseconds.
    pub(crate) fn open_duration_ms(config: &BreakerConfig, streak: u32) -> u64 {
        let base = duration_ms(config.cooldown);
        let cap = duration_ms(config.max_cooldown).max(base);
        let exp = streak.max(1) - 1;
        let factor = if exp >= 63 { u64::MAX } else { 1u64 << exp };
        base.saturating_mul(factor).min(cap)
    }

    /// Lazy time-driven transition: OPEN past its deadline becomes HALF_OPEN with a free slot.
    fn refresh(&mut self, now_ms: u64) {
        if self.state == BreakerState::Open && now_ms >= self.open_until_ms {
            self.state = BreakerState::HalfOpen;
            self.probe = None;
        }
    }

    /// `(samples, failures)` of the current and the previous bucket.
    fn window(&self, now_ms: u64, config: &BreakerConfig) -> (u64, u64) {
        let cur = now_ms / duration_ms(config.bucket).max(1);
        self.buckets
            .iter()
            .filter(|b| b.index == cur || b.index.saturating_add(1) == cur)
            .fold((0, 0), |(s, f), b| {
                (
                    s + u64::from(b.successes) + u64::from(b.failures),
                    f + u64::from(b.failures),
                )
            })
    }

    fn add_sample(&mut self, now_ms: u64, config: &BreakerConfig, failed: bool) {
        let cur = now_ms / duration_ms(config.bucket).max(1);
        let slot = &mut self.buckets[(cur % 2) as usize];
        if slot.index != cur {
            *slot = Bucket {
                index: cur,
                successes: 0,
                failures: 0,
            };
        }
        if failed {
            slot.failures = slot.failures.saturating_add(1);
        } else {
            slot.successes = slot.successes.saturating_add(1);
        }
    }

    /// Enter OPEN: epoch+1, opens+1, counters and window cleared, probe dropped.
    fn open(&mut self, now_ms: u64, config: &BreakerConfig, grow_streak: bool) {
        if grow_streak {
            self.open_streak = self.open_streak.saturating_add(1);
        }
        self.state = BreakerState::Open;
        self.epoch += 1;
        self.opens += 1;
        self.open_until_ms =
            now_ms.saturating_add(Self::open_duration_ms(config, self.open_streak));
        self.probe = None;
        self.consecutive_failures = 0;
        self.buckets = [Bucket::default(); 2];
    }

    fn close(&mut self, now_ms: u64) {
        self.state = BreakerState::Closed;
        self.closed_since_ms = now_ms;
        self.probe = None;
        self.consecutive_failures = 0;
        self.buckets = [Bucket::default(); 2];
    }

    fn probe_held(&self, now_ms: u64) -> bool {
        self.state == BreakerState::HalfOpen
            && self.probe.as_ref().is_some_and(|p| now_ms < p.expires_ms)
    }

    /// May a request go now?
    ///
    /// CLOSED → `Pass { epoch }`. OPEN → `Refused { Open, remaining cooldown }`. HALF_OPEN with a
    /// free (absent or expired) slot → `Probe { epoch, new_probe_id() }` holding the slot until
    /// `now + probe_ttl`; otherwise `Refused { HalfOpen, 0 }`. `new_probe_id` runs only when a
    /// probe is granted, so the common path does not allocate.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown, 120 s probe lease
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg);
    /// let first = b.acquire(30_000, &cfg, || "probe-1".into());
    /// assert!(matches!(first, BreakerAdmit::Probe { epoch: 1, .. }));
    /// // The single probe slot is taken: others are refused with no wait hint.
    /// assert_eq!(
    ///     b.acquire(30_001, &cfg, || "probe-2".into()),
    ///     BreakerAdmit::Refused { state: BreakerState::HalfOpen, retry_after: Duration::ZERO }
    /// );
    /// // A probe lease that expires without a verdict frees the slot.
    /// let later = b.acquire(150_000, &cfg, || "probe-3".into());
    /// assert!(matches!(later, BreakerAdmit::Probe { .. }));
    /// ```
    pub fn acquire(
        &mut self,
        now_ms: u64,
        config: &BreakerConfig,
        new_probe_id: impl FnOnce() -> Arc<str>,
    ) -> BreakerAdmit {
        self.refresh(now_ms);
        match self.state {
            BreakerState::Closed => BreakerAdmit::Pass { epoch: self.epoch },
            BreakerState::Open => BreakerAdmit::Refused {
                state: BreakerState::Open,
                retry_after: Duration::from_millis(self.open_until_ms - now_ms),
            },
            BreakerState::HalfOpen => {
                if self.probe_held(now_ms) {
                    return BreakerAdmit::Refused {
                        state: BreakerState::HalfOpen,
                        retry_after: Duration::ZERO,
                    };
                }
                let id = new_probe_id();
                self.probe = Some(Probe {
                    id: id.clone(),
                    expires_ms: now_ms.saturating_add(duration_ms(config.probe_ttl)),
                });
                BreakerAdmit::Probe {
                    epoch: self.epoch,
                    probe_id: id,
                }
            }
        }
    }

    /// Apply a verdict admitted at `epoch`. Returns whether it was applied.
    ///
    /// Not applied: a different epoch (fencing), OPEN, or HALF_OPEN unless `probe_id` names the
    /// stored probe (an expired probe that nobody replaced still counts). CLOSED applies every
    /// verdict of the current epoch as a sample, whatever its `probe_id`.
    ///
    /// ```
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerAdmit, BreakerConfig, BreakerState, BreakerVerdict};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg);
    /// let BreakerAdmit::Probe { epoch, probe_id } = b.acquire(30_000, &cfg, || "p".into()) else {
    ///     panic!("the cooldown is over: expected the probe");
    /// };
    /// // In HALF_OPEN only the probe's own verdict counts.
    /// assert!(!b.record(30_100, &cfg, epoch, None, BreakerVerdict::Failure));
    /// assert!(b.record(30_200, &cfg, epoch, Some(&probe_id), BreakerVerdict::Failure));
    /// // The failed probe re-opened it: a new epoch and a longer streak.
    /// let s = b.snapshot(30_200);
    /// assert_eq!((s.state, s.epoch, s.open_streak), (BreakerState::Open, 2, 1));
    /// ```
    pub fn record(
        &mut self,
        now_ms: u64,
        config: &BreakerConfig,
        epoch: u64,
        probe_id: Option<&str>,
        verdict: BreakerVerdict,
    ) -> bool {
        self.refresh(now_ms);
        if epoch != self.epoch {
            return false;
        }
        match self.state {
            BreakerState::Open => false,
            BreakerState::HalfOpen => {
                let is_current = matches!(
                    (&self.probe, probe_id),
                    (Some(p), Some(id)) if &*p.id == id
                );
                if !is_current {
                    return false;
                }
                match verdict {
                    BreakerVerdict::Success => self.close(now_ms),
                    BreakerVerdict::Failure => self.open(now_ms, config, true),
                }
                true
            }
            BreakerState::Closed => {
                match verdict {
                    BreakerVerdict::Success => self.on_closed_success(now_ms, config),
                    BreakerVerdict::Failure => self.on_closed_failure(now_ms, config),
                }
                true
            }
        }
    }

    fn on_closed_success(&mut self, now_ms: u64, config: &BreakerConfig) {
        self.consecutive_failures = 0;
        self.add_sample(now_ms, config, false);
        if self.open_streak > 0 {
            let stable = Self::open_duration_ms(config, self.open_streak).saturating_mul(2);
            if now_ms >= self.closed_since_ms.saturating_add(stable) {
                self.open_streak = 0;
            }
        }
    }

    fn on_closed_failure(&mut self, now_ms: u64, config: &BreakerConfig) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.add_sample(now_ms, config, true);
        let (samples, failures) = self.window(now_ms, config);
        let enough = samples >= u64::from(config.min_calls);
        // Division (not multiplication) so 15/25 compares equal to a configured 0.6; Lua mirrors it.
        let rate_trips = enough && failures as f64 / samples as f64 >= config.fail_rate;
        if rate_trips {
            self.open(now_ms, config, true);
        } else if self.consecutive_failures >= config.effective_threshold().max(1) && !enough {
            // With enough samples the rate channel did not trip, i.e. the window is healthy:
            // that evidence suppresses the streak channel.
            self.open(now_ms, config, false);
        }
    }

    /// Open at once (source dead). From CLOSED or HALF_OPEN this is an opening (epoch+1, the
    /// probe is dropped, the streak does not grow). An already OPEN breaker is not re-opened: its
    /// deadline is extended to at least `now + open duration` and the epoch stays.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::BreakerConfig;
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg); // from CLOSED: an opening
    /// b.force_open(20_000, &cfg); // already OPEN: only the deadline moves, to 20 s + 30 s
    /// let s = b.snapshot(20_000);
    /// assert_eq!((s.epoch, s.opens, s.retry_after), (1, 1, Duration::from_secs(30)));
    /// ```
    pub fn force_open(&mut self, now_ms: u64, config: &BreakerConfig) {
        self.refresh(now_ms);
        if self.state == BreakerState::Open {
            let until = now_ms.saturating_add(Self::open_duration_ms(config, self.open_streak));
            self.open_until_ms = self.open_until_ms.max(until);
        } else {
            self.open(now_ms, config, false);
        }
    }

    /// Give the probe back without a verdict. Idempotent; an id that is not the stored probe
    /// changes nothing.
    ///
    /// ```
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerAdmit, BreakerConfig};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg);
    /// let BreakerAdmit::Probe { probe_id, .. } = b.acquire(30_000, &cfg, || "p1".into()) else {
    ///     panic!("the cooldown is over: expected the probe");
    /// };
    /// // The probe call was cancelled before reaching the upstream: give the slot back
    /// // (twice is fine).
    /// b.release_probe(&probe_id);
    /// b.release_probe(&probe_id);
    /// assert!(matches!(b.acquire(30_001, &cfg, || "p2".into()), BreakerAdmit::Probe { .. }));
    /// // A stale id does not free the slot "p2" now holds.
    /// b.release_probe("p1");
    /// assert!(matches!(b.acquire(30_002, &cfg, || "p3".into()), BreakerAdmit::Refused { .. }));
    /// ```
    pub fn release_probe(&mut self, probe_id: &str) {
        if self.probe.as_ref().is_some_and(|p| &*p.id == probe_id) {
            self.probe = None;
        }
    }

    /// Read-only view at `now_ms` (an OPEN breaker past its deadline shows HALF_OPEN).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::policy::breaker::BreakerMachine;
    /// use polygateway_actors::{BreakerConfig, BreakerState};
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// let mut b = BreakerMachine::new();
    /// b.force_open(0, &cfg);
    /// let s = b.snapshot(10_000);
    /// assert_eq!((s.state, s.retry_after), (BreakerState::Open, Duration::from_secs(20)));
    /// let s = b.snapshot(30_000);
    /// assert_eq!((s.state, s.probe_held), (BreakerState::HalfOpen, false));
    /// b.acquire(30_000, &cfg, || "p".into());
    /// assert!(b.snapshot(30_000).probe_held);
    /// ```
    pub fn snapshot(&self, now_ms: u64) -> BreakerSnapshot {
        let (state, retry_after, probe_held) = match self.state {
            BreakerState::Open if now_ms < self.open_until_ms => (
                BreakerState::Open,
                Duration::from_millis(self.open_until_ms - now_ms),
                false,
            ),
            BreakerState::Open => (BreakerState::HalfOpen, Duration::ZERO, false),
            s => (s, Duration::ZERO, self.probe_held(now_ms)),
        };
        BreakerSnapshot {
            state,
            epoch: self.epoch,
            retry_after,
            consecutive_failures: self.consecutive_failures,
            open_streak: self.open_streak,
            probe_held,
            opens: self.opens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            fail_threshold: 3,
            max_concurrency: 0,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(35),
            probe_ttl: Duration::from_secs(5),
            min_calls: 10,
            fail_rate: 0.6,
            bucket: Duration::from_secs(30),
        }
    }

    fn pid(s: &'static str) -> impl FnOnce() -> Arc<str> {
        move || Arc::from(s)
    }

    fn fail(b: &mut BreakerMachine, now: u64, c: &BreakerConfig) -> bool {
        let e = b.epoch();
        b.record(now, c, e, None, BreakerVerdict::Failure)
    }

    fn succeed(b: &mut BreakerMachine, now: u64, c: &BreakerConfig) -> bool {
        let e = b.epoch();
        b.record(now, c, e, None, BreakerVerdict::Success)
    }

    #[test]
    fn streak_channel_opens_at_effective_threshold() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        assert!(fail(&mut b, 0, &c));
        assert!(fail(&mut b, 1, &c));
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(fail(&mut b, 2, &c));
        assert_eq!(b.state(), BreakerState::Open);
        let s = b.snapshot(2);
        assert_eq!(s.epoch, 1);
        assert_eq!(s.opens, 1);
        assert_eq!(s.open_streak, 0, "streak channel does not grow the streak");
        assert_eq!(s.retry_after, Duration::from_secs(10));
    }

    #[test]
    fn success_resets_consecutive_failures() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        for i in 0..10 {
            fail(&mut b, i * 3, &c);
            fail(&mut b, i * 3 + 1, &c);
            succeed(&mut b, i * 3 + 2, &c);
        }
        // The same pattern with a window too small to judge (min_calls 1000) never opens: each
        // success breaks the streak.
        let c2 = BreakerConfig {
            min_calls: 1000,
            ..cfg()
        };
        let mut b2 = BreakerMachine::new();
        for i in 0..10 {
            fail(&mut b2, i * 3, &c2);
            fail(&mut b2, i * 3 + 1, &c2);
            succeed(&mut b2, i * 3 + 2, &c2);
        }
        assert_eq!(b2.state(), BreakerState::Closed);
        assert_eq!(b2.snapshot(40).consecutive_failures, 0);
        assert_eq!(
            b.state(),
            BreakerState::Open,
            "rate channel trips on the same pattern"
        );
    }

    #[test]
    fn effective_threshold_uses_source_concurrency() {
        let c = BreakerConfig {
            max_concurrency: 4,
            min_calls: 1000,
            ..cfg()
        };
        assert_eq!(c.effective_threshold(), 8);
        let mut b = BreakerMachine::new();
        for i in 0..7 {
            fail(&mut b, i, &c);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        fail(&mut b, 7, &c);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn healthy_window_suppresses_streak_channel() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        for i in 0..10 {
            succeed(&mut b, i, &c);
        }
        // 3..14 consecutive failures: rate f/(10+f) < 0.6 while f < 15.
        for f in 1..15u64 {
            fail(&mut b, 10 + f, &c);
            assert_eq!(
                b.state(),
                BreakerState::Closed,
                "suppressed at {f} failures"
            );
        }
        fail(&mut b, 30, &c);
        assert_eq!(b.state(), BreakerState::Open, "rate 15/25 = 0.6 trips");
        assert_eq!(
            b.snapshot(30).open_streak,
            1,
            "rate channel grows the streak"
        );
    }

    #[test]
    fn rate_channel_opens_without_a_streak() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        // F F S F F S F F S F: never 3 in a row; 7/10 at the 10th sample.
        let pattern = [1, 1, 0, 1, 1, 0, 1, 1, 0, 1];
        for (i, &p) in pattern.iter().enumerate() {
            assert_eq!(b.state(), BreakerState::Closed);
            if p == 1 {
                fail(&mut b, i as u64, &c);
            } else {
                succeed(&mut b, i as u64, &c);
            }
        }
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.snapshot(9).open_streak, 1);
    }

    #[test]
    fn window_forgets_buckets_older_than_the_previous_one() {
        let c = BreakerConfig {
            fail_threshold: 1000,
            ..cfg()
        };
        let mut b = BreakerMachine::new();
        // 9 failures in bucket 0 (0..30 s); bucket 1 still sees them, bucket 2 does not.
        for i in 0..9 {
            fail(&mut b, i, &c);
        }
        assert_eq!(b.window(31_000, &c), (9, 9));
        assert_eq!(b.window(60_000, &c), (0, 0));
        fail(&mut b, 60_000, &c);
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "only 1 sample in the window"
        );
        let mut b2 = BreakerMachine::new();
        for i in 0..9 {
            fail(&mut b2, i, &c);
        }
        fail(&mut b2, 45_000, &c);
        assert_eq!(
            b2.state(),
            BreakerState::Open,
            "previous bucket still counts"
        );
    }

    #[test]
    fn half_open_grants_exactly_one_probe() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        assert_eq!(
            b.acquire(9_999, &c, pid("x")),
            BreakerAdmit::Refused {
                state: BreakerState::Open,
                retry_after: Duration::from_millis(1)
            }
        );
        assert_eq!(b.snapshot(10_000).state, BreakerState::HalfOpen);
        assert_eq!(
            b.acquire(10_000, &c, pid("p1")),
            BreakerAdmit::Probe {
                epoch: 1,
                probe_id: "p1".into()
            }
        );
        for t in [10_000, 12_000, 14_999] {
            assert_eq!(
                b.acquire(t, &c, pid("no")),
                BreakerAdmit::Refused {
                    state: BreakerState::HalfOpen,
                    retry_after: Duration::ZERO
                }
            );
        }
        assert!(b.snapshot(14_999).probe_held);
        assert!(!b.snapshot(15_000).probe_held, "lease expired");
        assert_eq!(
            b.acquire(15_000, &c, pid("p2")),
            BreakerAdmit::Probe {
                epoch: 1,
                probe_id: "p2".into()
            }
        );
        // The expired probe's late verdict is not applied: the slot belongs to p2.
        assert!(!b.record(15_001, &c, 1, Some("p1"), BreakerVerdict::Success));
        assert!(b.record(15_002, &c, 1, Some("p2"), BreakerVerdict::Success));
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(
            b.acquire(15_003, &c, pid("no")),
            BreakerAdmit::Pass { epoch: 1 }
        );
    }

    #[test]
    fn expired_probe_not_replaced_still_decides() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        assert!(matches!(
            b.acquire(10_000, &c, pid("p1")),
            BreakerAdmit::Probe { .. }
        ));
        assert!(b.record(20_000, &c, 1, Some("p1"), BreakerVerdict::Success));
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn release_probe_is_idempotent_and_frees_the_slot() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        assert!(matches!(
            b.acquire(10_000, &c, pid("p1")),
            BreakerAdmit::Probe { .. }
        ));
        b.release_probe("p1");
        b.release_probe("p1");
        assert!(matches!(
            b.acquire(10_001, &c, pid("p2")),
            BreakerAdmit::Probe { .. }
        ));
        b.release_probe("p1");
        assert!(
            b.snapshot(10_002).probe_held,
            "a stale id does not free p2's slot"
        );
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.epoch(), 1, "release gives no verdict");
    }

    #[test]
    fn failed_probes_grow_the_open_duration_up_to_the_cap() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        let mut now = 0;
        let mut seen = Vec::new();
        for n in 0..4 {
            now += duration_ms(b.snapshot(now).retry_after);
            let id: Arc<str> = format!("p{n}").into();
            let epoch = b.epoch();
            assert!(matches!(
                b.acquire(now, &c, || id.clone()),
                BreakerAdmit::Probe { .. }
            ));
            assert!(b.record(now, &c, epoch, Some(&id), BreakerVerdict::Failure));
            assert_eq!(b.epoch(), epoch + 1);
            seen.push(b.snapshot(now).retry_after.as_secs());
        }
        assert_eq!(seen, vec![10, 20, 35, 35]);
        assert_eq!(b.snapshot(now).open_streak, 4);
        assert_eq!(b.snapshot(now).opens, 5);
    }

    #[test]
    fn streak_resets_after_stable_closed_period() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        // Two failed probes: streak 2 → open 20 s.
        let mut now = 10_000;
        for n in 0..2 {
            let id: Arc<str> = format!("f{n}").into();
            let e = b.epoch();
            b.acquire(now, &c, || id.clone());
            b.record(now, &c, e, Some(&id), BreakerVerdict::Failure);
            now += duration_ms(b.snapshot(now).retry_after);
        }
        let e = b.epoch();
        b.acquire(now, &c, pid("ok"));
        assert!(b.record(now, &c, e, Some("ok"), BreakerVerdict::Success));
        assert_eq!(b.snapshot(now).open_streak, 2);
        let closed_at = now;
        // Effective cooldown at streak 2 is 20 s → stable after 40 s.
        succeed(&mut b, closed_at + 39_999, &c);
        assert_eq!(b.snapshot(closed_at + 39_999).open_streak, 2);
        succeed(&mut b, closed_at + 40_000, &c);
        assert_eq!(b.snapshot(closed_at + 40_000).open_streak, 0);
    }

    #[test]
    fn epoch_fencing_refuses_stale_verdicts() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        let BreakerAdmit::Pass { epoch } = b.acquire(0, &c, pid("x")) else {
            panic!()
        };
        assert_eq!(epoch, 0);
        b.force_open(1, &c);
        assert_eq!(b.epoch(), 1);
        assert!(!b.record(2, &c, 0, None, BreakerVerdict::Failure));
        assert!(!b.record(2, &c, 0, None, BreakerVerdict::Success));
        assert!(
            !b.record(2, &c, 1, None, BreakerVerdict::Success),
            "OPEN applies nothing"
        );
        assert!(
            !b.record(2, &c, 7, None, BreakerVerdict::Success),
            "future epochs too"
        );
        assert_eq!(b.snapshot(2).consecutive_failures, 0);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn half_open_ignores_non_probe_verdicts() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        b.acquire(10_000, &c, pid("p"));
        assert!(!b.record(10_001, &c, 1, None, BreakerVerdict::Failure));
        assert!(!b.record(10_001, &c, 1, Some("other"), BreakerVerdict::Failure));
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn force_open_from_each_state() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        b.force_open(0, &c);
        assert_eq!((b.state(), b.epoch()), (BreakerState::Open, 1));
        // Already open: extended, no new epoch.
        b.force_open(5_000, &c);
        assert_eq!(b.epoch(), 1);
        assert_eq!(b.snapshot(5_000).retry_after, Duration::from_secs(10));
        assert_eq!(b.snapshot(5_000).opens, 1);
        // Half-open with a probe: opens again, probe dropped.
        b.acquire(15_000, &c, pid("p"));
        b.force_open(15_001, &c);
        assert_eq!((b.state(), b.epoch()), (BreakerState::Open, 2));
        assert!(!b.record(15_002, &c, 1, Some("p"), BreakerVerdict::Success));
        assert_eq!(b.snapshot(15_001).open_streak, 0);
    }

    #[test]
    fn retry_after_contract() {
        let c = cfg();
        let mut b = BreakerMachine::new();
        assert_eq!(b.snapshot(0).retry_after, Duration::ZERO);
        b.force_open(1_000, &c);
        assert_eq!(b.snapshot(4_000).retry_after, Duration::from_secs(7));
        assert_eq!(b.snapshot(11_000).retry_after, Duration::ZERO);
        assert_eq!(b.snapshot(11_000).state, BreakerState::HalfOpen);
        b.acquire(11_000, &c, pid("p"));
        assert_eq!(
            b.acquire(11_001, &c, pid("q")),
            BreakerAdmit::Refused {
                state: BreakerState::HalfOpen,
                retry_after: Duration::ZERO
            }
        );
    }

    #[test]
    fn open_duration_formula() {
        let c = cfg();
        let d = |s| BreakerMachine::open_duration_ms(&c, s);
        assert_eq!(
            [d(0), d(1), d(2), d(3), d(200)],
            [10_000, 10_000, 20_000, 35_000, 35_000]
        );
        let low_cap = BreakerConfig {
            max_cooldown: Duration::from_secs(1),
            ..cfg()
        };
        assert_eq!(
            BreakerMachine::open_duration_ms(&low_cap, 3),
            10_000,
            "cap ≥ cooldown"
        );
    }

    #[test]
    fn zero_threshold_opens_on_first_failure() {
        let c = BreakerConfig {
            fail_threshold: 0,
            ..cfg()
        };
        let mut b = BreakerMachine::new();
        fail(&mut b, 0, &c);
        assert_eq!(b.state(), BreakerState::Open);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn breaker_machine_open_duration_ms_example() {
        use crate::policy::breaker::BreakerMachine;
        use crate::BreakerConfig;
        use std::time::Duration;
        let cfg = BreakerConfig {
            cooldown: Duration::from_secs(30),
            max_cooldown: Duration::from_secs(300),
            ..BreakerConfig::default()
        };
        let by_streak: Vec<u64> = (0..=5)
            .map(|streak| BreakerMachine::open_duration_ms(&cfg, streak))
            .collect();
        assert_eq!(
            by_streak,
            [30_000, 30_000, 60_000, 120_000, 240_000, 300_000]
        );
    }
}
